//! The one outbound HTTP client, and the timeouts of everything the engine sends.
//!
//! Every request the host makes goes through [`HttpClient`]: webhook attempts and the merchant's
//! SMS, WhatsApp and push providers alike. It is built here, once, with the same settings for
//! all: never through a proxy (an `HTTP(S)_PROXY` or `ALL_PROXY` in the environment would resolve
//! names itself, past the network policy), redirects never followed (a receiver or provider
//! cannot bounce the request elsewhere), and the timeouts of [`Timeouts`].
//!
//! Webhook attempts, the engine's hot path, go through hyper's pooled client directly
//! ([`HttpClient::post_webhook`]): HTTP/1.1, TLS by rustls with Mozilla's roots, and nothing else
//! on the way (reqwest, which the providers' requests use, cost a signed fan-out about a sixth
//! of its CPU a delivery: PERFORMANCE.md, the thirty-fourth pass). A URL's user and password
//! are sent as `Authorization: Basic`, as reqwest sends them.
//!
//! Webhook URLs are chosen by plugins, so their names resolve only through [`PolicyResolver`]:
//! only to addresses the network policy allows, so a name that changes its answer between the
//! check and the connection (DNS rebinding) still cannot reach an internal address. Provider URLs
//! are set by the operator (`PUT /admin/v1/stores/{id}/senders/{channel}`), a trusted party whose
//! providers often live on a private network; they are not held to the policy, which exists to
//! keep plugins away from internal addresses.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{AUTHORIZATION, HOST, HeaderMap, HeaderValue, USER_AGENT};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::{RequestBuilder, Url};

use crate::model::delivery::RESPONSE_EXCERPT_BYTES;
use crate::model::error::{Error, Result};
use crate::service::network::{NetworkPolicy, Refusal};

/// The time an SMS, WhatsApp or push provider has to answer.
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// The time an SMTP server (the merchant's, or the host's own) has for each step of a send.
pub const SMTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The `User-Agent` of every webhook request.
pub const WEBHOOK_USER_AGENT: &str = concat!("commerce-host-webhooks/", env!("CARGO_PKG_VERSION"));

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

/// The webhook client: hyper's pool, over TLS or not, connecting only where the policy allows.
type WebhookClient =
    Client<hyper_rustls::HttpsConnector<HttpConnector<PolicyResolver>>, Full<Bytes>>;

/// The HTTP client every outgoing request uses. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HttpClient {
    /// Resolves through the network policy.
    webhooks: WebhookClient,
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
    url: WebhookUrl,
    at: jiff::Timestamp,
}

/// A webhook URL as its requests name it: without its user and password, which go in an
/// `Authorization: Basic` header, and without its fragment; with its `Host` header made once.
/// Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    uri: Uri,
    host: HeaderValue,
    authorization: Option<HeaderValue>,
}

impl WebhookUrl {
    /// `url`'s request target; `bad URL: …` when HTTP cannot name it.
    fn new(mut url: Url) -> Result<Self, String> {
        let authorization = credentials(&mut url);
        let uri = url
            .as_str()
            .parse::<Uri>()
            .map_err(|e| format!("bad URL: {e}"))?;
        // As hyper writes it: the port only when it is not the scheme's.
        let default_port = if uri.scheme() == Some(&hyper::http::uri::Scheme::HTTPS) {
            443
        } else {
            80
        };
        let name = uri.host().unwrap_or_default();
        let host = match uri.port_u16().filter(|p| *p != default_port) {
            Some(port) => HeaderValue::try_from(format!("{name}:{port}")),
            None => HeaderValue::try_from(name),
        }
        .map_err(|e| format!("bad URL: {e}"))?;
        Ok(Self {
            uri,
            host,
            authorization,
        })
    }

    /// The URL the request goes to.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }
}

/// Takes `url`'s user and password out of it, into the `Authorization: Basic` value that carries
/// them (marked sensitive, so it is never logged); `None` when it has neither.
fn credentials(url: &mut Url) -> Option<HeaderValue> {
    use base64::Engine as _;
    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s)
            .decode_utf8_lossy()
            .into_owned()
    };
    let user = decode(url.username());
    let password = url.password().map(decode).unwrap_or_default();
    // Neither can fail on a URL with an authority, which every http(s) URL has.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let mut value = HeaderValue::try_from(format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// What a webhook receiver answered.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// The first [`RESPONSE_EXCERPT_BYTES`] of its body (or fewer, when it sent fewer).
    pub excerpt: Vec<u8>,
}

impl HttpClient {
    /// The client, with webhook names resolved through `policy`.
    pub fn new(policy: NetworkPolicy, timeouts: Timeouts) -> Result<Self> {
        let mut connector = HttpConnector::new_with_resolver(PolicyResolver {
            policy: policy.clone(),
        });
        connector.enforce_http(false);
        connector.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .map_err(|e| {
                Error::Internal(anyhow::Error::new(e).context("the webhook client's TLS settings"))
            })?
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let webhooks = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        let providers = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeouts.provider)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| {
                Error::Internal(anyhow::Error::new(e).context("building the outbound HTTP client"))
            })?;
        Ok(Self {
            webhooks,
            providers,
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
    /// cost more than the rest of the check, and pooled connections need no lookup.
    pub async fn webhook_url(&self, url: &str, now: jiff::Timestamp) -> Result<WebhookUrl, String> {
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
        let parsed = WebhookUrl::new(parsed)?;
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

    /// POSTs `body` with `headers` (and the webhook `User-Agent`) to `url`: names resolve only
    /// to addresses the policy allows, redirects are answers like any other, and the whole of
    /// it, the receiver's excerpt read included, has the webhook timeout. The error is the one
    /// the attempt records: `timed out after … ms`, `connection failed: …` or `request failed:
    /// …`, with each cause.
    pub async fn post_webhook(
        &self,
        url: &WebhookUrl,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, String> {
        headers.insert(USER_AGENT, HeaderValue::from_static(WEBHOOK_USER_AGENT));
        headers.insert(HOST, url.host.clone());
        if let Some(authorization) = &url.authorization {
            headers.insert(AUTHORIZATION, authorization.clone());
        }
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = url.uri.clone();
        *request.headers_mut() = headers;
        let exchange = async {
            let response = self.webhooks.request(request).await.map_err(describe)?;
            let status = response.status();
            let mut body = response.into_body();
            let mut excerpt = Vec::new();
            while excerpt.len() < RESPONSE_EXCERPT_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            excerpt.extend_from_slice(data);
                        }
                    }
                    Some(Err(_)) | None => break,
                }
            }
            excerpt.truncate(RESPONSE_EXCERPT_BYTES);
            Ok(Answer { status, excerpt })
        };
        let timeout = self.timeouts.webhook;
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(format!("timed out after {} ms", timeout.as_millis())))
    }

    /// A POST to one of the merchant's providers.
    pub fn post_provider(&self, url: &str) -> RequestBuilder {
        self.providers.post(url)
    }
}

/// A failed webhook request as its attempt records it: what failed, then each cause.
fn describe(e: hyper_util::client::legacy::Error) -> String {
    let mut text = if e.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The webhook client's resolver: names resolve only to allowed addresses.
#[derive(Debug, Clone)]
pub struct PolicyResolver {
    /// The policy applied to every answer.
    pub policy: NetworkPolicy,
}

impl tower::Service<Name> for PolicyResolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = Refusal;
    type Future =
        Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let unresolvable = |reason: String| Refusal::Unresolvable {
                host: host.clone(),
                reason,
            };
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| unresolvable(e.to_string()))?
                .filter(|a| policy.refuses(a.ip()).is_none())
                .collect();
            if addrs.is_empty() {
                return Err(unresolvable("no allowed address".to_owned()));
            }
            Ok(addrs.into_iter())
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
        assert_eq!(found.uri().to_string(), url);
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

    /// A receiver on 127.0.0.1 that reads one request whole (head and `Content-Length` body),
    /// or with `whole` false only what comes first, hands it over, and answers `answer` as it is.
    async fn receiver(
        answer: Vec<u8>,
        whole: bool,
    ) -> (String, tokio::sync::oneshot::Receiver<String>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let base = format!("127.0.0.1:{}", listener.local_addr().expect("addr").port());
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = socket.read(&mut buf).await.expect("read");
                got.extend_from_slice(&buf[..n]);
                if !whole {
                    break;
                }
                let text = String::from_utf8_lossy(&got).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .map_or(0, |n| n.parse::<usize>().expect("length"));
                    if got.len() >= end + 4 + length {
                        break;
                    }
                }
                if n == 0 {
                    break;
                }
            }
            socket.write_all(&answer).await.expect("answer");
            let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
        });
        (base, rx)
    }

    #[tokio::test]
    async fn a_webhook_request_carries_its_headers_body_and_the_urls_credentials_and_its_answer_is_cut_to_the_excerpt()
     {
        let http = client(&["127.0.0.0/8"]);
        let long = "y".repeat(RESPONSE_EXCERPT_BYTES + 500);
        let answer = format!(
            "HTTP/1.1 302 Found\r\nlocation: http://10.0.0.1/\r\ncontent-length: {}\r\n\r\n{long}",
            long.len()
        );
        let (base, got) = receiver(answer.into_bytes(), true).await;
        for (url, host) in [
            ("http://example.com:80/a", "example.com"),
            ("https://example.com:443/a", "example.com"),
            ("https://example.com:80/a", "example.com:80"),
            ("http://[::1]:8080/a", "[::1]:8080"),
        ] {
            let parsed = WebhookUrl::new(Url::parse(url).expect("a URL")).expect("named");
            assert_eq!(parsed.host, host, "{url}");
            assert_eq!(parsed.authorization, None, "{url}");
        }
        let url = format!("http://us%20er:p%40ss@{base}/hook?x=1#fragment");
        let start = at("2026-11-28T12:00:00Z");
        let target = http.webhook_url(&url, start).await.expect("allowed");
        assert_eq!(target.uri().to_string(), format!("http://{base}/hook?x=1"));
        let mut headers = HeaderMap::new();
        headers.insert("x-service-event-id", HeaderValue::from_static("evt_1"));
        let answer = http
            .post_webhook(&target, headers, Bytes::from_static(b"{\"a\":1}"))
            .await
            .expect("answered");
        // A redirect is an answer like any other: not followed.
        assert_eq!(answer.status, StatusCode::FOUND);
        assert_eq!(answer.excerpt, long.as_bytes()[..RESPONSE_EXCERPT_BYTES]);
        let request = got.await.expect("a request");
        let (head, body) = request.split_once("\r\n\r\n").expect("a head");
        let mut lines = head.lines();
        assert_eq!(lines.next(), Some("POST /hook?x=1 HTTP/1.1"));
        let headers: Vec<&str> = lines.collect();
        // "us er:p@ss", percent-decoded as reqwest decodes it.
        for expected in [
            "x-service-event-id: evt_1",
            "authorization: Basic dXMgZXI6cEBzcw==",
            &format!("user-agent: {WEBHOOK_USER_AGENT}"),
            &format!("host: {base}"),
            "content-length: 7",
        ] {
            assert!(headers.contains(&expected), "{expected} in {headers:?}");
        }
        assert_eq!(body, "{\"a\":1}");
    }

    #[tokio::test]
    async fn an_https_url_is_spoken_to_in_tls_and_a_receiver_that_does_not_speak_it_fails_the_connection()
     {
        let http = client(&["127.0.0.0/8"]);
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec();
        let (base, got) = receiver(answer, false).await;
        let start = at("2026-11-28T12:00:00Z");
        let target = http
            .webhook_url(&format!("https://{base}/hook"), start)
            .await
            .expect("allowed");
        let error = http
            .post_webhook(&target, HeaderMap::new(), Bytes::new())
            .await
            .expect_err("not TLS");
        assert!(error.starts_with("connection failed: "), "{error}");
        // What reached the receiver is a TLS handshake (a record of type 22), not a request.
        let first = got.await.expect("bytes");
        assert!(first.starts_with('\u{16}'), "{first:?}");
    }
}
