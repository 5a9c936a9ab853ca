//! Webhook attempts: the signed POST of an event envelope to a subscriber's URL.

use crate::model::delivery::Outcome;
use std::time::Instant;

use hmac::{Hmac, Mac};
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use jiff::Timestamp;
use sha2::Sha256;

use super::client::HttpClient;
use super::recent::RecentEvent;

/// Unix time in seconds at which the request was signed.
pub const TIMESTAMP_HEADER: &str = "x-service-timestamp";
/// Lowercase hex HMAC-SHA256 of `<timestamp>.<raw body>`, keyed with the subscription's secret.
pub const SIGNATURE_HEADER: &str = "x-service-signature";
/// During the 24 hours after a secret rotation: the same signature keyed with the previous
/// secret, so receivers can switch secrets without missing a delivery.
pub const PREVIOUS_SIGNATURE_HEADER: &str = "x-service-signature-previous";
/// `true` on a test delivery (`POST /v1/webhooks/{id}/test`); absent otherwise.
pub const TEST_HEADER: &str = "x-service-test";
/// The event id (`evt_…`): the same on every attempt and replay, for deduplication.
pub const EVENT_ID_HEADER: &str = "x-service-event-id";
/// The event type (`order.paid`), so a receiver can route before parsing.
pub const EVENT_TYPE_HEADER: &str = "x-service-event-type";

/// The headers' names, made once (a name given as a string is checked at every insert).
mod names {
    use hyper::header::HeaderName;

    pub const TIMESTAMP: HeaderName = HeaderName::from_static(super::TIMESTAMP_HEADER);
    pub const SIGNATURE: HeaderName = HeaderName::from_static(super::SIGNATURE_HEADER);
    pub const PREVIOUS_SIGNATURE: HeaderName =
        HeaderName::from_static(super::PREVIOUS_SIGNATURE_HEADER);
    pub const TEST: HeaderName = HeaderName::from_static(super::TEST_HEADER);
    pub const EVENT_ID: HeaderName = HeaderName::from_static(super::EVENT_ID_HEADER);
    pub const EVENT_TYPE: HeaderName = HeaderName::from_static(super::EVENT_TYPE_HEADER);
}

/// The signature of a delivery: lowercase hex HMAC-SHA256 keyed with `secret` over
/// `<timestamp>.<body>`.
pub fn sign(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    // Into a buffer at once (`hex::encode` collects its digits one `char` at a time).
    let mut digits = [0u8; 64];
    hex::encode_to_slice(mac.finalize().into_bytes(), &mut digits)
        .unwrap_or_else(|_| unreachable!("32 bytes take 64 digits"));
    std::str::from_utf8(&digits)
        .unwrap_or_else(|_| unreachable!("hex digits are ASCII"))
        .to_owned()
}

/// How a webhook request is signed and marked.
#[derive(Debug, Clone, Copy)]
pub struct Signing<'a> {
    /// The subscription's secret: `X-Service-Signature`.
    pub secret: &'a str,
    /// The secret it replaced, within 24 hours of a rotation: `X-Service-Signature-Previous`.
    pub previous_secret: Option<&'a str>,
    /// A test delivery: `X-Service-Test: true`.
    pub test: bool,
}

/// POSTs `event`'s envelope (encoded once for all of its attempts, [`RecentEvent::body`]) to
/// `url` through the outbound client, signed with the subscription's secret at `now` (and also
/// with the previous secret, in its own header, when given); a test delivery carries
/// `X-Service-Test: true`. The URL is checked against the network policy first, for a clear
/// error ([`HttpClient::webhook_url`]: again when its last check is older than
/// [`super::client::URL_CHECK_TTL`]; the client's resolver enforces it at every connection).
pub async fn send(
    http: &HttpClient,
    url: &str,
    signing: Signing<'_>,
    event: &RecentEvent,
    now: Timestamp,
) -> Outcome {
    let url = match http.webhook_url(url, now).await {
        Ok(url) => url,
        Err(error) => return Outcome::unsent(now, error),
    };
    let body = match event.body() {
        Ok(body) => body,
        Err(e) => return Outcome::unsent(now, format!("encoding the event: {e}")),
    };
    let event = &event.event;
    let timestamp = now.as_second();
    let signature = sign(signing.secret.as_bytes(), timestamp, &body);
    let started = Instant::now();
    let mut headers = HeaderMap::with_capacity(12);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(names::TIMESTAMP, HeaderValue::from(timestamp));
    headers.insert(names::SIGNATURE, hex_value(signature));
    if let Some(previous) = signing.previous_secret {
        let previous = sign(previous.as_bytes(), timestamp, &body);
        headers.insert(names::PREVIOUS_SIGNATURE, hex_value(previous));
    }
    if signing.test {
        headers.insert(names::TEST, HeaderValue::from_static("true"));
    }
    match HeaderValue::from_str(event.id.as_str()) {
        Ok(id) => headers.insert(names::EVENT_ID, id),
        Err(e) => return Outcome::unsent(now, format!("the event id as a header: {e}")),
    };
    headers.insert(
        names::EVENT_TYPE,
        HeaderValue::from_static(event.kind().as_str()),
    );
    let mut outcome = Outcome::unsent(now, String::new());
    match http.post_webhook(&url, headers, body).await {
        Ok(answer) => {
            outcome.status_code = Some(answer.status.as_u16());
            outcome.succeeded = answer.status.is_success();
            outcome.error = None;
            outcome.response_body = Some(String::from_utf8_lossy(&answer.excerpt).into_owned());
        }
        Err(error) => outcome.error = Some(error),
    }
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome
}

/// A signature (64 hex digits) as a header value.
fn hex_value(digits: String) -> HeaderValue {
    // Hex digits are always a valid header value.
    HeaderValue::try_from(digits).unwrap_or_else(|_| unreachable!("hex digits are visible ASCII"))
}

#[cfg(test)]
mod tests {
    use super::sign;

    #[test]
    fn signature_is_lowercase_hex_hmac_of_timestamp_dot_body() {
        // HMAC-SHA256("secret", "1700000000.{}"), computed independently (Python's hmac).
        let sig = sign(b"secret", 1_700_000_000, b"{}");
        assert_eq!(
            sig,
            "b8569b78799ff9e3cbff0fc2d63a33a2b57f3282abd07c37ae5e8e7d79a5f163"
        );
        assert_ne!(sig, sign(b"secret", 1_700_000_001, b"{}"));
        assert_ne!(sig, sign(b"secret2", 1_700_000_000, b"{}"));
    }
}
