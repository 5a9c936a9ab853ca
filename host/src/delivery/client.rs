//! The outbound HTTP client's name resolution: names resolve only to addresses the network
//! policy allows, so a name that changes its answer between the check and the connection (DNS
//! rebinding) still cannot reach an internal address.

use std::net::SocketAddr;

use crate::service::network::{NetworkPolicy, Refusal};

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
