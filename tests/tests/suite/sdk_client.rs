//! The SDK's REST client (`commerce_guest_sdk::client`) against the real host: every endpoint
//! family, pagination, 429 handling, typed errors and idempotency keys.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use commerce_guest_sdk::client::{
    AdjustInventory, Client, CreateCustomer, CreateFulfillment, CreateOrder, CreateProduct,
    CreateRefund, CustomerFilter, Error, FinancialStatus, NewLineItem, NewVariant, NewWebhook,
    OrderFilter, OrderStatus, PageQuery, ProductFilter, Replay, SendNotification, UpdateCustomer,
    UpdateOrder, UpdateProduct, WebhookPatch,
};
use commerce_guest_sdk::client::{BannerInput, Cta};
use commerce_host::model::clock::SystemClock;
use commerce_host_tests::{ALL_SCOPES, TestHost};
use futures::TryStreamExt as _;
use reqwest::Method;
use serde_json::json;

fn custom_order(title: &str) -> CreateOrder {
    CreateOrder {
        currency: "EUR".into(),
        line_items: vec![NewLineItem::custom(title, 1500, 1)],
        ..CreateOrder::default()
    }
}

fn product(price: i64) -> CreateProduct {
    CreateProduct {
        title: "Mug".into(),
        variants: vec![NewVariant {
            title: Some("Blue".into()),
            price,
            currency: "EUR".into(),
            inventory_quantity: 10,
            ..NewVariant::default()
        }],
        ..CreateProduct::default()
    }
}

#[tokio::test]
async fn order_stream_yields_every_order_exactly_once_across_pages() {
    let host = TestHost::start().await;
    let (_, token) = host
        .store_with_plugin("pages.example", &["orders.read", "orders.write"])
        .await;
    let client = Client::new(&host.base, &token).expect("client");
    let mut created = HashSet::new();
    for n in 0..7 {
        let order = client
            .create_order(&custom_order(&format!("Item {n}")))
            .await
            .expect("order created");
        created.insert(order.id);
    }

    let filter = OrderFilter {
        limit: Some(3),
        ..OrderFilter::default()
    };
    let first = client.list_orders(&filter).await.expect("first page");
    assert_eq!(first.data.len(), 3);
    assert!(first.page.has_more && first.page.next_cursor.is_some());

    let streamed: Vec<String> = client
        .orders(filter)
        .map_ok(|o| o.id)
        .try_collect()
        .await
        .expect("every page");
    assert_eq!(streamed.len(), 7, "three pages of 3, 3 and 1");
    assert_eq!(streamed.iter().cloned().collect::<HashSet<_>>(), created);

    // Filters go into the query: no order is a draft.
    let drafts = OrderFilter {
        status: Some(OrderStatus::Draft),
        ..OrderFilter::default()
    };
    assert!(
        client
            .list_orders(&drafts)
            .await
            .expect("list")
            .data
            .is_empty()
    );
}

#[tokio::test]
async fn rate_limited_call_waits_for_retry_after_then_succeeds() {
    let host = TestHost::start_configured(|c| c.clock = Arc::new(SystemClock)).await;
    let (store, token) = host.store_with_plugin("slow.example", &[]).await;
    host.admin(
        Method::PATCH,
        &format!("/admin/v1/stores/{store}"),
        Some(json!({"rate_limits": {"requests_per_second": 1, "burst": 1, "requests_per_minute": 600}})),
    )
    .await
    .expect(200);
    let client = Client::new(&host.base, &token).expect("client");

    client
        .installation()
        .await
        .expect("the one request of the burst");
    let started = Instant::now();
    let again = client.installation().await.expect("admitted after waiting");
    let waited = started.elapsed();
    assert_eq!(again.plugin, "p-slow-example");
    assert!(
        waited >= Duration::from_millis(500) && waited < Duration::from_secs(5),
        "waited {waited:?} for the bucket to refill"
    );

    // Without retries the 429 comes back, with the wait the host asked for.
    let impatient = client.clone().with_max_retries(0);
    let refused = impatient.installation().await.expect_err("rate limited");
    let api = refused.api().expect("an API error");
    assert_eq!((api.status, api.code.as_str()), (429, "rate_limited"));
    assert!(api.is_rate_limited());
    assert!(api.retry_after.is_some_and(|d| d >= Duration::from_secs(1)));
}

#[tokio::test]
async fn refusals_carry_status_code_field_and_request_id() {
    let host = TestHost::start().await;
    let (_, token) = host
        .store_with_plugin("errors.example", &["products.write", "products.read"])
        .await;
    let client = Client::new(format!("{}/", host.base), &token).expect("client");

    let err = client
        .create_product(&product(0))
        .await
        .expect_err("a non-positive price is refused");
    let Error::Api(api) = &err else {
        panic!("expected an API error, got {err}");
    };
    assert_eq!(api.status, 400);
    assert_eq!(api.code, "validation_failed");
    assert_eq!(api.field.as_deref(), Some("variants[0].price"));
    assert!(
        api.request_id
            .as_deref()
            .is_some_and(|id| id.starts_with("req_"))
    );
    assert!(err.to_string().contains("variants[0].price"));

    let missing = client.get_product("prod_01jd4z7k8m3n5p6q7r8s9t0v1w").await;
    assert_eq!(missing.expect_err("unknown").code(), Some("not_found"));
    let scope = client.list_orders(&OrderFilter::default()).await;
    let scope = scope.expect_err("no orders.read");
    assert_eq!(scope.code(), Some("missing_scope"));
    assert_eq!(scope.api().map(|e| e.status), Some(403));

    let bad_token = Client::new(&host.base, "chp_nope").expect("client");
    let unauthorized = bad_token.installation().await.expect_err("unknown token");
    assert_eq!(unauthorized.code(), Some("unauthorized"));
}

#[tokio::test]
async fn idempotency_key_makes_a_repeated_create_return_the_first_order() {
    let host = TestHost::start().await;
    let (_, token) = host
        .store_with_plugin("idem.example", &["orders.read", "orders.write"])
        .await;
    let client = Client::new(&host.base, &token).expect("client");

    let first = client
        .create_order_idempotent("import-1", &custom_order("Tea"))
        .await
        .expect("created");
    let again = client
        .idempotent("import-1")
        .create_order(&custom_order("Tea"))
        .await
        .expect("replayed");
    assert_eq!(first.id, again.id);
    let reused = client
        .create_order_idempotent("import-1", &custom_order("Coffee"))
        .await
        .expect_err("another body with the same key");
    assert_eq!(reused.code(), Some("idempotency_key_reused"));
    let all = client
        .list_orders(&OrderFilter::default())
        .await
        .expect("list");
    assert_eq!(all.data.len(), 1);
}

#[tokio::test]
async fn client_reaches_every_endpoint_family() {
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let (store, token) = host.store_with_plugin("all.example", &ALL_SCOPES).await;
    let client = Client::new(&host.base, &token).expect("client");

    let me = client.installation().await.expect("installation");
    assert_eq!(me.store.id, store);
    assert_eq!(me.scopes.len(), ALL_SCOPES.len());

    // Products and inventory.
    let mug = client
        .create_product(&product(1200))
        .await
        .expect("product");
    let mug = client
        .add_variant(
            &mug.id,
            &NewVariant {
                title: Some("Red".into()),
                price: 1300,
                currency: "EUR".into(),
                inventory_quantity: 5,
                ..NewVariant::default()
            },
        )
        .await
        .expect("variant");
    assert_eq!(mug.variants.len(), 2);
    let renamed = client
        .update_product(
            &mug.id,
            &UpdateProduct {
                title: Some("Big mug".into()),
                ..UpdateProduct::default()
            },
        )
        .await
        .expect("update product");
    assert_eq!(renamed.title, "Big mug");
    assert_eq!(
        client.get_product(&mug.id).await.expect("get").title,
        "Big mug"
    );
    let listed: Vec<_> = client
        .products(ProductFilter::default())
        .try_collect()
        .await
        .expect("products");
    assert_eq!(listed.len(), 1);
    let blue = mug.variants[0].id.clone();
    let level = client
        .adjust_inventory(&AdjustInventory {
            variant_id: blue.clone(),
            delta: Some(-1),
            ..AdjustInventory::default()
        })
        .await
        .expect("adjust");
    assert_eq!((level.previous_quantity, level.inventory_quantity), (10, 9));

    // Customers.
    let ada = client
        .create_customer(&CreateCustomer {
            email: Some("ada@example.com".into()),
            first_name: Some("Ada".into()),
            ..CreateCustomer::default()
        })
        .await
        .expect("customer");
    let ada = client
        .update_customer(
            &ada.id,
            &UpdateCustomer {
                last_name: Some("Lovelace".into()),
                ..UpdateCustomer::default()
            },
        )
        .await
        .expect("update customer");
    assert_eq!(ada.last_name.as_deref(), Some("Lovelace"));
    assert_eq!(client.get_customer(&ada.id).await.expect("get").id, ada.id);
    let by_email = client
        .list_customers(&CustomerFilter {
            email: Some("ADA@example.com".into()),
            ..CustomerFilter::default()
        })
        .await
        .expect("by email");
    assert_eq!(by_email.data.len(), 1);

    // Orders through their life.
    let order = client
        .create_order(&CreateOrder {
            currency: "EUR".into(),
            customer_id: Some(ada.id.clone()),
            line_items: vec![NewLineItem::variant(&blue, 2)],
            ..CreateOrder::default()
        })
        .await
        .expect("order");
    assert_eq!(order.total, 2400);
    host.pay(&store, &serde_json::to_value(&order).expect("json"))
        .await
        .expect(200);
    let shipped = client
        .fulfill_order(
            &order.id,
            &CreateFulfillment {
                tracking_number: Some("1Z999".into()),
                ..CreateFulfillment::default()
            },
        )
        .await
        .expect("fulfil");
    assert_eq!(shipped.fulfillments.len(), 1);
    let refunded = client
        .refund_order(
            &order.id,
            &CreateRefund {
                amount: Some(400),
                reason: Some("dented".into()),
                ..CreateRefund::default()
            },
        )
        .await
        .expect("refund");
    assert_eq!(
        refunded.financial_status,
        FinancialStatus::PartiallyRefunded
    );
    let noted = client
        .update_order(
            &order.id,
            &UpdateOrder {
                note: Some("gift".into()),
                ..UpdateOrder::default()
            },
        )
        .await
        .expect("note");
    assert_eq!(noted.note.as_deref(), Some("gift"));
    let draft = client
        .create_order(&CreateOrder {
            status: Some(OrderStatus::Draft),
            ..custom_order("Gift wrap")
        })
        .await
        .expect("draft");
    let placed = client.complete_order(&draft.id).await.expect("complete");
    assert_eq!(placed.status, OrderStatus::Open);
    let cancelled = client
        .cancel_order(&draft.id, Some("changed mind"))
        .await
        .expect("cancel");
    assert_eq!(cancelled.status, OrderStatus::Cancelled);
    assert_eq!(client.get_order(&order.id).await.expect("get").id, order.id);

    client.delete_customer(&ada.id).await.expect("delete");
    let gone = client.get_customer(&ada.id).await.expect_err("deleted");
    assert_eq!(gone.code(), Some("not_found"));

    // Webhook subscriptions.
    let hook = client
        .create_webhook(&NewWebhook {
            url: "http://127.0.0.1:9/hooks".into(),
            events: vec!["order.created".into()],
            secret: "0123456789abcdef0123".into(),
        })
        .await
        .expect("subscribe");
    assert_eq!(hook.status, "active");
    let hooks: Vec<_> = client
        .webhooks(PageQuery::default())
        .try_collect()
        .await
        .expect("list");
    assert_eq!(hooks.len(), 1);
    assert_eq!(
        client
            .list_webhooks(&PageQuery::default())
            .await
            .expect("page")
            .data
            .len(),
        1
    );
    assert_eq!(
        client.get_webhook(&hook.id).await.expect("get").url,
        hook.url
    );
    let patched = client
        .update_webhook(
            &hook.id,
            &WebhookPatch {
                events: Some(vec!["order.created".into(), "order.paid".into()]),
                ..WebhookPatch::default()
            },
        )
        .await
        .expect("update webhook");
    assert_eq!(patched.events.len(), 2);
    client
        .resume_webhook(&hook.id)
        .await
        .expect("resume (no-op)");
    let replayed = client
        .replay_webhook(&hook.id, &Replay::Since("2020-01-01T00:00:00Z".into()))
        .await
        .expect("replay");
    assert_eq!(replayed.requeued, 0);
    client
        .delete_webhook(&hook.id)
        .await
        .expect("delete webhook");

    // Notifications.
    let banner = client
        .send_notification(&SendNotification::banner(BannerInput {
            tone: "warn".into(),
            title: "Low stock".into(),
            body: "Big mug is running out.".into(),
            ctas: vec![
                Cta::link("Restock", format!("/products/{}", mug.id)),
                Cta::dismiss("Later"),
            ],
            ttl_hours: Some(48),
        }))
        .await
        .expect("banner");
    assert_eq!(banner.notification.status, "shown");
    assert!(banner.quota.is_none());
    let read = client
        .get_notification(&banner.notification.id)
        .await
        .expect("read back");
    assert_eq!(read.channel, "banner");
}
