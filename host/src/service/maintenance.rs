//! Periodic housekeeping: events older than the retention and expired idempotency keys go.

use jiff::{SignedDuration, Timestamp};

use super::Service;
use super::events::{EVENT_RETENTION_DAYS, Event, events_prefix};
use super::pagination::{Listing, Page, PageRequest};
use super::scopes::EventType;
use super::stores::Store;
use crate::error::Result;
use crate::ids::StoreId;

/// What one pass of housekeeping removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Events past the retention.
    pub events: usize,
    /// Idempotency keys past theirs.
    pub idempotency_keys: usize,
}

impl Service {
    /// Removes what is past its retention, as of `now`.
    pub fn purge_expired(&self, now: Timestamp) -> Result<Purged> {
        let cutoff = now - SignedDuration::from_hours(24 * EVENT_RETENTION_DAYS);
        let mut purged = Purged::default();
        let mut after: Option<String> = None;
        loop {
            let stores: Vec<(String, Store)> =
                self.db.list("store/", after.as_deref(), false, 100)?;
            let done = stores.len() < 100;
            for (key, store) in stores {
                purged.events += self.purge_events(&store.id, cutoff)?;
                purged.idempotency_keys += self.purge_idempotency_keys(&store.id, now)?;
                after = Some(key);
            }
            if done {
                return Ok(purged);
            }
        }
    }

    /// Events are keyed by time-ordered ids, so the old ones come first.
    fn purge_events(&self, store: &StoreId, cutoff: Timestamp) -> Result<usize> {
        let prefix = events_prefix(store);
        let mut purged = 0;
        loop {
            let batch: Vec<(String, Event)> = self.db.list(&prefix, None, false, 256)?;
            let old: Vec<String> = batch
                .iter()
                .take_while(|(_, e)| e.created_at < cutoff)
                .map(|(k, _)| k.clone())
                .collect();
            if old.is_empty() {
                return Ok(purged);
            }
            self.db.tx(|tx| old.iter().try_for_each(|k| tx.remove(k)))?;
            purged += old.len();
        }
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
            kind.is_none_or(|k| e.kind == k)
        })
    }
}
