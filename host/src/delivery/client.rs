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

use std::collections::HashMap;
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
    /// Webhook URLs checked lately (see [`HttpClient::webhook_url`]).
    checked: Arc<std::sync::Mutex<HashMap<String, Checked>>>,
    /// How many checks [`HttpClient::webhook_url`] made (not answered from `checked`).
    #[cfg(test)]
    checks: Arc<std::sync::atomic::AtomicUsize>,
}

/// How long a webhook URL found allowed is taken as allowed by the attempts to it, before it is
/// parsed and its host resolved and judged again: the check is for a clear error before sending
/// (the connection is held to the policy anyway, by [`PolicyResolver`]), and a name a
/// receiver's DNS moves meanwhile to a refused address fails at its next connection instead,
/// with the resolver's error. A refused or unparsable URL is never kept: each attempt checks it.
pub const URL_CHECK_TTL: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// Most webhook URLs whose checks are kept (past it, the stale are dropped, and then all).
pub const URL_CHECKS_KEPT: usize = 4096;

/// A webhook URL found allowed, and when.
#[derive(Debug)]
struct Checked {
    url: Url,
    at: jiff::Timestamp,
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
            checked: Arc::default(),
            #[cfg(test)]
            checks: Arc::default(),
        })
    }

    /// The timeouts of everything the engine sends.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// `url` parsed and held to the network policy (its host resolved, every address allowed),
    /// as a webhook attempt at `now` sends to it; or the error the attempt records (`bad URL:
    /// …`, `address not allowed: …`). A URL found allowed is not checked again for
    /// [`URL_CHECK_TTL`] (by the engine's clock; checked again if that went back): a system
    /// resolver's lookup on a blocking thread for each attempt of a fan-out to one receiver
    /// cost more than the rest of the check, and reqwest's pooled connections need no lookup.
    pub async fn webhook_url(&self, url: &str, now: jiff::Timestamp) -> Result<Url, String> {
        let fresh = |at: jiff::Timestamp| now >= at && now.duration_since(at) < URL_CHECK_TTL;
        if let Some(checked) = self
            .checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
            .filter(|c| fresh(c.at))
        {
            return Ok(checked.url.clone());
        }
        #[cfg(test)]
        self.checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let parsed = Url::parse(url).map_err(|e| format!("bad URL: {e}"))?;
        self.policy
            .check(&parsed)
            .await
            .map_err(|refusal| format!("address not allowed: {refusal}"))?;
        let mut checked = self.checked.lock().unwrap_or_else(|e| e.into_inner());
        if checked.len() >= URL_CHECKS_KEPT && !checked.contains_key(url) {
            checked.retain(|_, c| fresh(c.at));
            if checked.len() >= URL_CHECKS_KEPT {
                checked.clear();
            }
        }
        checked.insert(
            url.to_owned(),
            Checked {
                url: parsed.clone(),
                at: now,
            },
        );
        Ok(parsed)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    fn client(allow: &[&str]) -> HttpClient {
        let networks = allow
            .iter()
            .map(|n| n.parse().expect("a network"))
            .collect();
        HttpClient::new(
            NetworkPolicy::new(networks),
            Timeouts::new(Duration::from_secs(10)),
        )
        .expect("client")
    }

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().expect("a timestamp")
    }

    #[tokio::test]
    async fn an_allowed_url_is_checked_again_only_once_its_check_is_old_and_a_refused_one_every_time()
     {
        let http = client(&["127.0.0.0/8"]);
        let checks = || http.checks.load(Ordering::Relaxed);
        let url = "http://127.0.0.1:9/hook";
        let start = at("2026-11-28T12:00:00Z");
        let ttl = URL_CHECK_TTL;
        let ms = jiff::SignedDuration::from_millis(1);
        let found = http.webhook_url(url, start).await.expect("allowed");
        assert_eq!(found.as_str(), url);
        assert_eq!(checks(), 1);
        // Within the TTL: the check made is reused.
        let reused = http
            .webhook_url(url, start + ttl - ms)
            .await
            .expect("allowed");
        assert_eq!(reused, found);
        assert_eq!(checks(), 1);
        // At the TTL: checked again (and kept from then on).
        http.webhook_url(url, start + ttl).await.expect("allowed");
        assert_eq!(checks(), 2);
        http.webhook_url(url, start + ttl + ms)
            .await
            .expect("allowed");
        assert_eq!(checks(), 2);
        // The clock went back: checked again.
        http.webhook_url(url, start).await.expect("allowed");
        assert_eq!(checks(), 3);
        // A refused URL is checked at every attempt, never kept.
        for (url, error, checked) in [
            ("http://10.0.0.1/hook", "address not allowed: ", 4),
            ("http://10.0.0.1/hook", "address not allowed: ", 5),
            ("not a url", "bad URL: ", 6),
        ] {
            let refused = http.webhook_url(url, start).await.expect_err(url);
            assert!(refused.starts_with(error), "{refused}");
            assert_eq!(checks(), checked, "{url}");
        }
        // Another policy (another host's) refuses what this one allowed: nothing is shared.
        let strict = client(&[]);
        let refused = strict.webhook_url(url, start).await.expect_err("loopback");
        assert!(refused.contains("loopback"), "{refused}");
    }

    #[tokio::test]
    async fn the_checks_kept_are_bounded_and_the_stale_go_first() {
        let http = client(&["127.0.0.0/8"]);
        let start = at("2026-11-28T12:00:00Z");
        let ttl = URL_CHECK_TTL;
        // Half of the bound checked long ago, then the rest of it now.
        for i in 0..URL_CHECKS_KEPT / 2 {
            let url = format!("http://127.0.0.1:9/old{i}");
            http.webhook_url(&url, start).await.expect("allowed");
        }
        let later = start + ttl;
        for i in 0..URL_CHECKS_KEPT / 2 {
            let url = format!("http://127.0.0.1:9/new{i}");
            http.webhook_url(&url, later).await.expect("allowed");
        }
        let kept = || http.checked.lock().expect("lock").len();
        assert_eq!(kept(), URL_CHECKS_KEPT);
        // One more: the stale half goes, the fresh half stays.
        http.webhook_url("http://127.0.0.1:9/one-more", later)
            .await
            .expect("allowed");
        assert_eq!(kept(), URL_CHECKS_KEPT / 2 + 1);
        let before = http.checks.load(Ordering::Relaxed);
        http.webhook_url("http://127.0.0.1:9/new0", later)
            .await
            .expect("allowed");
        assert_eq!(http.checks.load(Ordering::Relaxed), before, "still kept");
        // When every check kept is fresh, past the bound they all go.
        for i in 0..URL_CHECKS_KEPT {
            let url = format!("http://127.0.0.1:9/more{i}");
            http.webhook_url(&url, later).await.expect("allowed");
        }
        assert!(kept() <= URL_CHECKS_KEPT, "{}", kept());
    }
}
