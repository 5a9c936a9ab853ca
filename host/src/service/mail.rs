//! The record of the host's own mail: written when a mail is sent (or kept for the operator),
//! listed for the operator, purged after its retention.

use jiff::Timestamp;

use super::Service;
use crate::model::error::Result;
use crate::model::ids::MailId;
use crate::model::mail::{MAIL_PREFIX, Mail, MailRecord, MailStatus};
use crate::service::maintenance::{Sweep, sweep};
use crate::service::pagination::{Listing, Page, PageRequest};

impl Service {
    /// Records what became of `mail`.
    pub fn record_mail(
        &self,
        mail: Mail,
        status: MailStatus,
        error: Option<String>,
    ) -> Result<MailRecord> {
        let now = self.now();
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
            .tx(|tx| tx.write(&MailRecord::key(&record.id), &record))?;
        Ok(record)
    }

    /// Removes the mail recorded `retention` or longer before `now`; returns how many.
    pub fn purge_mail(&self, now: Timestamp, retention: jiff::SignedDuration) -> Result<usize> {
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
    pub fn mail(&self, page: &PageRequest) -> Result<Page<MailRecord>> {
        Listing {
            prefix: MAIL_PREFIX,
            list_id: "mail",
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |_| true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use jiff::SignedDuration;

    use super::*;
    use crate::model::clock::ManualClock;
    use crate::storage::Db;

    #[test]
    fn mail_is_purged_after_its_retention() {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("ts"));
        let service = Service::new(db, Arc::new(clock.clone()), "admin").expect("service");
        let mail = |subject: &str| Mail {
            to: "dev@plugin.example".into(),
            subject: subject.into(),
            body: "b".into(),
        };
        service
            .record_mail(mail("old"), MailStatus::Outbox, None)
            .expect("record");
        clock.advance(SignedDuration::from_hours(24));
        service
            .record_mail(mail("new"), MailStatus::Outbox, None)
            .expect("record");
        let retention = SignedDuration::from_hours(30 * 24);
        let now = service.now();
        assert_eq!(service.purge_mail(now, retention).expect("purge"), 0);
        let later = now + SignedDuration::from_hours(29 * 24);
        assert_eq!(service.purge_mail(later, retention).expect("purge"), 1);
        let page = service.mail(&PageRequest::first(10)).expect("list");
        let subjects: Vec<&str> = page.data.iter().map(|m| m.subject.as_str()).collect();
        assert_eq!(subjects, ["new"]);
    }
}
