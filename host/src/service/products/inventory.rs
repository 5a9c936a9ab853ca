//! Stock: it lives on variants and never goes below zero (nor above [`MAX_STOCK`]). Crossing
//! zero or the variant's low-stock threshold, in either direction, fires
//! `product.inventory.updated`, whether an adjustment, an order or a cancellation moved it.

use jiff::Timestamp;

use crate::model::error::{Error, Result};
use crate::model::event::StoreRef;
use crate::model::event::data::ProductInventoryUpdated;
use crate::model::ids::{ProductId, VariantId};
use crate::model::money::{MAX_STOCK, OutOfRange, Quantity};
use crate::model::product::AdjustInventory;
use crate::model::product::InventoryLevel;
use crate::model::product::Product;
use crate::model::product::StockChange;
use crate::model::product::ThresholdCrossing;
use crate::model::product::Variant;
use crate::model::scopes::Scope;
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::validate;
use crate::storage::Tx;

/// The thresholds crossed going from `before` to `after` stock.
pub fn crossings(before: i64, after: i64, low: Option<i64>) -> Vec<ThresholdCrossing> {
    let mut out = Vec::new();
    let mut check = |name: &str, value: i64| {
        let (was, is) = (before <= value, after <= value);
        if was != is {
            out.push(ThresholdCrossing {
                threshold: name.to_owned(),
                value,
                direction: if is { "down" } else { "up" }.to_owned(),
            });
        }
    };
    check("out_of_stock", 0);
    if let Some(low) = low.filter(|l| *l > 0) {
        check("low_stock", low);
    }
    out
}

impl Service {
    /// Increments or sets a variant's stock; stock never goes below zero.
    pub fn adjust_inventory(
        &self,
        actor: &Actor,
        input: AdjustInventory,
    ) -> Result<InventoryLevel> {
        actor.require(Scope::ProductsWrite)?;
        validate::opt_text("reason", input.reason.as_deref(), 255)?;
        let change = match (input.delta, input.set) {
            (Some(delta), None) if (-MAX_STOCK..=MAX_STOCK).contains(&delta) => {
                StockChange::Delta(delta)
            }
            (Some(delta), None) => {
                return Err(Error::invalid(
                    "delta",
                    format!("must be from -{MAX_STOCK} to {MAX_STOCK}; got {delta}"),
                ));
            }
            (None, Some(set)) => StockChange::Set(Quantity::stock("set", set)?.units()),
            _ => {
                return Err(Error::invalid(
                    "delta",
                    "give exactly one of `delta` and `set`",
                ));
            }
        };
        let now = self.now();
        self.db.tx(|tx| {
            // The variant is the resource acted on: another store's (or no) variant is not found.
            if tx
                .read::<ProductId>(&Product::variant_index_key(
                    actor.store_id(),
                    &input.variant_id,
                ))?
                .is_none()
            {
                return Err(Error::not_found("variant", &input.variant_id));
            }
            let (level, _) = self.apply_stock(
                tx,
                &actor.store,
                &input.variant_id,
                change,
                "variant_id",
                input.reason.as_deref(),
                now,
            )?;
            Ok(level)
        })
    }

    /// Sets the stock of `product`'s variant `variant_id` to `quantity` for the store's owner or
    /// staff (the restock form of the product page), with the checks and the
    /// `product.inventory.updated` event of `POST /v1/inventory/adjust` with `set`. Another
    /// product's variant is not found, as a variant of no product is. The caller has checked
    /// the account's membership.
    pub fn set_stock(
        &self,
        store: &StoreRef,
        product: &ProductId,
        variant_id: &VariantId,
        quantity: i64,
    ) -> Result<InventoryLevel> {
        let units = Quantity::stock("quantity", quantity)?.units();
        let now = self.now();
        self.db.tx(|tx| {
            let listed: Product = tx
                .read(&Product::key(&store.id, product))?
                .ok_or_else(|| Error::not_found("product", product))?;
            if !listed.variants.iter().any(|v| &v.id == variant_id) {
                return Err(Error::not_found("variant", variant_id));
            }
            let (level, _) = self.apply_stock(
                tx,
                store,
                variant_id,
                StockChange::Set(units),
                "variant_id",
                Some("restocked"),
                now,
            )?;
            Ok(level)
        })
    }

    /// Changes stock inside a transaction (inventory adjust, orders, cancellations), firing
    /// `product.inventory.updated` when a threshold is crossed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_stock(
        &self,
        tx: &mut Tx<'_>,
        store_ref: &StoreRef,
        variant_id: &VariantId,
        change: StockChange,
        field: &str,
        reason: Option<&str>,
        now: Timestamp,
    ) -> Result<(InventoryLevel, Variant)> {
        let store = &store_ref.id;
        let product_id: ProductId = tx
            .read(&Product::variant_index_key(store, variant_id))?
            .ok_or_else(|| {
                Error::invalid(field, format!("no variant `{variant_id}` in this store"))
            })?;
        let key = Product::key(store, &product_id);
        let mut product: Product = tx
            .read(&key)?
            .ok_or_else(|| Error::not_found("product", &product_id))?;
        let variant = product
            .variants
            .iter_mut()
            .find(|v| &v.id == variant_id)
            .ok_or_else(|| {
                Error::invalid(field, format!("no variant `{variant_id}` in this store"))
            })?;
        let before = variant.inventory_quantity;
        let error_field = || {
            if field == "variant_id" {
                "delta".to_owned()
            } else {
                field.to_owned()
            }
        };
        let shifted = match change {
            StockChange::Delta(d) => Quantity::stored("inventory_quantity", before)?.shifted(d),
            StockChange::Set(s) => Quantity::new(s).ok_or(if s < 0 {
                OutOfRange::BelowZero
            } else {
                OutOfRange::AboveMax
            }),
        };
        let after = match shifted {
            Ok(after) => after.units(),
            Err(OutOfRange::BelowZero) => {
                return Err(Error::Conflict {
                    code: "insufficient_stock",
                    message: format!(
                        "variant `{variant_id}` has {before} in stock; it cannot go below zero"
                    ),
                    field: Some(error_field()),
                });
            }
            Err(OutOfRange::AboveMax) => {
                return Err(Error::Conflict {
                    code: "stock_limit_exceeded",
                    message: format!(
                        "variant `{variant_id}` has {before} in stock; it cannot go above {MAX_STOCK}"
                    ),
                    field: Some(error_field()),
                });
            }
        };
        variant.inventory_quantity = after;
        let crossed = crossings(before, after, variant.low_stock_threshold);
        let variant = variant.clone();
        product.updated_at = now;
        tx.write(&key, &product)?;
        let level = InventoryLevel {
            product_id: product_id.clone(),
            variant_id: variant_id.clone(),
            previous_quantity: before,
            inventory_quantity: after,
            crossed,
        };
        if !level.crossed.is_empty() {
            tx.emit(
                store_ref,
                ProductInventoryUpdated {
                    inventory: level.clone(),
                    reason: reason.map(str::to_owned),
                    product,
                },
                now,
            )?;
        }
        Ok((level, variant))
    }
}
