//! First attempts made from memory, where one host has the database to itself (see
//! [`queue::FirstAttempts`]): the fan-out hands each new delivery to the engine here instead of
//! writing its queue entry, while [`MAX_GIVEN`] allow, and keeps its event's outbox entry; the
//! engine settles each delivery once its first attempt is recorded (or it needs none), and the
//! outbox entry is removed once all of its deliveries are settled. Where hosts share the
//! database nothing is handed over, and only the entries an earlier sled host kept are looked
//! at as below.
//!
//! What a stop, a crash or an error leaves is found from the outbox: an entry that may have been
//! kept when the engine started (up to the mark the fan-out keeps, [`FirstAttempts::kept_mark`]),
//! or released after an error, is fanned out again, finding the deliveries it made and queuing
//! those still pending ([`FirstAttempts::suspect`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::model::delivery::TargetRef;
use crate::model::error::Result;
use crate::model::event::OUTBOX_KEPT_MARK;
use crate::model::work::{Work, WorkKind, due_ms_of};
use crate::service::deliveries::queue::{self, FirstAttempt, FirstAttempts};
use crate::storage::queue::Signal;
use crate::storage::{Db, just_before};

/// Deliveries handed over at most, not yet settled: past it the fan-out queues them.
pub const MAX_GIVEN: usize = 16_384;

/// The engine's first attempts from memory.
#[derive(Debug)]
pub struct First {
    /// Deliveries handed over at most ([`MAX_GIVEN`]).
    max_given: usize,
    /// Whether deliveries are handed over at all (not where hosts share the database: another
    /// host would fan a kept outbox entry out again).
    enabled: bool,
    /// The mark of kept entries when the engine started ([`FirstAttempts::kept_mark`]): an
    /// entry up to it may have been fanned out by an earlier run.
    at_start: Option<String>,
    /// The mark as stored now.
    mark: Mutex<Option<String>>,
    /// Where the fan-out's next listing starts (see [`FirstAttempts::listed_from`]).
    listing: Mutex<Listing>,
    /// Where the deliveries handed over are counted for the queue's metrics.
    signal: Arc<Signal>,
    state: Mutex<State>,
}

/// Where the fan-out lists the outbox from: after a key (`None`: the head).
#[derive(Debug, Default)]
struct Listing {
    /// Where the last call left off.
    cursor: Option<String>,
    /// Where an entry was put behind it since (a commit, a released entry): the next call
    /// starts there instead, if it lies before the cursor (`Some(None)`: at the head).
    back_to: Option<Option<String>>,
}

#[derive(Debug, Default)]
struct State {
    /// Each kept outbox entry, with how many of its deliveries are not settled yet (0: all are,
    /// and its removal is under way).
    held: HashMap<String, usize>,
    /// Each delivery handed over (the key its queue entry would have), with its outbox entry.
    given: HashMap<String, String>,
    /// Entries released after an error: fanned out again as at a start.
    released: HashSet<String>,
    /// Deliveries handed over and not yet taken into the engine's lanes: the lane, the key and
    /// the entry as the queue stores it.
    inbox: Vec<(WorkKind, String, Vec<u8>)>,
    /// Outbox entries all of whose deliveries are settled, to remove.
    done: Vec<String>,
}

impl First {
    /// The state for an engine starting on `db`.
    pub fn new(db: &Db) -> Result<Self> {
        Self::with(db, !db.is_shared())
    }

    /// The state on `db`, handing deliveries over or not (`enabled`). Where none are, the
    /// entries kept before (a host that ran on sled, its storage moved to PostgreSQL with
    /// `export` and `import`) are still fanned out with a look for what they made.
    fn with(db: &Db, enabled: bool) -> Result<Self> {
        let at_start = db.read::<String>(OUTBOX_KEPT_MARK)?;
        Ok(Self {
            max_given: MAX_GIVEN,
            enabled,
            mark: Mutex::new(at_start.clone()),
            listing: Mutex::default(),
            at_start,
            signal: db.delivery_signal(),
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the fan-out asks.
    pub fn attempts(&self) -> Option<&dyn FirstAttempts> {
        Some(self as &dyn FirstAttempts)
    }

    /// Makes the next listing of the outbox read the entry `key`, wherever the last one left
    /// off (`""`: from the head).
    pub fn list_from(&self, key: &str) {
        let at = (!key.is_empty()).then(|| just_before(key).to_owned());
        let mut listing = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        let earlier = match &listing.back_to {
            None => true,
            Some(back) => before(at.as_deref(), back.as_deref()),
        };
        if earlier {
            listing.back_to = Some(at);
        }
    }

    /// Takes the deliveries of the outbox entry `outbox` that the fan-out handed over. On an
    /// error none is taken, and the entry is released to be fanned out again (which queues them).
    pub fn give(&self, outbox: &str, given: Vec<FirstAttempt>) -> Result<()> {
        if given.is_empty() {
            return Ok(());
        }
        let encoded = given
            .into_iter()
            .map(|(key, entry)| {
                let lane = match entry.target {
                    TargetRef::Webhook(_) => WorkKind::Webhook,
                    TargetRef::Component(_) => WorkKind::Component,
                };
                Ok((lane, key, serde_json::to_vec(&Work::Delivery(entry))?))
            })
            .collect::<Result<Vec<_>>>();
        let encoded = match encoded {
            Ok(encoded) => encoded,
            Err(e) => {
                self.state().released.insert(outbox.to_owned());
                self.list_from(outbox);
                return Err(e);
            }
        };
        let mut state = self.state();
        state.held.insert(outbox.to_owned(), encoded.len());
        state.released.remove(outbox);
        for (lane, key, bytes) in encoded {
            self.signal.hold(due_ms_of(&key).unwrap_or(0));
            state.given.insert(key.clone(), outbox.to_owned());
            state.inbox.push((lane, key, bytes));
        }
        Ok(())
    }

    /// Removes the outbox entries all of whose deliveries are settled, at once (the engine
    /// stopping: what it settled is not left to the next start to fan out again).
    pub fn remove_done(&self, db: &Db) -> Result<()> {
        let done = self.take_done();
        if done.is_empty() {
            return Ok(());
        }
        let removed = queue::remove_outbox_entries(db, &done);
        self.removed(done, removed.is_ok());
        removed
    }

    /// The deliveries handed over since the last call, for the engine's lanes.
    pub fn take_inbox(&self) -> Vec<(WorkKind, String, Vec<u8>)> {
        std::mem::take(&mut self.state().inbox)
    }

    /// Whether the queue key `key` is a delivery handed over (its entry was never written).
    pub fn is_given(&self, key: &str) -> bool {
        self.enabled && self.state().given.contains_key(key)
    }

    /// Settles the delivery handed over as `key` (no other: a queued one is not in here): its
    /// first attempt is recorded, or it needs none (`ok`); or an error cut it short (`!ok`),
    /// and its outbox entry is released to be fanned out again (which queues it).
    pub fn settle(&self, key: &str, ok: bool) {
        if !self.enabled {
            return;
        }
        let mut state = self.state();
        let Some(outbox) = state.given.remove(key) else {
            return;
        };
        self.signal.release(due_ms_of(key).unwrap_or(0));
        if !ok {
            // Released whole: the fan-out finds the deliveries settled meanwhile made and their
            // attempts recorded; those still in flight are settled in vain.
            state.held.remove(&outbox);
            drop(state);
            self.list_from(&outbox);
            self.state().released.insert(outbox);
            return;
        }
        let Some(left) = state.held.get_mut(&outbox) else {
            return; // Released meanwhile.
        };
        *left = left.saturating_sub(1);
        if *left == 0 {
            state.done.push(outbox);
        }
    }
}

/// Whether the listing position `a` lies before `b` (`None`: the head).
fn before(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (None, b) => b.is_some(),
        (Some(_), None) => false,
        (Some(a), Some(b)) => a < b,
    }
}

impl Drop for First {
    /// The engine stopped: what it held is no longer counted (its outbox entries are kept, and
    /// the next engine's fan-out finds them).
    fn drop(&mut self) {
        for key in self.state().given.keys() {
            self.signal.release(due_ms_of(key).unwrap_or(0));
        }
    }
}

impl FirstAttempts for First {
    fn held(&self, key: &str) -> bool {
        self.state().held.contains_key(key)
    }

    fn suspect(&self, key: &str) -> bool {
        self.at_start.as_deref().is_some_and(|last| key <= last)
            || self.state().released.contains(key)
    }

    fn room(&self) -> usize {
        if !self.enabled {
            return 0;
        }
        self.max_given.saturating_sub(self.state().given.len())
    }

    fn kept_mark(&self) -> Option<String> {
        self.mark.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn kept_up_to(&self, key: String) {
        let mut mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
        if mark.as_ref().is_none_or(|m| *m < key) {
            *mark = Some(key);
        }
    }

    fn listed_from(&self) -> Option<String> {
        if !self.enabled {
            // From the head: where hosts share the database, another host's entries a call
            // passes over (see `peers`) lie behind any position.
            return None;
        }
        let mut listing = self.listing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(back) = listing.back_to.take()
            && before(back.as_deref(), listing.cursor.as_deref())
        {
            listing.cursor = back;
        }
        listing.cursor.clone()
    }

    fn list_next_after(&self, key: Option<String>) {
        self.listing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cursor = key;
    }

    fn take_done(&self) -> Vec<String> {
        std::mem::take(&mut self.state().done)
    }

    fn removed(&self, keys: Vec<String>, removed: bool) {
        let mut state = self.state();
        if !removed {
            state.done.extend(keys);
            return;
        }
        for key in keys {
            if state.held.get(&key) == Some(&0) {
                state.held.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::delivery::{Delivery, DeliveryStatus, Outcome, attempts_prefix};
    use crate::model::event::Event;
    use crate::model::event::{OUTBOX_PREFIX, OutboxEntry};
    use crate::service::Service;
    use crate::service::deliveries::queue::fan_out;
    use crate::service::deliveries::queue::tests::{paid, publish_paid_hooks, with_hooked_plugin};
    use crate::storage::queue::due;

    /// A store whose plugin has three webhooks taking `order.paid`, with its install fanned
    /// out (no first attempts from memory).
    fn store_with_three_hooks() -> (Service, crate::model::store::Store, tempfile::TempDir) {
        let (service, _clock, dir) = with_hooked_plugin();
        publish_paid_hooks(&service, "three", 3);
        let store = service.create_store("three.example").expect("store");
        service.install(&store.id, "three").expect("install");
        fan_out(&service, service.now(), 256, None, |_, _, _| {}).expect("fan out");
        let queued = due(&service.db, WorkKind::Webhook, service.now(), None, 100).expect("due");
        for (key, _) in queued {
            service.db.tx_relaxed(|tx| tx.remove(&key)).expect("clear");
        }
        (service, store, dir)
    }

    /// One fan-out call with `first`, its deliveries handed over.
    fn fan_out_call(service: &Service, first: &First) -> queue::FannedOut {
        let given = |_: Event, key: &str, given| first.give(key, given).expect("give");
        fan_out(service, service.now(), 256, first.attempts(), given).expect("fan out")
    }

    /// [`fan_out_call`]; returns the entries taken.
    fn fan_out_with(service: &Service, first: &First) -> usize {
        fan_out_call(service, first).entries
    }

    fn outbox(service: &Service) -> usize {
        let entries = service
            .db
            .list::<OutboxEntry>(OUTBOX_PREFIX, None, false, 100);
        entries.expect("outbox").len()
    }

    fn queued(service: &Service) -> Vec<String> {
        let entries = due(&service.db, WorkKind::Webhook, service.now(), None, 100);
        entries
            .expect("due")
            .into_iter()
            .map(|(key, _)| key)
            .collect()
    }

    fn deliveries(service: &Service, store: &crate::model::store::Store) -> Vec<Delivery> {
        let prefix = format!("dlv/{}/", store.id);
        let listed = service.db.list::<Delivery>(&prefix, None, false, 100);
        listed
            .expect("deliveries")
            .into_iter()
            .map(|(_, d)| d)
            .collect()
    }

    /// Records the first attempt of the delivery handed over as `key`, succeeded.
    fn record_ok(service: &Service, key: &str, entry: &crate::model::delivery::DueEntry) {
        let mut outcome = Outcome::unsent(service.now(), String::new());
        outcome.succeeded = true;
        outcome.status_code = Some(200);
        service
            .record_attempts(&[((key, false), entry, &outcome)])
            .expect("record");
    }

    #[test]
    fn a_kept_outbox_entry_is_passed_over_until_its_deliveries_are_settled_then_removed() {
        let (service, store, _dir) = store_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        paid(&service, &store, 1);
        assert_eq!(fan_out_with(&service, &first), 1);
        let given = first.take_inbox();
        assert_eq!(given.len(), 3, "each delivery handed over");
        assert!(queued(&service).is_empty(), "no queue entry written");
        let made = deliveries(&service, &store);
        assert_eq!(made.len(), 3, "each delivery written");
        for d in &made {
            assert_eq!(d.status, DeliveryStatus::Pending);
            assert_eq!(
                d.next_attempt_at,
                Some(service.now()),
                "due now, as the API shows"
            );
            assert!(
                given
                    .iter()
                    .any(|(_, key, _)| *key == d.due_key(service.now()))
            );
        }
        assert_eq!(outbox(&service), 1, "the outbox entry is kept");
        assert_eq!(fan_out_with(&service, &first), 0, "and passed over");

        for (_, key, bytes) in &given[..2] {
            let Work::Delivery(entry) = crate::storage::Db::decode(key, bytes).expect("work")
            else {
                panic!("a delivery");
            };
            record_ok(&service, key, &entry);
            first.settle(key, true);
        }
        fan_out_with(&service, &first);
        assert_eq!(outbox(&service), 1, "kept while a delivery is not settled");
        first.settle(&given[2].1, true);
        fan_out_with(&service, &first);
        assert_eq!(outbox(&service), 0, "removed by the next fan-out");
        assert!(!first.held("anything") && first.state().held.is_empty());
        assert_eq!(first.room(), MAX_GIVEN);
    }

    #[test]
    fn after_a_crash_a_kept_entry_queues_its_pending_deliveries_and_makes_none_again() {
        let (service, store, _dir) = store_with_three_hooks();
        let before = First::new(&service.db).expect("first");
        paid(&service, &store, 1);
        fan_out_with(&service, &before);
        let given = before.take_inbox();
        let (_, key, bytes) = &given[0];
        let Work::Delivery(entry) = crate::storage::Db::decode(key, bytes).expect("work") else {
            panic!("a delivery");
        };
        record_ok(&service, key, &entry);
        let made: Vec<_> = deliveries(&service, &store)
            .into_iter()
            .map(|d| d.id)
            .collect();
        drop(before); // The crash: the other two were never attempted.

        // An event committed after the crash was never kept: it is fanned out as usual.
        paid(&service, &store, 2);
        let after = First::new(&service.db).expect("first");
        assert_eq!(fan_out_with(&service, &after), 2);
        let queued = queued(&service);
        assert_eq!(
            queued.len(),
            2,
            "the two pending deliveries queued: {queued:?}"
        );
        let again = deliveries(&service, &store);
        assert_eq!(again.len(), 6);
        let kept: Vec<_> = again.iter().filter(|d| made.contains(&d.id)).collect();
        assert_eq!(kept.len(), 3, "none of the first event's made again");
        let succeeded = kept
            .iter()
            .filter(|d| d.status == DeliveryStatus::Succeeded);
        assert_eq!(succeeded.count(), 1);
        let attempts = service
            .db
            .list::<serde_json::Value>(&attempts_prefix(&store.id, &entry.target), None, false, 10)
            .expect("attempts");
        assert_eq!(attempts.len(), 1, "its attempt recorded once");
        for d in kept.iter().filter(|d| d.status == DeliveryStatus::Pending) {
            let at = d.next_attempt_at.expect("due");
            assert!(queued.contains(&d.due_key(at)), "{} queued", d.id);
        }
        assert_eq!(after.take_inbox().len(), 3, "the new event's handed over");
        assert_eq!(
            outbox(&service),
            1,
            "the new event's entry kept, the first one's removed"
        );
    }

    /// An `order.paid` event fanned out with `first`: its three deliveries, handed over.
    fn kept_event(
        service: &Service,
        store: &crate::model::store::Store,
        first: &First,
    ) -> Vec<(WorkKind, String, Vec<u8>)> {
        paid(service, store, 1);
        fan_out_with(service, first);
        let given = first.take_inbox();
        assert_eq!(given.len(), 3, "each delivery handed over");
        given
    }

    /// The kept event's entry fanned out again with `first`: its three deliveries queued, none
    /// made again, the entry removed.
    fn assert_queued_again(service: &Service, store: &crate::model::store::Store, first: &First) {
        assert_eq!(fan_out_with(service, first), 1, "taken again");
        assert!(first.take_inbox().is_empty(), "nothing handed over");
        assert_eq!(queued(service).len(), 3, "each pending delivery queued");
        assert_eq!(deliveries(service, store).len(), 3, "none made again");
        assert_eq!(outbox(service), 0);
    }

    #[test]
    fn a_host_that_hands_nothing_over_still_queues_what_a_kept_entry_left_pending() {
        let (service, store, _dir) = store_with_three_hooks();
        let before = First::new(&service.db).expect("first");
        kept_event(&service, &store, &before);
        drop(before); // A crash; then the storage moved where hosts share it.
        let shared = First::with(&service.db, false).expect("first");
        assert_queued_again(&service, &store, &shared);
        paid(&service, &store, 2);
        assert_eq!(fan_out_with(&service, &shared), 1);
        assert_eq!(
            queued(&service).len(),
            6,
            "a new event's deliveries queued as before"
        );
    }

    #[test]
    fn a_released_entry_is_fanned_out_again_and_queues_what_is_pending() {
        let (service, store, _dir) = store_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let given = kept_event(&service, &store, &first);
        first.settle(&given[0].1, false); // An error: the whole entry is released.
        assert_queued_again(&service, &store, &first);
        for (_, key, _) in &given[1..] {
            first.settle(key, true); // Settled in vain: the entry is gone.
        }
        assert!(first.state().held.is_empty() && first.state().done.is_empty());
    }

    #[test]
    fn the_fan_out_reads_on_from_where_it_left_off_and_from_an_entry_committed_behind() {
        let (service, store, _dir) = store_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let behind = paid(&service, &store, 1);
        paid(&service, &store, 2);
        // The first event's entry, committed last (as a transaction that took its id first
        // and committed after another's would).
        let key = crate::model::event::outbox_key(&behind.id);
        let entry: OutboxEntry = service.db.read(&key).expect("read").expect("entry");
        service.db.tx_relaxed(|tx| tx.remove(&key)).expect("remove");
        assert_eq!(fan_out_with(&service, &first), 1);
        service
            .db
            .tx_relaxed(|tx| tx.write(&key, &entry))
            .expect("write");
        assert_eq!(
            fan_out_with(&service, &first),
            0,
            "behind where the last call left off"
        );
        first.list_from(&key); // What its commit tells the engine's fan-out.
        assert_eq!(fan_out_with(&service, &first), 1, "read from there");
        assert_eq!(first.take_inbox().len(), 6);
        assert_eq!(deliveries(&service, &store).len(), 6);
    }

    #[test]
    fn a_call_that_ends_before_the_listing_does_leaves_the_rest_for_the_next() {
        let (service, clock, _dir) = with_hooked_plugin();
        publish_paid_hooks(&service, "fifty", 50);
        let store = service.create_store("fifty.example").expect("store");
        service.install(&store.id, "fifty").expect("install");
        fan_out(&service, service.now(), 256, None, |_, _, _| {}).expect("fan out");
        for n in 0..30 {
            // A millisecond apart: their keys differ before their last character.
            clock.advance(jiff::SignedDuration::from_millis(1));
            paid(&service, &store, n);
        }
        let first = First::new(&service.db).expect("first");
        let mut calls = Vec::new();
        loop {
            let fanned = fan_out_call(&service, &first);
            calls.push(fanned.entries);
            if !fanned.more {
                break;
            }
        }
        // A call ends at 1 024 deliveries: 21 events of 50 (an event is not split).
        assert!(calls.len() > 1 && calls[0] < 30, "{calls:?}");
        assert_eq!(calls.iter().sum::<usize>(), 30, "{calls:?}");
        assert_eq!(first.take_inbox().len(), 30 * 50);
        assert_eq!(outbox(&service), 30, "each kept");
    }

    #[test]
    fn past_its_room_the_fan_out_queues_the_deliveries_as_before() {
        let (service, store, _dir) = store_with_three_hooks();
        let mut first = First::new(&service.db).expect("first");
        first.max_given = 2;
        paid(&service, &store, 1);
        paid(&service, &store, 2);
        assert_eq!(fan_out_with(&service, &first), 2);
        assert_eq!(first.take_inbox().len(), 2, "two handed over");
        assert_eq!(queued(&service).len(), 4, "the other four queued");
        assert_eq!(
            outbox(&service),
            1,
            "the entry with deliveries handed over is kept"
        );
        assert_eq!(first.room(), 0);
    }
}
