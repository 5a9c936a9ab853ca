//! The typed events against the JSON the host wrote before they were typed: for each type, the
//! typed value serializes to exactly what its `json!` payload was, and reads back to itself.

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::data::*;
use super::{Event, EventData, OUTBOX_PREFIX, StoreRef, kept_mark_for, outbox_key};
use crate::model::customer::{Address, Customer};
use crate::model::ids::EventId;
use crate::model::order::{
    FinancialStatus, Fulfillment, FulfillmentStatus, LineItem, LineQuantity, Order, OrderStatus,
    OrderSummary, Refund,
};
use crate::model::product::{
    InventoryLevel, Media, Product, ProductStatus, ThresholdCrossing, Variant,
};
use crate::model::scopes::{EventType, Scope};
use crate::model::store::{Installation, InstallationStatus};

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn id<T: std::str::FromStr>(s: &str) -> T {
    s.parse().ok().expect("id")
}

fn store() -> StoreRef {
    StoreRef {
        id: id("store_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        domain: "acme.example".to_owned(),
    }
}

fn order() -> Order {
    Order {
        id: id("ord_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        status: OrderStatus::Open,
        financial_status: FinancialStatus::Paid,
        fulfillment_status: FulfillmentStatus::PartiallyFulfilled,
        currency: "EUR".to_owned(),
        customer_id: Some(id("cus_01jd4z7k8m3n5p6q7r8s9t0v1w")),
        email: Some("buyer@example.com".to_owned()),
        line_items: vec![
            LineItem {
                id: id("li_01jd4z7k8m3n5p6q7r8s9t0v1a"),
                variant_id: Some(id("var_01jd4z7k8m3n5p6q7r8s9t0v1w")),
                product_id: Some(id("prod_01jd4z7k8m3n5p6q7r8s9t0v1w")),
                title: "Enamel mug - Blue".to_owned(),
                sku: Some("MUG-BLUE".to_owned()),
                quantity: 2,
                unit_price: 1250,
                total: 2500,
                fulfilled_quantity: 1,
                refunded_quantity: 0,
            },
            LineItem {
                id: id("li_01jd4z7k8m3n5p6q7r8s9t0v1b"),
                variant_id: None,
                product_id: None,
                title: "Gift wrap".to_owned(),
                sku: None,
                quantity: 1,
                unit_price: 300,
                total: 300,
                fulfilled_quantity: 0,
                refunded_quantity: 1,
            },
        ],
        subtotal: 2800,
        total: 2800,
        total_paid: 2800,
        total_refunded: 300,
        tags: vec!["vip".to_owned()],
        note: Some("leave at the door".to_owned()),
        custom_fields: [("gift".to_owned(), "yes".to_owned())].into(),
        fulfillments: vec![fulfillment()],
        refunds: vec![refund()],
        created_at: at("2026-11-22T10:15:30.123Z"),
        updated_at: at("2026-11-22T11:00:00Z"),
        paid_at: Some(at("2026-11-22T10:20:00Z")),
        cancelled_at: None,
        cancel_reason: None,
    }
}

fn fulfillment() -> Fulfillment {
    Fulfillment {
        id: id("ful_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        line_items: vec![LineQuantity {
            line_item_id: id("li_01jd4z7k8m3n5p6q7r8s9t0v1a"),
            quantity: 1,
        }],
        tracking_number: Some("1Z999AA10123456784".to_owned()),
        carrier: None,
        created_at: at("2026-11-22T10:45:00Z"),
    }
}

fn refund() -> Refund {
    Refund {
        id: id("ref_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        amount: 300,
        line_items: vec![LineQuantity {
            line_item_id: id("li_01jd4z7k8m3n5p6q7r8s9t0v1b"),
            quantity: 1,
        }],
        reason: None,
        created_at: at("2026-11-22T11:00:00Z"),
    }
}

fn customer() -> Customer {
    Customer {
        id: id("cus_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        email: Some("ada@example.com".to_owned()),
        phone: None,
        first_name: Some("Ada".to_owned()),
        last_name: Some("Lovelace".to_owned()),
        accepts_marketing: true,
        tags: vec!["vip".to_owned()],
        note: None,
        addresses: vec![Address {
            id: id("addr_01jd4z7k8m3n5p6q7r8s9t0v1w"),
            line1: "12 Rue de la Paix".to_owned(),
            line2: None,
            city: "Paris".to_owned(),
            province: None,
            postal_code: Some("75002".to_owned()),
            country: "FR".to_owned(),
            default: true,
        }],
        created_at: at("2026-11-22T09:00:00Z"),
        updated_at: at("2026-11-22T09:30:00.5Z"),
    }
}

fn product() -> Product {
    Product {
        id: id("prod_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        title: "Enamel mug".to_owned(),
        description: None,
        status: ProductStatus::Active,
        vendor: Some("Acme".to_owned()),
        tags: Vec::new(),
        media: vec![
            Media {
                url: "https://cdn.acme.example/mug.jpg".to_owned(),
                alt: Some("A blue mug".to_owned()),
            },
            Media {
                url: "https://cdn.acme.example/mug-side.jpg".to_owned(),
                alt: None,
            },
        ],
        variants: vec![Variant {
            id: id("var_01jd4z7k8m3n5p6q7r8s9t0v1w"),
            product_id: id("prod_01jd4z7k8m3n5p6q7r8s9t0v1w"),
            title: "Blue".to_owned(),
            sku: Some("MUG-BLUE".to_owned()),
            price: 1250,
            currency: "EUR".to_owned(),
            inventory_quantity: 4,
            low_stock_threshold: Some(5),
            created_at: at("2026-11-22T08:00:00Z"),
        }],
        published_at: Some(at("2026-11-22T08:00:00Z")),
        created_at: at("2026-11-22T08:00:00Z"),
        updated_at: at("2026-11-22T10:15:30.123Z"),
    }
}

fn level() -> InventoryLevel {
    InventoryLevel {
        product_id: id("prod_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        variant_id: id("var_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        previous_quantity: 6,
        inventory_quantity: 4,
        crossed: vec![ThresholdCrossing {
            threshold: "low_stock".to_owned(),
            value: 5,
            direction: "down".to_owned(),
        }],
    }
}

fn installation(settings: Value, status: InstallationStatus) -> Installation {
    Installation {
        id: id("inst_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        store_id: id("store_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        plugin: "order-thanks".to_owned(),
        version: "1.0.0".to_owned(),
        scopes: vec![Scope::OrdersRead, Scope::CustomersRead],
        status,
        created_at: at("2026-11-22T07:00:00Z"),
        uninstalled_at: (status == InstallationStatus::Uninstalled)
            .then(|| at("2026-11-22T12:00:00Z")),
        component_events: vec![EventType::OrderPaid, EventType::PluginUninstalled],
        component_paused_at: None,
        component_pause_reason: None,
        settings,
    }
}

/// The envelope the host wrote before events were typed, around `data`.
fn untyped(kind: &str, data: Value) -> Value {
    json!({
        "id": "evt_01jd4z7k8m3n5p6q7r8s9t0v1w",
        "type": kind,
        "created_at": "2026-11-22T10:15:30.123Z",
        "store": { "id": "store_01jd4z7k8m3n5p6q7r8s9t0v1w", "domain": "acme.example" },
        "data": data,
    })
}

/// `data` in its envelope, as the host builds it now.
fn typed(data: impl Into<EventData>) -> Event {
    Event {
        id: id("evt_01jd4z7k8m3n5p6q7r8s9t0v1w"),
        created_at: at("2026-11-22T10:15:30.123Z"),
        store: store(),
        data: data.into(),
    }
}

/// The typed event is, as JSON, exactly the untyped one (every key, every value, null where
/// there was null); the JSON the host wrote before (keys in alphabetical order) reads into the
/// typed event; and the typed event's own JSON reads back into it and writes the same bytes.
#[track_caller]
fn assert_same_json(event: &Event, untyped: &Value) {
    let written = serde_json::to_string(event).expect("serialize");
    let as_value: Value = serde_json::from_str(&written).expect("JSON");
    assert_eq!(&as_value, untyped, "typed → JSON");
    assert_eq!(
        serde_json::to_string(&as_value).expect("serialize"),
        serde_json::to_string(untyped).expect("serialize"),
        "the same bytes once keys are in one order"
    );
    assert!(
        written.starts_with(r#"{"id":"evt_01jd4z7k8m3n5p6q7r8s9t0v1w","type":""#),
        "the envelope's fields in their order: {written}"
    );

    let old_bytes = serde_json::to_string(untyped).expect("serialize");
    let read: Event = serde_json::from_str(&old_bytes).expect("reads the untyped JSON");
    assert_eq!(&read, event, "untyped JSON → typed");

    let again: Event = serde_json::from_str(&written).expect("reads its own JSON");
    assert_eq!(&again, event, "typed → JSON → typed");
    assert_eq!(
        serde_json::to_string(&again).expect("serialize"),
        written,
        "typed → JSON → typed → the same bytes"
    );
}

#[test]
fn order_created_carries_the_full_order_as_before() {
    let order = order();
    let event = typed(OrderCreated {
        order: order.clone(),
    });
    assert_eq!(event.kind(), EventType::OrderCreated);
    assert_same_json(&event, &untyped("order.created", json!({ "order": order })));
}

#[test]
fn order_paid_carries_exactly_id_total_and_currency_as_before() {
    let order = order();
    let event = typed(OrderPaid {
        order: PaidOrder::from(&order),
    });
    assert_eq!(event.kind(), EventType::OrderPaid);
    assert_same_json(
        &event,
        &untyped(
            "order.paid",
            json!({ "order": { "id": &order.id, "total": order.total, "currency": &order.currency } }),
        ),
    );
}

#[test]
fn order_fulfilled_carries_the_summary_and_the_fulfilment_as_before() {
    let order = order();
    let fulfillment = fulfillment();
    let event = typed(OrderFulfilled {
        order: OrderSummary::from(&order),
        fulfillment: Some(fulfillment.clone()),
    });
    assert_eq!(event.kind(), EventType::OrderFulfilled);
    assert_same_json(
        &event,
        &untyped(
            "order.fulfilled",
            json!({ "order": OrderSummary::from(&order), "fulfillment": &fulfillment }),
        ),
    );
}

#[test]
fn order_fulfilled_stored_before_it_carried_the_fulfilment_still_reads() {
    let summary = OrderSummary::from(&order());
    let event = typed(OrderFulfilled {
        order: summary.clone(),
        fulfillment: None,
    });
    assert_same_json(
        &event,
        &untyped("order.fulfilled", json!({ "order": summary })),
    );
}

#[test]
fn order_cancelled_carries_the_full_order_as_before() {
    let order = Order {
        status: OrderStatus::Cancelled,
        cancelled_at: Some(at("2026-11-22T12:00:00Z")),
        cancel_reason: Some("customer".to_owned()),
        ..order()
    };
    let event = typed(OrderCancelled {
        order: order.clone(),
    });
    assert_eq!(event.kind(), EventType::OrderCancelled);
    assert_same_json(
        &event,
        &untyped("order.cancelled", json!({ "order": order })),
    );
}

#[test]
fn order_refunded_carries_the_summary_and_the_refund_as_before() {
    let order = order();
    let refund = refund();
    let event = typed(OrderRefunded {
        order: OrderSummary::from(&order),
        refund: refund.clone(),
    });
    assert_eq!(event.kind(), EventType::OrderRefunded);
    assert_same_json(
        &event,
        &untyped(
            "order.refunded",
            json!({ "order": OrderSummary::from(&order), "refund": &refund }),
        ),
    );
}

#[test]
fn customer_created_carries_the_customer_as_before() {
    let customer = customer();
    let event = typed(CustomerCreated {
        customer: customer.clone(),
    });
    assert_eq!(event.kind(), EventType::CustomerCreated);
    assert_same_json(
        &event,
        &untyped("customer.created", json!({ "customer": &customer })),
    );
}

#[test]
fn customer_updated_carries_the_customer_as_before() {
    let customer = customer();
    let event = typed(CustomerUpdated {
        customer: customer.clone(),
    });
    assert_eq!(event.kind(), EventType::CustomerUpdated);
    assert_same_json(
        &event,
        &untyped("customer.updated", json!({ "customer": &customer })),
    );
}

#[test]
fn customer_deleted_carries_only_the_id_as_before() {
    let id: crate::model::ids::CustomerId = id("cus_01jd4z7k8m3n5p6q7r8s9t0v1w");
    let event = typed(CustomerDeleted {
        customer: DeletedCustomer { id: id.clone() },
    });
    assert_eq!(event.kind(), EventType::CustomerDeleted);
    assert_same_json(
        &event,
        &untyped("customer.deleted", json!({ "customer": { "id": id } })),
    );
}

#[test]
fn product_created_carries_the_product_as_before() {
    let product = product();
    let event = typed(ProductCreated {
        product: product.clone(),
    });
    assert_eq!(event.kind(), EventType::ProductCreated);
    assert_same_json(
        &event,
        &untyped("product.created", json!({ "product": &product })),
    );
}

#[test]
fn product_updated_carries_the_product_as_before() {
    let product = product();
    let event = typed(ProductUpdated {
        product: product.clone(),
    });
    assert_eq!(event.kind(), EventType::ProductUpdated);
    assert_same_json(
        &event,
        &untyped("product.updated", json!({ "product": &product })),
    );
}

#[test]
fn product_inventory_updated_carries_level_reason_and_product_as_before() {
    let (level, product) = (level(), product());
    for reason in [Some("order"), None] {
        let event = typed(ProductInventoryUpdated {
            inventory: level.clone(),
            reason: reason.map(str::to_owned),
            product: product.clone(),
        });
        assert_eq!(event.kind(), EventType::ProductInventoryUpdated);
        assert_same_json(
            &event,
            &untyped(
                "product.inventory.updated",
                json!({ "inventory": &level, "reason": reason, "product": &product }),
            ),
        );
    }
}

#[test]
fn plugin_installed_carries_the_installation_as_before() {
    let installation = installation(json!({}), InstallationStatus::Active);
    let event = typed(PluginInstalled {
        installation: installation.clone(),
    });
    assert_eq!(event.kind(), EventType::PluginInstalled);
    assert_same_json(
        &event,
        &untyped("plugin.installed", json!({ "installation": &installation })),
    );
}

#[test]
fn plugin_configured_carries_the_installation_with_its_settings_as_before() {
    let installation = installation(
        json!({"greeting": "Hello", "nested": {"b": [1, 2], "a": null}}),
        InstallationStatus::Active,
    );
    let event = typed(PluginConfigured {
        installation: installation.clone(),
    });
    assert_eq!(event.kind(), EventType::PluginConfigured);
    assert_same_json(
        &event,
        &untyped(
            "plugin.configured",
            json!({ "installation": &installation }),
        ),
    );
}

#[test]
fn plugin_uninstalled_carries_the_uninstalled_installation_as_before() {
    let installation = installation(json!({}), InstallationStatus::Uninstalled);
    let event = typed(PluginUninstalled {
        installation: installation.clone(),
    });
    assert_eq!(event.kind(), EventType::PluginUninstalled);
    assert_same_json(
        &event,
        &untyped(
            "plugin.uninstalled",
            json!({ "installation": &installation }),
        ),
    );
}

#[test]
fn events_stored_before_events_were_typed_read_and_write_back_the_same_json() {
    let stored = include_str!("testdata/stored_before_typed_events.jsonl");
    let mut kinds = BTreeSet::new();
    for line in stored.lines() {
        let before: Value = serde_json::from_str(line).expect("JSON");
        let event: Event = serde_json::from_str(line).expect("reads");
        assert_eq!(
            serde_json::to_value(&event).expect("JSON"),
            before,
            "{line}"
        );
        kinds.insert(event.kind());
    }
    assert_eq!(
        kinds,
        EventType::ALL.into_iter().collect(),
        "one of each type"
    );
}

#[test]
fn an_envelope_whose_data_is_not_of_its_type_is_refused() {
    let mut envelope = untyped("order.paid", json!({ "customer": customer() }));
    let error = serde_json::from_value::<Event>(envelope.clone()).expect_err("refused");
    assert!(error.to_string().contains("order"), "{error}");
    envelope["type"] = json!("order.shipped");
    serde_json::from_value::<Event>(envelope).expect_err("no such type");
}

#[test]
fn an_envelope_giving_data_before_its_type_reads_the_same() {
    let event = typed(CustomerCreated {
        customer: customer(),
    });
    let text = format!(
        r#"{{"data":{},"store":{},"created_at":"2026-11-22T10:15:30.123Z","type":"customer.created","id":"{}","extra":1}}"#,
        serde_json::to_string(&event.data).expect("JSON"),
        serde_json::to_string(&event.store).expect("JSON"),
        event.id,
    );
    assert_eq!(serde_json::from_str::<Event>(&text).expect("reads"), event);
}

#[test]
fn a_receiver_without_customers_read_gets_order_events_with_a_null_email() {
    let without: BTreeSet<Scope> = [Scope::OrdersRead].into();
    let with: BTreeSet<Scope> = [Scope::OrdersRead, Scope::CustomersRead].into();
    let order = order();
    let events = [
        typed(OrderCreated {
            order: order.clone(),
        }),
        typed(OrderCancelled {
            order: order.clone(),
        }),
        typed(OrderFulfilled {
            order: OrderSummary::from(&order),
            fulfillment: Some(fulfillment()),
        }),
        typed(OrderRefunded {
            order: OrderSummary::from(&order),
            refund: refund(),
        }),
    ];
    for event in &events {
        let seen = serde_json::to_value(&*event.for_scopes(&without)).expect("JSON");
        assert_eq!(
            seen["data"]["order"]["email"],
            Value::Null,
            "{}",
            event.kind()
        );
        let mut expected = serde_json::to_value(event).expect("JSON");
        expected["data"]["order"]["email"] = Value::Null;
        assert_eq!(seen, expected, "only the email changes");
        assert!(matches!(
            event.for_scopes(&with),
            std::borrow::Cow::Borrowed(_)
        ));
    }
    let paid = typed(OrderPaid {
        order: PaidOrder::from(&order),
    });
    assert!(matches!(
        paid.for_scopes(&without),
        std::borrow::Cow::Borrowed(_)
    ));
}

#[test]
fn only_lifecycle_events_name_an_installation() {
    let installation = installation(json!({}), InstallationStatus::Active);
    for kind in EventType::ALL {
        let data = EventData::plugin_lifecycle(kind, installation.clone());
        assert_eq!(
            data.is_some(),
            kind.as_str().starts_with("plugin."),
            "{kind}"
        );
        if let Some(data) = data {
            assert_eq!(data.kind(), kind);
            assert_eq!(data.installation(), Some(&installation));
        }
    }
    assert_eq!(
        EventData::from(CustomerCreated {
            customer: customer()
        })
        .installation(),
        None
    );
}

#[test]
fn the_kept_mark_lies_past_every_entry_made_within_a_second_of_the_one_kept() {
    // Keys made here from their parts: the ids' generator is the process's, monotonic across
    // the tests' clocks.
    let key = |ms: u64, random: u128| {
        let id = ulid::Ulid::from_parts(1_790_000_000_000 + ms, random);
        outbox_key(
            &format!("evt_{}", id.to_string().to_ascii_lowercase())
                .parse::<EventId>()
                .expect("id"),
        )
    };
    let kept = key(0, 12_345);
    let mark = kept_mark_for(&kept);
    assert!(mark > kept);
    assert!(
        mark >= key(1000, u128::MAX >> 48),
        "the last key of its millisecond"
    );
    assert!(mark < key(1001, 0));
    assert!(mark.starts_with(OUTBOX_PREFIX), "{mark}");
    assert_eq!(kept_mark_for("outbox/not-an-id"), "outbox/not-an-id");
}

/// An event (a customer deleted), under the key `evt-{n}`: for the tests of what keeps events
/// in memory.
pub(crate) fn numbered(n: usize) -> (String, Event) {
    let now = Timestamp::UNIX_EPOCH;
    let store = StoreRef {
        id: crate::model::ids::StoreId::generate(now),
        domain: "acme.example".to_owned(),
    };
    let customer = DeletedCustomer {
        id: crate::model::ids::CustomerId::generate(now),
    };
    (
        format!("evt-{n}"),
        Event::new(&store, CustomerDeleted { customer }, now),
    )
}
