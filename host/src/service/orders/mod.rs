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
//! request names each line item at most once; an order keeps at most [`MAX_REFUNDS`](crate::model::money::MAX_REFUNDS) refunds and
//! [`MAX_FULFILLMENTS`](crate::model::money::MAX_FULFILLMENTS) fulfilments, and `order.refunded` / `order.fulfilled` carry an
//! [`OrderSummary`](crate::model::order::OrderSummary), not the whole order, so neither the record nor its events grow without bound.
//! The buyer's email is customer data: it is shown only to an actor holding `customers.read`.
//!
//! This module creates, reads, lists and changes orders; each further step of an order's life
//! has its own: [`payment`], [`fulfilment`], [`refund`], [`cancel`], and [`lines`] for the line
//! quantities fulfilments and refunds name.

mod cancel;
mod fulfilment;
mod lines;
mod payment;
mod refund;

use crate::model::order::CreateOrder;
use crate::model::order::FinancialStatus;
use crate::model::order::FulfillmentStatus;
use crate::model::order::LineItem;
use crate::model::order::Order;
use crate::model::order::OrderFilter;
use crate::model::order::OrderStatus;
use crate::model::order::UpdateOrder;

use jiff::Timestamp;

use super::Service;
use crate::model::customer::Customer;
use crate::model::error::{Error, Result};
use crate::model::event::data::OrderCreated;
use crate::model::ids::{LineItemId, OrderId, ProductId, StoreId, VariantId};
use crate::model::money::{Money, Quantity};
use crate::model::product::StockChange;
use crate::model::scopes::Scope;
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
                OrderCreated {
                    order: order.clone(),
                },
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
                    &actor.store,
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

    /// An order of `store`, whole, for its owner's and staff's pages (the caller has checked
    /// the account's membership).
    pub fn store_order(&self, store: &StoreId, id: &OrderId) -> Result<Order> {
        self.db
            .read::<Order>(&Order::key(store, id))?
            .ok_or_else(|| Error::not_found("order", id))
    }

    /// [`Service::order`] as the JSON `GET /v1/orders/{id}` answers, kept for the next request
    /// while no order changes (see [`answers`](super::answers)).
    pub fn order_answer(&self, actor: &Actor, id: &OrderId) -> Result<super::answers::Answer> {
        actor.require(Scope::OrdersRead)?;
        // What the answer depends on besides the record: whether the caller sees the customer's
        // email (`Order::for_actor`).
        let view = if actor.scopes.contains(&Scope::CustomersRead) {
            "#customer"
        } else {
            "#no-customer"
        };
        let key = Order::key(actor.store_id(), id);
        self.record_answer(&self.answers.orders, key, view, |o: Order| {
            o.for_actor(actor)
        })?
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
}

/// What a caller may see of a order: a rule of the service layer, next to the scopes it reads.
impl Order {
    /// The order as `actor` may see it: the buyer's email is customer data, shown only with
    /// `customers.read` (an `orders.write` token must not read a customer's email by attaching
    /// the customer to a draft). [`Service::order_answer`] keeps an answer for each view this
    /// makes (by `customers.read`): what else this comes to depend on, its key must name too.
    pub fn for_actor(mut self, actor: &Actor) -> Order {
        if !actor.scopes.contains(&Scope::CustomersRead) {
            self.email = None;
        }
        self
    }
}
