//! The host's own mail (a delivery target paused, later invitations): what is sent and the record
//! the operator reads with `GET /admin/v1/mail`. A mail is recorded (`queued`, or `outbox` when the
//! host has no SMTP server) in the transaction of its cause, then sent from the work queue.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::ids::MailId;

/// Key prefix of the recorded mail; ids follow time, so a scan meets the oldest first.
pub const MAIL_PREFIX: &str = "mail/";

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
    /// Recorded and waiting to be sent over SMTP: the first attempt, or a retry after a transient
    /// failure (at `next_attempt_at`, with the last `error`).
    Queued,
    /// Accepted by the SMTP server.
    Sent,
    /// No SMTP server is configured: kept for the operator to read and forward.
    Outbox,
    /// The SMTP server refused it for good, or could not be reached at any attempt (see `error`).
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
    /// Queued, sent, kept in the outbox, or failed.
    pub status: MailStatus,
    /// Why sending failed (the last attempt's reason, while a retry is queued).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// SMTP attempts made so far.
    #[serde(default)]
    pub attempts: u32,
    /// When the next attempt is due, while queued.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::model::clock::api_ts::option"
    )]
    #[schema(value_type = Option<String>)]
    pub next_attempt_at: Option<Timestamp>,
    /// When the host wrote it.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
}
impl MailRecord {
    /// Key of a recorded mail.
    pub fn key(id: &MailId) -> String {
        format!("{MAIL_PREFIX}{id}")
    }
}
