//! Orders: line items, payment, fulfilments, refunds, cancellation.
//!
//! Three statuses, as Shopify's users know them:
//! - `status`: `draft` → `open` (`POST /v1/orders/{id}/complete`) → `cancelled`
//!   (`POST /v1/orders/{id}/cancel`; a draft or an open order with nothing shipped);
//! - `financial_status`: `pending` → `paid` (the payment gateway confirms, through the operator
//!   API) → `partially_refunded` → `refunded`;
//! - `fulfillment_status`: `unfulfilled` → `partially_fulfilled` → `fulfilled`.
//!
//! A live (`open`) order takes its variants' stock when it is placed (or when a draft is
//! completed); cancelling gives back what was not shipped. Refunds never exceed what was paid, and
//! shipments never exceed what was ordered. Illegal transitions are 409 with a code.
//!
//! Every sum of money or units goes through [`Money`] and [`Quantity`] (checked, bounded); a
//! request names each line item at most once; an order keeps at most [`MAX_REFUNDS`] refunds and
//! [`MAX_FULFILLMENTS`] fulfilments, and `order.refunded` / `order.fulfilled` carry an
//! [`OrderSummary`], not the whole order, so neither the record nor its events grow without bound.
//! The buyer's email is customer data: it is shown only to an actor holding `customers.read`.

use crate::model::order::CancelOrder;
use crate::model::order::ConfirmPayment;
use crate::model::order::CreateFulfillment;
use crate::model::order::CreateOrder;
use crate::model::order::CreateRefund;
use crate::model::order::FinancialStatus;
use crate::model::order::Fulfillment;
use crate::model::order::FulfillmentStatus;
use crate::model::order::LineItem;
use crate::model::order::LineQuantity;
use crate::model::order::Order;
use crate::model::order::OrderFilter;
use crate::model::order::OrderStatus;
use crate::model::order::OrderSummary;
use crate::model::order::Refund;
use crate::model::order::UpdateOrder;
use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::json;

use super::Service;
use crate::model::customer::Customer;
use crate::model::error::{Error, Result};
use crate::model::event::StoreRef;
use crate::model::ids::{
    FulfillmentId, LineItemId, OrderId, ProductId, RefundId, StoreId, VariantId,
};
use crate::model::money::{MAX_FULFILLMENTS, MAX_REFUNDS, Money, Quantity};
use crate::model::product::StockChange;
use crate::model::scopes::{EventType, Scope};
use crate::service::auth::Actor;
use crate::service::pagination::{Listing, Page, PageRequest};
use crate::service::validate;
use crate::storage::Tx;

fn parse_time(field: &str, value: Option<&str>) -> Result<Option<Timestamp>> {
    value
        .map(|v| {
            v.parse::<Timestamp>().map_err(|_| {
                Error::invalid(
                    field,
                    format!("`{v}` is not an RFC 3339 time such as `2026-01-31T12:00:00Z`"),
                )
            })
        })
        .transpose()
}

fn invalid_transition(message: impl Into<String>) -> Error {
    Error::conflict("invalid_transition", message)
}

fn order_data(order: &Order) -> serde_json::Value {
    json!({ "order": order })
}

/// Checks the line quantities of a fulfilment or refund before the order is read: at most 250
/// entries (an order has no more lines), each line item named once, each quantity within
/// `1..=MAX_LINE_QUANTITY`. Naming a line twice is refused rather than merged: a merge is a sum of
/// untrusted numbers, and it is what let `i64::MAX` twice wrap to a small number.
fn validate_line_quantities(field: &str, lines: &[LineQuantity]) -> Result<()> {
    if lines.len() > 250 {
        return Err(Error::invalid(
            field,
            "at most 250 entries, one per line item of the order",
        ));
    }
    let mut seen = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(first) = seen.insert(&line.line_item_id, i) {
            return Err(Error::invalid(
                format!("{field}[{i}].line_item_id"),
                format!(
                    "line item `{}` is already in {field}[{first}]; name each line item once",
                    line.line_item_id
                ),
            ));
        }
    }
    for (i, line) in lines.iter().enumerate() {
        Quantity::line(&format!("{field}[{i}].quantity"), line.quantity)?;
    }
    Ok(())
}

/// Resolves checked line quantities against an order: (index into its lines, units).
fn resolve_lines(
    order: &Order,
    lines: &[LineQuantity],
    field: &str,
) -> Result<Vec<(usize, Quantity)>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let idx = order.line_index(&line.line_item_id).ok_or_else(|| {
                Error::invalid(
                    format!("{field}[{i}].line_item_id"),
                    format!("order has no line item `{}`", line.line_item_id),
                )
            })?;
            Ok((
                idx,
                Quantity::line(&format!("{field}[{i}].quantity"), line.quantity)?,
            ))
        })
        .collect()
}

/// What is left of `line` after `done` units (shipped or refunded). Only an order damaged
/// before quantities were checked can have done more than it has (409 `quantity_out_of_range`).
fn units_left(line: &LineItem, done: i64, what: &str) -> Result<Quantity> {
    let ordered = Quantity::stored("line_items.quantity", line.quantity)?;
    let done = Quantity::stored(what, done)?;
    ordered.checked_sub(done).ok_or_else(|| {
        Error::conflict(
            "quantity_out_of_range",
            format!(
                "line item `{}` has {what} {} above its quantity {}",
                line.id,
                done.units(),
                line.quantity
            ),
        )
    })
}

impl Service {
    /// Creates a draft or live order; fires `order.created`. A live order takes stock.
    pub fn create_order(&self, actor: &Actor, input: CreateOrder) -> Result<Order> {
        actor.require(Scope::OrdersWrite)?;
        validate::currency("currency", &input.currency)?;
        if let Some(email) = &input.email {
            validate::email("email", email)?;
        }
        validate::tags("tags", &input.tags)?;
        validate::opt_text("note", input.note.as_deref(), 5000)?;
        validate::custom_fields("custom_fields", &input.custom_fields)?;
        if input.line_items.is_empty() || input.line_items.len() > 250 {
            return Err(Error::invalid(
                "line_items",
                "an order has 1 to 250 line items",
            ));
        }
        for (i, line) in input.line_items.iter().enumerate() {
            let f = |name: &str| format!("line_items[{i}].{name}");
            Quantity::line(&f("quantity"), line.quantity)?;
            if line.variant_id.is_none() {
                let title = line.title.as_deref().ok_or_else(|| {
                    Error::invalid(
                        f("title"),
                        "a custom line item needs a title (or give a variant_id)",
                    )
                })?;
                validate::text(&f("title"), title, 1, 255)?;
                let price = line.unit_price.ok_or_else(|| {
                    Error::invalid(
                        f("unit_price"),
                        "a custom line item needs a unit_price (or give a variant_id)",
                    )
                })?;
                validate::positive_amount(&f("unit_price"), price)?;
            } else if line.title.is_some() || line.unit_price.is_some() {
                return Err(Error::invalid(
                    f("variant_id"),
                    "give either a variant_id or a custom title and unit_price, not both",
                ));
            }
        }
        let status = input.status.unwrap_or(OrderStatus::Open);
        if status == OrderStatus::Cancelled {
            return Err(Error::invalid("status", "a new order is `draft` or `open`"));
        }
        let now = self.now();
        let store = actor.store_id();
        self.db.tx(|tx| {
            let mut email = input.email.clone();
            if let Some(customer_id) = &input.customer_id {
                let customer: Customer =
                    tx.read(&Customer::key(store, customer_id))?
                        .ok_or_else(|| {
                            Error::invalid(
                                "customer_id",
                                format!("no customer `{customer_id}` in this store"),
                            )
                        })?;
                if email.is_none() {
                    email = customer.email;
                }
            }
            let mut lines = Vec::with_capacity(input.line_items.len());
            for (i, line) in input.line_items.iter().enumerate() {
                let (variant_id, product_id, title, sku, unit_price) = match &line.variant_id {
                    Some(variant_id) => {
                        let (variant, product_title) = self.find_variant(
                            tx,
                            store,
                            variant_id,
                            &format!("line_items[{i}].variant_id"),
                        )?;
                        if variant.currency != input.currency {
                            return Err(Error::invalid(
                                format!("line_items[{i}].variant_id"),
                                format!(
                                    "the variant is priced in {}, the order in {}",
                                    variant.currency, input.currency
                                ),
                            ));
                        }
                        let title = if variant.title == "Default" {
                            product_title
                        } else {
                            format!("{product_title} - {}", variant.title)
                        };
                        (
                            Some(variant.id),
                            Some(variant.product_id),
                            title,
                            variant.sku,
                            variant.price,
                        )
                    }
                    None => (
                        None,
                        None,
                        line.title.clone().unwrap_or_default(),
                        None,
                        line.unit_price.unwrap_or_default(),
                    ),
                };
                let units = Quantity::line(&format!("line_items[{i}].quantity"), line.quantity)?;
                // A variant priced before prices were bounded may be above the maximum.
                let price = Money::new(unit_price).ok_or_else(|| {
                    Error::invalid(
                        format!("line_items[{i}].variant_id"),
                        format!(
                            "the variant's price ({unit_price}) is above {} minor units; change it first",
                            crate::model::money::MAX_AMOUNT
                        ),
                    )
                })?;
                let total = price
                    .checked_mul(units)
                    .ok_or_else(|| {
                        Error::invalid(
                            format!("line_items[{i}].quantity"),
                            format!(
                                "the line total ({unit_price} × {}) would exceed {} minor units",
                                line.quantity,
                                crate::model::money::MAX_AMOUNT
                            ),
                        )
                    })?;
                lines.push(LineItem {
                    id: LineItemId::generate(now),
                    variant_id,
                    product_id,
                    title,
                    sku,
                    quantity: line.quantity,
                    unit_price,
                    total: total.minor(),
                    fulfilled_quantity: 0,
                    refunded_quantity: 0,
                });
            }
            let subtotal = Money::sum(lines.iter().filter_map(|l| Money::new(l.total)))
                .ok_or_else(|| {
                    Error::invalid(
                        "line_items",
                        format!(
                            "the order total would exceed {} minor units",
                            crate::model::money::MAX_AMOUNT
                        ),
                    )
                })?
                .minor();
            let order = Order {
                id: OrderId::generate(now),
                status,
                financial_status: FinancialStatus::Pending,
                fulfillment_status: FulfillmentStatus::Unfulfilled,
                currency: input.currency.clone(),
                customer_id: input.customer_id.clone(),
                email,
                line_items: lines,
                subtotal,
                total: subtotal,
                total_paid: 0,
                total_refunded: 0,
                tags: input.tags.clone(),
                note: input.note.clone(),
                custom_fields: input.custom_fields.clone(),
                fulfillments: Vec::new(),
                refunds: Vec::new(),
                created_at: now,
                updated_at: now,
                paid_at: None,
                cancelled_at: None,
                cancel_reason: None,
            };
            if status == OrderStatus::Open {
                self.take_stock(tx, actor, &order, now)?;
            }
            tx.write(&Order::key(store, &order.id), &order)?;
            tx.emit(
                &actor.store,
                EventType::OrderCreated,
                order_data(&order),
                now,
            )?;
            Ok(order.clone().for_actor(actor))
        })
    }

    fn find_variant(
        &self,
        tx: &mut Tx<'_>,
        store: &StoreId,
        id: &VariantId,
        field: &str,
    ) -> Result<(crate::model::product::Variant, String)> {
        let missing = || Error::invalid(field, format!("no variant `{id}` in this store"));
        let product_id: ProductId = tx
            .read(&format!("variant/{store}/{id}"))?
            .ok_or_else(missing)?;
        let product: crate::model::product::Product = tx
            .read(&crate::model::product::Product::key(store, &product_id))?
            .ok_or_else(missing)?;
        let variant = product.variant(id).cloned().ok_or_else(missing)?;
        Ok((variant, product.title))
    }

    fn take_stock(
        &self,
        tx: &mut Tx<'_>,
        actor: &Actor,
        order: &Order,
        now: Timestamp,
    ) -> Result<()> {
        for (i, line) in order.line_items.iter().enumerate() {
            if let Some(variant) = &line.variant_id {
                self.apply_stock(
                    tx,
                    actor,
                    variant,
                    StockChange::Delta(-line.quantity),
                    &format!("line_items[{i}].quantity"),
                    Some("order"),
                    now,
                )?;
            }
        }
        Ok(())
    }

    /// An order of the actor's store, with line items.
    pub fn order(&self, actor: &Actor, id: &OrderId) -> Result<Order> {
        actor.require(Scope::OrdersRead)?;
        self.db
            .read::<Order>(&Order::key(actor.store_id(), id))?
            .map(|o| o.for_actor(actor))
            .ok_or_else(|| Error::not_found("order", id))
    }

    /// Orders, newest first, filtered.
    pub fn list_orders(
        &self,
        actor: &Actor,
        filter: &OrderFilter,
        page: &PageRequest,
    ) -> Result<Page<Order>> {
        actor.require(Scope::OrdersRead)?;
        let min = parse_time("created_at_min", filter.created_at_min.as_deref())?;
        let max = parse_time("created_at_max", filter.created_at_max.as_deref())?;
        let prefix = format!("order/{}/", actor.store_id());
        let list_id = format!(
            "{prefix}?{:?}/{:?}/{:?}/{:?}/{min:?}/{max:?}",
            filter.status, filter.financial_status, filter.fulfillment_status, filter.customer_id
        );
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |o: &Order| {
            filter.status.is_none_or(|s| o.status == s)
                && filter
                    .financial_status
                    .is_none_or(|s| o.financial_status == s)
                && filter
                    .fulfillment_status
                    .is_none_or(|s| o.fulfillment_status == s)
                && filter
                    .customer_id
                    .as_ref()
                    .is_none_or(|c| o.customer_id.as_ref() == Some(c))
                && min.is_none_or(|m| o.created_at >= m)
                && max.is_none_or(|m| o.created_at < m)
        })
        .map(|page| page.map(|o| o.for_actor(actor)))
    }

    /// Runs `change` on an order in one transaction and writes it back; returns the order as the
    /// actor may see it.
    fn with_order<R>(
        &self,
        actor: &Actor,
        id: &OrderId,
        mut change: impl FnMut(&mut Tx<'_>, &mut Order, Timestamp) -> Result<R>,
    ) -> Result<(Order, R)> {
        actor.require(Scope::OrdersWrite)?;
        let now = self.now();
        let key = Order::key(actor.store_id(), id);
        self.db
            .tx(|tx| {
                let mut order: Order = tx
                    .read(&key)?
                    .ok_or_else(|| Error::not_found("order", id))?;
                let out = change(tx, &mut order, now)?;
                tx.write(&key, &order)?;
                Ok((order, out))
            })
            .map(|(order, out)| (order.for_actor(actor), out))
    }

    /// Updates tags, note and custom fields. Fires no event (none is defined for it).
    pub fn update_order(&self, actor: &Actor, id: &OrderId, patch: UpdateOrder) -> Result<Order> {
        if let Some(tags) = &patch.tags {
            validate::tags("tags", tags)?;
        }
        validate::opt_text("note", patch.note.as_deref(), 5000)?;
        self.with_order(actor, id, |_, order, now| {
            if let Some(tags) = &patch.tags {
                order.tags.clone_from(tags);
            }
            if let Some(note) = &patch.note {
                order.note = (!note.is_empty()).then(|| note.clone());
            }
            if let Some(fields) = &patch.custom_fields {
                for (key, value) in fields {
                    match value {
                        Some(v) => order.custom_fields.insert(key.clone(), v.clone()),
                        None => order.custom_fields.remove(key),
                    };
                }
                validate::custom_fields("custom_fields", &order.custom_fields)?;
            }
            order.updated_at = now;
            Ok(())
        })
        .map(|(order, ())| order)
    }

    /// Places a draft: it becomes `open` and takes stock.
    pub fn complete_order(&self, actor: &Actor, id: &OrderId) -> Result<Order> {
        self.with_order(actor, id, |tx, order, now| {
            if order.status != OrderStatus::Draft {
                return Err(invalid_transition(
                    format!(
                        "only a draft can be completed; this order is {:?}",
                        order.status
                    )
                    .to_lowercase(),
                ));
            }
            order.status = OrderStatus::Open;
            order.updated_at = now;
            self.take_stock(tx, actor, order, now)
        })
        .map(|(order, ())| order)
    }

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
                            actor,
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
                EventType::OrderCancelled,
                order_data(order),
                now,
            )?;
            Ok(())
        })
        .map(|(order, ())| order)
    }

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
                    EventType::OrderFulfilled,
                    json!({ "order": OrderSummary::from(&*order), "fulfillment": &fulfillment }),
                    now,
                )?;
            }
            Ok(fulfillment)
        })
    }

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
                EventType::OrderRefunded,
                json!({ "order": OrderSummary::from(&*order), "refund": &refund }),
                now,
            )?;
            Ok(refund)
        })
    }

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
            let mut order: Order = tx.read(&key)?.ok_or_else(|| Error::not_found("order", id))?;
            match (order.status, order.financial_status) {
                (OrderStatus::Draft, _) => return Err(invalid_transition("a draft cannot be paid; complete it first")),
                (OrderStatus::Cancelled, _) => return Err(Error::conflict("order_cancelled", "a cancelled order cannot be paid")),
                (_, FinancialStatus::Pending) => {}
                _ => return Err(invalid_transition("the order is already paid")),
            }
            if input.currency != order.currency {
                return Err(Error::invalid("currency", format!("the order is in {}", order.currency)));
            }
            if input.amount != order.total {
                return Err(Error::invalid("amount", format!("the payment must be the order total, {}", order.total)));
            }
            order.total_paid = input.amount;
            order.paid_at = Some(now);
            order.refresh_statuses();
            order.updated_at = now;
            tx.write(&key, &order)?;
            tx.emit(
                store,
                EventType::OrderPaid,
                json!({ "order": { "id": &order.id, "total": order.total, "currency": &order.currency } }),
                now,
            )?;
            Ok(order)
        })
    }
}

/// What a caller may see of a order: a rule of the service layer, next to the scopes it reads.
impl Order {
    /// The order as `actor` may see it: the buyer's email is customer data, shown only with
    /// `customers.read` (an `orders.write` token must not read a customer's email by attaching
    /// the customer to a draft).
    pub fn for_actor(mut self, actor: &Actor) -> Order {
        if !actor.scopes.contains(&Scope::CustomersRead) {
            self.email = None;
        }
        self
    }
}
