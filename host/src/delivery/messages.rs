//! The worker that sends accepted messages through the merchant's senders (SMTP, HTTP
//! providers), after the request returned. It claims due messages and records each outcome
//! through the service layer (`crate::service::notifications::queue`, which holds the retry
//! rules); it wakes when a message is queued and polls on a short real-time interval.

use std::time::Duration;

use lettre::message::{Mailbox, MultiPart, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde_json::json;

use crate::model::error::Result;
use crate::model::failure::{Failure, FailureCategory};
use crate::model::message::{Channel, Message};
use crate::service::Service;
use crate::service::notifications::queue::Outcome;
use crate::service::notifications::senders::{SenderSettings, SmtpSettings, SmtpTls};
/// The time a sender has to answer.
const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Messages sent at once.
const CONCURRENCY: usize = 8;

/// Sends every message due now; returns how many were attempted.
pub async fn send_due(service: &Service, http: &reqwest::Client) -> Result<usize> {
    use futures::StreamExt as _;
    let mut attempted = 0;
    loop {
        let now = service.now();
        let due = service.due_messages(now, 64)?;
        if due.is_empty() {
            return Ok(attempted);
        }
        let mut claims = Vec::with_capacity(due.len());
        for (entry, _) in &due {
            if let Some(claim) = service.claim_message(entry, now)? {
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
                if let Err(e) = service.finish_message(&claim, outcome, service.now()) {
                    tracing::error!(message = %claim.message.id(), error = %e, "recording a send failed");
                }
            })
            .await;
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
        if let Err(e) = send_due(&service, &http).await {
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
