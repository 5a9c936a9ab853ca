//! Products: the record, its variants and media, inventory levels, and the bodies of the product operations.

use crate::model::ids::ProductId;
use crate::model::ids::StoreId;
use crate::model::ids::VariantId;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use utoipa::IntoParams;
use utoipa::ToSchema;
/// Whether a product is visible to buyers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProductStatus {
    /// Not yet published.
    Draft,
    /// Published and for sale.
    Active,
    /// Withdrawn from sale.
    Archived,
}

/// An image or video of a product.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Media {
    /// Where the file is (http or https URL).
    pub url: String,
    /// Alternative text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alt: Option<String>,
}

/// A purchasable version of a product: its own price, SKU and stock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Variant {
    /// Variant id (`var_…`).
    pub id: VariantId,
    /// Its product.
    pub product_id: ProductId,
    /// E.g. `Large / Blue`.
    pub title: String,
    /// Stock keeping unit, when the merchant uses them.
    pub sku: Option<String>,
    /// Unit price in minor units of `currency` (e.g. cents); always positive.
    pub price: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Units in stock; never negative.
    pub inventory_quantity: i64,
    /// Stock at or below which the variant is "low"; crossing it fires `product.inventory.updated`.
    pub low_stock_threshold: Option<i64>,
    /// When it was added.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

/// A product with its variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Product {
    /// Product id (`prod_…`).
    pub id: ProductId,
    /// Name shown to buyers.
    pub title: String,
    /// Long description (plain text or HTML).
    pub description: Option<String>,
    /// Draft, active or archived.
    pub status: ProductStatus,
    /// Who makes it.
    pub vendor: Option<String>,
    /// Merchant's tags.
    pub tags: Vec<String>,
    /// Images and videos.
    pub media: Vec<Media>,
    /// Purchasable versions; at least one.
    pub variants: Vec<Variant>,
    /// When it was first published (became active); null while never published.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub published_at: Option<Timestamp>,
    /// When it was created.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
}

/// Prefix of every product record's key.
pub const PRODUCT_PREFIX: &str = "product/";

impl Product {
    /// Key of a product record.
    pub fn key(store: &StoreId, id: &ProductId) -> String {
        format!("{PRODUCT_PREFIX}{store}/{id}")
    }

    pub fn variant_index_key(store: &StoreId, id: &VariantId) -> String {
        format!("variant/{store}/{id}")
    }

    /// The variant with `id`.
    pub fn variant(&self, id: &VariantId) -> Option<&Variant> {
        self.variants.iter().find(|v| &v.id == id)
    }
}

/// A variant in a create request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewVariant {
    /// E.g. `Large / Blue`; defaults to `Default`.
    #[serde(default)]
    pub title: Option<String>,
    /// Stock keeping unit.
    #[serde(default)]
    pub sku: Option<String>,
    /// Unit price in minor units, 1 to 10¹².
    pub price: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Initial stock (default 0), 0 to 10⁹.
    #[serde(default)]
    pub inventory_quantity: i64,
    /// Low-stock threshold, 0 to 10⁹.
    #[serde(default)]
    pub low_stock_threshold: Option<i64>,
}

/// Body of `POST /v1/products`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProduct {
    /// Name shown to buyers (1 to 255 characters).
    pub title: String,
    /// Long description (up to 65 535 characters).
    #[serde(default)]
    pub description: Option<String>,
    /// `draft` or `active` (default `active`, which publishes it).
    #[serde(default)]
    pub status: Option<ProductStatus>,
    /// Who makes it.
    #[serde(default)]
    pub vendor: Option<String>,
    /// Tags (at most 50).
    #[serde(default)]
    pub tags: Vec<String>,
    /// Images and videos (at most 20).
    #[serde(default)]
    pub media: Vec<Media>,
    /// At least one, at most 100 variants.
    pub variants: Vec<NewVariant>,
}

/// A change to one variant, in `PATCH /v1/products/{id}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VariantPatch {
    /// The variant to change.
    pub id: VariantId,
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New SKU.
    #[serde(default)]
    pub sku: Option<String>,
    /// New price (positive minor units).
    #[serde(default)]
    pub price: Option<i64>,
    /// New low-stock threshold.
    #[serde(default)]
    pub low_stock_threshold: Option<i64>,
}

/// Body of `PATCH /v1/products/{id}`: only the fields present change. Stock is changed with
/// `POST /v1/inventory/adjust`, not here.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProduct {
    /// New title.
    #[serde(default)]
    pub title: Option<String>,
    /// New description.
    #[serde(default)]
    pub description: Option<String>,
    /// New status (`active` publishes a draft).
    #[serde(default)]
    pub status: Option<ProductStatus>,
    /// New vendor.
    #[serde(default)]
    pub vendor: Option<String>,
    /// Replaces the tags.
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Replaces the media.
    #[serde(default)]
    pub media: Option<Vec<Media>>,
    /// Changes to existing variants.
    #[serde(default)]
    pub variants: Option<Vec<VariantPatch>>,
}

/// Body of `POST /v1/inventory/adjust`: exactly one of `delta` and `set`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdjustInventory {
    /// The variant whose stock changes.
    pub variant_id: VariantId,
    /// Add this many units (negative to remove), -10⁹ to 10⁹; stock stays within 0 to 10⁹.
    #[serde(default)]
    pub delta: Option<i64>,
    /// Set the stock to this many units, 0 to 10⁹.
    #[serde(default)]
    pub set: Option<i64>,
    /// Why (e.g. `restock`, `damaged`), kept in the event.
    #[serde(default)]
    pub reason: Option<String>,
}

/// The result of a stock change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InventoryLevel {
    /// The product.
    pub product_id: ProductId,
    /// The variant.
    pub variant_id: VariantId,
    /// Stock before the change.
    pub previous_quantity: i64,
    /// Stock now.
    pub inventory_quantity: i64,
    /// Thresholds crossed by this change (empty when none).
    pub crossed: Vec<ThresholdCrossing>,
}

/// A threshold crossed by a stock change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ThresholdCrossing {
    /// `out_of_stock` (zero) or `low_stock` (the variant's threshold).
    pub threshold: String,
    /// The threshold's value.
    pub value: i64,
    /// `down` (stock fell to or below it) or `up` (stock rose above it).
    pub direction: String,
}

/// Filters of `GET /v1/products`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ProductFilter {
    /// Only products with this status.
    pub status: Option<ProductStatus>,
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A stock change.
#[derive(Debug, Clone, Copy)]
pub enum StockChange {
    /// Add (or remove, when negative).
    Delta(i64),
    /// Set to a value.
    Set(i64),
}
