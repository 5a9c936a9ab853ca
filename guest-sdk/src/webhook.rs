//! Webhook signature verification, for plugins that receive events over HTTP.
//!
//! Every delivery is a `POST` whose body is the JSON event envelope, with two headers:
//!
//! - `X-Service-Timestamp`: Unix time in seconds when the host signed the request;
//! - `X-Service-Signature`: lowercase hex HMAC-SHA256, keyed with the secret you gave when you
//!   subscribed, over `<timestamp>.<raw body>`.
//!
//! [`verify`] applies the four rules of the interface: both headers must be present, the
//! timestamp must be within [`TOLERANCE_SECS`] (300 s) of now in either direction, the
//! signature must be the HMAC over the *raw* body (verify the bytes you received, before
//! parsing them), and the comparison runs in constant time.
//!
//! Deliveries are at least once: deduplicate on `X-Service-Event-Id` (the event's `id`), which
//! stays the same across retries and replays.
//!
//! # A receiver
//!
//! With any HTTP server: read the two headers and the raw body, verify, then parse.
//!
//! ```
//! use commerce_guest_sdk::webhook::{self, VerifyError};
//!
//! /// What a receiver does with one request; `header` looks a header up by name.
//! fn handle(
//!     secret: &str,
//!     header: impl Fn(&str) -> Option<String>,
//!     raw_body: &[u8],
//!     now_unix: i64,
//! ) -> (u16, &'static str) {
//!     let timestamp = header(webhook::TIMESTAMP_HEADER);
//!     let signature = header(webhook::SIGNATURE_HEADER);
//!     match webhook::verify(secret, timestamp.as_deref(), signature.as_deref(), raw_body, now_unix) {
//!         // Trusted: parse `raw_body` as JSON, handle the event, answer 2xx within 10 s.
//!         Ok(()) => (200, "ok"),
//!         Err(VerifyError::Stale { .. }) => (400, "stale"),
//!         Err(_) => (401, "bad signature"),
//!     }
//! }
//!
//! // What the host would send:
//! let secret = "my-subscription-secret";
//! let body = br#"{"id":"evt_01","type":"order.paid","data":{}}"#;
//! let now = 1_767_571_200;
//! let signature = webhook::sign(secret, now, body);
//! let headers = |name: &str| match name {
//!     webhook::TIMESTAMP_HEADER => Some(now.to_string()),
//!     webhook::SIGNATURE_HEADER => Some(signature.clone()),
//!     _ => None,
//! };
//! assert_eq!(handle(secret, &headers, body, now + 5), (200, "ok"));
//! assert_eq!(handle(secret, &headers, b"{}", now), (401, "bad signature"));
//! assert_eq!(handle(secret, &headers, body, now + 301), (400, "stale"));
//! assert_eq!(handle(secret, |_| None, body, now), (401, "bad signature"));
//! ```

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Name of the timestamp header (HTTP header names are case-insensitive).
pub const TIMESTAMP_HEADER: &str = "x-service-timestamp";
/// Name of the signature header.
pub const SIGNATURE_HEADER: &str = "x-service-signature";
/// Name of the header that, for 24 hours after the subscription's secret was rotated
/// (`POST /v1/webhooks/{id}/rotate-secret`), carries the same signature keyed with the replaced
/// secret. See [`verify_rotating`].
pub const PREVIOUS_SIGNATURE_HEADER: &str = "x-service-signature-previous";
/// Name of the header set to `true` on a test delivery (`POST /v1/webhooks/{id}/test`).
pub const TEST_HEADER: &str = "x-service-test";
/// Name of the event id header, for deduplication.
pub const EVENT_ID_HEADER: &str = "x-service-event-id";
/// How far the timestamp may be from now, in seconds, in either direction.
pub const TOLERANCE_SECS: i64 = 300;

/// Why a request was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyError {
    /// The `X-Service-Timestamp` header is missing.
    MissingTimestamp,
    /// The `X-Service-Signature` header is missing.
    MissingSignature,
    /// The timestamp is not a whole number of seconds.
    MalformedTimestamp,
    /// The timestamp is more than [`TOLERANCE_SECS`] from now (a replayed or delayed request).
    Stale {
        /// The request's timestamp.
        timestamp: i64,
        /// The receiver's current time.
        now: i64,
    },
    /// The signature does not match the body, timestamp and secret.
    BadSignature,
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::MissingTimestamp => write!(f, "the {TIMESTAMP_HEADER} header is missing"),
            Self::MissingSignature => write!(f, "the {SIGNATURE_HEADER} header is missing"),
            Self::MalformedTimestamp => write!(f, "the {TIMESTAMP_HEADER} header is not a number"),
            Self::Stale { timestamp, now } => write!(
                f,
                "the request was signed at {timestamp}, more than {TOLERANCE_SECS} s from now ({now})"
            ),
            Self::BadSignature => write!(f, "the signature does not match"),
        }
    }
}

impl std::error::Error for VerifyError {}

/// The signature the host sends: lowercase hex HMAC-SHA256 keyed with `secret` over
/// `<timestamp>.<body>`. Useful to test a receiver.
///
/// ```
/// let sig = commerce_guest_sdk::webhook::sign("secret", 1_700_000_000, b"{}");
/// assert_eq!(sig.len(), 64);
/// ```
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    hex_mac(secret, &timestamp.to_string(), body)
}

fn hex_mac(secret: &str, timestamp: &str, body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// Checks a webhook request: `timestamp` and `signature` are the values of the
/// `X-Service-Timestamp` and `X-Service-Signature` headers (`None` when absent), `raw_body` the
/// body exactly as received, `now` the current Unix time in seconds.
///
/// ```
/// use commerce_guest_sdk::webhook::{sign, verify, VerifyError};
///
/// let body = br#"{"id":"evt_01"}"#;
/// let sig = sign("s3cret-s3cret-s3cret", 1_700_000_000, body);
/// assert_eq!(verify("s3cret-s3cret-s3cret", Some("1700000000"), Some(&sig), body, 1_700_000_100), Ok(()));
/// assert_eq!(verify("another-secret-!!", Some("1700000000"), Some(&sig), body, 1_700_000_100),
///     Err(VerifyError::BadSignature));
/// assert_eq!(verify("s3cret-s3cret-s3cret", None, Some(&sig), body, 1_700_000_100),
///     Err(VerifyError::MissingTimestamp));
/// ```
pub fn verify(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    raw_body: &[u8],
    now: i64,
) -> Result<(), VerifyError> {
    let timestamp = timestamp.ok_or(VerifyError::MissingTimestamp)?;
    let signature = signature.ok_or(VerifyError::MissingSignature)?;
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| VerifyError::MalformedTimestamp)?;
    if now.abs_diff(ts) > TOLERANCE_SECS.unsigned_abs() {
        return Err(VerifyError::Stale { timestamp: ts, now });
    }
    // Sign the timestamp exactly as received (not re-formatted), as the host signed it.
    let expected = hex_mac(secret, timestamp, raw_body);
    // Lowercase hex is the only accepted form; lengths are public, contents compared in
    // constant time.
    if expected
        .as_bytes()
        .ct_eq(signature.trim().as_bytes())
        .into()
    {
        Ok(())
    } else {
        Err(VerifyError::BadSignature)
    }
}

/// Like [`verify`], but also accepts a request whose `X-Service-Signature-Previous` header
/// (`previous_signature`) matches `secret`: during the 24 hours after a secret rotation, a
/// receiver that still holds the old secret keeps accepting deliveries, and one that already
/// holds the new secret accepts them through `X-Service-Signature`.
///
/// ```
/// use commerce_guest_sdk::webhook::{sign, verify_rotating, VerifyError};
///
/// let body = br#"{"id":"evt_01"}"#;
/// let new = sign("new-secret-0123456789", 1_700_000_000, body);
/// let old = sign("old-secret-0123456789", 1_700_000_000, body);
/// let check = |secret| verify_rotating(secret, Some("1700000000"), Some(&new), Some(&old), body, 1_700_000_000);
/// assert_eq!(check("new-secret-0123456789"), Ok(()));
/// assert_eq!(check("old-secret-0123456789"), Ok(()));
/// assert_eq!(check("other-secret-0123456"), Err(VerifyError::BadSignature));
/// ```
pub fn verify_rotating(
    secret: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    previous_signature: Option<&str>,
    raw_body: &[u8],
    now: i64,
) -> Result<(), VerifyError> {
    match verify(secret, timestamp, signature, raw_body, now) {
        Err(VerifyError::BadSignature) if previous_signature.is_some() => {
            verify(secret, timestamp, previous_signature, raw_body, now)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_an_independent_hmac() {
        // Python: hmac.new(b"secret", b"1700000000.{}", hashlib.sha256).hexdigest()
        assert_eq!(
            sign("secret", 1_700_000_000, b"{}"),
            "b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
    }

    #[test]
    fn the_window_is_300_seconds_either_way() {
        let sig = sign("k", 1000, b"x");
        assert_eq!(verify("k", Some("1000"), Some(&sig), b"x", 1300), Ok(()));
        assert_eq!(verify("k", Some("1000"), Some(&sig), b"x", 700), Ok(()));
        assert!(matches!(
            verify("k", Some("1000"), Some(&sig), b"x", 1301),
            Err(VerifyError::Stale { .. })
        ));
        assert!(matches!(
            verify("k", Some("1000"), Some(&sig), b"x", 699),
            Err(VerifyError::Stale { .. })
        ));
        assert_eq!(
            verify("k", Some("1000"), None, b"x", 1000),
            Err(VerifyError::MissingSignature)
        );
        assert_eq!(
            verify("k", Some("soon"), Some(&sig), b"x", 1000),
            Err(VerifyError::MalformedTimestamp)
        );
        assert_eq!(
            verify("k", Some("1000"), Some(&sig.to_uppercase()), b"x", 1000),
            Err(VerifyError::BadSignature)
        );
    }
}
