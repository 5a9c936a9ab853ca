//! The inbound commerce API: orders, products, inventory, customers, and the events they fire.

use commerce_host_tests::{ALL_SCOPES, Reply, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

struct Shop {
    host: TestHost,
    store: String,
    token: String,
}

impl Shop {
    async fn open() -> Self {
        let host = TestHost::start().await;
        let (store, token) = host.store_with_plugin("acme.example", &ALL_SCOPES).await;
        Self { host, store, token }
    }

    async fn call(&self, method: Method, path: impl AsRef<str>, body: Option<Value>) -> Reply {
        self.host
            .call(&self.token, method, path.as_ref(), body)
            .await
    }

    async fn product(&self, stock: i64, low: Option<i64>) -> Value {
        self.call(
            Method::POST,
            "/v1/products",
            Some(json!({"title": "Mug", "variants": [{"price": 1250, "currency": "EUR", "inventory_quantity": stock, "low_stock_threshold": low, "sku": "MUG-1"}]})),
        )
        .await
        .expect(201)
        .body
    }

    async fn customer(&self, email: &str) -> Value {
        self.call(
            Method::POST,
            "/v1/customers",
            Some(json!({"email": email, "first_name": "Ada", "addresses": [{"line1": "1 Rue Haute", "city": "Paris", "country": "FR"}]})),
        )
        .await
        .expect(201)
        .body
    }

    async fn order(&self, variant: &str, quantity: i64) -> Value {
        self.call(
            Method::POST,
            "/v1/orders",
            Some(json!({"currency": "EUR", "line_items": [{"variant_id": variant, "quantity": quantity}]})),
        )
        .await
        .expect(201)
        .body
    }

    async fn events(&self, kind: &str) -> Vec<Value> {
        self.host.events(&self.store, kind).await
    }
}

fn variant_id(product: &Value) -> String {
    product["variants"][0]["id"]
        .as_str()
        .expect("variant id")
        .to_owned()
}

fn line_id(order: &Value, i: usize) -> String {
    order["line_items"][i]["id"]
        .as_str()
        .expect("line id")
        .to_owned()
}

#[tokio::test]
async fn events_use_the_envelope_with_store_and_millisecond_utc_time() {
    let shop = Shop::open().await;
    shop.host.clock.advance(SignedDuration::from_millis(1234));
    let customer = shop.customer("ada@example.com").await;
    let events = shop.events("customer.created").await;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert!(event["id"].as_str().expect("id").starts_with("evt_"));
    assert_eq!(event["type"], "customer.created");
    assert_eq!(event["created_at"], "2026-01-05T00:00:01.234Z");
    assert_eq!(
        event["store"],
        json!({"id": shop.store, "domain": "acme.example"})
    );
    assert_eq!(event["data"]["customer"], customer);
}

#[tokio::test]
async fn products_are_created_listed_updated_and_fire_their_events() {
    let shop = Shop::open().await;
    let product = shop.product(10, None).await;
    assert!(product["id"].as_str().expect("id").starts_with("prod_"));
    assert_eq!(product["variants"][0]["price"], 1250);
    assert_eq!(product["status"], "active");
    let created = shop.events("product.created").await;
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["data"]["product"], product);

    // A draft is not published: no event until it becomes active.
    let draft = shop
        .call(Method::POST, "/v1/products", Some(json!({"title": "Tea", "status": "draft", "variants": [{"price": 500, "currency": "EUR"}]})))
        .await
        .expect(201)
        .body;
    assert_eq!(shop.events("product.created").await.len(), 1);
    let id = draft["id"].as_str().expect("id");
    shop.call(
        Method::PATCH,
        &format!("/v1/products/{id}"),
        Some(json!({"status": "active"})),
    )
    .await
    .expect(200);
    assert_eq!(shop.events("product.created").await.len(), 2);
    let back = shop
        .call(
            Method::PATCH,
            &format!("/v1/products/{id}"),
            Some(json!({"status": "draft"})),
        )
        .await;
    assert_eq!((back.status, back.code()), (409, "invalid_transition"));

    // Tags are not catalogue content: no product.updated. Title and price are.
    let pid = product["id"].as_str().expect("id");
    shop.call(
        Method::PATCH,
        &format!("/v1/products/{pid}"),
        Some(json!({"tags": ["summer"]})),
    )
    .await
    .expect(200);
    assert!(shop.events("product.updated").await.is_empty());
    let renamed = shop
        .call(
            Method::PATCH,
            &format!("/v1/products/{pid}"),
            Some(json!({"title": "Big mug"})),
        )
        .await
        .expect(200);
    assert_eq!(renamed.body["title"], "Big mug");
    let vid = variant_id(&product);
    shop.call(
        Method::PATCH,
        &format!("/v1/products/{pid}"),
        Some(json!({"variants": [{"id": vid, "price": 1500}]})),
    )
    .await
    .expect(200);
    let with_variant = shop
        .call(
            Method::POST,
            &format!("/v1/products/{pid}/variants"),
            Some(json!({"title": "XL", "price": 1800, "currency": "EUR"})),
        )
        .await
        .expect(201);
    assert_eq!(
        with_variant.body["variants"]
            .as_array()
            .expect("variants")
            .len(),
        2
    );
    let updated = shop.events("product.updated").await;
    assert_eq!(updated.len(), 3);
    assert_eq!(updated[1]["data"]["product"]["variants"][0]["price"], 1500);
    assert_eq!(updated[2]["data"]["product"], with_variant.body);

    let list = shop
        .call(Method::GET, "/v1/products?limit=1", None)
        .await
        .expect(200);
    assert_eq!(list.body["data"].as_array().expect("data").len(), 1);
    assert_eq!(list.body["page"]["has_more"], true);
    let drafts = shop
        .call(Method::GET, "/v1/products?status=draft", None)
        .await
        .expect(200);
    assert!(drafts.body["data"].as_array().expect("data").is_empty());
    let one = shop
        .call(Method::GET, &format!("/v1/products/{pid}"), None)
        .await
        .expect(200);
    assert_eq!(one.body["variants"].as_array().expect("variants").len(), 2);
}

#[tokio::test]
async fn a_non_positive_variant_price_names_the_variant() {
    let shop = Shop::open().await;
    let body = json!({"title": "Mug", "variants": [
        {"price": 100, "currency": "EUR"},
        {"price": 0, "currency": "EUR"},
    ]});
    let reply = shop.call(Method::POST, "/v1/products", Some(body)).await;
    assert_eq!(
        (reply.status, reply.code(), reply.field()),
        (400, "validation_failed", "variants[1].price")
    );

    let cases = [
        (
            json!({"title": "Mug", "variants": [{"price": -5, "currency": "EUR"}]}),
            "variants[0].price",
        ),
        (
            json!({"title": "Mug", "variants": [{"price": 5, "currency": "EURO"}]}),
            "variants[0].currency",
        ),
        (
            json!({"title": "Mug", "variants": [{"price": 5.5, "currency": "EUR"}]}),
            "variants[0].price",
        ),
        (
            json!({"title": "", "variants": [{"price": 5, "currency": "EUR"}]}),
            "title",
        ),
        (json!({"title": "Mug", "variants": []}), "variants"),
        (json!({"title": "Mug"}), "variants"),
        (
            json!({"title": "Mug", "media": [{"url": "ftp://x"}], "variants": [{"price": 5, "currency": "EUR"}]}),
            "media[0].url",
        ),
        (
            json!({"title": "Mug", "price": 5, "variants": [{"price": 5, "currency": "EUR"}]}),
            "price",
        ),
    ];
    for (body, field) in cases {
        let reply = shop
            .call(Method::POST, "/v1/products", Some(body.clone()))
            .await;
        assert_eq!(
            (reply.status, reply.code(), reply.field()),
            (400, "validation_failed", field),
            "{body}"
        );
    }
    assert!(
        shop.events("product.created").await.is_empty(),
        "nothing was created"
    );
}

#[tokio::test]
async fn inventory_is_adjusted_by_delta_or_set_and_fires_on_each_threshold_crossing() {
    let shop = Shop::open().await;
    let product = shop.product(10, Some(3)).await;
    let vid = variant_id(&product);
    let adjust = |body: Value| shop.call(Method::POST, "/v1/inventory/adjust", Some(body));

    let level = adjust(json!({"variant_id": vid, "delta": -5}))
        .await
        .expect(200);
    assert_eq!(
        (
            level.body["previous_quantity"].clone(),
            level.body["inventory_quantity"].clone()
        ),
        (json!(10), json!(5))
    );
    assert!(
        shop.events("product.inventory.updated").await.is_empty(),
        "5 is above both thresholds"
    );

    let level = adjust(json!({"variant_id": vid, "delta": -2}))
        .await
        .expect(200);
    assert_eq!(
        level.body["crossed"],
        json!([{"threshold": "low_stock", "value": 3, "direction": "down"}])
    );
    let level = adjust(json!({"variant_id": vid, "set": 0}))
        .await
        .expect(200);
    assert_eq!(
        level.body["crossed"],
        json!([{"threshold": "out_of_stock", "value": 0, "direction": "down"}])
    );

    let refused = adjust(json!({"variant_id": vid, "delta": -1})).await;
    assert_eq!(
        (refused.status, refused.code(), refused.field()),
        (409, "insufficient_stock", "delta")
    );

    let level = adjust(json!({"variant_id": vid, "delta": 20}))
        .await
        .expect(200);
    assert_eq!(
        level.body["crossed"].as_array().expect("crossed").len(),
        2,
        "back above zero and the low threshold"
    );
    let events = shop.events("product.inventory.updated").await;
    assert_eq!(events.len(), 3);
    assert_eq!(events[2]["data"]["inventory"]["inventory_quantity"], 20);
    assert_eq!(events[2]["data"]["product"]["id"], product["id"]);

    for (body, field) in [
        (json!({"variant_id": vid, "delta": 1, "set": 3}), "delta"),
        (json!({"variant_id": vid}), "delta"),
        (json!({"variant_id": vid, "set": -1}), "set"),
    ] {
        let reply = adjust(body).await;
        assert_eq!((reply.status, reply.field()), (400, field));
    }
    let unknown = adjust(json!({"variant_id": "var_nope", "delta": 1})).await;
    assert_eq!(unknown.status, 404);
}

#[tokio::test]
async fn customers_are_created_read_updated_deleted_with_their_events() {
    let shop = Shop::open().await;
    let customer = shop.customer("ada@example.com").await;
    let id = customer["id"].as_str().expect("id");
    assert_eq!(customer["addresses"][0]["default"], true);
    let got = shop
        .call(Method::GET, &format!("/v1/customers/{id}"), None)
        .await
        .expect(200);
    assert_eq!(got.body, customer);
    assert_eq!(shop.events("customer.created").await.len(), 1);

    let updated = shop
        .call(
            Method::PATCH,
            &format!("/v1/customers/{id}"),
            Some(json!({"last_name": "Lovelace"})),
        )
        .await
        .expect(200);
    assert_eq!(updated.body["last_name"], "Lovelace");
    shop.call(
        Method::PATCH,
        &format!("/v1/customers/{id}"),
        Some(json!({"last_name": "Lovelace"})),
    )
    .await
    .expect(200);
    let events = shop.events("customer.updated").await;
    assert_eq!(
        events.len(),
        1,
        "a change that changes nothing fires nothing"
    );
    assert_eq!(events[0]["data"]["customer"]["last_name"], "Lovelace");

    let taken = shop
        .call(
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "ADA@example.com"})),
        )
        .await;
    assert_eq!(
        (taken.status, taken.code(), taken.field()),
        (409, "email_taken", "email")
    );
    let by_email = shop
        .call(Method::GET, "/v1/customers?email=Ada@Example.com", None)
        .await
        .expect(200);
    assert_eq!(by_email.body["data"].as_array().expect("data").len(), 1);

    for (body, field) in [
        (json!({"first_name": "No contact"}), "email"),
        (json!({"phone": "555-1234"}), "phone"),
        (json!({"email": "not-an-email"}), "email"),
        (
            json!({"email": "b@example.com", "addresses": [{"line1": "x", "city": "y", "country": "France"}]}),
            "addresses[0].country",
        ),
    ] {
        let reply = shop.call(Method::POST, "/v1/customers", Some(body)).await;
        assert_eq!((reply.status, reply.field()), (400, field));
    }

    shop.call(Method::DELETE, &format!("/v1/customers/{id}"), None)
        .await
        .expect(204);
    shop.call(Method::GET, &format!("/v1/customers/{id}"), None)
        .await
        .expect(404);
    let deleted = shop.events("customer.deleted").await;
    assert_eq!(deleted[0]["data"], json!({"customer": {"id": id}}));
    // The email is free again after a hard delete.
    shop.customer("ada@example.com").await;
}

#[tokio::test]
async fn an_orders_answer_follows_every_change_and_shows_each_caller_what_its_scopes_allow() {
    let shop = Shop::open().await;
    // A second installation in the same store that may read orders but not customers.
    shop.host.publish("no-contact", &["orders.read"]).await;
    let (_, limited) = shop.host.install(&shop.store, "no-contact").await;
    let customer = shop.customer("ada@example.com").await;
    let order = shop
        .call(
            Method::POST,
            "/v1/orders",
            Some(json!({
                "currency": "EUR", "customer_id": customer["id"],
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 2}],
            })),
        )
        .await
        .expect(201)
        .body;
    let path = format!("/v1/orders/{}", order["id"].as_str().expect("id"));
    let read = |token: String| {
        let (host, path) = (&shop.host, path.clone());
        async move {
            host.call(&token, Method::GET, &path, None)
                .await
                .expect(200)
                .body
        }
    };
    // Read twice each (the second from what the first kept, on one host), in turns: each
    // caller gets its own view, and the same answer as the order the write returned.
    for _ in 0..2 {
        assert_eq!(read(shop.token.clone()).await, order);
        let seen = read(limited.clone()).await;
        assert_eq!(seen["email"], Value::Null, "no customers.read, no email");
        assert_eq!(seen["id"], order["id"]);
    }
    // Every change is in the next answer, to both callers.
    let patched = shop
        .call(
            Method::PATCH,
            &path,
            Some(json!({"note": "gift", "tags": ["vip"]})),
        )
        .await
        .expect(200)
        .body;
    assert_eq!(read(shop.token.clone()).await, patched);
    assert_eq!(read(limited.clone()).await["note"], "gift");
    shop.host.pay(&shop.store, &order).await.expect(200);
    assert_eq!(read(shop.token.clone()).await["financial_status"], "paid");
    assert_eq!(read(limited.clone()).await["financial_status"], "paid");
    // Another store's token does not find it.
    let (_, other) = shop
        .host
        .store_with_plugin("other.example", &ALL_SCOPES)
        .await;
    let missing = shop.host.call(&other, Method::GET, &path, None).await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn a_products_and_a_customers_answers_follow_every_change() {
    let shop = Shop::open().await;
    let product = shop.product(10, None).await;
    let product_path = format!("/v1/products/{}", product["id"].as_str().expect("id"));
    let read = |path: String| {
        let shop = &shop;
        async move { shop.call(Method::GET, &path, None).await }
    };
    // Twice (the second from what the first kept, on one host), as the write returned it.
    for _ in 0..2 {
        assert_eq!(read(product_path.clone()).await.expect(200).body, product);
    }
    // Its stock, changed through another record's route, an order and a patch of it.
    shop.call(
        Method::POST,
        "/v1/inventory/adjust",
        Some(json!({"variant_id": variant_id(&product), "delta": -4})),
    )
    .await
    .expect(200);
    let seen = read(product_path.clone()).await.expect(200).body;
    assert_eq!(seen["variants"][0]["inventory_quantity"], 6);
    shop.call(
        Method::POST,
        "/v1/orders",
        Some(json!({"currency": "EUR",
        "line_items": [{"variant_id": variant_id(&product), "quantity": 1}]})),
    )
    .await
    .expect(201);
    let seen = read(product_path.clone()).await.expect(200).body;
    assert_eq!(seen["variants"][0]["inventory_quantity"], 5);
    // A patch is in the next answer, as the patch returned the record.
    let patched_then_read = |path: String, body: Value| {
        let shop = &shop;
        async move {
            let patched = shop.call(Method::PATCH, &path, Some(body)).await;
            let read = shop.call(Method::GET, &path, None).await;
            assert_eq!(read.expect(200).body, patched.expect(200).body, "{path}");
        }
    };
    patched_then_read(product_path.clone(), json!({"title": "Big mug"})).await;

    let customer = shop.customer("ada@example.com").await;
    let customer_path = format!("/v1/customers/{}", customer["id"].as_str().expect("id"));
    for _ in 0..2 {
        assert_eq!(read(customer_path.clone()).await.expect(200).body, customer);
    }
    patched_then_read(customer_path.clone(), json!({"first_name": "Grace"})).await;
    shop.call(Method::DELETE, &customer_path, None)
        .await
        .expect(204);
    assert_eq!(read(customer_path.clone()).await.status, 404);
    // Another store's token does not find either.
    let (_, other) = shop
        .host
        .store_with_plugin("other.example", &ALL_SCOPES)
        .await;
    for path in [&product_path, &customer_path] {
        assert_eq!(
            shop.host.call(&other, Method::GET, path, None).await.status,
            404
        );
    }
}

#[tokio::test]
async fn an_order_goes_from_placed_to_paid_fulfilled_and_refunded() {
    let shop = Shop::open().await;
    let product = shop.product(10, None).await;
    let vid = variant_id(&product);
    let customer = shop.customer("ada@example.com").await;
    let order = shop
        .call(Method::POST, "/v1/orders", Some(json!({
            "currency": "EUR",
            "customer_id": customer["id"],
            "line_items": [{"variant_id": vid, "quantity": 3}, {"title": "Gift wrap", "unit_price": 200, "quantity": 1}],
        })))
        .await
        .expect(201)
        .body;
    assert!(order["id"].as_str().expect("id").starts_with("ord_"));
    assert_eq!(
        (order["status"].clone(), order["financial_status"].clone()),
        (json!("open"), json!("pending"))
    );
    assert_eq!(order["total"], 3 * 1250 + 200);
    assert_eq!(order["email"], "ada@example.com");
    assert_eq!(
        shop.events("order.created").await[0]["data"]["order"],
        order
    );
    let id = order["id"].as_str().expect("id");
    let stock = shop
        .call(
            Method::GET,
            &format!("/v1/products/{}", product["id"].as_str().expect("id")),
            None,
        )
        .await;
    assert_eq!(
        stock.body["variants"][0]["inventory_quantity"], 7,
        "a live order takes stock"
    );

    // Payment confirmed by the gateway: order.paid carries exactly {id, total, currency}.
    let paid = shop.host.pay(&shop.store, &order).await.expect(200);
    assert_eq!(paid.body["financial_status"], "paid");
    let events = shop.events("order.paid").await;
    assert_eq!(
        events[0]["data"],
        json!({"order": {"id": id, "total": 3950, "currency": "EUR"}})
    );
    assert_eq!(
        shop.host.pay(&shop.store, &order).await.code(),
        "invalid_transition"
    );

    // Ship 2 of 3 mugs: partially fulfilled, no event. Shipping 2 more than remain is refused.
    let fulfil = |body: Value| {
        shop.call(
            Method::POST,
            format!("/v1/orders/{id}/fulfillments"),
            Some(body),
        )
    };
    let partial = fulfil(json!({"line_items": [{"line_item_id": line_id(&order, 0), "quantity": 2}], "tracking_number": "1Z999"})).await.expect(201);
    assert_eq!(partial.body["fulfillment_status"], "partially_fulfilled");
    assert!(shop.events("order.fulfilled").await.is_empty());
    let over =
        fulfil(json!({"line_items": [{"line_item_id": line_id(&order, 0), "quantity": 2}]})).await;
    assert_eq!(
        (over.status, over.code(), over.field()),
        (409, "over_fulfillment", "line_items[0].quantity")
    );
    let rest = fulfil(json!({})).await.expect(201);
    assert_eq!(rest.body["fulfillment_status"], "fulfilled");
    assert_eq!(
        rest.body["fulfillments"]
            .as_array()
            .expect("fulfillments")
            .len(),
        2
    );
    assert_eq!(shop.events("order.fulfilled").await.len(), 1);
    assert_eq!(fulfil(json!({})).await.code(), "invalid_transition");

    // Refunds: an item, then money, never past what was paid.
    let refund =
        |body: Value| shop.call(Method::POST, format!("/v1/orders/{id}/refunds"), Some(body));
    let one = refund(json!({"line_items": [{"line_item_id": line_id(&order, 0), "quantity": 1}], "reason": "broken"})).await.expect(201);
    assert_eq!(
        (
            one.body["total_refunded"].clone(),
            one.body["financial_status"].clone()
        ),
        (json!(1250), json!("partially_refunded"))
    );
    let too_much = refund(json!({"amount": 2701})).await;
    assert_eq!(
        (too_much.status, too_much.code(), too_much.field()),
        (409, "refund_exceeds_paid", "amount")
    );
    let items =
        refund(json!({"line_items": [{"line_item_id": line_id(&order, 1), "quantity": 2}]})).await;
    assert_eq!((items.status, items.code()), (409, "refund_exceeds_items"));
    let rest = refund(json!({"amount": 2700})).await.expect(201);
    assert_eq!(
        (
            rest.body["total_refunded"].clone(),
            rest.body["financial_status"].clone()
        ),
        (json!(3950), json!("refunded"))
    );
    let refunded = shop.events("order.refunded").await;
    assert_eq!(refunded.len(), 2);
    assert_eq!(refunded[0]["data"]["refund"]["amount"], 1250);
    assert_eq!(
        refund(json!({"amount": 1})).await.code(),
        "refund_exceeds_paid"
    );

    let got = shop
        .call(Method::GET, &format!("/v1/orders/{id}"), None)
        .await
        .expect(200);
    assert_eq!(got.body["line_items"].as_array().expect("lines").len(), 2);
    assert_eq!(got.body["refunds"].as_array().expect("refunds").len(), 2);
}

#[tokio::test]
async fn cancelling_gives_back_stock_and_closes_the_order_to_shipping() {
    let shop = Shop::open().await;
    let product = shop.product(5, None).await;
    let order = shop.order(&variant_id(&product), 5).await;
    let id = order["id"].as_str().expect("id");
    let pid = product["id"].as_str().expect("id");
    async fn stock(shop: &Shop, pid: &str) -> Value {
        shop.call(Method::GET, format!("/v1/products/{pid}"), None)
            .await
            .body["variants"][0]["inventory_quantity"]
            .clone()
    }
    assert_eq!(stock(&shop, pid).await, 0);
    let more = shop.call(Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "line_items": [{"variant_id": variant_id(&product), "quantity": 1}]}))).await;
    assert_eq!(
        (more.status, more.code(), more.field()),
        (409, "insufficient_stock", "line_items[0].quantity")
    );

    let cancelled = shop
        .call(
            Method::POST,
            &format!("/v1/orders/{id}/cancel"),
            Some(json!({"reason": "customer"})),
        )
        .await
        .expect(200);
    assert_eq!(cancelled.body["status"], "cancelled");
    assert_eq!(cancelled.body["cancel_reason"], "customer");
    assert_eq!(stock(&shop, pid).await, 5);
    assert_eq!(shop.events("order.cancelled").await.len(), 1);

    let ship = shop
        .call(
            Method::POST,
            &format!("/v1/orders/{id}/fulfillments"),
            Some(json!({})),
        )
        .await;
    assert_eq!((ship.status, ship.code()), (409, "order_cancelled"));
    let again = shop
        .call(
            Method::POST,
            &format!("/v1/orders/{id}/cancel"),
            Some(json!({})),
        )
        .await;
    assert_eq!((again.status, again.code()), (409, "invalid_transition"));
    assert_eq!(
        shop.host.pay(&shop.store, &order).await.code(),
        "order_cancelled"
    );
    let refund = shop
        .call(
            Method::POST,
            &format!("/v1/orders/{id}/refunds"),
            Some(json!({"amount": 1})),
        )
        .await;
    assert_eq!((refund.status, refund.code()), (409, "not_paid"));

    // A shipped order cannot be cancelled.
    let shipped = shop.order(&variant_id(&product), 1).await;
    let sid = shipped["id"].as_str().expect("id");
    shop.call(
        Method::POST,
        &format!("/v1/orders/{sid}/fulfillments"),
        Some(json!({})),
    )
    .await
    .expect(201);
    let refused = shop
        .call(
            Method::POST,
            &format!("/v1/orders/{sid}/cancel"),
            Some(json!({})),
        )
        .await;
    assert_eq!(refused.code(), "invalid_transition");
}

#[tokio::test]
async fn a_draft_takes_no_stock_until_completed_and_cannot_be_paid() {
    let shop = Shop::open().await;
    let product = shop.product(2, None).await;
    let draft = shop
        .call(Method::POST, "/v1/orders", Some(json!({"status": "draft", "currency": "EUR", "line_items": [{"variant_id": variant_id(&product), "quantity": 2}]})))
        .await
        .expect(201)
        .body;
    assert_eq!(draft["status"], "draft");
    assert_eq!(
        shop.events("order.created").await.len(),
        1,
        "drafts fire order.created too"
    );
    assert_eq!(
        shop.host.pay(&shop.store, &draft).await.code(),
        "invalid_transition"
    );
    let id = draft["id"].as_str().expect("id");
    let ship = shop
        .call(
            Method::POST,
            &format!("/v1/orders/{id}/fulfillments"),
            Some(json!({})),
        )
        .await;
    assert_eq!(ship.code(), "invalid_transition");
    let open = shop
        .call(Method::POST, &format!("/v1/orders/{id}/complete"), None)
        .await
        .expect(200);
    assert_eq!(open.body["status"], "open");
    let again = shop
        .call(Method::POST, &format!("/v1/orders/{id}/complete"), None)
        .await;
    assert_eq!(again.code(), "invalid_transition");
    let p = shop
        .call(
            Method::GET,
            &format!("/v1/products/{}", product["id"].as_str().expect("id")),
            None,
        )
        .await;
    assert_eq!(p.body["variants"][0]["inventory_quantity"], 0);
    shop.host.pay(&shop.store, &draft).await.expect(200);
}

#[tokio::test]
async fn orders_update_only_tags_notes_and_custom_fields() {
    let shop = Shop::open().await;
    let order = shop
        .call(Method::POST, "/v1/orders", Some(json!({"currency": "USD", "line_items": [{"title": "Service", "unit_price": 1000, "quantity": 1}], "custom_fields": {"a": "1", "b": "2"}})))
        .await
        .expect(201)
        .body;
    let id = order["id"].as_str().expect("id");
    let patched = shop
        .call(Method::PATCH, &format!("/v1/orders/{id}"), Some(json!({"tags": ["vip"], "note": "call first", "custom_fields": {"a": null, "c": "3"}})))
        .await
        .expect(200);
    assert_eq!(patched.body["tags"], json!(["vip"]));
    assert_eq!(patched.body["note"], "call first");
    assert_eq!(patched.body["custom_fields"], json!({"b": "2", "c": "3"}));
    for (body, field) in [
        (json!({"total": 1}), "total"),
        (json!({"status": "cancelled"}), "status"),
        (json!({"tags": ["a,b"]}), "tags[0]"),
        (
            json!({"custom_fields": {"bad key": "x"}}),
            "custom_fields.bad key",
        ),
    ] {
        let reply = shop
            .call(Method::PATCH, &format!("/v1/orders/{id}"), Some(body))
            .await;
        assert_eq!(
            (reply.status, reply.code(), reply.field()),
            (400, "validation_failed", field)
        );
    }
    for (body, field) in [
        (json!({"currency": "EUR", "line_items": []}), "line_items"),
        (
            json!({"currency": "EUR", "line_items": [{"quantity": 1}]}),
            "line_items[0].title",
        ),
        (
            json!({"currency": "EUR", "line_items": [{"title": "x", "unit_price": 0, "quantity": 1}]}),
            "line_items[0].unit_price",
        ),
        (
            json!({"currency": "EUR", "line_items": [{"title": "x", "unit_price": 1, "quantity": 0}]}),
            "line_items[0].quantity",
        ),
        (
            json!({"currency": "EUR", "line_items": [{"variant_id": "var_missing", "quantity": 1}]}),
            "line_items[0].variant_id",
        ),
        (
            json!({"currency": "EUR", "customer_id": "cus_missing", "line_items": [{"title": "x", "unit_price": 1, "quantity": 1}]}),
            "customer_id",
        ),
        (
            json!({"currency": "XXXX", "line_items": [{"title": "x", "unit_price": 1, "quantity": 1}]}),
            "currency",
        ),
    ] {
        let reply = shop
            .call(Method::POST, "/v1/orders", Some(body.clone()))
            .await;
        assert_eq!((reply.status, reply.field()), (400, field), "{body}");
    }
}

#[tokio::test]
async fn orders_are_listed_by_page_and_filtered_by_status_and_time() {
    let shop = Shop::open().await;
    let mut ids = Vec::new();
    for i in 0..7 {
        let status = if i % 2 == 0 { "open" } else { "draft" };
        let order = shop
            .call(Method::POST, "/v1/orders", Some(json!({"status": status, "currency": "EUR", "line_items": [{"title": "x", "unit_price": 100, "quantity": 1}]})))
            .await
            .expect(201);
        ids.push(order.body["id"].as_str().expect("id").to_owned());
        shop.host.clock.advance(SignedDuration::from_secs(60));
    }
    let mut seen = Vec::new();
    let mut path = "/v1/orders?limit=2".to_owned();
    loop {
        let page = shop.call(Method::GET, &path, None).await.expect(200);
        seen.extend(
            page.body["data"]
                .as_array()
                .expect("data")
                .iter()
                .map(|o| o["id"].as_str().expect("id").to_owned()),
        );
        match page.body["page"]["next_cursor"].as_str() {
            Some(c) => path = format!("/v1/orders?limit=2&cursor={c}"),
            None => break,
        }
    }
    ids.reverse();
    assert_eq!(seen, ids, "newest first, each once");

    let drafts = shop
        .call(Method::GET, "/v1/orders?status=draft", None)
        .await
        .expect(200);
    assert_eq!(drafts.body["data"].as_array().expect("data").len(), 3);
    let window = shop
        .call(
            Method::GET,
            "/v1/orders?created_at_min=2026-01-05T00:01:00Z&created_at_max=2026-01-05T00:03:00Z",
            None,
        )
        .await
        .expect(200);
    assert_eq!(window.body["data"].as_array().expect("data").len(), 2);
    let bad = shop
        .call(Method::GET, "/v1/orders?created_at_min=yesterday", None)
        .await;
    assert_eq!((bad.status, bad.field()), (400, "created_at_min"));
    let bad = shop
        .call(Method::GET, "/v1/orders?status=shipped", None)
        .await;
    assert_eq!((bad.status, bad.field()), (400, "status"));
}

#[tokio::test]
async fn a_missing_scope_is_refused_with_403_naming_it_and_changes_nothing() {
    let shop = Shop::open().await;
    let store = shop.host.create_store("ro.example").await;
    shop.host.publish("reader", &["orders.read"]).await;
    let (_, reader) = shop.host.install(&store, "reader").await;
    let reply = shop
        .host
        .call(&reader, Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "line_items": [{"title": "x", "unit_price": 1, "quantity": 1}]})))
        .await;
    assert_eq!((reply.status, reply.code()), (403, "missing_scope"));
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("orders.write")
    );
    shop.host
        .call(&reader, Method::GET, "/v1/orders", None)
        .await
        .expect(200);
    assert!(shop.host.events(&store, "order.created").await.is_empty());
    for (method, path) in [
        (Method::GET, "/v1/products"),
        (Method::GET, "/v1/customers"),
        (Method::POST, "/v1/inventory/adjust"),
    ] {
        let body = (method == Method::POST).then(|| json!({"variant_id": "var_x", "delta": 1}));
        let reply = shop.host.call(&reader, method, path, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (403, "missing_scope"),
            "{path}"
        );
    }
}

#[tokio::test]
async fn another_stores_ids_are_not_found_on_every_endpoint() {
    let shop = Shop::open().await;
    let (_, other) = shop
        .host
        .store_with_plugin("other.example", &ALL_SCOPES)
        .await;
    let product = shop.product(5, None).await;
    let order = shop.order(&variant_id(&product), 1).await;
    let customer = shop.customer("ada@example.com").await;
    let (o, p, c, v) = (
        order["id"].as_str().expect("id"),
        product["id"].as_str().expect("id"),
        customer["id"].as_str().expect("id"),
        variant_id(&product),
    );
    let attempts = [
        (Method::GET, format!("/v1/orders/{o}"), None),
        (
            Method::PATCH,
            format!("/v1/orders/{o}"),
            Some(json!({"note": "x"})),
        ),
        (
            Method::POST,
            format!("/v1/orders/{o}/fulfillments"),
            Some(json!({})),
        ),
        (
            Method::POST,
            format!("/v1/orders/{o}/refunds"),
            Some(json!({"amount": 1})),
        ),
        (
            Method::POST,
            format!("/v1/orders/{o}/cancel"),
            Some(json!({})),
        ),
        (Method::POST, format!("/v1/orders/{o}/complete"), None),
        (Method::GET, format!("/v1/products/{p}"), None),
        (
            Method::PATCH,
            format!("/v1/products/{p}"),
            Some(json!({"title": "x"})),
        ),
        (
            Method::POST,
            format!("/v1/products/{p}/variants"),
            Some(json!({"price": 1, "currency": "EUR"})),
        ),
        (
            Method::POST,
            "/v1/inventory/adjust".to_owned(),
            Some(json!({"variant_id": v, "delta": 1})),
        ),
        (Method::GET, format!("/v1/customers/{c}"), None),
        (
            Method::PATCH,
            format!("/v1/customers/{c}"),
            Some(json!({"note": "x"})),
        ),
        (Method::DELETE, format!("/v1/customers/{c}"), None),
    ];
    for (method, path, body) in attempts {
        let reply = shop.host.call(&other, method.clone(), &path, body).await;
        assert_eq!(
            (reply.status, reply.code()),
            (404, "not_found"),
            "{method} {path}"
        );
    }
    for path in ["/v1/orders", "/v1/products", "/v1/customers"] {
        let list = shop
            .host
            .call(&other, Method::GET, path, None)
            .await
            .expect(200);
        assert!(
            list.body["data"].as_array().expect("data").is_empty(),
            "{path}"
        );
    }
    // The first store's records are untouched.
    let still = shop
        .call(Method::GET, &format!("/v1/orders/{o}"), None)
        .await
        .expect(200);
    assert_eq!(still.body, order);
}

#[tokio::test]
async fn an_idempotency_key_replays_the_first_result_and_refuses_another_body() {
    let shop = Shop::open().await;
    let body = json!({"currency": "EUR", "line_items": [{"title": "x", "unit_price": 100, "quantity": 1}]});
    let post = |key: &str, body: &Value| {
        TestHost::read(
            shop.host
                .request(Method::POST, "/v1/orders")
                .bearer_auth(&shop.token)
                .header("idempotency-key", key)
                .json(body),
        )
    };
    let first = post("order-1", &body).await.expect(201);
    let second = post("order-1", &body).await.expect(201);
    assert_eq!(first.body, second.body);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        shop.events("order.created").await.len(),
        1,
        "the work was done once"
    );

    let mut other = body.clone();
    other["line_items"][0]["quantity"] = json!(2);
    let reused = post("order-1", &other).await;
    assert_eq!(
        (reused.status, reused.code(), reused.field()),
        (409, "idempotency_key_reused", "Idempotency-Key")
    );

    // Errors are replayed too, with a fresh request id.
    let bad = json!({"currency": "EUR", "line_items": []});
    let e1 = post("bad-1", &bad).await;
    let e2 = post("bad-1", &bad).await;
    assert_eq!((e1.status, e2.status, e2.field()), (400, 400, "line_items"));
    assert_ne!(
        e1.body["error"]["request_id"],
        e2.body["error"]["request_id"]
    );

    // Keys are per store and expire after 24 hours.
    shop.host.clock.advance(SignedDuration::from_hours(25));
    let later = post("order-1", &body).await.expect(201);
    assert_ne!(later.body["id"], first.body["id"]);
}

#[tokio::test]
async fn concurrent_writes_to_one_record_are_never_lost() {
    let shop = Shop::open().await;
    let product = shop.product(0, None).await;
    let vid = variant_id(&product);
    let adjustments = (0..40).map(|_| {
        shop.call(
            Method::POST,
            "/v1/inventory/adjust",
            Some(json!({"variant_id": vid, "delta": 1})),
        )
    });
    for reply in futures::future::join_all(adjustments).await {
        assert_eq!(reply.status, 200);
    }
    let p = shop
        .call(
            Method::GET,
            &format!("/v1/products/{}", product["id"].as_str().expect("id")),
            None,
        )
        .await;
    assert_eq!(p.body["variants"][0]["inventory_quantity"], 40);

    let order = shop
        .call(Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "line_items": [{"title": "x", "unit_price": 1000, "quantity": 1}]})))
        .await
        .expect(201)
        .body;
    let id = order["id"].as_str().expect("id").to_owned();
    let patches = (0..20).map(|i| {
        shop.call(
            Method::PATCH,
            format!("/v1/orders/{id}"),
            Some(json!({"custom_fields": {format!("k{i}"): "v"}})),
        )
    });
    for reply in futures::future::join_all(patches).await {
        assert_eq!(reply.status, 200);
    }
    let got = shop
        .call(Method::GET, &format!("/v1/orders/{id}"), None)
        .await
        .expect(200);
    assert_eq!(
        got.body["custom_fields"].as_object().expect("fields").len(),
        20
    );

    shop.host.pay(&shop.store, &order).await.expect(200);
    let refunds = (0..8).map(|_| {
        shop.call(
            Method::POST,
            format!("/v1/orders/{id}/refunds"),
            Some(json!({"amount": 250})),
        )
    });
    let statuses: Vec<u16> = futures::future::join_all(refunds)
        .await
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 201).count(),
        4,
        "{statuses:?}"
    );
    assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 4);
    let got = shop
        .call(Method::GET, &format!("/v1/orders/{id}"), None)
        .await
        .expect(200);
    assert_eq!(got.body["total_refunded"], 1000);
}

#[tokio::test]
async fn events_are_purged_after_30_days() {
    let host = TestHost::start_configured(|c| {
        c.maintenance_interval = std::time::Duration::from_millis(20)
    })
    .await;
    let (store, token) = host.store_with_plugin("acme.example", &ALL_SCOPES).await;
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "a@example.com"})),
    )
    .await
    .expect(201);
    host.clock.advance(SignedDuration::from_hours(24 * 29));
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "b@example.com"})),
    )
    .await
    .expect(201);
    assert_eq!(host.events(&store, "customer.created").await.len(), 2);
    host.clock
        .advance(SignedDuration::from_hours(24) + SignedDuration::from_secs(1));
    let left = host
        .eventually("the 30-day-old event to go", || async {
            let events = host.events(&store, "customer.created").await;
            (events.len() == 1).then_some(events)
        })
        .await;
    assert_eq!(left[0]["data"]["customer"]["email"], "b@example.com");
}
