//! Sending accepted messages through the merchant's senders (SMTP, HTTP providers): the engine
//! runs one per due `message` entry of the work queue. The claim (a lease), the outcome and the
//! retry schedule are the service layer's (`crate::service::notifications::queue`).

use serde_json::json;

use super::client::HttpClient;
use super::smtp::{Letter, SmtpServer};
use crate::model::error::Result;
use crate::model::failure::{Failure, FailureCategory, SendOutcome};
use crate::model::message::{Channel, Message};
use crate::service::Service;
use crate::service::notifications::senders::{SenderSettings, SmtpSettings};

/// Claims the message of the work queue entry at `key`, sends it, and records the outcome.
pub async fn send(service: &Service, http: &HttpClient, key: &str) -> Result<()> {
    let claimed = super::off_workers(service, || service.claim_message(key, service.now()))?;
    let Some(claim) = claimed else {
        return Ok(());
    };
    let outcome = match &claim.sender {
        None => None,
        Some(sender) => Some(deliver(http, &claim.message, &sender.settings).await),
    };
    if let Some(SendOutcome::Transient(e) | SendOutcome::Permanent(e)) = &outcome {
        tracing::warn!(message = %claim.message.id(), category = ?e.category,
            error = %e.detail, "sending a message failed");
    }
    super::off_workers(service, || {
        service.finish_message(&claim, outcome, service.now())
    })
}

async fn deliver(http: &HttpClient, message: &Message, sender: &SenderSettings) -> SendOutcome {
    let channel = message.notification.channel;
    match (&sender.smtp, &sender.url) {
        (Some(smtp), _) if channel == Channel::Email => send_email(http, smtp, message).await,
        (_, Some(url)) if channel != Channel::Email => {
            post_to_provider(http, url, sender.auth_token.as_deref(), message).await
        }
        _ => SendOutcome::Permanent(Failure::new(
            FailureCategory::SenderMisconfigured,
            None,
            &format!("the {channel} sender has no settings for {channel}"),
        )),
    }
}

async fn send_email(http: &HttpClient, smtp: &SmtpSettings, message: &Message) -> SendOutcome {
    let server = match SmtpServer::from_settings(smtp, http.timeouts().smtp) {
        Ok(server) => server,
        Err(refused) => return refused,
    };
    let content = message.content.clone().unwrap_or_default();
    let letter = Letter {
        from: &smtp.from,
        to: message.address.as_deref().unwrap_or_default(),
        subject: content.subject.as_deref().unwrap_or_default(),
        text: &content.body,
        html: content.html.as_deref(),
        id: message.id().as_str(),
    };
    server.send(&letter).await
}

/// The HTTP provider protocol: `POST <url>` with `{id, channel, to, body, title?, store}`,
/// `Authorization: Bearer <auth_token>` when set and `Idempotency-Key: <msg id>` (the same on
/// every attempt). Any 2xx is sent.
async fn post_to_provider(
    http: &HttpClient,
    url: &str,
    token: Option<&str>,
    message: &Message,
) -> SendOutcome {
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
        .post_provider(url)
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
                SendOutcome::Sent
            } else if status.is_server_error() || status == 408 || status == 429 {
                SendOutcome::Transient(failure(FailureCategory::ProviderUnavailable))
            } else {
                SendOutcome::Permanent(failure(FailureCategory::ProviderRejected))
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
            SendOutcome::Transient(Failure::new(category, None, &detail))
        }
    }
}
