//! The error of handlers and host calls.

use std::fmt;

use crate::HostError;

/// Why a handler or a host call failed. Returned from a handler, it fails the delivery attempt
/// (retried on the webhook schedule) and its message is kept with the attempt.
#[derive(Debug)]
pub struct Error {
    message: String,
    host: Option<HostError>,
}

/// The result of a handler or a host call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with a message of your own.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            host: None,
        }
    }

    /// The host's refusal behind this error, when a host call failed.
    pub fn host_error(&self) -> Option<&HostError> {
        self.host.as_ref()
    }

    /// Seconds to wait before trying again, when the host refused for a quota or the rate limit.
    pub fn retry_after(&self) -> Option<u32> {
        match self.host {
            Some(HostError::QuotaExceeded(s) | HostError::RateLimited(s)) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<HostError> for Error {
    fn from(e: HostError) -> Self {
        let message = match &e {
            HostError::Forbidden(scope) => {
                format!("forbidden: the plugin was not granted `{scope}`")
            }
            HostError::QuotaExceeded(s) => format!("quota exceeded; retry after {s} s"),
            HostError::Invalid(f) => format!("invalid `{}`: {}", f.field, f.message),
            HostError::NotFound => "not found in this store".to_owned(),
            HostError::RateLimited(s) => format!("rate limited; retry after {s} s"),
            HostError::Conflict(r) => format!("{}: {}", r.code, r.message),
            HostError::Internal(m) => format!("host error: {m}"),
        };
        Self {
            message,
            host: Some(e),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::new(format!("JSON: {e}"))
    }
}

impl From<&str> for Error {
    fn from(m: &str) -> Self {
        Self::new(m)
    }
}

impl From<String> for Error {
    fn from(m: String) -> Self {
        Self::new(m)
    }
}
