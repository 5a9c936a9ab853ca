//! Orders: the record, its lines, fulfilments and refunds, and the bodies of the order operations.

use crate::model::ids::CustomerId;
use crate::model::ids::FulfillmentId;
use crate::model::ids::LineItemId;
use crate::model::ids::OrderId;
use crate::model::ids::ProductId;
use crate::model::ids::RefundId;
use crate::model::ids::StoreId;
use crate::model::ids::VariantId;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use std::collections::BTreeMap;
use utoipa::IntoParams;
use utoipa::ToSchema;
/// Lifecycle of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    /// Being prepared; takes no stock and cannot be paid or shipped.
    Draft,
    /// Placed.
    Open,
    /// Cancelled.
    Cancelled,
}

/// Payment state of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FinancialStatus {
    /// Not paid yet.
    Pending,
    /// Paid in full.
    Paid,
    /// Some of the payment was refunded.
    PartiallyRefunded,
    /// All of the payment was refunded.
    Refunded,
}

/// Shipping state of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FulfillmentStatus {
    /// Nothing shipped.
    Unfulfilled,
    /// Some items shipped.
    PartiallyFulfilled,
    /// Every item shipped.
    Fulfilled,
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LineItem {
    /// Line item id (`li_…`).
    pub id: LineItemId,
    /// The variant bought, for catalogue items.
    pub variant_id: Option<VariantId>,
    /// The variant's product, for catalogue items.
    pub product_id: Option<ProductId>,
    /// What was bought.
    pub title: String,
    /// The variant's SKU at the time of the order.
    pub sku: Option<String>,
    /// Units ordered.
    pub quantity: i64,
    /// Price of one unit, minor units.
    pub unit_price: i64,
    /// `unit_price × quantity`.
    pub total: i64,
    /// Units shipped so far.
    pub fulfilled_quantity: i64,
    /// Units refunded so far.
    pub refunded_quantity: i64,
}

/// A quantity of one line item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LineQuantity {
    /// The line item.
    pub line_item_id: LineItemId,
    /// Units, 1 to 10 000 (and never more than the line has left to ship or refund).
    pub quantity: i64,
}

/// A shipment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Fulfillment {
    /// Fulfilment id (`ful_…`).
    pub id: FulfillmentId,
    /// What was shipped.
    pub line_items: Vec<LineQuantity>,
    /// Carrier's tracking number.
    pub tracking_number: Option<String>,
    /// Carrier.
    pub carrier: Option<String>,
    /// When it shipped.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

/// A refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Refund {
    /// Refund id (`ref_…`).
    pub id: RefundId,
    /// Money returned, minor units of the order's currency.
    pub amount: i64,
    /// Items refunded (may be empty for a money-only refund).
    pub line_items: Vec<LineQuantity>,
    /// Why.
    pub reason: Option<String>,
    /// When it was issued.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

/// An order with its line items, fulfilments and refunds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Order {
    /// Order id (`ord_…`).
    pub id: OrderId,
    /// Draft, open or cancelled.
    pub status: OrderStatus,
    /// Payment state.
    pub financial_status: FinancialStatus,
    /// Shipping state.
    pub fulfillment_status: FulfillmentStatus,
    /// ISO 4217 code of every amount of the order.
    pub currency: String,
    /// The buyer, when known.
    pub customer_id: Option<CustomerId>,
    /// The buyer's email (copied from the customer when not given). Customer data: null for a
    /// token without `customers.read`.
    pub email: Option<String>,
    /// What was bought.
    pub line_items: Vec<LineItem>,
    /// Sum of line totals, minor units.
    pub subtotal: i64,
    /// What the buyer pays, minor units (equal to the subtotal: no tax or shipping lines yet).
    pub total: i64,
    /// Paid so far.
    pub total_paid: i64,
    /// Refunded so far (never more than `total_paid`).
    pub total_refunded: i64,
    /// Merchant's tags.
    pub tags: Vec<String>,
    /// Merchant's note.
    pub note: Option<String>,
    /// Free-form key/value data for plugins.
    pub custom_fields: BTreeMap<String, String>,
    /// Shipments.
    pub fulfillments: Vec<Fulfillment>,
    /// Refunds.
    pub refunds: Vec<Refund>,
    /// When it was created.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    /// When payment was confirmed.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub paid_at: Option<Timestamp>,
    /// When it was cancelled.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub cancelled_at: Option<Timestamp>,
    /// Why it was cancelled.
    pub cancel_reason: Option<String>,
}

/// Prefix of every order record's key.
pub const ORDER_PREFIX: &str = "order/";

impl Order {
    /// Key of an order record (under [`ORDER_PREFIX`]).
    pub fn key(store: &StoreId, id: &OrderId) -> String {
        format!("{ORDER_PREFIX}{store}/{id}")
    }

    pub fn line_index(&self, id: &LineItemId) -> Option<usize> {
        self.line_items.iter().position(|l| &l.id == id)
    }

    pub fn refresh_statuses(&mut self) {
        let all = self
            .line_items
            .iter()
            .all(|l| l.fulfilled_quantity >= l.quantity);
        let some = self.line_items.iter().any(|l| l.fulfilled_quantity > 0);
        self.fulfillment_status = if all {
            FulfillmentStatus::Fulfilled
        } else if some {
            FulfillmentStatus::PartiallyFulfilled
        } else {
            FulfillmentStatus::Unfulfilled
        };
        if self.total_paid > 0 {
            self.financial_status = if self.total_refunded >= self.total_paid {
                FinancialStatus::Refunded
            } else if self.total_refunded > 0 {
                FinancialStatus::PartiallyRefunded
            } else {
                FinancialStatus::Paid
            };
        }
    }
}

/// What `order.fulfilled` and `order.refunded` carry of the order: its identity, buyer, statuses
/// and totals after the change, without line items, fulfilments or refunds (each event would
/// otherwise copy every earlier refund). The change itself is beside it (`refund`,
/// `fulfillment`); `GET /v1/orders/{id}` has the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OrderSummary {
    /// Order id (`ord_…`).
    pub id: OrderId,
    /// Draft, open or cancelled.
    pub status: OrderStatus,
    /// Payment state.
    pub financial_status: FinancialStatus,
    /// Shipping state.
    pub fulfillment_status: FulfillmentStatus,
    /// ISO 4217 code of every amount of the order.
    pub currency: String,
    /// The buyer, when known.
    pub customer_id: Option<CustomerId>,
    /// The buyer's email.
    pub email: Option<String>,
    /// Sum of line totals, minor units.
    pub subtotal: i64,
    /// What the buyer pays, minor units.
    pub total: i64,
    /// Paid so far.
    pub total_paid: i64,
    /// Refunded so far.
    pub total_refunded: i64,
    /// When it was created.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    /// When payment was confirmed.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub paid_at: Option<Timestamp>,
    /// When it was cancelled.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub cancelled_at: Option<Timestamp>,
}

impl From<&Order> for OrderSummary {
    fn from(o: &Order) -> Self {
        Self {
            id: o.id.clone(),
            status: o.status,
            financial_status: o.financial_status,
            fulfillment_status: o.fulfillment_status,
            currency: o.currency.clone(),
            customer_id: o.customer_id.clone(),
            email: o.email.clone(),
            subtotal: o.subtotal,
            total: o.total,
            total_paid: o.total_paid,
            total_refunded: o.total_refunded,
            created_at: o.created_at,
            updated_at: o.updated_at,
            paid_at: o.paid_at,
            cancelled_at: o.cancelled_at,
        }
    }
}

/// A line in `POST /v1/orders`: a catalogue variant, or a custom item with a title and price.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewLineItem {
    /// A variant of the store (its title and price are used).
    #[serde(default)]
    pub variant_id: Option<VariantId>,
    /// Title of a custom item (required without `variant_id`).
    #[serde(default)]
    pub title: Option<String>,
    /// Unit price of a custom item, 1 to 10¹² minor units (required without `variant_id`).
    #[serde(default)]
    pub unit_price: Option<i64>,
    /// Units, 1 to 10 000.
    pub quantity: i64,
}

/// Body of `POST /v1/orders`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrder {
    /// `draft` or `open` (default `open`: a live order).
    #[serde(default)]
    pub status: Option<OrderStatus>,
    /// ISO 4217 code; variants must be priced in it.
    pub currency: String,
    /// The buyer.
    #[serde(default)]
    pub customer_id: Option<CustomerId>,
    /// The buyer's email.
    #[serde(default)]
    pub email: Option<String>,
    /// 1 to 250 lines.
    pub line_items: Vec<NewLineItem>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Note.
    #[serde(default)]
    pub note: Option<String>,
    /// Custom fields.
    #[serde(default)]
    pub custom_fields: BTreeMap<String, String>,
}

/// Body of `PATCH /v1/orders/{id}`: tags, note and custom fields only.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateOrder {
    /// Replaces the tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Replaces the note (`""` clears it).
    #[serde(default)]
    pub note: Option<String>,
    /// Merged into the custom fields; a `null` value removes the key.
    #[serde(default)]
    pub custom_fields: Option<BTreeMap<String, Option<String>>>,
}

/// Body of `POST /v1/orders/{id}/fulfillments`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateFulfillment {
    /// What ships; when absent, everything not yet shipped.
    #[serde(default)]
    pub line_items: Option<Vec<LineQuantity>>,
    /// Tracking number.
    #[serde(default)]
    pub tracking_number: Option<String>,
    /// Carrier.
    #[serde(default)]
    pub carrier: Option<String>,
}

/// Body of `POST /v1/orders/{id}/refunds`: money, items, or both.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRefund {
    /// Money to return; when absent, the value of `line_items`.
    #[serde(default)]
    pub amount: Option<i64>,
    /// Items refunded.
    #[serde(default)]
    pub line_items: Vec<LineQuantity>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Body of `POST /v1/orders/{id}/cancel`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelOrder {
    /// Why (`customer`, `fraud`, `inventory`, …).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A payment confirmation from the gateway (operator API).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmPayment {
    /// Amount captured, minor units; must be the order's total.
    pub amount: i64,
    /// Currency captured; must be the order's.
    pub currency: String,
}

/// Filters of `GET /v1/orders`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct OrderFilter {
    /// Only orders with this status.
    pub status: Option<OrderStatus>,
    /// Only orders with this payment state.
    pub financial_status: Option<FinancialStatus>,
    /// Only orders with this shipping state.
    pub fulfillment_status: Option<FulfillmentStatus>,
    /// Only orders of this customer.
    pub customer_id: Option<CustomerId>,
    /// Only orders created at or after this time (RFC 3339).
    #[param(format = DateTime)]
    pub created_at_min: Option<String>,
    /// Only orders created before this time (RFC 3339).
    #[param(format = DateTime)]
    pub created_at_max: Option<String>,
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}
