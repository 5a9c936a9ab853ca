//! The typed event a component receives, from the stored envelope.

use super::records::{customer, level, order, product, refund, summary_order};
use crate::model::clock::format_ts;
use crate::model::order::Refund;
use crate::plugins::bindings::commerce::plugin::events as we;

/// The typed event for a plugin, from the stored envelope.
pub fn event(e: &crate::model::event::Event) -> anyhow::Result<we::Event> {
    use crate::model::scopes::EventType as T;
    let data = &e.data;
    let field = |name: &str| {
        data.get(name)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("event {} has no `{name}`", e.id))
    };
    let typed = match e.kind {
        T::OrderCreated | T::OrderCancelled => {
            let o = order(serde_json::from_value(field("order")?)?);
            match e.kind {
                T::OrderCreated => we::EventData::OrderCreated(o),
                _ => we::EventData::OrderCancelled(o),
            }
        }
        T::OrderFulfilled => {
            // Events stored before the summary have no `fulfillment`: an empty list then.
            let fulfillments = data
                .get("fulfillment")
                .map(|f| serde_json::from_value(f.clone()))
                .transpose()?
                .into_iter()
                .collect();
            we::EventData::OrderFulfilled(summary_order(
                serde_json::from_value(field("order")?)?,
                fulfillments,
                Vec::new(),
            ))
        }
        T::OrderPaid => {
            #[derive(serde::Deserialize)]
            struct Paid {
                id: String,
                total: i64,
                currency: String,
            }
            let p: Paid = serde_json::from_value(field("order")?)?;
            we::EventData::OrderPaid(we::PaidOrder {
                id: p.id,
                total: p.total,
                currency: p.currency,
            })
        }
        T::OrderRefunded => {
            let issued: Refund = serde_json::from_value(field("refund")?)?;
            we::EventData::OrderRefunded(we::OrderRefund {
                order: summary_order(
                    serde_json::from_value(field("order")?)?,
                    Vec::new(),
                    vec![issued.clone()],
                ),
                refund: refund(issued),
            })
        }
        T::CustomerCreated => {
            we::EventData::CustomerCreated(customer(serde_json::from_value(field("customer")?)?))
        }
        T::CustomerUpdated => {
            we::EventData::CustomerUpdated(customer(serde_json::from_value(field("customer")?)?))
        }
        T::CustomerDeleted => we::EventData::CustomerDeleted(
            field("customer")?
                .get("id")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned(),
        ),
        T::ProductCreated => {
            we::EventData::ProductCreated(product(serde_json::from_value(field("product")?)?))
        }
        T::ProductUpdated => {
            we::EventData::ProductUpdated(product(serde_json::from_value(field("product")?)?))
        }
        T::ProductInventoryUpdated => we::EventData::ProductInventoryUpdated(we::InventoryChange {
            inventory: level(serde_json::from_value(field("inventory")?)?),
            reason: data
                .get("reason")
                .and_then(|r| r.as_str())
                .map(str::to_owned),
            product: product(serde_json::from_value(field("product")?)?),
        }),
        T::PluginInstalled | T::PluginConfigured | T::PluginUninstalled => {
            let i: crate::model::store::Installation =
                serde_json::from_value(field("installation")?)?;
            let info = we::Installation {
                id: i.id.to_string(),
                plugin: i.plugin,
                version: i.version,
                scopes: i.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
                settings: i.settings.to_string(),
            };
            match e.kind {
                T::PluginInstalled => we::EventData::PluginInstalled(info),
                T::PluginConfigured => we::EventData::PluginConfigured(info),
                _ => we::EventData::PluginUninstalled(info),
            }
        }
    };
    Ok(we::Event {
        id: e.id.to_string(),
        type_: e.kind.as_str().to_owned(),
        created_at: format_ts(e.created_at),
        store: we::StoreRef {
            id: e.store.id.to_string(),
            domain: e.store.domain.clone(),
        },
        data: typed,
        raw_data: data.to_string(),
    })
}
