//! Which addresses webhooks may go to (SSRF protection).
//!
//! A webhook URL is resolved when it is subscribed and again before its deliveries (at most every
//! 10 s while it stays allowed: `delivery::client::URL_CHECK_TTL`): the check before sending
//! gives a clear error, and the HTTP client resolves names only through the delivery engine's
//! resolver, which drops refused addresses, at every connection, so a name that changes its
//! answer between the check and the connection (DNS rebinding) still cannot reach an internal
//! address.

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
        "`{host}` resolves to {ip}, {kind}, which this host does not deliver to \
         (the operator can allow its network with COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS)"
    )]
    NotPublic {
        /// The host.
        host: String,
        /// The refused address.
        ip: IpAddr,
        /// What kind of address it is (`a loopback address`).
        kind: String,
    },
}

impl NetworkPolicy {
    /// A policy that also allows `networks`.
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self {
            allow: Arc::new(networks),
        }
    }

    /// Whether the operator allowed `ip` (an IPv4-mapped address also by its IPv4 network).
    fn allowed(&self, ip: IpAddr) -> bool {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.allow
            .iter()
            .any(|net| net.contains(&ip) || mapped.is_some_and(|v4| net.contains(&v4)))
    }

    /// `None` when `ip` may receive webhooks, else what kind of address it is.
    ///
    /// Only globally routable unicast addresses are allowed (besides the operator's networks):
    /// IPv4 outside every special-purpose block, IPv6 inside `2000::/3` outside its
    /// special-purpose blocks. An IPv6 address that carries an IPv4 address (IPv4-mapped,
    /// IPv4-compatible, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`, Teredo
    /// `2001::/32`) is judged by the IPv4 addresses it carries, with the same rules.
    pub fn refuses(&self, ip: IpAddr) -> Option<String> {
        if self.allowed(ip) {
            return None;
        }
        let v6 = match ip {
            IpAddr::V4(v4) => return non_global_v4(v4).map(str::to_owned),
            IpAddr::V6(v6) => v6,
        };
        match classify_v6(v6) {
            V6Class::Global => None,
            V6Class::NotGlobal(kind) => Some(kind.to_owned()),
            V6Class::Carries { form, ipv4 } => ipv4.into_iter().find_map(|v4| {
                if self.allowed(IpAddr::V4(v4)) {
                    return None;
                }
                non_global_v4(v4).map(|kind| format!("{form} carrying {v4}, {kind}"))
            }),
        }
    }

    /// Resolves the URL's host and checks every address it resolves to; all must be allowed
    /// (a name with one internal address among public ones is refused).
    pub async fn check(&self, url: &Url) -> Result<Vec<SocketAddr>, Refusal> {
        let (host, port) = host_and_port(url)?;
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| unresolvable(host, &e))?
                .collect(),
        };
        self.judge(host, addrs)
    }

    /// [`NetworkPolicy::check`] for a caller on a blocking thread: the same checks, with the
    /// system resolver called in place.
    pub fn check_blocking(&self, url: &Url) -> Result<Vec<SocketAddr>, Refusal> {
        use std::net::ToSocketAddrs as _;
        let (host, port) = host_and_port(url)?;
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => (host, port)
                .to_socket_addrs()
                .map_err(|e| unresolvable(host, &e))?
                .collect(),
        };
        self.judge(host, addrs)
    }

    /// Every address `host` resolved to must be allowed.
    fn judge(&self, host: &str, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refusal> {
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

/// The host of a URL (an IPv6 literal without its brackets) and its port.
fn host_and_port(url: &Url) -> Result<(&str, u16), Refusal> {
    let host = url.host_str().ok_or(Refusal::NoHost)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host, url.port_or_known_default().unwrap_or(443)))
}

fn unresolvable(host: &str, e: &std::io::Error) -> Refusal {
    Refusal::Unresolvable {
        host: host.to_owned(),
        reason: e.to_string(),
    }
}

/// IPv4 blocks that are not globally routable unicast (the IANA special-purpose registry).
const V4_SPECIAL: &[([u8; 4], u32, &str)] = &[
    ([0, 0, 0, 0], 8, "an unspecified (\"this network\") address"),
    ([10, 0, 0, 0], 8, "a private address"),
    ([100, 64, 0, 0], 10, "a shared (carrier-grade NAT) address"),
    ([127, 0, 0, 0], 8, "a loopback address"),
    ([169, 254, 0, 0], 16, "a link-local address"),
    ([172, 16, 0, 0], 12, "a private address"),
    ([192, 0, 0, 0], 24, "an IETF protocol assignment"),
    ([192, 0, 2, 0], 24, "a documentation address"),
    ([192, 88, 99, 0], 24, "a 6to4 relay anycast address"),
    ([192, 168, 0, 0], 16, "a private address"),
    ([198, 18, 0, 0], 15, "a benchmarking address"),
    ([198, 51, 100, 0], 24, "a documentation address"),
    ([203, 0, 113, 0], 24, "a documentation address"),
    ([224, 0, 0, 0], 4, "a multicast address"),
    ([240, 0, 0, 0], 4, "a reserved or broadcast address"),
];

/// IPv6 blocks outside `2000::/3` that have a name (everything there is refused), and the
/// special-purpose blocks inside it.
const V6_SPECIAL: &[(u128, u32, &str)] = &[
    (0, 128, "the unspecified address"),
    (1, 128, "a loopback address"),
    (0xffff << 48, 96, "an IPv4-translated address"),
    (0x0100 << 112, 64, "a discard-only address"),
    (0x5f00 << 112, 16, "a segment-routing (SRv6) address"),
    (0xfc00 << 112, 7, "a private (unique local) address"),
    (0xfe80 << 112, 10, "a link-local address"),
    (0xfec0 << 112, 10, "a site-local address"),
    (0xff00 << 112, 8, "a multicast address"),
    (0x2001_0db8 << 96, 32, "a documentation address"),
    (0x3fff << 112, 20, "a documentation address"),
    (0x2001 << 112, 23, "an IETF protocol assignment"),
];

fn in_block(ip: u128, net: u128, len: u32) -> bool {
    len == 0 || (ip ^ net) >> (128 - len) == 0
}

fn non_global_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let ip = u32::from(ip);
    V4_SPECIAL.iter().find_map(|&(net, len, kind)| {
        let net = u32::from_be_bytes(net);
        (len == 0 || (ip ^ net) >> (32 - len) == 0).then_some(kind)
    })
}

/// What an IPv6 address is, for webhooks.
#[derive(Debug, PartialEq, Eq)]
enum V6Class {
    /// Globally routable unicast.
    Global,
    /// Not globally routable.
    NotGlobal(&'static str),
    /// It carries IPv4 addresses, which decide.
    Carries {
        form: &'static str,
        ipv4: Vec<Ipv4Addr>,
    },
}

fn v4_at(bytes: &[u8; 16], at: [usize; 4]) -> Ipv4Addr {
    Ipv4Addr::new(bytes[at[0]], bytes[at[1]], bytes[at[2]], bytes[at[3]])
}

fn classify_v6(ip: Ipv6Addr) -> V6Class {
    let bits = u128::from(ip);
    let b = ip.octets();
    let last32 = v4_at(&b, [12, 13, 14, 15]);
    let carries = |form, ipv4| V6Class::Carries { form, ipv4 };
    // Named blocks first (`::`, `::1` are not IPv4-compatible addresses).
    if let Some(&(_, _, kind)) = V6_SPECIAL[..2]
        .iter()
        .find(|&&(net, len, _)| in_block(bits, net, len))
    {
        return V6Class::NotGlobal(kind);
    }
    if in_block(bits, 0xffff << 32, 96) {
        return carries("an IPv4-mapped address", vec![last32]);
    }
    if in_block(bits, 0, 96) {
        return carries("an IPv4-compatible address", vec![last32]);
    }
    if in_block(bits, 0x0064_ff9b << 96, 96) {
        return carries("a NAT64 address", vec![last32]);
    }
    if in_block(bits, 0x0064_ff9b_0001 << 80, 48) {
        // Local-use NAT64: the IPv4 address sits where the prefix length puts it (RFC 6052);
        // every layout that fits under the /48 must carry an allowed address.
        return carries(
            "a local-use NAT64 address",
            vec![
                v4_at(&b, [6, 7, 9, 10]),
                v4_at(&b, [7, 9, 10, 11]),
                v4_at(&b, [9, 10, 11, 12]),
                last32,
            ],
        );
    }
    if in_block(bits, 0x2002 << 112, 16) {
        return carries("a 6to4 address", vec![v4_at(&b, [2, 3, 4, 5])]);
    }
    if in_block(bits, 0x2001_0000 << 96, 32) {
        // Teredo: the server's address, and the client's (bit-inverted) in the last 32 bits.
        let client = Ipv4Addr::from(!u32::from(last32));
        return carries("a Teredo address", vec![v4_at(&b, [4, 5, 6, 7]), client]);
    }
    if let Some(&(_, _, kind)) = V6_SPECIAL
        .iter()
        .find(|&&(net, len, _)| in_block(bits, net, len))
    {
        return V6Class::NotGlobal(kind);
    }
    if in_block(bits, 0x2000 << 112, 3) {
        V6Class::Global
    } else {
        V6Class::NotGlobal("not a global unicast address (outside 2000::/3)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses no webhook may reach, with a word of the reason given.
    const REFUSED: &[(&str, &str)] = &[
        // IPv4 special-purpose blocks.
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("10.1.2.3", "private"),
        ("100.64.0.1", "carrier-grade"),
        ("100.127.255.254", "carrier-grade"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("169.254.169.254", "link-local"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.0.0.8", "IETF"),
        ("192.0.2.1", "documentation"),
        ("192.88.99.1", "6to4 relay"),
        ("192.168.1.1", "private"),
        ("198.18.0.1", "benchmarking"),
        ("198.19.255.255", "benchmarking"),
        ("198.51.100.7", "documentation"),
        ("203.0.113.9", "documentation"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        // IPv6 outside 2000::/3.
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("febf::1", "link-local"),
        ("fec0::1", "site-local"),
        ("fc00::1", "unique local"),
        ("fd12:3456::1", "unique local"),
        ("ff02::1", "multicast"),
        ("100::1", "discard-only"),
        ("5f00::1", "segment-routing"),
        ("::ffff:0:7f00:1", "IPv4-translated"),
        ("4000::1", "outside 2000::/3"),
        ("e000::1", "outside 2000::/3"),
        // IPv6 special-purpose blocks inside 2000::/3.
        ("2001:db8::1", "documentation"),
        ("3fff::1", "documentation"),
        ("2001:2::1", "IETF"),
        ("2001:10::1", "IETF"),
        // IPv6 that carries an internal IPv4 address.
        (
            "::ffff:127.0.0.1",
            "IPv4-mapped address carrying 127.0.0.1, a loopback",
        ),
        ("::ffff:a9fe:a9fe", "carrying 169.254.169.254, a link-local"),
        ("::127.0.0.1", "IPv4-compatible address carrying 127.0.0.1"),
        ("::10.0.0.1", "IPv4-compatible address carrying 10.0.0.1"),
        ("64:ff9b::a00:1", "NAT64 address carrying 10.0.0.1"),
        ("64:ff9b::7f00:1", "NAT64 address carrying 127.0.0.1"),
        ("64:ff9b:1::7f00:1", "local-use NAT64 address carrying"),
        // RFC 6052 /48 layout: 127.0.0.1 in bits 48-63 and 72-87.
        ("64:ff9b:1:7f00:0:100::", "local-use NAT64 address carrying"),
        ("2002:7f00:1::", "6to4 address carrying 127.0.0.1"),
        ("2002:c0a8:101::1", "6to4 address carrying 192.168.1.1"),
        ("2002:a9fe:a9fe::", "6to4 address carrying 169.254.169.254"),
        // Teredo: the server, or the client (bit-inverted in the last 32 bits).
        ("2001:0:7f00:1::", "Teredo address carrying 127.0.0.1"),
        (
            "2001:0:808:808::80ff:fffe",
            "Teredo address carrying 127.0.0.1",
        ),
        (
            "2001:0:808:808::f5ff:fefe",
            "Teredo address carrying 10.0.1.1",
        ),
    ];

    /// Addresses a webhook may reach.
    const ALLOWED: &[&str] = &[
        "93.184.216.34",
        "8.8.8.8",
        "1.1.1.1",
        "100.63.255.255",
        "100.128.0.1",
        "172.32.0.1",
        "192.0.3.1",
        "198.20.0.1",
        "223.255.255.254",
        "2606:4700::1111",
        "2a00:1450:4001:81b::200e",
        "2001:4860:4860::8888",
        "2001:200::1",
        "::ffff:8.8.8.8",
        "::8.8.8.8",
        "64:ff9b::808:808",
        "64:ff9b:1:808:8:808:808:808",
        "2002:808:808::1",
        "2001:0:808:808::f7f7:f7f7",
    ];

    #[test]
    fn only_global_unicast_addresses_receive_webhooks() {
        let policy = NetworkPolicy::default();
        for &(ip, reason) in REFUSED {
            let addr: IpAddr = ip.parse().expect("ip");
            let kind = policy
                .refuses(addr)
                .unwrap_or_else(|| panic!("{ip} should be refused"));
            assert!(
                kind.contains(reason),
                "{ip}: `{kind}` should say `{reason}`"
            );
        }
        for &ip in ALLOWED {
            let addr: IpAddr = ip.parse().expect("ip");
            assert_eq!(policy.refuses(addr), None, "{ip} should be allowed");
        }
    }

    #[test]
    fn the_operator_can_allow_networks_also_when_carried_in_ipv6() {
        let allowed = NetworkPolicy::new(vec![
            "127.0.0.0/8".parse().expect("net"),
            "fd00::/8".parse().expect("net"),
        ]);
        for ip in ["127.0.0.1", "::ffff:127.0.0.1", "2002:7f00:1::", "fd00::1"] {
            assert_eq!(allowed.refuses(ip.parse().expect("ip")), None, "{ip}");
        }
        for ip in ["10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "2002:a00:1::"] {
            assert!(allowed.refuses(ip.parse().expect("ip")).is_some(), "{ip}");
        }
    }

    #[tokio::test]
    async fn a_refusal_names_the_host_the_address_and_why() {
        let url = Url::parse("http://[2002:7f00:1::]:8080/hook").expect("url");
        let refusal = NetworkPolicy::default()
            .check(&url)
            .await
            .expect_err("refused");
        let text = refusal.to_string();
        assert!(
            text.contains("2002:7f00:1::") && text.contains("carrying 127.0.0.1, a loopback"),
            "{text}"
        );
    }
}
