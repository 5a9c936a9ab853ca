//! Products, their variants, and stock.
//!
//! A product is created as `draft` or `active`; it is *published* the first time it is active,
//! which fires `product.created`. A change of title, media, a variant's price, or the variants
//! themselves fires `product.updated` (for published products). This module is the catalogue;
//! stock, which lives on variants, is [`inventory`]'s.

pub mod inventory;

use crate::model::event::data::{ProductCreated, ProductUpdated};
use crate::model::product::CreateProduct;
use crate::model::product::Media;
use crate::model::product::NewVariant;
use crate::model::product::Product;
use crate::model::product::ProductFilter;
use crate::model::product::ProductStatus;
use crate::model::product::UpdateProduct;
use crate::model::product::Variant;
use jiff::Timestamp;

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::ids::{ProductId, StoreId, VariantId};
use crate::model::money::Quantity;
use crate::model::scopes::Scope;
use crate::service::auth::Actor;
use crate::service::pagination::{Listing, Page, PageRequest};
use crate::service::validate;

fn validate_media(field: &str, media: &[Media]) -> Result<()> {
    if media.len() > 20 {
        return Err(Error::invalid(field, "at most 20 media"));
    }
    for (i, m) in media.iter().enumerate() {
        validate::http_url(&format!("{field}[{i}].url"), &m.url)?;
        validate::opt_text(&format!("{field}[{i}].alt"), m.alt.as_deref(), 512)?;
    }
    Ok(())
}

fn validate_new_variant(field: &str, v: &NewVariant) -> Result<()> {
    validate::opt_text(&format!("{field}.title"), v.title.as_deref(), 255)?;
    validate::opt_text(&format!("{field}.sku"), v.sku.as_deref(), 64)?;
    validate::positive_amount(&format!("{field}.price"), v.price)?;
    validate::currency(&format!("{field}.currency"), &v.currency)?;
    Quantity::stock(&format!("{field}.inventory_quantity"), v.inventory_quantity)?;
    if let Some(t) = v.low_stock_threshold {
        Quantity::stock(&format!("{field}.low_stock_threshold"), t)?;
    }
    Ok(())
}

impl Service {
    fn build_variant(&self, product: &ProductId, v: &NewVariant, now: Timestamp) -> Variant {
        Variant {
            id: VariantId::generate(now),
            product_id: product.clone(),
            title: v.title.clone().unwrap_or_else(|| "Default".to_owned()),
            sku: v.sku.clone(),
            price: v.price,
            currency: v.currency.clone(),
            inventory_quantity: v.inventory_quantity,
            low_stock_threshold: v.low_stock_threshold,
            created_at: now,
        }
    }

    /// Creates a product; `product.created` fires if it is created active (published).
    pub fn create_product(&self, actor: &Actor, input: CreateProduct) -> Result<Product> {
        actor.require(Scope::ProductsWrite)?;
        validate::text("title", &input.title, 1, 255)?;
        validate::opt_text("description", input.description.as_deref(), 65_535)?;
        validate::opt_text("vendor", input.vendor.as_deref(), 255)?;
        validate::tags("tags", &input.tags)?;
        validate_media("media", &input.media)?;
        if input.variants.is_empty() || input.variants.len() > 100 {
            return Err(Error::invalid(
                "variants",
                "a product has 1 to 100 variants",
            ));
        }
        for (i, v) in input.variants.iter().enumerate() {
            validate_new_variant(&format!("variants[{i}]"), v)?;
        }
        let now = self.now();
        let id = ProductId::generate(now);
        let status = input.status.unwrap_or(ProductStatus::Active);
        if status == ProductStatus::Archived {
            return Err(Error::invalid(
                "status",
                "a new product is `draft` or `active`",
            ));
        }
        let product = Product {
            variants: input
                .variants
                .iter()
                .map(|v| self.build_variant(&id, v, now))
                .collect(),
            id,
            title: input.title,
            description: input.description,
            status,
            vendor: input.vendor,
            tags: input.tags,
            media: input.media,
            published_at: (status == ProductStatus::Active).then_some(now),
            created_at: now,
            updated_at: now,
        };
        let store = actor.store_id();
        self.db.tx(|tx| {
            tx.write(&Product::key(store, &product.id), &product)?;
            for v in &product.variants {
                tx.write(&Product::variant_index_key(store, &v.id), &product.id)?;
            }
            if product.published_at.is_some() {
                tx.emit(
                    &actor.store,
                    ProductCreated {
                        product: product.clone(),
                    },
                    now,
                )?;
            }
            Ok(product.clone())
        })
    }

    /// A product of the actor's store.
    pub fn product(&self, actor: &Actor, id: &ProductId) -> Result<Product> {
        actor.require(Scope::ProductsRead)?;
        self.db
            .read(&Product::key(actor.store_id(), id))?
            .ok_or_else(|| Error::not_found("product", id))
    }

    /// A product of `store`, for its owner's and staff's pages (the caller has checked the
    /// account's membership).
    pub fn store_product(&self, store: &StoreId, id: &ProductId) -> Result<Product> {
        self.db
            .read(&Product::key(store, id))?
            .ok_or_else(|| Error::not_found("product", id))
    }

    /// [`Service::product`] as the JSON `GET /v1/products/{id}` answers, kept for the next
    /// request while no product changes (see [`answers`](crate::service::answers)).
    pub fn product_answer(
        &self,
        actor: &Actor,
        id: &ProductId,
    ) -> Result<crate::service::answers::Answer> {
        actor.require(Scope::ProductsRead)?;
        let key = Product::key(actor.store_id(), id);
        self.record_answer(&self.answers.products, key, "", |p: Product| p)?
            .ok_or_else(|| Error::not_found("product", id))
    }

    /// Products with their variants, newest first.
    pub fn list_products(
        &self,
        actor: &Actor,
        filter: &ProductFilter,
        page: &PageRequest,
    ) -> Result<Page<Product>> {
        actor.require(Scope::ProductsRead)?;
        let prefix = format!("product/{}/", actor.store_id());
        let list_id = format!("{prefix}?status={:?}", filter.status);
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |p: &Product| {
            filter.status.is_none_or(|s| p.status == s)
        })
    }

    /// Changes a product. Publishing a draft fires `product.created`; a change of title, media,
    /// a variant's price or title fires `product.updated` once published.
    pub fn update_product(
        &self,
        actor: &Actor,
        id: &ProductId,
        patch: UpdateProduct,
    ) -> Result<Product> {
        actor.require(Scope::ProductsWrite)?;
        if let Some(title) = &patch.title {
            validate::text("title", title, 1, 255)?;
        }
        validate::opt_text("description", patch.description.as_deref(), 65_535)?;
        validate::opt_text("vendor", patch.vendor.as_deref(), 255)?;
        if let Some(tags) = &patch.tags {
            validate::tags("tags", tags)?;
        }
        if let Some(media) = &patch.media {
            validate_media("media", media)?;
        }
        for (i, v) in patch.variants.iter().flatten().enumerate() {
            let field = |f: &str| format!("variants[{i}].{f}");
            validate::opt_text(&field("title"), v.title.as_deref(), 255)?;
            validate::opt_text(&field("sku"), v.sku.as_deref(), 64)?;
            if let Some(price) = v.price {
                validate::positive_amount(&field("price"), price)?;
            }
            if let Some(t) = v.low_stock_threshold {
                Quantity::stock(&field("low_stock_threshold"), t)?;
            }
        }
        let now = self.now();
        let store = actor.store_id();
        self.db.tx(|tx| {
            let key = Product::key(store, id);
            let mut product: Product = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("product", id))?;
            let before = product.clone();
            if let Some(title) = &patch.title {
                product.title.clone_from(title);
            }
            if patch.description.is_some() {
                product.description.clone_from(&patch.description);
            }
            if patch.vendor.is_some() {
                product.vendor.clone_from(&patch.vendor);
            }
            if let Some(tags) = &patch.tags {
                product.tags.clone_from(tags);
            }
            if let Some(media) = &patch.media {
                product.media.clone_from(media);
            }
            for (i, change) in patch.variants.iter().flatten().enumerate() {
                let variant = product
                    .variants
                    .iter_mut()
                    .find(|v| v.id == change.id)
                    .ok_or_else(|| {
                        Error::invalid(
                            format!("variants[{i}].id"),
                            format!("product has no variant `{}`", change.id),
                        )
                    })?;
                if let Some(title) = &change.title {
                    variant.title.clone_from(title);
                }
                if change.sku.is_some() {
                    variant.sku.clone_from(&change.sku);
                }
                if let Some(price) = change.price {
                    variant.price = price;
                }
                if change.low_stock_threshold.is_some() {
                    variant.low_stock_threshold = change.low_stock_threshold;
                }
            }
            let mut published_now = false;
            if let Some(status) = patch.status {
                if status == ProductStatus::Draft && product.published_at.is_some() {
                    return Err(Error::Conflict {
                        code: "invalid_transition",
                        message: "a published product cannot go back to draft; archive it instead"
                            .into(),
                        field: Some("status".into()),
                    });
                }
                product.status = status;
                if status == ProductStatus::Active && product.published_at.is_none() {
                    product.published_at = Some(now);
                    published_now = true;
                }
            }
            if product == before {
                return Ok(product);
            }
            product.updated_at = now;
            tx.write(&key, &product)?;
            if published_now {
                tx.emit(
                    &actor.store,
                    ProductCreated {
                        product: product.clone(),
                    },
                    now,
                )?;
            } else if product.published_at.is_some() && catalogue_changed(&before, &product) {
                tx.emit(
                    &actor.store,
                    ProductUpdated {
                        product: product.clone(),
                    },
                    now,
                )?;
            }
            Ok(product)
        })
    }

    /// Adds a variant; fires `product.updated` for a published product.
    pub fn add_variant(&self, actor: &Actor, id: &ProductId, input: NewVariant) -> Result<Product> {
        actor.require(Scope::ProductsWrite)?;
        validate_new_variant("body", &input).map_err(|e| match e {
            Error::Validation { field, message } => {
                Error::invalid(field.trim_start_matches("body.").to_owned(), message)
            }
            other => other,
        })?;
        let now = self.now();
        let store = actor.store_id();
        self.db.tx(|tx| {
            let key = Product::key(store, id);
            let mut product: Product = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("product", id))?;
            if product.variants.len() >= 100 {
                return Err(Error::conflict(
                    "too_many_variants",
                    "a product has at most 100 variants",
                ));
            }
            let variant = self.build_variant(id, &input, now);
            tx.write(&Product::variant_index_key(store, &variant.id), id)?;
            product.variants.push(variant);
            product.updated_at = now;
            tx.write(&key, &product)?;
            if product.published_at.is_some() {
                tx.emit(
                    &actor.store,
                    ProductUpdated {
                        product: product.clone(),
                    },
                    now,
                )?;
            }
            Ok(product)
        })
    }
}

/// Whether a change is one buyers see in the catalogue: title, media, variants or prices.
fn catalogue_changed(before: &Product, after: &Product) -> bool {
    let shape = |p: &Product| -> Vec<(VariantId, String, Option<String>, i64)> {
        p.variants
            .iter()
            .map(|v| (v.id.clone(), v.title.clone(), v.sku.clone(), v.price))
            .collect()
    };
    before.title != after.title || before.media != after.media || shape(before) != shape(after)
}
