//! Which addresses webhooks may go to (SSRF protection).
//!
//! A webhook URL is resolved when it is subscribed and again at every delivery: the check before
//! sending gives a clear error, and the HTTP client resolves names only through
//! [`PolicyResolver`], which drops refused addresses, so a name that changes its answer between
//! the check and the connection (DNS rebinding) still cannot reach an internal address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::Url;

/// Refuses non-public addresses unless the operator allowed their network.
#[derive(Debug, Clone, Default)]
pub struct NetworkPolicy {
    allow: Arc<Vec<IpNet>>,
}

/// Why a URL may not receive webhooks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The URL has no host.
    #[error("the URL has no host")]
    NoHost,
    /// The name does not resolve.
    #[error("`{host}` does not resolve: {reason}")]
    Unresolvable {
        /// The host name.
        host: String,
        /// The resolver's answer.
        reason: String,
    },
    /// An address of the host is not a public one.
    #[error(
        "`{host}` resolves to {ip}, a {kind} address, which this host does not deliver to \
         (the operator can allow its network with COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS)"
    )]
    NotPublic {
        /// The host.
        host: String,
        /// The refused address.
        ip: IpAddr,
        /// What kind of address it is.
        kind: &'static str,
    },
}

impl NetworkPolicy {
    /// A policy that also allows `networks`.
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self {
            allow: Arc::new(networks),
        }
    }

    /// `None` when `ip` may receive webhooks, else the kind of address that it is.
    pub fn refuses(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = canonical(ip);
        let kind = non_public_kind(ip)?;
        if self.allow.iter().any(|net| net.contains(&ip)) {
            None
        } else {
            Some(kind)
        }
    }

    /// Resolves the URL's host and checks every address it resolves to; all must be allowed
    /// (a name with one internal address among public ones is refused).
    pub async fn check(&self, url: &Url) -> Result<Vec<SocketAddr>, Refusal> {
        let host = url.host_str().ok_or(Refusal::NoHost)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = url.port_or_known_default().unwrap_or(443);
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| Refusal::Unresolvable {
                    host: host.to_owned(),
                    reason: e.to_string(),
                })?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(Refusal::Unresolvable {
                host: host.to_owned(),
                reason: "no addresses".to_owned(),
            });
        }
        for addr in &addrs {
            if let Some(kind) = self.refuses(addr.ip()) {
                return Err(Refusal::NotPublic {
                    host: host.to_owned(),
                    ip: addr.ip(),
                    kind,
                });
            }
        }
        Ok(addrs)
    }
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is judged as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(if ip.is_loopback() {
        "loopback"
    } else if ip.is_private() {
        "private"
    } else if ip.is_link_local() {
        "link-local"
    } else if ip.is_unspecified() || a == 0 {
        "unspecified"
    } else if ip.is_multicast() {
        "multicast"
    } else if ip.is_broadcast() || a >= 240 {
        "reserved"
    } else if ip.is_documentation() {
        "documentation"
    } else if a == 100 && (64..128).contains(&b) {
        "shared (carrier-grade NAT)"
    } else if a == 192 && b == 0 && c == 0 {
        "IETF protocol assignment"
    } else if a == 198 && (18..20).contains(&b) {
        "benchmarking"
    } else {
        return None;
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(if ip.is_loopback() {
        "loopback"
    } else if ip.is_unspecified() {
        "unspecified"
    } else if ip.is_multicast() {
        "multicast"
    } else if first & 0xfe00 == 0xfc00 {
        "private (unique local)"
    } else if first & 0xffc0 == 0xfe80 {
        "link-local"
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 {
        "documentation"
    } else if ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || ip.to_ipv4().is_some() {
        // NAT64 and IPv4-compatible addresses can smuggle an internal IPv4 address.
        "translated IPv4"
    } else {
        return None;
    })
}

/// The HTTP client's resolver: names resolve only to allowed addresses.
#[derive(Debug, Clone)]
pub struct PolicyResolver {
    /// The policy applied to every answer.
    pub policy: NetworkPolicy,
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| policy.refuses(a.ip()).is_none())
                .collect();
            if addrs.is_empty() {
                let refusal = Refusal::Unresolvable {
                    host,
                    reason: "no allowed address".to_owned(),
                };
                return Err(Box::new(refusal) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_unless_allowed() {
        let policy = NetworkPolicy::default();
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "100.64.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a00:1",
        ] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert!(policy.refuses(ip).is_some(), "{ip} should be refused");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(policy.refuses(ip), None, "{ip} should be allowed");
        }
        let allowed = NetworkPolicy::new(vec!["127.0.0.0/8".parse().expect("net")]);
        assert_eq!(allowed.refuses("127.0.0.1".parse().expect("ip")), None);
        assert!(allowed.refuses("10.0.0.1".parse().expect("ip")).is_some());
    }
}
