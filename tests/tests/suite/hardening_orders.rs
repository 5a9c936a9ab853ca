//! Hardening of orders (audit, issue 11): money and quantities never wrap, refunds and fulfilments
//! are bounded per order and their events stay small, and write scopes do not read customer data.

use std::collections::BTreeMap;

use commerce_host::model::clock::ManualClock;
use commerce_host::model::error::Error;
use commerce_host::model::ids::{InstallationId, ProductId, VariantId};
use commerce_host::model::order::{
    CancelOrder, ConfirmPayment, CreateFulfillment, CreateOrder, CreateRefund, FinancialStatus,
    FulfillmentStatus, LineQuantity, NewLineItem, Order, OrderStatus,
};
use commerce_host::model::product::{CreateProduct, NewVariant};
use commerce_host::service::{Actor, Scope, Service};
use commerce_host_tests::{ALL_SCOPES, Reply, TestHost, epoch};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use reqwest::Method;
use serde_json::{Value, json};

struct Shop {
    host: TestHost,
    store: String,
    token: String,
}

impl Shop {
    /// A store with an all-scopes plugin, and rate limits high enough for a few hundred calls
    /// at one instant of the manual clock.
    async fn open() -> Self {
        let host = TestHost::start().await;
        let (store, token) = host.store_with_plugin("acme.example", &ALL_SCOPES).await;
        host.admin(
            Method::PATCH,
            &format!("/admin/v1/stores/{store}"),
            Some(json!({"rate_limits": {"requests_per_second": 100000, "burst": 100000, "requests_per_minute": 1000000}})),
        )
        .await
        .expect(200);
        Self { host, store, token }
    }

    async fn call(&self, method: Method, path: impl AsRef<str>, body: Option<Value>) -> Reply {
        self.host
            .call(&self.token, method, path.as_ref(), body)
            .await
    }

    /// A live order of one custom line: `quantity` × `unit_price`.
    async fn order(&self, unit_price: i64, quantity: i64) -> Value {
        self.call(
            Method::POST,
            "/v1/orders",
            Some(json!({"currency": "EUR", "line_items": [{"title": "Mug", "unit_price": unit_price, "quantity": quantity}]})),
        )
        .await
        .expect(201)
        .body
    }

    async fn paid_order(&self, unit_price: i64, quantity: i64) -> Value {
        let order = self.order(unit_price, quantity).await;
        self.host.pay(&self.store, &order).await.expect(200).body
    }

    async fn refund(&self, order: &Value, body: Value) -> Reply {
        self.call(
            Method::POST,
            format!("/v1/orders/{}/refunds", id(order)),
            Some(body),
        )
        .await
    }

    async fn fulfil(&self, order: &Value, body: Value) -> Reply {
        self.call(
            Method::POST,
            format!("/v1/orders/{}/fulfillments", id(order)),
            Some(body),
        )
        .await
    }

    async fn get(&self, order: &Value) -> Value {
        self.call(Method::GET, format!("/v1/orders/{}", id(order)), None)
            .await
            .expect(200)
            .body
    }
}

fn id(record: &Value) -> &str {
    record["id"].as_str().expect("id")
}

fn line_id(order: &Value) -> String {
    order["line_items"][0]["id"]
        .as_str()
        .expect("line id")
        .to_owned()
}

#[track_caller]
fn assert_refused(reply: &Reply, status: u16, code: &str, field: &str) {
    assert_eq!(
        (reply.status, reply.code(), reply.field()),
        (status, code, field),
        "body: {}",
        reply.body
    );
}

// --- The audit's examples -------------------------------------------------------------------

#[tokio::test]
async fn a_refund_naming_a_line_twice_with_i64_quantities_is_refused_and_refunds_nothing() {
    let shop = Shop::open().await;
    let order = shop.paid_order(1000, 3).await;
    let line = line_id(&order);
    let wrapped = shop
        .refund(
            &order,
            json!({"line_items": [
                {"line_item_id": line, "quantity": i64::MAX},
                {"line_item_id": line, "quantity": i64::MAX - 3},
            ]}),
        )
        .await;
    assert_refused(
        &wrapped,
        400,
        "validation_failed",
        "line_items[1].line_item_id",
    );
    // The audit's follow-up: with nothing refunded, 8 000 is still more than the 3 000 paid.
    let follow_up = shop.refund(&order, json!({"amount": 8000})).await;
    assert_refused(&follow_up, 409, "refund_exceeds_paid", "amount");
    let after = shop.get(&order).await;
    assert_eq!(after["total_refunded"], 0);
    assert_eq!(after["line_items"][0]["refunded_quantity"], 0);
    assert_eq!(after["financial_status"], "paid");
}

#[tokio::test]
async fn a_negative_or_absurd_refund_is_refused_on_its_field() {
    let shop = Shop::open().await;
    let order = shop.paid_order(1000, 3).await;
    let line = line_id(&order);
    for (body, field) in [
        (json!({"amount": -5000}), "amount"),
        (json!({"amount": 0}), "amount"),
        (json!({"amount": 1_000_000_000_001i64}), "amount"),
        (
            json!({"line_items": [{"line_item_id": line, "quantity": i64::MAX}]}),
            "line_items[0].quantity",
        ),
        (
            json!({"line_items": [{"line_item_id": line, "quantity": -2}]}),
            "line_items[0].quantity",
        ),
    ] {
        let reply = shop.refund(&order, body.clone()).await;
        assert_refused(&reply, 400, "validation_failed", field);
    }
    // A single line within bounds but beyond what is left is a 409, as before.
    let beyond = shop
        .refund(
            &order,
            json!({"line_items": [{"line_item_id": line, "quantity": 4}]}),
        )
        .await;
    assert_refused(
        &beyond,
        409,
        "refund_exceeds_items",
        "line_items[0].quantity",
    );
    assert_eq!(shop.get(&order).await["total_refunded"], 0);
}

#[tokio::test]
async fn shipping_7_units_of_an_order_of_2_is_refused() {
    let shop = Shop::open().await;
    let order = shop.order(500, 2).await;
    let line = line_id(&order);
    // `i64::MAX + (i64::MAX - 6)` wraps to -8 (the audit shipped -5, then 7).
    let wrapped = shop
        .fulfil(
            &order,
            json!({"line_items": [
                {"line_item_id": line, "quantity": i64::MAX},
                {"line_item_id": line, "quantity": i64::MAX - 6},
            ]}),
        )
        .await;
    assert_refused(
        &wrapped,
        400,
        "validation_failed",
        "line_items[1].line_item_id",
    );
    let huge = shop
        .fulfil(
            &order,
            json!({"line_items": [{"line_item_id": line, "quantity": i64::MAX}]}),
        )
        .await;
    assert_refused(&huge, 400, "validation_failed", "line_items[0].quantity");
    let seven = shop
        .fulfil(
            &order,
            json!({"line_items": [{"line_item_id": line, "quantity": 7}]}),
        )
        .await;
    assert_refused(&seven, 409, "over_fulfillment", "line_items[0].quantity");
    let after = shop.get(&order).await;
    assert_eq!(after["line_items"][0]["fulfilled_quantity"], 0);
    assert_eq!(after["fulfillment_status"], "unfulfilled");
}

#[tokio::test]
async fn a_line_named_twice_is_refused_even_with_small_quantities() {
    let shop = Shop::open().await;
    let order = shop.paid_order(1000, 3).await;
    let line = line_id(&order);
    let twice = json!({"line_items": [
        {"line_item_id": line, "quantity": 1},
        {"line_item_id": line, "quantity": 1},
    ]});
    assert_refused(
        &shop.refund(&order, twice.clone()).await,
        400,
        "validation_failed",
        "line_items[1].line_item_id",
    );
    assert_refused(
        &shop.fulfil(&order, twice).await,
        400,
        "validation_failed",
        "line_items[1].line_item_id",
    );
}

// --- Bounds on every amount and quantity ----------------------------------------------------

#[tokio::test]
async fn prices_quantities_and_totals_beyond_the_documented_bounds_are_refused_on_their_field() {
    let shop = Shop::open().await;
    let custom = |unit_price: Value, quantity: Value| json!({"title": "Thing", "unit_price": unit_price, "quantity": quantity});
    for (lines, field) in [
        (
            vec![custom(json!(1000), json!(10_001))],
            "line_items[0].quantity",
        ),
        (
            vec![custom(json!(1000), json!(i64::MAX))],
            "line_items[0].quantity",
        ),
        (
            vec![custom(json!(1_000_000_000_001i64), json!(1))],
            "line_items[0].unit_price",
        ),
        (
            vec![custom(json!(i64::MAX), json!(2))],
            "line_items[0].unit_price",
        ),
        // Each factor in range, the line total not.
        (
            vec![custom(json!(1_000_000_000_000i64), json!(2))],
            "line_items[0].quantity",
        ),
        // Each line in range, the order total not.
        (
            vec![
                custom(json!(600_000_000_000i64), json!(1)),
                custom(json!(600_000_000_000i64), json!(1)),
            ],
            "line_items",
        ),
    ] {
        let reply = shop
            .call(
                Method::POST,
                "/v1/orders",
                Some(json!({"currency": "EUR", "line_items": lines})),
            )
            .await;
        assert_refused(&reply, 400, "validation_failed", field);
    }
    // The largest order there may be is fine.
    let biggest = shop.order(1_000_000_000_000, 1).await;
    assert_eq!(biggest["total"], 1_000_000_000_000i64);

    for (variant, field) in [
        (
            json!({"price": 1_000_000_000_001i64, "currency": "EUR"}),
            "variants[0].price",
        ),
        (
            json!({"price": 100, "currency": "EUR", "inventory_quantity": 1_000_000_001}),
            "variants[0].inventory_quantity",
        ),
        (
            json!({"price": 100, "currency": "EUR", "low_stock_threshold": i64::MAX}),
            "variants[0].low_stock_threshold",
        ),
    ] {
        let reply = shop
            .call(
                Method::POST,
                "/v1/products",
                Some(json!({"title": "Mug", "variants": [variant]})),
            )
            .await;
        assert_refused(&reply, 400, "validation_failed", field);
    }
}

#[tokio::test]
async fn stock_stays_between_zero_and_a_billion_whatever_the_adjustment() {
    let shop = Shop::open().await;
    let product = shop
        .call(
            Method::POST,
            "/v1/products",
            Some(json!({"title": "Mug", "variants": [{"price": 100, "currency": "EUR", "inventory_quantity": 5}]})),
        )
        .await
        .expect(201)
        .body;
    let variant = product["variants"][0]["id"].as_str().expect("variant");
    let adjust = |body: Value| shop.call(Method::POST, "/v1/inventory/adjust", Some(body));
    for (body, status, code, field) in [
        (
            json!({"variant_id": variant, "delta": i64::MAX}),
            400,
            "validation_failed",
            "delta",
        ),
        (
            json!({"variant_id": variant, "delta": i64::MIN}),
            400,
            "validation_failed",
            "delta",
        ),
        (
            json!({"variant_id": variant, "set": 1_000_000_001}),
            400,
            "validation_failed",
            "set",
        ),
        (
            json!({"variant_id": variant, "set": -1}),
            400,
            "validation_failed",
            "set",
        ),
        (
            json!({"variant_id": variant, "delta": 1_000_000_000}),
            409,
            "stock_limit_exceeded",
            "delta",
        ),
        (
            json!({"variant_id": variant, "delta": -6}),
            409,
            "insufficient_stock",
            "delta",
        ),
    ] {
        assert_refused(&adjust(body).await, status, code, field);
    }
    let full = adjust(json!({"variant_id": variant, "delta": 999_999_995}))
        .await
        .expect(200);
    assert_eq!(full.body["inventory_quantity"], 1_000_000_000);
}

// --- Bounded refunds and fulfilments, small events --------------------------------------------

#[tokio::test]
async fn an_order_takes_100_refunds_then_refuses_the_101st_and_refund_events_do_not_grow() {
    let shop = Shop::open().await;
    let order = shop.paid_order(1000, 3).await;
    for _ in 0..100 {
        shop.refund(&order, json!({"amount": 1, "reason": "one cent"}))
            .await
            .expect(201);
    }
    let refused = shop.refund(&order, json!({"amount": 1})).await;
    assert_refused(&refused, 409, "too_many_refunds", "");
    let after = shop.get(&order).await;
    assert_eq!(after["total_refunded"], 100);
    assert_eq!(after["refunds"].as_array().expect("refunds").len(), 100);

    let events = shop.host.events(&shop.store, "order.refunded").await;
    assert_eq!(events.len(), 100);
    let size = |e: &Value| e["data"].to_string().len();
    let (first, last) = (size(&events[0]), size(&events[99]));
    // Only `total_refunded` (1 → 100) and the status differ in length.
    assert!(
        last <= first + 16,
        "the 100th refund event ({last} bytes) should be as small as the first ({first} bytes)"
    );
    let data = &events[99]["data"];
    assert_eq!(data["refund"]["amount"], 1);
    assert_eq!(data["order"]["id"], order["id"]);
    assert_eq!(data["order"]["total_refunded"], 100);
    assert_eq!(data["order"]["total_paid"], 3000);
    assert_eq!(data["order"]["currency"], "EUR");
    assert_eq!(data["order"]["financial_status"], "partially_refunded");
    for absent in ["refunds", "line_items", "fulfillments"] {
        assert!(
            data["order"].get(absent).is_none(),
            "`{absent}` should not be in the event: {data}"
        );
    }
}

#[tokio::test]
async fn an_order_takes_100_fulfilments_then_refuses_the_101st() {
    let shop = Shop::open().await;
    let order = shop.order(100, 200).await;
    let line = line_id(&order);
    let one = json!({"line_items": [{"line_item_id": line, "quantity": 1}]});
    for _ in 0..100 {
        shop.fulfil(&order, one.clone()).await.expect(201);
    }
    assert_refused(
        &shop.fulfil(&order, one).await,
        409,
        "too_many_fulfillments",
        "",
    );
    assert_eq!(
        shop.get(&order).await["line_items"][0]["fulfilled_quantity"],
        100
    );
}

#[tokio::test]
async fn the_fulfilled_event_carries_a_summary_and_the_fulfilment_that_completed_the_order() {
    let shop = Shop::open().await;
    let order = shop.order(100, 3).await;
    let line = line_id(&order);
    shop.fulfil(
        &order,
        json!({"line_items": [{"line_item_id": line, "quantity": 1}]}),
    )
    .await
    .expect(201);
    shop.fulfil(&order, json!({"tracking_number": "1Z999"}))
        .await
        .expect(201);
    let events = shop.host.events(&shop.store, "order.fulfilled").await;
    assert_eq!(events.len(), 1);
    let data = &events[0]["data"];
    assert_eq!(data["order"]["id"], order["id"]);
    assert_eq!(data["order"]["fulfillment_status"], "fulfilled");
    assert_eq!(data["order"]["total"], 300);
    assert!(data["order"].get("line_items").is_none(), "{data}");
    assert!(data["order"].get("fulfillments").is_none(), "{data}");
    assert_eq!(data["fulfillment"]["tracking_number"], "1Z999");
    assert_eq!(
        data["fulfillment"]["line_items"],
        json!([{"line_item_id": line, "quantity": 2}])
    );
}

// --- Write scopes do not read customer data ---------------------------------------------------

/// A store with an all-scopes plugin (the merchant's own tools) and a second plugin with
/// `scopes`; returns (shop with the all-scopes token, the second token).
async fn store_with_second_plugin(scopes: &[&str]) -> (Shop, String) {
    let shop = Shop::open().await;
    shop.host.publish("narrow", scopes).await;
    let (_, narrow) = shop.host.install(&shop.store, "narrow").await;
    (shop, narrow)
}

async fn ada(shop: &Shop) -> Value {
    shop.call(
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "ada@example.com", "phone": "+14155550123", "first_name": "Ada", "last_name": "Lovelace", "note": "VIP", "addresses": [{"line1": "1 Rue Haute", "city": "Paris", "country": "FR"}]})),
    )
    .await
    .expect(201)
    .body
}

#[tokio::test]
async fn an_orders_write_token_does_not_read_a_customers_email_through_a_draft_order() {
    let (shop, writer) = store_with_second_plugin(&["orders.write"]).await;
    let customer = ada(&shop).await;
    let draft = shop
        .host
        .call(
            &writer,
            Method::POST,
            "/v1/orders",
            Some(json!({"status": "draft", "currency": "EUR", "customer_id": customer["id"], "line_items": [{"title": "Mug", "unit_price": 100, "quantity": 1}]})),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(draft["customer_id"], customer["id"]);
    assert_eq!(draft["email"], Value::Null, "{draft}");
    // Every other write answers the same way.
    let patched = shop
        .host
        .call(
            &writer,
            Method::PATCH,
            &format!("/v1/orders/{}", id(&draft)),
            Some(json!({})),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(patched["email"], Value::Null);
    let completed = shop
        .host
        .call(
            &writer,
            Method::POST,
            &format!("/v1/orders/{}/complete", id(&draft)),
            None,
        )
        .await
        .expect(200)
        .body;
    assert_eq!(completed["email"], Value::Null);
    // The merchant's own tools, with `customers.read`, see the email the order keeps.
    assert_eq!(shop.get(&draft).await["email"], "ada@example.com");
}

#[tokio::test]
async fn an_orders_read_token_without_customers_read_does_not_see_the_buyers_email() {
    let (shop, reader) = store_with_second_plugin(&["orders.read"]).await;
    let customer = ada(&shop).await;
    let order = shop
        .call(
            Method::POST,
            "/v1/orders",
            Some(json!({"currency": "EUR", "customer_id": customer["id"], "line_items": [{"title": "Mug", "unit_price": 100, "quantity": 1}]})),
        )
        .await
        .expect(201)
        .body;
    assert_eq!(order["email"], "ada@example.com");
    let one = shop
        .host
        .call(
            &reader,
            Method::GET,
            &format!("/v1/orders/{}", id(&order)),
            None,
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        (one["customer_id"].clone(), one["email"].clone()),
        (customer["id"].clone(), Value::Null)
    );
    let listed = shop
        .host
        .call(&reader, Method::GET, "/v1/orders", None)
        .await
        .expect(200)
        .body;
    assert_eq!(listed["data"][0]["email"], Value::Null);
}

#[tokio::test]
async fn a_customers_write_token_does_not_read_a_profile_through_an_empty_patch() {
    let (shop, writer) = store_with_second_plugin(&["customers.write"]).await;
    let customer = ada(&shop).await;
    let patched = shop
        .host
        .call(
            &writer,
            Method::PATCH,
            &format!("/v1/customers/{}", id(&customer)),
            Some(json!({})),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(patched["id"], customer["id"]);
    for field in ["email", "phone", "first_name", "last_name", "note"] {
        assert_eq!(patched[field], Value::Null, "{field} in {patched}");
    }
    assert_eq!(patched["addresses"], json!([]));
    // A real change answers the same way, and its own create too.
    let tagged = shop
        .host
        .call(
            &writer,
            Method::PATCH,
            &format!("/v1/customers/{}", id(&customer)),
            Some(json!({"tags": ["vip"]})),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        (tagged["tags"].clone(), tagged["email"].clone()),
        (json!(["vip"]), Value::Null)
    );
    let created = shop
        .host
        .call(
            &writer,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "bob@example.com", "phone": "+14155550124"})),
        )
        .await
        .expect(201)
        .body;
    assert!(id(&created).starts_with("cus_"));
    assert_eq!(
        (created["email"].clone(), created["phone"].clone()),
        (Value::Null, Value::Null)
    );
    // Nothing was lost: a reader sees the whole profile.
    let read = shop
        .call(
            Method::GET,
            format!("/v1/customers/{}", id(&customer)),
            None,
        )
        .await
        .expect(200)
        .body;
    assert_eq!(
        (
            read["email"].clone(),
            read["phone"].clone(),
            read["tags"].clone()
        ),
        (
            json!("ada@example.com"),
            json!("+14155550123"),
            json!(["vip"])
        )
    );
}

// --- Property: random histories of one order keep its invariants --------------------------

/// The service over a temporary sled database, with an all-scopes actor in one store.
struct World {
    _dir: tempfile::TempDir,
    service: Service,
    actor: Actor,
}

/// Stock of the variant each case starts with.
const STOCK: i64 = 20;

impl World {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = commerce_host_tests::test_config(dir.path());
        config.admin_token = Some("prop-admin-token-0123456789".to_owned());
        config.durable_writes = false;
        // A manual clock: stored times keep milliseconds, so a response equals its stored record.
        config.clock = std::sync::Arc::new(ManualClock::new(epoch()));
        let service = commerce_host::open_service(&config).expect("service");
        let store = service.create_store("prop.example").expect("store");
        let actor = Actor {
            store: store.reference(),
            installation: InstallationId::generate(service.now()),
            plugin: "prop".to_owned(),
            scopes: Scope::ALL.into_iter().collect(),
            limits: store.rate_limits,
        };
        Self {
            _dir: dir,
            service,
            actor,
        }
    }

    fn variant(&self) -> (ProductId, VariantId) {
        let product = self
            .service
            .create_product(
                &self.actor,
                CreateProduct {
                    title: "Mug".to_owned(),
                    description: None,
                    status: None,
                    vendor: None,
                    tags: Vec::new(),
                    media: Vec::new(),
                    variants: vec![NewVariant {
                        title: None,
                        sku: None,
                        price: 700,
                        currency: "EUR".to_owned(),
                        inventory_quantity: STOCK,
                        low_stock_threshold: Some(5),
                    }],
                },
            )
            .expect("product");
        (product.id, product.variants[0].id.clone())
    }

    fn stock(&self, product: &ProductId) -> i64 {
        self.service
            .product(&self.actor, product)
            .expect("product")
            .variants[0]
            .inventory_quantity
    }
}

#[derive(Debug, Clone)]
enum LineSpec {
    Custom { unit_price: i64, quantity: i64 },
    Variant { quantity: i64 },
}

#[derive(Debug, Clone)]
enum Op {
    Complete,
    Pay {
        exact: bool,
        amount: i64,
    },
    Fulfil(Option<Vec<(usize, i64)>>),
    Refund {
        amount: Option<i64>,
        lines: Vec<(usize, i64)>,
    },
    Cancel,
}

fn quantity() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => 1i64..=4,
        1 => 5i64..=12_000,
        1 => Just(0i64),
        1 => Just(-1i64),
        1 => Just(i64::MAX),
        1 => Just(i64::MAX - 3),
        1 => Just(i64::MIN),
    ]
}

fn amount() -> impl Strategy<Value = i64> {
    prop_oneof![
        6 => 1i64..=3_000,
        1 => Just(0i64),
        1 => Just(-5_000i64),
        1 => Just(i64::MAX),
        1 => Just(1_000_000_000_001i64),
    ]
}

/// Mostly valid quantities for a new order (a refused order ends the case early).
fn order_quantity() -> impl Strategy<Value = i64> {
    prop_oneof![
        20 => 1i64..=4,
        1 => quantity(),
    ]
}

fn line_spec() -> impl Strategy<Value = LineSpec> {
    let unit_price = prop_oneof![
        20 => 1i64..=2_000,
        1 => Just(1_000_000_000_000i64),
        1 => Just(i64::MAX),
    ];
    prop_oneof![
        3 => (unit_price, order_quantity())
            .prop_map(|(unit_price, quantity)| LineSpec::Custom { unit_price, quantity }),
        1 => order_quantity().prop_map(|quantity| LineSpec::Variant { quantity }),
    ]
}

/// Mostly sane line quantities for a fulfilment or refund, sometimes hostile ones.
fn line_quantities() -> impl Strategy<Value = Vec<(usize, i64)>> {
    let units = prop_oneof![
        10 => 1i64..=2,
        1 => quantity(),
    ];
    prop::collection::vec((0usize..4, units), 1..3)
}

fn op() -> impl Strategy<Value = Op> {
    let refund_amount = prop_oneof![
        10 => 1i64..=500,
        1 => amount(),
    ];
    let refund_lines = prop_oneof![
        1 => Just(Vec::new()),
        1 => line_quantities(),
    ];
    prop_oneof![
        2 => Just(Op::Complete),
        3 => (prop::bool::weighted(0.8), amount()).prop_map(|(exact, amount)| Op::Pay { exact, amount }),
        5 => prop::option::weighted(0.8, line_quantities()).prop_map(Op::Fulfil),
        8 => (prop::option::weighted(0.6, refund_amount), refund_lines)
            .prop_map(|(amount, lines)| Op::Refund { amount, lines }),
        1 => Just(Op::Cancel),
    ]
}

/// A refused operation is a client error (400 or 409), never a 500 or a panic.
#[track_caller]
fn refused_cleanly(op: &Op, e: &Error) {
    assert!(
        matches!(e.status().as_u16(), 400 | 409),
        "{op:?} failed with {} {}: {e}",
        e.status(),
        e.code()
    );
}

/// The invariants of an order, whatever happened to it.
#[track_caller]
fn check(order: &Order) {
    let wide = i128::from;
    assert!(
        order.total_paid >= 0 && order.total_refunded >= 0,
        "{order:?}"
    );
    assert!(
        order.total_refunded <= order.total_paid,
        "refunded > paid: {order:?}"
    );
    assert!(
        order.total_paid == 0 || order.total_paid == order.total,
        "{order:?}"
    );
    let mut subtotal = 0i128;
    for line in &order.line_items {
        assert!(line.quantity >= 1 && line.unit_price >= 1, "{line:?}");
        assert_eq!(
            wide(line.total),
            wide(line.unit_price) * wide(line.quantity)
        );
        assert!(
            (0..=line.quantity).contains(&line.fulfilled_quantity),
            "{line:?}"
        );
        assert!(
            (0..=line.quantity).contains(&line.refunded_quantity),
            "{line:?}"
        );
        let of_line = |l: &&LineQuantity| l.line_item_id == line.id;
        let shipped: i128 = (order.fulfillments.iter())
            .flat_map(|f| &f.line_items)
            .filter(of_line)
            .map(|l| wide(l.quantity))
            .sum();
        let refunded: i128 = (order.refunds.iter())
            .flat_map(|r| &r.line_items)
            .filter(of_line)
            .map(|l| wide(l.quantity))
            .sum();
        assert_eq!(
            wide(line.fulfilled_quantity),
            shipped,
            "shipped units are the sum of the fulfilments"
        );
        assert_eq!(
            wide(line.refunded_quantity),
            refunded,
            "refunded units are the sum of the refunds"
        );
        subtotal += wide(line.total);
    }
    assert_eq!(wide(order.subtotal), subtotal);
    assert_eq!(order.total, order.subtotal);
    assert!(order.total <= 1_000_000_000_000);
    assert!(order.refunds.iter().all(|r| r.amount > 0));
    assert!(
        order
            .fulfillments
            .iter()
            .flat_map(|f| &f.line_items)
            .all(|l| l.quantity > 0)
    );
    assert_eq!(
        wide(order.total_refunded),
        order.refunds.iter().map(|r| wide(r.amount)).sum::<i128>(),
        "refunded money is the sum of the refunds"
    );
    assert!(order.refunds.len() <= 100 && order.fulfillments.len() <= 100);
    let financial = match (order.total_paid, order.total_refunded) {
        (0, _) => FinancialStatus::Pending,
        (_, 0) => FinancialStatus::Paid,
        (paid, refunded) if refunded == paid => FinancialStatus::Refunded,
        _ => FinancialStatus::PartiallyRefunded,
    };
    assert_eq!(order.financial_status, financial, "{order:?}");
    let shipped = order.line_items.iter().map(|l| l.fulfilled_quantity);
    let fulfillment = if order
        .line_items
        .iter()
        .all(|l| l.fulfilled_quantity == l.quantity)
    {
        FulfillmentStatus::Fulfilled
    } else if shipped.clone().any(|q| q > 0) {
        FulfillmentStatus::PartiallyFulfilled
    } else {
        FulfillmentStatus::Unfulfilled
    };
    assert_eq!(order.fulfillment_status, fulfillment, "{order:?}");
}

fn play(world: &World, status: OrderStatus, specs: &[LineSpec], ops: &[Op]) {
    let service = &world.service;
    let actor = &world.actor;
    let (product, variant) = world.variant();
    let line_items: Vec<NewLineItem> = specs
        .iter()
        .enumerate()
        .map(|(i, spec)| match spec {
            LineSpec::Custom {
                unit_price,
                quantity,
            } => NewLineItem {
                variant_id: None,
                title: Some(format!("Thing {i}")),
                unit_price: Some(*unit_price),
                quantity: *quantity,
            },
            LineSpec::Variant { quantity } => NewLineItem {
                variant_id: Some(variant.clone()),
                title: None,
                unit_price: None,
                quantity: *quantity,
            },
        })
        .collect();
    let created = service.create_order(
        actor,
        CreateOrder {
            status: Some(status),
            currency: "EUR".to_owned(),
            customer_id: None,
            email: None,
            line_items,
            tags: Vec::new(),
            note: None,
            custom_fields: BTreeMap::new(),
        },
    );
    let mut order = match created {
        Ok(order) => order,
        Err(e) => {
            refused_cleanly(&Op::Complete, &e);
            assert_eq!(
                world.stock(&product),
                STOCK,
                "a refused order takes no stock"
            );
            return;
        }
    };
    // Stock an order holds: what its live variant lines take.
    let taken = |o: &Order| -> i64 {
        if o.status != OrderStatus::Open {
            return 0;
        }
        o.line_items
            .iter()
            .filter(|l| l.variant_id.is_some())
            .map(|l| l.quantity)
            .sum()
    };
    check(&order);
    assert_eq!(world.stock(&product), STOCK - taken(&order));
    let line_of = |o: &Order, i: usize| o.line_items[i % o.line_items.len()].id.clone();
    let as_lines = |o: &Order, lines: &[(usize, i64)]| -> Vec<LineQuantity> {
        lines
            .iter()
            .map(|(i, q)| LineQuantity {
                line_item_id: line_of(o, *i),
                quantity: *q,
            })
            .collect()
    };
    for op in ops {
        let before = order.clone();
        let outcome: Result<Order, Error> = match op {
            Op::Complete => service.complete_order(actor, &order.id),
            Op::Pay { exact, amount } => service.confirm_payment(
                &actor.store,
                &order.id,
                &ConfirmPayment {
                    amount: if *exact { order.total } else { *amount },
                    currency: "EUR".to_owned(),
                },
            ),
            Op::Fulfil(lines) => service
                .fulfill_order(
                    actor,
                    &order.id,
                    CreateFulfillment {
                        line_items: lines.as_ref().map(|l| as_lines(&order, l)),
                        tracking_number: None,
                        carrier: None,
                    },
                )
                .map(|(o, _)| o),
            Op::Refund { amount, lines } => service
                .refund_order(
                    actor,
                    &order.id,
                    CreateRefund {
                        amount: *amount,
                        line_items: as_lines(&order, lines),
                        reason: None,
                    },
                )
                .map(|(o, refund)| {
                    assert!(refund.amount > 0);
                    assert_eq!(o.total_refunded, before.total_refunded + refund.amount);
                    o
                }),
            Op::Cancel => service.cancel_order(actor, &order.id, CancelOrder { reason: None }),
        };
        let stored = service.order(actor, &order.id).expect("order");
        match outcome {
            Ok(returned) => assert_eq!(returned, stored, "the response is the stored order"),
            Err(e) => {
                refused_cleanly(op, &e);
                assert_eq!(stored, before, "a refused {op:?} changed the order");
            }
        }
        order = stored;
        check(&order);
        assert_eq!(
            world.stock(&product),
            STOCK - taken(&order),
            "stock after {op:?}"
        );
    }
}

#[test]
fn an_order_damaged_by_the_old_wraparound_is_refused_with_409s_not_500s() {
    let world = World::new();
    let (service, actor) = (&world.service, &world.actor);
    let order = service
        .create_order(
            actor,
            CreateOrder {
                status: None,
                currency: "EUR".to_owned(),
                customer_id: None,
                email: None,
                line_items: vec![NewLineItem {
                    variant_id: None,
                    title: Some("Mug".to_owned()),
                    unit_price: Some(1000),
                    quantity: 2,
                }],
                tags: Vec::new(),
                note: None,
                custom_fields: BTreeMap::new(),
            },
        )
        .expect("order");
    // What the audit left behind: 7 of 2 shipped, and a refund of -5 000 on a 2 000 payment.
    let mut damaged = order.clone();
    damaged.line_items[0].fulfilled_quantity = 7;
    damaged.total_paid = 2000;
    damaged.total_refunded = -5000;
    let key = Order::key(actor.store_id(), &order.id);
    service.db.tx(|tx| tx.write(&key, &damaged)).expect("write");
    let fulfil = service
        .fulfill_order(actor, &order.id, CreateFulfillment::default())
        .expect_err("refused");
    assert_eq!(
        (fulfil.status().as_u16(), fulfil.code()),
        (409, "quantity_out_of_range")
    );
    let refund = service
        .refund_order(
            actor,
            &order.id,
            CreateRefund {
                amount: Some(1),
                ..CreateRefund::default()
            },
        )
        .expect_err("refused");
    assert_eq!(
        (refund.status().as_u16(), refund.code()),
        (409, "amount_out_of_range")
    );
    assert_eq!(service.order(actor, &order.id).expect("order"), damaged);
}

#[test]
fn random_histories_of_an_order_keep_money_and_units_consistent() {
    let world = World::new();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let case = (
        prop_oneof![1 => Just(OrderStatus::Draft), 3 => Just(OrderStatus::Open)],
        prop::collection::vec(line_spec(), 1..4),
        prop::collection::vec(op(), 1..60),
    );
    runner
        .run(&case, |(status, specs, ops)| {
            play(&world, status, &specs, &ops);
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn order_events_show_the_buyers_email_only_to_receivers_with_customers_read() {
    use commerce_host_tests::receiver::Receiver;
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    let store = host.create_store("events.example").await;
    host.publish("orders-only", &["orders.read", "orders.write"])
        .await;
    host.publish("with-customers", &["orders.read", "customers.read"])
        .await;
    let (_, orders_only) = host.install(&store, "orders-only").await;
    let (_, with_customers) = host.install(&store, "with-customers").await;
    for (token, path) in [(&orders_only, "/blind"), (&with_customers, "/sees")] {
        host.subscribe(token, &receiver.url(path), &["order.created"])
            .await;
    }
    host.call(
        &orders_only,
        Method::POST,
        "/v1/orders",
        Some(json!({"currency": "EUR", "email": "buyer@example.com", "line_items": [{"title": "Tea", "unit_price": 500, "quantity": 1}]})),
    )
    .await
    .expect(201);
    let blind = receiver
        .wait_for("/blind", 1, std::time::Duration::from_secs(5))
        .await;
    let sees = receiver
        .wait_for("/sees", 1, std::time::Duration::from_secs(5))
        .await;
    assert_eq!(blind[0].json()["data"]["order"]["email"], Value::Null);
    assert_eq!(
        sees[0].json()["data"]["order"]["email"],
        "buyer@example.com"
    );
}
