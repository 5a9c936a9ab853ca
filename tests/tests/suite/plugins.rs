//! The plugin runtime: real components built from `example-plugins/`, loaded into a running host,
//! receiving events and calling scoped host functions, and stopped when they break their limits.

use base64::Engine as _;
use commerce_host_tests::components::component;
use commerce_host_tests::{ALL_SCOPES, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Publishes the `hostile` example plugin as `name`, receiving `plugin.configured`.
async fn publish_hostile(host: &TestHost, name: &str, limits: Option<Value>) {
    let mut manifest = json!({
        "name": name,
        "version": "1.0.0",
        "scopes": ["orders.read"],
        "contact_email": "dev@hostile.example",
        "events": ["plugin.configured"],
    });
    if let Some(limits) = limits {
        manifest["limits"] = limits;
    }
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({"manifest": manifest, "component": b64(&component("hostile"))})),
    )
    .await
    .expect(201);
}

/// Installs `plugin` into a new store and configures it with `settings`, which fires the
/// `plugin.configured` event it receives. Returns (store, installation).
async fn configure_in_new_store(
    host: &TestHost,
    domain: &str,
    plugin: &str,
    settings: Value,
) -> (String, String) {
    let store = host.create_store(domain).await;
    let (inst, _) = host.install(&store, plugin).await;
    configure(host, &store, &inst, settings).await;
    (store, inst)
}

/// Sets an installation's settings, which fires the `plugin.configured` event it receives.
async fn configure(host: &TestHost, store: &str, inst: &str, settings: Value) {
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/installations/{inst}/settings"),
        Some(json!({"settings": settings})),
    )
    .await
    .expect(200);
}

/// Waits until the installation has made `count` attempts and returns them (newest first).
async fn attempts(host: &TestHost, store: &str, inst: &str, count: usize) -> Vec<Value> {
    let path = format!("/admin/v1/stores/{store}/installations/{inst}/attempts");
    host.eventually(&format!("{count} attempt(s)"), || async {
        let page = host.admin(Method::GET, &path, None).await.expect(200);
        page.body["data"]
            .as_array()
            .filter(|a| a.len() == count)
            .cloned()
    })
    .await
}

/// Waits for the installation's first attempt and returns it.
async fn first_attempt(host: &TestHost, store: &str, inst: &str) -> Value {
    attempts(host, store, inst, 1)
        .await
        .pop()
        .expect("one attempt")
}

#[tokio::test]
async fn only_real_components_of_our_world_are_accepted() {
    let host = TestHost::start().await;
    let manifest = json!({"name": "bad", "version": "1.0.0", "scopes": ["orders.read"], "contact_email": "d@x.example", "events": ["order.paid"]});
    for (bytes, says) in [
        (b"not wasm at all".to_vec(), "component header"),
        (b"\0asm\x01\0\0\0".to_vec(), "core wasm module"),
    ] {
        let reply = host
            .admin(
                Method::POST,
                "/admin/v1/plugins",
                Some(json!({"manifest": manifest, "component": b64(&bytes)})),
            )
            .await;
        assert_eq!(
            (reply.status, reply.code(), reply.field()),
            (400, "validation_failed", "component")
        );
        assert!(
            reply.body["error"]["message"]
                .as_str()
                .expect("message")
                .contains(says),
            "{}",
            reply.body
        );
    }
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({"manifest": manifest, "component": "%%%"})),
        )
        .await;
    assert_eq!(reply.field(), "component");

    // Events without a component, a component without events, an event outside the scopes.
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({"manifest": manifest})),
        )
        .await;
    assert_eq!(reply.field(), "manifest.events");
    let mut no_events = manifest.clone();
    no_events["events"] = json!([]);
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({"manifest": no_events, "component": b64(&component("hostile"))})),
        )
        .await;
    assert_eq!(reply.field(), "manifest.events");
    let mut unscoped = manifest.clone();
    unscoped["events"] = json!(["order.paid", "customer.created"]);
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({"manifest": unscoped, "component": b64(&component("hostile"))})),
        )
        .await;
    assert_eq!(reply.field(), "manifest.events[1]");
    let mut greedy = manifest.clone();
    greedy["limits"] = json!({"memory_mib": 4096});
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({"manifest": greedy, "component": b64(&component("hostile"))})),
        )
        .await;
    assert_eq!(reply.field(), "manifest.limits.memory_mib");
}

#[tokio::test]
async fn an_event_reaches_a_fresh_instance_with_the_installations_identity_and_its_logs_are_kept() {
    let host = TestHost::start().await;
    publish_hostile(&host, "calm", None).await;
    let (store, inst) =
        configure_in_new_store(&host, "calm.example", "calm", json!({"mode": "ok"})).await;
    let attempt = first_attempt(&host, &store, &inst).await;
    assert_eq!(attempt["succeeded"], true, "{attempt}");
    assert_eq!(attempt["event_type"], "plugin.configured");
    let line = attempt["logs"][0]["message"].as_str().expect("a log line");
    assert!(
        line.contains(attempt["event_id"].as_str().expect("event id")),
        "{line}"
    );
}

/// The pool keeps a finished instance's memory slot for the next one and resets only the pages
/// it wrote: nothing of an earlier invocation (its data, its grown heap) may reach a later one.
#[tokio::test]
async fn each_invocation_starts_from_the_components_image_whatever_the_last_one_left() {
    let host = TestHost::start().await;
    publish_hostile(&host, "forgetful", None).await;
    let (store, inst) = configure_in_new_store(
        &host,
        "forgetful.example",
        "forgetful",
        json!({"mode": "remember"}),
    )
    .await;
    // Two more `plugin.configured` events, each to a fresh instance.
    for n in 1..3 {
        let settings = json!({"mode": "remember", "tag": n.to_string()});
        configure(&host, &store, &inst, settings).await;
    }
    for attempt in attempts(&host, &store, &inst, 3).await {
        assert_eq!(attempt["succeeded"], true, "{attempt}");
        assert_eq!(
            attempt["logs"][0]["message"], "remembered 0 earlier visits; fresh memory clean",
            "{attempt}"
        );
    }
}

#[tokio::test]
async fn a_call_outside_the_granted_scopes_is_forbidden_and_changes_nothing() {
    let host = TestHost::start().await;
    publish_hostile(&host, "intruder", None).await;
    let (store, inst) = configure_in_new_store(
        &host,
        "victim.example",
        "intruder",
        json!({"mode": "forbidden"}),
    )
    .await;
    let attempt = first_attempt(&host, &store, &inst).await;
    assert_eq!(attempt["succeeded"], false);
    let error = attempt["error"].as_str().expect("error");
    assert!(
        error.contains("forbidden") && error.contains("customers.write"),
        "{error}"
    );
    assert!(
        host.events(&store, "customer.created").await.is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn another_stores_data_is_unreachable() {
    let host = TestHost::start().await;
    let (other, token) = host.store_with_plugin("other.example", &ALL_SCOPES).await;
    let order = host
        .call(&token, Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "line_items": [{"title": "x", "unit_price": 100, "quantity": 1}]})))
        .await
        .expect(201);
    let order_id = order.body["id"].as_str().expect("id");
    publish_hostile(&host, "peeker", None).await;
    let (store, inst) = configure_in_new_store(
        &host,
        "peeker.example",
        "peeker",
        json!({"mode": "peek", "order": order_id}),
    )
    .await;
    let attempt = first_attempt(&host, &store, &inst).await;
    assert_eq!(attempt["succeeded"], false);
    assert!(
        attempt["error"]
            .as_str()
            .expect("error")
            .contains("not found"),
        "{attempt}"
    );
    assert_ne!(store, other);
}

#[tokio::test]
async fn each_hostile_behaviour_is_stopped_by_its_limit_while_a_good_plugin_keeps_being_served() {
    let host = TestHost::start().await;
    publish_hostile(&host, "hostile", None).await;
    publish_hostile(
        &host,
        "slow",
        Some(json!({"timeout_ms": 300, "fuel": 10_000_000_000u64})),
    )
    .await;
    let cases = [
        ("hostile", "loop", "fuel"),
        ("slow", "loop", "wall-clock"),
        ("hostile", "alloc", "memory limit"),
        ("hostile", "stack", "stack"),
        ("hostile", "log", "log limit"),
        ("hostile", "calls", "host call limit"),
        ("hostile", "fail", "failing"),
    ];
    let mut started = Vec::new();
    for (i, (plugin, mode, _)) in cases.iter().enumerate() {
        started.push(
            configure_in_new_store(
                &host,
                &format!("h{i}.example"),
                plugin,
                json!({"mode": mode}),
            )
            .await,
        );
    }
    let (good_store, good) =
        configure_in_new_store(&host, "good.example", "hostile", json!({"mode": "ok"})).await;
    for ((store, inst), (_, mode, says)) in started.iter().zip(cases) {
        let attempt = first_attempt(&host, store, inst).await;
        assert_eq!(attempt["succeeded"], false, "{mode}: {attempt}");
        let error = attempt["error"].as_str().expect("error");
        assert!(
            error.contains(says),
            "{mode}: expected `{says}` in `{error}`"
        );
    }
    assert_eq!(
        first_attempt(&host, &good_store, &good).await["succeeded"],
        true
    );

    // The host is still serving, and a later event to the good plugin still runs.
    configure(&host, &good_store, &good, json!({"mode": "ok", "n": 2})).await;
    let both = attempts(&host, &good_store, &good, 2).await;
    assert!(both.iter().all(|a| a["succeeded"] == true), "{both:?}");
}

#[tokio::test]
async fn a_failed_attempt_is_retried_on_the_webhook_schedule_and_can_be_replayed() {
    let host = TestHost::start().await;
    publish_hostile(&host, "flaky", None).await;
    let (store, inst) =
        configure_in_new_store(&host, "flaky.example", "flaky", json!({"mode": "fail"})).await;
    let path = format!("/admin/v1/stores/{store}/installations/{inst}/attempts");
    host.eventually("the first attempt", || async {
        (attempt_count(&host, &path).await == 1).then_some(())
    })
    .await;
    host.clock.advance(SignedDuration::from_secs(59));
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(attempt_count(&host, &path).await, 1, "not before a minute");
    host.clock.advance(SignedDuration::from_secs(1));
    host.eventually("the retry after 1 minute", || async {
        (attempt_count(&host, &path).await == 2).then_some(())
    })
    .await;

    // Six retries fail: the component is paused and its owner mailed.
    for minutes in [5, 30, 120, 360, 1440] {
        let before = attempt_count(&host, &path).await;
        host.clock.advance(SignedDuration::from_mins(minutes));
        host.eventually("the next retry", || async {
            (attempt_count(&host, &path).await == before + 1).then_some(())
        })
        .await;
    }
    let installation = host
        .eventually("the pause", || async {
            let i = host
                .admin(
                    Method::GET,
                    &format!("/admin/v1/stores/{store}/installations/{inst}"),
                    None,
                )
                .await
                .expect(200);
            i.body["component_paused_at"].is_string().then_some(i.body)
        })
        .await;
    assert!(
        installation["component_pause_reason"]
            .as_str()
            .expect("reason")
            .contains("failing")
    );
    let mail = host
        .eventually("the pause notice", || async {
            let mail = host
                .admin(Method::GET, "/admin/v1/mail", None)
                .await
                .expect(200);
            mail.body["data"]
                .as_array()
                .and_then(|m| m.first().cloned())
        })
        .await;
    assert_eq!(mail["to"], "dev@hostile.example");

    // Fixed and resumed, the failed event is replayed.
    configure(&host, &store, &inst, json!({"mode": "ok"})).await;
    let replay = host
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/installations/{inst}/replay"),
            Some(json!({"since": "2026-01-01T00:00:00Z"})),
        )
        .await;
    assert_eq!(replay.code(), "component_paused");
    host.admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/installations/{inst}/resume"),
        None,
    )
    .await
    .expect(200);
    let replay = host
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/installations/{inst}/replay"),
            Some(json!({"since": "2026-01-01T00:00:00Z"})),
        )
        .await
        .expect(202);
    assert!(replay.body["requeued"].as_u64().expect("requeued") >= 1);
    host.eventually("a successful replay", || async {
        let page = host.admin(Method::GET, &path, None).await.expect(200);
        page.body["data"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["succeeded"] == true).cloned())
    })
    .await;
}

#[tokio::test]
async fn a_restart_loads_the_precompiled_component_without_compiling_again() {
    let host = TestHost::start().await;
    publish_hostile(&host, "steady", None).await;
    let cwasm = host
        .data_dir()
        .join("components")
        .join("steady@1.0.0.cwasm");
    let compiled_at = std::fs::metadata(&cwasm)
        .expect("precompiled file")
        .modified()
        .expect("mtime");
    let host = host.restart().await;
    let (store, inst) =
        configure_in_new_store(&host, "steady.example", "steady", json!({"mode": "ok"})).await;
    assert_eq!(first_attempt(&host, &store, &inst).await["succeeded"], true);
    let after = std::fs::metadata(&cwasm)
        .expect("precompiled file")
        .modified()
        .expect("mtime");
    assert_eq!(compiled_at, after, "the restart did not compile again");
}

async fn attempt_count(host: &TestHost, path: &str) -> usize {
    host.admin(Method::GET, path, None).await.body["data"]
        .as_array()
        .map_or(0, Vec::len)
}

#[tokio::test]
async fn the_thank_you_plugin_emails_the_customer_when_an_order_is_paid() {
    use commerce_host_tests::components::publish_body;
    let host = TestHost::start().await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish_body("order-thanks")),
    )
    .await
    .expect(201);
    let (store, shop) = host.store_with_plugin("thanks.example", &ALL_SCOPES).await;
    let (inst, _) = host.install(&store, "order-thanks").await;
    let customer = host
        .call(
            &shop,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "ada@example.com"})),
        )
        .await
        .expect(201);
    let order = host
        .call(&shop, Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "customer_id": customer.body["id"], "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 2}]})))
        .await
        .expect(201);
    host.pay(&store, &order.body).await.expect(200);

    let attempt = first_attempt(&host, &store, &inst).await;
    assert_eq!(attempt["succeeded"], true, "{attempt}");
    assert_eq!(attempt["event_type"], "order.paid");
    let outbox = host
        .eventually("the thank-you in the store's outbox", || async {
            let page = host
                .admin(
                    Method::GET,
                    &format!("/admin/v1/stores/{store}/outbox"),
                    None,
                )
                .await
                .expect(200);
            page.body["data"]
                .as_array()
                .and_then(|m| m.first().cloned())
        })
        .await;
    let text = outbox.to_string();
    assert!(text.contains("ada@example.com"), "{text}");
    assert!(
        text.contains(order.body["id"].as_str().expect("id")),
        "{text}"
    );
    assert!(text.contains("25.00 EUR"), "{text}");
}
