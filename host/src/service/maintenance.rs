//! Periodic housekeeping: expired idempotency keys go, and so do the outbound API's records past
//! their retention (banners, feed cards, messages, quota counters: see
//! [`crate::service::notifications::retention`]) and the host's mail after [`MAIL_RETENTION`]. (Events, their
//! deliveries and attempts are purged by the delivery engine, which indexes them by expiry.)

use std::ops::ControlFlow;

use jiff::{SignedDuration, Timestamp};
use serde::de::DeserializeOwned;

use super::Service;
use crate::model::error::Result;
use crate::model::event::{Event, events_prefix};
use crate::model::ids::StoreId;
use crate::model::scopes::EventType;
use crate::model::store::Store;
use crate::service::pagination::{Listing, Page, PageRequest};
use crate::storage::Db;

/// The host's mail is kept this long.
pub const MAIL_RETENTION: SignedDuration = SignedDuration::from_hours(30 * 24);

/// What one pass of housekeeping removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Idempotency keys past their retention.
    pub idempotency_keys: usize,
    /// Banners, feed cards, messages and quota counters past their retention.
    pub outbound: crate::service::notifications::retention::OutboundPurged,
    /// The host's mail past [`MAIL_RETENTION`].
    pub mail: usize,
    /// Sessions and invitations that ended.
    pub sessions_and_invitations: usize,
}

/// What [`sweep`] does with a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Not due yet.
    Keep,
    /// Due: remove it (and the keys `also` names).
    Remove,
    /// Not due, and neither is any record after it in key order: stop the scan.
    Stop,
}

/// Removes the records under `prefix` that `decide` says are due, with the keys `also` names for
/// each, in key order and in batches (one transaction each, which reads each record again so
/// that one changed since the scan is decided again). Returns how many records went.
pub fn sweep<T: DeserializeOwned>(
    db: &Db,
    prefix: &str,
    decide: impl Fn(&str, &T) -> Sweep,
    also: impl Fn(&T) -> Vec<String>,
) -> Result<usize> {
    let mut removed = 0;
    db.scan(prefix).batches(|batch: Vec<(String, T)>| {
        let mut next = ControlFlow::Continue(());
        let mut due = Vec::new();
        for (key, record) in &batch {
            match decide(key, record) {
                Sweep::Keep => {}
                Sweep::Remove => due.push(key.as_str()),
                Sweep::Stop => {
                    next = ControlFlow::Break(());
                    break;
                }
            }
        }
        if !due.is_empty() {
            removed += db.tx(|tx| {
                let mut removed = 0;
                for key in &due {
                    let Some(record) = tx.read::<T>(key)? else {
                        continue;
                    };
                    if decide(key, &record) == Sweep::Remove {
                        tx.remove(key)?;
                        for other in also(&record) {
                            tx.remove(&other)?;
                        }
                        removed += 1;
                    }
                }
                Ok(removed)
            })?;
        }
        Ok(next)
    })?;
    Ok(removed)
}

impl Service {
    /// Removes what is past its retention, as of `now`.
    pub fn purge_expired(&self, now: Timestamp) -> Result<Purged> {
        let mut purged = Purged::default();
        self.db.scan_all("store/", |_, store: Store| {
            purged.idempotency_keys += self.purge_idempotency_keys(&store.id, now)?;
            let outbound = self.purge_outbound(&store.id, now)?;
            purged.outbound.banners += outbound.banners;
            purged.outbound.feed_cards += outbound.feed_cards;
            purged.outbound.messages += outbound.messages;
            purged.outbound.counters += outbound.counters;
            Ok(())
        })?;
        purged.mail = self.purge_mail(now, MAIL_RETENTION)?;
        purged.sessions_and_invitations = self.purge_accounts(now)?;
        Ok(purged)
    }

    /// Whether storage answers: a read of a fixed key (absent or not) succeeds. What
    /// `GET /readyz` calls.
    pub fn check_storage(&self) -> Result<()> {
        self.db
            .read::<serde_json::Value>("health/probe")
            .map(|_| ())
    }

    /// A store's events, newest first (operator API).
    pub fn list_events(
        &self,
        store: &StoreId,
        kind: Option<EventType>,
        page: &PageRequest,
    ) -> Result<Page<Event>> {
        self.store(store)?;
        let prefix = events_prefix(store);
        let list_id = format!("{prefix}?{kind:?}");
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |e: &Event| {
            kind.is_none_or(|k| e.kind() == k)
        })
    }
}
