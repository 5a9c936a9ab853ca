//! Example `data` of each event type, for the test events a subscriber asks for
//! (`POST /v1/webhooks/{id}/test`): built from the same types as real events, so a test event has
//! the documented shape of its type.

use jiff::Timestamp;

use crate::model::customer::Customer;
use crate::model::event::EventData;
use crate::model::event::data::*;
use crate::model::ids::{
    CustomerId, FulfillmentId, LineItemId, OrderId, ProductId, RefundId, VariantId,
};
use crate::model::order::{
    FinancialStatus, Fulfillment, FulfillmentStatus, LineItem, LineQuantity, Order, OrderStatus,
    OrderSummary, Refund,
};
use crate::model::product::{InventoryLevel, Product, ProductStatus, ThresholdCrossing, Variant};
use crate::model::scopes::EventType;
use crate::model::store::Installation;

/// Example `data` of a test event, in the documented shape of its type: records of a made-up
/// order, customer and product; the lifecycle events carry `installation`, the subscriber's own.
pub fn example_data(kind: EventType, installation: &Installation, now: Timestamp) -> EventData {
    let customer_id = CustomerId::generate(now);
    let product_id = ProductId::generate(now);
    let variant_id = VariantId::generate(now);
    let line_id = LineItemId::generate(now);
    let order = Order {
        id: OrderId::generate(now),
        status: OrderStatus::Open,
        financial_status: FinancialStatus::Pending,
        fulfillment_status: FulfillmentStatus::Unfulfilled,
        currency: "USD".to_owned(),
        customer_id: Some(customer_id.clone()),
        email: Some("buyer@example.com".to_owned()),
        line_items: vec![LineItem {
            id: line_id.clone(),
            variant_id: Some(variant_id.clone()),
            product_id: Some(product_id.clone()),
            title: "Test item".to_owned(),
            sku: None,
            quantity: 1,
            unit_price: 2500,
            total: 2500,
            fulfilled_quantity: 0,
            refunded_quantity: 0,
        }],
        subtotal: 2500,
        total: 2500,
        total_paid: 0,
        total_refunded: 0,
        tags: Vec::new(),
        note: None,
        custom_fields: Default::default(),
        fulfillments: Vec::new(),
        refunds: Vec::new(),
        created_at: now,
        updated_at: now,
        paid_at: None,
        cancelled_at: None,
        cancel_reason: None,
    };
    let paid = Order {
        financial_status: FinancialStatus::Paid,
        total_paid: 2500,
        paid_at: Some(now),
        ..order.clone()
    };
    let customer = Customer {
        id: customer_id,
        email: Some("buyer@example.com".to_owned()),
        phone: None,
        first_name: Some("Test".to_owned()),
        last_name: Some("Buyer".to_owned()),
        accepts_marketing: false,
        tags: Vec::new(),
        note: None,
        addresses: Vec::new(),
        created_at: now,
        updated_at: now,
    };
    let product = Product {
        id: product_id.clone(),
        title: "Test product".to_owned(),
        description: None,
        status: ProductStatus::Active,
        vendor: None,
        tags: Vec::new(),
        media: Vec::new(),
        variants: vec![Variant {
            id: variant_id.clone(),
            product_id: product_id.clone(),
            title: "Default".to_owned(),
            sku: None,
            price: 2500,
            currency: "USD".to_owned(),
            inventory_quantity: 4,
            low_stock_threshold: Some(5),
            created_at: now,
        }],
        published_at: Some(now),
        created_at: now,
        updated_at: now,
    };
    match kind {
        EventType::OrderCreated => OrderCreated { order }.into(),
        EventType::OrderPaid => OrderPaid {
            order: PaidOrder::from(&paid),
        }
        .into(),
        EventType::OrderFulfilled => {
            let fulfillment = Fulfillment {
                id: FulfillmentId::generate(now),
                line_items: vec![LineQuantity {
                    line_item_id: line_id,
                    quantity: 1,
                }],
                tracking_number: None,
                carrier: None,
                created_at: now,
            };
            let fulfilled = Order {
                fulfillment_status: FulfillmentStatus::Fulfilled,
                ..paid
            };
            OrderFulfilled {
                order: OrderSummary::from(&fulfilled),
                fulfillment: Some(fulfillment),
            }
            .into()
        }
        EventType::OrderCancelled => OrderCancelled {
            order: Order {
                status: OrderStatus::Cancelled,
                cancelled_at: Some(now),
                ..order
            },
        }
        .into(),
        EventType::OrderRefunded => {
            let refund = Refund {
                id: RefundId::generate(now),
                amount: 2500,
                line_items: Vec::new(),
                reason: None,
                created_at: now,
            };
            let refunded = Order {
                financial_status: FinancialStatus::Refunded,
                total_refunded: 2500,
                ..paid
            };
            OrderRefunded {
                order: OrderSummary::from(&refunded),
                refund,
            }
            .into()
        }
        EventType::CustomerCreated => CustomerCreated { customer }.into(),
        EventType::CustomerUpdated => CustomerUpdated { customer }.into(),
        EventType::CustomerDeleted => CustomerDeleted {
            customer: DeletedCustomer { id: customer.id },
        }
        .into(),
        EventType::ProductCreated => ProductCreated { product }.into(),
        EventType::ProductUpdated => ProductUpdated { product }.into(),
        EventType::ProductInventoryUpdated => ProductInventoryUpdated {
            inventory: InventoryLevel {
                product_id,
                variant_id,
                previous_quantity: 6,
                inventory_quantity: 4,
                crossed: vec![ThresholdCrossing {
                    threshold: "low_stock".to_owned(),
                    value: 5,
                    direction: "down".to_owned(),
                }],
            },
            reason: Some("test".to_owned()),
            product,
        }
        .into(),
        EventType::PluginInstalled => PluginInstalled {
            installation: installation.clone(),
        }
        .into(),
        EventType::PluginConfigured => PluginConfigured {
            installation: installation.clone(),
        }
        .into(),
        EventType::PluginUninstalled => PluginUninstalled {
            installation: installation.clone(),
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::store::InstallationStatus;

    #[test]
    fn the_example_of_each_type_is_of_that_type_and_names_the_subscriber() {
        let now: Timestamp = "2026-11-22T10:15:30.123Z".parse().expect("timestamp");
        let installation = Installation {
            id: "inst_01jd4z7k8m3n5p6q7r8s9t0v1w".parse().expect("id"),
            store_id: "store_01jd4z7k8m3n5p6q7r8s9t0v1w".parse().expect("id"),
            plugin: "order-thanks".to_owned(),
            version: "1.0.0".to_owned(),
            scopes: Vec::new(),
            status: InstallationStatus::Active,
            created_at: now,
            uninstalled_at: None,
            component_events: Vec::new(),
            component_paused_at: None,
            component_pause_reason: None,
            settings: serde_json::json!({}),
        };
        for kind in EventType::ALL {
            let data = example_data(kind, &installation, now);
            assert_eq!(data.kind(), kind);
            assert_eq!(
                data.installation().is_some_and(|i| i == &installation),
                kind.as_str().starts_with("plugin."),
                "{kind}"
            );
        }
    }
}
