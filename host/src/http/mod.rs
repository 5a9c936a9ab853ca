//! The HTTP adapter: the route table, extractors and layers. Handlers translate, call the service
//! layer and translate back; no rule lives here.

pub mod admin;
pub mod customers;
pub mod extract;
pub mod idempotency;
pub mod middleware;
pub mod notifications;
pub mod openapi;
pub mod orders;
pub mod products;
pub mod v1;
pub mod webhooks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;

use crate::error::Error;
use crate::service::Service;

/// The largest request body accepted, in bytes (plugin uploads included).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// What every handler can reach.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The service layer.
    pub service: Service,
    /// The component runtime (publishing compiles components).
    pub plugins: crate::plugins::SharedPlugins,
}

/// The whole route table.
pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .merge(v1::router())
        .merge(orders::router())
        .merge(products::router())
        .merge(customers::router())
        .merge(notifications::router())
        // Layers run outside-in: authenticate and rate-limit first, then idempotency.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            idempotency::idempotency,
        ))
        .merge(webhooks::router())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::v1_auth,
        ))
        .route("/openapi.json", get(openapi::serve));
    let admin = admin::router()
        .merge(notifications::admin_router())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::admin_auth,
        ));
    Router::new()
        .nest("/v1", v1)
        .nest("/admin/v1", admin)
        .route("/healthz", get(|| async { "ok" }))
        .fallback(|uri: axum::http::Uri| async move { Error::NoRoute(uri.path().to_owned()) })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::request_context,
        ))
        .with_state(state)
}
