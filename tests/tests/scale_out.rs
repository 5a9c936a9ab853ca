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

#[tokio::test]
async fn a_token_issued_on_one_host_works_on_the_other_and_stops_on_both_at_uninstall() {
    let a = TestHost::start().await;
    let Some(b) = TestHost::start_sharing(&a).await else {
        eprintln!(
            "two hosts share a PostgreSQL database only: set COMMERCE_HOST_TEST_DATABASE_URL"
        );
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
    let Some(b) = TestHost::start_sharing(&a).await else {
        eprintln!(
            "two hosts share a PostgreSQL database only: set COMMERCE_HOST_TEST_DATABASE_URL"
        );
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
    let Some(b) = TestHost::start_sharing(&a).await else {
        eprintln!(
            "two hosts share a PostgreSQL database only: set COMMERCE_HOST_TEST_DATABASE_URL"
        );
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
