//! A host killed with SIGKILL in the middle of delivering loses no committed event: the real
//! `commerce-host` binary runs as a child process, is killed mid-delivery and restarted on the
//! same data folder, and every event whose change was acknowledged reaches the receiver.

use std::collections::HashSet;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use commerce_host_tests::ADMIN_TOKEN;
use commerce_host_tests::receiver::{Behavior, Receiver};
use serde_json::{Value, json};

/// Starts the binary on port 0 and returns it with its base URL.
async fn spawn_host(data: &Path) -> (Child, String) {
    commerce_host_tests::spawn_binary(
        Path::new(env!("CARGO_BIN_EXE_test-commerce-host")),
        data,
        &[
            ("COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"),
            // Two at a time against a slow receiver: the kill lands while deliveries are queued
            // and in flight.
            ("COMMERCE_HOST_DELIVERY_CONCURRENCY", "2"),
        ],
    )
    .await
}

async fn admin(http: &reqwest::Client, base: &str, path: &str, body: Value) -> Value {
    let response = http
        .post(format!("{base}{path}"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .expect("request");
    assert_eq!(response.status().as_u16(), 201, "{path}");
    response.json().await.expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_delivery_delivers_every_committed_event_after_restart() {
    let receiver = Receiver::start().await;
    receiver.set("/k", Behavior::Hang(Duration::from_millis(100)));
    let data = tempfile::tempdir().expect("temp dir");
    let http = reqwest::Client::new();
    let (mut child, base) = spawn_host(data.path()).await;

    let store = admin(
        &http,
        &base,
        "/admin/v1/stores",
        json!({"domain": "acme.example"}),
    )
    .await;
    let store = store["id"].as_str().expect("id").to_owned();
    let installs = format!("/admin/v1/stores/{store}/installations");
    admin(
        &http,
        &base,
        "/admin/v1/plugins",
        json!({"manifest": {"name": "listener", "version": "1.0.0", "contact_email": "dev@l.example",
            "scopes": ["customers.read", "customers.write"],
            "webhooks": [{"url": receiver.url("/k"), "events": ["customer.created"], "secret": "0123456789abcdef"}]}}),
    )
    .await;
    let listener = admin(&http, &base, &installs, json!({"plugin": "listener"})).await;
    let token = listener["token"].as_str().expect("token").to_owned();
    // Each acknowledged 201 is a committed customer.created event.
    let mut committed = HashSet::new();
    for i in 0..30 {
        let customer: Value = http
            .post(format!("{base}/v1/customers"))
            .bearer_auth(&token)
            .json(&json!({"email": format!("c{i}@example.com")}))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        committed.insert(customer["id"].as_str().expect("customer id").to_owned());
    }

    receiver.wait_for("/k", 4, Duration::from_secs(30)).await;
    child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix.
    child.wait().expect("reaped");
    let before = receiver.requests("/k").len();
    assert!(
        before < committed.len(),
        "the kill came before every event was delivered"
    );

    let (mut child, _base) = spawn_host(data.path()).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let missing = loop {
        let seen: HashSet<String> = receiver
            .requests("/k")
            .iter()
            .filter_map(|r| {
                r.json()["data"]["customer"]["id"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        let missing: Vec<_> = committed.difference(&seen).cloned().collect();
        if missing.is_empty() || Instant::now() > deadline {
            break missing;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(missing.is_empty(), "events never delivered: {missing:?}");
}
