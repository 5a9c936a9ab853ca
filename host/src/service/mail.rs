//! The host's own mail (pause notices): recorded and queued in the transaction of its cause, so a
//! committed cause never loses its mail; sent by the delivery engine from the work queue; listed
//! for the operator; purged after its retention.
//!
//! A mail starts `queued` (or `outbox` when the host has no SMTP server: kept for the operator to
//! read and forward). An attempt makes it `sent`; after a transient SMTP failure (connection
//! error, timeout, SMTP 4xx) it stays `queued` for a retry 30 s, 2 min, 10 min, then 1 h later,
//! and after a permanent one (SMTP 5xx, an unusable address) or the fifth failed attempt it is
//! `failed`, with the reason in `error`. A host stopped during an attempt makes it again after
//! the restart (at least once). Due times follow the injected clock.

use jiff::{SignedDuration, Timestamp};

use super::Service;
use crate::model::error::Result;
use crate::model::failure::SendOutcome;
use crate::model::ids::MailId;
use crate::model::mail::{MAIL_PREFIX, Mail, MailRecord, MailStatus};
use crate::model::work::Work;
use crate::service::maintenance::{Sweep, sweep};
use crate::service::pagination::{Listing, Page, PageRequest};
use crate::storage::Tx;

/// Delays before the retries of a mail after a transient failure.
pub const RETRY_DELAYS: [SignedDuration; 4] = [
    SignedDuration::from_secs(30),
    SignedDuration::from_mins(2),
    SignedDuration::from_mins(10),
    SignedDuration::from_hours(1),
];

/// How the host sends its own mail (set by the operator's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailRoute {
    /// No SMTP server: mail is kept in the operator's outbox (`GET /admin/v1/mail`).
    #[default]
    Outbox,
    /// Over the host's SMTP server, from the work queue.
    Smtp,
}

/// Records `mail` in the caller's transaction: `queued` with its work queue entry due `now`, or
/// straight to the outbox when `route` has no SMTP server. The transaction is made durable: the
/// mail and its cause are on disk before the engine can send it.
pub fn queue_mail(
    tx: &mut Tx<'_>,
    mail: Mail,
    route: MailRoute,
    now: Timestamp,
) -> Result<MailRecord> {
    let record = MailRecord {
        id: MailId::generate(now),
        to: mail.to,
        subject: mail.subject,
        body: mail.body,
        status: match route {
            MailRoute::Outbox => MailStatus::Outbox,
            MailRoute::Smtp => MailStatus::Queued,
        },
        error: None,
        attempts: 0,
        next_attempt_at: (route == MailRoute::Smtp).then_some(now),
        created_at: now,
    };
    tx.write(&MailRecord::key(&record.id), &record)?;
    tx.flush_on_commit();
    if route == MailRoute::Smtp {
        tx.enqueue(
            &Work::Mail {
                mail_id: record.id.clone(),
            },
            now,
        )?;
    }
    Ok(record)
}

/// The mail a work queue entry names, while it is queued (`read` reads a record by key).
fn queued_mail(
    work: Option<Work>,
    read: impl FnOnce(&str) -> Result<Option<MailRecord>>,
) -> Result<Option<MailRecord>> {
    Ok(match work {
        Some(Work::Mail { mail_id }) => {
            read(&MailRecord::key(&mail_id))?.filter(|m| m.status == MailStatus::Queued)
        }
        _ => None,
    })
}

/// Key of a host's claim on the mail of the work queue entry `key` (hosts sharing a database).
fn claim_key(key: &str) -> String {
    format!("claim/{key}")
}

impl Service {
    /// Records `mail` in a transaction of its own (see [`queue_mail`]).
    pub fn queue_mail(&self, mail: Mail) -> Result<MailRecord> {
        let now = self.now();
        let route = self.mail_route;
        self.db.tx(|tx| queue_mail(tx, mail.clone(), route, now))
    }

    /// The mail the work queue entry at `key` is to send, while it is queued; an entry whose
    /// mail is gone or done is removed. Where hosts share the database, the entry is claimed for
    /// this host first ([`Tx::take_claim`]), so that one host sends it: `None` while another
    /// host's claim holds.
    pub fn mail_to_send(&self, key: &str) -> Result<Option<MailRecord>> {
        if self.db.is_shared() {
            let now = self.now();
            return self.db.tx(|tx| {
                let work = tx.read::<Work>(key)?;
                let Some(mail) = queued_mail(work, |k| tx.read(k))? else {
                    tx.remove(key)?;
                    return Ok(None);
                };
                let claimed =
                    tx.take_claim(&claim_key(key), key, &self.holder, now, self.claim_lease)?;
                Ok(claimed.then_some(mail))
            });
        }
        let queued = queued_mail(self.db.read::<Work>(key)?, |k| self.db.read(k))?;
        if queued.is_none() {
            self.db.tx(|tx| tx.remove(key))?;
        }
        Ok(queued)
    }

    /// Records what an attempt at the mail of the entry at `key` came to (`None`: the host has
    /// no SMTP server any more, so the mail goes to the outbox), and queues the retry. Returns
    /// the mail's status.
    pub fn finish_mail(
        &self,
        key: &str,
        id: &MailId,
        outcome: Option<SendOutcome>,
        now: Timestamp,
    ) -> Result<Option<MailStatus>> {
        let shared = self.db.is_shared();
        self.db.tx(|tx| {
            tx.remove(key)?;
            if shared {
                tx.release_claim(&claim_key(key))?;
            }
            let record_key = MailRecord::key(id);
            let Some(mut mail) = tx
                .read::<MailRecord>(&record_key)?
                .filter(|m| m.status == MailStatus::Queued)
            else {
                return Ok(None);
            };
            mail.next_attempt_at = None;
            match &outcome {
                None => mail.status = MailStatus::Outbox,
                Some(SendOutcome::Sent) => {
                    mail.attempts += 1;
                    mail.status = MailStatus::Sent;
                    mail.error = None;
                }
                Some(failed @ (SendOutcome::Transient(e) | SendOutcome::Permanent(e))) => {
                    mail.attempts += 1;
                    mail.error = Some(e.detail.clone());
                    let retry = RETRY_DELAYS.get(mail.attempts as usize - 1);
                    match (failed, retry) {
                        (SendOutcome::Transient(_), Some(delay)) => {
                            let due = now.saturating_add(*delay).unwrap_or(Timestamp::MAX);
                            mail.next_attempt_at = Some(due);
                            tx.enqueue(
                                &Work::Mail {
                                    mail_id: id.clone(),
                                },
                                due,
                            )?;
                        }
                        _ => mail.status = MailStatus::Failed,
                    }
                }
            }
            tx.write(&record_key, &mail)?;
            Ok(Some(mail.status))
        })
    }

    /// Removes the mail recorded `retention` or longer before `now` (unless still queued);
    /// returns how many.
    pub fn purge_mail(&self, now: Timestamp, retention: jiff::SignedDuration) -> Result<usize> {
        // Mail ids follow time: the scan stops at the first mail that is young enough to keep.
        sweep(
            &self.db,
            MAIL_PREFIX,
            |_, mail: &MailRecord| match mail.created_at.saturating_add(retention) {
                Ok(until) if until <= now && mail.status == MailStatus::Queued => Sweep::Keep,
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
    use crate::model::failure::{Failure, FailureCategory};
    use crate::model::work::WorkKind;
    use crate::service::Options;
    use crate::storage::Db;

    fn mail(subject: &str) -> Mail {
        Mail {
            to: "dev@plugin.example".into(),
            subject: subject.into(),
            body: "b".into(),
        }
    }

    fn service(route: MailRoute) -> (Service, ManualClock, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("ts"));
        let options = Options {
            mail_route: route,
            ..Options::default()
        };
        let service =
            Service::with_options(db, Arc::new(clock.clone()), "admin", options).expect("service");
        (service, clock, dir)
    }

    #[test]
    fn mail_is_purged_after_its_retention() {
        let (service, clock, _dir) = service(MailRoute::Outbox);
        service.queue_mail(mail("old")).expect("record");
        clock.advance(SignedDuration::from_hours(24));
        service.queue_mail(mail("new")).expect("record");
        let retention = SignedDuration::from_hours(30 * 24);
        let now = service.now();
        assert_eq!(service.purge_mail(now, retention).expect("purge"), 0);
        let later = now + SignedDuration::from_hours(29 * 24);
        assert_eq!(service.purge_mail(later, retention).expect("purge"), 1);
        let page = service.mail(&PageRequest::first(10)).expect("list");
        let subjects: Vec<&str> = page.data.iter().map(|m| m.subject.as_str()).collect();
        assert_eq!(subjects, ["new"]);
    }

    fn queued_entry(service: &Service) -> String {
        let due = crate::storage::queue::due(&service.db, WorkKind::Mail, service.now(), None, 10)
            .expect("due");
        assert_eq!(due.len(), 1, "one mail entry due");
        due[0].0.clone()
    }

    #[test]
    fn a_mail_is_queued_then_retried_after_transient_failures_and_failed_after_the_last() {
        let (service, clock, _dir) = service(MailRoute::Smtp);
        let record = service.queue_mail(mail("paused")).expect("queue");
        assert_eq!(record.status, MailStatus::Queued);
        let transient = || {
            Some(SendOutcome::Transient(Failure::new(
                FailureCategory::ProviderUnreachable,
                None,
                "smtp: connection refused",
            )))
        };
        for delay in RETRY_DELAYS {
            let key = queued_entry(&service);
            let status = service
                .finish_mail(&key, &record.id, transient(), service.now())
                .expect("finish");
            assert_eq!(status, Some(MailStatus::Queued));
            assert!(
                crate::storage::queue::due(&service.db, WorkKind::Mail, service.now(), None, 10)
                    .expect("due")
                    .is_empty(),
                "the retry waits for its delay"
            );
            clock.advance(delay);
        }
        let key = queued_entry(&service);
        let status = service
            .finish_mail(&key, &record.id, transient(), service.now())
            .expect("finish");
        assert_eq!(status, Some(MailStatus::Failed));
        let page = service.mail(&PageRequest::first(10)).expect("list");
        assert_eq!(page.data[0].attempts, 5);
        assert_eq!(
            page.data[0].error.as_deref(),
            Some("smtp: connection refused")
        );
    }

    #[test]
    fn a_sent_mail_leaves_the_queue() {
        let (service, _clock, _dir) = service(MailRoute::Smtp);
        let record = service.queue_mail(mail("paused")).expect("queue");
        let key = queued_entry(&service);
        let to_send = service.mail_to_send(&key).expect("read").expect("queued");
        assert_eq!(to_send.id, record.id);
        let status = service
            .finish_mail(&key, &record.id, Some(SendOutcome::Sent), service.now())
            .expect("finish");
        assert_eq!(status, Some(MailStatus::Sent));
        assert!(service.mail_to_send(&key).expect("read").is_none());
    }
}
