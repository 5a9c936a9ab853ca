//! The cache of authenticated tokens never outlives what it copies: a token stops working the
//! moment its plugin is uninstalled, new rate limits apply to the very next request, a reinstall
//! with other scopes applies at once, and the old token of a reinstalled plugin stays revoked;
//! while nothing changes, requests keep being answered (from the cache).

use commerce_host_tests::TestHost;
use reqwest::Method;
use serde_json::json;

/// `GET /v1/installation` with `token`.
async fn whoami(host: &TestHost, token: &str) -> commerce_host_tests::Reply {
    host.call(token, Method::GET, "/v1/installation", None)
        .await
}

#[tokio::test]
async fn a_token_stops_working_the_moment_its_plugin_is_uninstalled() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("reader", &["orders.read"]).await;
    let (installation, token) = host.install(&store, "reader").await;
    for _ in 0..3 {
        whoami(&host, &token).await.expect(200);
    }

    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{installation}"),
        None,
    )
    .await
    .expect(204);

    whoami(&host, &token)
        .await
        .assert_error(401, "unauthorized");
    host.call(&token, Method::GET, "/v1/orders", None)
        .await
        .assert_error(401, "unauthorized");
}

#[tokio::test]
async fn a_reinstall_gives_a_new_token_with_the_new_versions_scopes_and_the_old_one_stays_revoked()
{
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("reader", &["orders.read"]).await;
    let (installation, old) = host.install(&store, "reader").await;
    host.call(&old, Method::GET, "/v1/orders", None)
        .await
        .expect(200);

    // Version 1.1.0 asks for customers instead of orders; a reinstall takes it.
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({ "manifest": {
            "name": "reader",
            "version": "1.1.0",
            "scopes": ["customers.read"],
            "contact_email": "dev@plugin.example",
        }})),
    )
    .await
    .expect(201);
    host.call(&old, Method::GET, "/v1/orders", None)
        .await
        .expect(200);
    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{installation}"),
        None,
    )
    .await
    .expect(204);
    let (_, new) = host.install(&store, "reader").await;

    let me = whoami(&host, &new).await.expect(200);
    assert_eq!(me.body["scopes"], json!(["customers.read"]));
    host.call(&new, Method::GET, "/v1/orders", None)
        .await
        .assert_error(403, "missing_scope");
    host.call(&new, Method::GET, "/v1/customers", None)
        .await
        .expect(200);
    whoami(&host, &old).await.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn new_rate_limits_apply_to_the_next_request() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("reader", &["orders.read"]).await;
    let (_, token) = host.install(&store, "reader").await;
    let first = whoami(&host, &token).await.expect(200);
    assert_eq!(first.header("x-ratelimit-remaining"), Some("119"));

    host.admin(
        Method::PATCH,
        &format!("/admin/v1/stores/{store}"),
        Some(json!({"rate_limits": {"requests_per_second": 1, "burst": 2, "requests_per_minute": 100}})),
    )
    .await
    .expect(200);

    // The clock stands still: a burst of 2, then refused.
    let next = whoami(&host, &token).await.expect(200);
    assert_eq!(next.header("x-ratelimit-remaining"), Some("1"));
    whoami(&host, &token).await.expect(200);
    whoami(&host, &token)
        .await
        .assert_error(429, "rate_limited");
}

#[tokio::test]
async fn another_stores_changes_leave_a_token_working() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    let other = host.create_store("other.example").await;
    host.publish("reader", &["orders.read"]).await;
    let (_, token) = host.install(&store, "reader").await;
    let (elsewhere, _) = host.install(&other, "reader").await;
    whoami(&host, &token).await.expect(200);

    host.raise_rate_limits(&other).await;
    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{other}/installations/{elsewhere}"),
        None,
    )
    .await
    .expect(204);

    let me = whoami(&host, &token).await.expect(200);
    assert_eq!(me.body["store"]["id"], store.as_str());
}
