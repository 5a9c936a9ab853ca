//! The one error type of the service layer, and how it becomes the spec's error object.
//!
//! Handlers and host functions return [`Error`]; over HTTP it renders as
//! `{"error": {"code", "message", "field", "request_id"}}` (see [`crate::http::middleware`], which
//! adds the request id), and for a plugin it becomes the WIT `host-error`. Internal errors keep their
//! context for the log and reach clients only as an opaque `internal_error`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A failed operation, from the client's point of view.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The input is invalid; `field` is the path of the offending input (`variants[1].price`).
    #[error("{message}")]
    Validation {
        /// Path of the offending input field.
        field: String,
        /// What is wrong and what would be right.
        message: String,
    },
    /// The request is malformed in a way that is not one field's value (bad JSON syntax).
    #[error("{message}")]
    BadRequest {
        /// Machine code.
        code: &'static str,
        /// Human text.
        message: String,
        /// The input it concerns, when there is one.
        field: Option<String>,
    },
    /// No credentials, malformed credentials, or credentials that are unknown or revoked.
    #[error("{0}")]
    Unauthorized(String),
    /// The caller is authenticated but lacks a scope.
    #[error("this call needs the `{scope}` scope, which the installation was not granted")]
    MissingScope {
        /// The scope the operation needs.
        scope: &'static str,
    },
    /// The caller may not do this, for a reason other than a scope.
    #[error("{message}")]
    Forbidden {
        /// Machine code.
        code: &'static str,
        /// Human text.
        message: String,
        /// The input it concerns, when there is one.
        field: Option<String>,
    },
    /// No such resource in the caller's store.
    #[error("{resource} `{id}` was not found")]
    NotFound {
        /// The kind of resource.
        resource: &'static str,
        /// The id that was asked for.
        id: String,
    },
    /// No route matches the path.
    #[error("no endpoint at {0}")]
    NoRoute(String),
    /// The route exists but not with this method.
    #[error("method {0} is not allowed on this endpoint")]
    MethodNotAllowed(String),
    /// The request is well formed but conflicts with the resource's current state.
    #[error("{message}")]
    Conflict {
        /// Machine code.
        code: &'static str,
        /// Human text.
        message: String,
        /// The input it concerns, when there is one.
        field: Option<String>,
    },
    /// The body is larger than the endpoint accepts.
    #[error("the request body is larger than the {limit} bytes this endpoint accepts")]
    PayloadTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// The body is not JSON.
    #[error("expected a JSON body with `Content-Type: application/json`")]
    UnsupportedMediaType,
    /// The store's request rate limit is exhausted.
    #[error("rate limit exceeded for this store; retry after {retry_after} s")]
    RateLimited {
        /// Seconds until a request would be admitted.
        retry_after: u64,
    },
    /// Too many requests from the client's address failed authentication.
    #[error(
        "too many requests from this address failed authentication; retry after {retry_after} s"
    )]
    AuthRateLimited {
        /// Seconds until a request would be looked at again.
        retry_after: u64,
    },
    /// The request's header fields are larger than the host accepts.
    #[error(
        "the request headers are too large: at most {max_bytes} bytes in at most {max_fields} fields"
    )]
    HeadersTooLarge {
        /// The limit on the total size of names and values, in bytes.
        max_bytes: usize,
        /// The limit on the number of fields.
        max_fields: usize,
    },
    /// The merchant's quota for a channel is used up; the message was not queued.
    #[error("the store's daily {channel} quota of {limit} is used up; the message was not queued")]
    QuotaExceeded {
        /// The channel whose quota is exhausted.
        channel: String,
        /// The quota.
        limit: u64,
        /// Seconds until the quota resets.
        retry_after: u64,
    },
    /// A bug or an outage: logged in full, answered opaquely.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

/// The client-facing parts of an error, left in the response's extensions for the middleware,
/// which writes the body once it knows the request id.
#[derive(Debug, Clone)]
pub struct ErrorBody {
    /// Machine code.
    pub code: String,
    /// Human text.
    pub message: String,
    /// Path of the offending input.
    pub field: Option<String>,
    /// Internal detail for the log only; never sent.
    pub internal: Option<String>,
}

impl Error {
    /// A `validation_failed` error on `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Validation {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A `not_found` error.
    pub fn not_found(resource: &'static str, id: impl ToString) -> Self {
        Self::NotFound {
            resource,
            id: id.to_string(),
        }
    }

    /// A 409 with a code.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::Conflict {
            code,
            message: message.into(),
            field: None,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::Validation { .. } | Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::MissingScope { .. } | Self::Forbidden { .. } => StatusCode::FORBIDDEN,
            Self::NotFound { .. } | Self::NoRoute(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict { .. } => StatusCode::CONFLICT,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::RateLimited { .. }
            | Self::AuthRateLimited { .. }
            | Self::QuotaExceeded { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine code.
    pub fn code(&self) -> &str {
        match self {
            Self::Validation { .. } => "validation_failed",
            Self::BadRequest { code, .. }
            | Self::Forbidden { code, .. }
            | Self::Conflict { code, .. } => code,
            Self::Unauthorized(_) => "unauthorized",
            Self::MissingScope { .. } => "missing_scope",
            Self::NotFound { .. } | Self::NoRoute(_) => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::PayloadTooLarge { .. } => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::RateLimited { .. } | Self::AuthRateLimited { .. } => "rate_limited",
            Self::HeadersTooLarge { .. } => "headers_too_large",
            Self::QuotaExceeded { .. } => "quota_exceeded",
            Self::Internal(_) => "internal_error",
        }
    }

    /// The offending input, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::Validation { field, .. } => Some(field),
            Self::BadRequest { field, .. }
            | Self::Forbidden { field, .. }
            | Self::Conflict { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// Seconds to wait before retrying, for 429s.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::RateLimited { retry_after }
            | Self::AuthRateLimited { retry_after }
            | Self::QuotaExceeded { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// What the client sees.
    pub fn body(&self) -> ErrorBody {
        match self {
            Self::Internal(e) => ErrorBody {
                code: self.code().to_owned(),
                message: "internal error; quote the request id when reporting it".to_owned(),
                field: None,
                internal: Some(format!("{e:#}")),
            },
            _ => ErrorBody {
                code: self.code().to_owned(),
                message: self.to_string(),
                field: self.field().map(str::to_owned),
                internal: None,
            },
        }
    }
}

impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
        Self::Internal(anyhow::Error::new(e).context("storage"))
    }
}

impl From<fjall::Error> for Error {
    fn from(e: fjall::Error) -> Self {
        Self::Internal(anyhow::Error::new(e).context("storage"))
    }
}

impl From<fjall::LsmError> for Error {
    fn from(e: fjall::LsmError) -> Self {
        fjall::Error::from(e).into()
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::Internal(anyhow::Error::new(e).context("encoding a record"))
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let mut response = self.status().into_response();
        if let Some(secs) = self.retry_after()
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response.extensions_mut().insert(self.body());
        response
    }
}

/// The result type of the service layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;
