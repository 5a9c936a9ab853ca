//! Every rule in one place: the operator's `PATCH` of a store is all-or-nothing, and the checks
//! that used to sit in one adapter (install-time vetting of webhook networks, a feed card's
//! `kind`, a manifest's limits, rate limiting) are the service layer's, so every way in meets
//! them.

use std::collections::BTreeMap;

use base64::Engine as _;
use commerce_host::model::plugin::{ComponentInfo, Manifest};
use commerce_host::service::PageRequest;
use commerce_host_tests::components::component;
use commerce_host_tests::{ADMIN_TOKEN, Reply, TestHost};
use reqwest::Method;
use serde_json::{Value, json};

/// The store as `GET /admin/v1/stores/{id}` shows it.
async fn store(host: &TestHost, id: &str) -> Value {
    host.admin(Method::GET, &format!("/admin/v1/stores/{id}"), None)
        .await
        .expect(200)
        .body
}

/// `PATCH /admin/v1/stores/{id}` with `body`.
async fn patch(host: &TestHost, id: &str, body: Value) -> Reply {
    host.admin(Method::PATCH, &format!("/admin/v1/stores/{id}"), Some(body))
        .await
}

#[tokio::test]
async fn a_patch_whose_quotas_are_invalid_changes_nothing_not_even_its_valid_rate_limits() {
    let host = TestHost::start().await;
    let id = host.create_store("acme.example").await;
    let before = store(&host, &id).await;

    let reply = patch(
        &host,
        &id,
        json!({
            "rate_limits": {"requests_per_second": 5, "burst": 10, "requests_per_minute": 100},
            "quotas": {"sms": 2_000_000},
        }),
    )
    .await;

    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "quotas.sms");
    assert_eq!(
        store(&host, &id).await,
        before,
        "the store is exactly as it was"
    );
}

#[tokio::test]
async fn a_patch_whose_rate_limits_are_invalid_changes_nothing_not_even_its_valid_quotas() {
    let host = TestHost::start().await;
    let id = host.create_store("acme.example").await;
    let before = store(&host, &id).await;

    let reply = patch(
        &host,
        &id,
        json!({
            "rate_limits": {"requests_per_second": 10, "burst": 5},
            "quotas": {"sms": 7},
        }),
    )
    .await;

    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "rate_limits.burst");
    assert_eq!(
        store(&host, &id).await,
        before,
        "the store is exactly as it was"
    );
}

#[tokio::test]
async fn a_valid_patch_changes_both_parts_and_answers_the_changed_store() {
    let host = TestHost::start().await;
    let id = host.create_store("acme.example").await;

    let reply = patch(
        &host,
        &id,
        json!({
            "rate_limits": {"requests_per_second": 5, "burst": 10, "requests_per_minute": 100},
            "quotas": {"sms": 7},
        }),
    )
    .await
    .expect(200);

    assert_eq!(reply.body["rate_limits"]["burst"], 10);
    assert_eq!(reply.body["quotas"]["sms"], 7);
    assert_eq!(reply.body, store(&host, &id).await);
}

#[tokio::test]
async fn concurrent_patches_leave_one_of_them_whole_never_a_mix_of_both() {
    let host = TestHost::start().await;
    let id = host.create_store("acme.example").await;
    let settings = |n: u64| {
        json!({
            "rate_limits": {"requests_per_second": n, "burst": n, "requests_per_minute": n},
            "quotas": {"sms": n},
        })
    };

    for _ in 0..20 {
        let (a, b) = tokio::join!(
            patch(&host, &id, settings(1)),
            patch(&host, &id, settings(2))
        );
        a.expect(200);
        b.expect(200);
        let now = store(&host, &id).await;
        assert_eq!(
            now["rate_limits"]["burst"], now["quotas"]["sms"],
            "one PATCH won whole: {now}"
        );
    }
}

/// A service over a fresh data folder, without a server: what the CLI and the engine use.
fn bare_service(data: &std::path::Path) -> commerce_host::Service {
    let mut config = commerce_host_tests::test_config(data);
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    config.durable_writes = false;
    commerce_host::open_service(&config).expect("a service")
}

/// A manifest of an external plugin named `name`, with no scope.
fn external_manifest(name: &str) -> Manifest {
    Manifest {
        name: name.into(),
        version: "1.0.0".into(),
        description: None,
        scopes: Vec::new(),
        contact_email: "dev@plugin.example".into(),
        webhooks: Vec::new(),
        events: Vec::new(),
        limits: None,
    }
}

#[tokio::test]
async fn an_install_whose_manifest_webhook_reaches_a_private_network_installs_nothing() {
    let host = TestHost::start().await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({"manifest": {
            "name": "hooked", "version": "1.0.0", "scopes": ["orders.read"],
            "contact_email": "dev@plugin.example",
            "webhooks": [{"url": "http://10.0.0.1/m", "events": ["order.paid"],
                          "secret": "a-secret-of-16-bytes-or-more"}],
        }})),
    )
    .await
    .expect(201);
    let store = host.create_store("acme.example").await;

    let reply = host
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/installations"),
            Some(json!({"plugin": "hooked"})),
        )
        .await;

    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "manifest.webhooks[0].url");
    let installations = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(installations.body["data"], json!([]), "nothing installed");
    assert!(host.events(&store, "plugin.installed").await.is_empty());
}

#[test]
fn the_service_itself_vets_a_manifests_webhook_networks_at_install_whoever_calls_it() {
    let data = tempfile::tempdir().expect("temp dir");
    let service = bare_service(data.path());
    let mut manifest = external_manifest("hooked");
    manifest.scopes = vec!["orders.read".into()];
    manifest.webhooks = vec![commerce_host::model::plugin::ManifestWebhook {
        url: "http://127.0.0.1:9/m".into(),
        events: vec!["order.paid".into()],
        secret: "a-secret-of-16-bytes-or-more".into(),
    }];
    service
        .publish_plugin(manifest, &BTreeMap::new(), None)
        .expect("published: the URL's form is fine");
    let store = service.create_store("acme.example").expect("a store");

    let err = service
        .install(&store.id, "hooked")
        .expect_err("a loopback receiver is refused");

    assert_eq!(err.field(), Some("manifest.webhooks[0].url"));
    assert!(err.to_string().contains("loopback"), "{err}");
    let installations = service
        .list_installations(&store.id, &PageRequest::first(10))
        .expect("installations");
    assert!(installations.data.is_empty(), "nothing installed");
}

#[tokio::test]
async fn a_manifest_without_a_component_may_not_ask_for_limits() {
    let host = TestHost::start().await;

    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({"manifest": {
                "name": "external", "version": "1.0.0",
                "contact_email": "dev@plugin.example",
                "limits": {"timeout_ms": 2000},
            }})),
        )
        .await;

    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "manifest.limits");
    let message = reply.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("publishes no component"), "{message}");
    host.admin(Method::GET, "/admin/v1/plugins/external", None)
        .await
        .assert_error(404, "not_found");
}

#[test]
fn a_manifest_is_held_to_the_limit_maxima_whenever_it_is_published_not_only_with_an_upload() {
    let data = tempfile::tempdir().expect("temp dir");
    let service = bare_service(data.path());
    let mut manifest = external_manifest("greedy");
    manifest.events = vec!["plugin.configured".into()];
    manifest.limits = Some(commerce_host::model::plugin::ManifestLimits {
        memory_mib: Some(4096),
        ..Default::default()
    });
    let component = ComponentInfo {
        sha256: "0".repeat(64),
        size: 1,
        wit_version: "0.2.0".into(),
        sdk_version: None,
    };

    let err = service
        .publish_plugin(manifest.clone(), &BTreeMap::new(), Some(component.clone()))
        .expect_err("beyond the memory maximum");
    assert_eq!(err.field(), Some("manifest.limits.memory_mib"));
    service.plugin("greedy").expect_err("nothing was published");

    manifest.limits = Some(commerce_host::model::plugin::ManifestLimits {
        memory_mib: Some(48),
        ..Default::default()
    });
    service
        .publish_plugin(manifest.clone(), &BTreeMap::new(), Some(component))
        .expect("within the maxima");
    let limits = service.component_limits(&manifest).expect("limits");
    assert_eq!(limits.memory_bytes, 48 << 20);
}

#[tokio::test]
async fn a_feed_card_of_an_unknown_kind_is_refused_by_name_with_the_kinds_there_are() {
    let host = TestHost::start().await;
    let (_, token) = host.store_with_plugin("acme.example", &[]).await;

    let reply = host
        .call(
            &token,
            Method::POST,
            "/v1/notifications",
            Some(
                json!({"channel": "feed", "card": {"kind": "ad", "title": "t", "body": "b",
                "primary": {"label": "l", "href": "/x"}}}),
            ),
        )
        .await;

    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "card.kind");
    assert_eq!(
        reply.body["error"]["message"],
        "`ad` is not a card kind; use `suggestion`"
    );
}

#[tokio::test]
async fn a_components_host_calls_and_the_stores_http_requests_draw_on_one_rate_limit() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    patch(
        &host,
        &store,
        json!({"rate_limits": {"requests_per_second": 1, "burst": 5, "requests_per_minute": 1000}}),
    )
    .await
    .expect(200);
    host.publish("front", &[]).await;
    let (_, token) = host.install(&store, "front").await;
    let first = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    assert_eq!(first.header("x-ratelimit-remaining"), Some("4"));

    // A component that calls `settings.get` until its 20 host calls are spent; the clock stands
    // still, so no token comes back.
    let b64 = base64::engine::general_purpose::STANDARD.encode(component("hostile"));
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({"manifest": {
            "name": "caller", "version": "1.0.0", "contact_email": "dev@hostile.example",
            "events": ["plugin.configured"], "limits": {"host_calls": 20},
        }, "component": b64})),
    )
    .await
    .expect(201);
    let (inst, _) = host.install(&store, "caller").await;
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/installations/{inst}/settings"),
        Some(json!({"settings": {"mode": "calls"}})),
    )
    .await
    .expect(200);
    let path = format!("/admin/v1/stores/{store}/installations/{inst}/attempts");
    host.eventually("the component's attempt", || async {
        let page = host.admin(Method::GET, &path, None).await.expect(200);
        page.body["data"]
            .as_array()
            .and_then(|a| a.first().cloned())
    })
    .await;

    let after = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await;
    after.assert_error(429, "rate_limited");
    assert_eq!(after.header("x-ratelimit-remaining"), Some("0"));
}
