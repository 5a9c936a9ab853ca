//! Cancelling an order: a draft, or an open order with nothing shipped. Unshipped stock goes
//! back; money is returned with refunds, not here.

use super::invalid_transition;
use crate::model::error::Result;
use crate::model::event::data::OrderCancelled;
use crate::model::ids::OrderId;
use crate::model::order::{CancelOrder, FulfillmentStatus, Order, OrderStatus};
use crate::model::product::StockChange;
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::validate;

impl Service {
    /// Cancels a draft or an open order with nothing shipped; gives back unshipped stock and
    /// fires `order.cancelled`. Money is returned with refunds, not here.
    pub fn cancel_order(&self, actor: &Actor, id: &OrderId, input: CancelOrder) -> Result<Order> {
        validate::opt_text("reason", input.reason.as_deref(), 255)?;
        self.with_order(actor, id, |tx, order, now| {
            if order.status == OrderStatus::Cancelled {
                return Err(invalid_transition("the order is already cancelled"));
            }
            if order.fulfillment_status != FulfillmentStatus::Unfulfilled {
                return Err(invalid_transition(
                    "an order with shipped items cannot be cancelled",
                ));
            }
            if order.status == OrderStatus::Open {
                for line in &order.line_items {
                    if let Some(variant) = &line.variant_id {
                        // A variant deleted since would fail the whole cancel; none can be deleted today.
                        self.apply_stock(
                            tx,
                            &actor.store,
                            variant,
                            StockChange::Delta(line.quantity),
                            "line_items",
                            Some("order_cancelled"),
                            now,
                        )?;
                    }
                }
            }
            order.status = OrderStatus::Cancelled;
            order.cancelled_at = Some(now);
            order.cancel_reason.clone_from(&input.reason);
            order.updated_at = now;
            tx.emit(
                &actor.store,
                OrderCancelled {
                    order: order.clone(),
                },
                now,
            )?;
            Ok(())
        })
        .map(|(order, ())| order)
    }
}
