//! The `Idempotency-Key` layer for `/v1` `POST`s (the rule itself is in
//! [`crate::service::idempotency`]).
//!
//! [`idempotent`] wraps a group of routes with the scope its `POST`s need; the route table
//! ([`super::router`]) wraps every `/v1` group, inside the authentication layer, so that every
//! `POST` honours the key and nothing is replayed to a caller that the request itself would
//! refuse.

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::{OriginalUri, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::model::error::{Error, ErrorBody};
use crate::service::idempotency::{Begin, StoredResponse, fingerprint};
use crate::service::{Actor, Scope};

/// `Idempotency-Key` request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `Idempotent-Replayed: true` marks a replayed response.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// The state of the layer: the app, and the scope the wrapped routes' `POST`s need.
#[derive(Clone, Debug)]
pub struct Idempotent {
    app: AppState,
    needs: Option<Scope>,
}

/// Wraps `routes` (which must sit inside the `/v1` authentication layer) so that their `POST`s
/// honour `Idempotency-Key`. `needs` is the scope every one of those `POST`s requires (`None`
/// when they need none, or decide per request).
pub fn idempotent(
    routes: Router<AppState>,
    app: &AppState,
    needs: Option<Scope>,
) -> Router<AppState> {
    routes.route_layer(axum::middleware::from_fn_with_state(
        Idempotent {
            app: app.clone(),
            needs,
        },
        idempotency,
    ))
}

/// Replays or records `POST` responses that carry an `Idempotency-Key`.
pub async fn idempotency(State(layer): State<Idempotent>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let Some(raw_key) = req.headers().get(IDEMPOTENCY_KEY).cloned() else {
        return next.run(req).await;
    };
    match run(layer, raw_key, req, next).await {
        Ok(response) | Err(response) => response,
    }
}

async fn run(
    layer: Idempotent,
    raw_key: HeaderValue,
    req: Request,
    next: Next,
) -> Result<Response, Response> {
    let Some(actor) = req.extensions().get::<Actor>().cloned() else {
        return Err(
            Error::Internal(anyhow::anyhow!("idempotency layer without an actor")).into_response(),
        );
    };
    let (parts, body) = req.into_parts();
    let bytes = to_bytes(body, super::MAX_BODY_BYTES).await.map_err(|_| {
        Error::PayloadTooLarge {
            limit: super::MAX_BODY_BYTES,
        }
        .into_response()
    })?;
    // The full path (`/v1/…`), not the one inside the nested router.
    let uri = parts
        .extensions
        .get::<OriginalUri>()
        .map_or(&parts.uri, |OriginalUri(uri)| uri);
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let fingerprint = fingerprint(parts.method.as_str(), path, &bytes);
    let service = layer.app.service.clone();
    let claim =
        match service.idempotency_begin(&actor, layer.needs, raw_key.as_bytes(), &fingerprint) {
            Err(e) => return Err(e.into_response()),
            Ok(Begin::Replay(stored)) => {
                let mut response = replay(stored);
                response
                    .headers_mut()
                    .insert(REPLAYED, HeaderValue::from_static("true"));
                return Ok(response);
            }
            Ok(Begin::Run(claim)) => claim,
        };
    let (held, released) = (claim.clone(), service.clone());
    // The request runs to its end and records its response even if the client goes away
    // meanwhile, so that the key is not left claimed; a retry then gets the response. It runs
    // on the blocking pool, like every write (`middleware::request_context`).
    let work = super::middleware::off_the_workers(async move {
        let response = next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
        let (mut parts, body) = response.into_parts();
        let stored = match to_bytes(body, usize::MAX).await {
            Ok(body) => Some(StoredResponse {
                status: parts.status.as_u16(),
                body: String::from_utf8_lossy(&body).into_owned(),
                error: parts
                    .extensions
                    .get::<ErrorBody>()
                    .map(|e| (e.code.clone(), e.message.clone(), e.field.clone())),
            }),
            Err(_) => None,
        };
        if let Err(e) = service.idempotency_finish(&claim, stored.clone()) {
            tracing::error!(error = %e, "could not record an idempotent response");
        }
        let body = stored.map(|s| s.body).unwrap_or_default();
        parts.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(parts, Body::from(body))
    });
    work.await.map_err(|e| {
        // The handler panicked: like any 5xx, the key is released for a retry.
        if let Err(e) = released.idempotency_finish(&held, None) {
            tracing::error!(error = %e, "could not release an idempotency key");
        }
        Error::Internal(anyhow::anyhow!("an idempotent request failed: {e}")).into_response()
    })
}

fn replay(stored: StoredResponse) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK);
    match stored.error {
        Some((code, message, field)) => {
            let mut response = status.into_response();
            response.extensions_mut().insert(ErrorBody {
                code,
                message,
                field,
                internal: None,
            });
            response
        }
        None => {
            let mut response = (status, stored.body).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            response
        }
    }
}
