//! The worker that sends accepted messages through the merchant's senders, after the request
//! returned.
//!
//! The queue is in storage (`msgq/<due ms>/<store>/<msg>`), written in the transaction that
//! accepted the message, so nothing accepted is lost in a crash. The worker claims a due entry by
//! moving it a lease ahead (a crash mid-send retries it when the lease ends), sends, then records
//! the outcome: `sent`; after a transient failure (connection error, timeout, HTTP 408/429/5xx,
//! SMTP 4xx) a retry 30 s, 2 min, 10 min, then 1 h later; after a permanent one (other HTTP 4xx,
//! SMTP 5xx), or the fifth failed attempt, `failed`. Due times follow the injected clock; the
//! worker wakes when a message is queued and polls on a short real-time interval.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use lettre::message::{Mailbox, MultiPart, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::json;

use super::failure::{Failure, FailureCategory};
use super::records::{Channel, Message, MessageStatus};
use super::senders::{Sender, SenderSettings, SmtpSettings, SmtpTls};
use crate::error::Result;
use crate::ids::{MessageId, StoreId};
use crate::metrics::NotificationOutcome;
use crate::service::Service;

/// Delays before the retries of a message after a transient failure.
pub const RETRY_DELAYS: [SignedDuration; 4] = [
    SignedDuration::from_secs(30),
    SignedDuration::from_mins(2),
    SignedDuration::from_mins(10),
    SignedDuration::from_hours(1),
];
/// How long a claimed message is left to its sender before another pass may retry it.
const LEASE: SignedDuration = SignedDuration::from_mins(5);
/// The time a sender has to answer.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages sent at once.
const CONCURRENCY: usize = 8;
const QUEUE_PREFIX: &str = "msgq/";

/// Key of a queue entry: due time first, so a scan in key order meets the due ones first.
pub fn queue_key(due: Timestamp, store: &StoreId, id: &MessageId) -> String {
    let ms = due.as_millisecond().max(0);
    format!("{QUEUE_PREFIX}{ms:020}/{store}/{id}")
}

/// What an attempt came to.
#[derive(Debug)]
enum Outcome {
    Sent,
    Transient(Failure),
    Permanent(Failure),
}

/// A message claimed for one attempt.
struct Claim {
    lease: String,
    message: Message,
    sender: Option<Sender>,
}

impl Service {
    /// Due queue entries at `now`, oldest first.
    fn due_entries(&self, now: Timestamp, limit: usize) -> Result<Vec<(String, MessageId)>> {
        let horizon = format!("{QUEUE_PREFIX}{:020}~", now.as_millisecond().max(0));
        Ok(self
            .db
            .list::<MessageId>(QUEUE_PREFIX, None, false, limit)?
            .into_iter()
            .take_while(|(key, _)| key.as_str() < horizon.as_str())
            .collect())
    }

    /// Claims a due entry: moves it a lease ahead and reads the message and its sender. `None`
    /// when another pass took it, or the message is no longer queued.
    fn claim(&self, entry: &str, now: Timestamp) -> Result<Option<Claim>> {
        self.db.tx(|tx| {
            let Some(id) = tx.read::<MessageId>(entry)? else {
                return Ok(None);
            };
            tx.remove(entry)?;
            let Some(store) = entry
                .split('/')
                .nth(2)
                .and_then(|s| s.parse::<StoreId>().ok())
            else {
                return Ok(None);
            };
            let Some(message) = tx
                .read::<Message>(&Message::key(&store, &id))?
                .filter(|m| m.notification.status == MessageStatus::Queued)
            else {
                return Ok(None);
            };
            let lease_until = now.saturating_add(LEASE).unwrap_or(Timestamp::MAX);
            let lease = queue_key(lease_until, &store, &id);
            tx.write(&lease, &id)?;
            let sender = tx.read(&Sender::key(&store, message.notification.channel))?;
            Ok(Some(Claim {
                lease,
                message,
                sender,
            }))
        })
    }

    /// Records an attempt's outcome (or, with no sender connected any more, moves the message to
    /// the outbox) and schedules the retry.
    fn finish(&self, claim: &Claim, outcome: Option<Outcome>, now: Timestamp) -> Result<()> {
        let store = &claim.message.store.id;
        let id = claim.message.id();
        let status = self.db.tx(|tx| {
            tx.remove(&claim.lease)?;
            let key = Message::key(store, id);
            let Some(mut record) = tx.read::<Message>(&key)? else {
                return Ok(None);
            };
            let n = &mut record.notification;
            n.updated_at = now;
            n.next_attempt_at = None;
            match &outcome {
                None => n.status = MessageStatus::Outbox,
                Some(Outcome::Sent) => {
                    n.attempts += 1;
                    n.status = MessageStatus::Sent;
                    n.sent_at = Some(now);
                    n.last_error = None;
                    n.last_error_category = None;
                    record.last_error_detail = None;
                }
                Some(failure @ (Outcome::Transient(e) | Outcome::Permanent(e))) => {
                    n.attempts += 1;
                    n.last_error = Some(e.text());
                    n.last_error_category = Some(e.category);
                    record.last_error_detail = Some(e.detail.clone());
                    let retry = RETRY_DELAYS.get(n.attempts as usize - 1);
                    match (failure, retry) {
                        (Outcome::Transient(_), Some(delay)) => {
                            let due = now.saturating_add(*delay).unwrap_or(Timestamp::MAX);
                            n.next_attempt_at = Some(due);
                            tx.write(&queue_key(due, store, id), id)?;
                        }
                        _ => n.status = MessageStatus::Failed,
                    }
                }
            }
            tx.write(&key, &record)?;
            Ok(Some(record.notification.status))
        })?;
        let outcome = match status {
            Some(MessageStatus::Sent) => NotificationOutcome::Sent,
            Some(MessageStatus::Failed) => NotificationOutcome::Failed,
            _ => return Ok(()),
        };
        let channel = claim.message.notification.channel;
        self.metrics.notification(channel.as_str(), outcome);
        Ok(())
    }

    /// Sends every message due now; returns how many were attempted.
    pub async fn send_due_messages(&self, http: &reqwest::Client) -> Result<usize> {
        use futures::StreamExt as _;
        let mut attempted = 0;
        loop {
            let now = self.now();
            let due = self.due_entries(now, 64)?;
            if due.is_empty() {
                return Ok(attempted);
            }
            let mut claims = Vec::with_capacity(due.len());
            for (entry, _) in &due {
                if let Some(claim) = self.claim(entry, now)? {
                    claims.push(claim);
                }
            }
            attempted += claims.len();
            futures::stream::iter(claims)
                .for_each_concurrent(CONCURRENCY, |claim| async move {
                    let outcome = match &claim.sender {
                        None => None,
                        Some(sender) => Some(deliver(http, &claim.message, &sender.settings).await),
                    };
                    if let Some(Outcome::Transient(e) | Outcome::Permanent(e)) = &outcome {
                        tracing::warn!(message = %claim.message.id(), category = ?e.category,
                            error = %e.detail, "sending a message failed");
                    }
                    if let Err(e) = self.finish(&claim, outcome, self.now()) {
                        tracing::error!(message = %claim.message.id(), error = %e, "recording a send failed");
                    }
                })
                .await;
        }
    }
}

/// Runs the worker until `stop` turns true: sends what is due, then waits for a wake-up (a
/// message was queued) or `poll` of real time (a retry may have come due on the clock).
pub async fn run(service: Service, poll: Duration, mut stop: tokio::sync::watch::Receiver<bool>) {
    // Straight to the merchant's providers: an `HTTP(S)_PROXY` in the environment is not used.
    let http = match reqwest::Client::builder()
        .no_proxy()
        .timeout(SEND_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::error!(error = %e, "the message worker could not start");
            return;
        }
    };
    loop {
        if let Err(e) = service.send_due_messages(&http).await {
            tracing::error!(error = %e, "the message worker failed a pass");
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = service.outbound.notified() => {}
            () = tokio::time::sleep(poll) => {}
        }
    }
}

async fn deliver(http: &reqwest::Client, message: &Message, sender: &SenderSettings) -> Outcome {
    let channel = message.notification.channel;
    match (&sender.smtp, &sender.url) {
        (Some(smtp), _) if channel == Channel::Email => send_email(smtp, message).await,
        (_, Some(url)) if channel != Channel::Email => {
            post_to_provider(http, url, sender.auth_token.as_deref(), message).await
        }
        _ => Outcome::Permanent(Failure::new(
            FailureCategory::SenderMisconfigured,
            None,
            &format!("the {channel} sender has no settings for {channel}"),
        )),
    }
}

fn misconfigured(detail: &str) -> Outcome {
    Outcome::Permanent(Failure::new(
        FailureCategory::SenderMisconfigured,
        None,
        detail,
    ))
}

async fn send_email(smtp: &SmtpSettings, message: &Message) -> Outcome {
    let email = match build_email(&smtp.from, message) {
        Ok(email) => email,
        Err(refused) => return refused,
    };
    let builder = match smtp.tls {
        SmtpTls::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
            &smtp.host,
        )),
        SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host),
        SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host),
    };
    let mut builder = match builder {
        Ok(b) => b.port(smtp.port).timeout(Some(SEND_TIMEOUT)),
        Err(e) => return misconfigured(&format!("smtp: {e}")),
    };
    if let (Some(user), Some(password)) = (&smtp.username, &smtp.password) {
        builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
    }
    match builder.build().send(email).await {
        Ok(_) => Outcome::Sent,
        Err(e) => smtp_failure(&e),
    }
}

/// Sorts an SMTP error: a permanent one is not retried; the code (`SMTP 550`) is shown.
fn smtp_failure(e: &lettre::transport::smtp::Error) -> Outcome {
    let code = e.status().map(|c| c.to_string());
    let detail = format!("smtp: {e}");
    let category = match code.as_deref() {
        // Mailbox unavailable, user not local, mailbox name not allowed.
        Some("550" | "551" | "553") => FailureCategory::InvalidRecipient,
        // Authentication required, or refused.
        Some("530" | "534" | "535") => FailureCategory::SenderMisconfigured,
        Some(_) if e.is_permanent() => FailureCategory::ProviderRejected,
        Some(_) => FailureCategory::ProviderUnavailable,
        None if e.is_timeout() => FailureCategory::Timeout,
        None if e.is_tls() => FailureCategory::SenderMisconfigured,
        None => FailureCategory::ProviderUnreachable,
    };
    let failure = Failure::new(category, code.map(|c| format!("SMTP {c}")), &detail);
    if e.is_permanent() {
        Outcome::Permanent(failure)
    } else {
        Outcome::Transient(failure)
    }
}

fn build_email(from: &str, message: &Message) -> std::result::Result<lettre::Message, Outcome> {
    let from: Mailbox = from
        .parse()
        .map_err(|e| misconfigured(&format!("from: {e}")))?;
    let address = message.address.as_deref().unwrap_or_default();
    let to: Mailbox = address.parse().map_err(|e| {
        Outcome::Permanent(Failure::new(
            FailureCategory::InvalidRecipient,
            None,
            &format!("to `{address}`: {e}"),
        ))
    })?;
    let content = message.content.clone().unwrap_or_default();
    let domain = from.email.domain().to_owned();
    let builder = lettre::Message::builder()
        .from(from)
        .to(to)
        .subject(content.subject.unwrap_or_default())
        .message_id(Some(format!("<{}@{domain}>", message.id())));
    match content.html {
        Some(html) => builder.multipart(MultiPart::alternative_plain_html(content.body, html)),
        None => builder.header(ContentType::TEXT_PLAIN).body(content.body),
    }
    .map_err(|e| misconfigured(&format!("building the email: {e}")))
}

/// The HTTP provider protocol: `POST <url>` with `{id, channel, to, body, title?, store}`,
/// `Authorization: Bearer <auth_token>` when set and `Idempotency-Key: <msg id>` (the same on
/// every attempt). Any 2xx is sent.
async fn post_to_provider(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    message: &Message,
) -> Outcome {
    let content = message.content.clone().unwrap_or_default();
    let mut body = json!({
        "id": message.id(),
        "channel": message.notification.channel,
        "to": message.address,
        "body": content.body,
        "store": message.store,
    });
    if let Some(title) = content.title {
        body["title"] = title.into();
    }
    let mut request = http
        .post(url)
        .header("idempotency-key", message.id().as_str())
        .json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    match request.send().await {
        Ok(response) => {
            let status = response.status();
            let failure = |category| {
                Failure::new(
                    category,
                    Some(format!("HTTP {}", status.as_u16())),
                    &format!("the provider answered {status}"),
                )
            };
            if status.is_success() {
                Outcome::Sent
            } else if status.is_server_error() || status == 408 || status == 429 {
                Outcome::Transient(failure(FailureCategory::ProviderUnavailable))
            } else {
                Outcome::Permanent(failure(FailureCategory::ProviderRejected))
            }
        }
        Err(e) => {
            let category = if e.is_timeout() {
                FailureCategory::Timeout
            } else {
                FailureCategory::ProviderUnreachable
            };
            // The URL is left out of the details too: its query may hold the provider's key.
            let detail = format!(
                "the provider could not be reached: {:#}",
                anyhow::Error::new(e.without_url())
            );
            Outcome::Transient(Failure::new(category, None, &detail))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_sort_by_due_time() {
        let store: StoreId = "store_a".parse().expect("id");
        let id: MessageId = "msg_a".parse().expect("id");
        let early = queue_key(Timestamp::from_second(9).expect("ts"), &store, &id);
        let late = queue_key(Timestamp::from_second(10).expect("ts"), &store, &id);
        assert!(early < late);
    }
}
