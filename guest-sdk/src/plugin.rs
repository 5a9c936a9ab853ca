//! The [`Plugin`] trait and its bridge to the generated export.

use std::marker::PhantomData;

use crate::__bindings::exports::commerce::plugin::handler::Guest;
use crate::{
    Customer, Event, EventData, Installation, InventoryChange, Order, OrderRefund, PaidOrder,
    Product, Result,
};

/// A plugin: one method per event type, each defaulting to [`Plugin::on_event`], which accepts the
/// event. Implement the events your manifest subscribes to.
///
/// Every event is handled by a fresh value built with `Default`: nothing survives between events.
#[allow(unused_variables)]
pub trait Plugin: Default {
    /// Any event without a more specific method. The envelope, with the typed
    /// [`Event::data`] and the JSON [`Event::raw_data`], is always there.
    fn on_event(&self, event: &Event) -> Result<()> {
        Ok(())
    }
    /// `order.created`: a draft or live order was first persisted.
    fn on_order_created(&self, event: &Event, order: &Order) -> Result<()> {
        self.on_event(event)
    }
    /// `order.paid`: the payment gateway confirmed payment.
    fn on_order_paid(&self, event: &Event, paid: &PaidOrder) -> Result<()> {
        self.on_event(event)
    }
    /// `order.fulfilled`: every line item has shipped.
    ///
    /// `order` is a summary: ids, buyer, statuses and totals, with `fulfillments` holding only
    /// the fulfilment that completed the order; its line items, tags, note and custom fields are
    /// empty. Read the whole order with `orders::get` when you need them.
    fn on_order_fulfilled(&self, event: &Event, order: &Order) -> Result<()> {
        self.on_event(event)
    }
    /// `order.cancelled`: the order was cancelled.
    fn on_order_cancelled(&self, event: &Event, order: &Order) -> Result<()> {
        self.on_event(event)
    }
    /// `order.refunded`: a partial or full refund was issued.
    ///
    /// `refund.order` is a summary as in [`Plugin::on_order_fulfilled`], with `refunds` holding
    /// only this refund; read the whole order with `orders::get` when you need it.
    fn on_order_refunded(&self, event: &Event, refund: &OrderRefund) -> Result<()> {
        self.on_event(event)
    }
    /// `customer.created`.
    fn on_customer_created(&self, event: &Event, customer: &Customer) -> Result<()> {
        self.on_event(event)
    }
    /// `customer.updated`: the profile changed.
    fn on_customer_updated(&self, event: &Event, customer: &Customer) -> Result<()> {
        self.on_event(event)
    }
    /// `customer.deleted`: the customer with this id was hard-deleted.
    fn on_customer_deleted(&self, event: &Event, customer_id: &str) -> Result<()> {
        self.on_event(event)
    }
    /// `product.created`: a product was published.
    fn on_product_created(&self, event: &Event, product: &Product) -> Result<()> {
        self.on_event(event)
    }
    /// `product.updated`: title, price, variants or media changed.
    fn on_product_updated(&self, event: &Event, product: &Product) -> Result<()> {
        self.on_event(event)
    }
    /// `product.inventory.updated`: stock crossed zero or a low-stock threshold.
    fn on_inventory_updated(&self, event: &Event, change: &InventoryChange) -> Result<()> {
        self.on_event(event)
    }
    /// `plugin.installed`: the merchant installed this plugin.
    fn on_installed(&self, event: &Event, installation: &Installation) -> Result<()> {
        self.on_event(event)
    }
    /// `plugin.configured`: the merchant changed this plugin's settings.
    fn on_configured(&self, event: &Event, installation: &Installation) -> Result<()> {
        self.on_event(event)
    }
    /// `plugin.uninstalled`: the merchant removed this plugin; the last event it gets.
    fn on_uninstalled(&self, event: &Event, installation: &Installation) -> Result<()> {
        self.on_event(event)
    }
}

fn dispatch<P: Plugin>(plugin: &P, event: &Event) -> Result<()> {
    match &event.data {
        EventData::OrderCreated(o) => plugin.on_order_created(event, o),
        EventData::OrderPaid(p) => plugin.on_order_paid(event, p),
        EventData::OrderFulfilled(o) => plugin.on_order_fulfilled(event, o),
        EventData::OrderCancelled(o) => plugin.on_order_cancelled(event, o),
        EventData::OrderRefunded(r) => plugin.on_order_refunded(event, r),
        EventData::CustomerCreated(c) => plugin.on_customer_created(event, c),
        EventData::CustomerUpdated(c) => plugin.on_customer_updated(event, c),
        EventData::CustomerDeleted(id) => plugin.on_customer_deleted(event, id),
        EventData::ProductCreated(p) => plugin.on_product_created(event, p),
        EventData::ProductUpdated(p) => plugin.on_product_updated(event, p),
        EventData::ProductInventoryUpdated(c) => plugin.on_inventory_updated(event, c),
        EventData::PluginInstalled(i) => plugin.on_installed(event, i),
        EventData::PluginConfigured(i) => plugin.on_configured(event, i),
        EventData::PluginUninstalled(i) => plugin.on_uninstalled(event, i),
    }
}

/// Bridges a [`Plugin`] to the generated export; named only by `commerce_plugin!`.
#[doc(hidden)]
pub struct Adapter<P>(PhantomData<P>);

impl<P: Plugin> Guest for Adapter<P> {
    fn handle_event(event: Event) -> std::result::Result<(), String> {
        dispatch(&P::default(), &event).map_err(|e| e.to_string())
    }
}
