//! Test events: a synthetic event of one of a subscription's types, sent to that subscription
//! only, through the delivery engine, with example data in the documented shape of its type.

use jiff::Timestamp;

use super::paused_conflict;
use crate::model::delivery::Delivery;
use crate::model::error::{Error, Result};
use crate::model::event::Event;
use crate::model::ids::{InstallationId, WebhookId};
use crate::model::scopes::EventType;
use crate::model::webhook::{TestEventRequest, WebhookStatus};
use crate::service::Service;
use crate::service::auth::Actor;

/// Example `data` of a test event, in the documented shape of its type.
pub fn example_data(
    kind: EventType,
    installation: &InstallationId,
    now: Timestamp,
) -> serde_json::Value {
    use crate::model::ids::{CustomerId, FulfillmentId, OrderId, ProductId, RefundId, VariantId};
    use serde_json::json;
    let ts = crate::model::clock::format_ts(now);
    let order_id = OrderId::generate(now);
    let customer_id = CustomerId::generate(now);
    let product_id = ProductId::generate(now);
    let variant_id = VariantId::generate(now);
    let summary = |financial: &str, fulfillment: &str, refunded: i64| {
        json!({
            "id": order_id, "status": "open", "financial_status": financial,
            "fulfillment_status": fulfillment, "currency": "USD", "customer_id": customer_id,
            "email": "buyer@example.com", "subtotal": 2500, "total": 2500, "total_paid": 2500,
            "total_refunded": refunded, "created_at": ts, "updated_at": ts, "paid_at": ts,
            "cancelled_at": null,
        })
    };
    let order = |status: &str, financial: &str| {
        json!({
            "id": order_id, "status": status, "financial_status": financial,
            "fulfillment_status": "unfulfilled", "currency": "USD", "customer_id": customer_id,
            "email": "buyer@example.com", "subtotal": 2500, "total": 2500, "total_paid": 0,
            "total_refunded": 0, "created_at": ts, "updated_at": ts, "paid_at": null,
            "cancelled_at": if status == "cancelled" { json!(ts) } else { json!(null) },
            "line_items": [{"variant_id": variant_id, "product_id": product_id, "title": "Test item",
                "quantity": 1, "unit_price": 2500}],
        })
    };
    let customer = json!({
        "id": customer_id, "email": "buyer@example.com", "first_name": "Test",
        "last_name": "Buyer", "created_at": ts, "updated_at": ts,
    });
    let product = json!({
        "id": product_id, "title": "Test product", "status": "active", "created_at": ts,
        "updated_at": ts,
        "variants": [{"id": variant_id, "title": "Default", "price": 2500, "currency": "USD",
            "inventory_quantity": 4}],
    });
    let installation = json!({"id": installation, "status": "active"});
    match kind {
        EventType::OrderCreated => json!({ "order": order("open", "pending") }),
        EventType::OrderPaid => {
            json!({ "order": { "id": order_id, "total": 2500, "currency": "USD" } })
        }
        EventType::OrderFulfilled => json!({
            "order": summary("paid", "fulfilled", 0),
            "fulfillment": {"id": FulfillmentId::generate(now), "created_at": ts,
                "line_items": [{"line_item_id": "li_test", "quantity": 1}]},
        }),
        EventType::OrderCancelled => json!({ "order": order("cancelled", "pending") }),
        EventType::OrderRefunded => json!({
            "order": summary("refunded", "unfulfilled", 2500),
            "refund": {"id": RefundId::generate(now), "amount": 2500, "currency": "USD",
                "created_at": ts},
        }),
        EventType::CustomerCreated | EventType::CustomerUpdated => json!({ "customer": customer }),
        EventType::CustomerDeleted => json!({ "customer": { "id": customer_id } }),
        EventType::ProductCreated | EventType::ProductUpdated => json!({ "product": product }),
        EventType::ProductInventoryUpdated => json!({
            "inventory": {"product_id": product_id, "variant_id": variant_id,
                "previous_quantity": 6, "inventory_quantity": 4,
                "crossed": [{"threshold": "low_stock", "value": 5, "direction": "down"}]},
            "reason": "test",
            "product": product,
        }),
        EventType::PluginInstalled | EventType::PluginConfigured | EventType::PluginUninstalled => {
            json!({ "installation": installation })
        }
    }
}

impl Service {
    /// Sends a synthetic event of one of the subscription's types (default: its first) to this
    /// subscription only, through the delivery engine: signed, retried, logged, marked with
    /// `X-Service-Test: true`. It is not in the store's event log and reaches no other target.
    pub fn send_test_event(
        &self,
        actor: &Actor,
        id: &WebhookId,
        request: &TestEventRequest,
    ) -> Result<Delivery> {
        let sub = self.own_subscription(actor, id)?;
        if sub.status == WebhookStatus::Paused {
            return Err(paused_conflict("sending a test event"));
        }
        let kind = match &request.event_type {
            None => *sub
                .events
                .first()
                .ok_or_else(|| Error::invalid("event_type", "the subscription has no events"))?,
            Some(raw) => {
                let kind: EventType = raw.parse().map_err(|_| {
                    Error::invalid("event_type", format!("`{raw}` is not an event type"))
                })?;
                if !sub.events.contains(&kind) {
                    return Err(Error::invalid(
                        "event_type",
                        format!(
                            "the subscription does not receive `{kind}`; it receives {}",
                            sub.events
                                .iter()
                                .map(|e| format!("`{e}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                kind
            }
        };
        let now = self.now();
        let event = Event {
            id: crate::model::ids::EventId::generate(now),
            kind,
            created_at: now,
            store: actor.store.clone(),
            data: example_data(kind, &sub.installation_id, now),
        };
        let target = sub.target();
        self.db
            .tx(|tx| crate::service::deliveries::queue::enqueue_test(tx, &event, &target, now))
    }
}
