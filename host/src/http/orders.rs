//! `/v1/orders`.

use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{get, post};

use super::AppState;
use super::extract::{Caller, Json, JsonAnswer, Query, path_id};
use super::middleware::ErrorResponse;
use crate::model::error::Result;
use crate::model::ids::OrderId;
use crate::model::order::{
    CancelOrder, CreateFulfillment, CreateOrder, CreateRefund, Order, OrderFilter, UpdateOrder,
};
use crate::service::PageRequest;
use crate::service::pagination::{Page, PageParams};

type Reply<T> = Result<Json<T>>;
type Created<T> = Result<(StatusCode, Json<T>)>;

/// Order routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orders", get(list_orders).post(create_order))
        .route("/orders/{id}", get(get_order).patch(update_order))
        .route("/orders/{id}/fulfillments", post(fulfill))
        .route("/orders/{id}/refunds", post(refund))
        .route("/orders/{id}/complete", post(complete))
        .route("/orders/{id}/cancel", post(cancel))
}

fn order_id(raw: &str) -> Result<OrderId> {
    path_id("order", raw)
}

/// List orders, newest first. Scope `orders.read`.
#[utoipa::path(get, path = "/v1/orders", tag = "orders", params(OrderFilter), security(("project_token" = [])),
    responses((status = 200, body = Page<Order>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn list_orders(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Query(filter): Query<OrderFilter>,
) -> Reply<Page<Order>> {
    let page = PageRequest::parse(&PageParams {
        limit: filter.limit.clone(),
        cursor: filter.cursor.clone(),
    })?;
    Ok(Json(state.service.list_orders(&actor, &filter, &page)?))
}

/// Fetch one order with its line items. Scope `orders.read`.
#[utoipa::path(get, path = "/v1/orders/{id}", tag = "orders", params(("id" = String, Path, description = "Order id")),
    security(("project_token" = [])),
    responses((status = 200, body = Order), (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn get_order(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<JsonAnswer> {
    Ok(JsonAnswer(
        state.service.order_answer(&actor, &order_id(&id)?)?,
    ))
}

/// Create a draft or live order; fires `order.created`. Accepts `Idempotency-Key`. Scope `orders.write`.
#[utoipa::path(post, path = "/v1/orders", tag = "orders", request_body = CreateOrder,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    security(("project_token" = [])),
    responses((status = 201, body = Order), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 409, description = "insufficient stock; idempotency key reused", body = ErrorResponse),
        (status = 429, body = ErrorResponse)))]
pub async fn create_order(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Json(body): Json<CreateOrder>,
) -> Created<Order> {
    Ok((
        StatusCode::CREATED,
        Json(state.service.create_order(&actor, body)?),
    ))
}

/// Update tags, note and custom fields. Scope `orders.write`.
#[utoipa::path(patch, path = "/v1/orders/{id}", tag = "orders", request_body = UpdateOrder,
    params(("id" = String, Path, description = "Order id")), security(("project_token" = [])),
    responses((status = 200, body = Order), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn update_order(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<UpdateOrder>,
) -> Reply<Order> {
    Ok(Json(state.service.update_order(
        &actor,
        &order_id(&id)?,
        body,
    )?))
}

/// Mark items shipped (all unshipped items when `line_items` is absent); fires `order.fulfilled`
/// when every item has shipped. Responds with the order. Scope `orders.write`.
#[utoipa::path(post, path = "/v1/orders/{id}/fulfillments", tag = "orders", request_body = CreateFulfillment,
    params(("id" = String, Path, description = "Order id")), security(("project_token" = [])),
    responses((status = 201, body = Order), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "order cancelled or draft; more than ordered", body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn fulfill(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<CreateFulfillment>,
) -> Created<Order> {
    let (order, _) = state.service.fulfill_order(&actor, &order_id(&id)?, body)?;
    Ok((StatusCode::CREATED, Json(order)))
}

/// Refund money or items, never more than was paid; fires `order.refunded`. Responds with the
/// order. Scope `orders.write`.
#[utoipa::path(post, path = "/v1/orders/{id}/refunds", tag = "orders", request_body = CreateRefund,
    params(("id" = String, Path, description = "Order id")), security(("project_token" = [])),
    responses((status = 201, body = Order), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "not paid; exceeds what was paid or bought", body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn refund(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<CreateRefund>,
) -> Created<Order> {
    let (order, _) = state.service.refund_order(&actor, &order_id(&id)?, body)?;
    Ok((StatusCode::CREATED, Json(order)))
}

/// Place a draft: it becomes `open` and takes stock. Scope `orders.write`.
#[utoipa::path(post, path = "/v1/orders/{id}/complete", tag = "orders",
    params(("id" = String, Path, description = "Order id")), security(("project_token" = [])),
    responses((status = 200, body = Order), (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 409, description = "not a draft; insufficient stock", body = ErrorResponse),
        (status = 429, body = ErrorResponse)))]
pub async fn complete(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Reply<Order> {
    Ok(Json(state.service.complete_order(&actor, &order_id(&id)?)?))
}

/// Cancel a draft or an open order with nothing shipped; unshipped stock is given back; fires
/// `order.cancelled`. Scope `orders.write`.
#[utoipa::path(post, path = "/v1/orders/{id}/cancel", tag = "orders", request_body = CancelOrder,
    params(("id" = String, Path, description = "Order id")), security(("project_token" = [])),
    responses((status = 200, body = Order), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse),
        (status = 409, description = "already cancelled; items shipped", body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn cancel(
    state: axum::extract::State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<CancelOrder>,
) -> Reply<Order> {
    Ok(Json(state.service.cancel_order(
        &actor,
        &order_id(&id)?,
        body,
    )?))
}
