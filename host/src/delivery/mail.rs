//! Sending the host's own mail: the engine runs one per due `mail` entry of the work queue, through
//! the operator's SMTP server. The record, its status and the retries are the service layer's
//! (`crate::service::mail`); a mail is queued only when the host has an SMTP server, and one
//! found without (the server was removed from the configuration since) goes to the outbox.

use super::smtp::{Letter, SmtpServer, parse_from};
use crate::model::error::Result;
use crate::model::failure::SendOutcome;
use crate::model::mail::MailStatus;
use crate::service::Service;

/// The host's SMTP server and sender.
#[derive(Debug)]
pub struct HostMail {
    smtp: Option<SmtpServer>,
    from: String,
}

impl HostMail {
    /// SMTP through `smtp_url` when given, from `from`; without a URL, queued mail goes to the
    /// operator's outbox.
    pub fn new(smtp_url: Option<&str>, from: &str, timeout: std::time::Duration) -> Result<Self> {
        parse_from(from)?;
        Ok(Self {
            smtp: smtp_url
                .map(|url| SmtpServer::from_url(url, timeout))
                .transpose()?,
            from: from.to_owned(),
        })
    }

    /// Sends the mail of the work queue entry at `key` and records the outcome.
    pub async fn send(&self, service: &Service, key: &str) -> Result<()> {
        let Some(mail) = super::off_workers(service, || service.mail_to_send(key))? else {
            return Ok(());
        };
        let outcome = match &self.smtp {
            None => None,
            Some(smtp) => {
                let letter = Letter {
                    from: &self.from,
                    to: &mail.to,
                    subject: &mail.subject,
                    text: &mail.body,
                    html: None,
                    id: mail.id.as_str(),
                };
                Some(smtp.send(&letter).await)
            }
        };
        if let Some(SendOutcome::Transient(e) | SendOutcome::Permanent(e)) = &outcome {
            tracing::warn!(to = %mail.to, error = %e.detail, "sending mail failed");
        }
        let status = super::off_workers(service, || {
            service.finish_mail(key, &mail.id, outcome, service.now())
        })?;
        if status == Some(MailStatus::Failed) {
            tracing::error!(mail = %mail.id, to = %mail.to, "the host gave up sending a mail");
        }
        Ok(())
    }
}
