//! Payment: the gateway confirms, through the operator API, that an open order's total was
//! captured; `order.paid` fires.

use super::invalid_transition;
use crate::model::error::{Error, Result};
use crate::model::event::StoreRef;
use crate::model::event::data::{OrderPaid, PaidOrder};
use crate::model::ids::OrderId;
use crate::model::order::{ConfirmPayment, FinancialStatus, Order, OrderStatus};
use crate::service::Service;

impl Service {
    /// The payment gateway confirms payment of an open order (operator API); fires `order.paid`
    /// with `data.order {id, total, currency}`.
    pub fn confirm_payment(
        &self,
        store: &StoreRef,
        id: &OrderId,
        input: &ConfirmPayment,
    ) -> Result<Order> {
        let now = self.now();
        let key = Order::key(&store.id, id);
        self.db.tx(|tx| {
            let mut order: Order = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("order", id))?;
            match (order.status, order.financial_status) {
                (OrderStatus::Draft, _) => {
                    return Err(invalid_transition(
                        "a draft cannot be paid; complete it first",
                    ));
                }
                (OrderStatus::Cancelled, _) => {
                    return Err(Error::conflict(
                        "order_cancelled",
                        "a cancelled order cannot be paid",
                    ));
                }
                (_, FinancialStatus::Pending) => {}
                _ => return Err(invalid_transition("the order is already paid")),
            }
            if input.currency != order.currency {
                return Err(Error::invalid(
                    "currency",
                    format!("the order is in {}", order.currency),
                ));
            }
            if input.amount != order.total {
                return Err(Error::invalid(
                    "amount",
                    format!("the payment must be the order total, {}", order.total),
                ));
            }
            order.total_paid = input.amount;
            order.paid_at = Some(now);
            order.refresh_statuses();
            order.updated_at = now;
            tx.write(&key, &order)?;
            tx.emit(
                store,
                OrderPaid {
                    order: PaidOrder::from(&order),
                },
                now,
            )?;
            Ok(order)
        })
    }
}
