//! Refunds: money, items, or both; never more than was paid, nor more items than were bought,
//! nor more than [`MAX_REFUNDS`] of them. Each fires `order.refunded`.

use super::lines::{resolve_lines, units_left, validate_line_quantities};
use crate::model::error::{Error, Result};
use crate::model::event::data::OrderRefunded;
use crate::model::ids::{OrderId, RefundId};
use crate::model::money::{MAX_REFUNDS, Money, Quantity};
use crate::model::order::{CreateRefund, LineQuantity, Order, OrderSummary, Refund};
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::validate;

impl Service {
    /// Refunds money or items; never more than was paid, nor more items than were bought, nor
    /// more than [`MAX_REFUNDS`] refunds. Fires `order.refunded` with the order's summary and the
    /// refund.
    pub fn refund_order(
        &self,
        actor: &Actor,
        id: &OrderId,
        input: CreateRefund,
    ) -> Result<(Order, Refund)> {
        validate::opt_text("reason", input.reason.as_deref(), 255)?;
        if input.amount.is_none() && input.line_items.is_empty() {
            return Err(Error::invalid(
                "amount",
                "give an amount, line_items, or both",
            ));
        }
        let asked = input
            .amount
            .map(|amount| Money::positive("amount", amount))
            .transpose()?;
        validate_line_quantities("line_items", &input.line_items)?;
        self.with_order(actor, id, |tx, order, now| {
            let paid = Money::stored("total_paid", order.total_paid)?;
            let refunded = Money::stored("total_refunded", order.total_refunded)?;
            if paid == Money::ZERO {
                return Err(Error::conflict(
                    "not_paid",
                    "the order has not been paid; there is nothing to refund",
                ));
            }
            if order.refunds.len() >= MAX_REFUNDS {
                return Err(Error::conflict(
                    "too_many_refunds",
                    format!("an order has at most {MAX_REFUNDS} refunds; refund the rest in one"),
                ));
            }
            let lines = resolve_lines(order, &input.line_items, "line_items")?;
            let mut items_value = Money::ZERO;
            let mut returned = Vec::with_capacity(lines.len());
            for (k, (idx, qty)) in lines.iter().enumerate() {
                let line = &order.line_items[*idx];
                let done = Quantity::stored("refunded_quantity", line.refunded_quantity)?;
                let left = units_left(line, line.refunded_quantity, "refunded_quantity")?;
                if *qty > left {
                    return Err(Error::Conflict {
                        code: "refund_exceeds_items",
                        message: format!(
                            "line item `{}` has {} unit(s) left to refund; cannot refund {}",
                            line.id,
                            left.units(),
                            qty.units()
                        ),
                        field: Some(format!("line_items[{k}].quantity")),
                    });
                }
                // Neither can fail: `qty ≤ left`, so the value is at most the line's total.
                items_value = Money::stored("unit_price", line.unit_price)?
                    .checked_mul(*qty)
                    .and_then(|value| items_value.checked_add(value))
                    .ok_or_else(|| {
                        Error::invalid(
                            format!("line_items[{k}].quantity"),
                            "the value of the refunded items is out of range",
                        )
                    })?;
                let after = done.checked_add(*qty).ok_or_else(|| {
                    Error::Internal(anyhow::anyhow!("refunded quantity out of range"))
                })?;
                returned.push((*idx, after));
            }
            let amount = asked.unwrap_or(items_value);
            // Only an order damaged before amounts were checked has refunded more than was paid.
            let refundable = paid.checked_sub(refunded).ok_or_else(|| {
                Error::conflict(
                    "amount_out_of_range",
                    "the order has already refunded more than was paid",
                )
            })?;
            if amount > refundable {
                return Err(Error::Conflict {
                    code: "refund_exceeds_paid",
                    message: format!(
                        "at most {} {} can still be refunded; asked for {}",
                        refundable.minor(),
                        order.currency,
                        amount.minor()
                    ),
                    field: Some("amount".into()),
                });
            }
            // Cannot fail: `amount ≤ paid - refunded`.
            let total_refunded = refunded
                .checked_add(amount)
                .ok_or_else(|| Error::Internal(anyhow::anyhow!("total refunded out of range")))?;
            for (idx, after) in &returned {
                order.line_items[*idx].refunded_quantity = after.units();
            }
            let refund = Refund {
                id: RefundId::generate(now),
                amount: amount.minor(),
                line_items: lines
                    .iter()
                    .map(|(idx, qty)| LineQuantity {
                        line_item_id: order.line_items[*idx].id.clone(),
                        quantity: qty.units(),
                    })
                    .collect(),
                reason: input.reason.clone(),
                created_at: now,
            };
            order.total_refunded = total_refunded.minor();
            order.refunds.push(refund.clone());
            order.refresh_statuses();
            order.updated_at = now;
            tx.emit(
                &actor.store,
                OrderRefunded {
                    order: OrderSummary::from(&*order),
                    refund: refund.clone(),
                },
                now,
            )?;
            Ok(refund)
        })
    }
}
