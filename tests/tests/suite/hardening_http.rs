//! HTTP edges: `Idempotency-Key` (per installation, behind the scope check, on every `/v1` POST,
//! and not stuck after a crash), failed authentication limited per client address, oversized
//! headers answered with the error object, and webhook URLs that smuggle an internal IPv4 address
//! in an IPv6 one.

use std::collections::BTreeSet;
use std::sync::Arc;

use commerce_host::service::Scope;
use commerce_host::service::idempotency::{Begin, fingerprint};
use commerce_host_tests::{ADMIN_TOKEN, ALL_SCOPES, Reply, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

/// A POST with an `Idempotency-Key` and the exact body bytes.
async fn post_with_key(host: &TestHost, token: &str, path: &str, key: &str, body: &[u8]) -> Reply {
    TestHost::read(
        host.request(Method::POST, path)
            .bearer_auth(token)
            .header("idempotency-key", key)
            .header("content-type", "application/json")
            .body(body.to_vec()),
    )
    .await
}

// ---------------------------------------------------------------------------------------------
// Idempotency-Key
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_zero_scope_installation_replaying_another_installations_key_gets_403_not_its_customer() {
    let host = TestHost::start().await;
    // The writer may read customers too, so its own response shows the contact fields.
    let (store, writer) = host
        .store_with_plugin("acme.example", &["customers.read", "customers.write"])
        .await;
    host.publish("nosy", &[]).await;
    let (_, nosy) = host.install(&store, "nosy").await;
    let body = br#"{"email":"ann@buyer.example","phone":"+14155550123"}"#;

    let created = post_with_key(&host, &writer, "/v1/customers", "cust-1", body)
        .await
        .expect(201);
    assert_eq!(created.body["email"], "ann@buyer.example");

    let stolen = post_with_key(&host, &nosy, "/v1/customers", "cust-1", body).await;
    stolen.assert_error(403, "missing_scope");
    assert!(stolen.header("idempotent-replayed").is_none());
    assert!(!stolen.body.to_string().contains("ann@buyer.example"));
    assert!(!stolen.body.to_string().contains("+14155550123"));
}

#[tokio::test]
async fn idempotency_keys_belong_to_the_installation_not_the_store() {
    let host = TestHost::start().await;
    let (store, first) = host
        .store_with_plugin("acme.example", &["customers.write"])
        .await;
    host.publish("second", &["customers.write"]).await;
    let (_, second) = host.install(&store, "second").await;
    let body = br#"{"email":"ann@buyer.example"}"#;

    post_with_key(&host, &first, "/v1/customers", "same-key", body)
        .await
        .expect(201);
    // The other installation's request with the same key and body runs as its own request (and
    // meets the first one's customer), rather than receiving the first one's response.
    let own = post_with_key(&host, &second, "/v1/customers", "same-key", body).await;
    own.assert_error(409, "email_taken");
    assert!(own.header("idempotent-replayed").is_none());
    // Each installation still replays its own.
    let again = post_with_key(&host, &first, "/v1/customers", "same-key", body)
        .await
        .expect(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let again = post_with_key(&host, &second, "/v1/customers", "same-key", body).await;
    again.assert_error(409, "email_taken");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
}

#[tokio::test]
async fn failed_authentication_and_a_foreign_store_header_are_answered_before_any_replay() {
    let host = TestHost::start().await;
    let (_, token) = host
        .store_with_plugin("acme.example", &["customers.write"])
        .await;
    let other_store = host.create_store("other.example").await;
    let body = br#"{"email":"ann@buyer.example"}"#;
    post_with_key(&host, &token, "/v1/customers", "k-1", body)
        .await
        .expect(201);

    let unknown = format!("chp_{}", "0".repeat(64));
    let reply = post_with_key(&host, &unknown, "/v1/customers", "k-1", body).await;
    reply.assert_error(401, "unauthorized");

    let reply = TestHost::read(
        host.request(Method::POST, "/v1/customers")
            .bearer_auth(&token)
            .header("idempotency-key", "k-1")
            .header("x-service-store", &other_store)
            .header("content-type", "application/json")
            .body(body.to_vec()),
    )
    .await;
    reply.assert_error(403, "store_mismatch");
    assert!(reply.header("idempotent-replayed").is_none());
}

/// Every `/v1` POST, with the scope it needs.
const V1_POSTS: &[(&str, Option<&str>)] = &[
    ("/v1/orders", Some("orders.write")),
    ("/v1/orders/{id}/fulfillments", Some("orders.write")),
    ("/v1/orders/{id}/refunds", Some("orders.write")),
    ("/v1/orders/{id}/complete", Some("orders.write")),
    ("/v1/orders/{id}/cancel", Some("orders.write")),
    ("/v1/products", Some("products.write")),
    ("/v1/products/{id}/variants", Some("products.write")),
    ("/v1/inventory/adjust", Some("products.write")),
    ("/v1/customers", Some("customers.write")),
    ("/v1/notifications", None),
    ("/v1/webhooks", None),
    ("/v1/webhooks/{id}/resume", None),
    ("/v1/webhooks/{id}/replay", None),
    ("/v1/webhooks/{id}/test", None),
    ("/v1/webhooks/{id}/deliveries/{event_id}/resend", None),
    ("/v1/webhooks/{id}/rotate-secret", None),
];

#[tokio::test]
async fn every_v1_post_honours_the_idempotency_key_behind_its_scope() {
    let host = TestHost::start().await;
    // The list above is every POST the API documents.
    let doc = host
        .send(Method::GET, "/v1/openapi.json", None, None)
        .await
        .expect(200);
    let documented: BTreeSet<String> = doc.body["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .filter(|(path, item)| path.starts_with("/v1/") && item.get("post").is_some())
        .map(|(path, _)| path.clone())
        .collect();
    let listed: BTreeSet<String> = V1_POSTS.iter().map(|(p, _)| (*p).to_owned()).collect();
    assert_eq!(
        documented, listed,
        "the POST routes changed: update V1_POSTS"
    );

    let (store, writer) = host.store_with_plugin("acme.example", &ALL_SCOPES).await;
    host.publish("scopeless", &[]).await;
    let (_, scopeless) = host.install(&store, "scopeless").await;
    for (i, (route, scope)) in V1_POSTS.iter().enumerate() {
        let path = route.replace("{id}", "unknown");
        let key = format!("key-{i}");
        // The first request is recorded, whatever it answered (a 4xx here)...
        let first = post_with_key(&host, &writer, &path, &key, br#"{"probe":1}"#).await;
        assert!(first.status < 500, "{path}: {}", first.body);
        let replayed = post_with_key(&host, &writer, &path, &key, br#"{"probe":1}"#).await;
        assert_eq!(
            replayed.header("idempotent-replayed"),
            Some("true"),
            "{path} replays"
        );
        assert_eq!(replayed.status, first.status, "{path}");
        // ...so that the same key with another body is refused.
        let reused = post_with_key(&host, &writer, &path, &key, br#"{"probe":2}"#).await;
        assert_eq!(
            (reused.status, reused.code(), reused.field()),
            (409, "idempotency_key_reused", "Idempotency-Key"),
            "{path}: {}",
            reused.body
        );
        // Another installation never gets the recorded answer; without the scope it gets 403.
        let other = post_with_key(&host, &scopeless, &path, &key, br#"{"probe":1}"#).await;
        assert!(other.header("idempotent-replayed").is_none(), "{path}");
        if let Some(scope) = scope {
            other.assert_error(403, "missing_scope");
            assert!(
                other.body["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains(scope)
            );
        }
    }
}

#[tokio::test]
async fn a_key_left_in_progress_by_a_crash_can_be_retried_after_the_restart() {
    let mut host = TestHost::start().await;
    let (_, token) = host
        .store_with_plugin("acme.example", &["customers.write"])
        .await;
    let body = br#"{"email":"ann@buyer.example"}"#;
    host.stop().await;
    // What a host killed in the middle of the request leaves behind: the key claimed, no answer.
    {
        let mut config = commerce_host_tests::test_config(&host.data_dir());
        config.admin_token = Some(ADMIN_TOKEN.to_owned());
        config.clock = Arc::new(host.clock.clone());
        let service = commerce_host::open_service(&config).expect("open the data folder");
        let actor = service.authenticate(&token).expect("token");
        let claimed = service
            .idempotency_begin(
                &actor,
                Some(Scope::CustomersWrite),
                b"crash-1",
                &fingerprint("POST", "/v1/customers", body),
            )
            .expect("claim");
        assert!(matches!(claimed, Begin::Run(_)));
        service.db.flush().expect("flush");
    }
    let host = host.restart().await;

    let retried = post_with_key(&host, &token, "/v1/customers", "crash-1", body)
        .await
        .expect(201);
    assert!(retried.header("idempotent-replayed").is_none());
    let replayed = post_with_key(&host, &token, "/v1/customers", "crash-1", body)
        .await
        .expect(201);
    assert_eq!(replayed.body, retried.body);
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
}

// ---------------------------------------------------------------------------------------------
// Failed authentication, per client address
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn failed_authentication_is_limited_per_address_and_answered_429_with_retry_after() {
    let host = TestHost::start().await;
    let (_, token) = host.store_with_plugin("acme.example", &[]).await;
    let unknown = format!("chp_{}", "0".repeat(64));
    // Requests that authenticate, and requests that need no token, do not count.
    for _ in 0..30 {
        host.call(&token, Method::GET, "/v1/installation", None)
            .await
            .expect(200);
        host.send(Method::GET, "/v1/openapi.json", None, None)
            .await
            .expect(200);
    }
    // 20 failures at once, on /v1 and /admin/v1 alike: no token, a malformed one, an unknown one.
    for i in 0..20 {
        let reply = match i % 4 {
            0 => host.send(Method::GET, "/v1/installation", None, None).await,
            1 => host.call("garbage", Method::GET, "/v1/orders", None).await,
            2 => {
                host.call(&unknown, Method::POST, "/v1/customers", Some(json!({})))
                    .await
            }
            _ => {
                host.call("not-the-admin-token", Method::GET, "/admin/v1/stores", None)
                    .await
            }
        };
        reply.assert_error(401, "unauthorized");
    }
    // The 21st is refused before its token is looked at, whatever the token.
    let limited = host
        .call(&unknown, Method::GET, "/v1/installation", None)
        .await;
    limited.assert_error(429, "rate_limited");
    assert_eq!(limited.header("retry-after"), Some("1"));
    assert!(
        limited.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("failed authentication")
    );
    let valid = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await;
    valid.assert_error(429, "rate_limited");
    let admin = host.admin(Method::GET, "/admin/v1/stores", None).await;
    admin.assert_error(429, "rate_limited");

    // 10 failures per second come back: one after 100 ms.
    host.clock.advance(SignedDuration::from_millis(99));
    let still = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await;
    still.assert_error(429, "rate_limited");
    host.clock.advance(SignedDuration::from_millis(1));
    host.call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    let failed = host.send(Method::GET, "/v1/installation", None, None).await;
    failed.assert_error(401, "unauthorized");
    let limited = host.send(Method::GET, "/v1/installation", None, None).await;
    limited.assert_error(429, "rate_limited");
    // After two seconds the address has its full allowance again.
    host.clock.advance(SignedDuration::from_secs(2));
    for _ in 0..20 {
        let reply = host.send(Method::GET, "/v1/installation", None, None).await;
        reply.assert_error(401, "unauthorized");
    }
}

// ---------------------------------------------------------------------------------------------
// Oversized headers
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn oversized_request_headers_get_431_with_the_error_object() {
    let host = TestHost::start().await;
    let (_, token) = host.store_with_plugin("acme.example", &[]).await;

    // One very large header (hyper alone would accept it, up to ~400 KiB).
    let big = TestHost::read(
        host.request(Method::GET, "/v1/installation")
            .bearer_auth(&token)
            .header("x-big", "a".repeat(64 * 1024)),
    )
    .await;
    big.assert_error(431, "headers_too_large");
    assert_eq!(
        big.header("x-request-id"),
        big.body["error"]["request_id"].as_str()
    );

    // Many small headers (hyper's default would answer a bare 431 past 100).
    let mut many = host
        .request(Method::GET, "/v1/installation")
        .bearer_auth(&token);
    for i in 0..150 {
        many = many.header(format!("x-h-{i}"), "v");
    }
    let many = TestHost::read(many).await;
    many.assert_error(431, "headers_too_large");

    // Without a token, too: the limit comes first.
    let anonymous = TestHost::read(
        host.request(Method::GET, "/admin/v1/stores")
            .header("cookie", "c".repeat(40 * 1024)),
    )
    .await;
    anonymous.assert_error(431, "headers_too_large");

    // Headers within the limits are served as usual.
    TestHost::read(
        host.request(Method::GET, "/v1/installation")
            .bearer_auth(&token)
            .header("x-big", "a".repeat(16 * 1024)),
    )
    .await
    .expect(200);
}

// ---------------------------------------------------------------------------------------------
// Webhook URLs that carry an internal IPv4 address, or are not global unicast
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn subscriptions_to_ipv6_forms_of_internal_addresses_are_refused() {
    let host = TestHost::start().await;
    let (_, token) = host.store_with_plugin("acme.example", &[]).await;
    for url in [
        "http://[64:ff9b:1::7f00:1]/hook",
        "http://[64:ff9b::7f00:1]/hook",
        "http://[2002:7f00:1::]/hook",
        "http://[2002:a9fe:a9fe::]/latest/meta-data",
        "http://[2001:0:7f00:1::]/hook",
        "http://[2001:0:808:808::80ff:fffe]/hook",
        "http://[::127.0.0.1]/hook",
        "http://[::ffff:10.0.0.1]/hook",
        "http://[fec0::1]/hook",
        "http://[100::1]/hook",
        "http://[2001:db8::1]/hook",
        "http://[4000::1]/hook",
    ] {
        let reply = host
            .call(
                &token,
                Method::POST,
                "/v1/webhooks",
                Some(json!({"url": url, "events": ["plugin.configured"], "secret": "0123456789abcdef"})),
            )
            .await;
        assert_eq!(reply.status, 400, "{url}: {}", reply.body);
        assert_eq!(
            (reply.code(), reply.field()),
            ("validation_failed", "url"),
            "{url}"
        );
    }
    let listed = host
        .call(&token, Method::GET, "/v1/webhooks", None)
        .await
        .expect(200);
    assert_eq!(listed.body["data"], Value::Array(vec![]));
}
