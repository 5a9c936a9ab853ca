//! `GET /metrics`: the Prometheus text format, scraped after a known sequence of requests,
//! deliveries, component invocations and notifications on a fresh host. Each host has its own
//! registry, so the counts are exact even with other hosts running in this process.

use std::time::Duration;

use base64::Engine as _;
use commerce_host_tests::TestHost;
use commerce_host_tests::components::component;
use commerce_host_tests::receiver::{Behavior, Receiver};
use reqwest::Method;
use serde_json::json;

pub(crate) use commerce_host_tests::metrics::{Scrape, scrape};

/// Scrapes until `ready` holds (deliveries finish in the background).
async fn scrape_until(host: &TestHost, what: &str, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    host.eventually(what, || async {
        let s = scrape(host).await;
        ready(&s).then_some(s)
    })
    .await
}

const REQUESTS: &str = "commerce_host_http_requests_total";

#[tokio::test]
async fn requests_are_counted_by_route_template_and_status_with_the_429s() {
    let host = TestHost::start().await;
    let (store, token) = host
        .store_with_plugin("acme.example", &["customers.read"])
        .await;
    host.admin(
        Method::PATCH,
        &format!("/admin/v1/stores/{store}"),
        Some(json!({"rate_limits": {"requests_per_second": 1, "burst": 3, "requests_per_minute": 1000}})),
    )
    .await
    .expect(200);

    // A 404 on a route with an id, a 404 on no route, then three requests and a refused fourth.
    host.call(
        &token,
        Method::GET,
        "/v1/customers/cus_01jzzzzzzzzzzzzzzzzzzzzzzz",
        None,
    )
    .await
    .expect(404);
    host.call(&token, Method::GET, "/v1/no-such-thing/ord_secret42", None)
        .await
        .expect(404);
    for _ in 0..2 {
        host.call(&token, Method::GET, "/v1/installation", None)
            .await
            .expect(200);
    }
    host.call(&token, Method::GET, "/v1/installation", None)
        .await
        .assert_error(429, "rate_limited");
    host.send(Method::GET, "/v1/installation", Some("not-a-token"), None)
        .await
        .expect(401);

    let s = scrape(&host).await;
    let route = |route, status| {
        s.count(
            REQUESTS,
            &[("route", route), ("method", "GET"), ("status", status)],
        )
    };
    assert_eq!(route("/v1/customers/{id}", "404"), 1.0, "{}", s.text);
    assert_eq!(route("unmatched", "404"), 1.0, "{}", s.text);
    assert_eq!(route("/v1/installation", "200"), 2.0, "{}", s.text);
    assert_eq!(route("/v1/installation", "429"), 1.0, "{}", s.text);
    assert_eq!(route("/v1/installation", "401"), 1.0, "{}", s.text);
    assert_eq!(
        s.count(
            REQUESTS,
            &[
                ("route", "/admin/v1/stores/{store_id}"),
                ("method", "PATCH"),
                ("status", "200")
            ]
        ),
        1.0,
        "{}",
        s.text
    );
    assert!(
        !s.text.contains("cus_01j") && !s.text.contains("ord_secret42") && !s.text.contains(&store),
        "no raw path or id in a label: {}",
        s.text
    );
    assert_eq!(
        s.count(
            "commerce_host_rate_limited_requests_total",
            &[("limit", "store")]
        ),
        1.0
    );
    let latency = s
        .get(
            "commerce_host_http_request_duration_seconds_count",
            &[("route", "/v1/installation"), ("method", "GET")],
        )
        .expect("a latency histogram");
    assert_eq!(latency, 4.0);
    assert!(
        s.text
            .contains("# TYPE commerce_host_http_request_duration_seconds histogram")
    );

    // `/metrics` needs no token and is not rate-limited: the store's limit is used up, and the
    // earlier scrape counted itself.
    let again = scrape(&host).await;
    assert_eq!(
        again.count(
            REQUESTS,
            &[("route", "/metrics"), ("method", "GET"), ("status", "200")]
        ),
        1.0
    );
    // The queue is empty: nothing due, nothing old.
    assert_eq!(
        again.get("commerce_host_delivery_queue_due", &[]),
        Some(0.0)
    );
    assert_eq!(
        again.get("commerce_host_delivery_queue_oldest_due_age_seconds", &[]),
        Some(0.0)
    );
    // No event waits parked for its store's room.
    assert_eq!(
        again.get("commerce_host_delivery_events_parked", &[]),
        Some(0.0)
    );
    assert!(
        again
            .text
            .contains("# TYPE commerce_host_delivery_events_parked gauge")
    );
}

#[tokio::test]
async fn an_event_delivered_to_a_webhook_counts_once_as_emitted_and_as_a_successful_attempt() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (_, token) = host
        .store_with_plugin("hooks.example", &["customers.read", "customers.write"])
        .await;
    host.subscribe(&token, &receiver.url("/hook"), &["customer.created"])
        .await;
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "ann@example.com"})),
    )
    .await
    .expect(201);
    receiver.wait_for("/hook", 1, Duration::from_secs(10)).await;
    let attempts = "commerce_host_delivery_attempts_total";
    let ok = [("target", "webhook"), ("outcome", "succeeded")];
    let s = scrape_until(&host, "the attempt recorded", |s| {
        s.count(attempts, &ok) >= 1.0
    })
    .await;
    assert_eq!(s.count(attempts, &ok), 1.0, "{}", s.text);
    assert_eq!(
        s.count(attempts, &[("target", "webhook"), ("outcome", "failed")]),
        0.0
    );
    assert_eq!(
        s.count(
            "commerce_host_events_emitted_total",
            &[("type", "customer.created")]
        ),
        1.0,
        "{}",
        s.text
    );
    assert_eq!(
        s.get(
            "commerce_host_delivery_attempt_duration_seconds_count",
            &[("target", "webhook")]
        ),
        Some(1.0)
    );
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn component_invocations_are_counted_by_outcome() {
    let host = TestHost::start().await;
    let manifest = json!({
        "name": "hostile",
        "version": "1.0.0",
        "scopes": ["orders.read"],
        "contact_email": "dev@hostile.example",
        "events": ["plugin.configured"],
    });
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({"manifest": manifest, "component": b64(&component("hostile"))})),
    )
    .await
    .expect(201);
    for (domain, mode) in [("ok.example", "ok"), ("loop.example", "loop")] {
        let store = host.create_store(domain).await;
        let (inst, _) = host.install(&store, "hostile").await;
        host.admin(
            Method::PUT,
            &format!("/admin/v1/stores/{store}/installations/{inst}/settings"),
            Some(json!({"settings": {"mode": mode}})),
        )
        .await
        .expect(200);
    }
    let invocations = "commerce_host_component_invocations_total";
    let attempts = "commerce_host_delivery_attempts_total";
    let s = scrape_until(&host, "both invocations recorded", |s| {
        s.count(
            attempts,
            &[("target", "component"), ("outcome", "succeeded")],
        ) + s.count(attempts, &[("target", "component"), ("outcome", "failed")])
            >= 2.0
    })
    .await;
    assert_eq!(
        s.count(invocations, &[("outcome", "ok")]),
        1.0,
        "{}",
        s.text
    );
    assert_eq!(
        s.count(invocations, &[("outcome", "fuel")]),
        1.0,
        "{}",
        s.text
    );
    assert_eq!(
        s.count(
            attempts,
            &[("target", "component"), ("outcome", "succeeded")]
        ),
        1.0
    );
    assert_eq!(
        s.count(attempts, &[("target", "component"), ("outcome", "failed")]),
        1.0
    );
    assert_eq!(
        s.count(
            "commerce_host_events_emitted_total",
            &[("type", "plugin.configured")]
        ),
        2.0,
        "{}",
        s.text
    );
    assert_eq!(
        s.get(
            "commerce_host_component_invocation_duration_seconds_count",
            &[("outcome", "fuel")]
        ),
        Some(1.0)
    );
}

#[tokio::test]
async fn notifications_are_counted_by_channel_and_outcome_with_quota_refusals() {
    let host = TestHost::start().await;
    let store = host.create_store("notes.example").await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({
            "manifest": {"name": "notes", "version": "1.0.0", "scopes": [],
                         "contact_email": "dev@plugin.example"},
            "templates": {"hello": {"variables": [], "sms": {"body": "Hello"}}},
        })),
    )
    .await
    .expect(201);
    let (_, token) = host.install(&store, "notes").await;
    let provider = Receiver::start().await;
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/senders/sms"),
        Some(json!({"url": provider.url("/sms"), "auth_token": "sms-secret"})),
    )
    .await
    .expect(200);
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(json!({"channel": "sms", "to": "+14155550100", "template": "hello", "data": {}})),
    )
    .await
    .expect(202);
    let card = json!({"channel": "feed", "card": {"kind": "suggestion", "title": "Bundles",
           "body": "Stores like yours sell more with bundles.",
           "primary": {"label": "Create a bundle", "href": "/bundles/new"}}});
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(card.clone()),
    )
    .await
    .expect(202);
    host.call(&token, Method::POST, "/v1/notifications", Some(card))
        .await
        .assert_error(429, "quota_exceeded");

    let notes = "commerce_host_notifications_total";
    let s = scrape_until(&host, "the sms sent", |s| {
        s.count(notes, &[("channel", "sms"), ("outcome", "sent")]) >= 1.0
    })
    .await;
    let n = |channel, outcome| s.count(notes, &[("channel", channel), ("outcome", outcome)]);
    assert_eq!(n("sms", "accepted"), 1.0, "{}", s.text);
    assert_eq!(n("sms", "sent"), 1.0, "{}", s.text);
    assert_eq!(n("sms", "failed"), 0.0, "{}", s.text);
    assert_eq!(n("feed", "accepted"), 1.0, "{}", s.text);
    assert_eq!(
        s.count("commerce_host_quota_refusals_total", &[("channel", "feed")]),
        1.0,
        "{}",
        s.text
    );
    assert_eq!(provider.requests("/sms").len(), 1);
}

/// A webhook store whose plugin may create customers and receive `customer.created` at `url`.
async fn hooked_store(host: &TestHost, url: &str) -> String {
    let (_, token) = host
        .store_with_plugin("queue.example", &["customers.read", "customers.write"])
        .await;
    host.subscribe(&token, url, &["customer.created"]).await;
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "ann@example.com"})),
    )
    .await
    .expect(201);
    token
}

#[tokio::test]
async fn the_queue_gauges_show_a_due_delivery_in_flight_and_its_age() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/slow", Behavior::Hang(Duration::from_secs(5)));
    hooked_store(&host, &receiver.url("/slow")).await;
    receiver.wait_for("/slow", 1, Duration::from_secs(10)).await;
    host.clock.advance(jiff::SignedDuration::from_secs(90));
    let s = scrape(&host).await;
    assert_eq!(
        s.get("commerce_host_delivery_queue_due", &[]),
        Some(1.0),
        "{}",
        s.text
    );
    assert_eq!(
        s.get("commerce_host_delivery_queue_oldest_due_age_seconds", &[]),
        Some(90.0),
        "{}",
        s.text
    );
}

#[tokio::test]
async fn a_target_paused_when_its_retries_run_out_is_counted_once() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/down", Behavior::Status(500));
    hooked_store(&host, &receiver.url("/down")).await;
    let failed = [("target", "webhook"), ("outcome", "failed")];
    let attempts = "commerce_host_delivery_attempts_total";
    for (i, mins) in [1, 5, 30, 120, 360, 1440].into_iter().enumerate() {
        // The clock may move only once the attempt is recorded: its failure starts the wait.
        scrape_until(&host, "the failed attempt", |s| {
            s.count(attempts, &failed) >= (i + 1) as f64
        })
        .await;
        host.clock.advance(jiff::SignedDuration::from_mins(mins));
    }
    let s = scrape_until(&host, "the pause", |s| {
        s.count(
            "commerce_host_delivery_targets_paused_total",
            &[("target", "webhook")],
        ) >= 1.0
    })
    .await;
    assert_eq!(s.count(attempts, &failed), 7.0, "{}", s.text);
    assert_eq!(
        s.count(
            "commerce_host_delivery_targets_paused_total",
            &[("target", "webhook")]
        ),
        1.0
    );
    assert_eq!(
        s.count(attempts, &[("target", "webhook"), ("outcome", "succeeded")]),
        0.0
    );
}

#[tokio::test]
async fn the_embedded_stores_commits_are_counted_with_their_writes_and_the_time_they_took() {
    const COMMITS: &str = "commerce_host_storage_commits_total";
    const TRANSACTIONS: &str = "commerce_host_storage_committed_transactions_total";
    const WRITES: &str = "commerce_host_storage_committed_writes_total";
    const APPLYING: &str = "commerce_host_storage_commit_apply_microseconds_total";
    let host = TestHost::start().await;
    let (_, token) = host
        .store_with_plugin("commits.example", &["customers.write"])
        .await;
    let before = scrape(&host).await;
    let on_postgres =
        std::env::var(commerce_host_tests::TEST_DATABASE_URL).is_ok_and(|url| !url.is_empty());
    if on_postgres {
        // Each transaction commits on its own there: no one commit path to count.
        for name in [COMMITS, TRANSACTIONS, WRITES, APPLYING] {
            assert_eq!(before.get(name, &[]), None, "{name} on PostgreSQL");
        }
        return;
    }
    // The store and its installation were written before the scrape.
    let counted = |s: &Scrape| s.commit_stats().unwrap_or_else(|| panic!("{}", s.text));
    let first = counted(&before);
    assert!(first.batches >= 1, "{}", before.text);
    assert!(first.writes >= first.transactions);
    assert!(first.transactions >= first.batches);
    for name in [COMMITS, TRANSACTIONS, WRITES, APPLYING] {
        assert!(
            before.text.contains(&format!("# TYPE {name} counter")),
            "{name}: {}",
            before.text
        );
    }
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "bo@example.com"})),
    )
    .await
    .expect(201);
    let after = counted(&scrape(&host).await);
    // The customer's transaction at least (its record, its event, the event's outbox entry).
    assert!(after.batches > first.batches);
    assert!(after.transactions > first.transactions);
    assert!(after.writes >= first.writes + 3);
    assert!(after.applying > first.applying);
}
