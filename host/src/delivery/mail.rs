//! The transport of the host's own mail: SMTP when the operator configured a server, otherwise
//! the operator's outbox (`GET /admin/v1/mail`). What was sent is recorded by the service layer.

use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::model::error::{Error, Result};
use crate::model::mail::{Mail, MailStatus};

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    Outbox,
}

/// Sends the host's mail.
pub struct MailTransport {
    transport: Transport,
    from: Mailbox,
}

impl std::fmt::Debug for MailTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let transport = match self.transport {
            Transport::Smtp(_) => "smtp",
            Transport::Outbox => "outbox",
        };
        f.debug_struct("MailTransport")
            .field("transport", &transport)
            .field("from", &self.from.to_string())
            .finish()
    }
}

impl MailTransport {
    /// SMTP through `smtp_url` when given (`smtp://host:25`, `smtps://user:pass@host`,
    /// `smtp://host:587?tls=required`), else the operator's outbox.
    pub fn new(smtp_url: Option<&str>, from: &str) -> Result<Self> {
        let from: Mailbox = from.parse().map_err(|e| {
            Error::Internal(anyhow::anyhow!(
                "the mail sender `{from}` is not valid: {e}"
            ))
        })?;
        let transport = match smtp_url {
            Some(url) => Transport::Smtp(
                AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .map_err(|e| {
                        Error::Internal(anyhow::anyhow!("the SMTP URL is not valid: {e}"))
                    })?
                    .build(),
            ),
            None => Transport::Outbox,
        };
        Ok(Self { transport, from })
    }

    /// Sends `mail`, or keeps it in the outbox when no SMTP server is set. A failure is logged and
    /// returned as the status and its reason, for the record.
    pub async fn send(&self, mail: &Mail) -> (MailStatus, Option<String>) {
        match &self.transport {
            Transport::Outbox => (MailStatus::Outbox, None),
            Transport::Smtp(smtp) => match self.smtp_send(smtp, mail).await {
                Ok(()) => (MailStatus::Sent, None),
                Err(e) => {
                    tracing::warn!(to = %mail.to, error = %e, "sending mail failed");
                    (MailStatus::Failed, Some(e))
                }
            },
        }
    }

    async fn smtp_send(
        &self,
        smtp: &AsyncSmtpTransport<Tokio1Executor>,
        mail: &Mail,
    ) -> std::result::Result<(), String> {
        let to: Mailbox = mail
            .to
            .parse()
            .map_err(|e| format!("bad recipient `{}`: {e}", mail.to))?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject.clone())
            .body(mail.body.clone())
            .map_err(|e| e.to_string())?;
        smtp.send(message)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
