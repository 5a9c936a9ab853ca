//! Sending email over SMTP, for the merchant's email (channel `email`, through the store's SMTP
//! sender) and the host's own mail (through the operator's SMTP server) alike: one way to build a
//! message, one way to send it, one classification of what went wrong.

use std::time::Duration;

use lettre::message::{Mailbox, MultiPart, header::ContentType};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use crate::model::error::{Error, Result};
use crate::model::failure::{Failure, FailureCategory, SendOutcome};
use crate::service::notifications::senders::{SmtpSettings, SmtpTls};

/// One email to send.
#[derive(Debug, Clone, Copy)]
pub struct Letter<'a> {
    /// `From`: `shop@acme.example` or `Acme <shop@acme.example>`.
    pub from: &'a str,
    /// The recipient's address.
    pub to: &'a str,
    /// Subject line.
    pub subject: &'a str,
    /// The plain-text part.
    pub text: &'a str,
    /// The HTML part, if any.
    pub html: Option<&'a str>,
    /// The record's id, for a stable `Message-ID` (`<msg_…@from-domain>`) on every attempt.
    pub id: &'a str,
}

/// An SMTP server to send through.
pub struct SmtpServer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
}

impl std::fmt::Debug for SmtpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmtpServer").finish_non_exhaustive()
    }
}

impl SmtpServer {
    /// The host's server, from its URL (`smtp://host:25`, `smtps://user:pass@host`,
    /// `smtp://host:587?tls=required`).
    pub fn from_url(url: &str, timeout: Duration) -> Result<Self> {
        let builder = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| Error::Internal(anyhow::anyhow!("the SMTP URL is not valid: {e}")))?;
        Ok(Self {
            transport: builder.timeout(Some(timeout)).build(),
        })
    }

    /// A merchant's server, from the sender's settings. Settings that cannot work are a permanent
    /// failure of the message.
    pub fn from_settings(smtp: &SmtpSettings, timeout: Duration) -> Result<Self, SendOutcome> {
        let builder = match smtp.tls {
            SmtpTls::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
                &smtp.host,
            )),
            SmtpTls::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&smtp.host),
            SmtpTls::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&smtp.host),
        };
        let mut builder = match builder {
            Ok(b) => b.port(smtp.port).timeout(Some(timeout)),
            Err(e) => return Err(misconfigured(&format!("smtp: {e}"))),
        };
        if let (Some(user), Some(password)) = (&smtp.username, &smtp.password) {
            builder = builder.credentials(Credentials::new(user.clone(), password.clone()));
        }
        Ok(Self {
            transport: builder.build(),
        })
    }

    /// Builds and sends `letter`.
    pub async fn send(&self, letter: &Letter<'_>) -> SendOutcome {
        let email = match build(letter) {
            Ok(email) => email,
            Err(refused) => return refused,
        };
        match self.transport.send(email).await {
            Ok(_) => SendOutcome::Sent,
            Err(e) => classify(&e),
        }
    }
}

/// Checks a `From` mailbox.
pub fn parse_from(from: &str) -> Result<Mailbox> {
    from.parse().map_err(|e| {
        Error::Internal(anyhow::anyhow!(
            "the mail sender `{from}` is not valid: {e}"
        ))
    })
}

fn misconfigured(detail: &str) -> SendOutcome {
    SendOutcome::Permanent(Failure::new(
        FailureCategory::SenderMisconfigured,
        None,
        detail,
    ))
}

/// Sorts an SMTP error: a permanent one is not retried; the code (`SMTP 550`) is shown.
pub fn classify(e: &lettre::transport::smtp::Error) -> SendOutcome {
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
        SendOutcome::Permanent(failure)
    } else {
        SendOutcome::Transient(failure)
    }
}

/// The message: plain text, or plain text and HTML as alternatives.
fn build(letter: &Letter<'_>) -> std::result::Result<lettre::Message, SendOutcome> {
    let from: Mailbox = letter
        .from
        .parse()
        .map_err(|e| misconfigured(&format!("from: {e}")))?;
    let to: Mailbox = letter.to.parse().map_err(|e| {
        SendOutcome::Permanent(Failure::new(
            FailureCategory::InvalidRecipient,
            None,
            &format!("to `{}`: {e}", letter.to),
        ))
    })?;
    let domain = from.email.domain().to_owned();
    let builder = lettre::Message::builder()
        .from(from)
        .to(to)
        .subject(letter.subject)
        .message_id(Some(format!("<{}@{domain}>", letter.id)));
    match letter.html {
        Some(html) => builder.multipart(MultiPart::alternative_plain_html(
            letter.text.to_owned(),
            html.to_owned(),
        )),
        None => builder
            .header(ContentType::TEXT_PLAIN)
            .body(letter.text.to_owned()),
    }
    .map_err(|e| misconfigured(&format!("building the email: {e}")))
}
