//! Stock of the store's variants (scope `products.write`), with the same rules as
//! `POST /v1/inventory/adjust`: stock never goes below zero.

use crate::__bindings::commerce::plugin::inventory as wit;
use crate::Result;

pub use wit::{Change, Level, ThresholdCrossing};

/// Adds `delta` units (negative to remove) to a variant's stock.
pub fn add(variant_id: &str, delta: i64, reason: Option<&str>) -> Result<Level> {
    Ok(wit::adjust(variant_id, Change::Delta(delta), reason)?)
}

/// Sets a variant's stock to `quantity`.
pub fn set(variant_id: &str, quantity: i64, reason: Option<&str>) -> Result<Level> {
    Ok(wit::adjust(variant_id, Change::Set(quantity), reason)?)
}
