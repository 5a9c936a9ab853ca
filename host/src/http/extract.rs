//! Extractors whose rejections come out in the spec's error format, with a precise `field`, and
//! the JSON response the handlers answer with.

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
        let bytes = json_bytes(req, state).await?;
        parse_json_object(&bytes).map(Json)
    }
}

/// Answering with `Json(value)` serializes `value` into a buffer kept by the worker thread and
/// copies the result into a body of its exact size: one allocation per response, where a body
/// grown while serializing (as `axum::Json` does, from 128 bytes) is reallocated and copied
/// several times for an order or a page of them.
impl<T: serde::Serialize> axum::response::IntoResponse for Json<T> {
    fn into_response(self) -> axum::response::Response {
        match to_json_body(&self.0) {
            Ok(body) => json_response(body),
            Err(e) => Error::Internal(anyhow::Error::new(e).context("serializing the response"))
                .into_response(),
        }
    }
}

/// A JSON body as a response, with the content type every JSON answer has.
fn json_response(body: Bytes) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        [(
            CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// An answer already serialized as JSON (see [`crate::service::answers`]), sent as it is, as
/// [`Json`] sends one.
#[derive(Debug, Clone)]
pub struct JsonAnswer(pub crate::service::answers::Answer);

impl axum::response::IntoResponse for JsonAnswer {
    fn into_response(self) -> axum::response::Response {
        json_response(Bytes::from_owner(self.0))
    }
}

/// The most a worker thread keeps of its serialization buffer between responses.
const KEPT_BUFFER_BYTES: usize = 256 << 10;

thread_local! {
    static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `value` as JSON, serialized in the thread's buffer and copied out at its exact size.
fn to_json_body<T: serde::Serialize>(value: &T) -> serde_json::Result<Bytes> {
    BUFFER.with(|cell| {
        // Taken rather than borrowed, so that a serializer calling back in here cannot panic.
        let mut buf = std::mem::take(&mut *cell.borrow_mut());
        buf.clear();
        let written = serde_json::to_writer(&mut buf, value);
        let body = written.map(|()| Bytes::copy_from_slice(&buf));
        if buf.capacity() <= KEPT_BUFFER_BYTES {
            *cell.borrow_mut() = buf;
        }
        body
    })
}

/// A JSON body that may be left out: an empty body is `T::default()`; any other is read as
/// [`Json`] reads it (415 unless `application/json`, then the same checks).
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        let empty = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() == b"0")
            || (req.headers().get(CONTENT_TYPE).is_none()
                && !req
                    .headers()
                    .contains_key(axum::http::header::TRANSFER_ENCODING)
                && !req
                    .headers()
                    .contains_key(axum::http::header::CONTENT_LENGTH));
        if empty {
            return Ok(OptionalJson(T::default()));
        }
        let bytes = json_bytes(req, state).await?;
        if bytes.is_empty() {
            return Ok(OptionalJson(T::default()));
        }
        parse_json_object(&bytes).map(OptionalJson)
    }
}

/// The bytes of a JSON body: 415 unless the content type is JSON, 413 past the limit.
async fn json_bytes<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, Error> {
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
    Bytes::from_request(req, state).await.map_err(|e| match e {
        BytesRejection::FailedToBufferBody(e) if e.status() == 413 => Error::PayloadTooLarge {
            limit: crate::http::MAX_BODY_BYTES,
        },
        other => Error::BadRequest {
            code: "unreadable_body",
            message: format!("the request body could not be read: {other}"),
            field: None,
        },
    })
}

/// [`parse_json`] of a body, which must be an object.
fn parse_json_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return Err(Error::invalid("body", "the body must be a JSON object"));
    }
    parse_json(bytes)
}

/// Decodes JSON, turning serde's errors into our error with the path of the offending field.
///
/// A whole number written with a fraction (`2.0`, `1e3`) is a whole number, as JSON Schema's
/// `integer` says: when a field wants an integer and got such a number, the body is read again
/// with those numbers as integers (only then: the common case reads the body once).
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    match parse_json_exact(bytes) {
        Err(Error::Validation { message, .. })
            if message.starts_with("invalid type: floating point") =>
        {
            let mut value: serde_json::Value = parse_json_exact(bytes)
                .map_err(|_| Error::invalid("body", "the body is not valid JSON"))?;
            whole_numbers_as_integers(&mut value);
            let text = serde_json::to_vec(&value).map_err(|e| {
                Error::Internal(anyhow::Error::new(e).context("re-encoding a body"))
            })?;
            parse_json_exact(&text)
        }
        other => other,
    }
}

/// Turns every number of `value` that is whole and fits an `i64` (`2.0`) into an integer.
fn whole_numbers_as_integers(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && (-9.007_199_254_740_992e15..=9.007_199_254_740_992e15).contains(&f)
            {
                // Exact: within ±2^53 every whole f64 is an integer that fits an i64.
                #[allow(clippy::cast_possible_truncation)]
                let whole = f as i64;
                *value = serde_json::Value::from(whole);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(whole_numbers_as_integers),
        serde_json::Value::Object(fields) => {
            fields.values_mut().for_each(whole_numbers_as_integers)
        }
        _ => {}
    }
}

fn parse_json_exact<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(super::strict::Strict(&mut de)).map_err(|e| {
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
        let query = without_empty_values(parts.uri.query().unwrap_or_default());
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

/// A query string without its empty parameters: one given empty (`?limit=&cursor=`) means the
/// same as one not given, as a form with an empty field does (the documents say so).
fn without_empty_values(query: &str) -> std::borrow::Cow<'_, str> {
    if query
        .split('&')
        .any(|pair| pair.is_empty() || pair.ends_with('='))
    {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(
                form_urlencoded::parse(query.as_bytes()).filter(|(_, value)| !value.is_empty()),
            )
            .finish()
            .into()
    } else {
        query.into()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Line {
        quantity: i64,
        #[serde(default)]
        lines: Vec<Line>,
    }

    #[test]
    fn empty_query_parameters_are_left_out_and_others_kept_as_sent() {
        assert_eq!(
            without_empty_values("limit=&cursor=&status=paid"),
            "status=paid"
        );
        assert_eq!(without_empty_values("a=1&&b=%20"), "a=1&b=+");
        assert!(matches!(
            without_empty_values("limit=5&cursor=abc"),
            std::borrow::Cow::Borrowed("limit=5&cursor=abc")
        ));
    }

    #[test]
    fn whole_numbers_written_with_a_fraction_are_integers_and_fractions_are_refused() {
        let line: Line =
            parse_json(br#"{"quantity": 2.0, "lines": [{"quantity": 3e2}]}"#).expect("whole");
        assert_eq!((line.quantity, line.lines[0].quantity), (2, 300));
        let err = parse_json::<Line>(br#"{"quantity": 1, "lines": [{"quantity": 2.5}]}"#)
            .expect_err("a fraction");
        assert!(
            matches!(&err, Error::Validation { field, .. } if field == "lines[0].quantity"),
            "{err:?}"
        );
        let err = parse_json::<Line>(br#"{"quantity": 1e300}"#).expect_err("too large");
        assert!(
            matches!(&err, Error::Validation { field, .. } if field == "quantity"),
            "{err:?}"
        );
    }
}
