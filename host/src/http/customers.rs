//! `/v1/customers`.

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;

use super::AppState;
use super::extract::{Caller, Json, JsonAnswer, Query, path_id};
use super::middleware::ErrorResponse;
use crate::model::customer::{CreateCustomer, Customer, CustomerFilter, UpdateCustomer};
use crate::model::error::Result;
use crate::model::ids::CustomerId;
use crate::service::PageRequest;
use crate::service::pagination::{Page, PageParams};

/// Customer routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/customers", get(list_customers).post(create_customer))
        .route(
            "/customers/{id}",
            get(get_customer)
                .patch(update_customer)
                .delete(delete_customer),
        )
}

fn customer_id(raw: &str) -> Result<CustomerId> {
    path_id("customer", raw)
}

/// List customers, newest first. Scope `customers.read`.
#[utoipa::path(get, path = "/v1/customers", tag = "customers", params(CustomerFilter), security(("project_token" = [])),
    responses((status = 200, body = Page<Customer>), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn list_customers(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Query(filter): Query<CustomerFilter>,
) -> Result<Json<Page<Customer>>> {
    let page = PageRequest::parse(&PageParams {
        limit: filter.limit.clone(),
        cursor: filter.cursor.clone(),
    })?;
    Ok(Json(app.service.list_customers(&actor, &filter, &page)?))
}

/// Fetch one customer with addresses. Scope `customers.read`.
#[utoipa::path(get, path = "/v1/customers/{id}", tag = "customers", params(("id" = String, Path, description = "Customer id")),
    security(("project_token" = [])),
    responses((status = 200, body = Customer), (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn get_customer(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<JsonAnswer> {
    Ok(JsonAnswer(
        app.service.customer_answer(&actor, &customer_id(&id)?)?,
    ))
}

/// Create a customer (an email or a phone is required; emails are unique in the store); fires
/// `customer.created`. Accepts `Idempotency-Key`. Scope `customers.write`.
#[utoipa::path(post, path = "/v1/customers", tag = "customers", request_body = CreateCustomer,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes retries safe")),
    security(("project_token" = [])),
    responses((status = 201, body = Customer), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 409, description = "email taken", body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn create_customer(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Json(body): Json<CreateCustomer>,
) -> Result<(StatusCode, Json<Customer>)> {
    Ok((
        StatusCode::CREATED,
        Json(app.service.create_customer(&actor, body)?),
    ))
}

/// Update the profile; fires `customer.updated` when something changed. Scope `customers.write`.
#[utoipa::path(patch, path = "/v1/customers/{id}", tag = "customers", request_body = UpdateCustomer,
    params(("id" = String, Path, description = "Customer id")), security(("project_token" = [])),
    responses((status = 200, body = Customer), (status = 400, body = ErrorResponse), (status = 401, body = ErrorResponse),
        (status = 403, body = ErrorResponse), (status = 404, body = ErrorResponse), (status = 409, description = "email taken", body = ErrorResponse),
        (status = 429, body = ErrorResponse)))]
pub async fn update_customer(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    Json(body): Json<UpdateCustomer>,
) -> Result<Json<Customer>> {
    Ok(Json(app.service.update_customer(
        &actor,
        &customer_id(&id)?,
        body,
    )?))
}

/// Hard-delete a customer; fires `customer.deleted` (with only the id). Scope `customers.write`.
#[utoipa::path(delete, path = "/v1/customers/{id}", tag = "customers", params(("id" = String, Path, description = "Customer id")),
    security(("project_token" = [])),
    responses((status = 204, description = "deleted"), (status = 401, body = ErrorResponse), (status = 403, body = ErrorResponse),
        (status = 404, body = ErrorResponse), (status = 429, body = ErrorResponse)))]
pub async fn delete_customer(
    State(app): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode> {
    app.service.delete_customer(&actor, &customer_id(&id)?)?;
    Ok(StatusCode::NO_CONTENT)
}
