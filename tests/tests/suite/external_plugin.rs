//! The external example plugin (`example-plugins/external-tagger`): a native binary built with
//! the SDK's client and verifier, published and installed through the CLI, run as a
//! child process against the real host, receiving real signed webhooks.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use commerce_guest_sdk::webhook;
use commerce_host::model::clock::SystemClock;
use commerce_host_tests::TestHost;
use commerce_host_tests::components::{plugin_dir, repo_root};
use reqwest::Method;
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};

const SECRET: &str = "external-tagger-secret-0123456789";

/// Builds the external-tagger binary once per test process; returns its path.
fn tagger_binary() -> PathBuf {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        // Its own target folder beside the workspace's, so that its build never waits on the
        // host's (it is a workspace of its own).
        let target = match std::env::var_os("CARGO_TARGET_DIR") {
            Some(dir) => PathBuf::from(dir).join("external-tagger"),
            None => repo_root().join("target").join("external-tagger"),
        };
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--manifest-path"])
            .arg(plugin_dir("external-tagger").join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .map_err(|e| format!("could not run cargo: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "building external-tagger failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(target.join("debug").join("external-tagger"))
    });
    match built {
        Ok(path) => path.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// A host on the wall clock (the plugin checks signature timestamps against its own clock)
/// that may deliver webhooks to 127.0.0.0/8.
async fn wall_clock_host() -> TestHost {
    TestHost::start_for_webhooks(|config| config.clock = Arc::new(SystemClock)).await
}

/// Publishes the plugin from its folder and installs it into `store` through the CLI's
/// `publish` and `install`; returns its token.
async fn install_tagger(host: &TestHost, store: &str) -> String {
    let cli =
        commerce_host::cli::client::HostClient::new(&host.base, commerce_host_tests::ADMIN_TOKEN);
    commerce_host::cli::plugin::publish(&cli, &plugin_dir("external-tagger"), None)
        .await
        .expect("published through the CLI");
    let installed = commerce_host::cli::plugin::install(&cli, store, "external-tagger")
        .await
        .expect("installed through the CLI");
    installed["token"].as_str().expect("token").to_owned()
}

/// The running plugin: killed when dropped.
struct Tagger {
    url: String,
    _child: tokio::process::Child,
}

/// Starts the binary with `token`; returns once it has subscribed and printed its URL.
async fn start_tagger(host: &TestHost, token: &str) -> Tagger {
    let binary = tokio::task::spawn_blocking(tagger_binary)
        .await
        .expect("build task");
    let mut child = tokio::process::Command::new(binary)
        .env("COMMERCE_HOST_URL", &host.base)
        .env("COMMERCE_TOKEN", token)
        .env("WEBHOOK_SECRET", SECRET)
        .env("LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("external-tagger starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("external-tagger printed its URL in time")
        .expect("stdout readable")
        .expect("a line before exit");
    let url = line
        .strip_prefix("external-tagger listening on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    Tagger { url, _child: child }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .expect("clock after 1970")
}

#[tokio::test]
async fn external_tagger_tags_every_new_order_external_seen() {
    let host = wall_clock_host().await;
    let store = host.create_store("tagger.example").await;
    let token = install_tagger(&host, &store).await;
    let tagger = start_tagger(&host, &token).await;

    // It subscribed itself to order.created at the URL it printed.
    let hooks = host
        .call(&token, Method::GET, "/v1/webhooks", None)
        .await
        .expect(200);
    assert_eq!(hooks.body["data"][0]["url"], tagger.url.as_str());
    assert_eq!(hooks.body["data"][0]["events"], json!(["order.created"]));

    // Another plugin places orders.
    host.publish("shop-front", &["orders.write"]).await;
    let (_, shop) = host.install(&store, "shop-front").await;
    let mut orders = Vec::new();
    for n in 0..3 {
        let order = host
            .call(
                &shop,
                Method::POST,
                "/v1/orders",
                Some(json!({
                    "currency": "EUR",
                    "tags": ["vip"],
                    "line_items": [{"title": format!("Mug {n}"), "unit_price": 1200, "quantity": 1}],
                })),
            )
            .await
            .expect(201);
        orders.push(order.body["id"].as_str().expect("order id").to_owned());
    }

    for id in &orders {
        let tags = host
            .eventually("the order to be tagged external-seen", || async {
                let order = host
                    .call(&token, Method::GET, &format!("/v1/orders/{id}"), None)
                    .await
                    .expect(200);
                let tags = order.body["tags"].clone();
                tags.as_array()
                    .is_some_and(|t| t.iter().any(|t| t == "external-seen"))
                    .then_some(tags)
            })
            .await;
        // The existing tags are kept.
        assert_eq!(tags, json!(["vip", "external-seen"]), "order {id}");
    }
}

#[tokio::test]
async fn external_tagger_answers_401_to_a_forged_webhook() {
    let host = wall_clock_host().await;
    let store = host.create_store("forged.example").await;
    let token = install_tagger(&host, &store).await;
    let tagger = start_tagger(&host, &token).await;

    let body = json!({
        "id": "evt_forged", "type": "order.created",
        "data": {"order": {"id": "ord_forged"}},
    })
    .to_string();
    let now = now_unix();
    let post = |signature: Option<String>| {
        let mut req = host
            .http
            .post(&tagger.url)
            .header("content-type", "application/json")
            .header(webhook::TIMESTAMP_HEADER, now.to_string())
            .body(body.clone());
        if let Some(signature) = signature {
            req = req.header(webhook::SIGNATURE_HEADER, signature);
        }
        req.send()
    };

    let signed_with_another_secret =
        webhook::sign("not-the-subscription-secret", now, body.as_bytes());
    let forged = post(Some(signed_with_another_secret)).await.expect("sent");
    assert_eq!(forged.status(), 401);
    let unsigned = post(None).await.expect("sent");
    assert_eq!(unsigned.status(), 401);

    // The same request signed with the right secret passes the check (and then fails to find
    // the order, which the plugin reports as a 500 for the host to retry).
    let genuine = post(Some(webhook::sign(SECRET, now, body.as_bytes())))
        .await
        .expect("sent");
    assert_eq!(genuine.status(), 500);
}
