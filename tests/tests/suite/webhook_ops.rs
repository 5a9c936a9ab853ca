//! Operations: the health probes, and the webhook operations subscribers rely on: a test event,
//! resending one delivery, replay of pending deliveries, and rotating a secret with an overlap.

use std::time::Duration;

use commerce_guest_sdk::webhook;
use commerce_host_tests::receiver::{Behavior, Received, Receiver};
use commerce_host_tests::{Reply, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

const SECRET: &str = "whsec-0123456789abcdef";
const NEW_SECRET: &str = "whsec-fedcba9876543210";
const WAIT: Duration = Duration::from_secs(10);
/// How long a test watches for something that must not happen (the engine polls every 10 ms).
const QUIET: Duration = Duration::from_millis(300);

/// A store with a plugin that may receive customer and order events, and a rate limit that polling
/// will not reach.
async fn store_with_plugin(host: &TestHost, domain: &str) -> (String, String) {
    let (store, token) = host
        .store_with_plugin(domain, &["customers.read", "orders.read"])
        .await;
    host.raise_rate_limits(&store).await;
    (store, token)
}

async fn subscribe(host: &TestHost, token: &str, url: &str, events: &[&str]) -> String {
    let reply = host
        .call(
            token,
            Method::POST,
            "/v1/webhooks",
            Some(json!({"url": url, "events": events, "secret": SECRET})),
        )
        .await
        .expect(201);
    reply.body["id"].as_str().expect("id").to_owned()
}

async fn post(host: &TestHost, token: &str, path: &str, body: Option<Value>) -> Reply {
    host.call(token, Method::POST, path, body).await
}

async fn deliveries(host: &TestHost, token: &str, wh: &str) -> Vec<Value> {
    host.call(
        token,
        Method::GET,
        &format!("/v1/webhooks/{wh}/deliveries"),
        None,
    )
    .await
    .expect(200)
    .body["data"]
        .as_array()
        .expect("data")
        .clone()
}

fn verify(secret: &str, r: &Received, header: &str) -> Result<(), webhook::VerifyError> {
    let ts = r.header(webhook::TIMESTAMP_HEADER).expect("timestamp");
    let now: i64 = ts.parse().expect("seconds");
    webhook::verify(secret, Some(&ts), r.header(header).as_deref(), &r.body, now)
}

#[tokio::test]
async fn health_probes_answer_without_a_token_and_outside_the_rate_limits() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let health = host
        .send(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
    assert_eq!(health.body, json!({"status": "ok"}));
    // Far past the failed-auth limit (20 at once) of this address: probes carry no token.
    for _ in 0..60 {
        let ready = host
            .send(Method::GET, "/readyz", None, None)
            .await
            .expect(200);
        assert_eq!(
            ready.body,
            json!({"status": "ready", "checks": {"storage": "ok", "engine": "ok"}})
        );
    }
    host.send(Method::GET, "/healthz", None, None)
        .await
        .expect(200);
    let doc = host
        .send(Method::GET, "/v1/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    assert!(doc["paths"]["/healthz"]["get"].is_object());
    assert!(doc["paths"]["/readyz"]["get"]["responses"]["503"].is_object());
}

#[tokio::test]
async fn a_test_event_reaches_only_this_subscription_signed_and_marked() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (store, token) = store_with_plugin(&host, "acme.example").await;
    let (_, other) = store_with_plugin(&host, "other.example").await;
    let wh = subscribe(
        &host,
        &token,
        &receiver.url("/a"),
        &["order.paid", "customer.created"],
    )
    .await;
    subscribe(&host, &token, &receiver.url("/b"), &["order.paid"]).await;

    let reply = post(&host, &token, &format!("/v1/webhooks/{wh}/test"), None)
        .await
        .expect(202);
    assert_eq!(reply.body["test"], true);
    assert_eq!(
        reply.body["event_type"], "order.paid",
        "the first event by default"
    );
    let got = receiver.wait_for("/a", 1, WAIT).await;
    let r = &got[0];
    assert_eq!(r.header(webhook::TEST_HEADER).as_deref(), Some("true"));
    assert_eq!(verify(SECRET, r, webhook::SIGNATURE_HEADER), Ok(()));
    let envelope = r.json();
    assert_eq!(envelope["type"], "order.paid");
    assert_eq!(envelope["id"], reply.body["event_id"]);
    assert!(envelope["id"].as_str().expect("id").starts_with("evt_"));
    assert_eq!(envelope["store"]["id"], store.as_str());
    assert!(
        envelope["data"]["order"]["id"]
            .as_str()
            .expect("order")
            .starts_with("ord_")
    );
    assert!(envelope["data"]["order"]["total"].is_i64());
    assert!(
        envelope.get("test").is_none(),
        "the envelope stays the spec's"
    );

    let reply = post(
        &host,
        &token,
        &format!("/v1/webhooks/{wh}/test"),
        Some(json!({"event_type": "customer.created"})),
    )
    .await
    .expect(202);
    let got = receiver.wait_for("/a", 2, WAIT).await;
    assert_eq!(got[1].json()["type"], "customer.created");
    assert!(
        got[1].json()["data"]["customer"]["id"]
            .as_str()
            .expect("id")
            .starts_with("cus_")
    );
    let attempts = host
        .call(
            &token,
            Method::GET,
            &format!("/v1/webhooks/{wh}/attempts"),
            None,
        )
        .await
        .expect(200)
        .body;
    assert_eq!(attempts["data"][0]["event_id"], reply.body["event_id"]);

    tokio::time::sleep(QUIET).await;
    assert!(
        receiver.requests("/b").is_empty(),
        "no other subscription gets it"
    );
    let events = host.events(&store, "order.paid").await;
    assert!(events.is_empty(), "not in the store's event log");

    for body in [
        json!({"event_type": "order.refunded"}),
        json!({"event_type": "nope"}),
    ] {
        let reply = post(
            &host,
            &token,
            &format!("/v1/webhooks/{wh}/test"),
            Some(body),
        )
        .await
        .expect(400);
        assert_eq!(reply.field(), "event_type");
    }
    post(&host, &other, &format!("/v1/webhooks/{wh}/test"), None)
        .await
        .expect(404);
}

/// The keys of a JSON object, sorted.
fn keys(value: &Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    keys
}

/// The field names listed in `names` (separated by spaces), sorted.
fn fields(names: &str) -> Vec<&str> {
    let mut names: Vec<&str> = names.split_whitespace().collect();
    names.sort_unstable();
    names
}

#[tokio::test]
async fn a_test_event_of_every_type_carries_the_documented_records() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (store, token) = host
        .store_with_plugin(
            "acme.example",
            &["customers.read", "orders.read", "products.read"],
        )
        .await;
    host.raise_rate_limits(&store).await;
    let all = [
        "order.created",
        "order.paid",
        "order.fulfilled",
        "order.cancelled",
        "order.refunded",
        "customer.created",
        "customer.updated",
        "customer.deleted",
        "product.created",
        "product.updated",
        "product.inventory.updated",
        "plugin.installed",
        "plugin.configured",
        "plugin.uninstalled",
    ];
    let wh = subscribe(&host, &token, &receiver.url("/all"), &all).await;
    for kind in all {
        post(
            &host,
            &token,
            &format!("/v1/webhooks/{wh}/test"),
            Some(json!({ "event_type": kind })),
        )
        .await
        .expect(202);
    }
    let got = receiver.wait_for("/all", all.len(), WAIT).await;
    let data = |kind: &str| -> Value {
        got.iter()
            .map(Received::json)
            .find(|e| e["type"] == kind)
            .unwrap_or_else(|| panic!("no test event {kind}"))["data"]
            .clone()
    };

    let order = fields(
        "id status financial_status fulfillment_status currency customer_id email line_items subtotal total total_paid total_refunded tags note custom_fields fulfillments refunds created_at updated_at paid_at cancelled_at cancel_reason",
    );
    let summary = fields(
        "id status financial_status fulfillment_status currency customer_id email subtotal total total_paid total_refunded created_at updated_at paid_at cancelled_at",
    );
    let customer = fields(
        "id email phone first_name last_name accepts_marketing tags note addresses created_at updated_at",
    );
    let product = fields(
        "id title description status vendor tags media variants published_at created_at updated_at",
    );
    for kind in ["order.created", "order.cancelled"] {
        assert_eq!(keys(&data(kind)["order"]), order, "{kind}");
    }
    assert_eq!(data("order.cancelled")["order"]["status"], "cancelled");
    assert_eq!(
        keys(&data("order.paid")["order"]),
        fields("id total currency")
    );
    let fulfilled = data("order.fulfilled");
    assert_eq!(keys(&fulfilled), fields("order fulfillment"));
    assert_eq!(keys(&fulfilled["order"]), summary);
    assert_eq!(fulfilled["order"]["fulfillment_status"], "fulfilled");
    assert_eq!(
        keys(&fulfilled["fulfillment"]),
        fields("id line_items tracking_number carrier created_at")
    );
    let refunded = data("order.refunded");
    assert_eq!(keys(&refunded), fields("order refund"));
    assert_eq!(keys(&refunded["order"]), summary);
    assert_eq!(
        keys(&refunded["refund"]),
        fields("id amount line_items reason created_at")
    );
    for kind in ["customer.created", "customer.updated"] {
        assert_eq!(keys(&data(kind)["customer"]), customer, "{kind}");
    }
    assert_eq!(keys(&data("customer.deleted")["customer"]), vec!["id"]);
    for kind in ["product.created", "product.updated"] {
        assert_eq!(keys(&data(kind)["product"]), product, "{kind}");
    }
    let stock = data("product.inventory.updated");
    assert_eq!(keys(&stock), fields("inventory reason product"));
    assert_eq!(keys(&stock["product"]), product);
    assert_eq!(
        keys(&stock["inventory"]),
        fields("product_id variant_id previous_quantity inventory_quantity crossed")
    );
    let installed = host.events(&store, "plugin.installed").await;
    let own = &installed[0]["data"]["installation"];
    for kind in [
        "plugin.installed",
        "plugin.configured",
        "plugin.uninstalled",
    ] {
        assert_eq!(
            &data(kind)["installation"],
            own,
            "{kind}: the subscriber's own installation"
        );
    }
}

#[tokio::test]
async fn resend_moves_a_pending_delivery_to_now_without_duplicating_it() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/hook", Behavior::Status(500));
    let (store, token) = store_with_plugin(&host, "acme.example").await;
    let (_, other) = store_with_plugin(&host, "other.example").await;
    let wh = subscribe(&host, &token, &receiver.url("/hook"), &["customer.created"]).await;
    host.fire_customer_created(&store).await;
    receiver.wait_for("/hook", 1, WAIT).await;
    let pending = host
        .eventually("the delivery waits for its retry", || async {
            let d = deliveries(&host, &token, &wh).await;
            (d[0]["status"] == "pending" && d[0]["attempts"] == 1).then(|| d[0].clone())
        })
        .await;
    let event = pending["event_id"].as_str().expect("event").to_owned();
    let path = format!("/v1/webhooks/{wh}/deliveries/{event}/resend");

    post(&host, &other, &path, None).await.expect(404);
    let reply = post(&host, &token, &path, None).await.expect(202);
    assert_eq!(reply.body["status"], "pending");
    // Attempted at once, without the clock moving.
    receiver.wait_for("/hook", 2, WAIT).await;
    host.eventually("the resend's attempt is recorded", || async {
        let d = deliveries(&host, &token, &wh).await;
        (d[0]["attempts"] == 2 && d[0]["status"] == "pending").then_some(())
    })
    .await;
    // The old retry (due at +1 min) is gone: one minute later only the resend's retry runs.
    host.clock.advance(SignedDuration::from_secs(61));
    receiver.wait_for("/hook", 3, WAIT).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(receiver.requests("/hook").len(), 3, "not duplicated");

    // A succeeded delivery may be resent too (receivers deduplicate on the event id).
    receiver.set("/hook", Behavior::Status(200));
    host.clock.advance(SignedDuration::from_mins(5));
    host.eventually("the delivery succeeded", || async {
        (deliveries(&host, &token, &wh).await[0]["status"] == "succeeded").then_some(())
    })
    .await;
    let n = receiver.requests("/hook").len();
    post(&host, &token, &path, None).await.expect(202);
    let got = receiver.wait_for("/hook", n + 1, WAIT).await;
    assert_eq!(
        got[n].header("x-service-event-id").as_deref(),
        Some(event.as_str())
    );

    let missing = format!("/v1/webhooks/{wh}/deliveries/evt_00000000000000000000000000/resend");
    post(&host, &token, &missing, None).await.expect(404);
    let bad = format!("/v1/webhooks/{wh}/deliveries/nope/resend");
    assert_eq!(
        post(&host, &token, &bad, None).await.expect(400).field(),
        "event_id"
    );
}

#[tokio::test]
async fn a_delivery_whose_first_attempt_is_slow_shows_pending_after_a_second_and_once() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.hold();
    let (store, token) = store_with_plugin(&host, "acme.example").await;
    let wh = subscribe(&host, &token, &receiver.url("/hook"), &["customer.created"]).await;
    host.fire_customer_created(&store).await;
    receiver.wait_for("/hook", 1, WAIT).await; // Its first attempt, held.
    let shared = std::env::var(commerce_host_tests::TEST_DATABASE_URL).is_ok_and(|u| !u.is_empty());
    if !shared {
        // On sled the delivery is written with its first attempt, or after a second's wait.
        tokio::time::sleep(QUIET).await;
        assert_eq!(deliveries(&host, &token, &wh).await, Vec::<Value>::new());
    }
    host.clock.advance(SignedDuration::from_secs(1));
    let pending = host
        .eventually("the delivery shows pending", || async {
            let d = deliveries(&host, &token, &wh).await;
            (d.len() == 1 && d[0]["status"] == "pending").then(|| d[0].clone())
        })
        .await;
    assert_eq!(pending["attempts"], 0);
    receiver.release();
    host.eventually("its attempt is recorded", || async {
        let d = deliveries(&host, &token, &wh).await;
        (d[0]["status"] == "succeeded" && d[0]["attempts"] == 1).then_some(())
    })
    .await;
    assert_eq!(deliveries(&host, &token, &wh).await[0]["id"], pending["id"]);
    tokio::time::sleep(QUIET).await;
    assert_eq!(receiver.requests("/hook").len(), 1, "attempted once");
}

#[tokio::test]
async fn replay_since_moves_pending_deliveries_to_now_and_leaves_succeeded_ones() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/hook", Behavior::Status(500));
    let (store, token) = store_with_plugin(&host, "acme.example").await;
    let wh = subscribe(&host, &token, &receiver.url("/hook"), &["customer.created"]).await;
    host.fire_customer_created(&store).await;
    receiver.wait_for("/hook", 1, WAIT).await;
    host.eventually("the delivery waits for its retry", || async {
        let d = deliveries(&host, &token, &wh).await;
        (d[0]["status"] == "pending" && d[0]["attempts"] == 1).then_some(())
    })
    .await;
    receiver.set("/hook", Behavior::Status(200));
    let reply = post(
        &host,
        &token,
        &format!("/v1/webhooks/{wh}/replay"),
        Some(json!({"since": "2026-01-01T00:00:00Z"})),
    )
    .await
    .expect(202);
    assert_eq!(reply.body["requeued"], 1);
    receiver.wait_for("/hook", 2, WAIT).await;
    host.eventually("the replayed delivery succeeded", || async {
        (deliveries(&host, &token, &wh).await[0]["status"] == "succeeded").then_some(())
    })
    .await;
    let reply = post(
        &host,
        &token,
        &format!("/v1/webhooks/{wh}/replay"),
        Some(json!({"since": "2026-01-01T00:00:00Z"})),
    )
    .await
    .expect(202);
    assert_eq!(reply.body["requeued"], 0, "succeeded ones stay");
    tokio::time::sleep(QUIET).await;
    assert_eq!(receiver.requests("/hook").len(), 2);
}

#[tokio::test]
async fn a_rotated_secret_signs_with_both_secrets_for_24_hours_then_only_the_new_one() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (store, token) = store_with_plugin(&host, "acme.example").await;
    let (_, other) = store_with_plugin(&host, "other.example").await;
    let wh = subscribe(&host, &token, &receiver.url("/hook"), &["customer.created"]).await;
    let path = format!("/v1/webhooks/{wh}/rotate-secret");

    for bad in ["short", SECRET] {
        let reply = post(&host, &token, &path, Some(json!({"secret": bad})))
            .await
            .expect(400);
        assert_eq!(reply.field(), "secret");
    }
    post(&host, &other, &path, Some(json!({"secret": NEW_SECRET})))
        .await
        .expect(404);
    let reply = post(&host, &token, &path, Some(json!({"secret": NEW_SECRET})))
        .await
        .expect(200);
    assert_eq!(reply.body["webhook"]["id"], wh.as_str());
    assert_eq!(
        reply.body["previous_secret_expires_at"],
        "2026-01-06T00:00:00.000Z"
    );
    assert!(reply.body["webhook"].get("secret").is_none());

    host.fire_customer_created(&store).await;
    let got = receiver.wait_for("/hook", 1, WAIT).await;
    let r = &got[0];
    assert_eq!(verify(NEW_SECRET, r, webhook::SIGNATURE_HEADER), Ok(()));
    assert_eq!(
        verify(SECRET, r, webhook::PREVIOUS_SIGNATURE_HEADER),
        Ok(())
    );
    assert!(verify(SECRET, r, webhook::SIGNATURE_HEADER).is_err());
    // The SDK accepts it with either secret.
    let ts = r.header(webhook::TIMESTAMP_HEADER).expect("timestamp");
    let now: i64 = ts.parse().expect("seconds");
    let sig = r.header(webhook::SIGNATURE_HEADER);
    let prev = r.header(webhook::PREVIOUS_SIGNATURE_HEADER);
    for secret in [SECRET, NEW_SECRET] {
        assert_eq!(
            webhook::verify_rotating(
                secret,
                Some(&ts),
                sig.as_deref(),
                prev.as_deref(),
                &r.body,
                now
            ),
            Ok(())
        );
    }

    host.clock.advance(SignedDuration::from_hours(24));
    host.fire_customer_created(&store).await;
    let got = receiver.wait_for("/hook", 2, WAIT).await;
    let r = &got[1];
    assert_eq!(verify(NEW_SECRET, r, webhook::SIGNATURE_HEADER), Ok(()));
    assert!(
        r.header(webhook::PREVIOUS_SIGNATURE_HEADER).is_none(),
        "only the new one after 24 h"
    );
}
