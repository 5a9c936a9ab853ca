//! The typed event a component receives, from the stored envelope: each event type's data to its
//! WIT variant, field by field.

use super::records::{customer, level, order, product, refund, summary_order};
use crate::model::clock::format_ts;
use crate::model::event::{Event, EventData};
use crate::model::store::Installation;
use crate::plugins::bindings::commerce::plugin::events as we;

/// The typed event for a plugin, from the stored envelope. `raw_data` is the event's `data` as
/// the JSON a webhook receiver gets.
pub fn event(e: &Event) -> anyhow::Result<we::Event> {
    let typed = match &e.data {
        EventData::OrderCreated(d) => we::EventData::OrderCreated(order(d.order.clone())),
        EventData::OrderCancelled(d) => we::EventData::OrderCancelled(order(d.order.clone())),
        // An event stored before events carried the fulfilment has none: an empty list then.
        EventData::OrderFulfilled(d) => we::EventData::OrderFulfilled(summary_order(
            d.order.clone(),
            d.fulfillment.iter().cloned().collect(),
            Vec::new(),
        )),
        EventData::OrderPaid(d) => we::EventData::OrderPaid(we::PaidOrder {
            id: d.order.id.to_string(),
            total: d.order.total,
            currency: d.order.currency.clone(),
        }),
        EventData::OrderRefunded(d) => we::EventData::OrderRefunded(we::OrderRefund {
            order: summary_order(d.order.clone(), Vec::new(), vec![d.refund.clone()]),
            refund: refund(d.refund.clone()),
        }),
        EventData::CustomerCreated(d) => {
            we::EventData::CustomerCreated(customer(d.customer.clone()))
        }
        EventData::CustomerUpdated(d) => {
            we::EventData::CustomerUpdated(customer(d.customer.clone()))
        }
        EventData::CustomerDeleted(d) => we::EventData::CustomerDeleted(d.customer.id.to_string()),
        EventData::ProductCreated(d) => we::EventData::ProductCreated(product(d.product.clone())),
        EventData::ProductUpdated(d) => we::EventData::ProductUpdated(product(d.product.clone())),
        EventData::ProductInventoryUpdated(d) => {
            we::EventData::ProductInventoryUpdated(we::InventoryChange {
                inventory: level(d.inventory.clone()),
                reason: d.reason.clone(),
                product: product(d.product.clone()),
            })
        }
        EventData::PluginInstalled(d) => {
            we::EventData::PluginInstalled(installation(&d.installation))
        }
        EventData::PluginConfigured(d) => {
            we::EventData::PluginConfigured(installation(&d.installation))
        }
        EventData::PluginUninstalled(d) => {
            we::EventData::PluginUninstalled(installation(&d.installation))
        }
    };
    Ok(we::Event {
        id: e.id.to_string(),
        type_: e.kind().as_str().to_owned(),
        created_at: format_ts(e.created_at),
        store: we::StoreRef {
            id: e.store.id.to_string(),
            domain: e.store.domain.clone(),
        },
        data: typed,
        raw_data: serde_json::to_string(&e.data)?,
    })
}

/// What a lifecycle event tells the component of its installation.
fn installation(i: &Installation) -> we::Installation {
    we::Installation {
        id: i.id.to_string(),
        plugin: i.plugin.clone(),
        version: i.version.clone(),
        scopes: i.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
        settings: i.settings.to_string(),
    }
}
