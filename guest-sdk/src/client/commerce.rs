//! The commerce records (orders, products, inventory, customers) and the bodies that create and
//! change them, with the field names of the REST JSON.
//!
//! Records read from the host ignore fields this version does not know, so a newer host can add
//! some; enums have an `Unknown` variant for values added later. Bodies leave out what is `None`,
//! so `..Default::default()` gives the host's defaults. Money is an integer amount in minor units
//! (`1250` = €12.50) beside an ISO 4217 `currency`; timestamps are RFC 3339 strings.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where an order is in its life: `draft` → `open` → `cancelled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OrderStatus {
    /// Not placed yet; takes no stock.
    Draft,
    /// Placed.
    Open,
    /// Cancelled.
    Cancelled,
    /// A status this version of the SDK does not know.
    #[serde(other)]
    Unknown,
}

/// Payment state of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinancialStatus {
    /// Not paid yet.
    Pending,
    /// Paid in full.
    Paid,
    /// Paid, then partly refunded.
    PartiallyRefunded,
    /// Refunded in full.
    Refunded,
    /// A status this version of the SDK does not know.
    #[serde(other)]
    Unknown,
}

/// Shipping state of an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FulfillmentStatus {
    /// Nothing shipped.
    Unfulfilled,
    /// Some items shipped.
    PartiallyFulfilled,
    /// Everything shipped.
    Fulfilled,
    /// A status this version of the SDK does not know.
    #[serde(other)]
    Unknown,
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineItem {
    /// `li_…`.
    pub id: String,
    /// The catalogue variant, for a catalogue item.
    #[serde(default)]
    pub variant_id: Option<String>,
    /// The variant's product, for a catalogue item.
    #[serde(default)]
    pub product_id: Option<String>,
    /// What the customer sees.
    pub title: String,
    /// The variant's SKU, if any.
    #[serde(default)]
    pub sku: Option<String>,
    /// Units ordered.
    pub quantity: i64,
    /// Price of one unit, in minor units.
    pub unit_price: i64,
    /// `unit_price × quantity`.
    pub total: i64,
    /// Units shipped.
    #[serde(default)]
    pub fulfilled_quantity: i64,
    /// Units refunded.
    #[serde(default)]
    pub refunded_quantity: i64,
}

/// A quantity of one line item (in a fulfilment or refund).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineQuantity {
    /// The line item (`li_…`).
    pub line_item_id: String,
    /// How many units.
    pub quantity: i64,
}

/// A shipment of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fulfillment {
    /// `ful_…`.
    pub id: String,
    /// What was shipped.
    pub line_items: Vec<LineQuantity>,
    /// The carrier's tracking number.
    #[serde(default)]
    pub tracking_number: Option<String>,
    /// The carrier.
    #[serde(default)]
    pub carrier: Option<String>,
    /// When it was recorded.
    pub created_at: String,
}

/// A refund of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refund {
    /// `ref_…`.
    pub id: String,
    /// Money given back, in minor units.
    pub amount: i64,
    /// Items refunded.
    #[serde(default)]
    pub line_items: Vec<LineQuantity>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// When it was recorded.
    pub created_at: String,
}

/// An order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// `ord_…`.
    pub id: String,
    /// Draft, open or cancelled.
    pub status: OrderStatus,
    /// Payment state.
    pub financial_status: FinancialStatus,
    /// Shipping state.
    pub fulfillment_status: FulfillmentStatus,
    /// ISO 4217 code of every amount of the order.
    pub currency: String,
    /// The customer, if any.
    #[serde(default)]
    pub customer_id: Option<String>,
    /// The order's own copy of the customer's email.
    #[serde(default)]
    pub email: Option<String>,
    /// What was ordered.
    pub line_items: Vec<LineItem>,
    /// Sum of the line totals.
    pub subtotal: i64,
    /// What the customer pays (the subtotal: no tax or shipping lines yet).
    pub total: i64,
    /// What was paid.
    #[serde(default)]
    pub total_paid: i64,
    /// What was refunded.
    #[serde(default)]
    pub total_refunded: i64,
    /// Free tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// A free note.
    #[serde(default)]
    pub note: Option<String>,
    /// Plugin data.
    #[serde(default)]
    pub custom_fields: BTreeMap<String, String>,
    /// Shipments.
    #[serde(default)]
    pub fulfillments: Vec<Fulfillment>,
    /// Refunds.
    #[serde(default)]
    pub refunds: Vec<Refund>,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was paid.
    #[serde(default)]
    pub paid_at: Option<String>,
    /// When it was cancelled.
    #[serde(default)]
    pub cancelled_at: Option<String>,
    /// Why it was cancelled.
    #[serde(default)]
    pub cancel_reason: Option<String>,
}

/// A line of a new order: a catalogue variant (`variant_id`) or a custom item (`title` and
/// `unit_price`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewLineItem {
    /// The catalogue variant; priced by the variant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant_id: Option<String>,
    /// A custom item's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// A custom item's unit price, in minor units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit_price: Option<i64>,
    /// Units (at least 1).
    pub quantity: i64,
}

impl NewLineItem {
    /// `quantity` units of a catalogue variant.
    pub fn variant(variant_id: impl Into<String>, quantity: i64) -> Self {
        Self {
            variant_id: Some(variant_id.into()),
            quantity,
            ..Self::default()
        }
    }

    /// `quantity` units of a custom item at `unit_price` (minor units).
    pub fn custom(title: impl Into<String>, unit_price: i64, quantity: i64) -> Self {
        Self {
            title: Some(title.into()),
            unit_price: Some(unit_price),
            quantity,
            ..Self::default()
        }
    }
}

/// Body of `POST /v1/orders`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateOrder {
    /// `draft` or `open` (the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<OrderStatus>,
    /// ISO 4217 code.
    pub currency: String,
    /// The customer, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customer_id: Option<String>,
    /// The customer's email, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// At least one line.
    pub line_items: Vec<NewLineItem>,
    /// Free tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A free note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Plugin data.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub custom_fields: BTreeMap<String, String>,
}

/// Body of `PATCH /v1/orders/{id}`: only `tags`, `note` and `custom_fields` change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateOrder {
    /// The new tags, replacing the old ones (send the old ones too to add one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// The new note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Merged into the order's custom fields; `None` removes a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom_fields: Option<BTreeMap<String, Option<String>>>,
}

/// Body of `POST /v1/orders/{id}/fulfillments`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateFulfillment {
    /// What ships; `None` ships everything not shipped yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line_items: Option<Vec<LineQuantity>>,
    /// The carrier's tracking number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracking_number: Option<String>,
    /// The carrier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub carrier: Option<String>,
}

/// Body of `POST /v1/orders/{id}/refunds`: money, items, or both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRefund {
    /// Money to give back, in minor units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<i64>,
    /// Items to refund, valued at their unit price.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub line_items: Vec<LineQuantity>,
    /// Why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Query of `GET /v1/orders`. Every filter is optional; lists are newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OrderFilter {
    /// Only orders in this status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<OrderStatus>,
    /// Only orders in this payment state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub financial_status: Option<FinancialStatus>,
    /// Only orders in this shipping state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fulfillment_status: Option<FulfillmentStatus>,
    /// Only this customer's orders.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub customer_id: Option<String>,
    /// Created at or after (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_min: Option<String>,
    /// Created before (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at_max: Option<String>,
    /// Page size, 1 to 250 (50 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts: a previous page's `next_cursor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Whether a product shows in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProductStatus {
    /// Not published.
    Draft,
    /// Published.
    Active,
    /// Withdrawn.
    Archived,
    /// A status this version of the SDK does not know.
    #[serde(other)]
    Unknown,
}

/// A product image or video.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Media {
    /// Where it is.
    pub url: String,
    /// Alternative text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt: Option<String>,
}

/// A variant of a product (a size, a colour): what an order line buys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// `var_…`.
    pub id: String,
    /// Its product.
    pub product_id: String,
    /// Its title.
    pub title: String,
    /// Its SKU.
    #[serde(default)]
    pub sku: Option<String>,
    /// Price of one unit, in minor units.
    pub price: i64,
    /// ISO 4217 code of the price.
    pub currency: String,
    /// Units in stock.
    pub inventory_quantity: i64,
    /// Stock at or below which it counts as low.
    #[serde(default)]
    pub low_stock_threshold: Option<i64>,
    /// When it was added.
    pub created_at: String,
}

/// A product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Product {
    /// `prod_…`.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its description.
    #[serde(default)]
    pub description: Option<String>,
    /// Draft, active or archived.
    pub status: ProductStatus,
    /// Its vendor.
    #[serde(default)]
    pub vendor: Option<String>,
    /// Free tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Images and videos.
    #[serde(default)]
    pub media: Vec<Media>,
    /// Its variants.
    pub variants: Vec<Variant>,
    /// When it was first published.
    #[serde(default)]
    pub published_at: Option<String>,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
}

/// A new variant (in `POST /v1/products` or `POST /v1/products/{id}/variants`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewVariant {
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its SKU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// Price of one unit, in minor units; must be positive.
    pub price: i64,
    /// ISO 4217 code of the price.
    pub currency: String,
    /// Units in stock at first.
    #[serde(skip_serializing_if = "is_zero")]
    pub inventory_quantity: i64,
    /// Stock at or below which it counts as low.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<i64>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Body of `POST /v1/products`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateProduct {
    /// Its title.
    pub title: String,
    /// Its description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `active` (published) or `draft`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ProductStatus>,
    /// Its vendor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Free tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Images and videos.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub media: Vec<Media>,
    /// At least one variant.
    pub variants: Vec<NewVariant>,
}

/// A change to an existing variant, in [`UpdateProduct::variants`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantPatch {
    /// Which variant.
    pub id: String,
    /// New title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// New SKU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// New price, in minor units.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<i64>,
    /// New low-stock threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_stock_threshold: Option<i64>,
}

/// Body of `PATCH /v1/products/{id}`; what is `None` stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateProduct {
    /// New title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// New description.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// New status (a published product cannot go back to draft).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ProductStatus>,
    /// New vendor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// New tags, replacing the old ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// New media, replacing the old ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<Vec<Media>>,
    /// Changes to existing variants.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variants: Option<Vec<VariantPatch>>,
}

/// Query of `GET /v1/products`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProductFilter {
    /// Only products in this status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<ProductStatus>,
    /// Page size, 1 to 250 (50 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts: a previous page's `next_cursor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// Body of `POST /v1/inventory/adjust`: exactly one of `delta` or `set`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdjustInventory {
    /// The variant.
    pub variant_id: String,
    /// Units to add (negative to remove).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<i64>,
    /// The new stock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub set: Option<i64>,
    /// Why (recorded in the event).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A threshold the stock crossed in an adjustment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThresholdCrossing {
    /// `out_of_stock` or `low_stock`.
    pub threshold: String,
    /// The threshold's value.
    pub value: i64,
    /// `below` or `above`.
    pub direction: String,
}

/// The answer of an inventory adjustment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryLevel {
    /// The product.
    pub product_id: String,
    /// The variant.
    pub variant_id: String,
    /// Stock before.
    pub previous_quantity: i64,
    /// Stock now.
    pub inventory_quantity: i64,
    /// Thresholds crossed.
    #[serde(default)]
    pub crossed: Vec<ThresholdCrossing>,
}

/// A customer's address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Address {
    /// `addr_…`.
    pub id: String,
    /// First line.
    pub line1: String,
    /// Second line.
    #[serde(default)]
    pub line2: Option<String>,
    /// City.
    pub city: String,
    /// Province or state.
    #[serde(default)]
    pub province: Option<String>,
    /// Postal code.
    #[serde(default)]
    pub postal_code: Option<String>,
    /// ISO 3166 country code.
    pub country: String,
    /// The customer's default address.
    #[serde(default)]
    pub default: bool,
}

/// An address in a customer body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressInput {
    /// First line.
    pub line1: String,
    /// Second line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line2: Option<String>,
    /// City.
    pub city: String,
    /// Province or state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub province: Option<String>,
    /// Postal code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub postal_code: Option<String>,
    /// ISO 3166 country code.
    pub country: String,
    /// The customer's default address.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
}

/// A customer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Customer {
    /// `cus_…`.
    pub id: String,
    /// Email (unique in the store, case-insensitively).
    #[serde(default)]
    pub email: Option<String>,
    /// E.164 phone.
    #[serde(default)]
    pub phone: Option<String>,
    /// First name.
    #[serde(default)]
    pub first_name: Option<String>,
    /// Last name.
    #[serde(default)]
    pub last_name: Option<String>,
    /// Consent to marketing.
    #[serde(default)]
    pub accepts_marketing: bool,
    /// Free tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// A free note.
    #[serde(default)]
    pub note: Option<String>,
    /// Addresses.
    #[serde(default)]
    pub addresses: Vec<Address>,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
}

/// Body of `POST /v1/customers`: an email or a phone at least.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateCustomer {
    /// Email.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// E.164 phone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    /// First name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_name: Option<String>,
    /// Last name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_name: Option<String>,
    /// Consent to marketing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub accepts_marketing: bool,
    /// Free tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A free note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<AddressInput>,
}

/// Body of `PATCH /v1/customers/{id}`; what is `None` stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateCustomer {
    /// New email.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// New phone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    /// New first name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_name: Option<String>,
    /// New last name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_name: Option<String>,
    /// New consent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepts_marketing: Option<bool>,
    /// New tags, replacing the old ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// New note.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// New addresses, replacing the old ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<AddressInput>>,
}

/// Query of `GET /v1/customers`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CustomerFilter {
    /// Only the customer with this email.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    /// Page size, 1 to 250 (50 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts: a previous page's `next_cursor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}
