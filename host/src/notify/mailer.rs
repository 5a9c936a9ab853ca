//! The host's own mail (a subscription paused, later merchant notifications), through one small
//! service with two transports: SMTP when the operator configured a server, otherwise an outbox
//! the operator reads with `GET /admin/v1/mail`.
//!
//! Every mail is recorded under `mail/{mail_id}` whatever the transport, with what became of it,
//! so the operator can always see what was (or could not be) sent.

use jiff::Timestamp;
use lettre::message::Mailbox;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::clock::SharedClock;
use crate::error::{Error, Result};
use crate::ids::MailId;
use crate::service::pagination::{Cursors, Listing, Page, PageRequest};
use crate::storage::Db;

/// A plain-text mail to one recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mail {
    /// Recipient address.
    pub to: String,
    /// Subject line.
    pub subject: String,
    /// Plain-text body.
    pub body: String,
}

/// What became of a mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MailStatus {
    /// Accepted by the SMTP server.
    Sent,
    /// No SMTP server is configured: kept for the operator to read and forward.
    Outbox,
    /// The SMTP server refused it or could not be reached (see `error`).
    Failed,
}

/// A mail as the host recorded it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MailRecord {
    /// Mail id (`mail_…`).
    pub id: MailId,
    /// Recipient address.
    pub to: String,
    /// Subject line.
    pub subject: String,
    /// Plain-text body.
    pub body: String,
    /// Sent, kept in the outbox, or failed.
    pub status: MailStatus,
    /// Why sending failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the host wrote it.
    #[serde(with = "crate::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}

enum Transport {
    Smtp(AsyncSmtpTransport<Tokio1Executor>),
    Outbox,
}

/// Sends the host's mail. Cheap to share behind the service.
pub struct Mailer {
    transport: Transport,
    from: Mailbox,
    db: Db,
    clock: SharedClock,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let transport = match self.transport {
            Transport::Smtp(_) => "smtp",
            Transport::Outbox => "outbox",
        };
        f.debug_struct("Mailer")
            .field("transport", &transport)
            .field("from", &self.from.to_string())
            .finish()
    }
}

const MAIL_PREFIX: &str = "mail/";

impl Mailer {
    /// SMTP through `smtp_url` when given (`smtp://host:25`, `smtps://user:pass@host`,
    /// `smtp://host:587?tls=required`), else the operator's outbox.
    pub fn new(smtp_url: Option<&str>, from: &str, db: Db, clock: SharedClock) -> Result<Self> {
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
        Ok(Self {
            transport,
            from,
            db,
            clock,
        })
    }

    /// Sends `mail` (or keeps it in the outbox) and records it. A failure to send is recorded,
    /// logged and returned in the record, not as an error: the caller's work is done either way.
    pub async fn send(&self, mail: Mail) -> Result<MailRecord> {
        let (status, error) = match &self.transport {
            Transport::Outbox => (MailStatus::Outbox, None),
            Transport::Smtp(smtp) => match self.smtp_send(smtp, &mail).await {
                Ok(()) => (MailStatus::Sent, None),
                Err(e) => {
                    tracing::warn!(to = %mail.to, error = %e, "sending mail failed");
                    (MailStatus::Failed, Some(e))
                }
            },
        };
        let now = self.clock.now();
        let record = MailRecord {
            id: MailId::generate(now),
            to: mail.to,
            subject: mail.subject,
            body: mail.body,
            status,
            error,
            created_at: now,
        };
        self.db
            .tx(|tx| tx.write(&format!("{MAIL_PREFIX}{}", record.id), &record))?;
        Ok(record)
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

    /// Removes the mail recorded `retention` or longer before `now`; returns how many.
    pub fn purge(&self, now: Timestamp, retention: jiff::SignedDuration) -> Result<usize> {
        use crate::service::maintenance::{Sweep, sweep};
        // Mail ids follow time: the scan stops at the first mail that is kept.
        sweep(
            &self.db,
            MAIL_PREFIX,
            |_, mail: &MailRecord| match mail.created_at.saturating_add(retention) {
                Ok(until) if until <= now => Sweep::Remove,
                _ => Sweep::Stop,
            },
            |_| Vec::new(),
        )
    }

    /// The recorded mail, newest first.
    pub fn list(&self, cursors: &Cursors, page: &PageRequest) -> Result<Page<MailRecord>> {
        Listing {
            prefix: MAIL_PREFIX,
            list_id: "mail",
            newest_first: true,
        }
        .page(&self.db, cursors, page, |_| true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use jiff::SignedDuration;

    use super::*;
    use crate::clock::{Clock as _, ManualClock};

    #[tokio::test]
    async fn mail_is_purged_after_its_retention() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("ts"));
        let mailer =
            Mailer::new(None, "host@host.example", db, Arc::new(clock.clone())).expect("mailer");
        let mail = |subject: &str| Mail {
            to: "dev@plugin.example".into(),
            subject: subject.into(),
            body: "b".into(),
        };
        mailer.send(mail("old")).await.expect("send");
        clock.advance(SignedDuration::from_hours(24));
        mailer.send(mail("new")).await.expect("send");
        let retention = SignedDuration::from_hours(30 * 24);
        let now = clock.now();
        assert_eq!(mailer.purge(now, retention).expect("purge"), 0);
        let later = now + SignedDuration::from_hours(29 * 24);
        assert_eq!(mailer.purge(later, retention).expect("purge"), 1);
        let page = mailer
            .list(&Cursors::new([7; 32]), &PageRequest::first(10))
            .expect("list");
        let subjects: Vec<&str> = page.data.iter().map(|m| m.subject.as_str()).collect();
        assert_eq!(subjects, ["new"]);
    }
}
