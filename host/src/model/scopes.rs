//! Scopes and event types: the closed vocabularies of manifests, tokens and subscriptions.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A permission granted to an installation, exactly as declared in its plugin's manifest.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
pub enum Scope {
    /// Read orders.
    #[serde(rename = "orders.read")]
    OrdersRead,
    /// Create and change orders.
    #[serde(rename = "orders.write")]
    OrdersWrite,
    /// Read products, variants and stock.
    #[serde(rename = "products.read")]
    ProductsRead,
    /// Create and change products, variants and stock.
    #[serde(rename = "products.write")]
    ProductsWrite,
    /// Read customers.
    #[serde(rename = "customers.read")]
    CustomersRead,
    /// Create and change customers.
    #[serde(rename = "customers.write")]
    CustomersWrite,
}

impl Scope {
    /// Every scope.
    pub const ALL: [Scope; 6] = [
        Scope::OrdersRead,
        Scope::OrdersWrite,
        Scope::ProductsRead,
        Scope::ProductsWrite,
        Scope::CustomersRead,
        Scope::CustomersWrite,
    ];

    /// The scope's name, as in manifests and error messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::OrdersRead => "orders.read",
            Scope::OrdersWrite => "orders.write",
            Scope::ProductsRead => "products.read",
            Scope::ProductsWrite => "products.write",
            Scope::CustomersRead => "customers.read",
            Scope::CustomersWrite => "customers.write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scope::ALL
            .into_iter()
            .find(|scope| scope.as_str() == s)
            .ok_or_else(|| {
                let known: Vec<_> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown scope `{s}`; known scopes: {}", known.join(", "))
            })
    }
}

/// The kinds of store event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
pub enum EventType {
    /// A draft or live order is first persisted.
    #[serde(rename = "order.created")]
    OrderCreated,
    /// Payment is confirmed by the gateway.
    #[serde(rename = "order.paid")]
    OrderPaid,
    /// All line items have shipped.
    #[serde(rename = "order.fulfilled")]
    OrderFulfilled,
    /// The order moves to the cancelled state.
    #[serde(rename = "order.cancelled")]
    OrderCancelled,
    /// Any partial or full refund is issued.
    #[serde(rename = "order.refunded")]
    OrderRefunded,
    /// A new customer record is created.
    #[serde(rename = "customer.created")]
    CustomerCreated,
    /// A customer profile changes.
    #[serde(rename = "customer.updated")]
    CustomerUpdated,
    /// A customer is hard-deleted.
    #[serde(rename = "customer.deleted")]
    CustomerDeleted,
    /// A product is published.
    #[serde(rename = "product.created")]
    ProductCreated,
    /// Title, price, variants or media change.
    #[serde(rename = "product.updated")]
    ProductUpdated,
    /// Stock count crosses a threshold.
    #[serde(rename = "product.inventory.updated")]
    ProductInventoryUpdated,
    /// A merchant installs the plugin.
    #[serde(rename = "plugin.installed")]
    PluginInstalled,
    /// Plugin settings change.
    #[serde(rename = "plugin.configured")]
    PluginConfigured,
    /// A merchant removes the plugin.
    #[serde(rename = "plugin.uninstalled")]
    PluginUninstalled,
}

impl EventType {
    /// Every event type.
    pub const ALL: [EventType; 14] = [
        EventType::OrderCreated,
        EventType::OrderPaid,
        EventType::OrderFulfilled,
        EventType::OrderCancelled,
        EventType::OrderRefunded,
        EventType::CustomerCreated,
        EventType::CustomerUpdated,
        EventType::CustomerDeleted,
        EventType::ProductCreated,
        EventType::ProductUpdated,
        EventType::ProductInventoryUpdated,
        EventType::PluginInstalled,
        EventType::PluginConfigured,
        EventType::PluginUninstalled,
    ];

    /// The event's name, as in envelopes and subscriptions.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::OrderCreated => "order.created",
            EventType::OrderPaid => "order.paid",
            EventType::OrderFulfilled => "order.fulfilled",
            EventType::OrderCancelled => "order.cancelled",
            EventType::OrderRefunded => "order.refunded",
            EventType::CustomerCreated => "customer.created",
            EventType::CustomerUpdated => "customer.updated",
            EventType::CustomerDeleted => "customer.deleted",
            EventType::ProductCreated => "product.created",
            EventType::ProductUpdated => "product.updated",
            EventType::ProductInventoryUpdated => "product.inventory.updated",
            EventType::PluginInstalled => "plugin.installed",
            EventType::PluginConfigured => "plugin.configured",
            EventType::PluginUninstalled => "plugin.uninstalled",
        }
    }

    /// The scope an installation needs to receive this event: the read scope of the resource it
    /// describes (as Shopify ties webhook topics to read scopes). Lifecycle events need none.
    pub fn required_scope(self) -> Option<Scope> {
        match self.as_str().split('.').next() {
            Some("order") => Some(Scope::OrdersRead),
            Some("customer") => Some(Scope::CustomersRead),
            Some("product") => Some(Scope::ProductsRead),
            _ => None,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        EventType::ALL
            .into_iter()
            .find(|e| e.as_str() == s)
            .ok_or_else(|| format!("unknown event `{s}`"))
    }
}
