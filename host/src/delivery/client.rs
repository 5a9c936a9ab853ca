//! The one outbound HTTP client, and the timeouts of everything the engine sends.
//!
//! Every request the host makes goes through [`HttpClient`]: webhook attempts and the merchant's
//! SMS, WhatsApp and push providers alike. It is built here, once, with the same settings for
//! all: never through a proxy (an `HTTP(S)_PROXY` or `ALL_PROXY` in the environment would resolve
//! names itself, past the network policy), redirects never followed (a receiver or provider
//! cannot bounce the request elsewhere), and the timeouts of [`Timeouts`].
//!
//! Webhook URLs are chosen by plugins, so their names resolve only through [`PolicyResolver`]:
//! only to addresses the network policy allows, so a name that changes its answer between the
//! check and the connection (DNS rebinding) still cannot reach an internal address. Provider URLs
//! are set by the operator (`PUT /admin/v1/stores/{id}/senders/{channel}`), a trusted party whose
//! providers often live on a private network; they are not held to the policy, which exists to
//! keep plugins away from internal addresses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::{RequestBuilder, Url};

use crate::model::error::{Error, Result};
use crate::service::network::{NetworkPolicy, Refusal};

/// The time an SMS, WhatsApp or push provider has to answer.
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// The time an SMTP server (the merchant's, or the host's own) has for each step of a send.
pub const SMTP_TIMEOUT: Duration = Duration::from_secs(10);

/// How long anything the engine sends may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A webhook receiver's answer (the spec's 10 s by default; the operator may change it).
    pub webhook: Duration,
    /// A provider's answer.
    pub provider: Duration,
    /// An SMTP server's steps.
    pub smtp: Duration,
}

impl Timeouts {
    /// Webhook receivers get `webhook`; providers and SMTP servers the fixed defaults.
    pub fn new(webhook: Duration) -> Self {
        Self {
            webhook,
            provider: PROVIDER_TIMEOUT,
            smtp: SMTP_TIMEOUT,
        }
    }
}

/// The HTTP client every outgoing request uses. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpClient {
    /// Resolves through the network policy.
    webhooks: reqwest::Client,
    /// Resolves as the system does (operator-set URLs).
    providers: reqwest::Client,
    policy: NetworkPolicy,
    timeouts: Timeouts,
}

impl HttpClient {
    /// The client, with webhook names resolved through `policy`.
    pub fn new(policy: NetworkPolicy, timeouts: Timeouts) -> Result<Self> {
        let webhooks = settings(timeouts.webhook)
            .dns_resolver(Arc::new(PolicyResolver {
                policy: policy.clone(),
            }))
            .user_agent(concat!(
                "commerce-host-webhooks/",
                env!("CARGO_PKG_VERSION")
            ))
            .build();
        let providers = settings(timeouts.provider).build();
        let built = |client: reqwest::Result<reqwest::Client>| {
            client.map_err(|e| {
                Error::Internal(anyhow::Error::new(e).context("building the outbound HTTP client"))
            })
        };
        Ok(Self {
            webhooks: built(webhooks)?,
            providers: built(providers)?,
            policy,
            timeouts,
        })
    }

    /// The network policy webhook URLs are held to.
    pub fn policy(&self) -> &NetworkPolicy {
        &self.policy
    }

    /// The timeouts of everything the engine sends.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// A POST to a webhook receiver: names resolve only to addresses the policy allows.
    pub fn post_webhook(&self, url: Url) -> RequestBuilder {
        self.webhooks.post(url)
    }

    /// A POST to one of the merchant's providers.
    pub fn post_provider(&self, url: &str) -> RequestBuilder {
        self.providers.post(url)
    }
}

/// What every outbound request shares: no proxy, no redirects, a timeout.
fn settings(timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
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
