//! Shipping items: never more than each line has left; `order.fulfilled` fires when the last
//! units ship, with the order's summary and the fulfilment that completed it.

use super::invalid_transition;
use super::lines::{resolve_lines, units_left, validate_line_quantities};
use crate::model::error::{Error, Result};
use crate::model::event::data::OrderFulfilled;
use crate::model::ids::{FulfillmentId, OrderId};
use crate::model::money::{MAX_FULFILLMENTS, Quantity};
use crate::model::order::{
    CreateFulfillment, Fulfillment, FulfillmentStatus, LineQuantity, Order, OrderStatus,
    OrderSummary,
};
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::validate;

impl Service {
    /// Ships items; fires `order.fulfilled` when every item has shipped, with the order's
    /// summary and the fulfilment that completed it.
    pub fn fulfill_order(
        &self,
        actor: &Actor,
        id: &OrderId,
        input: CreateFulfillment,
    ) -> Result<(Order, Fulfillment)> {
        validate::opt_text("tracking_number", input.tracking_number.as_deref(), 255)?;
        validate::opt_text("carrier", input.carrier.as_deref(), 255)?;
        if let Some(lines) = &input.line_items {
            if lines.is_empty() {
                return Err(Error::invalid(
                    "line_items",
                    "name at least one line item, or leave it out to ship everything",
                ));
            }
            validate_line_quantities("line_items", lines)?;
        }
        self.with_order(actor, id, |tx, order, now| {
            match order.status {
                OrderStatus::Cancelled => {
                    return Err(Error::conflict(
                        "order_cancelled",
                        "a cancelled order cannot be fulfilled",
                    ));
                }
                OrderStatus::Draft => {
                    return Err(invalid_transition(
                        "a draft cannot be fulfilled; complete it first",
                    ));
                }
                OrderStatus::Open => {}
            }
            let lines: Vec<(usize, Quantity)> = match &input.line_items {
                Some(lines) => resolve_lines(order, lines, "line_items")?,
                None => {
                    let mut all = Vec::new();
                    for (i, line) in order.line_items.iter().enumerate() {
                        let left = units_left(line, line.fulfilled_quantity, "fulfilled_quantity")?;
                        if left > Quantity::ZERO {
                            all.push((i, left));
                        }
                    }
                    all
                }
            };
            if lines.is_empty() {
                return Err(invalid_transition(
                    "every item of the order has already shipped",
                ));
            }
            if order.fulfillments.len() >= MAX_FULFILLMENTS {
                return Err(Error::conflict(
                    "too_many_fulfillments",
                    format!(
                        "an order has at most {MAX_FULFILLMENTS} fulfilments; ship the rest in one"
                    ),
                ));
            }
            let mut shipped = Vec::with_capacity(lines.len());
            for (k, (idx, qty)) in lines.iter().enumerate() {
                let line = &order.line_items[*idx];
                let done = Quantity::stored("fulfilled_quantity", line.fulfilled_quantity)?;
                let left = units_left(line, line.fulfilled_quantity, "fulfilled_quantity")?;
                if *qty > left {
                    return Err(Error::Conflict {
                        code: "over_fulfillment",
                        message: format!(
                            "line item `{}` has {} unit(s) left to ship; cannot ship {}",
                            line.id,
                            left.units(),
                            qty.units()
                        ),
                        field: Some(format!("line_items[{k}].quantity")),
                    });
                }
                // Cannot fail: `qty ≤ left` keeps the sum at or below the line's quantity.
                let after = done.checked_add(*qty).ok_or_else(|| {
                    Error::Internal(anyhow::anyhow!("fulfilled quantity out of range"))
                })?;
                shipped.push((*idx, after));
            }
            let was_fulfilled = order.fulfillment_status == FulfillmentStatus::Fulfilled;
            for (idx, after) in &shipped {
                order.line_items[*idx].fulfilled_quantity = after.units();
            }
            let fulfillment = Fulfillment {
                id: FulfillmentId::generate(now),
                line_items: lines
                    .iter()
                    .map(|(idx, qty)| LineQuantity {
                        line_item_id: order.line_items[*idx].id.clone(),
                        quantity: qty.units(),
                    })
                    .collect(),
                tracking_number: input.tracking_number.clone(),
                carrier: input.carrier.clone(),
                created_at: now,
            };
            order.fulfillments.push(fulfillment.clone());
            order.refresh_statuses();
            order.updated_at = now;
            if !was_fulfilled && order.fulfillment_status == FulfillmentStatus::Fulfilled {
                tx.emit(
                    &actor.store,
                    OrderFulfilled {
                        order: OrderSummary::from(&*order),
                        fulfillment: Some(fulfillment.clone()),
                    },
                    now,
                )?;
            }
            Ok(fulfillment)
        })
    }
}
