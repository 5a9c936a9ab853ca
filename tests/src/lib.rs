//! Shared helpers for the integration tests: a real host on a real port (port 0), real sled files
//! in a temporary folder, and a manual clock the test moves.

pub mod bench;
pub mod components;
pub mod metrics;
pub mod pages;
pub mod receiver;
pub mod smtp;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use commerce_host::Config;
use commerce_host::model::clock::ManualClock;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The admin token every test host uses.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The instant every test clock starts at (a Monday, on a minute boundary).
pub fn epoch() -> jiff::Timestamp {
    "2026-01-05T00:00:00Z".parse().expect("valid timestamp")
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// The body as JSON (`Value::Null` when empty or not JSON).
    pub body: Value,
}

impl Reply {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `error.code` of an error body.
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }

    /// `error.field` of an error body.
    pub fn field(&self) -> &str {
        self.body["error"]["field"].as_str().unwrap_or("")
    }

    /// Panics unless this is the error object with `status` and `code`, a `req_` request id (also
    /// in `X-Request-Id`) and a message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "body: {}", self.body);
        assert_eq!(self.code(), code, "body: {}", self.body);
        let request_id = self.body["error"]["request_id"].as_str().unwrap_or("");
        assert!(request_id.starts_with("req_"), "body: {}", self.body);
        assert_eq!(self.header("x-request-id"), Some(request_id));
        assert!(
            !self.body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .is_empty(),
            "body: {}",
            self.body
        );
    }

    /// Panics with the body unless the status is `expected`.
    #[track_caller]
    pub fn expect(self, expected: u16) -> Self {
        assert_eq!(
            self.status, expected,
            "unexpected status; body: {}",
            self.body
        );
        self
    }
}

/// A change to the configuration, kept so that a restart applies it again.
type Adjust = Arc<dyn Fn(&mut Config) + Send + Sync>;

/// A host running in this process on 127.0.0.1:0.
pub struct TestHost {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The host's clock.
    pub clock: ManualClock,
    /// A client for the tests.
    pub http: reqwest::Client,
    data: Arc<tempfile::TempDir>,
    adjust: Adjust,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl TestHost {
    /// Starts a host with a fresh data folder and a clock at [`epoch`].
    pub async fn start() -> Self {
        let data = Arc::new(tempfile::tempdir().expect("temp dir"));
        Self::start_with(
            data,
            ManualClock::new(epoch()),
            Arc::new(|_: &mut Config| {}),
        )
        .await
    }

    /// Starts a host, letting the test adjust the configuration (again on every restart).
    pub async fn start_configured(adjust: impl Fn(&mut Config) + Send + Sync + 'static) -> Self {
        let data = Arc::new(tempfile::tempdir().expect("temp dir"));
        Self::start_with(data, ManualClock::new(epoch()), Arc::new(adjust)).await
    }

    /// Starts a host whose manual clock starts at `start` instead of [`epoch`].
    pub async fn start_at(
        start: jiff::Timestamp,
        adjust: impl Fn(&mut Config) + Send + Sync + 'static,
    ) -> Self {
        let data = Arc::new(tempfile::tempdir().expect("temp dir"));
        Self::start_with(data, ManualClock::new(start), Arc::new(adjust)).await
    }

    /// Starts a host on the data folder `data` as it is (its storage too: see [`test_database`]),
    /// with a clock at [`epoch`].
    pub async fn start_in(data: tempfile::TempDir) -> Self {
        Self::start_with(
            Arc::new(data),
            ManualClock::new(epoch()),
            Arc::new(|_: &mut Config| {}),
        )
        .await
    }

    /// Starts a second host on `other`'s database, with a data folder of its own and the same
    /// clock: several hosts on one PostgreSQL. `None` when the suite runs on sled (a sled folder
    /// belongs to one process).
    pub async fn start_sharing(other: &TestHost) -> Option<Self> {
        let url = test_database(&other.data_dir())?;
        let data = Arc::new(tempfile::tempdir().expect("temp dir"));
        std::fs::write(data.path().join("test-database-url"), url).expect("share the database");
        Some(Self::start_with(data, other.clock.clone(), other.adjust.clone()).await)
    }

    /// Starts a host for webhook tests: webhooks may go to 127.0.0.0/8 (where the test
    /// receivers listen), the engine polls every 10 ms, and `adjust` may change more.
    pub async fn start_for_webhooks(adjust: impl Fn(&mut Config) + Send + Sync + 'static) -> Self {
        Self::start_configured(move |config| {
            config.webhook_allow_networks = vec!["127.0.0.0/8".parse().expect("network")];
            config.delivery_poll_interval = Duration::from_millis(10);
            config.durable_writes = false;
            adjust(config);
        })
        .await
    }

    async fn start_with(data: Arc<tempfile::TempDir>, clock: ManualClock, adjust: Adjust) -> Self {
        let mut config = test_config(data.path());
        config.admin_token = Some(ADMIN_TOKEN.to_owned());
        config.clock = Arc::new(clock.clone());
        adjust(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind port 0");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(commerce_host::run(config, listener, async {
            let _ = rx.await;
        }));
        Self {
            base,
            clock,
            http: reqwest::Client::new(),
            data,
            adjust,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// The data folder.
    pub fn data_dir(&self) -> PathBuf {
        self.data.path().to_owned()
    }

    /// Stops the host gracefully and waits until it has released its files.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("host task").expect("host ran cleanly");
        }
    }

    /// Stops the host and starts a new one on the same data folder and clock.
    pub async fn restart(mut self) -> Self {
        self.stop().await;
        let data = self.data.clone();
        let clock = self.clock.clone();
        let adjust = self.adjust.clone();
        Self::start_with(data, clock, adjust).await
    }

    /// Stops the host and starts a new one on the same data folder and clock, with `adjust`
    /// applied to the configuration instead of the original one.
    pub async fn restart_configured(
        mut self,
        adjust: impl Fn(&mut Config) + Send + Sync + 'static,
    ) -> Self {
        self.stop().await;
        let data = self.data.clone();
        let clock = self.clock.clone();
        Self::start_with(data, clock, Arc::new(adjust)).await
    }

    /// Sends a request with an optional bearer token and JSON body.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Reply {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        Self::read(req).await
    }

    /// Sends a request's head announcing a body of `content_length` bytes, and only `body_start`
    /// of it, then reads the reply: how a client meets a refusal made from the head alone (a
    /// body over the limit), without its own write of the rest racing the server's close of the
    /// connection (which a client writing the whole body sees as a broken pipe, not the reply).
    pub async fn send_head(&self, head: &str, content_length: usize, body_start: &[u8]) -> Reply {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let addr = self.base.trim_start_matches("http://");
        let mut socket = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connected");
        let head = format!("{head}\r\nHost: {addr}\r\nContent-Length: {content_length}\r\n\r\n");
        socket.write_all(head.as_bytes()).await.expect("head sent");
        socket.write_all(body_start).await.expect("body start sent");
        let mut raw = Vec::new();
        loop {
            let mut chunk = [0u8; 8192];
            let read = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut chunk))
                .await
                .expect("a reply within 10 s")
                .expect("reply read");
            raw.extend_from_slice(&chunk[..read]);
            if let Some(reply) = parse_reply(&raw) {
                return reply;
            }
            assert!(
                read > 0,
                "closed before a whole reply: {}",
                String::from_utf8_lossy(&raw)
            );
        }
    }

    /// Sends a prepared request and reads the reply.
    pub async fn read(req: reqwest::RequestBuilder) -> Reply {
        let response = req.send().await.expect("request sent");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("body read");
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
        }
    }

    /// A request builder for `path`.
    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// An operator call.
    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> Reply {
        self.send(method, path, Some(ADMIN_TOKEN), body).await
    }

    /// A `/v1` call with a project token.
    pub async fn call(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Reply {
        self.send(method, path, Some(token), body).await
    }

    /// Creates a store and returns its id.
    pub async fn create_store(&self, domain: &str) -> String {
        let reply = self
            .admin(
                Method::POST,
                "/admin/v1/stores",
                Some(json!({ "domain": domain })),
            )
            .await
            .expect(201);
        reply.body["id"].as_str().expect("store id").to_owned()
    }

    /// Publishes an external plugin with `scopes`.
    pub async fn publish(&self, name: &str, scopes: &[&str]) {
        self.admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({ "manifest": {
                "name": name,
                "version": "1.0.0",
                "scopes": scopes,
                "contact_email": "dev@plugin.example",
            }})),
        )
        .await
        .expect(201);
    }

    /// Installs `plugin` into `store`; returns (installation id, token).
    pub async fn install(&self, store: &str, plugin: &str) -> (String, String) {
        let reply = self
            .admin(
                Method::POST,
                &format!("/admin/v1/stores/{store}/installations"),
                Some(json!({ "plugin": plugin })),
            )
            .await
            .expect(201);
        (
            reply.body["id"].as_str().expect("id").to_owned(),
            reply.body["token"].as_str().expect("token").to_owned(),
        )
    }

    /// Fires `customer.created` in `store` through a fresh plugin allowed to create customers;
    /// returns the customer's id.
    pub async fn fire_customer_created(&self, store: &str) -> String {
        static PLUGINS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = PLUGINS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("firer-{n}");
        self.publish(&name, &["customers.write"]).await;
        let (_, token) = self.install(store, &name).await;
        let customer = self
            .call(
                &token,
                Method::POST,
                "/v1/customers",
                Some(json!({"email": format!("fired{n}@example.com")})),
            )
            .await
            .expect(201);
        customer.body["id"]
            .as_str()
            .expect("customer id")
            .to_owned()
    }

    /// Raises `store`'s rate limits so that polling on a stopped clock never reaches them.
    pub async fn raise_rate_limits(&self, store: &str) {
        let limits = json!({"rate_limits": {"requests_per_second": 100000, "burst": 100000, "requests_per_minute": 1000000}});
        self.admin(
            Method::PATCH,
            &format!("/admin/v1/stores/{store}"),
            Some(limits),
        )
        .await
        .expect(200);
    }

    /// Subscribes `token`'s installation to `events` at `url` (with a valid secret); returns the
    /// subscription.
    pub async fn subscribe(&self, token: &str, url: &str, events: &[&str]) -> Value {
        self.call(
            token,
            Method::POST,
            "/v1/webhooks",
            Some(json!({"url": url, "events": events, "secret": "a-secret-of-16-bytes-or-more"})),
        )
        .await
        .expect(201)
        .body
    }

    /// A store with one external plugin installed with `scopes`; returns (store id, token).
    pub async fn store_with_plugin(&self, domain: &str, scopes: &[&str]) -> (String, String) {
        let store = self.create_store(domain).await;
        let plugin = format!("p-{}", domain.replace('.', "-"));
        self.publish(&plugin, scopes).await;
        let (_, token) = self.install(&store, &plugin).await;
        (store, token)
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl TestHost {
    /// The store's events of `kind`, oldest first.
    pub async fn events(&self, store: &str, kind: &str) -> Vec<Value> {
        let reply = self
            .admin(
                Method::GET,
                &format!("/admin/v1/stores/{store}/events?type={kind}&limit=250"),
                None,
            )
            .await
            .expect(200);
        let mut events = reply.body["data"].as_array().cloned().unwrap_or_default();
        events.reverse();
        events
    }

    /// Places an order of one 12.50 EUR mug through `token` (with `orders.write`), without a
    /// customer; returns it.
    pub async fn place_order(&self, token: &str) -> Value {
        self.call(
            token,
            Method::POST,
            "/v1/orders",
            Some(json!({"currency": "EUR",
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 1}]})),
        )
        .await
        .expect(201)
        .body
    }

    /// Confirms payment of an order for its total, as the gateway would.
    pub async fn pay(&self, store: &str, order: &Value) -> Reply {
        self.admin(
            Method::POST,
            &format!(
                "/admin/v1/stores/{store}/orders/{}/payments",
                order["id"].as_str().expect("order id")
            ),
            Some(json!({ "amount": order["total"], "currency": order["currency"] })),
        )
        .await
    }

    /// Moves the clock to each retry of the subscription's delivery of `event` as it falls due,
    /// until the retries ran out (its receiver keeps failing) and it is `failed`; the subscription
    /// is then paused. Returns the delivery. The clock moves only as far as the retry schedule
    /// (about 33 hours), however slowly the engine answers, so that nothing else with a lifetime
    /// (a session of the pages) runs out on the way.
    pub async fn exhaust_delivery(&self, token: &str, webhook: &str, event: &str) -> Value {
        use commerce_host::model::clock::Clock;
        let path = format!("/v1/webhooks/{webhook}/deliveries?limit=250");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            let all = self.call(token, Method::GET, &path, None).await.expect(200);
            let delivery = all.body["data"]
                .as_array()
                .and_then(|all| all.iter().find(|d| d["event_id"] == event));
            if let Some(d) = delivery {
                if d["status"] == "failed" {
                    return d.clone();
                }
                let due = d["next_attempt_at"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok());
                if let Some(due) = due
                    && due > self.clock.now()
                {
                    self.clock.set(due);
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the delivery of {event} to {webhook} never failed");
    }

    /// Polls `check` until it returns `Some`, for up to 10 s of real time.
    pub async fn eventually<T, F, Fut>(&self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Some(value) = check().await {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

/// Waits for `child` to exit, up to `timeout` (off the async workers); kills it and returns
/// `None` if it is still running then.
pub async fn exit_within(
    mut child: std::process::Child,
    timeout: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let started = std::time::Instant::now();
    tokio::task::spawn_blocking(move || {
        loop {
            if let Some(status) = child.try_wait().expect("wait for the child") {
                return Some(status);
            }
            if started.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    })
    .await
    .expect("the waiting thread")
}

/// Starts the `commerce-host` binary at `binary` (`env!("CARGO_BIN_EXE_test-commerce-host")`)
/// serving `data` on port 0 with the test admin token and `env`, and returns it with its base URL.
pub async fn spawn_binary(
    binary: &std::path::Path,
    data: &std::path::Path,
    env: &[(&str, &str)],
) -> (std::process::Child, String) {
    spawn_binary_with_log(binary, data, env, std::process::Stdio::null()).await
}

/// [`spawn_binary`], with the host's log (its stderr) going to `log` (`Stdio::piped()` to read it
/// from the child).
pub async fn spawn_binary_with_log(
    binary: &std::path::Path,
    data: &std::path::Path,
    env: &[(&str, &str)],
    log: std::process::Stdio,
) -> (std::process::Child, String) {
    use std::io::{BufRead, BufReader};
    let mut command = std::process::Command::new(binary);
    command.env("COMMERCE_HOST_STORE", test_store().to_string());
    if let Some(url) = test_database(data) {
        command
            .env("COMMERCE_HOST_DATABASE_URL", url)
            .env("COMMERCE_HOST_DATABASE_POOL_SIZE", "4");
    }
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("COMMERCE_HOST_ADMIN_TOKEN", ADMIN_TOKEN)
        .env("COMMERCE_HOST_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(log)
        .spawn()
        .expect("start commerce-host");
    let stdout = child.stdout.take().expect("stdout");
    let base = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stdout).lines();
        let base = loop {
            let line = lines
                .next()
                .expect("the host printed its address")
                .expect("read");
            if let Some(base) = line.strip_prefix("commerce-host listening on ") {
                break base.to_owned();
            }
        };
        // Keep draining, so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        base
    })
    .await
    .expect("reader");
    (child, base)
}

/// The variable that runs the suite (and the benches) on another embedded store than sled:
/// `fjall`.
pub const TEST_STORE: &str = "COMMERCE_HOST_TEST_STORE";

/// The embedded store the suite runs on ([`TEST_STORE`]; sled when unset).
pub fn test_store() -> commerce_host::storage::Embedded {
    std::env::var(TEST_STORE)
        .ok()
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or_else(|e| panic!("{TEST_STORE}: {e}")))
        .unwrap_or_default()
}

/// The embedded storage of the stopped host whose data folder is `data`, on the store the suite
/// runs on, or its PostgreSQL database where the suite runs on one.
pub fn open_stopped(data: &std::path::Path) -> commerce_host::storage::Db {
    match test_database(data) {
        Some(url) => {
            commerce_host::storage::Db::open_postgres(&url, 2, true).expect("open the database")
        }
        None => commerce_host::storage::Db::open_embedded(
            test_store(),
            data,
            true,
            commerce_host::storage::DEFAULT_STORE_CACHE_MIB,
        )
        .expect("open the data folder"),
    }
}

/// The variable that runs the suite on PostgreSQL: the URL of a server (any database its user
/// may connect to) on which each host under test gets a fresh database of its own.
pub const TEST_DATABASE_URL: &str = "COMMERCE_HOST_TEST_DATABASE_URL";

/// With [`TEST_DATABASE_URL`] set, the PostgreSQL database of the host whose data folder is
/// `data`: made on first use and remembered in the folder (`test-database-url`), so that a
/// restarted host finds its records again, as a restarted sled host finds its folder. `None`
/// runs the host on sled.
pub fn test_database(data: &std::path::Path) -> Option<String> {
    let server = std::env::var(TEST_DATABASE_URL)
        .ok()
        .filter(|u| !u.is_empty())?;
    let remembered = data.join("test-database-url");
    if let Ok(url) = std::fs::read_to_string(&remembered) {
        return Some(url);
    }
    let url = commerce_host::storage::postgres::fresh_database(&server)
        .expect("a fresh test database on COMMERCE_HOST_TEST_DATABASE_URL");
    std::fs::create_dir_all(data).expect("the data folder");
    std::fs::write(&remembered, &url).expect("remember the test database");
    Some(url)
}

/// A host's configuration for the data folder `data`, on the backend the suite runs on (see
/// [`test_database`]).
pub fn test_config(data: &std::path::Path) -> Config {
    let mut config = Config::new(data);
    config.store = test_store();
    config.database_url = test_database(data);
    config.database_pool_size = 4;
    config
}

/// Every scope.
pub const ALL_SCOPES: [&str; 6] = [
    "orders.read",
    "orders.write",
    "products.read",
    "products.write",
    "customers.read",
    "customers.write",
];

/// A whole HTTP/1.1 reply with a `Content-Length` body, once `raw` holds it.
fn parse_reply(raw: &[u8]) -> Option<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).expect("a text head");
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()?
        .split(' ')
        .nth(1)?
        .parse()
        .expect("a status code");
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').expect("a header line");
        headers.append(
            reqwest::header::HeaderName::from_bytes(name.trim().as_bytes()).expect("a name"),
            reqwest::header::HeaderValue::from_str(value.trim()).expect("a value"),
        );
    }
    let length: usize = headers
        .get("content-length")
        .map_or(Some(0), |v| v.to_str().ok()?.parse().ok())?;
    let body = raw.get(end + 4..end + 4 + length)?;
    Some(Reply {
        status,
        headers,
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
    })
}
