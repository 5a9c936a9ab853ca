//! What the host itself tells people: its mailer.

pub mod mailer;

pub use mailer::{Mail, MailRecord, MailStatus, Mailer};
