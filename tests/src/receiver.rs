//! A real HTTP receiver for webhook tests on 127.0.0.1:0: it records every request (path,
//! headers, exact body bytes) and answers as told per path: a status, or a hang. It can also be
//! held: every request is recorded on arrival and waits for [`Receiver::release`] to be answered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use tokio::sync::{Notify, watch};

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    /// The request path.
    pub path: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// The body exactly as received.
    pub body: Vec<u8>,
    /// When it arrived.
    pub at: Instant,
}

impl Received {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// How the receiver answers on a path.
#[derive(Debug, Clone, Copy)]
pub enum Behavior {
    /// Answer this status at once (with a short body).
    Status(u16),
    /// Wait this long, then answer 200.
    Hang(Duration),
}

struct Inner {
    requests: Mutex<Vec<Received>>,
    behaviors: Mutex<HashMap<String, Behavior>>,
    arrived: Notify,
    /// True while requests wait before they are answered.
    held: watch::Sender<bool>,
}

impl Default for Inner {
    fn default() -> Self {
        Self {
            requests: Mutex::default(),
            behaviors: Mutex::default(),
            arrived: Notify::new(),
            held: watch::Sender::new(false),
        }
    }
}

/// The receiver; stops when dropped.
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver that answers 200 everywhere until told otherwise.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind receiver");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let inner = Arc::new(Inner::default());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base, inner, task }
    }

    /// The URL of `path` on this receiver.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sets how `path` answers from now on.
    pub fn set(&self, path: &str, behavior: Behavior) {
        self.inner
            .behaviors
            .lock()
            .expect("lock")
            .insert(path.to_owned(), behavior);
    }

    /// The requests received on `path` so far.
    pub fn requests(&self, path: &str) -> Vec<Received> {
        self.inner
            .requests
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Every request received so far.
    pub fn all(&self) -> Vec<Received> {
        self.inner.requests.lock().expect("lock").clone()
    }

    /// How many requests arrived so far, on every path (without copying them).
    pub fn total(&self) -> usize {
        self.inner.requests.lock().expect("lock").len()
    }

    /// Holds every request from now on: it is recorded when it arrives and answered only after
    /// [`Receiver::release`].
    pub fn hold(&self) {
        self.inner.held.send_replace(true);
    }

    /// Answers the held requests and every later one as usual.
    pub fn release(&self) {
        self.inner.held.send_replace(false);
    }

    /// Waits until at least `n` requests arrived on any path; panics after `within`.
    pub async fn wait_for_total(&self, n: usize, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let arrived = self.inner.arrived.notified();
            let got = self.total();
            if got >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "received {got} requests, expected {n} within {within:?}"
            );
            let _ = tokio::time::timeout(Duration::from_millis(50), arrived).await;
        }
    }

    /// Waits until `path` has received at least `n` requests; panics after `within`.
    pub async fn wait_for(&self, path: &str, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let arrived = self.inner.arrived.notified();
            let got = self.requests(path);
            if got.len() >= n {
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "{path} received {} requests, expected {n} within {within:?}",
                got.len()
            );
            let _ = tokio::time::timeout(Duration::from_millis(50), arrived).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(inner): State<Arc<Inner>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let path = uri.path().to_owned();
    inner.requests.lock().expect("lock").push(Received {
        path: path.clone(),
        headers,
        body: body.to_vec(),
        at: Instant::now(),
    });
    inner.arrived.notify_waiters();
    let mut held = inner.held.subscribe();
    let _ = held.wait_for(|held| !*held).await;
    let behavior = inner.behaviors.lock().expect("lock").get(&path).copied();
    match behavior.unwrap_or(Behavior::Status(200)) {
        Behavior::Status(code) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            format!("answered {code}"),
        ),
        Behavior::Hang(d) => {
            tokio::time::sleep(d).await;
            (StatusCode::OK, "late".to_owned())
        }
    }
}
