//! Periodic housekeeping: expired idempotency keys go. (Events, their deliveries and attempts are
//! purged by the delivery engine, which indexes them by expiry.)

use jiff::Timestamp;

use super::Service;
use super::events::{Event, events_prefix};
use super::pagination::{Listing, Page, PageRequest};
use super::scopes::EventType;
use super::stores::Store;
use crate::error::Result;
use crate::ids::StoreId;

/// What one pass of housekeeping removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Purged {
    /// Idempotency keys past their retention.
    pub idempotency_keys: usize,
}

impl Service {
    /// Removes what is past its retention, as of `now`.
    pub fn purge_expired(&self, now: Timestamp) -> Result<Purged> {
        let mut purged = Purged::default();
        let mut after: Option<String> = None;
        loop {
            let stores: Vec<(String, Store)> =
                self.db.list("store/", after.as_deref(), false, 100)?;
            let done = stores.len() < 100;
            for (key, store) in stores {
                purged.idempotency_keys += self.purge_idempotency_keys(&store.id, now)?;
                after = Some(key);
            }
            if done {
                return Ok(purged);
            }
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
