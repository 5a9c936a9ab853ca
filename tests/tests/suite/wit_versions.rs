//! The plugin contract's versions: a component built against the frozen `commerce:plugin@0.1.0`
//! (kept as a fixture, built by the 0.1.0 guest SDK) runs beside one built against `0.2.0` on
//! the same host, for the same event; a component for a version the host does not know is refused
//! at publish with a message that names it.

use base64::Engine as _;
use commerce_host_tests::components::{component, publish_body, repo_root};
use commerce_host_tests::{ALL_SCOPES, TestHost};
use reqwest::Method;
use serde_json::{Value, json};

/// `review-request` as the 0.1.0 SDK built it (before versions were recorded in the component).
fn review_request_0_1_0() -> Vec<u8> {
    let file = repo_root().join("tests/fixtures/review-request-wit-0.1.0.wasm");
    std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The publish body of `review-request`'s manifest under another name, with `wasm`.
fn publish_as(name: &str, wasm: &[u8]) -> Value {
    let mut body = publish_body("review-request");
    body["manifest"]["name"] = json!(name);
    body["component"] = json!(base64::engine::general_purpose::STANDARD.encode(wasm));
    body
}

/// `bytes` with every occurrence of `from` replaced by `to` (of the same length).
fn replace(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let (from, to) = (from.as_bytes(), to.as_bytes());
    let mut out = bytes.to_vec();
    let mut found = 0;
    let mut i = 0;
    while i + from.len() <= out.len() {
        if &out[i..i + from.len()] == from {
            out[i..i + from.len()].copy_from_slice(to);
            found += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(
        found > 0,
        "{} is not in the component",
        String::from_utf8_lossy(from)
    );
    out
}

#[tokio::test]
async fn a_0_1_0_component_and_a_0_2_0_component_handle_the_same_event_on_one_host() {
    let host = TestHost::start().await;
    let classic = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(publish_as(
                "review-request-classic",
                &review_request_0_1_0(),
            )),
        )
        .await
        .expect(201);
    assert_eq!(
        classic.body["component"]["wit_version"], "0.1.0",
        "{}",
        classic.body
    );
    assert!(
        classic.body["component"].get("sdk_version").is_none(),
        "{}",
        classic.body
    );
    let current = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(publish_body("review-request")),
        )
        .await
        .expect(201);
    assert_eq!(
        current.body["component"]["wit_version"], "0.2.0",
        "{}",
        current.body
    );
    assert_eq!(
        current.body["component"]["sdk_version"],
        env!("CARGO_PKG_VERSION"),
        "the SDK records its version: {}",
        current.body
    );

    let store = host.create_store("versions.example").await;
    host.install(&store, "review-request-classic").await;
    host.install(&store, "review-request").await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;

    let customer = host
        .call(
            &token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "ada@shop.example", "first_name": "Ada"})),
        )
        .await
        .expect(201);
    let placed = host
        .call(
            &token,
            Method::POST,
            "/v1/orders",
            Some(
                json!({"currency": "EUR", "customer_id": customer.body["id"],
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 1}]}),
            ),
        )
        .await
        .expect(201)
        .body;
    host.pay(&store, &placed).await.expect(200);
    let id = placed["id"].as_str().expect("order id");
    host.call(
        &token,
        Method::POST,
        &format!("/v1/orders/{id}/fulfillments"),
        Some(
            json!({"line_items": [{"line_item_id": placed["line_items"][0]["id"], "quantity": 1}]}),
        ),
    )
    .await
    .expect(201);

    // One `order.fulfilled`, one card from each plugin, the same card whichever contract built
    // it: the 0.1.0 component's string kind became the same `suggestion` as 0.2.0's enum.
    let cards = host
        .eventually("a card from each plugin", || async {
            let page = host
                .admin(Method::GET, &format!("/admin/v1/stores/{store}/feed"), None)
                .await
                .expect(200);
            let cards = page.body["data"].as_array().cloned().unwrap_or_default();
            (cards.len() == 2).then_some(cards)
        })
        .await;
    let mut by_plugin: Vec<(String, Value)> = cards
        .iter()
        .map(|c| {
            (
                c["plugin"].as_str().unwrap_or_default().to_owned(),
                c.clone(),
            )
        })
        .collect();
    by_plugin.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<&str> = by_plugin.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["review-request", "review-request-classic"]);
    for (plugin, card) in &by_plugin {
        assert_eq!(card["kind"], "suggestion", "{plugin}: {card}");
        assert_eq!(card["title"], "Ask Ada for a review", "{plugin}: {card}");
        assert_eq!(
            card["primary"]["href"],
            format!("/orders/{id}"),
            "{plugin}: {card}"
        );
    }
}

/// Publishes `wasm` as `name`, expecting the refusal of its component; returns the message.
async fn refused(host: &TestHost, name: &str, wasm: &[u8]) -> String {
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(publish_as(name, wasm)),
        )
        .await;
    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "component");
    reply.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_component_for_a_version_the_host_does_not_know_is_refused_with_what_to_do() {
    let host = TestHost::start().await;

    // Built by an SDK for a future contract: its record says so, and the message names both.
    let future_sdk = replace(
        &component("review-request"),
        "\"wit\":\"0.2.0\"",
        "\"wit\":\"9.9.0\"",
    );
    let message = refused(&host, "from-the-future", &future_sdk).await;
    for part in [
        "commerce:plugin@9.9.0",
        &format!("commerce-guest-sdk {}", env!("CARGO_PKG_VERSION")),
        "commerce:plugin@0.1.0 and @0.2.0",
        "rebuild the plugin",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }

    // Built without the SDK's record: the version of its handler export tells.
    let future_export = replace(
        &review_request_0_1_0(),
        "commerce:plugin/handler@0.1.0",
        "commerce:plugin/handler@0.9.0",
    );
    let message = refused(&host, "from-elsewhere", &future_export).await;
    assert!(message.contains("commerce:plugin@0.9.0"), "{message}");
    assert!(!message.contains("commerce-guest-sdk"), "{message}");

    // Neither was recorded.
    for name in ["from-the-future", "from-elsewhere"] {
        host.admin(Method::GET, &format!("/admin/v1/plugins/{name}"), None)
            .await
            .expect(404);
    }
}
