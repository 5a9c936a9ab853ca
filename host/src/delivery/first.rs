//! First attempts made from memory, where one host has the database to itself (see
//! [`queue::FirstAttempts`]): the fan-out hands each new delivery to the engine here instead of
//! writing it and its queue entry, while [`MAX_GIVEN`] allow, and keeps its event's outbox
//! entry; the delivery is written once, with its first attempt, when the engine records that (or
//! pending, [`queue::write_pending`], once it has waited [`WRITE_PENDING_AFTER`] for it), and the
//! outbox entry is removed once all of its deliveries are settled: by the record of the last
//! one for an event fanned out alone, else by the fan-out's next transaction. An event fanned
//! out alone may also have its expiry record left to the engine ([`PendingExpiry`]), written
//! with its first attempts' records or its deliveries written pending (see
//! [`First::alongside`]), so that one event at a time costs the fan-out no commit. Where hosts
//! share the database nothing is handed over, and only the entries an earlier sled host kept
//! are looked at as below.
//!
//! A store's deliveries handed over and not settled are bounded ([`STORE_AHEAD`]): past it, its
//! next heavy event's outbox entry and those after it are parked, listed and kept in memory (a
//! hundred bytes or so each, where an event's deliveries made take about a kilobyte each), and
//! taken on again once the engine has settled half of them; other stores' events go on
//! meanwhile (see [`StoreRoom`]).
//!
//! What a stop, a crash or an error leaves is found from the outbox: an entry that may have been
//! kept when the engine started (up to the mark the fan-out keeps, [`FirstAttempts::kept_mark`]),
//! or released after an error (its deliveries not yet written are written pending first), is
//! fanned out again, finding the deliveries it made and queuing those still pending, and making
//! those never written ([`FirstAttempts::suspect`]).

use std::collections::{BTreeMap, VecDeque};

use foldhash::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};

use jiff::Timestamp;

use crate::model::delivery::{Delivery, TargetRef, millis};
use crate::model::error::Result;
use crate::model::event::{OUTBOX_KEPT_MARK, OutboxEntry};
use crate::model::ids::StoreId;
use crate::model::work::{Work, WorkKind, due_ms_of};
use crate::service::deliveries::queue::{
    self, Alongside, FirstAttempts, Handed, PendingExpiry, StoreRoom, Stored,
};
use crate::storage::queue::Signal;
use crate::storage::{Db, just_before};

use super::recent::RecentEvent;

/// Deliveries handed over at most, not yet settled: past it the fan-out queues them.
pub const MAX_GIVEN: usize = 16_384;

/// A store's deliveries handed over and not settled at most, before its next heavy event and
/// those after it are parked ([`FirstAttempts::park`], [`StoreRoom`]): a store's burst waits in
/// the outbox (its entries listed, in memory), not as deliveries made ahead of their attempts,
/// and it is taken on again once the store's deliveries handed over are down to half of it.
/// Well above what one store's attempts run at once (half an engine's pool at most: 32 webhook
/// attempts, 64 invocations by default), so that half of it is still plenty of work for them
/// when the fan-out is rung; an engine with larger pools raises it to four times their places
/// ([`First::for_pools`]), up to [`MAX_GIVEN`]. Without it, a burst's
/// deliveries were all made at once, about a kilobyte each, in memory touched for the first
/// time: page faults were 17.7 % of the fan-out burst's CPU samples (see PERFORMANCE.md, the
/// thirty-eighth pass).
pub const STORE_AHEAD: usize = 2048;

/// Outbox entries parked at most, over all stores: past it, nothing more is parked and the
/// fan-out hands deliveries over up to [`MAX_GIVEN`] as it does without a bound.
pub const MAX_PARKED: usize = 65_536;

/// How long a delivery handed over waits for its first attempt to be recorded before it is
/// written pending (by the host's clock, from its fan-out): the API shows it from then on, and a
/// replay or a resend finds it. Most are recorded within milliseconds, and written only then.
pub const WRITE_PENDING_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The engine's first attempts from memory.
#[derive(Debug)]
pub struct First {
    /// Deliveries handed over at most ([`MAX_GIVEN`]).
    max_given: usize,
    /// A store's deliveries handed over at most before its events are parked ([`STORE_AHEAD`]).
    store_ahead: usize,
    /// Entries parked at most ([`MAX_PARKED`]).
    max_parked: usize,
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
    /// Each kept outbox entry.
    held: HashMap<String, Held>,
    /// Each delivery handed over, by the key its queue entry would have (shared with `waiting`).
    given: HashMap<Arc<str>, Given>,
    /// The deliveries handed over, in the order they were (the due ms in their keys, and the
    /// keys): each still given once it has waited [`WRITE_PENDING_AFTER`] is written pending.
    waiting: VecDeque<(u64, Arc<str>)>,
    /// Held entries an error cut short: their deliveries not yet written are written pending
    /// ([`First::write_pending`]), and then they are released.
    releasing: Vec<Arc<str>>,
    /// Deliveries an error cut short, not yet written: written pending with their entry's
    /// others (see `releasing`).
    cut_short: Vec<Arc<Delivery>>,
    /// Entries released after an error: fanned out again as at a start.
    released: HashSet<String>,
    /// Deliveries handed over and not yet taken into the engine's lanes: the lane, the key and
    /// the work its queue entry would hold (never encoded: it is in memory only).
    inbox: Vec<(WorkKind, String, Work)>,
    /// Outbox entries all of whose deliveries are settled, to remove.
    done: Vec<String>,
    /// Each store's deliveries handed over and not settled (see [`STORE_AHEAD`]).
    ahead: HashMap<StoreId, usize>,
    /// Each store's parked outbox entries, in key order (see [`FirstAttempts::park`]).
    parked: HashMap<StoreId, BTreeMap<String, OutboxEntry>>,
    /// The keys of the parked entries.
    parked_keys: HashSet<String>,
}

/// A kept outbox entry.
#[derive(Debug)]
struct Held {
    /// How many of its deliveries are not settled yet (0: all are, and its removal is under
    /// way).
    left: usize,
    /// Its event's expiry record, while no transaction that wrote it is known to have committed
    /// (see [`PendingExpiry`]).
    expiry: Option<PendingExpiry>,
    /// Whether the record of a first attempt not yet settled carries `expiry` (see
    /// [`First::alongside`]): no other record takes it meanwhile.
    expiry_carried: bool,
}

/// A delivery handed over, as its attempt takes it ([`First::handed`]).
#[derive(Debug, Clone)]
pub struct Made {
    /// The delivery as made: its queue entry was never written, and the delivery perhaps not
    /// either (the recorder is handed it with the attempt).
    pub delivery: Arc<Delivery>,
    /// Whether its event was fanned out alone ([`Handed::alone`]): only such a delivery's record
    /// may write besides ([`First::alongside`]).
    pub alone: bool,
    /// Its event, while the recent events keep it: an event fanned out to 50 targets is found
    /// by its 50 attempts without building its key and looking it up 50 times. Once let go
    /// (the recent events past their bounds), the attempt looks it up, or reads it.
    pub event: Weak<RecentEvent>,
}

/// A delivery handed over.
#[derive(Debug)]
struct Given {
    /// Its event's outbox entry (shared by the entry's deliveries).
    outbox: Arc<str>,
    /// The delivery as made.
    delivery: Arc<Delivery>,
    /// Its event as the fan-out kept it among the recent ones ([`super::recent`]), while they
    /// keep it: its attempt need not look it up. Weak, so that what is handed over holds no
    /// event's contents past the recent events' bounds (of one they let go, only its own
    /// allocation, about half a kilobyte, until its deliveries settle).
    event: Weak<RecentEvent>,
    /// Who writes it, if anyone yet.
    written: Written,
    /// Whether its event was fanned out alone ([`Handed::alone`]): the last of the event's
    /// first attempts' records removes the outbox entry (see [`First::alongside`]); another
    /// entry is removed by the fan-out's next transaction.
    alone: bool,
    /// What the transaction recording its first attempt writes besides (see
    /// [`First::alongside`]): its event's expiry record, and the removal of its outbox entry.
    carries: Carries,
}

/// Who writes a delivery handed over (see [`Given::written`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// No one yet.
    No,
    /// Written pending, or being written so ([`First::write_pending`]).
    Pending,
    /// The record of its first attempt ([`First::written_by_record`]): not written until that
    /// commits.
    ByRecord,
}

/// See [`Given::carries`].
#[derive(Debug, Default, Clone, Copy)]
struct Carries {
    expiry: bool,
    outbox: bool,
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
            store_ahead: STORE_AHEAD,
            max_parked: MAX_PARKED,
            enabled,
            mark: Mutex::new(at_start.clone()),
            listing: Mutex::default(),
            at_start,
            signal: db.delivery_signal(),
            state: Mutex::default(),
        })
    }

    /// The state for an engine whose pools hold `places` attempts together: a store's
    /// deliveries handed over are bounded at four times that if it is more than
    /// [`STORE_AHEAD`] (up to [`MAX_GIVEN`]).
    pub fn for_pools(mut self, places: usize) -> Self {
        self.store_ahead = STORE_AHEAD
            .max(places.saturating_mul(4))
            .min(self.max_given);
        self
    }

    /// A store's deliveries handed over at or under which its parked events are taken on again.
    fn store_low(&self) -> usize {
        self.store_ahead / 2
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

    /// Marks the delivery handed over as `key` as written by the record of its first attempt,
    /// when it is neither written (pending) nor being written: from then on nothing else writes
    /// it ([`First::write_pending`] passes it over), so that record writes it as made without
    /// reading it first: returns [`Stored::Never`] when it marked it, else [`Stored::Maybe`] (the
    /// record reads it). Should that record fail, [`First::settle`] takes the delivery as not
    /// written.
    pub fn written_by_record(&self, key: &str) -> Stored {
        if !self.enabled {
            return Stored::Maybe;
        }
        let mut state = self.state();
        match state.given.get_mut(key) {
            Some(given) if given.written == Written::No => {
                given.written = Written::ByRecord;
                Stored::Never
            }
            _ => Stored::Maybe,
        }
    }

    /// Takes the deliveries of the outbox entry `outbox` that the fan-out handed over, with its
    /// event's expiry record if the fan-out left it to be written with them, and the event as the
    /// recent events keep it (see [`Made::event`]).
    pub fn give(&self, outbox: &str, handed: Handed, event: Weak<RecentEvent>) {
        if handed.is_empty() {
            return;
        }
        let Handed {
            deliveries,
            expiry,
            alone,
        } = handed;
        let mut state = self.state();
        if let Some((_, delivery)) = deliveries.first() {
            let ahead = state.ahead.entry(delivery.store_id.clone()).or_default();
            *ahead = ahead.saturating_add(deliveries.len());
        }
        let held = Held {
            left: deliveries.len(),
            expiry,
            expiry_carried: false,
        };
        state.held.insert(outbox.to_owned(), held);
        state.released.remove(outbox);
        let outbox: Arc<str> = Arc::from(outbox);
        for (key, delivery) in deliveries {
            let lane = match delivery.target {
                TargetRef::Webhook(_) => WorkKind::Webhook,
                TargetRef::Component(_) => WorkKind::Component,
            };
            let work = delivery.work();
            let due = due_ms_of(&key).unwrap_or(0);
            self.signal.hold(due);
            let given = Given {
                outbox: outbox.clone(),
                delivery: Arc::new(delivery),
                event: event.clone(),
                written: Written::No,
                alone,
                carries: Carries::default(),
            };
            let shared: Arc<str> = Arc::from(key.as_str());
            state.given.insert(shared.clone(), given);
            state.waiting.push_back((due, shared));
            state.inbox.push((lane, key, work));
        }
        if state.waiting.len() > 4 * self.max_given.max(1) {
            // Settled long ago, their time not yet come (a clock that stands still): let go.
            let State { waiting, given, .. } = &mut *state;
            waiting.retain(|(_, key)| given.contains_key(key));
        }
    }

    /// Writes pending the deliveries handed over that have waited [`WRITE_PENDING_AFTER`] at
    /// `now`, and those not yet written of entries an error cut short, which are then released
    /// to the fan-out (see [`First::settle`]), with their events' expiry records not yet
    /// written. The engine's fan-out runs it before each call.
    pub fn write_pending(&self, db: &Db, now: Timestamp) -> Result<()> {
        let waited = u64::try_from(WRITE_PENDING_AFTER.as_millis()).unwrap_or(u64::MAX);
        let until = millis(now).saturating_sub(waited);
        let (writing, settled, releasing, alongside, expiries_of) = {
            let mut state = self.state();
            let State {
                held,
                waiting,
                given,
                releasing,
                cut_short,
                ..
            } = &mut *state;
            let mut writing = Vec::new();
            while let Some((due, key)) = waiting.front() {
                if *due > until {
                    break;
                }
                if let Some(given) = given.get_mut(&**key).filter(|g| g.written == Written::No) {
                    given.written = Written::Pending;
                    writing.push((key.clone(), given.delivery.clone()));
                }
                waiting.pop_front();
            }
            if !releasing.is_empty() {
                for (key, given) in given.iter_mut() {
                    if given.written == Written::No && releasing.contains(&given.outbox) {
                        given.written = Written::Pending;
                        writing.push((key.clone(), given.delivery.clone()));
                    }
                }
            }
            // The expiry records not yet written of the entries whose deliveries are written.
            let mut expiries_of: HashSet<Arc<str>> = HashSet::default();
            let mut alongside = Alongside::default();
            let outboxes = writing.iter().filter_map(|(key, _)| given.get(key));
            for outbox in outboxes.map(|g| &g.outbox).chain(releasing.iter()) {
                // Not one that a first attempt's record carries: that writes it, or fails and
                // releases its entry, whose next fan-out writes it.
                let entry = held.get(&**outbox).filter(|h| !h.expiry_carried);
                if let Some(expiry) = entry.and_then(|h| h.expiry.clone())
                    && expiries_of.insert(outbox.clone())
                {
                    alongside.expiries.push(expiry);
                }
            }
            (
                writing,
                std::mem::take(cut_short),
                std::mem::take(releasing),
                alongside,
                expiries_of,
            )
        };
        let deliveries: Vec<&Delivery> = writing
            .iter()
            .map(|(_, d)| &**d)
            .chain(settled.iter().map(|d| &**d))
            .collect();
        if !deliveries.is_empty()
            && let Err(e) = queue::write_pending(db, &deliveries, &alongside)
        {
            // Tried again on the next call.
            let mut state = self.state();
            for (key, _) in writing.into_iter().rev() {
                if let Some(given) = state.given.get_mut(&key) {
                    given.written = Written::No;
                    state.waiting.push_front((0, key));
                }
            }
            state.cut_short.extend(settled);
            state.releasing.extend(releasing);
            return Err(e);
        }
        if !expiries_of.is_empty() {
            let mut state = self.state();
            for outbox in &expiries_of {
                if let Some(held) = state.held.get_mut(&**outbox) {
                    held.expiry = None; // Written.
                }
            }
        }
        for outbox in releasing {
            let mut state = self.state();
            state.held.remove(&*outbox);
            state.released.insert(outbox.to_string());
            drop(state);
            self.list_from(&outbox);
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
        self.removed(done.outbox, removed.is_ok());
        removed
    }

    /// The deliveries handed over since the last call, for the engine's lanes.
    pub fn take_inbox(&self) -> Vec<(WorkKind, String, Work)> {
        std::mem::take(&mut self.state().inbox)
    }

    /// How many deliveries are handed over and not settled (at most [`MAX_GIVEN`]).
    pub fn given(&self) -> usize {
        self.state().given.len()
    }

    /// The delivery handed over as `key`, as it was made (`None`: it was queued).
    #[cfg(test)]
    pub fn made(&self, key: &str) -> Option<Arc<Delivery>> {
        self.handed(key).map(|made| made.delivery)
    }

    /// The delivery handed over as `key` as it was made, with what its attempt takes besides
    /// (`None`: it was queued).
    pub fn handed(&self, key: &str) -> Option<Made> {
        if !self.enabled {
            return None;
        }
        let state = self.state();
        let given = state.given.get(key)?;
        Some(Made {
            delivery: given.delivery.clone(),
            alone: given.alone,
            event: given.event.clone(),
        })
    }

    /// What the transaction that records the first attempt of the delivery handed over as
    /// `key` writes besides ([`Service::record_attempts`](crate::service::Service::record_attempts)):
    /// its event's expiry record while none is known written and no other record in flight
    /// carries it, and its outbox entry's removal when it is the last of the entry's deliveries
    /// not settled (the others' first attempts recorded), so that an event whose deliveries were
    /// all handed over costs the fan-out no write. Nothing for a delivery that was not handed
    /// over, or whose entry is being released.
    pub fn alongside(&self, key: &str) -> Alongside {
        let mut alongside = Alongside::default();
        if !self.enabled {
            return alongside;
        }
        let mut state = self.state();
        let State {
            held,
            given,
            releasing,
            ..
        } = &mut *state;
        let Some(given) = given.get_mut(key) else {
            return alongside;
        };
        let Some(entry) = held.get_mut(&*given.outbox) else {
            return alongside;
        };
        if releasing.contains(&given.outbox) {
            return alongside;
        }
        if let Some(expiry) = entry.expiry.as_ref().filter(|_| !entry.expiry_carried) {
            alongside.expiries.push(expiry.clone());
            entry.expiry_carried = true;
            given.carries.expiry = true;
        }
        if given.alone && entry.left == 1 {
            alongside.outbox.push(given.outbox.to_string());
            given.carries.outbox = true;
        }
        alongside
    }

    /// Settles the delivery handed over as `key` (no other: a queued one is not in here): its
    /// first attempt is recorded, or it needs none (`ok`); or an error cut it short (`!ok`),
    /// and its outbox entry is released to be fanned out again (which queues it), once its
    /// deliveries not yet written are written pending ([`First::write_pending`]). An entry
    /// whose deliveries are all settled is removed by the fan-out's next transaction, unless
    /// the last one's record removed it ([`First::alongside`]).
    pub fn settle(&self, key: &str, ok: bool) {
        if !self.enabled {
            return;
        }
        let mut state = self.state();
        let Some(given) = state.given.remove(key) else {
            return;
        };
        self.signal.release(due_ms_of(key).unwrap_or(0));
        let store = &given.delivery.store_id;
        if let Some(ahead) = state.ahead.get_mut(store) {
            *ahead = ahead.saturating_sub(1);
            let now = *ahead;
            if now == 0 {
                state.ahead.remove(store);
            }
            if now == self.store_low() && state.parked.contains_key(store) {
                self.signal.ring_fan_out(); // Its parked events are taken on again.
            }
        }
        let outbox = given.outbox;
        if !ok
            && given.carries.expiry
            && let Some(held) = state.held.get_mut(&*outbox)
        {
            held.expiry_carried = false; // Not known written: as any other record takes it.
        }
        if !state.held.contains_key(&*outbox) || state.releasing.contains(&outbox) {
            return; // Released meanwhile, or being released.
        }
        if !ok {
            // Released whole: the fan-out finds the deliveries settled meanwhile made and their
            // attempts recorded; those still in flight are settled in vain. This one is written
            // pending with the others not yet written, first.
            if given.written != Written::Pending {
                state.cut_short.push(given.delivery);
            }
            state.releasing.push(outbox);
            return;
        }
        let Some(held) = state.held.get_mut(&*outbox) else {
            return;
        };
        if given.carries.expiry {
            (held.expiry, held.expiry_carried) = (None, false); // Written with the attempt.
        }
        held.left = held.left.saturating_sub(1);
        if held.left == 0 {
            if given.carries.outbox {
                state.held.remove(&*outbox); // Removed with the attempt.
            } else {
                state.done.push(outbox.to_string());
            }
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
        self.signal.set_parked(0);
    }
}

impl FirstAttempts for First {
    fn held(&self, key: &str) -> bool {
        let state = self.state();
        state.held.contains_key(key) || state.parked_keys.contains(key)
    }

    fn store_room(&self, store: &StoreId, unparked: bool) -> StoreRoom {
        if !self.enabled {
            return StoreRoom::Unbounded;
        }
        let state = self.state();
        if state.parked_keys.len() >= self.max_parked {
            // No more parked: its events go on, behind those parked or not.
            return StoreRoom::Unbounded;
        }
        if !unparked && state.parked.contains_key(store) {
            return StoreRoom::Behind;
        }
        let ahead = state.ahead.get(store).copied().unwrap_or(0);
        StoreRoom::Left(self.store_ahead.saturating_sub(ahead))
    }

    fn park(&self, entries: Vec<(String, OutboxEntry)>) {
        if entries.is_empty() {
            return;
        }
        // Should the stores' deliveries be settled meanwhile, the call sees it at its end
        // (`parked_ready`).
        let mut state = self.state();
        let State {
            parked,
            parked_keys,
            ..
        } = &mut *state;
        for (key, entry) in entries {
            parked_keys.insert(key.clone());
            match parked.get_mut(&entry.store_id) {
                Some(store) => {
                    store.insert(key, entry);
                }
                None => {
                    let store = entry.store_id.clone();
                    parked.insert(store, BTreeMap::from([(key, entry)]));
                }
            }
        }
        self.signal.set_parked(parked_keys.len());
    }

    fn unpark(&self, limit: usize) -> Vec<(String, OutboxEntry)> {
        let mut state = self.state();
        if state.parked.is_empty() {
            return Vec::new();
        }
        let State {
            parked,
            parked_keys,
            ahead,
            ..
        } = &mut *state;
        let mut taken = Vec::new();
        parked.retain(|store, entries| {
            if ahead.get(store).copied().unwrap_or(0) > self.store_low() {
                return true;
            }
            while taken.len() < limit
                && let Some((key, entry)) = entries.pop_first()
            {
                parked_keys.remove(&key);
                taken.push((key, entry));
            }
            !entries.is_empty()
        });
        self.signal.set_parked(parked_keys.len());
        taken
    }

    fn parked_ready(&self) -> bool {
        let state = self.state();
        state
            .parked
            .keys()
            .any(|store| state.ahead.get(store).copied().unwrap_or(0) <= self.store_low())
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

    fn take_done(&self) -> Alongside {
        let mut state = self.state();
        let outbox = std::mem::take(&mut state.done);
        let expiries = outbox
            .iter()
            .filter_map(|key| state.held.get(key).and_then(|h| h.expiry.clone()))
            .collect();
        Alongside { expiries, outbox }
    }

    fn removed(&self, keys: Vec<String>, removed: bool) {
        let mut state = self.state();
        if !removed {
            state.done.extend(keys);
            return;
        }
        for key in keys {
            if state.held.get(&key).is_some_and(|h| h.left == 0) {
                state.held.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::clock::ManualClock;
    use crate::model::delivery::{DeliveryStatus, Outcome, attempts_prefix};
    use crate::model::event::{OUTBOX_PREFIX, OutboxEntry};
    use crate::model::store::Store;
    use crate::service::Service;
    use crate::service::deliveries::queue::fan_out;
    use crate::service::deliveries::queue::tests::{paid, publish_paid_hooks, with_hooked_plugin};
    use crate::storage::queue::due;

    /// A store whose plugin has three webhooks taking `order.paid`, with its install fanned
    /// out (no first attempts from memory).
    fn store_with_three_hooks() -> (Service, crate::model::store::Store, tempfile::TempDir) {
        let (service, store, _clock, dir) = store_and_clock_with_three_hooks();
        (service, store, dir)
    }

    /// [`store_with_three_hooks`], with its clock.
    fn store_and_clock_with_three_hooks() -> (
        Service,
        crate::model::store::Store,
        ManualClock,
        tempfile::TempDir,
    ) {
        store_and_clock_with_hooks("three", 3)
    }

    /// A store whose plugin `name` has `hooks` webhooks taking `order.paid`, with its install
    /// fanned out (no first attempts from memory) and any deliveries it queued cleared.
    fn store_and_clock_with_hooks(
        name: &str,
        hooks: usize,
    ) -> (
        Service,
        crate::model::store::Store,
        ManualClock,
        tempfile::TempDir,
    ) {
        let (service, clock, dir) = with_hooked_plugin();
        publish_paid_hooks(&service, name, hooks);
        let store = service
            .create_store(&format!("{name}.example"))
            .expect("store");
        service.install(&store.id, name).expect("install");
        fan_out(&service, service.now(), 256, None, |_, _, _| {}).expect("fan out");
        let queued = due(&service.db, WorkKind::Webhook, service.now(), None, 100).expect("due");
        for (key, _) in queued {
            service.db.tx_relaxed(|tx| tx.remove(&key)).expect("clear");
        }
        (service, store, clock, dir)
    }

    /// One fan-out call with `first`, its deliveries handed over.
    fn fan_out_call(service: &Service, first: &First) -> queue::FannedOut {
        let given = |_: queue::ReadEvent, key: &str, given| first.give(key, given, Weak::new());
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

    /// Records the first attempt of the delivery handed over to `first` as `key`, succeeded, as
    /// the engine does: written unread when [`First::written_by_record`] marks it.
    fn record_ok(service: &Service, first: &First, key: &str) {
        record_ok_as(service, first, key, first.written_by_record(key));
    }

    /// [`record_ok`], its delivery read first or not as `stored` says.
    fn record_ok_as(service: &Service, first: &First, key: &str, stored: Stored) {
        let mut outcome = Outcome::unsent(service.now(), String::new());
        outcome.succeeded = true;
        outcome.status_code = Some(200);
        let made = first.made(key).expect("handed over");
        let entry = made.due_entry();
        service
            .record_attempts(
                &[((key, Some(&*made)), stored, &entry, &outcome)],
                &first.alongside(key),
            )
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
        assert!(deliveries(&service, &store).is_empty(), "nor any delivery");
        let made: Vec<_> = given
            .iter()
            .map(|(_, key, _)| first.made(key).expect("made"))
            .collect();
        for (d, (_, key, _)) in made.iter().zip(&given) {
            assert_eq!(d.status, DeliveryStatus::Pending);
            assert_eq!(d.next_attempt_at, Some(service.now()), "due now");
            assert_eq!(*key, d.due_key(service.now()));
        }
        assert_eq!(outbox(&service), 1, "the outbox entry is kept");
        assert_eq!(fan_out_with(&service, &first), 0, "and passed over");

        for (_, key, _) in &given[..2] {
            record_ok(&service, &first, key);
            first.settle(key, true);
        }
        // Each written once, with its first attempt: as made, succeeded.
        let written = deliveries(&service, &store);
        assert_eq!(written.len(), 2);
        for d in &written {
            assert!(made[..2].iter().any(|m| m.id == d.id), "{} as made", d.id);
            assert_eq!(d.status, DeliveryStatus::Succeeded);
            assert_eq!((d.attempts, d.attempt_ids.len()), (1, 1));
            assert_eq!(d.next_attempt_at, None);
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
    fn a_delivery_whose_first_attempt_is_slow_to_come_is_written_pending_after_a_second() {
        let (service, store, clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let fanned_at = service.now();
        let given = kept_event(&service, &store, &first);
        record_ok(&service, &first, &given[0].1);
        first.settle(&given[0].1, true);
        let just_short = WRITE_PENDING_AFTER - std::time::Duration::from_millis(1);
        clock.advance(jiff::SignedDuration::try_from(just_short).expect("span"));
        first
            .write_pending(&service.db, service.now())
            .expect("write");
        assert_eq!(
            deliveries(&service, &store).len(),
            1,
            "only the one recorded"
        );

        clock.advance(jiff::SignedDuration::from_millis(1));
        first
            .write_pending(&service.db, service.now())
            .expect("write");
        let written = deliveries(&service, &store);
        assert_eq!(written.len(), 3, "the two still waiting written");
        let pending: Vec<_> = written
            .iter()
            .filter(|d| d.status == DeliveryStatus::Pending)
            .collect();
        assert_eq!(pending.len(), 2);
        for d in &pending {
            assert_eq!(d.next_attempt_at, Some(fanned_at), "due when handed over");
            assert_eq!(d.attempts, 0);
        }
        assert!(queued(&service).is_empty(), "still no queue entry");
        first
            .write_pending(&service.db, service.now())
            .expect("write");

        // Its attempt, recorded now, moves the stored delivery on.
        let key = &given[1].1;
        record_ok(&service, &first, key);
        first.settle(key, true);
        let done = deliveries(&service, &store);
        let d = done
            .iter()
            .find(|d| d.due_key(fanned_at) == *key)
            .expect("written");
        assert_eq!(d.status, DeliveryStatus::Succeeded);
        assert_eq!(d.attempts, 1);
    }

    #[test]
    fn a_delivery_marked_written_by_its_record_is_not_written_pending_and_its_record_writes_it_unread()
     {
        let (service, store, clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let fanned_at = service.now();
        let given = kept_event(&service, &store, &first);
        let key = &given[0].1;
        assert!(
            first.written_by_record(key) == Stored::Never,
            "neither written nor being written"
        );
        assert_eq!(first.written_by_record(key), Stored::Maybe, "marked once");
        assert_eq!(first.written_by_record("not/handed/over"), Stored::Maybe);
        // Its record is to write it: writing pending passes it over, the others are written.
        clock.advance(jiff::SignedDuration::try_from(WRITE_PENDING_AFTER).expect("span"));
        first
            .write_pending(&service.db, service.now())
            .expect("write");
        let written = deliveries(&service, &store);
        assert_eq!(written.len(), 2, "the two others");
        assert!(written.iter().all(|d| d.due_key(fanned_at) != *key));
        // A delivery written pending can no longer be marked: its record reads it.
        assert_eq!(first.written_by_record(&given[1].1), Stored::Maybe);
        // The record, unread, writes it as made with its attempt.
        record_ok_as(&service, &first, key, Stored::Never);
        first.settle(key, true);
        let written = deliveries(&service, &store);
        assert_eq!(written.len(), 3);
        let d = written
            .iter()
            .find(|d| d.due_key(fanned_at) == *key)
            .expect("written by its record");
        assert_eq!(d.status, DeliveryStatus::Succeeded);
        assert_eq!((d.attempts, d.attempt_ids.len()), (1, 1));
    }

    #[test]
    fn a_delivery_marked_written_by_a_record_that_failed_is_written_pending_when_its_entry_is_released()
     {
        let (service, store, _clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let fanned_at = service.now();
        let given = kept_event(&service, &store, &first);
        let key = &given[0].1;
        assert_eq!(first.written_by_record(key), Stored::Never);
        first.settle(key, false); // Its record failed: not written.
        first
            .write_pending(&service.db, service.now())
            .expect("write");
        let written = deliveries(&service, &store);
        assert_eq!(
            written.len(),
            3,
            "all three written pending, the failed one first"
        );
        let d = written
            .iter()
            .find(|d| d.due_key(fanned_at) == *key)
            .expect("written pending");
        assert_eq!((d.status, d.attempts), (DeliveryStatus::Pending, 0));
        assert_queued_again(&service, &store, &first);
    }

    #[test]
    fn a_delivery_made_from_memory_whose_target_was_paused_meanwhile_is_written_failed() {
        let (service, store, _dir) = store_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let given = kept_event(&service, &store, &first);
        let key = &given[0].1;
        let made = first.made(key).expect("made");
        let paused = "the target was paused";
        queue::fail_unsent(&service, (key, Some(&made)), &made.due_entry(), paused)
            .expect("failed");
        let written = deliveries(&service, &store);
        assert_eq!(written.len(), 1, "written, to be replayed");
        assert_eq!(written[0].id, made.id);
        assert_eq!(written[0].status, DeliveryStatus::Failed);
        assert_eq!(written[0].failure.as_deref(), Some(paused));
        assert_eq!((written[0].attempts, written[0].next_attempt_at), (0, None));
    }

    #[test]
    fn a_delivery_made_from_memory_is_not_written_once_its_event_has_expired() {
        let (service, store, clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let given = kept_event(&service, &store, &first);
        clock.advance(crate::model::delivery::RETENTION);
        record_ok(&service, &first, &given[0].1);
        assert!(
            deliveries(&service, &store).is_empty(),
            "purged with its event"
        );
        let log = attempts_prefix(&store.id, &first.made(&given[0].1).expect("made").target);
        let attempts = service.db.list::<serde_json::Value>(&log, None, false, 10);
        assert!(attempts.expect("attempts").is_empty());
    }

    #[test]
    fn after_a_crash_a_kept_entry_queues_its_pending_deliveries_and_makes_none_again() {
        let (service, store, clock, _dir) = store_and_clock_with_three_hooks();
        let before = First::new(&service.db).expect("first");
        let given = kept_event(&service, &store, &before);
        let recorded = before.made(&given[0].1).expect("made");
        let second = before.made(&given[1].1).expect("made");
        let third = before.made(&given[2].1).expect("made");
        record_ok(&service, &before, &given[0].1);
        clock.advance(jiff::SignedDuration::from_millis(10));
        queue::write_pending(&service.db, &[&third], &Alongside::default())
            .expect("written pending");
        let made: Vec<_> = deliveries(&service, &store)
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(made.len(), 2);
        drop(before); // The crash: the second was never written, the third written pending.

        // An event committed after the crash was never kept: it is fanned out as usual.
        paid(&service, &store, 2);
        let after = First::new(&service.db).expect("first");
        assert_eq!(fan_out_with(&service, &after), 2);
        let queued = queued(&service);
        assert_eq!(queued, [third.due_key(third.next_attempt_at.expect("due"))]);
        let again = after.take_inbox();
        assert_eq!(
            again.len(),
            4,
            "the one never written made afresh, and the new event's"
        );
        let afresh = after.made(&again[0].1).expect("made");
        assert_eq!(
            (&afresh.event_id, &afresh.target),
            (&second.event_id, &second.target)
        );
        assert!(!made.contains(&afresh.id));
        let written = deliveries(&service, &store);
        assert_eq!(written.len(), 2, "none made again");
        let succeeded = written
            .iter()
            .filter(|d| d.status == DeliveryStatus::Succeeded);
        assert_eq!(succeeded.count(), 1);
        let attempts = service
            .db
            .list::<serde_json::Value>(
                &attempts_prefix(&store.id, &recorded.target),
                None,
                false,
                10,
            )
            .expect("attempts");
        assert_eq!(attempts.len(), 1, "its attempt recorded once");
        assert_eq!(
            outbox(&service),
            2,
            "both entries kept (the first one's afresh delivery handed over)"
        );
    }

    /// The expiry records stored for `event`.
    fn expiries_of(service: &Service, event: &crate::model::event::Event) -> usize {
        let records = service.db.list::<crate::model::delivery::Expiry>(
            crate::model::delivery::EXPIRY_PREFIX,
            None,
            false,
            100,
        );
        let records = records.expect("expiries").into_iter().map(|(_, r)| r);
        records
            .filter(|r| r.event_id == event.id || r.also.iter().any(|a| a.event_id == event.id))
            .count()
    }

    /// With the mark raised by a first event (its transaction writes), a second event of the
    /// same second fanned out with `first`: its deliveries handed over, and nothing written.
    fn quiet_event(
        service: &Service,
        store: &crate::model::store::Store,
        first: &First,
    ) -> (crate::model::event::Event, Vec<(WorkKind, String, Work)>) {
        let earlier = paid(service, store, 1);
        fan_out_with(service, first);
        assert_eq!(
            expiries_of(service, &earlier),
            1,
            "written by the fan-out that raised the mark"
        );
        for (_, key, _) in first.take_inbox() {
            record_ok(service, first, &key);
            first.settle(&key, true);
        }
        assert_eq!(outbox(service), 0, "removed with the last first attempt");
        let mark = service.db.read::<String>(OUTBOX_KEPT_MARK).expect("mark");
        let event = paid(service, store, 2);
        let commits = service.db.batches_applied();
        assert_eq!(fan_out_with(service, first), 1);
        assert_eq!(
            service.db.batches_applied(),
            commits,
            "the fan-out committed nothing"
        );
        let given = first.take_inbox();
        assert_eq!(given.len(), 3, "each delivery handed over");
        for (_, key, _) in &given {
            assert!(first.handed(key).expect("made").alone, "fanned out alone");
        }
        assert_eq!(
            expiries_of(service, &event),
            0,
            "its expiry left to the engine"
        );
        assert_eq!(outbox(service), 1, "its entry kept");
        assert!(deliveries(service, store).len() == 3 && queued(service).is_empty());
        let now = service.db.read::<String>(OUTBOX_KEPT_MARK).expect("mark");
        assert_eq!(now, mark, "the mark not raised");
        (event, given)
    }

    #[test]
    fn an_event_handed_over_whole_has_its_expiry_written_and_its_entry_removed_with_its_attempts() {
        let (service, store, clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let (event, given) = quiet_event(&service, &store, &first);
        record_ok(&service, &first, &given[0].1);
        assert_eq!(
            expiries_of(&service, &event),
            1,
            "written with the first attempt"
        );
        assert!(
            first.alongside(&given[1].1).expiries.is_empty(),
            "not carried by a second record while the first one's is in flight"
        );
        first.settle(&given[0].1, true);
        assert!(
            first.alongside(&given[1].1).expiries.is_empty(),
            "not written again once known written"
        );
        record_ok(&service, &first, &given[1].1);
        first.settle(&given[1].1, true);
        assert_eq!(outbox(&service), 1, "kept while a delivery is not settled");
        let last = first.alongside(&given[2].1);
        assert_eq!(
            last.outbox.len(),
            1,
            "the last one's record removes the entry"
        );
        let commits = service.db.batches_applied();
        record_ok(&service, &first, &given[2].1);
        assert_eq!(
            service.db.batches_applied(),
            commits + 1,
            "in its one commit"
        );
        assert_eq!(outbox(&service), 0, "removed with the last first attempt");
        first.settle(&given[2].1, true);
        {
            let state = first.state();
            assert!(
                state.held.is_empty() && state.done.is_empty(),
                "nothing left to remove"
            );
        }
        assert_eq!(expiries_of(&service, &event), 1, "one record");
        assert_eq!(fan_out_with(&service, &first), 0);

        // The record purges the event and its deliveries at its retention.
        clock.advance(crate::model::delivery::RETENTION + jiff::SignedDuration::from_secs(2));
        queue::purge(&service.db, service.now(), 100).expect("purge");
        let stored =
            service
                .db
                .read::<crate::model::event::Event>(&crate::model::event::event_key(
                    &store.id, &event.id,
                ));
        assert!(stored.expect("read").is_none(), "the event purged");
        assert!(
            deliveries(&service, &store).is_empty(),
            "and its deliveries"
        );
    }

    #[test]
    fn events_fanned_out_together_are_removed_together_by_the_next_fan_out() {
        let (service, store, _clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let events = [paid(&service, &store, 1), paid(&service, &store, 2)];
        assert_eq!(fan_out_with(&service, &first), 2, "in one transaction");
        for event in &events {
            assert_eq!(expiries_of(&service, event), 1, "written by the fan-out");
        }
        for (_, key, _) in first.take_inbox() {
            let alone = first.handed(&key).expect("made").alone;
            assert!(!alone, "not fanned out alone");
            assert!(first.alongside(&key).is_empty(), "nothing written besides");
            record_ok(&service, &first, &key);
            first.settle(&key, true);
        }
        assert_eq!(outbox(&service), 2, "not removed with the attempts");
        fan_out_with(&service, &first);
        assert_eq!(outbox(&service), 0, "removed together by the next fan-out");
        assert!(first.state().held.is_empty());
    }

    #[test]
    fn a_record_that_failed_leaves_the_expiry_to_be_written_when_its_entry_is_released() {
        let (service, store, _clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let (event, given) = quiet_event(&service, &store, &first);
        assert_eq!(first.alongside(&given[0].1).expiries.len(), 1, "carried");
        first.settle(&given[0].1, false); // Its record failed: the entry is released.
        first
            .write_pending(&service.db, service.now())
            .expect("written pending");
        assert_eq!(
            expiries_of(&service, &event),
            1,
            "written with those written pending"
        );
        assert_eq!(deliveries(&service, &store).len(), 6);
        assert_eq!(fan_out_with(&service, &first), 1, "fanned out again");
        assert_eq!(queued(&service).len(), 3, "its deliveries queued");
        assert_eq!(outbox(&service), 0);
    }

    #[test]
    fn an_entry_settled_without_its_attempts_recorded_is_removed_with_its_expiry_by_the_fan_out() {
        let (service, store, _clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let (event, given) = quiet_event(&service, &store, &first);
        // Settled without a record (as a delivery failed unsent is): the fan-out removes it.
        for (_, key, _) in &given {
            first.settle(key, true);
        }
        assert_eq!(outbox(&service), 1);
        assert_eq!(expiries_of(&service, &event), 0);
        fan_out_with(&service, &first);
        assert_eq!(outbox(&service), 0, "removed by the next fan-out");
        assert_eq!(expiries_of(&service, &event), 1, "with its expiry record");
        assert!(first.state().held.is_empty());
    }

    #[test]
    fn a_delivery_written_pending_writes_the_expiry_record_left_to_the_engine() {
        let (service, store, clock, _dir) = store_and_clock_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let (event, given) = quiet_event(&service, &store, &first);
        clock.advance(jiff::SignedDuration::from_millis(1_500));
        first
            .write_pending(&service.db, service.now())
            .expect("written pending");
        assert_eq!(
            deliveries(&service, &store).len(),
            6,
            "the second event's, pending"
        );
        assert_eq!(expiries_of(&service, &event), 1, "with its expiry record");
        assert!(
            first.alongside(&given[0].1).expiries.is_empty(),
            "known written"
        );
    }

    #[test]
    fn after_a_crash_an_entry_whose_expiry_was_left_to_the_engine_has_it_written_by_the_fan_out() {
        let (service, store, _clock, _dir) = store_and_clock_with_three_hooks();
        let before = First::new(&service.db).expect("first");
        let (event, given) = quiet_event(&service, &store, &before);
        // One first attempt made and recorded (its record wrote the expiry), then the crash.
        record_ok(&service, &before, &given[0].1);
        drop(before);
        let after = First::new(&service.db).expect("first");
        assert_eq!(fan_out_with(&service, &after), 1, "fanned out again");
        assert_eq!(
            after.take_inbox().len(),
            2,
            "the two never written made afresh"
        );
        assert_eq!(
            expiries_of(&service, &event),
            1,
            "its record written again, the same under the same key"
        );

        // Crashed before any record: the fan-out that makes them again writes the record.
        let (service, store, _clock, _dir) = store_and_clock_with_three_hooks();
        let before = First::new(&service.db).expect("first");
        let (event, _) = quiet_event(&service, &store, &before);
        drop(before);
        let after = First::new(&service.db).expect("first");
        assert_eq!(fan_out_with(&service, &after), 1, "fanned out again");
        assert_eq!(after.take_inbox().len(), 3, "each made afresh");
        assert_eq!(
            expiries_of(&service, &event),
            1,
            "its expiry record written"
        );
    }

    /// An `order.paid` event fanned out with `first`: its three deliveries, handed over.
    fn kept_event(
        service: &Service,
        store: &crate::model::store::Store,
        first: &First,
    ) -> Vec<(WorkKind, String, Work)> {
        paid(service, store, 1);
        fan_out_with(service, first);
        let given = first.take_inbox();
        assert_eq!(given.len(), 3, "each delivery handed over");
        given
    }

    /// The kept event's entry fanned out again with `first`: its three deliveries queued (found
    /// pending, or made now), one each, the entry removed.
    fn assert_queued_again(service: &Service, store: &crate::model::store::Store, first: &First) {
        assert_eq!(fan_out_with(service, first), 1, "taken again");
        assert!(first.take_inbox().is_empty(), "nothing handed over");
        assert_eq!(queued(service).len(), 3, "each delivery queued");
        assert_eq!(deliveries(service, store).len(), 3, "one each");
        assert_eq!(outbox(service), 0);
    }

    #[test]
    fn a_host_that_hands_nothing_over_still_makes_and_queues_what_a_kept_entry_left() {
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
    fn a_released_entry_is_fanned_out_again_and_queues_its_deliveries_written_pending_first() {
        let (service, store, _dir) = store_with_three_hooks();
        let first = First::new(&service.db).expect("first");
        let given = kept_event(&service, &store, &first);
        let made: Vec<_> = given
            .iter()
            .map(|(_, key, _)| first.made(key).expect("made").id.clone())
            .collect();
        first.settle(&given[0].1, false); // An error: the whole entry is released.
        assert_eq!(
            fan_out_with(&service, &first),
            0,
            "passed over until its deliveries are written"
        );
        first
            .write_pending(&service.db, service.now())
            .expect("write");
        assert_queued_again(&service, &store, &first);
        let ids: Vec<_> = deliveries(&service, &store)
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert!(
            ids.iter().all(|id| made.contains(id)),
            "the ones made: {ids:?}"
        );
        for (_, key, _) in &given[1..] {
            first.settle(key, true); // Settled in vain: the entry is gone.
        }
        let state = first.state();
        assert!(state.held.is_empty() && state.done.is_empty() && state.cut_short.is_empty());
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
        assert_eq!(
            first.take_inbox().len(),
            6,
            "both events' deliveries handed over"
        );
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

    /// Drains the fan-out's ring, returning whether it was rung.
    fn rung(service: &Service) -> bool {
        use futures::FutureExt;
        let signal = service.db.delivery_signal();
        signal.outbox_notified().now_or_never().is_some()
    }

    /// Records the first attempt of the delivery handed over as `key`, and settles it, as the
    /// engine does.
    fn settled(service: &Service, first: &First, key: &str) {
        record_ok(service, first, key);
        first.settle(key, true);
    }

    /// The keys of the deliveries handed over since the last call.
    fn inbox_keys(first: &First) -> Vec<String> {
        first
            .take_inbox()
            .into_iter()
            .map(|(_, key, _)| key)
            .collect()
    }

    /// A store whose plugin has ten webhooks taking `order.paid` (an event of it is heavy, ten
    /// deliveries), with its install fanned out, and a `First` that parks past `ahead` of its
    /// deliveries handed over.
    fn store_with_ten_hooks(ahead: usize) -> (Service, Store, First, tempfile::TempDir) {
        let (service, store, _clock, dir) = store_and_clock_with_hooks("ten", 10);
        let mut first = First::new(&service.db).expect("first");
        first.store_ahead = ahead;
        (service, store, first, dir)
    }

    #[test]
    fn past_its_deliveries_ahead_a_stores_heavy_events_wait_parked_until_half_are_settled() {
        let (service, store, first, _dir) = store_with_ten_hooks(20);
        let events: Vec<_> = (1..=4).map(|n| paid(&service, &store, n)).collect();
        rung(&service);
        let call = fan_out_call(&service, &first);
        assert_eq!(
            call.entries, 2,
            "two events, twenty deliveries: the other two parked"
        );
        // The third, taken as committed (`storage::fresh`) and parked for want of room, is kept
        // again for the call that takes it back, as the fourth, parked unread, still is.
        for event in &events[2..] {
            let key = crate::model::event::event_key(&store.id, &event.id);
            let kept = service.db.fresh_events().take(&key);
            let (event, size) = kept.expect("kept for its fan-out");
            service.db.fresh_events().put_back(key, event, size);
        }
        assert!(
            !call.more,
            "nothing for the fan-out until the store has room"
        );
        let handed = inbox_keys(&first);
        assert_eq!(handed.len(), 20);
        assert_eq!(outbox(&service), 4, "the parked entries stay in the outbox");
        assert_eq!(
            service.db.delivery_signal().parked(),
            2,
            "counted for the metrics"
        );
        assert!(queued(&service).is_empty(), "nothing queued");
        assert!(!rung(&service));
        assert_eq!(
            fan_out_with(&service, &first),
            0,
            "parked entries are passed over"
        );

        for key in &handed[..9] {
            settled(&service, &first, key);
        }
        assert!(!rung(&service), "eleven still ahead");
        assert_eq!(fan_out_with(&service, &first), 0);
        settled(&service, &first, &handed[9]);
        assert!(
            rung(&service),
            "ten left, half of twenty: the fan-out is rung"
        );
        let call = fan_out_call(&service, &first);
        assert_eq!(call.entries, 1, "the third event; the fourth parked again");
        assert!(!call.more);
        let third = inbox_keys(&first);
        assert_eq!(third.len(), 10);
        for key in handed[10..].iter().chain(&third) {
            settled(&service, &first, key);
        }
        assert!(rung(&service));
        assert_eq!(fan_out_with(&service, &first), 1, "the fourth");
        assert_eq!(service.db.delivery_signal().parked(), 0);
        assert_eq!(inbox_keys(&first).len(), 10);
        assert_eq!(deliveries(&service, &store).len(), 30, "thirty recorded");
    }

    #[test]
    fn a_stores_events_committed_behind_its_parked_ones_wait_behind_them_and_another_stores_go_on()
    {
        let (service, store, first, _dir) = store_with_ten_hooks(20);
        let other = service.create_store("other.example").expect("store");
        service.install(&other.id, "ten").expect("install");
        fan_out_with(&service, &first); // The other store's install.
        first.take_inbox();
        for n in 1..=3 {
            paid(&service, &store, n);
        }
        assert_eq!(fan_out_with(&service, &first), 2, "the third parked");
        let handed = inbox_keys(&first);
        // Room for two more deliveries, but the parked event comes first.
        settled(&service, &first, &handed[0]);
        settled(&service, &first, &handed[1]);
        let fourth = paid(&service, &store, 4);
        let others = paid(&service, &other, 5);
        assert_eq!(
            fan_out_with(&service, &first),
            1,
            "the other store's event only"
        );
        let taken = first.take_inbox();
        assert_eq!(taken.len(), 10);
        assert!(taken.iter().all(|(_, _, work)| match work {
            Work::Delivery(entry) => entry.event_id == others.id,
            _ => false,
        }));
        for key in &handed[2..10] {
            settled(&service, &first, key);
        }
        assert_eq!(fan_out_with(&service, &first), 1, "the third, in its turn");
        let third = first.take_inbox();
        assert_eq!(third.len(), 10);
        assert!(third.iter().all(|(_, _, work)| match work {
            Work::Delivery(entry) => entry.event_id != fourth.id,
            _ => false,
        }));
        assert_eq!(
            outbox(&service),
            4,
            "the first removed; the fourth still parked, the others kept"
        );
    }

    #[test]
    fn an_engine_with_large_pools_lets_a_store_have_four_times_their_places_ahead() {
        let (service, _clock, _dir) = with_hooked_plugin();
        let first = |places| First::new(&service.db).expect("first").for_pools(places);
        assert_eq!(first(200).store_ahead, STORE_AHEAD, "the default pools'");
        assert_eq!(first(1_000).store_ahead, 4_000);
        assert_eq!(first(100_000).store_ahead, MAX_GIVEN);
    }

    #[test]
    fn a_backlog_of_light_events_is_handed_over_whole_not_parked() {
        let (service, store, _dir) = store_with_three_hooks();
        let mut first = First::new(&service.db).expect("first");
        first.store_ahead = 3;
        for n in 1..=4 {
            paid(&service, &store, n);
        }
        assert_eq!(fan_out_with(&service, &first), 4);
        assert_eq!(first.take_inbox().len(), 12);
    }

    #[test]
    fn a_full_park_parks_no_more_and_the_fan_out_hands_over_as_before() {
        let (service, store, mut first, _dir) = store_with_ten_hooks(10);
        first.max_parked = 1;
        for n in 1..=3 {
            paid(&service, &store, n);
        }
        assert_eq!(
            fan_out_with(&service, &first),
            1,
            "the second and third parked"
        );
        assert_eq!(first.take_inbox().len(), 10);
        paid(&service, &store, 4);
        assert_eq!(
            fan_out_with(&service, &first),
            1,
            "the park full: the fourth handed over, the second and third left parked"
        );
        assert_eq!(first.take_inbox().len(), 10);
        assert_eq!(outbox(&service), 4);
    }

    #[test]
    fn entries_taken_back_from_the_park_by_a_call_that_failed_are_found_by_the_next() {
        use crate::model::event::event_key;
        let (service, store, first, _dir) = store_with_ten_hooks(10);
        paid(&service, &store, 1);
        paid(&service, &store, 2);
        let third = paid(&service, &store, 3);
        assert_eq!(
            fan_out_with(&service, &first),
            1,
            "the second and third parked"
        );
        let handed = inbox_keys(&first);
        // The third's event unreadable: the call that takes them back fails at it (read from
        // storage, no longer at hand as committed: see `storage::fresh`).
        let key = event_key(&store.id, &third.id);
        service.db.fresh_events().forget_stale();
        service.db.fresh_events().forget_stale();
        service
            .db
            .tx(|tx| tx.write(&key, &"not an event"))
            .expect("spoil");
        for key in &handed {
            settled(&service, &first, key);
        }
        let given = |_: queue::ReadEvent, key: &str, given| first.give(key, given, Weak::new());
        let failed = fan_out(&service, service.now(), 256, first.attempts(), given);
        assert!(failed.is_err());
        assert!(first.take_inbox().is_empty(), "nothing committed");
        service.db.tx(|tx| tx.write(&key, &third)).expect("mend");
        assert_eq!(
            fan_out_with(&service, &first),
            1,
            "the second, the third parked again"
        );
        for key in &inbox_keys(&first) {
            settled(&service, &first, key);
        }
        assert_eq!(fan_out_with(&service, &first), 1, "the third");
        assert_eq!(first.take_inbox().len(), 10);
    }

    #[test]
    fn parked_entries_are_fanned_out_by_the_next_engine_after_a_stop() {
        let (service, store, first, _dir) = store_with_ten_hooks(10);
        for n in 1..=3 {
            paid(&service, &store, n);
        }
        assert_eq!(fan_out_with(&service, &first), 1);
        drop(first);
        let next = First::new(&service.db).expect("first");
        assert_eq!(fan_out_with(&service, &next), 3, "each found in the outbox");
        assert_eq!(
            next.take_inbox().len(),
            30,
            "the first's made again (at least once)"
        );
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
