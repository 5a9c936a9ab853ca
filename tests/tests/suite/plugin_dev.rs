//! `commerce-host plugin dev` against a running host: a scaffolded plugin is built, published and
//! installed; its log lines show up as events arrive; a saved change is rebuilt, published as the
//! next patch version and handles the next event; a change that does not build leaves the last
//! good version running. Prints the time from a saved change to the new version handling an
//! event (the README's figure).

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use commerce_host_tests::components::{repo_root, target_dir};
use commerce_host_tests::{ADMIN_TOKEN, ALL_SCOPES, TestHost};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The output of `plugin dev`, read line by line.
struct Dev {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Dev {
    /// Waits for a line containing `text`; panics with everything printed so far after `within`.
    async fn wait_for(&mut self, text: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => {
                    eprintln!("plugin dev | {line}");
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Ok(Ok(None)) | Ok(Err(_)) => {
                    let status = self.child.wait().await;
                    panic!(
                        "plugin dev ended ({status:?}) before {text:?}:\n{}",
                        self.seen.join("\n")
                    );
                }
                Err(_) => panic!(
                    "no {text:?} from plugin dev within {within:?}:\n{}",
                    self.seen.join("\n")
                ),
            }
        }
    }
}

async fn paid_order(host: &TestHost, store: &str, token: &str, n: usize) {
    let customer = host
        .call(
            token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": format!("c{n}@shop.example"), "first_name": "Ada"})),
        )
        .await
        .expect(201);
    let order: Value = host
        .call(
            token,
            Method::POST,
            "/v1/orders",
            Some(
                json!({"currency": "EUR", "customer_id": customer.body["id"],
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 1}]}),
            ),
        )
        .await
        .expect(201)
        .body;
    host.pay(store, &order).await.expect(200);
}

/// Saves `file` with `from` replaced by `to`, as an editor that writes a new file and renames it
/// over the old one: `plugin dev` never sees it half written (`std::fs::write` truncates first,
/// and on a loaded machine the truncated file once held still past the watcher's settling, so
/// that a build started from it and the write after it counted as one more change).
fn edit(file: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(file).expect("the source");
    assert!(text.contains(from), "{from:?} in {}", file.display());
    // Hidden, as editors' swap files are, so the watcher does not count it.
    let name = file.file_name().expect("a file").to_string_lossy();
    let saving = file.with_file_name(format!(".{name}.saving"));
    std::fs::write(&saving, text.replace(from, to)).expect("written");
    std::fs::rename(&saving, file).expect("saved");
}

#[tokio::test]
async fn plugin_dev_republishes_a_saved_change_and_prints_its_log_lines() {
    let host = TestHost::start().await;
    let store = host.create_store("dev.example").await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;

    let dir = tempfile::tempdir().expect("a folder");
    let crate_dir = dir.path().join("dev-thanks");
    let new = std::process::Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
        .args(["plugin", "new", "dev-thanks", "--dir"])
        .arg(&crate_dir)
        .arg("--sdk")
        .arg(repo_root().join("guest-sdk"))
        .output()
        .expect("the CLI runs");
    assert!(
        new.status.success(),
        "{}",
        String::from_utf8_lossy(&new.stderr)
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
        .args([
            "plugin",
            "dev",
            "--poll-ms",
            "50",
            "--store",
            "dev.example",
            "--host",
        ])
        .arg(&host.base)
        .args(["--admin-token", ADMIN_TOKEN, "--dir"])
        .arg(&crate_dir)
        // The wasm builds share the example plugins' target folder (the SDK's dependencies are
        // built there already).
        .env("CARGO_TARGET_DIR", target_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("plugin dev starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut dev = Dev {
        child,
        lines: BufReader::new(stdout).lines(),
        seen: Vec::new(),
    };

    let first = dev.wait_for("is live", Duration::from_secs(600)).await;
    assert!(
        first.contains("dev-thanks@0.1.0") && first.contains("installed as inst_"),
        "{first}"
    );
    assert!(first.contains("commerce:plugin@0.2.0"), "{first}");
    paid_order(&host, &store, &token, 1).await;
    dev.wait_for("thank-you for", Duration::from_secs(30)).await;

    // A saved change: rebuilt, published as 0.1.1, the same installation moved to it.
    let lib = crate_dir.join("src/lib.rs");
    let saved = Instant::now();
    edit(&lib, "thank-you for", "thanks, v2, for");
    let live = dev.wait_for("is live", Duration::from_secs(120)).await;
    let republished = saved.elapsed();
    assert!(
        live.contains("dev-thanks@0.1.1") && live.contains("upgraded installation"),
        "{live}"
    );
    paid_order(&host, &store, &token, 2).await;
    dev.wait_for("thanks, v2, for", Duration::from_secs(30))
        .await;
    let handled = saved.elapsed();
    eprintln!(
        "plugin dev: saved change → republished {:.2} s → handling its next event {:.2} s",
        republished.as_secs_f64(),
        handled.as_secs_f64()
    );

    // A change that does not compile: said so, and 0.1.1 keeps handling events.
    edit(&lib, "Ok(())\n    }\n}", "Ok(()) oops\n    }\n}");
    dev.wait_for("not deployed", Duration::from_secs(120)).await;
    paid_order(&host, &store, &token, 3).await;
    dev.wait_for("thanks, v2, for", Duration::from_secs(30))
        .await;
    let plugin = host
        .admin(Method::GET, "/admin/v1/plugins/dev-thanks", None)
        .await
        .expect(200);
    assert_eq!(plugin.body["version"], "0.1.1");
    edit(&lib, "Ok(()) oops", "Ok(())");
    let fixed = dev.wait_for("is live", Duration::from_secs(120)).await;
    assert!(fixed.contains("dev-thanks@0.1.2"), "{fixed}");

    // One installation throughout, on the newest version.
    let installations = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations"),
            None,
        )
        .await
        .expect(200);
    let dev_installs: Vec<&Value> = installations.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["plugin"] == "dev-thanks")
        .collect();
    assert_eq!(dev_installs.len(), 1, "{}", installations.body);
    assert_eq!(dev_installs[0]["version"], "0.1.2");
}

#[tokio::test]
async fn an_upgrade_moves_an_installation_to_the_new_scopes_and_keeps_its_token() {
    let host = TestHost::start().await;
    let store = host.create_store("upgrade.example").await;
    let publish = |version: &str, scopes: &[&str], webhooks: Value| {
        json!({"manifest": {"name": "grower", "version": version, "scopes": scopes,
            "contact_email": "dev@grower.example", "webhooks": webhooks}})
    };
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish("1.0.0", &["orders.read"], json!([]))),
    )
    .await
    .expect(201);
    let (inst, token) = host.install(&store, "grower").await;
    let upgrade = format!("/admin/v1/stores/{store}/installations/{inst}/upgrade");
    host.call(&token, Method::GET, "/v1/products", None)
        .await
        .assert_error(403, "missing_scope");

    // Already current: unchanged.
    let same = host.admin(Method::POST, &upgrade, None).await.expect(200);
    assert_eq!(same.body["version"], "1.0.0");

    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish(
            "1.1.0",
            &["orders.read", "products.read"],
            json!([]),
        )),
    )
    .await
    .expect(201);
    let moved = host.admin(Method::POST, &upgrade, None).await.expect(200);
    assert_eq!(moved.body["version"], "1.1.0");
    assert_eq!(
        moved.body["scopes"],
        json!(["orders.read", "products.read"])
    );
    // The same token, with the new scopes at once (the token cache follows the record).
    host.call(&token, Method::GET, "/v1/products", None)
        .await
        .expect(200);

    // Manifest webhooks are made at install: a version that changes them is not an upgrade.
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish(
            "1.2.0",
            &["orders.read", "products.read"],
            json!([{"url": "https://hooks.grower.example/orders", "events": ["order.paid"],
                "secret": "whsec-0123456789abcdef"}]),
        )),
    )
    .await
    .expect(201);
    host.admin(Method::POST, &upgrade, None)
        .await
        .assert_error(409, "webhooks_changed");
    let kept = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations/{inst}"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(kept.body["version"], "1.1.0");

    host.admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/installations/inst_01JAAAAAAAAAAAAAAAAAAAAAAA/upgrade"),
        None,
    )
    .await
    .assert_error(404, "not_found");
}
