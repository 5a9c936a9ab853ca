//! The HTTP adapter: the route table, extractors and layers. Handlers translate, call the service
//! layer and translate back; no rule lives here.

pub mod admin;
pub mod customers;
pub mod developer;
pub mod extract;
pub mod health;
pub mod idempotency;
pub mod metrics;
pub mod middleware;
pub mod notifications;
pub mod openapi;
pub mod orders;
pub mod pages;
pub mod products;
pub mod serve;
mod strict;
pub mod v1;
pub mod webhooks;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;

use crate::model::error::Error;
use crate::service::{Scope, Service};
use idempotency::idempotent;

/// The largest request body accepted, in bytes (plugin uploads included).
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// What every handler can reach ([`AppParts`]), behind one shared pointer: every layer and
/// handler clones the state of each request, and one reference count costs less than three.
#[derive(Clone, Debug)]
pub struct AppState(std::sync::Arc<AppParts>);

/// The parts of the [`AppState`].
#[derive(Debug)]
pub struct AppParts {
    /// The service layer.
    pub service: Service,
    /// The component runtime (publishing compiles components).
    pub plugins: crate::plugins::SharedPlugins,
    /// True while the delivery engine's task runs (see `delivery::Engine::alive`); what
    /// `GET /readyz` reports as `engine`.
    pub engine_alive: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl AppState {
    /// The state of the handlers from its parts.
    pub fn new(parts: AppParts) -> Self {
        Self(std::sync::Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;
    fn deref(&self) -> &AppParts {
        &self.0
    }
}

/// The whole route table.
pub fn router(state: AppState) -> Router {
    // Every `/v1` group is wrapped in the idempotency layer with the scope its `POST`s need, and
    // then all of them in authentication: layers run outside-in, so a request is authenticated,
    // rate-limited and matched to its store before a key is looked up.
    let v1 = Router::new()
        .merge(idempotent(v1::router(), &state, None))
        .merge(idempotent(
            orders::router(),
            &state,
            Some(Scope::OrdersWrite),
        ))
        .merge(idempotent(
            products::router(),
            &state,
            Some(Scope::ProductsWrite),
        ))
        .merge(idempotent(
            customers::router(),
            &state,
            Some(Scope::CustomersWrite),
        ))
        // Sending needs no scope; subscribing checks the scope of each event itself.
        .merge(idempotent(notifications::router(), &state, None))
        .merge(idempotent(webhooks::router(), &state, None))
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
        ))
        .route("/openapi.json", get(openapi::serve_operator));
    let developer = developer::router()
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::developer_auth,
        ))
        .route("/openapi.json", get(openapi::serve_developer));
    Router::new()
        .nest("/v1", v1)
        .nest("/admin/v1", admin)
        .nest("/dev/v1", developer)
        .merge(pages::router())
        .merge(health::router())
        .merge(metrics::router())
        // Every matched route notes its template for the request metrics.
        .route_layer(axum::middleware::from_fn(metrics::mark_route))
        .fallback(|uri: axum::http::Uri| async move { Error::NoRoute(uri.path().to_owned()) })
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        // Request ids, header limits, writes on the blocking pool, metrics and error bodies.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::request_context,
        ))
        .with_state(state)
}
