//! Extractors whose rejections come out in the spec's error format, with a precise `field`.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::model::error::Error;
use crate::service::Actor;

/// A JSON body. Wrong content type → 415; syntax errors → 400 `malformed_json`; a wrong value →
/// 400 `validation_failed` with the path of the field; too large → 413.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || mime.ends_with("+json")
            });
        if !is_json {
            return Err(Error::UnsupportedMediaType);
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| match e {
            BytesRejection::FailedToBufferBody(e) if e.status() == 413 => Error::PayloadTooLarge {
                limit: crate::http::MAX_BODY_BYTES,
            },
            other => Error::BadRequest {
                code: "unreadable_body",
                message: format!("the request body could not be read: {other}"),
                field: None,
            },
        })?;
        parse_json(&bytes).map(Json)
    }
}

/// Decodes JSON, turning serde's errors into our error with the path of the offending field.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() {
            let message = strip_position(&inner.to_string());
            Error::invalid(field_of(&path, &message), message)
        } else {
            Error::BadRequest {
                code: "malformed_json",
                message: format!("the body is not valid JSON: {inner}"),
                field: None,
            }
        }
    })?;
    de.end().map_err(|e| Error::BadRequest {
        code: "malformed_json",
        message: format!("the body is not valid JSON: {e}"),
        field: None,
    })?;
    Ok(value)
}

/// serde_json appends " at line 1 column 7" to messages; the field path says more.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// The field a deserialization error is about. serde names a missing field only in its message,
/// at the path of the object that lacks it; unknown fields are named at their own path.
fn field_of(path: &str, message: &str) -> String {
    let base = if path == "." { "" } else { path };
    if let Some(rest) = message.strip_prefix("missing field `")
        && let Some(name) = rest.split('`').next()
    {
        return if base.is_empty() {
            name.to_owned()
        } else {
            format!("{base}.{name}")
        };
    }
    if base.is_empty() {
        "body".to_owned()
    } else {
        base.to_owned()
    }
}

/// Query parameters, decoded with the same error format.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| {
                let path = e.path().to_string();
                let message = e.into_inner().to_string();
                Error::invalid(field_of(&path, &message), message)
            })
    }
}

/// The authenticated installation, put in place by the `/v1` middleware. The handler takes it
/// out of the request (a handler has one caller).
#[derive(Debug, Clone)]
pub struct Caller(pub Actor);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        parts
            .extensions
            .remove::<Actor>()
            .map(Caller)
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("route is missing the /v1 auth layer")))
    }
}

pub use crate::model::ids::path_id;
