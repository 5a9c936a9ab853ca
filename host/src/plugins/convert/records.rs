//! Records: orders, products, stock levels and customers to their WIT records, and the WIT
//! inputs of the host calls to the service layer's request bodies. The WIT records have the same
//! fields as the REST JSON, so these are one-to-one.

use std::collections::BTreeMap;

use crate::model::clock::format_ts;
use crate::model::customer::{Address, AddressInput, CreateCustomer, Customer, UpdateCustomer};
use crate::model::error::Error;
use crate::model::order::{
    CreateFulfillment, CreateOrder, CreateRefund, FinancialStatus, Fulfillment, FulfillmentStatus,
    LineItem, LineQuantity, NewLineItem, Order, OrderStatus, OrderSummary, Refund, UpdateOrder,
};
use crate::model::product::{
    CreateProduct, InventoryLevel, Media, NewVariant, Product, ProductStatus, UpdateProduct,
    Variant, VariantPatch,
};
use crate::plugins::bindings::commerce::plugin::{
    customers as wc, inventory as wi, orders as wo, products as wp, types as wt,
};

fn opt_ts(ts: Option<jiff::Timestamp>) -> Option<String> {
    ts.map(format_ts)
}

/// Order status to WIT.
pub fn order_status(s: OrderStatus) -> wt::OrderStatus {
    match s {
        OrderStatus::Draft => wt::OrderStatus::Draft,
        OrderStatus::Open => wt::OrderStatus::Open,
        OrderStatus::Cancelled => wt::OrderStatus::Cancelled,
    }
}

/// Order status from WIT.
pub fn order_status_in(s: wt::OrderStatus) -> OrderStatus {
    match s {
        wt::OrderStatus::Draft => OrderStatus::Draft,
        wt::OrderStatus::Open => OrderStatus::Open,
        wt::OrderStatus::Cancelled => OrderStatus::Cancelled,
    }
}

/// Financial status from WIT.
pub fn financial_status_in(s: wt::FinancialStatus) -> FinancialStatus {
    match s {
        wt::FinancialStatus::Pending => FinancialStatus::Pending,
        wt::FinancialStatus::Paid => FinancialStatus::Paid,
        wt::FinancialStatus::PartiallyRefunded => FinancialStatus::PartiallyRefunded,
        wt::FinancialStatus::Refunded => FinancialStatus::Refunded,
    }
}

/// Fulfilment status from WIT.
pub fn fulfillment_status_in(s: wt::FulfillmentStatus) -> FulfillmentStatus {
    match s {
        wt::FulfillmentStatus::Unfulfilled => FulfillmentStatus::Unfulfilled,
        wt::FulfillmentStatus::PartiallyFulfilled => FulfillmentStatus::PartiallyFulfilled,
        wt::FulfillmentStatus::Fulfilled => FulfillmentStatus::Fulfilled,
    }
}

fn line_quantity(l: LineQuantity) -> wt::LineQuantity {
    wt::LineQuantity {
        line_item_id: l.line_item_id.to_string(),
        quantity: l.quantity,
    }
}

fn line_quantities_in(
    lines: Vec<wt::LineQuantity>,
    field: &str,
) -> Result<Vec<LineQuantity>, Error> {
    lines
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            Ok(LineQuantity {
                line_item_id: l.line_item_id.parse().map_err(|_| {
                    Error::invalid(format!("{field}[{i}].line_item_id"), "not a line item id")
                })?,
                quantity: l.quantity,
            })
        })
        .collect()
}

fn parse_id<T: std::str::FromStr>(field: &str, raw: Option<String>) -> Result<Option<T>, Error> {
    raw.map(|r| {
        r.parse()
            .map_err(|_| Error::invalid(field, format!("`{r}` is not an id of the right kind")))
    })
    .transpose()
}

fn line_item(l: LineItem) -> wt::LineItem {
    wt::LineItem {
        id: l.id.to_string(),
        variant_id: l.variant_id.map(|v| v.to_string()),
        product_id: l.product_id.map(|v| v.to_string()),
        title: l.title,
        sku: l.sku,
        quantity: l.quantity,
        unit_price: l.unit_price,
        total: l.total,
        fulfilled_quantity: l.fulfilled_quantity,
        refunded_quantity: l.refunded_quantity,
    }
}

fn fulfillment(f: Fulfillment) -> wt::Fulfillment {
    wt::Fulfillment {
        id: f.id.to_string(),
        line_items: f.line_items.into_iter().map(line_quantity).collect(),
        tracking_number: f.tracking_number,
        carrier: f.carrier,
        created_at: format_ts(f.created_at),
    }
}

/// A refund to WIT.
pub fn refund(r: Refund) -> wt::Refund {
    wt::Refund {
        id: r.id.to_string(),
        amount: r.amount,
        line_items: r.line_items.into_iter().map(line_quantity).collect(),
        reason: r.reason,
        created_at: format_ts(r.created_at),
    }
}

/// An order to WIT.
pub fn order(o: Order) -> wt::Order {
    wt::Order {
        id: o.id.to_string(),
        status: order_status(o.status),
        financial_status: match o.financial_status {
            FinancialStatus::Pending => wt::FinancialStatus::Pending,
            FinancialStatus::Paid => wt::FinancialStatus::Paid,
            FinancialStatus::PartiallyRefunded => wt::FinancialStatus::PartiallyRefunded,
            FinancialStatus::Refunded => wt::FinancialStatus::Refunded,
        },
        fulfillment_status: match o.fulfillment_status {
            FulfillmentStatus::Unfulfilled => wt::FulfillmentStatus::Unfulfilled,
            FulfillmentStatus::PartiallyFulfilled => wt::FulfillmentStatus::PartiallyFulfilled,
            FulfillmentStatus::Fulfilled => wt::FulfillmentStatus::Fulfilled,
        },
        currency: o.currency,
        customer_id: o.customer_id.map(|c| c.to_string()),
        email: o.email,
        line_items: o.line_items.into_iter().map(line_item).collect(),
        subtotal: o.subtotal,
        total: o.total,
        total_paid: o.total_paid,
        total_refunded: o.total_refunded,
        tags: o.tags,
        note: o.note,
        custom_fields: o
            .custom_fields
            .into_iter()
            .map(|(key, value)| wt::CustomField { key, value })
            .collect(),
        fulfillments: o.fulfillments.into_iter().map(fulfillment).collect(),
        refunds: o.refunds.into_iter().map(refund).collect(),
        created_at: format_ts(o.created_at),
        updated_at: format_ts(o.updated_at),
        paid_at: opt_ts(o.paid_at),
        cancelled_at: opt_ts(o.cancelled_at),
        cancel_reason: o.cancel_reason,
    }
}

/// The order of `order.fulfilled` / `order.refunded`, from its summary: the WIT record is the
/// full `order`, so the lists the summary leaves out hold only what the event is about (the
/// fulfilment or refund); line items, tags, note and custom fields are empty.
pub(super) fn summary_order(
    s: OrderSummary,
    fulfillments: Vec<Fulfillment>,
    refunds: Vec<Refund>,
) -> wt::Order {
    order(Order {
        id: s.id,
        status: s.status,
        financial_status: s.financial_status,
        fulfillment_status: s.fulfillment_status,
        currency: s.currency,
        customer_id: s.customer_id,
        email: s.email,
        line_items: Vec::new(),
        subtotal: s.subtotal,
        total: s.total,
        total_paid: s.total_paid,
        total_refunded: s.total_refunded,
        tags: Vec::new(),
        note: None,
        custom_fields: Default::default(),
        fulfillments,
        refunds,
        created_at: s.created_at,
        updated_at: s.updated_at,
        paid_at: s.paid_at,
        cancelled_at: s.cancelled_at,
        cancel_reason: None,
    })
}

/// A new order from WIT.
pub fn new_order(o: wo::NewOrder) -> Result<CreateOrder, Error> {
    let line_items = o
        .line_items
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            Ok(NewLineItem {
                variant_id: parse_id(&format!("line_items[{i}].variant_id"), l.variant_id)?,
                title: l.title,
                unit_price: l.unit_price,
                quantity: l.quantity,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(CreateOrder {
        status: o.status.map(order_status_in),
        currency: o.currency,
        customer_id: parse_id("customer_id", o.customer_id)?,
        email: o.email,
        line_items,
        tags: o.tags,
        note: o.note,
        custom_fields: o.custom_fields.into_iter().collect::<BTreeMap<_, _>>(),
    })
}

/// An order patch from WIT.
pub fn order_patch(p: wo::OrderPatch) -> UpdateOrder {
    UpdateOrder {
        tags: p.tags,
        note: p.note,
        custom_fields: p.custom_fields.map(|f| f.into_iter().collect()),
    }
}

/// A fulfilment from WIT (an empty list ships everything left).
pub fn new_fulfillment(f: wo::NewFulfillment) -> Result<CreateFulfillment, Error> {
    Ok(CreateFulfillment {
        line_items: if f.line_items.is_empty() {
            None
        } else {
            Some(line_quantities_in(f.line_items, "line_items")?)
        },
        tracking_number: f.tracking_number,
        carrier: f.carrier,
    })
}

/// A refund from WIT.
pub fn new_refund(r: wo::NewRefund) -> Result<CreateRefund, Error> {
    Ok(CreateRefund {
        amount: r.amount,
        line_items: line_quantities_in(r.line_items, "line_items")?,
        reason: r.reason,
    })
}

fn product_status(s: ProductStatus) -> wt::ProductStatus {
    match s {
        ProductStatus::Draft => wt::ProductStatus::Draft,
        ProductStatus::Active => wt::ProductStatus::Active,
        ProductStatus::Archived => wt::ProductStatus::Archived,
    }
}

/// Product status from WIT.
pub fn product_status_in(s: wt::ProductStatus) -> ProductStatus {
    match s {
        wt::ProductStatus::Draft => ProductStatus::Draft,
        wt::ProductStatus::Active => ProductStatus::Active,
        wt::ProductStatus::Archived => ProductStatus::Archived,
    }
}

fn variant(v: Variant) -> wt::Variant {
    wt::Variant {
        id: v.id.to_string(),
        product_id: v.product_id.to_string(),
        title: v.title,
        sku: v.sku,
        price: v.price,
        currency: v.currency,
        inventory_quantity: v.inventory_quantity,
        low_stock_threshold: v.low_stock_threshold,
        created_at: format_ts(v.created_at),
    }
}

/// A product to WIT.
pub fn product(p: Product) -> wt::Product {
    wt::Product {
        id: p.id.to_string(),
        title: p.title,
        description: p.description,
        status: product_status(p.status),
        vendor: p.vendor,
        tags: p.tags,
        media: p
            .media
            .into_iter()
            .map(|m| wt::Media {
                url: m.url,
                alt: m.alt,
            })
            .collect(),
        variants: p.variants.into_iter().map(variant).collect(),
        published_at: opt_ts(p.published_at),
        created_at: format_ts(p.created_at),
        updated_at: format_ts(p.updated_at),
    }
}

fn media_in(media: Vec<wt::Media>) -> Vec<Media> {
    media
        .into_iter()
        .map(|m| Media {
            url: m.url,
            alt: m.alt,
        })
        .collect()
}

/// A variant from WIT.
pub fn new_variant(v: wp::NewVariant) -> NewVariant {
    NewVariant {
        title: v.title,
        sku: v.sku,
        price: v.price,
        currency: v.currency,
        inventory_quantity: v.inventory_quantity,
        low_stock_threshold: v.low_stock_threshold,
    }
}

/// A new product from WIT.
pub fn new_product(p: wp::NewProduct) -> CreateProduct {
    CreateProduct {
        title: p.title,
        description: p.description,
        status: p.status.map(product_status_in),
        vendor: p.vendor,
        tags: p.tags,
        media: media_in(p.media),
        variants: p.variants.into_iter().map(new_variant).collect(),
    }
}

/// A product patch from WIT.
pub fn product_patch(p: wp::ProductPatch) -> Result<UpdateProduct, Error> {
    let variants = p
        .variants
        .map(|vs| {
            vs.into_iter()
                .enumerate()
                .map(|(i, v)| {
                    Ok(VariantPatch {
                        id: v.id.parse().map_err(|_| {
                            Error::invalid(format!("variants[{i}].id"), "not a variant id")
                        })?,
                        title: v.title,
                        sku: v.sku,
                        price: v.price,
                        low_stock_threshold: v.low_stock_threshold,
                    })
                })
                .collect::<Result<Vec<_>, Error>>()
        })
        .transpose()?;
    Ok(UpdateProduct {
        title: p.title,
        description: p.description,
        status: p.status.map(product_status_in),
        vendor: p.vendor,
        tags: p.tags,
        media: p.media.map(media_in),
        variants,
    })
}

/// A stock level to WIT.
pub fn level(l: InventoryLevel) -> wi::Level {
    wi::Level {
        product_id: l.product_id.to_string(),
        variant_id: l.variant_id.to_string(),
        previous_quantity: l.previous_quantity,
        inventory_quantity: l.inventory_quantity,
        crossed: l
            .crossed
            .into_iter()
            .map(|c| wi::ThresholdCrossing {
                threshold: c.threshold,
                value: c.value,
                direction: c.direction,
            })
            .collect(),
    }
}

fn address(a: Address) -> wt::Address {
    wt::Address {
        id: a.id.to_string(),
        line1: a.line1,
        line2: a.line2,
        city: a.city,
        province: a.province,
        postal_code: a.postal_code,
        country: a.country,
        default: a.default,
    }
}

/// A customer to WIT.
pub fn customer(c: Customer) -> wt::Customer {
    wt::Customer {
        id: c.id.to_string(),
        email: c.email,
        phone: c.phone,
        first_name: c.first_name,
        last_name: c.last_name,
        accepts_marketing: c.accepts_marketing,
        tags: c.tags,
        note: c.note,
        addresses: c.addresses.into_iter().map(address).collect(),
        created_at: format_ts(c.created_at),
        updated_at: format_ts(c.updated_at),
    }
}

fn addresses_in(addresses: Vec<wc::AddressInput>) -> Vec<AddressInput> {
    addresses
        .into_iter()
        .map(|a| AddressInput {
            line1: a.line1,
            line2: a.line2,
            city: a.city,
            province: a.province,
            postal_code: a.postal_code,
            country: a.country,
            default: a.default,
        })
        .collect()
}

/// A new customer from WIT.
pub fn new_customer(c: wc::NewCustomer) -> CreateCustomer {
    CreateCustomer {
        email: c.email,
        phone: c.phone,
        first_name: c.first_name,
        last_name: c.last_name,
        accepts_marketing: c.accepts_marketing,
        tags: c.tags,
        note: c.note,
        addresses: addresses_in(c.addresses),
    }
}

/// A customer patch from WIT.
pub fn customer_patch(c: wc::CustomerPatch) -> UpdateCustomer {
    UpdateCustomer {
        email: c.email,
        phone: c.phone,
        first_name: c.first_name,
        last_name: c.last_name,
        accepts_marketing: c.accepts_marketing,
        tags: c.tags,
        note: c.note,
        addresses: c.addresses.map(addresses_in),
    }
}
