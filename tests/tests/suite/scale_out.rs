//! Several hosts on one PostgreSQL database (issue 14): what one host commits, the others see and
//! act on at once. Runs when the suite runs on PostgreSQL (`COMMERCE_HOST_TEST_DATABASE_URL`);
//! on sled, whose folder belongs to one process, it says so and passes.

use std::collections::BTreeSet;
use std::time::Duration;

use commerce_host_tests::components::publish_body;
use commerce_host_tests::receiver::{Behavior, Receiver};
use commerce_host_tests::{ALL_SCOPES, TestHost};
use reqwest::Method;
use serde_json::json;

/// A second host on `a`'s database, or `None` (said on stderr) when the suite runs on sled.
async fn second_host(a: &TestHost) -> Option<TestHost> {
    let b = TestHost::start_sharing(a).await;
    if b.is_none() {
        eprintln!(
            "two hosts share a PostgreSQL database only: set COMMERCE_HOST_TEST_DATABASE_URL"
        );
    }
    b
}

#[tokio::test]
async fn a_token_issued_on_one_host_works_on_the_other_and_stops_on_both_at_uninstall() {
    let a = TestHost::start().await;
    let Some(b) = second_host(&a).await else {
        return;
    };
    let store = a.create_store("shared.example").await;
    a.publish("shop", &ALL_SCOPES).await;
    let (inst, token) = a.install(&store, "shop").await;

    // Issued on one, it works on the other; what one writes, the other reads.
    let made = b
        .call(
            &token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "ann@buyer.example"})),
        )
        .await
        .expect(201);
    let id = made.body["id"].as_str().expect("customer id");
    let read = a
        .call(&token, Method::GET, &format!("/v1/customers/{id}"), None)
        .await
        .expect(200);
    assert_eq!(read.body["email"], "ann@buyer.example");
    for host in [&a, &b] {
        host.call(&token, Method::GET, "/v1/installation", None)
            .await
            .expect(200);
    }

    // Uninstalled through one, refused by both: the other drops what it kept of the token as
    // soon as it hears of the change.
    a.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{inst}"),
        None,
    )
    .await
    .expect(204);
    a.call(&token, Method::GET, "/v1/installation", None)
        .await
        .assert_error(401, "unauthorized");
    b.eventually("the other host refuses the token", || async {
        let reply = b.call(&token, Method::GET, "/v1/installation", None).await;
        (reply.status == 401).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_component_published_through_one_host_runs_on_another() {
    let mut a = TestHost::start().await;
    let Some(b) = second_host(&a).await else {
        return;
    };
    let store = a.create_store("shared.example").await;
    a.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish_body("order-thanks")),
    )
    .await
    .expect(201);
    let (inst, _) = a.install(&store, "order-thanks").await;
    a.publish("shop", &ALL_SCOPES).await;
    let (_, shop) = a.install(&store, "shop").await;
    // Only the other host runs from now on: it never had the component on its disk.
    a.stop().await;

    let order = b.place_order(&shop).await;
    b.pay(&store, &order).await.expect(200);
    let id = order["id"].as_str().expect("order id").to_owned();
    let attempts = format!("/admin/v1/stores/{store}/installations/{inst}/attempts");
    let newest = b
        .eventually("the component's attempt on the other host", || async {
            let page = b.admin(Method::GET, &attempts, None).await.expect(200);
            page.body["data"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|a| a["event_type"] == "order.paid")
                .cloned()
        })
        .await;
    assert_eq!(newest["succeeded"], true, "{newest}");
    assert!(
        newest
            .to_string()
            .contains(&format!("order {id} has no customer")),
        "{newest}"
    );
}

#[tokio::test]
async fn events_made_on_two_hosts_are_each_delivered_once() {
    let a = TestHost::start_for_webhooks(|_| {}).await;
    let Some(b) = second_host(&a).await else {
        return;
    };
    let receiver = Receiver::start().await;
    receiver.set("/hooks", Behavior::Status(204));
    let store = a.create_store("shared.example").await;
    a.raise_rate_limits(&store).await;
    a.publish("shop", &ALL_SCOPES).await;
    let (_, token) = a.install(&store, "shop").await;
    let wh = a
        .subscribe(&token, &receiver.url("/hooks"), &["customer.created"])
        .await["id"]
        .as_str()
        .expect("webhook id")
        .to_owned();

    // Both engines see every event; each delivery is claimed by one of them.
    for i in 0..20 {
        let host = if i % 2 == 0 { &a } else { &b };
        host.call(
            &token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": format!("c{i}@buyer.example")})),
        )
        .await
        .expect(201);
    }
    receiver
        .wait_for("/hooks", 20, Duration::from_secs(20))
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got = receiver.requests("/hooks");
    let ids: BTreeSet<String> = got
        .iter()
        .map(|r| r.json()["id"].as_str().expect("event id").to_owned())
        .collect();
    assert_eq!((got.len(), ids.len()), (20, 20), "each event once");
    let attempts = b
        .call(
            &token,
            Method::GET,
            &format!("/v1/webhooks/{wh}/attempts?limit=250"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(
        attempts.body["data"].as_array().map(Vec::len),
        Some(20),
        "one attempt recorded per delivery"
    );
}

/// A subscription made through one host receives every event committed after it, whichever host
/// commits the event and whichever engine fans it out: no host works from a list of targets that
/// has not heard of it yet. (Where hosts share a database each reads a store's targets for every
/// fan-out; a copy kept until another host's notice arrives would open a window of about the
/// notice's latency, narrower on one machine than this test's round trips can show.)
#[tokio::test]
async fn a_subscription_made_on_one_host_hears_the_next_event_made_on_the_other() {
    let a = TestHost::start_for_webhooks(|_| {}).await;
    let Some(b) = second_host(&a).await else {
        return;
    };
    let receiver = Receiver::start().await;
    let store = a.create_store("fresh.example").await;
    a.raise_rate_limits(&store).await;
    a.publish("shop", &ALL_SCOPES).await;
    let (_, token) = a.install(&store, "shop").await;
    let rounds = 10;
    for i in 0..rounds {
        let path = format!("/hooks{i}");
        receiver.set(&path, Behavior::Status(204));
        let (made_on, event_on) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        made_on
            .subscribe(&token, &receiver.url(&path), &["customer.created"])
            .await;
        event_on
            .call(
                &token,
                Method::POST,
                "/v1/customers",
                Some(json!({"email": format!("n{i}@buyer.example")})),
            )
            .await
            .expect(201);
        // Each subscription so far hears this round's event before the next one is made: an
        // event is fanned out to the targets there are when it is, so one fanned out after the
        // next subscription was made would reach that one too.
        for j in 0..=i {
            let heard = i - j + 1;
            receiver
                .wait_for(&format!("/hooks{j}"), heard, Duration::from_secs(20))
                .await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..rounds {
        assert_eq!(
            receiver.requests(&format!("/hooks{i}")).len(),
            rounds - i,
            "subscription {i}: each event committed after it, once"
        );
    }
}

#[tokio::test]
async fn a_stores_rate_limit_and_sms_quota_are_counted_across_both_hosts() {
    let a = TestHost::start().await;
    let Some(b) = second_host(&a).await else {
        return;
    };
    let store = a.create_store("shared.example").await;
    a.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({
            "manifest": {"name": "texts", "version": "1.0.0", "scopes": ["customers.read"],
                         "contact_email": "dev@plugin.example"},
            "templates": {"shipped": {"variables": ["order_id"],
                                      "sms": {"body": "Order {{ order_id }} shipped"}}},
        })),
    )
    .await
    .expect(201);
    let (_, token) = a.install(&store, "texts").await;

    // The hosts share one clock, stopped: the store's burst of 120 is all there is, and it is
    // one allowance for both hosts together (each host on its own would admit all 200).
    let mut admitted = 0;
    for i in 0..200 {
        let host = if i % 2 == 0 { &a } else { &b };
        let reply = host
            .call(&token, Method::GET, "/v1/installation", None)
            .await;
        match reply.status {
            200 => admitted += 1,
            429 => {
                reply.assert_error(429, "rate_limited");
                assert_eq!(reply.header("retry-after"), Some("1"));
                assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
            }
            other => panic!("unexpected {other}: {}", reply.body),
        }
    }
    assert_eq!(admitted, 120, "the burst, once across both hosts");
    // A second later, 60 more, again across both.
    a.clock.advance(jiff::SignedDuration::from_secs(1));
    let mut admitted = 0;
    for i in 0..100 {
        let host = if i % 2 == 0 { &b } else { &a };
        let reply = host
            .call(&token, Method::GET, "/v1/installation", None)
            .await;
        admitted += usize::from(reply.status == 200);
    }
    assert_eq!(admitted, 60, "a second's refill, once across both hosts");

    // The sms quota: 3 a day, counted across both hosts.
    a.clock.advance(jiff::SignedDuration::from_secs(60));
    a.admin(
        Method::PATCH,
        &format!("/admin/v1/stores/{store}"),
        Some(json!({"quotas": {"sms": 3}})),
    )
    .await
    .expect(200);
    let mut accepted = 0;
    for i in 0..6 {
        let host = if i % 2 == 0 { &b } else { &a };
        let reply = host
            .call(
                &token,
                Method::POST,
                "/v1/notifications",
                Some(
                    json!({"channel": "sms", "to": "+14155550123", "template": "shipped",
                            "data": {"order_id": format!("{i}")}}),
                ),
            )
            .await;
        match reply.status {
            202 => accepted += 1,
            _ => reply.assert_error(429, "quota_exceeded"),
        }
    }
    assert_eq!(accepted, 3, "the day's quota, once across both hosts");
}

/// The live hosts' gauge.
const HOSTS_LIVE: &str = "commerce_host_hosts_live";

/// Waits for `host`'s live hosts' gauge to read `wanted`.
async fn wait_for_hosts_live(host: &TestHost, wanted: f64) {
    host.eventually(&format!("{wanted} live hosts"), || async {
        let live = crate::metrics::scrape(host).await.get(HOSTS_LIVE, &[]);
        (live == Some(wanted)).then_some(())
    })
    .await;
}

/// Hosts on one database hear each other's heartbeats (they divide the delivery work by them,
/// `service/deliveries/peers.rs`), and a host that stops leaves: the other counts itself alone
/// at its next heartbeat, without waiting for the 5 s timeout.
#[tokio::test]
async fn hosts_on_one_database_hear_each_others_heartbeats_and_a_stopped_one_leaves() {
    let a = TestHost::start().await;
    let Some(mut b) = second_host(&a).await else {
        let live = crate::metrics::scrape(&a).await.get(HOSTS_LIVE, &[]);
        assert_eq!(live, Some(1.0), "alone on sled");
        return;
    };
    // A heartbeat a second: each hears the other.
    wait_for_hosts_live(&a, 2.0).await;
    wait_for_hosts_live(&b, 2.0).await;
    b.stop().await;
    // Both hosts' clocks are stopped, so the 5 s timeout never passes: only b's leaving can
    // take it off the list.
    wait_for_hosts_live(&a, 1.0).await;
}
