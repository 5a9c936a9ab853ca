//! Audit findings about components and the delivery engine (issue 11): a guest blocked inside
//! WASI is stopped at its deadline and SIGTERM still ends the host, sleeping components cannot hold
//! up webhooks, slow receivers of one plugin leave the engine to other stores, a component does not
//! re-trigger itself through its own writes and chains of components end, and an uninstalled
//! component reaches nothing. (The memory limit over several memories is a unit test of
//! `plugins::limits`; the shares of the engine are unit tests of `delivery::fair`.)

use std::time::Duration;

use base64::Engine as _;
use commerce_host_tests::components::component;
use commerce_host_tests::receiver::{Behavior, Receiver};
use commerce_host_tests::{ALL_SCOPES, TestHost};
use reqwest::Method;
use serde_json::{Value, json};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Publishes the `hostile` example plugin as `name` with `scopes`, receiving `events`.
async fn publish_hostile(
    host: &TestHost,
    name: &str,
    scopes: &[&str],
    events: &[&str],
    limits: Value,
) {
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({
            "manifest": {
                "name": name,
                "version": "1.0.0",
                "scopes": scopes,
                "contact_email": "dev@hostile.example",
                "events": events,
                "limits": limits,
            },
            "component": b64(&component("hostile")),
        })),
    )
    .await
    .expect(201);
}

/// Publishes the `hostile` example plugin as `sleeper`, with a deadline of `timeout_ms`.
async fn publish_sleeper(host: &TestHost, timeout_ms: u64) {
    publish_hostile(
        host,
        "sleeper",
        &["orders.read"],
        &["plugin.configured"],
        json!({ "timeout_ms": timeout_ms }),
    )
    .await;
}

/// Installs `sleeper` in `stores` new stores and sends each `events` events that put it to
/// sleep (in WASI, until its deadline); returns each store and installation.
async fn sleeping(host: &TestHost, stores: usize, events: usize) -> Vec<(String, String)> {
    let mut sleepers = Vec::new();
    for s in 0..stores {
        let store = host.create_store(&format!("sleepy{s}.example")).await;
        let inst = install_configured(host, &store, "sleeper", json!({"mode": "sleep"})).await;
        for n in 1..events {
            configure(host, &store, &inst, json!({"mode": "sleep", "n": n})).await;
        }
        sleepers.push((store, inst));
    }
    sleepers
}

/// Asserts that none of `sleepers` has an attempt recorded yet (each still asleep).
async fn assert_asleep(host: &TestHost, sleepers: &[(String, String)], what: &str) {
    for (store, inst) in sleepers {
        assert!(attempts(host, store, inst).await.is_empty(), "{what}");
    }
}

/// Installs `plugin` in `store` and sets its settings (which fires `plugin.configured`).
async fn install_configured(host: &TestHost, store: &str, plugin: &str, settings: Value) -> String {
    let (inst, _) = host.install(store, plugin).await;
    configure(host, store, &inst, settings).await;
    inst
}

async fn configure(host: &TestHost, store: &str, inst: &str, settings: Value) {
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/installations/{inst}/settings"),
        Some(json!({ "settings": settings })),
    )
    .await
    .expect(200);
}

async fn attempts(host: &TestHost, store: &str, inst: &str) -> Vec<Value> {
    host.admin(
        Method::GET,
        &format!("/admin/v1/stores/{store}/installations/{inst}/attempts?limit=250"),
        None,
    )
    .await
    .expect(200)
    .body["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn wait_attempts(host: &TestHost, store: &str, inst: &str, n: usize) -> Vec<Value> {
    host.eventually(&format!("{n} attempts"), || async {
        let got = attempts(host, store, inst).await;
        (got.len() >= n).then_some(got)
    })
    .await
}

async fn banner_count(host: &TestHost, store: &str) -> usize {
    host.admin(
        Method::GET,
        &format!("/admin/v1/stores/{store}/banners"),
        None,
    )
    .await
    .expect(200)
    .body["data"]
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test]
async fn a_component_blocked_in_a_wasi_sleep_is_stopped_at_its_deadline() {
    let host = TestHost::start().await;
    publish_sleeper(&host, 1000).await;
    let store = host.create_store("sleepy.example").await;
    let inst = install_configured(&host, &store, "sleeper", json!({"mode": "sleep"})).await;
    let attempt = wait_attempts(&host, &store, &inst, 1).await.remove(0);
    assert_eq!(attempt["succeeded"], false, "{attempt}");
    let error = attempt["error"].as_str().expect("error");
    assert!(error.contains("wall-clock"), "{error}");
    // The guest asked for 60 s; the limit is 1 s.
    let took = attempt["duration_ms"].as_u64().expect("duration");
    assert!((1000..5000).contains(&took), "held its slot {took} ms");
}

#[tokio::test]
async fn a_component_reads_the_settings_of_the_moment_at_every_event() {
    // The host keeps an installation's settings in memory between invocations: a change must
    // reach the very next one.
    let host = TestHost::start().await;
    publish_hostile(
        &host,
        "moody",
        &["orders.read"],
        &["plugin.configured"],
        json!({}),
    )
    .await;
    let store = host.create_store("moody.example").await;
    let inst = install_configured(&host, &store, "moody", json!({"mode": "fail"})).await;
    let first = wait_attempts(&host, &store, &inst, 1).await.remove(0);
    assert_eq!(first["succeeded"], false, "{first}");
    for (n, mode) in [(2, "quiet"), (3, "fail"), (4, "quiet")] {
        configure(&host, &store, &inst, json!({ "mode": mode })).await;
        let all = wait_attempts(&host, &store, &inst, n).await;
        assert_eq!(all.len(), n, "one attempt per event: {all:?}");
        let succeeded = all.iter().filter(|a| a["succeeded"] == true).count();
        assert_eq!(succeeded, n / 2, "mode {mode} at attempt {n}: {all:?}");
    }
}

#[tokio::test]
async fn sleeping_components_in_eight_stores_do_not_hold_up_webhooks() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    // The longest deadline there is: without the fixes each of these holds a slot for 60 s.
    publish_sleeper(&host, 10000).await;
    let sleepers = sleeping(&host, 8, 8).await;

    let receiver = Receiver::start().await;
    let (_, token) = host.store_with_plugin("awake.example", &ALL_SCOPES).await;
    host.subscribe(&token, &receiver.url("/hook"), &["customer.created"])
        .await;
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "awake@example.com"})),
    )
    .await
    .expect(201);
    receiver.wait_for("/hook", 1, Duration::from_secs(5)).await;
    // Delivered while every sleeper that started is still asleep.
    assert_asleep(
        &host,
        &sleepers,
        "the webhook waited for a sleeping component",
    )
    .await;
}

#[tokio::test]
async fn sleeping_components_in_four_stores_do_not_hold_up_another_stores_component() {
    // Invocations run on the engine's own threads, as many awake as there are cores: sixteen
    // guests asleep in WASI hold sixteen threads, and another store's component must still run
    // at once (a pool of as many threads as cores would leave it queued until a deadline).
    let host = TestHost::start().await;
    publish_sleeper(&host, 10000).await;
    publish_hostile(
        &host,
        "quick",
        &["orders.read"],
        &["plugin.configured"],
        json!({}),
    )
    .await;
    let sleepers = sleeping(&host, 4, 4).await;
    // Their invocations started (each takes a thread and sleeps for its 10 s).
    tokio::time::sleep(Duration::from_millis(500)).await;

    let store = host.create_store("awake.example").await;
    let inst = install_configured(&host, &store, "quick", json!({"mode": "fail"})).await;
    let attempt = wait_attempts(&host, &store, &inst, 1).await.remove(0);
    assert!(
        attempt["error"]
            .as_str()
            .is_some_and(|e| e.contains("on purpose")),
        "{attempt}"
    );
    // Made while every sleeper is still asleep.
    assert_asleep(&host, &sleepers, "the component waited for a sleeping one").await;
}

#[tokio::test]
async fn a_component_is_not_re_triggered_by_its_own_writes() {
    let host = TestHost::start().await;
    let events = ["customer.created", "customer.updated"];
    publish_hostile(
        &host,
        "echo",
        &["customers.read", "customers.write"],
        &events,
        json!({}),
    )
    .await;
    let store = host.create_store("echo.example").await;
    let inst = install_configured(&host, &store, "echo", json!({"mode": "echo"})).await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;

    for email in ["one@example.com", "two@example.com"] {
        host.call(
            &token,
            Method::POST,
            "/v1/customers",
            Some(json!({ "email": email })),
        )
        .await
        .expect(201);
    }
    // One attempt per customer.created; each wrote the customer once.
    let got = wait_attempts(&host, &store, &inst, 2).await;
    assert!(got.iter().all(|a| a["succeeded"] == true), "{got:?}");
    host.eventually("the two updates", || async {
        (host.events(&store, "customer.updated").await.len() == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = attempts(&host, &store, &inst).await;
    assert_eq!(
        got.len(),
        2,
        "its own customer.updated never came back: {got:?}"
    );
    assert!(got.iter().all(|a| a["event_type"] == "customer.created"));
    assert_eq!(host.events(&store, "customer.updated").await.len(), 2);
}

#[tokio::test]
async fn two_components_that_trigger_each_other_stop_after_the_chain_limit() {
    let host = TestHost::start().await;
    let events = ["customer.created", "customer.updated"];
    let scopes = ["customers.read", "customers.write"];
    publish_hostile(&host, "ping", &scopes, &events, json!({})).await;
    publish_hostile(&host, "pong", &scopes, &events, json!({})).await;
    let store = host.create_store("pingpong.example").await;
    let ping = install_configured(
        &host,
        &store,
        "ping",
        json!({"mode": "echo", "tag": "ping"}),
    )
    .await;
    let pong = install_configured(
        &host,
        &store,
        "pong",
        json!({"mode": "echo", "tag": "pong"}),
    )
    .await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "ball@example.com"})),
    )
    .await
    .expect(201);

    // Both handle customer.created (chain depth 1), then each other's updates at depths 2, 3
    // and 4; the updates made at depth 4 reach no component.
    host.eventually("the chain to end", || async {
        (host.events(&store, "customer.updated").await.len() == 8).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(host.events(&store, "customer.updated").await.len(), 8);
    for inst in [&ping, &pong] {
        let got = attempts(&host, &store, inst).await;
        let handled: Vec<&str> = got
            .iter()
            .filter_map(|a| a["event_type"].as_str())
            .collect();
        assert_eq!(
            handled.iter().filter(|t| **t == "customer.created").count(),
            1,
            "{handled:?}"
        );
        assert_eq!(
            handled.iter().filter(|t| **t == "customer.updated").count(),
            3,
            "{handled:?}"
        );
    }
}

#[tokio::test]
async fn an_uninstalled_component_reaches_nothing_not_even_banners() {
    let host = TestHost::start().await;
    publish_hostile(
        &host,
        "clingy",
        &["orders.read"],
        &["plugin.configured", "plugin.uninstalled"],
        json!({}),
    )
    .await;
    let store = host.create_store("clingy.example").await;
    let inst = install_configured(&host, &store, "clingy", json!({"mode": "banner"})).await;
    // While installed, its banner is shown.
    let first = wait_attempts(&host, &store, &inst, 1).await;
    assert_eq!(first[0]["succeeded"], true, "{first:?}");
    assert_eq!(banner_count(&host, &store).await, 1);

    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{inst}"),
        None,
    )
    .await
    .expect(204);
    let got = wait_attempts(&host, &store, &inst, 2).await;
    let last = got
        .iter()
        .find(|a| a["event_type"] == "plugin.uninstalled")
        .expect("plugin.uninstalled was delivered");
    assert_eq!(last["succeeded"], false, "{last}");
    assert!(
        last["error"].as_str().expect("error").contains("forbidden"),
        "{last}"
    );
    assert_eq!(
        banner_count(&host, &store).await,
        1,
        "no banner after the uninstall"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_host_while_a_component_sleeps() {
    let data = tempfile::tempdir().expect("temp dir");
    let (child, base) = commerce_host_tests::spawn_binary(
        std::path::Path::new(env!("CARGO_BIN_EXE_test-commerce-host")),
        data.path(),
        &[],
    )
    .await;
    let http = reqwest::Client::new();
    let admin = |method: Method, path: &str, body: Value| {
        http.request(method, format!("{base}{path}"))
            .bearer_auth(commerce_host_tests::ADMIN_TOKEN)
            .json(&body)
            .send()
    };
    let manifest = json!({
        "name": "sleeper", "version": "1.0.0", "scopes": ["orders.read"],
        "contact_email": "dev@hostile.example", "events": ["plugin.configured"],
        "limits": {"timeout_ms": 2000},
    });
    let published = admin(
        Method::POST,
        "/admin/v1/plugins",
        json!({"manifest": manifest, "component": b64(&component("hostile"))}),
    )
    .await
    .expect("publish");
    assert_eq!(published.status(), 201);
    let store: Value = admin(
        Method::POST,
        "/admin/v1/stores",
        json!({"domain": "sleepy.example"}),
    )
    .await
    .expect("store")
    .json()
    .await
    .expect("json");
    let store = store["id"].as_str().expect("id");
    let inst: Value = admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/installations"),
        json!({"plugin": "sleeper"}),
    )
    .await
    .expect("install")
    .json()
    .await
    .expect("json");
    let inst = inst["id"].as_str().expect("id");
    let configured = admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/installations/{inst}/settings"),
        json!({"settings": {"mode": "sleep"}}),
    )
    .await
    .expect("configure");
    assert_eq!(configured.status(), 200);
    // Let the invocation start its 60 s sleep, then ask the host to stop.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = child.id().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = commerce_host_tests::exit_within(child, Duration::from_secs(30))
        .await
        .expect(
            "the host stopped within 30 s of SIGTERM (the guest sleeps 60 s, its limit is 2 s)",
        );
    assert!(status.success(), "{status}");
}

/// A store whose plugin has `subscriptions` subscriptions to `path?{n}` on `receiver`, and
/// `customers` customers made: `subscriptions × customers` deliveries.
async fn store_bursting(
    host: &TestHost,
    receiver: &Receiver,
    domain: &str,
    path: &str,
    subscriptions: usize,
    customers: usize,
) {
    let (_, token) = host.store_with_plugin(domain, &ALL_SCOPES).await;
    for n in 0..subscriptions {
        host.subscribe(
            &token,
            &receiver.url(&format!("{path}?{n}")),
            &["customer.created"],
        )
        .await;
    }
    for n in 0..customers {
        host.call(
            &token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": format!("c{n}@{domain}")})),
        )
        .await
        .expect(201);
    }
}

/// Another store, one subscription to `path` on `receiver`, one customer made, and its delivery
/// awaited `within`, while the deliveries to `busy` are still hanging: at most 32 of them (one
/// installation's half of the engine's 64 places).
async fn another_store_is_served(host: &TestHost, receiver: &Receiver, busy: &str, within: u64) {
    let (_, token) = host.store_with_plugin("other.example", &ALL_SCOPES).await;
    host.subscribe(&token, &receiver.url("/other"), &["customer.created"])
        .await;
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "other@example.com"})),
    )
    .await
    .expect(201);
    receiver
        .wait_for("/other", 1, Duration::from_secs(within))
        .await;
    let in_flight = receiver.requests(busy).len();
    assert!(
        in_flight <= 32,
        "one installation took {in_flight} of the engine's places"
    );
}

#[tokio::test]
async fn slow_receivers_of_one_plugin_leave_the_engine_to_another_store() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/slow", Behavior::Hang(Duration::from_secs(8)));
    // One plugin with 20 subscriptions to a receiver that takes 8 s to answer: 8 attempts per
    // subscription would be 160, more than the engine's 64; it gets half of them.
    store_bursting(&host, &receiver, "slow.example", "/slow", 20, 10).await;
    receiver.wait_for("/slow", 32, Duration::from_secs(5)).await;
    // Delivered while the slow plugin's attempts are still hanging (they take 8 s).
    another_store_is_served(&host, &receiver, "/slow", 4).await;
}

/// A host whose engine's window a burst holds: one plugin with 50 subscriptions to a receiver
/// (`/loud`) that takes 10 s to answer, and 40 events: 2 000 deliveries due at once, more than the
/// engine reads into memory at a time (1 280), all of one installation, which may hold 32 of the
/// engine's 64 places; returned once those 32 hang.
async fn burst_holding_the_window() -> (TestHost, Receiver) {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/loud", Behavior::Hang(Duration::from_secs(10)));
    store_bursting(&host, &receiver, "loud.example", "/loud", 50, 40).await;
    receiver
        .wait_for("/loud", 32, Duration::from_secs(10))
        .await;
    (host, receiver)
}

#[tokio::test]
async fn another_stores_event_is_delivered_while_a_burst_larger_than_the_engines_window_waits() {
    let (host, receiver) = burst_holding_the_window().await;
    // Delivered while the loud store's first attempts still hang (they take 10 s), not after
    // its 2 000 deliveries.
    another_store_is_served(&host, &receiver, "/loud", 5).await;
}

#[tokio::test]
async fn another_stores_events_committed_together_all_come_out_while_a_burst_waits() {
    let (host, receiver) = burst_holding_the_window().await;
    // Another store's one order takes two variants below their thresholds: two events for its
    // one subscription in one commit, both queued behind the burst, which holds the engine's
    // window for 10 s. Both are delivered now, not the first now and the second once the
    // engine's cursor has read its way through the burst.
    let (_, token) = host.store_with_plugin("other.example", &ALL_SCOPES).await;
    host.subscribe(
        &token,
        &receiver.url("/other"),
        &["product.inventory.updated"],
    )
    .await;
    let mut variants = Vec::new();
    for sku in ["MUG-1", "MUG-2"] {
        let product = host
            .call(
                &token,
                Method::POST,
                "/v1/products",
                Some(
                    json!({"title": sku, "variants": [{"price": 1250, "currency": "EUR",
                    "inventory_quantity": 10, "low_stock_threshold": 5, "sku": sku}]}),
                ),
            )
            .await
            .expect(201)
            .body;
        variants.push(product["variants"][0]["id"].clone());
    }
    host.call(
        &token,
        Method::POST,
        "/v1/orders",
        Some(json!({"currency": "EUR", "line_items": [
            {"variant_id": variants[0], "quantity": 6},
            {"variant_id": variants[1], "quantity": 6}]})),
    )
    .await
    .expect(201);
    receiver.wait_for("/other", 2, Duration::from_secs(5)).await;
    let in_flight = receiver.requests("/loud").len();
    assert!(
        in_flight <= 32,
        "one installation took {in_flight} of the engine's places"
    );
}
