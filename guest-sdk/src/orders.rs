//! Orders of the store (scopes `orders.read` and `orders.write`), with the same rules as
//! `/v1/orders`.

use crate::__bindings::commerce::plugin::orders as wit;
use crate::{LineQuantity, Order, OrderStatus, PageRequest, Result};

pub use wit::{
    NewFulfillment, NewLineItem, NewOrder, NewRefund, OrderFilter, OrderPage, OrderPatch,
};

/// Lists orders, newest first (`orders.read`).
pub fn list(filter: &OrderFilter, page: &PageRequest) -> Result<OrderPage> {
    Ok(wit::list(filter, page)?)
}

/// Fetches one order with its line items (`orders.read`).
pub fn get(id: &str) -> Result<Order> {
    Ok(wit::get(id)?)
}

/// Creates a draft or live order; fires `order.created` (`orders.write`).
pub fn create(order: &NewOrder) -> Result<Order> {
    Ok(wit::create(order)?)
}

/// Updates tags, note and custom fields (`orders.write`).
pub fn update(id: &str, patch: &OrderPatch) -> Result<Order> {
    Ok(wit::update(id, patch)?)
}

/// Adds tags to an order, keeping the ones it has (`orders.read` and `orders.write`).
pub fn add_tags(id: &str, tags: &[&str]) -> Result<Order> {
    let order = get(id)?;
    let mut all = order.tags;
    for tag in tags {
        if !all.iter().any(|t| t == tag) {
            all.push((*tag).to_owned());
        }
    }
    update(
        id,
        &OrderPatch {
            tags: Some(all),
            note: None,
            custom_fields: None,
        },
    )
}

/// Marks items shipped (an empty `line_items` ships everything left) (`orders.write`).
pub fn fulfill(id: &str, fulfillment: &NewFulfillment) -> Result<Order> {
    Ok(wit::fulfill(id, fulfillment)?)
}

/// Refunds money or items, never more than was paid (`orders.write`).
pub fn refund(id: &str, refund: &NewRefund) -> Result<Order> {
    Ok(wit::refund(id, refund)?)
}

/// Places a draft (`orders.write`).
pub fn complete(id: &str) -> Result<Order> {
    Ok(wit::complete(id)?)
}

/// Cancels an order with nothing shipped (`orders.write`).
pub fn cancel(id: &str, reason: Option<&str>) -> Result<Order> {
    Ok(wit::cancel(id, reason)?)
}

impl OrderFilter {
    /// No filter: every order.
    pub fn all() -> Self {
        Self {
            status: None,
            financial_status: None,
            fulfillment_status: None,
            customer_id: None,
            created_at_min: None,
            created_at_max: None,
        }
    }

    /// Only orders with `status`.
    pub fn with_status(status: OrderStatus) -> Self {
        Self {
            status: Some(status),
            ..Self::all()
        }
    }
}

impl NewLineItem {
    /// `quantity` of a catalogue variant.
    pub fn variant(variant_id: &str, quantity: i64) -> Self {
        Self {
            variant_id: Some(variant_id.to_owned()),
            title: None,
            unit_price: None,
            quantity,
        }
    }

    /// A custom item with its own title and unit price (minor units).
    pub fn custom(title: &str, unit_price: i64, quantity: i64) -> Self {
        Self {
            variant_id: None,
            title: Some(title.to_owned()),
            unit_price: Some(unit_price),
            quantity,
        }
    }
}

impl LineQuantity {
    /// `quantity` units of a line item.
    pub fn new(line_item_id: &str, quantity: i64) -> Self {
        Self {
            line_item_id: line_item_id.to_owned(),
            quantity,
        }
    }
}
