//! An external plugin: a plain HTTP service outside the host.
//!
//! On start it listens on `LISTEN`, subscribes its own URL to `order.created` with
//! `POST /v1/webhooks`, and prints `external-tagger listening on <url>`. Each delivery is verified
//! with the subscription's secret (401 when the signature is wrong), deduplicated by event id
//! (deliveries are at least once), and the order is tagged `external-seen` through the REST API,
//! keeping its other tags.
//!
//! Environment: `COMMERCE_HOST_URL`, `COMMERCE_TOKEN` (the installation's project token),
//! `WEBHOOK_SECRET` (16 to 256 bytes), `LISTEN` (default `127.0.0.1:0`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use commerce_guest_sdk::client::{Client, NewWebhook, PageQuery, UpdateOrder, WebhookPatch};
use commerce_guest_sdk::webhook;
use futures::TryStreamExt as _;
use serde::Deserialize;

/// The tag this plugin adds.
const TAG: &str = "external-seen";
/// Where the host delivers.
const PATH: &str = "/webhooks";

struct App {
    client: Client,
    secret: String,
    /// Event ids handled (or in hand). In memory: a restarted plugin may tag an order twice,
    /// which is harmless because tagging is idempotent.
    seen: Mutex<HashSet<String>>,
}

/// The part of the event envelope this plugin reads.
#[derive(Deserialize)]
struct Envelope {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    #[serde(default)]
    order: Option<OrderRef>,
}

#[derive(Deserialize)]
struct OrderRef {
    id: String,
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("set {name}"))
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("external-tagger: {e}");
        std::process::exit(1);
    }
}

async fn run() -> Result<(), String> {
    let host = env("COMMERCE_HOST_URL")?;
    let token = env("COMMERCE_TOKEN")?;
    let secret = env("WEBHOOK_SECRET")?;
    let listen = std::env::var("LISTEN").unwrap_or_else(|_| "127.0.0.1:0".into());

    let client = Client::new(host, token).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let url = format!("http://{addr}{PATH}");

    let app = Arc::new(App {
        client: client.clone(),
        secret: secret.clone(),
        seen: Mutex::new(HashSet::new()),
    });
    let router = Router::new()
        .route(PATH, post(receive))
        .with_state(app);
    // Listen before subscribing, so that the first delivery finds the receiver up.
    let server = tokio::spawn(async move { axum::serve(listener, router).await });

    subscribe(&client, &url, &secret).await?;
    println!("external-tagger listening on {url}");

    match server.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("server stopped: {e}")),
        Err(e) => Err(format!("server task failed: {e}")),
    }
}

/// Subscribes `url` to `order.created`, reusing a subscription of ours to the same URL (so that
/// a restart does not add one each time) with the current secret.
async fn subscribe(client: &Client, url: &str, secret: &str) -> Result<(), String> {
    let existing = client
        .webhooks(PageQuery::default())
        .try_filter(|w| futures::future::ready(w.url == url))
        .try_next()
        .await
        .map_err(|e| format!("listing webhooks: {e}"))?;
    let events = vec!["order.created".to_owned()];
    match existing {
        Some(webhook) => {
            let patch = WebhookPatch {
                events: Some(events),
                secret: Some(secret.to_owned()),
                ..WebhookPatch::default()
            };
            client
                .update_webhook(&webhook.id, &patch)
                .await
                .map_err(|e| format!("updating webhook: {e}"))?;
        }
        None => {
            let new = NewWebhook {
                url: url.to_owned(),
                events,
                secret: secret.to_owned(),
            };
            client
                .create_webhook(&new)
                .await
                .map_err(|e| format!("subscribing: {e}"))?;
        }
    }
    Ok(())
}

/// One delivery: verify, deduplicate, tag.
async fn receive(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let verified = webhook::verify(
        &app.secret,
        header(webhook::TIMESTAMP_HEADER),
        header(webhook::SIGNATURE_HEADER),
        &body,
        now,
    );
    if verified.is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(event) = serde_json::from_slice::<Envelope>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let Some(order) = event.data.order.filter(|_| event.kind == "order.created") else {
        return StatusCode::NO_CONTENT;
    };
    if !lock(&app.seen).insert(event.id.clone()) {
        return StatusCode::OK;
    }
    match tag(&app.client, &order.id).await {
        Ok(()) => StatusCode::OK,
        Err(e) => {
            eprintln!("external-tagger: tagging {}: {e}", order.id);
            // Forget the event so that the host's retry is handled again.
            lock(&app.seen).remove(&event.id);
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// Adds [`TAG`] to the order's current tags (read fresh: the event's copy may be stale).
async fn tag(client: &Client, order_id: &str) -> Result<(), commerce_guest_sdk::client::Error> {
    let order = client.get_order(order_id).await?;
    if order.tags.iter().any(|t| t == TAG) {
        return Ok(());
    }
    let mut tags = order.tags;
    tags.push(TAG.to_owned());
    let patch = UpdateOrder {
        tags: Some(tags),
        ..UpdateOrder::default()
    };
    client.update_order(order_id, &patch).await?;
    Ok(())
}

fn lock(seen: &Mutex<HashSet<String>>) -> std::sync::MutexGuard<'_, HashSet<String>> {
    // A poisoned set is still a valid set of ids.
    seen.lock().unwrap_or_else(|e| e.into_inner())
}
