//! `GET /metrics` (the Prometheus text format) and the layers that count HTTP requests.
//!
//! Like the health probes, `/metrics` needs no token and is outside the `/v1` and `/admin/v1`
//! rate limits, as a Prometheus scrape expects; its series name no store, installation or id.
//! Operators expose it only on a private network (or behind their proxy's access rules).

use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::AppState;
use crate::metrics::QUEUE_SCAN_LIMIT;
use crate::model::error::Error;

/// The `route` label of a request that matched no route.
pub const UNMATCHED: &str = "unmatched";

/// The `/metrics` route.
pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

/// `GET /metrics`: this host's series in the Prometheus text format (version 0.0.4). No token,
/// no rate limit.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "the Prometheus text format", content_type = "text/plain")))]
pub async fn metrics(State(app): State<AppState>) -> Result<Response, Error> {
    let service = app.service.clone();
    let text = tokio::task::spawn_blocking(move || {
        let now = service.now();
        let (due, oldest) =
            crate::service::deliveries::queue::due_stats(&service.db, now, QUEUE_SCAN_LIMIT)?;
        let parked = service.db.delivery_signal().parked();
        service.metrics.queue(due, oldest, parked);
        service.metrics.hosts_live(service.peers.live().len());
        if let Some(commits) = service.db.commit_stats() {
            service.metrics.storage_commits(
                commits.batches,
                commits.transactions,
                commits.writes,
                commits.applying,
            );
        }
        Ok::<_, Error>(service.metrics.render())
    })
    .await
    .map_err(|e| Error::Internal(anyhow::anyhow!("rendering the metrics: {e}")))??;
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    Ok(response)
}

/// The route template a request matched, handed from [`mark_route`] to [`track`] in the
/// response's extensions.
#[derive(Debug, Clone)]
struct RouteTemplate(MatchedPath);

/// A route layer: notes the matched route template (`/v1/orders/{id}`) on the response.
pub async fn mark_route(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().cloned();
    let mut response = next.run(req).await;
    if let Some(route) = route {
        response.extensions_mut().insert(RouteTemplate(route));
    }
    response
}

/// Counts a request by route template, method and status, and times it from `started` (called
/// by [`super::middleware::request_context`] with the response before its error body is
/// written). A request that matched no route counts under `route="unmatched"`, never its raw
/// path. Returns the route's label.
pub fn track<'r>(
    app: &AppState,
    method: &Method,
    response: &'r Response,
    started: Instant,
) -> &'r str {
    let route = response
        .extensions()
        .get::<RouteTemplate>()
        .map_or(UNMATCHED, |r| r.0.as_str());
    app.service.metrics.http_request(
        route,
        method_label(method),
        response.status().as_u16(),
        started.elapsed(),
    );
    route
}

/// The `method` label: the standard methods, anything else as `other` (bounded cardinality).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}
