//! Products and variants of the store (scopes `products.read` and `products.write`), with the same
//! rules as `/v1/products`.

use crate::__bindings::commerce::plugin::products as wit;
use crate::{PageRequest, Product, ProductStatus, Result};

pub use wit::{NewProduct, NewVariant, ProductPage, ProductPatch, VariantPatch};

/// Lists products with their variants, newest first (`products.read`).
pub fn list(status: Option<ProductStatus>, page: &PageRequest) -> Result<ProductPage> {
    Ok(wit::list(status, page)?)
}

/// Fetches one product (`products.read`).
pub fn get(id: &str) -> Result<Product> {
    Ok(wit::get(id)?)
}

/// Creates a product (`products.write`).
pub fn create(product: &NewProduct) -> Result<Product> {
    Ok(wit::create(product)?)
}

/// Changes a product (`products.write`).
pub fn update(id: &str, patch: &ProductPatch) -> Result<Product> {
    Ok(wit::update(id, patch)?)
}

/// Adds a variant and returns the product (`products.write`).
pub fn add_variant(product_id: &str, variant: &NewVariant) -> Result<Product> {
    Ok(wit::add_variant(product_id, variant)?)
}
