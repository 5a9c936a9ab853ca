//! The `data` of each event type: one Rust type per type, and [`EventData`] over the fourteen.
//!
//! Each type serializes to exactly the documented JSON of its `data` (docs/events.md), which is
//! what the host has always sent and stored, so a receiver, a stored event and a replay see the
//! same JSON. The event's type follows from the variant ([`EventData::kind`]): an event whose
//! `type` and `data` disagree cannot be built. Reading goes the other way: the envelope's `type`
//! says which type its `data` is ([`EventData::deserialize_as`]).

use serde::de::DeserializeSeed;
use serde::{Deserialize, Deserializer, Serialize};

use crate::model::customer::Customer;
use crate::model::ids::{CustomerId, OrderId};
use crate::model::order::{Fulfillment, Order, OrderSummary, Refund};
use crate::model::product::{InventoryLevel, Product};
use crate::model::scopes::EventType;
use crate::model::store::Installation;

/// `order.created`: an order (draft or live) was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderCreated {
    /// The full order after the change.
    pub order: Order,
}

/// `order.paid`: the payment gateway confirmed payment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderPaid {
    /// Exactly the order's id, total and currency.
    pub order: PaidOrder,
}

/// What `order.paid` carries of the order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaidOrder {
    /// Order id (`ord_…`).
    pub id: OrderId,
    /// What the buyer paid, minor units.
    pub total: i64,
    /// ISO 4217 code.
    pub currency: String,
}

impl From<&Order> for PaidOrder {
    fn from(order: &Order) -> Self {
        Self {
            id: order.id.clone(),
            total: order.total,
            currency: order.currency.clone(),
        }
    }
}

/// `order.fulfilled`: a fulfilment shipped the last units of the order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderFulfilled {
    /// The order's summary after the change.
    pub order: OrderSummary,
    /// The fulfilment that completed the order. Absent only in events stored before events
    /// carried it (they held the whole order instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fulfillment: Option<Fulfillment>,
}

/// `order.cancelled`: the order moved to the cancelled state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderCancelled {
    /// The full order after the change.
    pub order: Order,
}

/// `order.refunded`: a refund, partial or full, was issued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderRefunded {
    /// The order's summary after the change.
    pub order: OrderSummary,
    /// The refund just issued.
    pub refund: Refund,
}

/// `customer.created`: a customer record was created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomerCreated {
    /// The customer.
    pub customer: Customer,
}

/// `customer.updated`: a customer's profile changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomerUpdated {
    /// The customer after the change.
    pub customer: Customer,
}

/// `customer.deleted`: a customer was hard-deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomerDeleted {
    /// Nothing but the id: the record is gone.
    pub customer: DeletedCustomer,
}

/// What `customer.deleted` carries of the customer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletedCustomer {
    /// Customer id (`cus_…`).
    pub id: CustomerId,
}

/// `product.created`: a product was first published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProductCreated {
    /// The product.
    pub product: Product,
}

/// `product.updated`: a published product's catalogue content changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProductUpdated {
    /// The product after the change.
    pub product: Product,
}

/// `product.inventory.updated`: a stock change crossed zero or a low-stock threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProductInventoryUpdated {
    /// The variant's stock before and after, and the thresholds crossed.
    pub inventory: InventoryLevel,
    /// `order`, `order_cancelled`, or the reason given to an adjustment (null when none).
    pub reason: Option<String>,
    /// The product after the change.
    pub product: Product,
}

/// `plugin.installed`: a merchant installed the plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginInstalled {
    /// The installation.
    pub installation: Installation,
}

/// `plugin.configured`: the merchant changed the plugin's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginConfigured {
    /// The installation, with its new settings.
    pub installation: Installation,
}

/// `plugin.uninstalled`: a merchant removed the plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginUninstalled {
    /// The installation, `status: "uninstalled"`.
    pub installation: Installation,
}

/// Declares [`EventData`] over the types above: the variant of each, its [`EventType`], the
/// conversion into it, and the dispatch from a type to its deserializer.
macro_rules! event_data {
    ($($(#[$doc:meta])* $variant:ident => $kind:ident,)*) => {
        /// The content of an event: one variant per event type.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EventData {
            $($(#[$doc])* $variant($variant),)*
        }

        impl EventData {
            /// The event's type.
            pub fn kind(&self) -> EventType {
                match self {
                    $(EventData::$variant(_) => EventType::$kind,)*
                }
            }

            /// Reads the `data` of an event of type `kind` from `deserializer`.
            pub fn deserialize_as<'de, D: Deserializer<'de>>(
                kind: EventType,
                deserializer: D,
            ) -> Result<Self, D::Error> {
                Ok(match kind {
                    $(EventType::$kind => EventData::$variant($variant::deserialize(deserializer)?),)*
                })
            }
        }

        impl Serialize for EventData {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                match self {
                    $(EventData::$variant(data) => data.serialize(serializer),)*
                }
            }
        }

        $(
            impl From<$variant> for EventData {
                fn from(data: $variant) -> Self {
                    EventData::$variant(data)
                }
            }
        )*
    };
}

event_data! {
    /// `order.created`.
    OrderCreated => OrderCreated,
    /// `order.paid`.
    OrderPaid => OrderPaid,
    /// `order.fulfilled`.
    OrderFulfilled => OrderFulfilled,
    /// `order.cancelled`.
    OrderCancelled => OrderCancelled,
    /// `order.refunded`.
    OrderRefunded => OrderRefunded,
    /// `customer.created`.
    CustomerCreated => CustomerCreated,
    /// `customer.updated`.
    CustomerUpdated => CustomerUpdated,
    /// `customer.deleted`.
    CustomerDeleted => CustomerDeleted,
    /// `product.created`.
    ProductCreated => ProductCreated,
    /// `product.updated`.
    ProductUpdated => ProductUpdated,
    /// `product.inventory.updated`.
    ProductInventoryUpdated => ProductInventoryUpdated,
    /// `plugin.installed`.
    PluginInstalled => PluginInstalled,
    /// `plugin.configured`.
    PluginConfigured => PluginConfigured,
    /// `plugin.uninstalled`.
    PluginUninstalled => PluginUninstalled,
}

impl EventData {
    /// Reads the `data` of an event of type `kind` from JSON (`plugin run --data`, and an
    /// envelope whose `data` comes before its `type`).
    pub fn from_json(kind: EventType, value: serde_json::Value) -> serde_json::Result<Self> {
        Self::deserialize_as(kind, value)
    }

    /// The lifecycle event of type `kind` about `installation`; `None` unless `kind` is one of
    /// `plugin.installed`, `plugin.configured`, `plugin.uninstalled`.
    pub fn plugin_lifecycle(kind: EventType, installation: Installation) -> Option<Self> {
        Some(match kind {
            EventType::PluginInstalled => PluginInstalled { installation }.into(),
            EventType::PluginConfigured => PluginConfigured { installation }.into(),
            EventType::PluginUninstalled => PluginUninstalled { installation }.into(),
            _ => return None,
        })
    }

    /// The installation a lifecycle event (`plugin.*`) is about; `None` for other events.
    pub fn installation(&self) -> Option<&Installation> {
        match self {
            EventData::PluginInstalled(e) => Some(&e.installation),
            EventData::PluginConfigured(e) => Some(&e.installation),
            EventData::PluginUninstalled(e) => Some(&e.installation),
            _ => None,
        }
    }

    /// The buyer's email of the order an order event carries (`None` for `order.paid`, which
    /// carries none, and for events about anything else).
    pub fn buyer_email(&self) -> Option<&Option<String>> {
        match self {
            EventData::OrderCreated(e) => Some(&e.order.email),
            EventData::OrderCancelled(e) => Some(&e.order.email),
            EventData::OrderFulfilled(e) => Some(&e.order.email),
            EventData::OrderRefunded(e) => Some(&e.order.email),
            _ => None,
        }
    }

    /// [`EventData::buyer_email`], to change.
    pub fn buyer_email_mut(&mut self) -> Option<&mut Option<String>> {
        match self {
            EventData::OrderCreated(e) => Some(&mut e.order.email),
            EventData::OrderCancelled(e) => Some(&mut e.order.email),
            EventData::OrderFulfilled(e) => Some(&mut e.order.email),
            EventData::OrderRefunded(e) => Some(&mut e.order.email),
            _ => None,
        }
    }
}

/// The `data` of an event whose type is known: reads it straight into its type.
pub(crate) struct DataOf(pub EventType);

impl<'de> DeserializeSeed<'de> for DataOf {
    type Value = EventData;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<EventData, D::Error> {
        EventData::deserialize_as(self.0, deserializer)
    }
}
