//! A typed async client of the host's `/v1` REST API, for external plugins (feature `client`,
//! native builds only).
//!
//! [`Client::new`] takes the host's base URL and the project token the installation printed.
//! Every endpoint is a method with typed bodies and records ([`Order`], [`Product`], …); a
//! refusal is an [`Error::Api`] carrying the host's [`ApiError`] (status, `code`, `message`,
//! `field`, `request_id`).
//!
//! - **Lists** come as one page ([`Client::list_orders`] with a filter's `limit` and `cursor`)
//!   or as a [`Stream`](futures::Stream) of every item ([`Client::orders`]) that follows
//!   `page.next_cursor` until the last page.
//! - **429** (`rate_limited` or `quota_exceeded`): the client waits the `Retry-After` seconds and
//!   tries again, up to [`Client::with_max_retries`] times (3 by default), as long as the wait is
//!   at most [`Client::with_max_retry_wait`] (60 s by default; a daily quota says "come back
//!   at midnight", which is better returned than slept on). Then the 429 is returned, with
//!   [`ApiError::retry_after`]. A 429 means the host did nothing, so retrying a `POST` is safe.
//! - **`Idempotency-Key`**: [`Client::idempotent`] gives a client that sends a key with its
//!   `POST`s, so a retry after a lost answer returns the first answer instead of doing the work
//!   twice.
//!
//! ```no_run
//! # async fn run() -> commerce_guest_sdk::client::Result<()> {
//! use commerce_guest_sdk::client::{Client, OrderFilter, UpdateOrder};
//! use futures::TryStreamExt as _;
//!
//! let client = Client::new("http://127.0.0.1:8080", "chp_…")?;
//! let mut orders = client.orders(OrderFilter::default());
//! while let Some(order) = orders.try_next().await? {
//!     if !order.tags.iter().any(|t| t == "seen") {
//!         let mut tags = order.tags.clone();
//!         tags.push("seen".into());
//!         let patch = UpdateOrder { tags: Some(tags), ..UpdateOrder::default() };
//!         client.update_order(&order.id, &patch).await?;
//!     }
//! }
//! # Ok(()) }
//! ```

mod api;
mod commerce;
mod error;
mod platform;

use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt as _, TryStreamExt as _};
use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use commerce::*;
pub use error::{ApiError, Error, Result};
pub use platform::*;

/// The header that makes a `POST` safe to retry.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// A client of one host, authenticated as one installation. Cheap to clone (the connection pool
/// is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// `…/v1`, without a trailing slash.
    base: String,
    token: String,
    max_retries: u32,
    max_retry_wait: Duration,
    idempotency_key: Option<String>,
}

impl Client {
    /// A client of the host at `base_url` (`http://127.0.0.1:8080`, with or without `/v1`),
    /// calling with the installation's project token (`chp_…`).
    pub fn new(base_url: impl Into<String>, token: impl Into<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("commerce-guest-sdk/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Self::with_http_client(http, base_url, token)
    }

    /// As [`new`](Self::new), with a `reqwest` client of your own (proxies, timeouts, TLS).
    pub fn with_http_client(
        http: reqwest::Client,
        base_url: impl Into<String>,
        token: impl Into<String>,
    ) -> Result<Self> {
        let raw = base_url.into();
        let trimmed = raw.trim_end_matches('/');
        let parsed =
            reqwest::Url::parse(trimmed).map_err(|_| Error::InvalidBaseUrl(raw.clone()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::InvalidBaseUrl(raw));
        }
        let base = if trimmed.ends_with("/v1") {
            trimmed.to_owned()
        } else {
            format!("{trimmed}/v1")
        };
        Ok(Self {
            http,
            base,
            token: token.into(),
            max_retries: 3,
            max_retry_wait: Duration::from_secs(60),
            idempotency_key: None,
        })
    }

    /// How many times a 429 is retried before it is returned (3 by default; 0 never retries).
    pub fn with_max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// The longest `Retry-After` the client waits for (60 s by default); a 429 asking for
    /// longer is returned at once.
    pub fn with_max_retry_wait(mut self, wait: Duration) -> Self {
        self.max_retry_wait = wait;
        self
    }

    /// A client that sends `Idempotency-Key: key` with its `POST`s. Use it for one operation:
    /// the host answers a second `POST` with the same key and body with the first answer (and
    /// refuses a different body with 409 `idempotency_key_reused`).
    ///
    /// ```no_run
    /// # async fn run(client: commerce_guest_sdk::client::Client) -> commerce_guest_sdk::client::Result<()> {
    /// use commerce_guest_sdk::client::{CreateOrder, NewLineItem};
    ///
    /// let body = CreateOrder {
    ///     currency: "EUR".into(),
    ///     line_items: vec![NewLineItem::custom("Gift wrap", 300, 1)],
    ///     ..CreateOrder::default()
    /// };
    /// // Safe to repeat after a timeout: at most one order is created.
    /// let order = client.idempotent("import-4711").create_order(&body).await?;
    /// # Ok(()) }
    /// ```
    pub fn idempotent(&self, key: impl Into<String>) -> Self {
        Self {
            idempotency_key: Some(key.into()),
            ..self.clone()
        }
    }

    /// The `/v1` base URL the client calls.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends one call, retrying 429s; returns the body of a 2xx answer.
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: Option<&serde_json::Value>,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let url = format!("{}{path}", self.base);
        let mut retries = 0;
        loop {
            let mut req = self
                .http
                .request(method.clone(), &url)
                .bearer_auth(&self.token);
            if let Some(query) = query {
                req = req.query(query);
            }
            if let Some(body) = &body {
                req = req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.clone());
            }
            if method == Method::POST
                && let Some(key) = &self.idempotency_key
            {
                req = req.header(IDEMPOTENCY_KEY_HEADER, key);
            }
            let response = req.send().await?;
            let status = response.status();
            if status.is_success() {
                return Ok(response.bytes().await?.to_vec());
            }
            let header = |name: &str| {
                response
                    .headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            };
            let retry_after = header("retry-after")
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let request_id = header("x-request-id");
            let bytes = response.bytes().await?;
            let error = ApiError::from_response(status.as_u16(), request_id, retry_after, &bytes);
            if status == StatusCode::TOO_MANY_REQUESTS && retries < self.max_retries {
                // Without the header, a second is the host's smallest refill step.
                let wait = retry_after.unwrap_or(Duration::from_secs(1));
                if wait <= self.max_retry_wait {
                    retries += 1;
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            return Err(error.into());
        }
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        query: Option<&serde_json::Value>,
        body: Option<&(impl Serialize + ?Sized)>,
    ) -> Result<T> {
        let body = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|source| Error::Decode {
                path: path.to_owned(),
                source,
            })?;
        let bytes = self.call(method, path, query, body).await?;
        serde_json::from_slice(&bytes).map_err(|source| Error::Decode {
            path: path.to_owned(),
            source,
        })
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.json(Method::GET, path, None, None::<&()>).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &(impl Serialize + ?Sized),
    ) -> Result<T> {
        self.json(Method::POST, path, None, Some(body)).await
    }

    async fn patch<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &(impl Serialize + ?Sized),
    ) -> Result<T> {
        self.json(Method::PATCH, path, None, Some(body)).await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.call(Method::DELETE, path, None, None).await.map(drop)
    }

    /// One page of a list.
    async fn page<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &impl Serialize,
    ) -> Result<Page<T>> {
        let query = query_value(path, query)?;
        self.json(Method::GET, path, Some(&query), None::<&()>)
            .await
    }

    /// Every item of a list, page after page, from the page `query` names.
    fn paginate<T>(
        &self,
        path: &'static str,
        query: &impl Serialize,
    ) -> BoxStream<'static, Result<T>>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let query = match query_value(path, query) {
            Ok(query) => query,
            Err(e) => return stream::once(async { Err(e) }).boxed(),
        };
        struct State {
            client: Client,
            query: serde_json::Value,
            done: bool,
        }
        let start = State {
            client: self.clone(),
            query,
            done: false,
        };
        stream::try_unfold(start, move |mut state| async move {
            if state.done {
                return Ok::<_, Error>(None);
            }
            let page: Page<T> = state
                .client
                .json(Method::GET, path, Some(&state.query), None::<&()>)
                .await?;
            match page.page.next_cursor.filter(|_| page.page.has_more) {
                Some(cursor) => {
                    if let Some(map) = state.query.as_object_mut() {
                        map.insert("cursor".into(), cursor.into());
                    }
                }
                None => state.done = true,
            }
            Ok(Some((
                stream::iter(page.data.into_iter().map(Ok::<T, Error>)),
                state,
            )))
        })
        .try_flatten()
        .boxed()
    }
}

/// A query struct as a JSON object, which `reqwest` encodes into the URL.
fn query_value(path: &str, query: &impl Serialize) -> Result<serde_json::Value> {
    serde_json::to_value(query).map_err(|source| Error::Decode {
        path: path.to_owned(),
        source,
    })
}
