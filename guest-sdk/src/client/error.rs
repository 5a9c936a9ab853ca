//! What a call through the [`Client`](super::Client) can fail with.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// A refusal by the host: the body `{"error": {"code", "message", "field", "request_id"}}` of a
/// non-2xx answer, with its status.
///
/// Match on [`code`](Self::code), which is stable (`validation_failed`, `missing_scope`,
/// `not_found`, `insufficient_stock`, `rate_limited`, `quota_exceeded`, …); the message is for
/// people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status (400, 401, 403, 404, 409, 429, …).
    pub status: u16,
    /// The stable error code.
    pub code: String,
    /// What went wrong, in English.
    pub message: String,
    /// The input the error is about (`variants[0].price`, `to`, `cursor`), when there is one.
    pub field: Option<String>,
    /// The host's id of the request (`req_…`), to quote when asking the operator.
    pub request_id: Option<String>,
    /// On a 429: how long the host asked to wait (`Retry-After`) before trying again.
    pub retry_after: Option<Duration>,
}

impl ApiError {
    /// True for a 429 (`rate_limited` or `quota_exceeded`).
    pub fn is_rate_limited(&self) -> bool {
        self.status == 429
    }

    /// Reads an error answer; a body that is not the host's error format still gives an error
    /// with the status (code `http_<status>`) and the start of the body as the message.
    pub(crate) fn from_response(
        status: u16,
        request_id: Option<String>,
        retry_after: Option<Duration>,
        body: &[u8],
    ) -> Self {
        #[derive(Deserialize)]
        struct Envelope {
            error: Body,
        }
        #[derive(Deserialize)]
        struct Body {
            code: String,
            #[serde(default)]
            message: String,
            #[serde(default)]
            field: Option<String>,
            #[serde(default)]
            request_id: Option<String>,
        }
        match serde_json::from_slice::<Envelope>(body) {
            Ok(Envelope { error }) => Self {
                status,
                code: error.code,
                message: error.message,
                field: error.field,
                request_id: error.request_id.or(request_id),
                retry_after,
            },
            Err(_) => Self {
                status,
                code: format!("http_{status}"),
                message: String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned(),
                field: None,
                request_id,
                retry_after,
            },
        }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, self.code, self.message)?;
        if let Some(field) = &self.field {
            write!(f, " (field `{field}`)")?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " [{id}]")?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}

/// Why a call failed.
#[derive(Debug)]
pub enum Error {
    /// The host answered with an error (including a 429 that outlasted the retries).
    Api(ApiError),
    /// The request did not get an answer: connection refused, timeout, TLS, …
    Transport(reqwest::Error),
    /// The host answered 2xx with a body this client could not read into its type.
    Decode {
        /// The path that was called.
        path: String,
        /// What did not match.
        source: serde_json::Error,
    },
    /// The client was built with a base URL that cannot be parsed.
    InvalidBaseUrl(String),
}

impl Error {
    /// The host's refusal, when this is one.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            Self::Api(e) => Some(e),
            _ => None,
        }
    }

    /// The host's error code (`validation_failed`, …), when the host refused the call.
    pub fn code(&self) -> Option<&str> {
        self.api().map(|e| e.code.as_str())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Api(e) => write!(f, "the host refused the call: {e}"),
            Self::Transport(e) => write!(f, "could not reach the host: {e}"),
            Self::Decode { path, source } => {
                write!(f, "unexpected answer from {path}: {source}")
            }
            Self::InvalidBaseUrl(url) => write!(f, "invalid base URL `{url}`"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Api(e) => Some(e),
            Self::Transport(e) => Some(e),
            Self::Decode { source, .. } => Some(source),
            Self::InvalidBaseUrl(_) => None,
        }
    }
}

impl From<ApiError> for Error {
    fn from(e: ApiError) -> Self {
        Self::Api(e)
    }
}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Self {
        Self::Transport(e)
    }
}

/// The result of a client call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
