//! The `Idempotency-Key` layer for `/v1` `POST`s (the rule itself is in
//! [`crate::service::idempotency`]).

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::AppState;
use crate::error::{Error, ErrorBody};
use crate::service::Actor;
use crate::service::idempotency::{Begin, StoredResponse};

/// `Idempotency-Key` request header.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");
/// `Idempotent-Replayed: true` marks a replayed response.
pub const REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// Replays or records `POST` responses that carry an `Idempotency-Key`.
pub async fn idempotency(State(app): State<AppState>, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let Some(raw_key) = req.headers().get(IDEMPOTENCY_KEY).cloned() else {
        return next.run(req).await;
    };
    match run(app, raw_key, req, next).await {
        Ok(response) | Err(response) => response,
    }
}

async fn run(
    app: AppState,
    raw_key: HeaderValue,
    req: Request,
    next: Next,
) -> Result<Response, Response> {
    let bad_key = || {
        Error::invalid(
            "Idempotency-Key",
            "must be 1 to 255 visible ASCII characters",
        )
        .into_response()
    };
    let idem_key = raw_key.to_str().map_err(|_| bad_key())?.to_owned();
    if idem_key.is_empty()
        || idem_key.len() > 255
        || !idem_key.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(bad_key());
    }
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
    let mut hasher = Sha256::new();
    hasher.update(parts.method.as_str());
    hasher.update(b" ");
    hasher.update(parts.uri.to_string());
    hasher.update(b"\n");
    hasher.update(&bytes);
    let fingerprint = hex::encode(hasher.finalize());
    let store = actor.store_id().clone();
    match app
        .service
        .idempotency_begin(&store, &idem_key, &fingerprint)
    {
        Err(e) => Err(e.into_response()),
        Ok(Begin::Replay(stored)) => {
            let mut response = replay(stored);
            response
                .headers_mut()
                .insert(REPLAYED, HeaderValue::from_static("true"));
            Ok(response)
        }
        Ok(Begin::Run) => {
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
            if let Err(e) = app
                .service
                .idempotency_finish(&store, &idem_key, stored.clone())
            {
                tracing::error!(error = %e, "could not record an idempotent response");
            }
            let body = stored.map(|s| s.body).unwrap_or_default();
            parts.headers.remove(header::CONTENT_LENGTH);
            Ok(Response::from_parts(parts, Body::from(body)))
        }
    }
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
