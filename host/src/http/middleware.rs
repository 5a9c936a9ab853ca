//! Request-wide layers: the request id and the error body, `/v1` authentication with the rate
//! limit, and operator authentication.

use std::net::IpAddr;
use tracing::Instrument as _;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::AppState;
use crate::model::error::{Error, ErrorBody};
use crate::model::ids::{RequestId, StoreId};
use crate::service::ratelimit::RateStatus;

/// `X-Request-Id`: the id of every request, also in every error body.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// `X-Service-Store`: optional; when sent it must name the token's store.
pub const SERVICE_STORE: HeaderName = HeaderName::from_static("x-service-store");
/// `X-RateLimit-Remaining`: requests the store can still make right now.
pub const RATE_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: seconds until the current minute window of the rate limit ends.
pub const RATE_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The error object, as every error response carries it.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorObject,
}

/// The fields of an error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorObject {
    /// Machine code, stable across releases (`validation_failed`, `missing_scope`, …).
    #[schema(example = "validation_failed")]
    pub code: String,
    /// Human text.
    pub message: String,
    /// Path of the offending input field, when one applies (`variants[1].price`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "variants[1].price")]
    pub field: Option<String>,
    /// The request's id (`req_…`), also in the `X-Request-Id` header.
    pub request_id: RequestId,
}

/// The one layer around every request, in this order: gives it an id; refuses oversized
/// headers ([`super::serve::check_header_limits`]) and a body announced over the limit
/// ([`super::serve::check_announced_body`]); runs it, on the blocking pool when it may
/// write ([`off_the_workers`]); counts and times it ([`super::metrics::track`]); and writes the
/// body of every error response with its id: ours (left as an [`ErrorBody`] extension) and
/// axum's own (an empty 405, say) alike. One layer rather than one each, since every layer costs
/// every request its own boxed service and future.
pub async fn request_context(
    State(app): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let started = std::time::Instant::now();
    let request_id = RequestId::generate(app.service.now());
    let method = req.method().clone();
    // Only an error without a body of its own needs the path; a `Uri` clone shares its bytes.
    let uri = req.uri().clone();
    req.extensions_mut().insert(request_id.clone());
    // The request's span: a client's `traceparent` makes it part of the client's trace; the
    // events the request causes carry it on to their deliveries (see `crate::telemetry`).
    let span = tracing::info_span!(
        "request",
        otel.kind = "server",
        http.request.method = method.as_str(),
        url.path = uri.path(),
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        request_id = %request_id,
    );
    if let Some(parent) = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        crate::telemetry::set_parent(&span, parent);
    }
    let checked = super::serve::check_header_limits(req.headers())
        .and_then(|()| super::serve::check_announced_body(req.headers()));
    let mut response = match checked {
        Err(e) => e.into_response(),
        // On a database other hosts share, every read is a network round trip: reads go to the
        // blocking pool too.
        Ok(()) if may_write(&method) || app.service.db.is_shared() => {
            off_the_workers(next.run(req).instrument(span.clone()))
                .await
                .unwrap_or_else(|e| {
                    Error::Internal(anyhow::anyhow!("a request failed: {e}")).into_response()
                })
        }
        Ok(()) => next.run(req).instrument(span.clone()).await,
    };
    let route = super::metrics::track(&app, &method, &response, started);
    let status = response.status();
    crate::telemetry::rename(&span, || format!("{method} {route}"));
    span.record("http.route", route);
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "ERROR");
    }
    // What is logged from here on belongs to the request (no await follows).
    let _entered = span.enter();
    tracing::debug!(
        status = status.as_u16(),
        duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "request finished"
    );
    // A page renders its own errors (HTML); everything else gets the error object.
    let page = response
        .extensions()
        .get::<super::pages::Rendered>()
        .is_some();
    if (status.is_client_error() || status.is_server_error()) && !page {
        let body = match response.extensions_mut().remove::<ErrorBody>() {
            Some(body) => body,
            None => fallback_body(status, &method, uri.path()),
        };
        if let Some(internal) = &body.internal {
            tracing::error!(%request_id, %method, path = uri.path(), error = internal, "internal error");
        }
        let mut rendered = (
            status,
            axum::Json(ErrorResponse {
                error: ErrorObject {
                    code: body.code,
                    message: body.message,
                    field: body.field,
                    request_id: request_id.clone(),
                },
            }),
        )
            .into_response();
        // Keep the headers of the original response (Retry-After, rate limit, Allow).
        for (name, value) in response.headers() {
            if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
                rendered.headers_mut().insert(name.clone(), value.clone());
            }
        }
        response = rendered;
    }
    if let Ok(v) = HeaderValue::from_str(request_id.as_str()) {
        response.headers_mut().insert(REQUEST_ID, v);
    }
    response
}

/// Whether a request may write: any method but `GET`, `HEAD` and `OPTIONS`. Those run on the
/// blocking pool ([`off_the_workers`]); reads stay on the async workers.
fn may_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Runs `future` to its end on a thread of the blocking pool, where the service calls it makes
/// may block: a durable write waits there for its group commit's flush ([`crate::storage::Db::tx`]),
/// with as many requests waiting at once as there are clients, without holding up an async
/// worker. The future runs to its end even if the returned handle is dropped (the client went
/// away), so a write is never cut short half-way through its handler.
pub fn off_the_workers<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(future))
}

/// The error body for a response that axum or a layer produced without one.
fn fallback_body(status: StatusCode, method: &axum::http::Method, path: &str) -> ErrorBody {
    let error = match status {
        StatusCode::METHOD_NOT_ALLOWED => Error::MethodNotAllowed(method.to_string()),
        StatusCode::NOT_FOUND => Error::NoRoute(path.to_owned()),
        StatusCode::PAYLOAD_TOO_LARGE => Error::PayloadTooLarge {
            limit: super::MAX_BODY_BYTES,
        },
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Error::UnsupportedMediaType,
        s if s.is_server_error() => Error::Internal(anyhow::anyhow!("{s} from a layer")),
        s => Error::BadRequest {
            code: "bad_request",
            message: s.canonical_reason().unwrap_or("bad request").to_owned(),
            field: None,
        },
    };
    let mut body = error.body();
    if status.is_client_error() && body.code == "bad_request" {
        body.code = status.as_str().to_owned();
    }
    body
}

/// The bearer token of a request: missing or malformed is 401.
pub fn bearer(headers: &HeaderMap) -> Result<&str, Error> {
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| {
        Error::Unauthorized("missing `Authorization: Bearer <token>` header".into())
    })?;
    let value = value
        .to_str()
        .map_err(|_| Error::Unauthorized("malformed Authorization header".into()))?;
    match value.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Ok(token.trim())
        }
        _ => Err(Error::Unauthorized(
            "malformed Authorization header: expected `Bearer <token>`".into(),
        )),
    }
}

fn set_rate_headers(response: &mut Response, status: RateStatus) {
    let headers = response.headers_mut();
    headers.insert(RATE_REMAINING, HeaderValue::from(status.remaining));
    headers.insert(RATE_RESET, HeaderValue::from(status.reset_secs));
}

/// The address of the client, when the request came over a socket.
fn client_ip(req: &Request) -> Option<IpAddr> {
    super::serve::client_addr(req).map(|addr| addr.ip())
}

/// Authenticates with `check`, unless the client's address is refused for failing too often;
/// a failure counts against the address.
fn authenticate<T>(
    app: &AppState,
    req: &Request,
    check: impl FnOnce(&str) -> Result<T, Error>,
) -> Result<T, Error> {
    let client = client_ip(req);
    app.service.admit_unauthenticated(client)?;
    bearer(req.headers()).and_then(check).inspect_err(|e| {
        if matches!(e, Error::Unauthorized(_)) {
            app.service.authentication_failed(client);
        }
    })
}

/// `/v1` authentication: the project token becomes the request's [`crate::service::Actor`], the
/// optional `X-Service-Store` header is checked, and the call is counted against the store's rate
/// limit. Every response that reaches a store carries the `X-RateLimit-*` headers. Failed
/// authentication is limited per client address.
pub async fn v1_auth(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    let actor = match authenticate(&app, &req, |t| app.service.authenticate(t)) {
        Ok(actor) => actor,
        Err(e) => return e.into_response(),
    };
    let status = match app.service.admit(&actor) {
        Ok(status) => status,
        Err((e, status)) => {
            let mut response = e.into_response();
            set_rate_headers(&mut response, status);
            return response;
        }
    };
    let mut response = match check_store_header(req.headers(), actor.store_id()) {
        Ok(()) => {
            req.extensions_mut().insert(actor);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    };
    set_rate_headers(&mut response, status);
    response
}

/// `X-Service-Store` is optional. When sent, a value that is not a store id is 400 and a store
/// other than the token's is 403 `store_mismatch`: a token never reaches another store.
fn check_store_header(headers: &HeaderMap, store: &StoreId) -> Result<(), Error> {
    let Some(value) = headers.get(SERVICE_STORE) else {
        return Ok(());
    };
    let field = || Some("X-Service-Store".to_owned());
    let claimed: StoreId = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::invalid("X-Service-Store", "must be a store id (`store_…`)"))?;
    if &claimed == store {
        Ok(())
    } else {
        Err(Error::Forbidden {
            code: "store_mismatch",
            message: format!("the token belongs to another store than `{claimed}`"),
            field: field(),
        })
    }
}

/// Operator authentication for `/admin/v1`; failed authentication is limited per client
/// address, as on `/v1`.
pub async fn admin_auth(State(app): State<AppState>, req: Request, next: Next) -> Response {
    match authenticate(&app, &req, |t| app.service.check_admin(t)) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// The developer API's authentication: a developer's API key becomes the request's
/// [`crate::model::account::Account`] (an extension). Failures count against the client address.
pub async fn developer_auth(State(app): State<AppState>, mut req: Request, next: Next) -> Response {
    match authenticate(&app, &req, |t| app.service.developer_by_key(t)) {
        Ok(account) => {
            req.extensions_mut().insert(account);
            next.run(req).await
        }
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::Router;
    use axum::body::{Body, to_bytes};
    use axum::http::Request;
    use axum::routing::get;
    use tower::ServiceExt as _;

    use super::*;
    use crate::model::clock::SystemClock;
    use crate::service::Service;
    use crate::storage::Db;

    #[tokio::test]
    async fn internal_errors_are_opaque_500s_with_a_request_id() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        let service =
            Service::new(db, Arc::new(SystemClock), "admin-token-for-tests").expect("service");
        let plugins = crate::plugins::Plugins::new(
            &dir.path().join("components"),
            crate::plugins::RuntimeConfig::default(),
        )
        .expect("plugins");
        let state = AppState::new(super::super::AppParts {
            service,
            plugins: Arc::new(plugins),
            engine_alive: Arc::default(),
        });
        let app = Router::new()
            .route(
                "/boom",
                get(|| async { Error::Internal(anyhow::anyhow!("disk on fire at /var/secret")) }),
            )
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                request_context,
            ))
            .with_state(state);
        let response = app
            .oneshot(Request::get("/boom").body(Body::empty()).expect("request"))
            .await
            .expect("response");
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let header_id = response.headers()[REQUEST_ID]
            .to_str()
            .expect("id")
            .to_owned();
        let body = to_bytes(response.into_body(), 1 << 20).await.expect("body");
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("disk on fire"), "{text}");
        let json: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(json["error"]["code"], "internal_error");
        assert_eq!(json["error"]["request_id"], header_id);
    }
}
