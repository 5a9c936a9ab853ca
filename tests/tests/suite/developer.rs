//! Plugin developers: API keys made and revoked in the developer console, the developer API
//! (`/dev/v1/plugins`) publishing only their own plugins, and `commerce-host login` making
//! `plugin publish` publish as them.

use std::process::Command;

use std::time::Duration;

use commerce_host_tests::components::{component_file, plugin_dir, publish_body};
use commerce_host_tests::pages::{Browser, developer_signed_in, make_key, owner_signed_in};
use commerce_host_tests::receiver::{Behavior, Receiver};
use commerce_host_tests::{ADMIN_TOKEN, ALL_SCOPES, TestHost};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(10);

fn external(name: &str, version: &str) -> Value {
    json!({"manifest": {"name": name, "version": version, "scopes": ["orders.read"],
        "contact_email": "dev@tools.example"}})
}

#[tokio::test]
async fn a_developer_publishes_their_own_plugins_with_a_key_from_the_console() {
    let host = TestHost::start().await;
    let mut dev = developer_signed_in(&host, "dev@tools.example", "correct horse").await;
    assert_eq!(dev.get("/").await.location.as_deref(), Some("/developer"));
    assert!(dev.get("/developer").await.body.contains("No plugins yet"));
    let key = make_key(&mut dev, "laptop").await;

    let published = host
        .send(
            Method::POST,
            "/dev/v1/plugins",
            Some(key.as_str()),
            Some(external("tagger", "1.0.0")),
        )
        .await
        .expect(201);
    assert!(
        published.body["owner"]
            .as_str()
            .is_some_and(|o| o.starts_with("acct_"))
    );
    host.send(
        Method::POST,
        "/dev/v1/plugins",
        Some(key.as_str()),
        Some(external("tagger", "1.1.0")),
    )
    .await
    .expect(201);
    let mine = host
        .send(Method::GET, "/dev/v1/plugins", Some(key.as_str()), None)
        .await
        .expect(200);
    assert_eq!(mine.body["data"][0]["name"], "tagger");
    assert_eq!(mine.body["data"][0]["version"], "1.1.0");
    let console = dev.get("/developer").await;
    assert!(
        console.body.contains("tagger") && console.body.contains("1.1.0"),
        "{}",
        console.body
    );
    assert!(console.body.contains("laptop"), "{}", console.body);

    // Another developer's plugin, or the operator's, is not theirs to publish.
    let mut other = developer_signed_in(&host, "other@tools.example", "battery staple").await;
    let other_key = make_key(&mut other, "ci").await;
    host.send(
        Method::POST,
        "/dev/v1/plugins",
        Some(other_key.as_str()),
        Some(external("tagger", "2.0.0")),
    )
    .await
    .assert_error(403, "not_your_plugin");
    host.publish("shop", &ALL_SCOPES).await;
    host.send(
        Method::POST,
        "/dev/v1/plugins",
        Some(key.as_str()),
        Some(external("shop", "9.0.0")),
    )
    .await
    .assert_error(403, "not_your_plugin");
    // The operator publishes any, and the plugin stays its developer's.
    let by_operator = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(external("tagger", "1.2.0")),
        )
        .await
        .expect(201);
    assert_eq!(by_operator.body["owner"], published.body["owner"]);

    // Revoked, the key stops working at once; a merchant has no console.
    let console = dev.get("/developer").await;
    let at = console.body.find("id=\"key-").expect("the key's row") + "id=\"key-".len();
    let id = console.body[at..at + console.body[at..].find('"').expect("quote")].to_owned();
    let revoked = dev
        .post(
            &format!("/developer/keys/{id}/revoke"),
            &[("csrf", &console.csrf())],
        )
        .await;
    assert_eq!(revoked.location.as_deref(), Some("/developer"));
    host.send(Method::GET, "/dev/v1/plugins", Some(key.as_str()), None)
        .await
        .assert_error(401, "unauthorized");
    host.send(Method::GET, "/dev/v1/plugins", Some(ADMIN_TOKEN), None)
        .await
        .assert_error(401, "unauthorized");
    let store = host.create_store("merchant.example").await;
    let mut owner = owner_signed_in(&host, &store, "ada@merchant.example", "correct horse").await;
    assert_eq!(owner.get("/developer").await.status, StatusCode::NOT_FOUND);
    let forged = other.post("/developer/keys", &[("name", "x")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
}

// The CLI runs as a child process while the host serves in this one: a runtime with workers to
// spare keeps serving while the test waits on the child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_makes_plugin_publish_publish_as_the_developer() {
    let host = TestHost::start().await;
    let mut dev = developer_signed_in(&host, "dev@thanks.example", "correct horse").await;
    let key = make_key(&mut dev, "laptop").await;
    let config = tempfile::tempdir().expect("a config folder");
    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
            .args(args)
            .env("COMMERCE_HOST_CONFIG_DIR", config.path())
            .env_remove("COMMERCE_HOST_ADMIN_TOKEN")
            .env_remove("COMMERCE_HOST_API_KEY")
            .output()
            .expect("the CLI runs")
    };
    let wrong = cli(&["login", "--host", &host.base, "--key", "chk_not-a-key"]);
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("unauthorized"));
    let login = cli(&["login", "--host", &host.base, "--key", &key]);
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
    let stored = config.path().join("credentials.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&stored)
            .expect("stored")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let dir = plugin_dir("order-thanks");
    let component = component_file("order-thanks");
    let published = cli(&[
        "plugin",
        "publish",
        "--host",
        &host.base,
        "--dir",
        dir.to_str().expect("utf-8"),
        "--component",
        component.to_str().expect("utf-8"),
    ]);
    assert!(
        published.status.success(),
        "{}",
        String::from_utf8_lossy(&published.stderr)
    );
    let plugin = host
        .admin(Method::GET, "/admin/v1/plugins/order-thanks", None)
        .await
        .expect(200);
    assert!(
        plugin.body["owner"]
            .as_str()
            .is_some_and(|o| o.starts_with("acct_")),
        "{}",
        plugin.body
    );
    let mine = host
        .send(Method::GET, "/dev/v1/plugins", Some(key.as_str()), None)
        .await
        .expect(200);
    assert_eq!(mine.body["data"][0]["name"], "order-thanks");
}

/// Publishes `name` with the developer's key, installs it in a new store and returns
/// (store, installation, token).
async fn installed_by_developer(
    host: &TestHost,
    key: &str,
    body: Value,
    domain: &str,
) -> (String, String, String) {
    let name = body["manifest"]["name"].as_str().expect("name").to_owned();
    host.send(Method::POST, "/dev/v1/plugins", Some(key), Some(body))
        .await
        .expect(201);
    let store = host.create_store(domain).await;
    let (inst, token) = host.install(&store, &name).await;
    (store, inst, token)
}

#[tokio::test]
async fn a_developer_finds_a_failed_delivery_in_the_console_replays_it_and_sees_the_new_attempt() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/hooks", Behavior::Status(500));
    let mut dev = developer_signed_in(&host, "dev@tools.example", "correct horse").await;
    let key = make_key(&mut dev, "laptop").await;
    let mut body = external("tagger", "1.0.0");
    body["manifest"]["scopes"] = json!(["customers.read"]);
    let (store, inst, token) = installed_by_developer(&host, &key, body, "acme.example").await;
    let mut newer = external("tagger", "1.0.1");
    newer["manifest"]["scopes"] = json!(["customers.read"]);
    host.send(
        Method::POST,
        "/dev/v1/plugins",
        Some(key.as_str()),
        Some(newer),
    )
    .await
    .expect(201);
    let wh = host
        .subscribe(&token, &receiver.url("/hooks"), &["customer.created"])
        .await["id"]
        .as_str()
        .expect("webhook id")
        .to_owned();
    host.fire_customer_created(&store).await;
    let first = receiver.wait_for("/hooks", 1, WAIT).await;
    let event = first[0].json()["id"].as_str().expect("event id").to_owned();
    let failed = host.exhaust_delivery(&token, &wh, &event).await;
    assert_eq!(failed["attempts"], 7);

    // The plugin's versions and the store that installed it.
    let console = dev.get("/developer").await;
    let installation = format!("/developer/stores/{store}/installations/{inst}");
    assert!(console.body.contains("1.0.0, 1.0.1"), "{}", console.body);
    assert!(console.body.contains("acme.example"), "{}", console.body);
    assert!(console.body.contains(&installation), "{}", console.body);

    // The subscription, paused, with its reason.
    let page = dev.get(&installation).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains(&receiver.url("/hooks")), "{}", page.body);
    assert!(page.body.contains("paused"), "{}", page.body);
    assert!(page.body.contains("HTTP 500"), "{}", page.body);

    // The failed delivery, with every attempt.
    let target = format!("{installation}/targets/{wh}");
    let failed_only = dev.get(&format!("{target}?status=failed")).await;
    assert!(failed_only.body.contains(&event), "{}", failed_only.body);
    let delivery = format!("{target}/deliveries/{event}");
    let shown = dev.get(&delivery).await;
    assert_eq!(shown.status, StatusCode::OK, "{}", shown.body);
    assert_eq!(shown.body.matches("class=\"attempt failed\"").count(), 7);
    assert!(shown.body.contains("answered 500"), "{}", shown.body);

    // The same rule as the API: no replay while paused.
    let csrf = shown.csrf();
    let refused = dev
        .post(
            &format!("{target}/replay"),
            &[("csrf", &csrf), ("event_id", &event), ("back", &delivery)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.body);
    assert!(refused.body.contains("resume it before replaying"));

    // A form without its token is refused and changes nothing.
    let forged = dev.post(&format!("{target}/resume"), &[]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    assert!(dev.get(&installation).await.body.contains("paused"));

    receiver.set("/hooks", Behavior::Status(204));
    let resumed = dev
        .post(&format!("{target}/resume"), &[("csrf", &csrf)])
        .await;
    assert_eq!(resumed.location.as_deref(), Some(target.as_str()));
    assert!(dev.get(&target).await.body.contains("Resumed"));

    let replayed = dev
        .post(
            &format!("{target}/replay"),
            &[("csrf", &csrf), ("event_id", &event), ("back", &delivery)],
        )
        .await;
    assert_eq!(replayed.location.as_deref(), Some(delivery.as_str()));
    let again = receiver.wait_for("/hooks", 8, WAIT).await;
    assert_eq!(again[7].json()["id"], event.as_str(), "the same event id");
    let page = host
        .eventually("the new attempt on the delivery's page", || {
            let path = delivery.clone();
            let mut dev = dev.clone();
            async move {
                let page = dev.get(&path).await;
                page.body.contains("class=\"attempt ok\"").then_some(page)
            }
        })
        .await;
    assert!(page.body.contains("succeeded"), "{}", page.body);
    assert!(
        page.body.contains("Replayed: 1 delivery is queued"),
        "{}",
        page.body
    );
    assert_eq!(page.body.matches("class=\"attempt ").count(), 8);

    // Every failed delivery since a time: the one left is the one already replayed, so none.
    let since = dev
        .post(
            &format!("{target}/replay"),
            &[("csrf", &csrf), ("since", "2026-01-01T00:00:00Z")],
        )
        .await;
    assert_eq!(since.location.as_deref(), Some(target.as_str()));
    assert!(
        dev.get(&target)
            .await
            .body
            .contains("0 deliveries are queued")
    );
    let bad = dev
        .post(
            &format!("{target}/replay"),
            &[("csrf", &csrf), ("since", "yesterday")],
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{}", bad.body);
    assert!(bad.body.contains("RFC 3339"), "{}", bad.body);

    // The secret, rotated, is shown once; deliveries then carry both signatures.
    let rotated = dev
        .post(&format!("{target}/rotate-secret"), &[("csrf", &csrf)])
        .await;
    assert_eq!(rotated.status, StatusCode::OK, "{}", rotated.body);
    let marker = "<code class=\"token\">";
    let at = rotated.body.find(marker).expect("the new secret") + marker.len();
    let secret = &rotated.body[at..at + rotated.body[at..].find('<').expect("end")];
    assert!(secret.starts_with("whsec_"), "{secret}");
    assert!(!dev.get(&installation).await.body.contains(secret));
    host.fire_customer_created(&store).await;
    let latest = receiver.wait_for("/hooks", 9, WAIT).await;
    assert!(latest[8].header("x-service-signature-previous").is_some());

    // Nobody else's: another developer and the store's owner get 404 for every page and form.
    let mut other = developer_signed_in(&host, "rival@tools.example", "another horse").await;
    let theirs = other.get("/developer").await.csrf();
    for path in [&installation, &target, &delivery] {
        assert_eq!(
            other.get(path).await.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    for action in ["resume", "replay", "rotate-secret"] {
        let tried = other
            .post(
                &format!("{target}/{action}"),
                &[("csrf", &theirs), ("event_id", &event)],
            )
            .await;
        assert_eq!(tried.status, StatusCode::NOT_FOUND, "{action}");
    }
    let mut owner = owner_signed_in(&host, &store, "owner@acme.example", "shop horse").await;
    assert_eq!(owner.get(&installation).await.status, StatusCode::NOT_FOUND);
    let mut nobody = Browser::new(&host);
    assert_eq!(
        nobody.get(&installation).await.location.as_deref(),
        Some("/sign-in")
    );
}

#[tokio::test]
async fn the_console_shows_a_components_invocations_with_the_lines_it_logged() {
    let host = TestHost::start().await;
    let mut dev = developer_signed_in(&host, "dev@tools.example", "correct horse").await;
    let key = make_key(&mut dev, "laptop").await;
    let (store, inst, _) =
        installed_by_developer(&host, &key, publish_body("order-thanks"), "thanks.example").await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, shop) = host.install(&store, "shop").await;
    let order = host.place_order(&shop).await;
    host.pay(&store, &order).await.expect(200);
    let id = order["id"].as_str().expect("order id");

    let installation = format!("/developer/stores/{store}/installations/{inst}");
    let page = dev.get(&installation).await;
    assert!(page.body.contains("order.paid"), "{}", page.body);
    let component = format!("{installation}/targets/component");
    let shown = host
        .eventually("the invocation with its log line", || {
            let mut dev = dev.clone();
            let path = component.clone();
            async move {
                let page = dev.get(&path).await;
                page.body.contains("class=\"attempt ok\"").then_some(page)
            }
        })
        .await;
    assert!(
        shown.body.contains(&format!(
            "info: order {id} has no customer: no thank-you to send"
        )),
        "{}",
        shown.body
    );
    assert!(shown.body.contains("succeeded"), "{}", shown.body);
}

// The CLI runs as a child process while the host serves in this one (see above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_run_replays_a_real_invocation_on_the_local_build() {
    let host = TestHost::start().await;
    let mut dev = developer_signed_in(&host, "dev@thanks.example", "correct horse").await;
    let key = make_key(&mut dev, "laptop").await;
    let (store, inst, _) =
        installed_by_developer(&host, &key, publish_body("order-thanks"), "thanks.example").await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, shop) = host.install(&store, "shop").await;
    let customer = host
        .call(
            &shop,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "ada@shop.example", "first_name": "Ada"})),
        )
        .await
        .expect(201)
        .body["id"]
        .as_str()
        .expect("customer id")
        .to_owned();
    let order = host
        .call(
            &shop,
            Method::POST,
            "/v1/orders",
            Some(json!({"currency": "EUR", "customer_id": customer,
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 1}]})),
        )
        .await
        .expect(201)
        .body;
    host.pay(&store, &order).await.expect(200);
    let order_id = order["id"].as_str().expect("order id").to_owned();
    let attempts = format!("/admin/v1/stores/{store}/installations/{inst}/attempts");
    let invocation = host
        .eventually("the invocation", || async {
            let page = host.admin(Method::GET, &attempts, None).await.expect(200);
            let newest = &page.body["data"][0];
            (newest["succeeded"] == true).then(|| newest["id"].as_str().map(str::to_owned))?
        })
        .await;

    // What the invocation saw, for its developer only.
    let path = format!("/dev/v1/invocations/{invocation}");
    let saw = host
        .send(Method::GET, &path, Some(key.as_str()), None)
        .await
        .expect(200)
        .body;
    assert_eq!(saw["plugin"], "order-thanks");
    assert_eq!(saw["event"]["type"], "order.paid");
    assert_eq!(saw["event"]["data"]["order"]["id"], order_id.as_str());
    let kinds: Vec<(String, String)> = saw["recording"]["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| (r["kind"].to_string(), r["id"].to_string()))
        .collect();
    assert!(
        kinds.contains(&("\"order\"".into(), format!("\"{order_id}\""))),
        "{saw}"
    );
    // The customer the thank-you went to, without what the plugin may not read (it has no
    // `customers.read`): a placeholder address stands in for theirs.
    assert!(
        kinds.contains(&("\"customer\"".into(), format!("\"{customer}\""))),
        "{saw}"
    );
    assert!(!saw.to_string().contains("ada@shop.example"), "{saw}");
    assert!(
        saw.to_string()
            .contains(&format!("{customer}@replay.invalid")),
        "{saw}"
    );
    let mut rival = developer_signed_in(&host, "rival@thanks.example", "another horse").await;
    let rival_key = make_key(&mut rival, "ci").await;
    host.send(Method::GET, &path, Some(rival_key.as_str()), None)
        .await
        .assert_error(404, "not_found");

    // The order changes afterwards; the replay still sees it as the invocation did.
    host.call(
        &shop,
        Method::PATCH,
        &format!("/v1/orders/{order_id}"),
        Some(json!({"note": "changed after the invocation"})),
    )
    .await
    .expect(200);
    let again = host
        .send(Method::GET, &path, Some(key.as_str()), None)
        .await
        .expect(200)
        .body;
    assert_eq!(again["recording"], saw["recording"], "kept as it was read");
    assert!(!again.to_string().contains("changed after the invocation"));

    let config = tempfile::tempdir().expect("a config folder");
    let component = component_file("order-thanks");
    let manifest = plugin_dir("order-thanks").join("plugin.toml");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "plugin",
            "run",
            component.to_str().expect("utf-8"),
            "--manifest",
            manifest.to_str().expect("utf-8"),
            "--replay",
            &invocation,
            "--host",
            &host.base,
        ];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
            .args(&args)
            .env("COMMERCE_HOST_CONFIG_DIR", config.path())
            .env_remove("COMMERCE_HOST_API_KEY")
            .output()
            .expect("the CLI runs")
    };
    let keyless = run(&[]);
    assert!(!keyless.status.success());
    assert!(
        String::from_utf8_lossy(&keyless.stderr).contains("commerce-host login"),
        "{}",
        String::from_utf8_lossy(&keyless.stderr)
    );
    let replayed = run(&["--key", &key]);
    let out = String::from_utf8_lossy(&replayed.stdout);
    assert!(
        replayed.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    assert!(
        out.contains(&format!(
            "replaying invocation {invocation} of order-thanks@"
        )),
        "{out}"
    );
    assert!(
        out.contains(&saw["event"]["id"].as_str().expect("event id").to_owned()),
        "{out}"
    );
    assert!(out.contains("orders.get"), "{out}");
    assert!(
        out.contains(&format!("thank-you for {order_id} queued")),
        "{out}"
    );
    assert!(out.contains(&format!("{customer}@replay.invalid")), "{out}");
    let rivals = run(&["--key", &rival_key]);
    assert!(!rivals.status.success());
    assert!(String::from_utf8_lossy(&rivals.stderr).contains("not_found"));
}
