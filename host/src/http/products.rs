//! `/v1/products` and `/v1/inventory`.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, patch, post};

use super::AppState;
use super::extract::{Caller, Json, JsonAnswer, Query, path_id};
use super::middleware::ErrorResponse;
use crate::model::error::Result;
use crate::model::ids::ProductId;
use crate::model::product::{
    AdjustInventory, CreateProduct, InventoryLevel, NewVariant, Product, ProductFilter,
    UpdateProduct,
};
use crate::service::PageRequest;
use crate::service::pagination::{Page, PageParams};

/// Product and inventory routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/products", get(list_products).post(create_product))
        .route("/products/{id}", patch(update_product).get(get_product))
        .route("/products/{id}/variants", post(add_variant))
        .route("/inventory/adjust", post(adjust_inventory))
}

fn product_id(raw: &str) -> Result<ProductId> {
    path_id("product", raw)
}

/// List products with their variants, newest first. Scope `products.read`.
#[utoipa::path(get, path = "/v1/products", tag = "products", params(ProductFilter), security(("project_token" = [])),
    responses((status = 200, body = Page<Product>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn list_products(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Query(filter): Query<ProductFilter>,
) -> Result<Json<Page<Product>>> {
    let page = PageRequest::parse(&PageParams {
        limit: filter.limit.clone(),
        cursor: filter.cursor.clone(),
    })?;
    Ok(Json(app.service.list_products(&actor, &filter, &page)?))
}

/// Fetch one product with its variants. Scope `products.read`.
#[utoipa::path(get, path = "/v1/products/{id}", tag = "products", params(("id" = String, Path, description = "Product id")),
    security(("project_token" = [])),
    responses((status = 200, body = Product), (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn get_product(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<JsonAnswer> {
    Ok(JsonAnswer(
        app.service.product_answer(&actor, &product_id(&id)?)?,
    ))
}

/// Create a product (`active` by default, which publishes it and fires `product.created`).
/// Accepts `Idempotency-Key`. Scope `products.write`.
#[utoipa::path(post, path = "/v1/products", tag = "products", request_body = CreateProduct,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    security(("project_token" = [])),
    responses((status = 201, body = Product), (status = 400, description = "e.g. a non-positive `variants[1].price`", body = ErrorResponse),
        (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn create_product(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Json(body): Json<CreateProduct>,
) -> Result<(StatusCode, Json<Product>)> {
    Ok((
        StatusCode::CREATED,
        Json(app.service.create_product(&actor, body)?),
    ))
}

/// Update fields; fires `product.updated` when title, media, variants or prices change.
/// Scope `products.write`.
#[utoipa::path(patch, path = "/v1/products/{id}", tag = "products", request_body = UpdateProduct,
    params(("id" = String, Path, description = "Product id")), security(("project_token" = [])),
    responses((status = 200, body = Product), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 409, body = ErrorResponse),
        (status = 429, body = ErrorResponse)))]
pub async fn update_product(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<UpdateProduct>,
) -> Result<Json<Product>> {
    Ok(Json(app.service.update_product(
        &actor,
        &product_id(&id)?,
        body,
    )?))
}

/// Add a variant; fires `product.updated`. Responds with the product. Scope `products.write`.
#[utoipa::path(post, path = "/v1/products/{id}/variants", tag = "products", request_body = NewVariant,
    params(("id" = String, Path, description = "Product id")), security(("project_token" = [])),
    responses((status = 201, body = Product), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn add_variant(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<NewVariant>,
) -> Result<(StatusCode, Json<Product>)> {
    Ok((
        StatusCode::CREATED,
        Json(app.service.add_variant(&actor, &product_id(&id)?, body)?),
    ))
}

/// Increment (`delta`) or set (`set`) a variant's stock; stock never goes below zero (409
/// `insufficient_stock`). Crossing zero or the low-stock threshold fires
/// `product.inventory.updated`. Scope `products.write`.
#[utoipa::path(post, path = "/v1/inventory/adjust", tag = "products", request_body = AdjustInventory,
    security(("project_token" = [])),
    responses((status = 200, body = InventoryLevel), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 409, description = "would go below zero", body = ErrorResponse),
        (status = 429, body = ErrorResponse)))]
pub async fn adjust_inventory(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Json(body): Json<AdjustInventory>,
) -> Result<Json<InventoryLevel>> {
    Ok(Json(app.service.adjust_inventory(&actor, body)?))
}
