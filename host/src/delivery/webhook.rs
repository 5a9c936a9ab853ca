//! Webhook attempts: the signed POST of an event envelope to a subscriber's URL.

use crate::model::delivery::Outcome;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use jiff::Timestamp;
use sha2::Sha256;

use super::client::HttpClient;
use super::recent::RecentEvent;
use crate::model::delivery::RESPONSE_EXCERPT_BYTES;

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
    let mut request = http.post_webhook(url);
    if let Some(previous) = signing.previous_secret {
        request = request.header(
            PREVIOUS_SIGNATURE_HEADER,
            sign(previous.as_bytes(), timestamp, &body),
        );
    }
    if signing.test {
        request = request.header(TEST_HEADER, "true");
    }
    let result = request
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(TIMESTAMP_HEADER, timestamp.to_string())
        .header(SIGNATURE_HEADER, signature)
        .header(EVENT_ID_HEADER, event.id.as_str())
        .header(EVENT_TYPE_HEADER, event.kind().as_str())
        .body(body)
        .send()
        .await;
    let mut outcome = Outcome::unsent(now, String::new());
    match result {
        Ok(mut response) => {
            let status = response.status();
            outcome.status_code = Some(status.as_u16());
            outcome.succeeded = status.is_success();
            outcome.error = None;
            let mut excerpt = Vec::new();
            while excerpt.len() < RESPONSE_EXCERPT_BYTES {
                match response.chunk().await {
                    Ok(Some(chunk)) => excerpt.extend_from_slice(&chunk),
                    Ok(None) | Err(_) => break,
                }
            }
            excerpt.truncate(RESPONSE_EXCERPT_BYTES);
            outcome.response_body = Some(String::from_utf8_lossy(&excerpt).into_owned());
        }
        Err(e) => outcome.error = Some(describe(&e, http.timeouts().webhook)),
    }
    outcome.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    outcome
}

fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("timed out after {} ms", timeout.as_millis());
    }
    let mut text = if e.is_connect() {
        "connection failed".to_owned()
    } else {
        "request failed".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
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
