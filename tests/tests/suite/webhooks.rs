//! Webhooks: subscriptions, signing, the retry schedule on a manual clock, pause and its mail,
//! resume, replay, retention, timeouts, SSRF refusal, privacy, and a kill -9 in mid-delivery.

use std::time::Duration;

use commerce_guest_sdk::webhook::{self, VerifyError};
use commerce_host_tests::receiver::{Behavior, Received, Receiver};
use commerce_host_tests::smtp::SmtpServer;
use commerce_host_tests::{Reply, TestHost, epoch};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

const SECRET: &str = "whsec-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(10);
/// How long a test watches for something that must not happen (the engine polls every 10 ms).
const QUIET: Duration = Duration::from_millis(200);
const SCHEDULE_MINS: [i64; 6] = [1, 5, 30, 120, 360, 1440];

/// A store with one plugin (`scopes`) whose rate limit will not get in the way of polling on a
/// stopped clock; returns (store id, token).
async fn store_with_plugin(host: &TestHost, domain: &str, scopes: &[&str]) -> (String, String) {
    // Every subscriber here may receive the `customer.created` events that `fire` makes.
    let scopes: Vec<&str> = scopes.iter().copied().chain(["customers.read"]).collect();
    let (store, token) = host.store_with_plugin(domain, &scopes).await;
    host.raise_rate_limits(&store).await;
    (store, token)
}

async fn subscribe(host: &TestHost, token: &str, url: &str) -> String {
    let reply = host
        .call(
            token,
            Method::POST,
            "/v1/webhooks",
            Some(json!({"url": url, "events": ["customer.created"], "secret": SECRET})),
        )
        .await
        .expect(201);
    reply.body["id"].as_str().expect("id").to_owned()
}

async fn get(host: &TestHost, token: &str, path: &str) -> Value {
    host.call(token, Method::GET, path, None)
        .await
        .expect(200)
        .body
}

async fn attempts(host: &TestHost, token: &str, wh: &str) -> Vec<Value> {
    let body = get(
        host,
        token,
        &format!("/v1/webhooks/{wh}/attempts?limit=250"),
    )
    .await;
    body["data"].as_array().expect("data").clone()
}

/// The subscription's deliveries in `status` (`""`: all).
async fn deliveries(host: &TestHost, token: &str, wh: &str, status: &str) -> Vec<Value> {
    let query = if status.is_empty() {
        String::new()
    } else {
        format!("?status={status}")
    };
    let body = get(host, token, &format!("/v1/webhooks/{wh}/deliveries{query}")).await;
    body["data"].as_array().expect("data").clone()
}

/// `POST /v1/webhooks/{wh}/replay` with `body`.
async fn replay(host: &TestHost, token: &str, wh: &str, body: Value) -> Reply {
    host.call(
        token,
        Method::POST,
        &format!("/v1/webhooks/{wh}/replay"),
        Some(body),
    )
    .await
}

/// The event id a delivered request carries.
fn event_id(r: &Received) -> String {
    r.header("x-service-event-id").expect("event id header")
}

/// Waits until `check` holds, polling; panics after [`WAIT`].
async fn eventually<F: std::future::Future<Output = bool>>(
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let deadline = std::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn subscriptions_are_created_listed_read_updated_and_deleted() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (_, token) = store_with_plugin(&host, "acme.example", &["orders.read"]).await;
    let reply = host
        .call(
            &token,
            Method::POST,
            "/v1/webhooks",
            Some(json!({"url": receiver.url("/a"), "events": ["order.paid", "customer.created"], "secret": SECRET})),
        )
        .await
        .expect(201);
    let wh = reply.body["id"].as_str().expect("id").to_owned();
    assert!(wh.starts_with("wh_"));
    assert_eq!(reply.body["status"], "active");
    assert_eq!(reply.body["source"], "api");
    assert_eq!(
        reply.body["events"],
        json!(["order.paid", "customer.created"])
    );
    assert_eq!(reply.body["created_at"], "2026-01-05T00:00:00.000Z");
    assert!(
        reply.body.get("secret").is_none(),
        "the secret is never returned"
    );

    let one = get(&host, &token, &format!("/v1/webhooks/{wh}")).await;
    assert_eq!(one["url"], receiver.url("/a"));
    assert!(one.get("secret").is_none());
    let list = get(&host, &token, "/v1/webhooks").await;
    assert_eq!(list["data"].as_array().expect("data").len(), 1);
    assert_eq!(list["page"]["has_more"], false);

    let patched = host
        .call(
            &token,
            Method::PATCH,
            &format!("/v1/webhooks/{wh}"),
            Some(json!({"events": ["order.created"], "url": receiver.url("/b")})),
        )
        .await
        .expect(200);
    assert_eq!(patched.body["events"], json!(["order.created"]));
    assert_eq!(patched.body["url"], receiver.url("/b"));
    let reply = host
        .call(
            &token,
            Method::PATCH,
            &format!("/v1/webhooks/{wh}"),
            Some(json!({"secret": "short"})),
        )
        .await
        .expect(400);
    assert_eq!(reply.field(), "secret");

    host.call(&token, Method::DELETE, &format!("/v1/webhooks/{wh}"), None)
        .await
        .expect(204);
    let reply = host
        .call(&token, Method::GET, &format!("/v1/webhooks/{wh}"), None)
        .await
        .expect(404);
    assert_eq!(reply.code(), "not_found");
    host.call(&token, Method::GET, "/v1/webhooks/not-an-id", None)
        .await
        .expect(404);
}

#[tokio::test]
async fn invalid_subscriptions_name_the_offending_field() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let (_, token) = host
        .store_with_plugin("acme.example", &["orders.read"])
        .await;
    let url = "http://127.0.0.1:9/hook";
    let cases = [
        (
            json!({"url": url, "events": ["order.paid", "order.exploded"], "secret": SECRET}),
            "events[1]",
        ),
        (
            json!({"url": url, "events": [], "secret": SECRET}),
            "events",
        ),
        (
            json!({"url": url, "events": ["order.paid", "order.paid"], "secret": SECRET}),
            "events[1]",
        ),
        (
            json!({"url": "ftp://127.0.0.1/x", "events": ["order.paid"], "secret": SECRET}),
            "url",
        ),
        (
            json!({"url": "not a url", "events": ["order.paid"], "secret": SECRET}),
            "url",
        ),
        (
            json!({"url": url, "events": ["order.paid"], "secret": ""}),
            "secret",
        ),
        (
            json!({"url": url, "events": ["order.paid"], "secret": "fifteen-bytes!!"}),
            "secret",
        ),
        (json!({"url": url, "events": ["order.paid"]}), "secret"),
        (
            json!({"url": url, "events": ["order.paid"], "secret": SECRET, "extra": 1}),
            "extra",
        ),
    ];
    for (body, field) in cases {
        let reply = host
            .call(&token, Method::POST, "/v1/webhooks", Some(body.clone()))
            .await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.code(), "validation_failed", "{body}");
        assert_eq!(reply.field(), field, "{body}: {}", reply.body);
    }
    // Receiving customer events needs customers.read, which this token lacks.
    let reply = host
        .call(
            &token,
            Method::POST,
            "/v1/webhooks",
            Some(
                json!({"url": url, "events": ["order.paid", "customer.created"], "secret": SECRET}),
            ),
        )
        .await
        .expect(403);
    assert_eq!(reply.code(), "missing_scope");
    host.call(
        &token,
        Method::POST,
        "/v1/webhooks",
        Some(json!({"url": url, "events": ["order.paid", "plugin.uninstalled"], "secret": "0123456789abcdef"})),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn urls_that_resolve_to_internal_addresses_are_refused_when_subscribing() {
    let host = TestHost::start().await; // No allowed networks: only public addresses.
    let (_, token) = store_with_plugin(&host, "acme.example", &[]).await;
    for url in [
        "http://127.0.0.1:8080/hook",
        "http://localhost/hook",
        "http://10.0.0.7/hook",
        "http://192.168.1.1/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/hook",
        "http://0.0.0.0/hook",
        "https://[::ffff:127.0.0.1]/hook",
    ] {
        let reply = host
            .call(
                &token,
                Method::POST,
                "/v1/webhooks",
                Some(json!({"url": url, "events": ["customer.created"], "secret": SECRET})),
            )
            .await;
        assert_eq!(reply.status, 400, "{url}: {}", reply.body);
        assert_eq!(reply.field(), "url", "{url}");
    }
}

#[tokio::test]
async fn addresses_are_checked_again_at_delivery() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    let wh = subscribe(&host, &token, &receiver.url("/a")).await;
    // The operator withdraws the loopback network: the next delivery must not go out.
    let host = host
        .restart_configured(|config| {
            config.delivery_poll_interval = Duration::from_millis(10);
        })
        .await;
    host.fire_customer_created(&store).await;
    eventually("a refused attempt is logged", || async {
        !attempts(&host, &token, &wh).await.is_empty()
    })
    .await;
    let log = attempts(&host, &token, &wh).await;
    let error = log[0]["error"].as_str().expect("error");
    assert!(error.contains("address not allowed"), "{error}");
    assert_eq!(log[0]["status_code"], Value::Null);
    assert!(receiver.all().is_empty(), "nothing reached the receiver");
}

#[tokio::test]
async fn deliveries_are_signed_and_the_sdk_accepts_exactly_the_bytes_sent() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    subscribe(&host, &token, &receiver.url("/hook")).await;
    let installed = host.fire_customer_created(&store).await;
    let got = receiver.wait_for("/hook", 1, WAIT).await;
    let r = &got[0];
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    let envelope = r.json();
    assert_eq!(envelope["type"], "customer.created");
    assert_eq!(envelope["created_at"], "2026-01-05T00:00:00.000Z");
    assert_eq!(envelope["store"]["id"], store.as_str());
    assert_eq!(envelope["store"]["domain"], "acme.example");
    assert_eq!(envelope["data"]["customer"]["id"], installed.as_str());
    assert!(envelope["id"].as_str().expect("id").starts_with("evt_"));
    assert_eq!(envelope["id"].as_str(), Some(event_id(r).as_str()));
    assert_eq!(
        r.header("x-service-event-type").as_deref(),
        Some("customer.created")
    );

    let now = epoch().as_second();
    let ts = r.header(webhook::TIMESTAMP_HEADER).expect("timestamp");
    let sig = r.header(webhook::SIGNATURE_HEADER).expect("signature");
    assert_eq!(ts, now.to_string(), "signed at the host clock's time");
    assert_eq!(sig.len(), 64);
    assert!(
        sig.chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    );
    let verify = |secret: &str, ts: Option<&str>, sig: Option<&str>, body: &[u8], now: i64| {
        webhook::verify(secret, ts, sig, body, now)
    };
    assert_eq!(verify(SECRET, Some(&ts), Some(&sig), &r.body, now), Ok(()));
    assert_eq!(
        verify(SECRET, Some(&ts), Some(&sig), &r.body, now + 300),
        Ok(())
    );
    assert_eq!(
        verify(SECRET, Some(&ts), Some(&sig), &r.body, now - 300),
        Ok(())
    );
    // Any changed byte of the body.
    for i in 0..r.body.len() {
        let mut body = r.body.clone();
        body[i] ^= 0x01;
        assert_eq!(
            verify(SECRET, Some(&ts), Some(&sig), &body, now),
            Err(VerifyError::BadSignature),
            "byte {i} changed"
        );
    }
    // Any changed character of the signature, a changed timestamp, or another secret.
    for i in 0..sig.len() {
        let mut bad = sig.clone().into_bytes();
        bad[i] = if bad[i] == b'0' { b'1' } else { b'0' };
        let bad = String::from_utf8(bad).expect("utf8");
        assert_eq!(
            verify(SECRET, Some(&ts), Some(&bad), &r.body, now),
            Err(VerifyError::BadSignature)
        );
    }
    let other_ts = (now + 1).to_string();
    assert_eq!(
        verify(SECRET, Some(&other_ts), Some(&sig), &r.body, now),
        Err(VerifyError::BadSignature)
    );
    assert_eq!(
        verify(
            "whsec-0123456789abcdeF",
            Some(&ts),
            Some(&sig),
            &r.body,
            now
        ),
        Err(VerifyError::BadSignature)
    );
    // Missing headers and stale timestamps.
    assert_eq!(
        verify(SECRET, None, Some(&sig), &r.body, now),
        Err(VerifyError::MissingTimestamp)
    );
    assert_eq!(
        verify(SECRET, Some(&ts), None, &r.body, now),
        Err(VerifyError::MissingSignature)
    );
    assert!(matches!(
        verify(SECRET, Some(&ts), Some(&sig), &r.body, now + 301),
        Err(VerifyError::Stale { .. })
    ));
    assert!(matches!(
        verify(SECRET, Some(&ts), Some(&sig), &r.body, now - 301),
        Err(VerifyError::Stale { .. })
    ));
}

/// Fires an event and runs its delivery through the whole schedule against a receiver that
/// fails, checking that no retry comes early and each comes on time. Returns the attempt log,
/// oldest first.
async fn exhaust_retries(
    host: &TestHost,
    receiver: &Receiver,
    (store, token): (&str, &str),
    wh: &str,
    path: &str,
) -> Vec<Value> {
    let before = receiver.requests(path).len();
    let logged = attempts(host, token, wh).await.len();
    // The clock may move only once an attempt is recorded: its failure time starts the wait.
    let recorded = |n: usize| async move {
        eventually("the attempt is recorded", || async {
            attempts(host, token, wh).await.len() >= logged + n
        })
        .await;
    };
    host.fire_customer_created(store).await;
    receiver.wait_for(path, before + 1, WAIT).await;
    for (i, mins) in SCHEDULE_MINS.iter().enumerate() {
        recorded(i + 1).await;
        host.clock
            .advance(SignedDuration::from_mins(*mins) - SignedDuration::from_secs(1));
        tokio::time::sleep(QUIET).await;
        assert_eq!(
            receiver.requests(path).len(),
            before + 1 + i,
            "retry {} came before {mins} min",
            i + 1
        );
        host.clock.advance(SignedDuration::from_secs(1));
        receiver.wait_for(path, before + 2 + i, WAIT).await;
    }
    eventually("the subscription is paused", || async {
        get(host, token, &format!("/v1/webhooks/{wh}")).await["status"] == "paused"
    })
    .await;
    let mut log = attempts(host, token, wh).await;
    log.reverse();
    log
}

#[tokio::test]
async fn failures_are_retried_at_1m_5m_30m_2h_6h_24h_then_the_subscription_pauses_and_the_owner_is_mailed_over_smtp()
 {
    let smtp = SmtpServer::start().await;
    let smtp_url = smtp.url.clone();
    let host = TestHost::start_for_webhooks(move |c| c.smtp_url = Some(smtp_url.clone())).await;
    let receiver = Receiver::start().await;
    receiver.set("/down", Behavior::Status(500));
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    let wh = subscribe(&host, &token, &receiver.url("/down")).await;
    let log = exhaust_retries(&host, &receiver, (&store, &token), &wh, "/down").await;

    // Seven attempts, at the exact times of the schedule, each counted from the failure before.
    let expected = [
        "2026-01-05T00:00:00.000Z",
        "2026-01-05T00:01:00.000Z",
        "2026-01-05T00:06:00.000Z",
        "2026-01-05T00:36:00.000Z",
        "2026-01-05T02:36:00.000Z",
        "2026-01-05T08:36:00.000Z",
        "2026-01-06T08:36:00.000Z",
    ];
    let times: Vec<&str> = log
        .iter()
        .map(|a| a["attempted_at"].as_str().expect("time"))
        .collect();
    assert_eq!(times, expected);
    for (i, a) in log.iter().enumerate() {
        assert_eq!(a["retry"], i);
        assert_eq!(a["status_code"], 500);
        assert_eq!(a["succeeded"], false);
        assert_eq!(a["response_body"], "answered 500");
        assert!(a["duration_ms"].is_u64());
    }
    let requests = receiver.requests("/down");
    assert!(
        requests
            .iter()
            .all(|r| event_id(r) == event_id(&requests[0])),
        "one event, retried"
    );

    let sub = get(&host, &token, &format!("/v1/webhooks/{wh}")).await;
    assert_eq!(sub["paused_at"], "2026-01-06T08:36:00.000Z");
    let reason = sub["pause_reason"].as_str().expect("reason");
    assert!(reason.contains("HTTP 500"), "{reason}");

    let mails = smtp.wait_for(1, WAIT).await;
    assert_eq!(mails[0].to, ["dev@plugin.example"]);
    assert!(mails[0].data.contains(&wh), "{}", mails[0].data);
    assert!(mails[0].data.contains("paused"), "{}", mails[0].data);
    // The SMTP server has the message before the mailer has recorded the server's answer.
    eventually("the mail is recorded as sent", || async {
        let outbox = host
            .admin(Method::GET, "/admin/v1/mail", None)
            .await
            .expect(200);
        outbox.body["data"][0]["status"] == "sent"
    })
    .await;

    // Paused: new events are not sent, but recorded as failed deliveries.
    let count = receiver.requests("/down").len();
    host.fire_customer_created(&store).await;
    eventually("the new event is recorded as failed", || async {
        deliveries(&host, &token, &wh, "failed").await.len() == 2
    })
    .await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(receiver.requests("/down").len(), count);
    assert_eq!(smtp.wait_for(1, WAIT).await.len(), 1, "one mail per pause");
}

#[tokio::test]
async fn without_smtp_the_pause_notice_waits_in_the_operators_outbox() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/down", Behavior::Status(404));
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    let wh = subscribe(&host, &token, &receiver.url("/down")).await;
    exhaust_retries(&host, &receiver, (&store, &token), &wh, "/down").await;
    eventually("the notice is in the outbox", || async {
        let page = host
            .admin(Method::GET, "/admin/v1/mail", None)
            .await
            .expect(200);
        !page.body["data"][0].is_null()
    })
    .await;
    let page = host
        .admin(Method::GET, "/admin/v1/mail", None)
        .await
        .expect(200);
    let mail = &page.body["data"][0];
    assert_eq!(mail["status"], "outbox");
    assert_eq!(mail["to"], "dev@plugin.example");
    assert!(mail["body"].as_str().expect("body").contains(&wh));
    assert!(mail["id"].as_str().expect("id").starts_with("mail_"));
    host.send(
        Method::GET,
        "/admin/v1/mail",
        Some("wrong-token-0123456789"),
        None,
    )
    .await
    .expect(401);
}

#[tokio::test]
async fn resume_restarts_delivery_and_replay_resends_failed_events() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/r", Behavior::Status(503));
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    let wh = subscribe(&host, &token, &receiver.url("/r")).await;
    exhaust_retries(&host, &receiver, (&store, &token), &wh, "/r").await;
    let first = event_id(&receiver.requests("/r")[0]);
    host.fire_customer_created(&store).await; // Fails at once: the subscription is paused.
    eventually("the second event is recorded as failed", || async {
        deliveries(&host, &token, &wh, "failed").await.len() == 2
    })
    .await;

    let reply = replay(&host, &token, &wh, json!({"event_id": first}))
        .await
        .expect(409);
    assert_eq!(reply.code(), "webhook_paused");
    receiver.set("/r", Behavior::Status(204));
    let resumed = host
        .call(
            &token,
            Method::POST,
            &format!("/v1/webhooks/{wh}/resume"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(resumed.body["status"], "active");
    assert_eq!(resumed.body["paused_at"], Value::Null);

    // New events flow again; the failed ones wait for a replay.
    let seen = receiver.requests("/r").len();
    host.fire_customer_created(&store).await;
    receiver.wait_for("/r", seen + 1, WAIT).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(receiver.requests("/r").len(), seen + 1);

    // One event by id.
    let reply = replay(&host, &token, &wh, json!({"event_id": first}))
        .await
        .expect(202);
    assert_eq!(reply.body["requeued"], 1);
    let got = receiver.wait_for("/r", seen + 2, WAIT).await;
    assert_eq!(
        event_id(&got[seen + 1]),
        first,
        "the same event id, for deduplication"
    );
    eventually("the replayed delivery succeeded", || async {
        deliveries(&host, &token, &wh, "failed").await.len() == 1
    })
    .await;
    let reply = replay(&host, &token, &wh, json!({"event_id": first}))
        .await
        .expect(409);
    assert_eq!(reply.code(), "delivery_not_failed");

    // Every failed event since a time.
    let reply = replay(&host, &token, &wh, json!({"since": "2026-01-01T00:00:00Z"}))
        .await
        .expect(202);
    assert_eq!(reply.body["requeued"], 1);
    receiver.wait_for("/r", seen + 3, WAIT).await;
    let reply = replay(&host, &token, &wh, json!({"since": "2026-01-01T00:00:00Z"}))
        .await
        .expect(202);
    assert_eq!(reply.body["requeued"], 0);

    // Bad requests.
    for (body, field) in [
        (json!({}), "body"),
        (
            json!({"event_id": first, "since": "2026-01-01T00:00:00Z"}),
            "body",
        ),
        (json!({"since": "yesterday"}), "since"),
        (json!({"event_id": "ord_1"}), "event_id"),
    ] {
        let reply = replay(&host, &token, &wh, body).await.expect(400);
        assert_eq!(reply.field(), field);
    }
    replay(
        &host,
        &token,
        &wh,
        json!({"event_id": "evt_01jd4z7k8m3n5p6q7r8s9t0v1w"}),
    )
    .await
    .expect(404);
}

#[tokio::test]
async fn events_and_their_attempts_are_purged_after_30_days() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/p", Behavior::Status(500));
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    let wh = subscribe(&host, &token, &receiver.url("/p")).await;
    host.fire_customer_created(&store).await;
    let old = event_id(&receiver.wait_for("/p", 1, WAIT).await[0]);
    eventually("the failure is recorded", || async {
        !attempts(&host, &token, &wh).await.is_empty()
    })
    .await;
    // A second event 29 days later, delivered at once.
    receiver.set("/p", Behavior::Status(200));
    host.clock.advance(SignedDuration::from_hours(29 * 24));
    // The first event's retry comes due now and succeeds.
    host.fire_customer_created(&store).await;
    eventually("both events delivered", || async {
        deliveries(&host, &token, &wh, "succeeded").await.len() == 2
    })
    .await;
    assert!(attempts(&host, &token, &wh).await.len() >= 3);

    // Day 30 plus a minute: the first event is gone with its delivery and attempts.
    host.clock
        .advance(SignedDuration::from_hours(24) + SignedDuration::from_mins(2));
    eventually("the first event is purged", || async {
        deliveries(&host, &token, &wh, "").await.len() == 1
    })
    .await;
    let log = attempts(&host, &token, &wh).await;
    assert_eq!(log.len(), 1);
    assert_ne!(log[0]["event_id"], old.as_str());
    replay(&host, &token, &wh, json!({"event_id": old}))
        .await
        .expect(404);
}

#[tokio::test]
async fn a_receiver_that_does_not_answer_in_time_fails_without_holding_up_others() {
    let host =
        TestHost::start_for_webhooks(|c| c.webhook_timeout = Duration::from_millis(400)).await;
    let receiver = Receiver::start().await;
    receiver.set("/slow", Behavior::Hang(Duration::from_secs(5)));
    receiver.set("/moved", Behavior::Status(302));
    let (store, token) = store_with_plugin(&host, "acme.example", &[]).await;
    let slow = subscribe(&host, &token, &receiver.url("/slow")).await;
    let moved = subscribe(&host, &token, &receiver.url("/moved")).await;
    subscribe(&host, &token, &receiver.url("/fast")).await;
    host.fire_customer_created(&store).await;
    let fast_at = receiver.wait_for("/fast", 1, WAIT).await[0].at;
    let slow_at = receiver.wait_for("/slow", 1, WAIT).await[0].at;
    assert!(
        fast_at < slow_at + Duration::from_millis(300),
        "the fast receiver did not wait for the slow one"
    );
    eventually("the slow attempt is logged", || async {
        !attempts(&host, &token, &slow).await.is_empty()
    })
    .await;
    let a = &attempts(&host, &token, &slow).await[0];
    assert!(
        a["error"]
            .as_str()
            .expect("error")
            .contains("timed out after 400 ms"),
        "{a}"
    );
    assert_eq!(a["status_code"], Value::Null);
    let ms = a["duration_ms"].as_u64().expect("duration");
    assert!((400..5000).contains(&ms), "{ms}");
    let pending = deliveries(&host, &token, &slow, "pending").await;
    assert_eq!(pending[0]["next_attempt_at"], "2026-01-05T00:01:00.000Z");

    // A redirect is a failure and is not followed.
    eventually("the redirect attempt is logged", || async {
        !attempts(&host, &token, &moved).await.is_empty()
    })
    .await;
    let a = &attempts(&host, &token, &moved).await[0];
    assert_eq!(a["status_code"], 302);
    assert_eq!(a["succeeded"], false);
}

#[tokio::test]
async fn subscriptions_are_private_to_their_installation() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("alpha", &["customers.read"]).await;
    host.publish("beta", &["customers.read"]).await;
    let (_, alpha) = host.install(&store, "alpha").await;
    let (_, beta) = host.install(&store, "beta").await;
    let wh = subscribe(&host, &alpha, &receiver.url("/a")).await;
    let path = format!("/v1/webhooks/{wh}");
    for (method, path, body) in [
        (Method::GET, path.clone(), None),
        (
            Method::PATCH,
            path.clone(),
            Some(json!({"secret": "another-secret-123"})),
        ),
        (Method::DELETE, path.clone(), None),
        (Method::POST, format!("{path}/resume"), None),
        (
            Method::POST,
            format!("{path}/replay"),
            Some(json!({"since": "2026-01-01T00:00:00Z"})),
        ),
        (Method::GET, format!("{path}/attempts"), None),
        (Method::GET, format!("{path}/deliveries"), None),
    ] {
        let reply: Reply = host.call(&beta, method.clone(), &path, body).await;
        assert_eq!(reply.status, 404, "{method} {path}: {}", reply.body);
    }
    assert_eq!(get(&host, &beta, "/v1/webhooks").await["data"], json!([]));
    assert_eq!(
        get(&host, &alpha, "/v1/webhooks").await["data"][0]["id"],
        wh.as_str()
    );
}

#[tokio::test]
async fn manifest_webhooks_are_created_at_install_and_removed_at_uninstall() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let manifest = |webhooks: Value| {
        json!({"manifest": {"name": "hooked", "version": "1.0.0", "scopes": ["orders.read", "customers.read"],
            "contact_email": "dev@hooked.example", "webhooks": webhooks}})
    };
    for (webhooks, field) in [
        (
            json!([{"url": "gopher://x.example/", "events": ["order.paid"], "secret": SECRET}]),
            "manifest.webhooks[0].url",
        ),
        (
            json!([{"url": receiver.url("/m"), "events": ["order.nope"], "secret": SECRET}]),
            "manifest.webhooks[0].events[0]",
        ),
        (
            json!([{"url": receiver.url("/m"), "events": ["product.created"], "secret": SECRET}]),
            "manifest.webhooks[0].events[0]",
        ),
        (
            json!([{"url": receiver.url("/m"), "events": ["order.paid"], "secret": "short"}]),
            "manifest.webhooks[0].secret",
        ),
    ] {
        let reply = host
            .admin(Method::POST, "/admin/v1/plugins", Some(manifest(webhooks)))
            .await
            .expect(400);
        assert_eq!(reply.field(), field);
    }
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(manifest(json!([{"url": receiver.url("/m"), "events": ["order.paid", "plugin.installed", "customer.created"], "secret": SECRET}]))),
    )
    .await
    .expect(201);
    let store = host.create_store("acme.example").await;
    let (inst, token) = host.install(&store, "hooked").await;
    let list = get(&host, &token, "/v1/webhooks").await;
    assert_eq!(list["data"][0]["source"], "manifest");
    assert_eq!(list["data"][0]["url"], receiver.url("/m"));
    // It receives its own plugin.installed (not other plugins' lifecycle events), and later
    // store events.
    receiver.wait_for("/m", 1, WAIT).await;
    host.fire_customer_created(&store).await;
    receiver.wait_for("/m", 2, WAIT).await;

    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{inst}"),
        None,
    )
    .await
    .expect(204);
    host.fire_customer_created(&store).await;
    tokio::time::sleep(QUIET).await;
    assert_eq!(
        receiver.requests("/m").len(),
        2,
        "no delivery after uninstall"
    );

    // A manifest URL must pass the network policy at install too.
    let host2 = TestHost::start().await;
    host2
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(manifest(
                json!([{"url": "http://10.0.0.1/m", "events": ["order.paid"], "secret": SECRET}]),
            )),
        )
        .await
        .expect(201);
    let store2 = host2.create_store("acme.example").await;
    let reply = host2
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store2}/installations"),
            Some(json!({"plugin": "hooked"})),
        )
        .await
        .expect(400);
    assert_eq!(reply.field(), "manifest.webhooks[0].url");
}

#[tokio::test]
async fn the_openapi_document_describes_the_webhook_endpoints() {
    let host = TestHost::start().await;
    let doc = host
        .send(Method::GET, "/v1/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    for (path, method) in [
        ("/v1/webhooks", "post"),
        ("/v1/webhooks", "get"),
        ("/v1/webhooks/{id}", "get"),
        ("/v1/webhooks/{id}", "patch"),
        ("/v1/webhooks/{id}", "delete"),
        ("/v1/webhooks/{id}/resume", "post"),
        ("/v1/webhooks/{id}/replay", "post"),
        ("/v1/webhooks/{id}/attempts", "get"),
        ("/v1/webhooks/{id}/deliveries", "get"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
    }
    let operator = host
        .send(Method::GET, "/admin/v1/openapi.json", None, None)
        .await
        .expect(200)
        .body;
    assert!(operator["paths"]["/admin/v1/mail"]["get"].is_object());
    let description = doc["info"]["description"].as_str().expect("description");
    assert!(description.contains("X-Service-Signature"));
}
