//! Deliveries' transitions, each one storage transaction: fan-out from the outbox into the work
//! queue, recording an attempt (retry, success, or the last failure that pauses the target and
//! queues the notice to its owner), replay, and the purge of expired events.
//!
//! Fan-out is a separate step rather than part of `Tx::emit`: the event and its outbox entry are
//! committed with the change that fired them, and one transaction later turns the outbox entry
//! into one delivery per subscribed target and deletes it. A crash between the two leaves the
//! outbox entry, which is fanned out after the restart, so no committed event is lost; and the
//! changes that fire events never read (or conflict on) the subscription list. Where one host
//! has the database to itself, the fan-out may keep the outbox entry instead, for first attempts
//! the engine makes from memory ([`FirstAttempts`]), and remove it once they are recorded.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use super::index::StoreTargets;
use super::target::{self, Paused};
use crate::model::delivery::Outcome;
use crate::model::delivery::{
    Attempt, Delivery, DeliveryStatus, DueEntry, EXPIRY_GROUPED_WITHIN, EXPIRY_PREFIX, Expiry,
    RETENTION, RETRY_SCHEDULE, TargetRef, attempt_key, delivery_key, expiry_key, expiry_ms_of,
    millis, test_event_key,
};
use crate::model::error::{Error, Result};
use crate::model::event::{
    Cause, Event, OUTBOX_KEPT_MARK, OUTBOX_PREFIX, OutboxEntry, event_key, kept_mark_for,
};
use crate::model::ids::{AttemptId, StoreId};
use crate::model::log::{InvocationRecord, invocation_key};
use crate::model::work::Claim;
use crate::service::Service;
use crate::service::mail::{MailRoute, queue_mail};
use crate::storage::{Db, Tx, just_before};

fn later(at: Timestamp, by: SignedDuration) -> Result<Timestamp> {
    at.checked_add(by)
        .map_err(|e| Error::Internal(anyhow::anyhow!("time out of range: {e}")))
}

fn enqueue(tx: &mut Tx<'_>, delivery: &mut Delivery, at: Timestamp) -> Result<()> {
    delivery.next_attempt_at = Some(at);
    tx.enqueue(&delivery.work(), at)?;
    Ok(())
}

/// Outbox entries fanned out in one transaction at most: a burst of events shares the
/// transactions' fixed cost, while a conflict (another host fanning out the same entries) repeats
/// only a few.
const FAN_OUT_PER_TX: usize = 32;

/// Deliveries one fan-out transaction makes at most (an event with more makes them in one of its
/// own): a transaction holds sled's lock while it runs, and an event fanned out in it waits for
/// the whole of it, so a few hundred deliveries, not 32 events of 50 subscriptions each.
const FAN_OUT_DELIVERIES_PER_TX: usize = 256;

/// Whether an event that makes `deliveries` deliveries is light: at most what an entry of a full
/// fan-out transaction makes on average. A call gathers the light events it reads apart from
/// the heavy ones and commits them first, in a transaction of their own: another store's event
/// that makes a delivery or two does not wait for the commit of a few hundred deliveries of a
/// backlog (traced on sled: that commit cost such an event 3.6 to 7 ms; alone it commits in well
/// under one).
fn is_light(deliveries: usize) -> bool {
    deliveries <= FAN_OUT_DELIVERIES_PER_TX / FAN_OUT_PER_TX
}

/// An outbox entry read for its fan-out: its key, the entry, its event (`None`: expired) and
/// the targets that may want it.
type Prepared = (String, OutboxEntry, Option<ReadEvent>, Vec<TargetRef>);

/// An event the fan-out read (or took as committed: see `storage::fresh`), under its storage
/// key, with the size of its stored record (bytes).
#[derive(Debug)]
pub struct ReadEvent {
    /// Its storage key.
    pub key: String,
    /// The event.
    pub event: Event,
    /// The size of its stored record, in bytes.
    pub size: usize,
}

/// Deliveries one call of [`fan_out`] makes at most (an event with more makes them all): the
/// engine starts due work between calls, and lists the outbox again, so that neither the work
/// already queued nor another store's event committed meanwhile waits for a whole burst's
/// fan-out (on PostgreSQL, 10 000 deliveries take seconds).
pub const FAN_OUT_DELIVERIES_PER_CALL: usize = 4 * FAN_OUT_DELIVERIES_PER_TX;

/// How long one call of [`fan_out`] goes on making transactions (the one running then ends it):
/// see [`FAN_OUT_DELIVERIES_PER_CALL`]. On sled a transaction of [`FAN_OUT_DELIVERIES_PER_TX`]
/// deliveries takes a few milliseconds, on PostgreSQL a few tens.
pub const FAN_OUT_TIME_PER_CALL: std::time::Duration = std::time::Duration::from_millis(5);

/// The delivery engine's first attempts made from memory, where one host has the database to
/// itself: a delivery the fan-out makes while there is [`FirstAttempts::room`] is handed to the
/// engine in memory ([`FirstAttempt`]) instead of being written with a queue entry, and written
/// once, with its first attempt, when that is recorded ([`Service::record_attempts`]); one that
/// waits longer for it is written pending meanwhile ([`write_pending`]), so that the API shows
/// it. Its event's outbox entry is kept (not removed by the fan-out) until the engine has
/// recorded the first attempt of each such delivery, and then removed: with the last one, for
/// an event fanned out alone ([`Handed::alone`]), or else by the fan-out's next transaction,
/// with the entries of the other events settled meanwhile. A stop or a crash in
/// between leaves the outbox entry, which is fanned out again ([`FirstAttempts::suspect`]): a
/// delivery already written is not made again (a pending one is queued then), and one never
/// written is made afresh, its attempt made again (at least once, as after any crash). Three
/// writes of each delivery (its pending record, its queue entry and that entry's removal) are
/// saved, and the read that claims it.
pub trait FirstAttempts {
    /// Whether the outbox entry `key` is held: its deliveries' first attempts are in the engine's
    /// hands, and the fan-out passes it over.
    fn held(&self, key: &str) -> bool;
    /// Whether the outbox entry `key` may have been fanned out before (kept for first attempts
    /// that a stop, a crash or an error cut short): its targets' deliveries are looked for before
    /// any is made.
    fn suspect(&self, key: &str) -> bool;
    /// How many deliveries may still be handed to the engine in memory.
    fn room(&self) -> usize;
    /// The held outbox entries all of whose deliveries are settled, with the expiry records of
    /// their events not yet known written: the fan-out writes and removes them in its next
    /// transaction.
    fn take_done(&self) -> Alongside;
    /// Entries of [`FirstAttempts::take_done`] removed (`removed`), or to try again.
    fn removed(&self, keys: Vec<String>, removed: bool);
    /// The mark stored under [`OUTBOX_KEPT_MARK`], at or after every outbox entry ever kept:
    /// the transaction that keeps a later one raises it (a second ahead of that one, see
    /// [`kept_mark_for`]), so that after a crash only the entries up to it are
    /// [`FirstAttempts::suspect`].
    fn kept_mark(&self) -> Option<String>;
    /// The mark was raised to `key` (committed).
    fn kept_up_to(&self, key: String);
    /// Where the fan-out lists the outbox from: after this key (`None`: from the head). The held
    /// entries pile up at the outbox's head, and reading past them on every call cost a deep
    /// backlog more than the writes saved: the fan-out reads on from where it left off, and from
    /// further back only where a commit (or a released entry) put an entry behind that.
    fn listed_from(&self) -> Option<String>;
    /// The next call lists the outbox after `key` (`None`: from the head).
    fn list_next_after(&self, key: Option<String>);
    /// What room `store` has for its next entry's deliveries (see [`StoreRoom`]); `unparked`:
    /// the entry was taken back from the park for this call.
    fn store_room(&self, store: &StoreId, unparked: bool) -> StoreRoom;
    /// Parks `entries`, listed and not taken (each of its store): they wait in memory (their outbox
    /// entries kept, and passed over by the listing as held) until the engine has settled enough
    /// of the store's deliveries handed over, and are then taken back
    /// ([`FirstAttempts::unpark`]). A store's burst waits in the outbox, not as deliveries in
    /// the engine's memory, while other stores' events go on.
    fn park(&self, entries: Vec<(String, OutboxEntry)>);
    /// Takes back up to `limit` parked entries of the stores with room again, each store's in
    /// key order.
    fn unpark(&self, limit: usize) -> Vec<(String, OutboxEntry)>;
    /// Whether a store with parked entries has room again: the fan-out calls again at once.
    fn parked_ready(&self) -> bool;
}

/// What room a store has for its next outbox entry's deliveries ([`FirstAttempts::store_room`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreRoom {
    /// No bound: nothing is handed over, or the park is full.
    Unbounded,
    /// The store has entries parked: the entry waits behind them, parked too, unread (a
    /// store's events go in the order they were committed).
    Behind,
    /// How many more of its deliveries may be handed over: once none may, its next heavy event
    /// is parked, and the store's entries after it. A light event (a few deliveries) is not:
    /// its deliveries ahead take hardly more memory than its entry parked, and a backlog of
    /// them (a component's events, one delivery each) drained slower parked.
    Left(usize),
}

/// A delivery handed to the engine in memory for its first attempt (see [`FirstAttempts`]): the
/// key its queue entry would have, and the delivery as made, pending and not yet written.
pub type FirstAttempt = (String, Delivery);

/// What the fan-out hands the engine of one event (see [`FirstAttempts`]): its deliveries, and
/// its expiry record when the fan-out's transaction had nothing else to write (see
/// [`PendingExpiry`]).
#[derive(Debug, Default)]
pub struct Handed {
    /// The deliveries handed over.
    pub deliveries: Vec<FirstAttempt>,
    /// The event's expiry record, left to the engine to write.
    pub expiry: Option<PendingExpiry>,
    /// Whether the event was fanned out alone in its transaction: its outbox entry is removed
    /// with the last of its first attempts' records, where one removed by the fan-out would
    /// cost a transaction of its own (see [`FirstAttempts::take_done`]). The entries of events
    /// fanned out together are removed together, by the fan-out's next transaction (removed
    /// with their attempts instead, a backlog on sled cost more: see PERFORMANCE.md).
    pub alone: bool,
}

impl Handed {
    /// Whether no delivery was handed over.
    pub fn is_empty(&self) -> bool {
        self.deliveries.is_empty()
    }
}

/// The expiry record of an event (see [`Expiry`]) that the fan-out left to the engine to write:
/// a fan-out transaction of one event alone that hands each of its deliveries over (writing
/// none), removes no outbox entry and leaves the mark would write nothing else, and on sled
/// each commit writes and syncs the log's buffer twice, so the record goes with a first
/// attempt's record instead (see [`Alongside`]), and the transaction writes nothing (one
/// event at a time, on sled: three commits an event become two). Until a transaction that
/// wrote it is known to have committed, the next one that writes one of the event's
/// deliveries or removes its outbox entry writes it (the one event's record, under its own
/// key: written again, it changes nothing). An event fanned out again (a crash, a stop, or an
/// error that released its outbox entry) has its record written by that fan-out, as every
/// event's was before; the outbox entry is never removed before the record is written.
#[derive(Debug, Clone)]
pub struct PendingExpiry(Arc<Expiring>);

impl PendingExpiry {
    /// Writes the record in `tx`.
    fn write(&self, tx: &mut Tx<'_>) -> Result<()> {
        let (at, record) = &*self.0;
        tx.write(&expiry_key(*at, &record.store_id, &record.event_id), record)
    }
}

/// What a transaction that settles deliveries handed over (see [`FirstAttempts`]) writes
/// besides them: their events' expiry records not yet written ([`PendingExpiry`]), and the
/// outbox entries it settles whole, removed.
#[derive(Debug, Default, Clone)]
pub struct Alongside {
    /// The expiry records to write.
    pub expiries: Vec<PendingExpiry>,
    /// The outbox entries to remove.
    pub outbox: Vec<String>,
}

impl Alongside {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        self.expiries.is_empty() && self.outbox.is_empty()
    }

    /// Adds what `other` writes.
    pub fn extend(&mut self, other: &Alongside) {
        self.expiries.extend(other.expiries.iter().cloned());
        self.outbox.extend(other.outbox.iter().cloned());
    }

    /// Writes the records and removes the entries in `tx`.
    fn write(&self, tx: &mut Tx<'_>) -> Result<()> {
        for expiry in &self.expiries {
            expiry.write(tx)?;
        }
        self.outbox.iter().try_for_each(|key| tx.remove(key))
    }
}

/// What a call of [`fan_out`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FannedOut {
    /// Outbox entries taken (fanned out, or found gone).
    pub entries: usize,
    /// Whether the outbox may hold more entries now: the listing was full, or the call stopped
    /// at [`FAN_OUT_DELIVERIES_PER_CALL`].
    pub more: bool,
}

/// Fans out up to `limit` outbox entries, a few per transaction, until it has made
/// [`FAN_OUT_DELIVERIES_PER_CALL`] deliveries or run for [`FAN_OUT_TIME_PER_CALL`]. Each
/// committed event is counted in the service's metrics once, when the transaction that removes
/// its outbox entry commits; and each event that went to some target is handed to `fanned_out`
/// then (the engine keeps it for its attempts, which would otherwise read it again).
///
/// The stores share the fan-out by the deliveries it makes for them ([`StoreTurns`]), each
/// store's events in the order they were committed, and a transaction ends at
/// [`FAN_OUT_PER_TX`] entries or [`FAN_OUT_DELIVERIES_PER_TX`] deliveries. Light events
/// ([`is_light`]) are gathered apart and committed before each heavy transaction, in one of
/// their own: another store's events behind one store's backlog in the outbox go out first, in a
/// small transaction, however many deliveries each of the backlog's events makes.
pub fn fan_out(
    service: &Service,
    now: Timestamp,
    limit: usize,
    first: Option<&dyn FirstAttempts>,
    fanned_out: impl FnMut(ReadEvent, &str, Handed),
) -> Result<FannedOut> {
    let mut done = first.map(FirstAttempts::take_done).unwrap_or_default();
    let fanned = fan_out_listed(service, now, limit, first, &mut done, fanned_out);
    if let Some(first) = first
        && !done.is_empty()
    {
        // Not removed in a transaction of the call (it made none, or failed): in one of their own.
        let removed = remove_outbox_entries(&service.db, &done);
        first.removed(done.outbox, removed.is_ok());
        removed?;
    }
    fanned
}

/// [`fan_out`], removing the outbox entries `done` in its first transaction (`done` is then
/// empty).
fn fan_out_listed(
    service: &Service,
    now: Timestamp,
    limit: usize,
    first: Option<&dyn FirstAttempts>,
    done: &mut Alongside,
    fanned_out: impl FnMut(ReadEvent, &str, Handed),
) -> Result<FannedOut> {
    let (mut listed, full) = list_outbox(&service.db, limit, first)?;
    let last_listed = listed.last().map(|(key, _)| key.clone()).filter(|_| full);
    // Parked entries whose stores have room again, with those listed (each store's in key
    // order); any left at the call's end go back to the park.
    let unparked = first.map(|f| f.unpark(limit)).unwrap_or_default();
    let from_park: HashSet<String> = unparked.iter().map(|(key, _)| key.clone()).collect();
    if !unparked.is_empty() {
        listed.extend(unparked);
        listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    }
    let listing = Listing {
        listed,
        full,
        last_listed,
        from_park: &from_park,
    };
    let fanned = fan_out_taken(service, now, listing, first, done, fanned_out);
    if fanned.is_err()
        && let Some(first) = first
    {
        // What the call took and did not commit (entries taken back from the park among them)
        // is neither held nor parked: the next listing reads from the head, past those that are.
        first.list_next_after(None);
    }
    fanned
}

/// Parks the entry `key` and the entries of its store left in `turns`; returns how many.
fn park(
    first: &dyn FirstAttempts,
    turns: &mut StoreTurns,
    key: String,
    entry: OutboxEntry,
) -> usize {
    let store = entry.store_id.clone();
    let mut entries = vec![(key, entry)];
    entries.extend(turns.take_store(&store));
    let parked = entries.len();
    first.park(entries);
    parked
}

/// The entries one call of [`fan_out`] takes: those listed from the outbox (`full`: as many as
/// asked for, the last one `last_listed`), and those taken back from the park (`from_park`).
struct Listing<'a> {
    listed: Vec<(String, OutboxEntry)>,
    full: bool,
    last_listed: Option<String>,
    from_park: &'a HashSet<String>,
}

/// [`fan_out_listed`] over the entries of `listing`.
fn fan_out_taken(
    service: &Service,
    now: Timestamp,
    listing: Listing<'_>,
    first: Option<&dyn FirstAttempts>,
    done: &mut Alongside,
    mut fanned_out: impl FnMut(ReadEvent, &str, Handed),
) -> Result<FannedOut> {
    let db = &service.db;
    let Listing {
        mut listed,
        full,
        last_listed,
        from_park,
    } = listing;
    // Hosts sharing the database list the same entries: each fans out the events of its own
    // stores, and another host's once they have waited (see `peers`); and within that each starts
    // each store's backlog at a part of its own, so that two hosts do not both fan out the same
    // entries (one would lose the conflict and repeat its transaction).
    let mut spread = None;
    if db.is_shared() {
        let now_ms = millis(now);
        listed.retain(|(_, entry)| {
            let made = crate::model::ids::created_ms(entry.event_id.as_str()).unwrap_or(0);
            let waited = std::time::Duration::from_millis(now_ms.saturating_sub(made));
            service.peers.takes(entry.store_id.as_str(), waited)
        });
        spread = Some(service.holder.spread());
    }
    let count = listed.len();
    // Each store's targets, read once in this call, after the listing: every event listed was
    // committed before they were read (see `TargetIndex::of`).
    let mut targets: HashMap<StoreId, Arc<StoreTargets>> = HashMap::new();
    let mut turns = StoreTurns::new(listed, spread);
    // The heavy events read (and their deliveries), and the light ones, committed before them.
    let (mut chunk, mut light): (Vec<Prepared>, Vec<Prepared>) = (Vec::new(), Vec::new());
    let (mut deliveries, mut made, mut made_light, mut taken) = (0, 0, 0, 0);
    // Entries parked for want of their store's room (not those put back at the call's end).
    let mut parked = 0;
    // Commits the entries gathered in `chunk` (if any) in one transaction; returns how many.
    let mut room = first.map(FirstAttempts::room);
    let mut commit = |chunk: &mut Vec<Prepared>| -> Result<usize> {
        let entries = chunk.len();
        if entries > 0 {
            let suspect = |key: &str| first.is_some_and(|f| f.suspect(key));
            let chunk = std::mem::take(chunk);
            let mut remove = std::mem::take(done);
            let mark = first.and_then(FirstAttempts::kept_mark);
            let made = FanOutChunk {
                service,
                now,
                suspect: &suspect,
                remove: &remove,
                mark: mark.as_deref(),
            }
            .run(chunk, &mut room, &mut fanned_out);
            match made {
                Ok(raised) => {
                    if let Some(first) = first {
                        if !remove.is_empty() {
                            first.removed(std::mem::take(&mut remove.outbox), true);
                        }
                        if let Some(raised) = raised {
                            first.kept_up_to(raised);
                        }
                    }
                }
                Err(e) => {
                    *done = remove; // Left to the caller.
                    return Err(e);
                }
            }
        }
        Ok(entries)
    };
    let started = std::time::Instant::now();
    // The entry the call ended before (taken from the turns, left in the outbox).
    let mut ended_before = None;
    while let Some((key, entry)) = turns.next() {
        let heavy = Progress {
            made,
            waiting: deliveries,
        };
        if call_ends(heavy, made_light, started.elapsed()) {
            ended_before = Some((key, entry));
            break;
        }
        let store_room = first.map_or(StoreRoom::Unbounded, |f| {
            f.store_room(&entry.store_id, from_park.contains(&key))
        });
        if let (Some(first), StoreRoom::Behind) = (first, store_room) {
            parked += park(first, &mut turns, key, entry);
            continue;
        }
        // Committed through this host a moment ago, the event is at hand (see `fresh`).
        let event_at = event_key(&entry.store_id, &entry.event_id);
        let read = match db.fresh_events().take(&event_at) {
            Some(fresh) => Some(fresh),
            None => db.read_sized(&event_at)?,
        };
        let event = read.map(|(event, size)| ReadEvent {
            key: event_at,
            event,
            size,
        });
        let candidates = match &event {
            Some(read) => {
                let store = match targets.entry(entry.store_id.clone()) {
                    Entry::Occupied(known) => known.into_mut(),
                    Entry::Vacant(unread) => {
                        let known = service.targets.of(db, unread.key())?;
                        unread.insert(known)
                    }
                };
                target::candidates(store, &read.event)
            }
            None => Vec::new(),
        };
        if let (Some(first), StoreRoom::Left(left)) = (first, store_room)
            && !is_light(candidates.len())
        {
            // The deliveries of the store's events read and not yet handed over.
            let unhanded: usize = chunk
                .iter()
                .chain(&light)
                .filter(|(_, read, ..)| read.store_id == entry.store_id)
                .map(|(.., candidates)| candidates.len())
                .sum();
            if unhanded >= left {
                if let Some(read) = event {
                    db.fresh_events().put_back(read.key, read.event, read.size);
                }
                parked += park(first, &mut turns, key, entry);
                continue;
            }
        }
        turns.charge(&entry.store_id, candidates.len());
        taken += 1;
        if is_light(candidates.len()) {
            light.push((key, entry, event, candidates));
            if light.len() == FAN_OUT_PER_TX {
                made_light += commit(&mut light)?;
            }
            continue;
        }
        let full = chunk.len() == FAN_OUT_PER_TX
            || deliveries + candidates.len() > FAN_OUT_DELIVERIES_PER_TX;
        if full && !chunk.is_empty() {
            made_light += commit(&mut light)?;
            commit(&mut chunk)?;
            made += deliveries;
            deliveries = 0;
        }
        deliveries += candidates.len();
        chunk.push((key, entry, event, candidates));
    }
    commit(&mut light)?;
    commit(&mut chunk)?;
    if let Some(first) = first {
        // Entries taken back from the park and left go back to it; of the others, every entry
        // listed before the first one left is taken (held, parked or removed): the next call
        // reads from there, or on from the last one read when none was left.
        let mut unpark_left = if from_park.is_empty() {
            Vec::new()
        } else {
            turns.take_all(|key| from_park.contains(key))
        };
        let ended_before = match ended_before {
            Some((key, entry)) if from_park.contains(&key) => {
                unpark_left.push((key, entry));
                None
            }
            other => other.map(|(key, _)| key),
        };
        first.park(unpark_left);
        let left = [ended_before.as_deref(), turns.first_left()];
        match left.into_iter().flatten().min() {
            Some(left) => first.list_next_after(Some(just_before(left).to_owned())),
            None => {
                if let Some(last) = last_listed {
                    first.list_next_after(Some(last));
                }
            }
        }
    }
    Ok(FannedOut {
        entries: taken,
        // A full listing of other hosts' entries only is not more for this host: it waits for
        // the next commit (theirs included) or poll instead of listing them again at once.
        // Entries parked wait for their stores' room, which calls the fan-out again.
        more: (full && count > 0)
            || taken + parked < count
            || first.is_some_and(FirstAttempts::parked_ready),
    })
}

/// Up to `limit` outbox entries from the head, those `first` holds passed over (read as stored,
/// not decoded, a page at a time: see [`next_page`]), and whether more may follow.
fn list_outbox(
    db: &Db,
    limit: usize,
    first: Option<&dyn FirstAttempts>,
) -> Result<(Vec<(String, OutboxEntry)>, bool)> {
    let Some(first) = first else {
        let listed = db.list::<OutboxEntry>(OUTBOX_PREFIX, None, false, limit)?;
        let full = listed.len() == limit;
        return Ok((listed, full));
    };
    let mut listed = Vec::new();
    let mut after = first.listed_from();
    let mut page = limit;
    loop {
        let read = db.list_raw(OUTBOX_PREFIX, after.as_deref(), page)?;
        let full = read.len() == page;
        let mut held = 0;
        for (key, bytes) in read {
            if listed.len() == limit {
                return Ok((listed, true));
            }
            if first.held(&key) {
                held += 1;
            } else {
                let entry = Db::decode(&key, &bytes)?;
                listed.push((key.clone(), entry));
            }
            after = Some(key);
        }
        if !full {
            // Read to the end: the next call reads on from the last key (a commit behind it
            // moves it back).
            first.list_next_after(after);
            return Ok((listed, false));
        }
        if listed.len() == limit {
            return Ok((listed, true));
        }
        page = next_page(limit - listed.len(), held);
    }
}

/// Outbox entries read at a time at most past the first page (see [`next_page`]).
const HELD_PAGE: usize = 2048;

/// How many entries the next page of [`list_outbox`] reads, when `need` more are wanted and the
/// last page passed over `held` entries that the engine holds: the entries wanted and twice as
/// many as the last page held, so that a run of held entries is read past in pages that double
/// (up to [`HELD_PAGE`]) however few are wanted, and a page that was short of a few reads a few
/// more. (A fixed page of [`HELD_PAGE`] read 2 048 entries to fill the last places of a listing:
/// in a backlog of 10 000 component events, 44 500 entries read for 11 000 events listed.)
fn next_page(need: usize, held: usize) -> usize {
    need.saturating_add(held.saturating_mul(2))
        .min(HELD_PAGE)
        .max(need)
}

/// A call's heavy events: deliveries made in committed transactions, and those of the events
/// read and waiting for theirs.
#[derive(Debug, Clone, Copy)]
struct Progress {
    made: usize,
    waiting: usize,
}

/// Whether a call of [`fan_out`] ends before its next entry: at
/// [`FAN_OUT_DELIVERIES_PER_CALL`], or once it has run [`FAN_OUT_TIME_PER_CALL`] and made a
/// heavy transaction, or light ones (`made_light` events) with no heavy events waiting. A light
/// transaction never ends a call while heavy events wait: however many light events come
/// between, each call moves a backlog on (on PostgreSQL, where one transaction outlasts the
/// time, calls that ended at their light transaction fanned out one event of a burst each).
fn call_ends(heavy: Progress, made_light: usize, elapsed: std::time::Duration) -> bool {
    heavy.made + heavy.waiting >= FAN_OUT_DELIVERIES_PER_CALL
        || (elapsed >= FAN_OUT_TIME_PER_CALL
            && (heavy.made > 0 || (made_light > 0 && heavy.waiting == 0)))
}

/// The order a batch of outbox entries is fanned out in: each store's entries in the order they
/// were committed, and the next entry always of the store that has been charged the fewest
/// deliveries so far ([`StoreTurns::charge`]; the earlier in the batch on a tie). A store whose
/// events each make one delivery gets fifty of them in for one of a store whose events make
/// fifty each.
#[derive(Debug)]
struct StoreTurns {
    /// Each store's entries, in the order of the batch, with what it was charged.
    stores: Vec<(StoreId, usize, Backlog)>,
}

/// A store's entries of a batch, in the order committed.
type Backlog = std::collections::VecDeque<(String, OutboxEntry)>;

impl StoreTurns {
    /// The turns over `batch`. With `spread` (a host's, where hosts share the database), each
    /// store's entries start at a part of the host's own, [`FAN_OUT_PER_TX`] entries long.
    fn new(batch: Vec<(String, OutboxEntry)>, spread: Option<usize>) -> Self {
        let mut stores: Vec<(StoreId, usize, Backlog)> = Vec::new();
        for (key, entry) in batch {
            match stores.iter_mut().find(|(id, ..)| *id == entry.store_id) {
                Some((.., entries)) => entries.push_back((key, entry)),
                None => stores.push((entry.store_id.clone(), 0, Backlog::from([(key, entry)]))),
            }
        }
        if let Some(spread) = spread {
            for (.., entries) in &mut stores {
                let parts = entries.len().div_ceil(FAN_OUT_PER_TX);
                entries.rotate_left(spread % parts.max(1) * FAN_OUT_PER_TX);
            }
        }
        Self { stores }
    }

    /// The next entry: the first left of the store charged the least.
    fn next(&mut self) -> Option<(String, OutboxEntry)> {
        let (.., entries) = self
            .stores
            .iter_mut()
            .filter(|(.., entries)| !entries.is_empty())
            .min_by_key(|(_, charged, _)| *charged)?;
        entries.pop_front()
    }

    /// Takes the entries left of `store`, in key order.
    fn take_store(&mut self, store: &StoreId) -> Backlog {
        self.stores
            .iter_mut()
            .find(|(id, ..)| id == store)
            .map(|(.., entries)| std::mem::take(entries))
            .unwrap_or_default()
    }

    /// Takes the entries left whose keys `taking` takes.
    fn take_all(&mut self, taking: impl Fn(&str) -> bool) -> Vec<(String, OutboxEntry)> {
        let mut taken = Vec::new();
        for (.., entries) in &mut self.stores {
            let (take, keep): (Backlog, Backlog) = std::mem::take(entries)
                .into_iter()
                .partition(|(key, _)| taking(key));
            *entries = keep;
            taken.extend(take);
        }
        taken
    }

    /// The first entry left (in key order), if any.
    fn first_left(&self) -> Option<&str> {
        self.stores
            .iter()
            .flat_map(|(.., entries)| entries.iter().map(|(key, _)| key.as_str()))
            .min()
    }

    /// Charges `store` for an entry that makes `deliveries` deliveries (at least one: an event
    /// no target takes costs its transaction a read and a removal).
    fn charge(&mut self, store: &StoreId, deliveries: usize) {
        if let Some((_, charged, _)) = self.stores.iter_mut().find(|(id, ..)| id == store) {
            *charged = charged.saturating_add(deliveries.max(1));
        }
    }
}

/// One fan-out transaction: the entries of `chunk`, read and ready.
struct FanOutChunk<'a> {
    service: &'a Service,
    now: Timestamp,
    /// See [`FirstAttempts::suspect`].
    suspect: &'a dyn Fn(&str) -> bool,
    /// Outbox entries to remove besides, with their events' expiry records not yet written (see
    /// [`FirstAttempts::take_done`]).
    remove: &'a Alongside,
    /// See [`FirstAttempts::kept_mark`].
    mark: Option<&'a str>,
}

impl FanOutChunk<'_> {
    /// Commits the transaction; hands each event fanned out to `fanned_out`, with the
    /// deliveries handed over (while `room` lasts). A transaction of one event that would write
    /// nothing but its expiry record (every delivery handed over, no outbox entry removed, the
    /// mark not raised) writes nothing: the record is handed over with the deliveries
    /// ([`PendingExpiry`]). Returns the mark, if raised.
    fn run(
        &self,
        chunk: Vec<Prepared>,
        room: &mut Option<usize>,
        fanned_out: &mut impl FnMut(ReadEvent, &str, Handed),
    ) -> Result<Option<String>> {
        let (service, now, suspect) = (self.service, self.now, self.suspect);
        let (fanned, left, raised) = service.db.tx_relaxed(|tx| {
            self.remove.write(tx)?;
            // What the entries below read, in one round trip where hosts share PostgreSQL.
            let outbox = chunk.iter().map(|(key, ..)| key.clone());
            let targets = chunk.iter().flat_map(|(_, entry, _, candidates)| {
                candidates
                    .iter()
                    .map(|c| target::record_key(&entry.store_id, c))
            });
            tx.prefetch(outbox.chain(targets))?;
            let mut read = target::TargetsRead::default();
            // Counted afresh on each run of the closure (a conflict runs it again).
            let mut left = *room;
            let mut fanned = chunk
                .iter()
                .map(|(key, entry, event, candidates)| {
                    let one = FanOut {
                        key,
                        entry,
                        suspect: suspect(key),
                        now,
                    };
                    let event = event.as_ref().map(|read| &read.event);
                    one.run(tx, &mut read, event, candidates, &mut left)
                })
                .collect::<Result<Vec<Fanned>>>()?;
            let kept = chunk
                .iter()
                .zip(&fanned)
                .filter(|(_, one)| one.first.as_ref().is_some_and(|f| !f.is_empty()))
                .map(|((key, ..), _)| key.as_str())
                .max();
            let raised = kept
                .filter(|kept| self.mark.is_none_or(|mark| *kept > mark))
                .map(kept_mark_for);
            if let Some(raised) = &raised {
                tx.write(OUTBOX_KEPT_MARK, raised)?;
            }
            // A lone event's record is left to the engine when the transaction would write
            // nothing else; several events' records are written here, in one (see
            // `write_expiries`), not one each with their attempts.
            let nothing_else = self.remove.is_empty() && raised.is_none();
            if !(alone(&fanned) && nothing_else) || fanned.iter().any(|one| one.wrote) {
                write_expiries(tx, fanned.iter_mut().filter_map(|one| one.expiry.take()))?;
            }
            Ok((fanned, left, raised))
        })?;
        let alone = alone(&fanned);
        *room = left;
        for ((key, _, event, candidates), fanned) in chunk.into_iter().zip(fanned) {
            if let Some(first) = fanned.first
                && let Some(event) = event
            {
                service.metrics.event_emitted(event.event.kind().as_str());
                if !candidates.is_empty() {
                    let handed = Handed {
                        deliveries: first,
                        expiry: fanned.expiry.map(|e| PendingExpiry(Arc::new(e))),
                        alone,
                    };
                    fanned_out(event, &key, handed);
                }
            }
        }
        Ok(raised)
    }
}

/// Whether a transaction fanned out one event alone (others it took were gone).
fn alone(fanned: &[Fanned]) -> bool {
    fanned.iter().filter(|one| one.first.is_some()).count() == 1
}

/// What [`FanOut::run`] made of one outbox entry.
struct Fanned {
    /// The deliveries handed over, or `None` when it was not fanned out (see [`FanOut::run`]).
    first: Option<Vec<FirstAttempt>>,
    /// What its expiry purges, for the caller to write ([`write_expiries`]), or to hand over
    /// with the deliveries (see [`FanOutChunk::run`]); taken once written.
    expiry: Option<Expiring>,
    /// Whether it wrote or removed anything, or must have its expiry written in the
    /// transaction: an entry fanned out again ([`FirstAttempts::suspect`]), whose deliveries
    /// made before may be written already.
    wrote: bool,
}

/// One outbox entry in the fan-out's transaction (see [`FanOut::run`]).
struct FanOut<'a> {
    key: &'a str,
    entry: &'a OutboxEntry,
    /// Whether it may have been fanned out before (see [`FirstAttempts::suspect`]).
    suspect: bool,
    now: Timestamp,
}

impl FanOut<'_> {
    /// Turns the outbox entry into a delivery per target that still wants its event (of
    /// `candidates`), each queued, or handed to the engine in memory while `room` lasts (`None`:
    /// none is; see [`FirstAttempts`]). The entry is removed unless some delivery was handed
    /// over. Returns those handed over, or `None` when it was not fanned out (another host took
    /// it first; its event was purged, and the entry removed; or its event was not read, and
    /// the entry stays for a later fan-out); and what its expiry purges (see [`Fanned`]).
    fn run(
        &self,
        tx: &mut Tx<'_>,
        read: &mut target::TargetsRead,
        event: Option<&Event>,
        candidates: &[TargetRef],
        room: &mut Option<usize>,
    ) -> Result<Fanned> {
        let (key, entry, now) = (self.key, self.entry, self.now);
        let none = |wrote| Fanned {
            first: None,
            expiry: None,
            wrote,
        };
        if !tx.exists(key)? {
            return Ok(none(false));
        }
        let Some(event) = event else {
            if tx.exists(&event_key(&entry.store_id, &entry.event_id))? {
                // Not read before the transaction, yet there (as a read that saw half a batch
                // once missed one): the entry stays for a later fan-out, which reads it, rather
                // than go and take the event's deliveries with it.
                tracing::warn!(
                    event = %entry.event_id,
                    outbox = key,
                    "fan-out: an outbox entry's event was not read; left for a later fan-out"
                );
                return Ok(none(false));
            }
            tx.remove(key)?;
            return Ok(none(true)); // Purged (fanned out before, and the entry kept since).
        };
        let mut targets = Vec::new();
        let mut first = Vec::new();
        let mut wrote = self.suspect;
        for target in candidates {
            if let TargetRef::Component(installation) = target
                && !Cause::reaches_component(entry.cause.as_ref(), installation)
            {
                continue; // Loop protection: see `Cause`.
            }
            if self.suspect
                && let Some(made) =
                    tx.read::<Delivery>(&delivery_key(&event.store.id, target, &event.id))?
            {
                // Made by an earlier fan-out of the entry, whose first attempt was cut short
                // (a pending delivery with an attempt recorded has its retry queued already;
                // queuing it again writes the same entry).
                if made.status == DeliveryStatus::Pending
                    && let Some(at) = made.next_attempt_at
                {
                    tx.enqueue(&made.work(), at)?;
                    wrote = true;
                }
                targets.push(target.clone());
                continue;
            }
            let Some(active) = read.wants(tx, &event.store.id, target, event)? else {
                continue;
            };
            let mut delivery = Delivery::new(event, target, now);
            delivery.cause_depth = entry.cause.as_ref().map_or(0, |c| c.depth);
            delivery.traceparent.clone_from(&entry.trace);
            targets.push(target.clone());
            if !active {
                delivery.status = DeliveryStatus::Failed;
                delivery.failure = Some("the subscription was paused".to_owned());
            } else if let Some(left) = room.as_mut().filter(|left| **left > 0) {
                *left -= 1;
                delivery.next_attempt_at = Some(now);
                // Written with its first attempt (or pending, if that is slow to come).
                first.push((delivery.due_key(now), delivery));
                continue;
            } else {
                enqueue(tx, &mut delivery, now)?;
            }
            tx.write(&delivery.key(), &delivery)?;
            wrote = true;
        }
        if first.is_empty() {
            tx.remove(key)?;
            wrote = true;
        }
        Ok(Fanned {
            first: Some(first),
            expiry: Some(expiry_of(event, targets, false)?),
            wrote,
        })
    }
}

/// Removes the outbox entries whose deliveries' first attempts, made from memory, are all
/// recorded (see [`FirstAttempts`]), writing their events' expiry records not yet written.
pub fn remove_outbox_entries(db: &Db, done: &Alongside) -> Result<()> {
    db.tx_relaxed(|tx| done.write(tx))
}

/// Writes deliveries handed over for their first attempt (see [`FirstAttempts`]) as they were
/// made, pending, each unless it was written meanwhile (its attempt recorded), with their
/// events' expiry records not yet written (`alongside`): the API shows a delivery whose first
/// attempt is slow to come, and a replay or a resend finds it.
pub fn write_pending(db: &Db, deliveries: &[&Delivery], alongside: &Alongside) -> Result<()> {
    db.tx_relaxed(|tx| {
        alongside.write(tx)?;
        for d in deliveries {
            let key = d.key();
            if !tx.exists(&key)? {
                tx.write(&key, *d)?;
            }
        }
        Ok(())
    })
}

/// The work queue at `now`, for the metrics: how many entries are due (in flight included),
/// reading at most `limit` keys, and how long the oldest one has been due.
pub fn due_stats(db: &Db, now: Timestamp, limit: usize) -> Result<(usize, std::time::Duration)> {
    crate::storage::queue::due_stats(db, now, limit)
}

/// How long a host's claim on a delivery holds by default where hosts share the database:
/// another host takes the delivery over only after it (the claiming host died, or its attempt
/// ran past it: a webhook's timeout is 10 s, a component's wall-clock limit at most a minute).
/// The operator may set another (`Options::claim_lease`); the same host restarted takes its own
/// claims back at once.
pub const CLAIM_LEASE: std::time::Duration = std::time::Duration::from_secs(120);

/// What claiming a queue entry's delivery found (see [`claim_many`]).
#[derive(Debug)]
pub enum Claimed {
    /// The delivery, this host's to attempt.
    Mine(Box<Delivery>),
    /// The entry was a leftover (its delivery gone, or moved on by an attempt, a replay or a
    /// purge): it was removed.
    Gone,
    /// Another host's claim on it holds: the entry stays for that host.
    Held,
}

/// The deliveries the queue entries `entries` name, in order, each if its entry is still its
/// current one (else the entry is a leftover and is removed). Where hosts share the database,
/// each attempt is also claimed for this host for the service's claim lease, all in one
/// transaction (one engine round claims what it starts together), on the delivery record itself
/// (`Delivery::claim`, see [`Claim::holds_against`]), so that one host makes the attempt:
/// [`Claimed::Held`] while another host's claim holds (the entry stays for it). (A claim record of its own would
/// put every claim on the same few index pages, where PostgreSQL's serializable transactions
/// conflict with each other.)
pub fn claim_many(service: &Service, entries: &[(&str, &DueEntry)]) -> Result<Vec<Claimed>> {
    let db = &service.db;
    if db.is_shared() {
        let now = service.now();
        return db.tx_relaxed(|tx| {
            tx.prefetch(
                entries
                    .iter()
                    .map(|(_, e)| delivery_key(&e.store_id, &e.target, &e.event_id)),
            )?;
            entries
                .iter()
                .map(|(due_key, entry)| claim_in_tx(tx, service, due_key, entry, now))
                .collect()
        });
    }
    let mut out = Vec::with_capacity(entries.len());
    for (due_key, entry) in entries {
        let key = delivery_key(&entry.store_id, &entry.target, &entry.event_id);
        match db.read::<Delivery>(&key)? {
            Some(d) if is_current(&d, due_key) => out.push(Claimed::Mine(Box::new(d))),
            _ => {
                db.tx_relaxed(|tx| tx.remove(due_key))?;
                out.push(Claimed::Gone);
            }
        }
    }
    Ok(out)
}

/// One entry's claim in the claiming transaction (see [`claim_many`]).
fn claim_in_tx(
    tx: &mut Tx<'_>,
    service: &Service,
    due_key: &str,
    entry: &DueEntry,
    now: Timestamp,
) -> Result<Claimed> {
    let key = delivery_key(&entry.store_id, &entry.target, &entry.event_id);
    let Some(mut d) = tx
        .read::<Delivery>(&key)?
        .filter(|d| is_current(d, due_key))
    else {
        tx.remove(due_key)?;
        return Ok(Claimed::Gone);
    };
    if d.claim
        .as_ref()
        .is_some_and(|c| c.holds_against(due_key, &service.holder, now))
    {
        return Ok(Claimed::Held);
    }
    d.claim = Some(Claim::new(
        due_key,
        &service.holder,
        now,
        service.claim_lease,
    ));
    tx.write(&key, &d)?;
    Ok(Claimed::Mine(Box::new(d)))
}

fn is_current(d: &Delivery, due_key: &str) -> bool {
    d.status == DeliveryStatus::Pending
        && d.next_attempt_at.is_some_and(|at| d.due_key(at) == due_key)
}

/// Fails a delivery without an attempt (its target is paused or gone, or its event expired). One
/// made from memory for its first attempt (see [`FirstAttempts`]) is written so, failed, as the
/// fan-out would have written it for a paused target.
pub fn fail_unsent(
    service: &Service,
    (due_key, made): Made<'_>,
    entry: &DueEntry,
    reason: &str,
) -> Result<()> {
    let key = delivery_key(&entry.store_id, &entry.target, &entry.event_id);
    let now = service.now();
    service.db.tx_relaxed(|tx| {
        if made.is_none() {
            tx.remove(due_key)?;
        }
        let stored = tx.read::<Delivery>(&key)?;
        if let Some(mut d) = stored.or_else(|| made.filter(|d| !expired(d, now)).cloned())
            && is_current(&d, due_key)
        {
            d.status = DeliveryStatus::Failed;
            d.next_attempt_at = None;
            d.failure = Some(reason.to_owned());
            tx.write(&key, &d)?;
        }
        Ok(())
    })
}

impl Service {
    /// Records an attempt in one transaction (see [`record_attempt`]), with the notice of a pause
    /// going the host's mail route. Attempts are the engine's bookkeeping and not flushed (a
    /// crash repeats the attempt), but a pause is, with its notice (see
    /// [`queue_mail`](crate::service::mail::queue_mail)), before the engine can send it.
    pub fn record_attempt(
        &self,
        due_key: &str,
        entry: &DueEntry,
        outcome: &Outcome,
    ) -> Result<Option<Paused>> {
        self.record_attempts(
            &[((due_key, None), Stored::Maybe, entry, outcome)],
            &Alongside::default(),
        )
        .map(|mut paused| paused.pop().flatten())
    }
}

impl Service {
    /// Records a batch of attempts in one transaction, as [`Service::record_attempt`] does each
    /// (the engine's group commit: every attempt that finished while the last batch was being
    /// written goes into the next). Returns what each paused, in order.
    ///
    /// Each attempt comes with its queue entry's key and, for a first attempt made from memory
    /// (see [`FirstAttempts`]), the delivery as it was made: its queue entry was never written,
    /// and the delivery is written now unless it was already; the transaction also writes what
    /// goes `alongside` such attempts (their events' expiry records not yet written, and the
    /// outbox entries they settle whole).
    pub fn record_attempts(
        &self,
        batch: &[(Made<'_>, Stored, &DueEntry, &Outcome)],
        alongside: &Alongside,
    ) -> Result<Vec<Option<Paused>>> {
        let now = self.now();
        let route = self.mail_route;
        self.db.tx_relaxed(|tx| {
            tx.prefetch(
                batch
                    .iter()
                    .filter(|(_, stored, _, _)| *stored == Stored::Maybe)
                    .map(|(_, _, e, _)| delivery_key(&e.store_id, &e.target, &e.event_id)),
            )?;
            alongside.write(tx)?;
            batch
                .iter()
                .map(|(due, stored, entry, outcome)| {
                    record_attempt_of(tx, *due, *stored, entry, outcome, now, route)
                })
                .collect()
        })
    }
}

/// An attempt's queue entry key, with the delivery as made for a first attempt made from memory
/// (see [`FirstAttempts`]; `None`: a queued one).
pub type Made<'a> = (&'a str, Option<&'a Delivery>);

/// Whether the record of an attempt reads its delivery's stored record first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// It may be stored: read it, and move on what is stored (a queued attempt's, or one made
    /// from memory and written pending meanwhile).
    Maybe,
    /// A first attempt made from memory whose delivery was never written, and which nothing
    /// else writes until this record does (see `First::written_by_record` in the engine): the
    /// record writes the delivery as made without reading it (a read that finds nothing costs
    /// a lookup in each of the store's levels).
    Never,
}

/// Records an attempt and moves the delivery on: done on success; otherwise the next retry of
/// the schedule, counted from now; after the last retry, failed, and the target paused, with the
/// notice to its owner queued (`route`) in this same transaction, so that the pause is never
/// committed without its mail. It also ends a host's claim on the delivery ([`claim`]).
/// Returns the paused target and its notice.
pub fn record_attempt(
    tx: &mut Tx<'_>,
    due_key: &str,
    entry: &DueEntry,
    outcome: &Outcome,
    now: Timestamp,
    route: MailRoute,
) -> Result<Option<Paused>> {
    record_attempt_of(
        tx,
        (due_key, None),
        Stored::Maybe,
        entry,
        outcome,
        now,
        route,
    )
}

/// [`record_attempt`] of an attempt whose queue entry is `due_key`, or would be: a first attempt
/// made from memory (see [`FirstAttempts`]) comes with its delivery as it was made (`made`), its
/// queue entry never written, and the delivery perhaps not either (read first unless `stored`
/// says it never was).
fn record_attempt_of(
    tx: &mut Tx<'_>,
    (due_key, made): Made<'_>,
    stored: Stored,
    entry: &DueEntry,
    outcome: &Outcome,
    now: Timestamp,
    route: MailRoute,
) -> Result<Option<Paused>> {
    let key = delivery_key(&entry.store_id, &entry.target, &entry.event_id);
    let queued = made.is_none();
    let stored = match stored {
        Stored::Never if made.is_some() => None,
        _ => tx.read::<Delivery>(&key)?,
    };
    let Some(mut d) = stored.or_else(|| made.filter(|d| !expired(d, now)).cloned()) else {
        // Purged meanwhile (or, made from memory, its event expired since: not written).
        if queued {
            tx.remove(due_key)?;
        }
        return Ok(None);
    };
    let attempt = Attempt {
        id: AttemptId::generate(outcome.started),
        delivery_id: d.id.clone(),
        event_id: d.event_id.clone(),
        event_type: d.event_type,
        attempted_at: outcome.started,
        retry: d.retries,
        succeeded: outcome.succeeded,
        status_code: outcome.status_code,
        error: outcome.error.clone(),
        duration_ms: outcome.duration_ms,
        response_body: outcome.response_body.clone(),
        logs: outcome.logs.clone(),
    };
    tx.write(&attempt_key(&d.store_id, &d.target, &attempt.id), &attempt)?;
    // The attempt is recorded: the claim on it ends (the record is written below).
    d.claim = None;
    if let (TargetRef::Component(installation), Some(recording)) = (&d.target, &outcome.recording) {
        let kept = InvocationRecord {
            store_id: d.store_id.clone(),
            installation_id: installation.clone(),
            event_id: d.event_id.clone(),
            recording: &**recording,
        };
        tx.write(&invocation_key(&attempt.id), &kept)?;
    }
    d.attempt_ids.push(attempt.id);
    d.attempts += 1;
    let mut paused = None;
    // A replay or a purge may have moved the delivery while the attempt ran: only the attempt
    // its queue entry still names moves it on.
    if is_current(&d, due_key) {
        if queued {
            tx.remove(due_key)?;
        }
        d.next_attempt_at = None;
        if outcome.succeeded {
            d.status = DeliveryStatus::Succeeded;
            d.failure = None;
        } else if let Some(delay) = RETRY_SCHEDULE.get(d.retries as usize) {
            d.retries += 1;
            enqueue(tx, &mut d, later(now, *delay)?)?;
        } else {
            let reason = format!(
                "event {} failed its first attempt and all {} retries; last: {}",
                d.event_id,
                RETRY_SCHEDULE.len(),
                outcome.summary()
            );
            d.status = DeliveryStatus::Failed;
            d.failure = Some(reason.clone());
            if let Some(target) = target::pause(tx, &d.store_id, &d.target, now, &reason)? {
                let notice = target::pause_notice(tx, &target)?;
                if let Some(mail) = &notice {
                    queue_mail(tx, mail.clone(), route, now)?;
                }
                paused = Some(Paused { target, notice });
            }
        }
    }
    tx.write(&key, &d)?;
    Ok(paused)
}

/// Whether the retention of `d`'s event is over at `now` (the purge removes its deliveries).
fn expired(d: &Delivery, now: Timestamp) -> bool {
    later(d.event_created_at, RETENTION).is_ok_and(|until| until <= now)
}

/// Queues a delivery whose status `accept` takes again, due `now`, with a fresh schedule. A
/// pending one is moved (its queue entry replaced, never duplicated). Returns whether it was
/// queued.
pub fn requeue(
    tx: &mut Tx<'_>,
    key: &str,
    now: Timestamp,
    accept: impl Fn(DeliveryStatus) -> bool,
) -> Result<bool> {
    let Some(mut d) = tx.read::<Delivery>(key)? else {
        return Ok(false);
    };
    if !accept(d.status) {
        return Ok(false);
    }
    if let Some(at) = d.next_attempt_at.take() {
        tx.remove(&d.due_key(at))?;
    }
    d.status = DeliveryStatus::Pending;
    d.retries = 0;
    d.failure = None;
    d.replays += 1;
    enqueue(tx, &mut d, now)?;
    tx.write(key, &d)?;
    Ok(true)
}

/// What [`purge`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Purged {
    /// Expiry records read and removed (at most the `limit`: when it is reached, more may be
    /// due).
    pub records: usize,
    /// The events they purged.
    pub events: usize,
}

/// Purges the events of up to `limit` expiry records due by `now` (see [`Expiry`]), with their
/// deliveries and attempts, a record's events in one transaction: as many as the fan-out's
/// transaction that wrote it made (up to [`FAN_OUT_DELIVERIES_PER_TX`] deliveries, or one
/// event's, however many).
pub fn purge(db: &Db, now: Timestamp, limit: usize) -> Result<Purged> {
    let batch: Vec<(String, Expiry)> = db.list(EXPIRY_PREFIX, None, false, limit)?;
    let now_ms = millis(now);
    let mut purged = Purged::default();
    for (key, expiry) in batch {
        if expiry_ms_of(&key).is_none_or(|at| at > now_ms) {
            break;
        }
        let events = std::iter::once(&expiry).chain(&expiry.also);
        db.tx_relaxed(|tx| {
            for one in events.clone() {
                tx.remove(&event_key(&one.store_id, &one.event_id))?;
                if one.test {
                    tx.remove(&test_event_key(&one.store_id, &one.event_id))?;
                }
                for target in &one.targets {
                    purge_delivery(tx, one, target)?;
                }
            }
            tx.remove(&key)
        })?;
        purged.records += 1;
        purged.events += events.count();
    }
    Ok(purged)
}

fn purge_delivery(tx: &mut Tx<'_>, expiry: &Expiry, target: &TargetRef) -> Result<()> {
    let key = delivery_key(&expiry.store_id, target, &expiry.event_id);
    let Some(d) = tx.read::<Delivery>(&key)? else {
        return Ok(());
    };
    for id in &d.attempt_ids {
        tx.remove(&attempt_key(&d.store_id, &d.target, id))?;
        if matches!(d.target, TargetRef::Component(_)) {
            tx.remove(&invocation_key(id))?;
        }
    }
    if let Some(at) = d.next_attempt_at {
        tx.remove(&d.due_key(at))?;
    }
    tx.remove(&key)
}

/// When an event expires, and what the purge then removes (see [`expiry_of`]).
type Expiring = (Timestamp, Expiry);

/// When `event` expires (its retention from its creation), and what the purge then removes: it
/// and its deliveries to `targets`.
fn expiry_of(event: &Event, targets: Vec<TargetRef>, test: bool) -> Result<Expiring> {
    let expiry = Expiry {
        store_id: event.store.id.clone(),
        event_id: event.id.clone(),
        targets,
        test,
        also: Vec::new(),
    };
    Ok((later(event.created_at, RETENTION)?, expiry))
}

/// Notes the expiries of a transaction's events (see [`expiry_of`]), in as few records as
/// [`EXPIRY_GROUPED_WITHIN`] allows: each record under the key of its earliest event, at its
/// last one's expiry (see [`Expiry`]).
fn write_expiries(tx: &mut Tx<'_>, expiries: impl IntoIterator<Item = Expiring>) -> Result<()> {
    let mut expiries: Vec<Expiring> = expiries.into_iter().collect();
    expiries.sort_by_key(|(at, _)| *at);
    let mut expiries = expiries.into_iter().peekable();
    while let Some((first_at, mut record)) = expiries.next() {
        let within = later(first_at, EXPIRY_GROUPED_WITHIN)?;
        let mut last_at = first_at;
        while let Some((at, also)) = expiries.next_if(|(at, _)| *at <= within) {
            last_at = at;
            record.also.push(also);
        }
        tx.write(
            &expiry_key(last_at, &record.store_id, &record.event_id),
            &record,
        )?;
    }
    Ok(())
}

/// Queues a test delivery of `event` (already built) to one webhook subscription, due `now`: the
/// event is kept under its test key (not in the event log, never fanned out) and expires with the
/// usual retention. Returns the delivery.
pub fn enqueue_test(
    tx: &mut Tx<'_>,
    event: &Event,
    target: &TargetRef,
    now: Timestamp,
) -> Result<Delivery> {
    tx.write(&test_event_key(&event.store.id, &event.id), event)?;
    let mut delivery = Delivery::new(event, target, now);
    delivery.test = true;
    delivery.traceparent = crate::telemetry::current_traceparent();
    enqueue(tx, &mut delivery, now)?;
    tx.write(&delivery.key(), &delivery)?;
    write_expiries(tx, vec![expiry_of(event, vec![target.clone()], true)?])?;
    Ok(delivery)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use jiff::SignedDuration;

    use super::*;
    use crate::model::clock::ManualClock;
    use crate::model::error::Error;
    use crate::model::event::events_prefix;
    use crate::model::mail::{MAIL_PREFIX, MailRecord, MailStatus};
    use crate::model::store::Store;
    use crate::model::webhook::{Subscription, WebhookStatus};
    use crate::model::work::{Work, WorkKind};
    use crate::service::Options;
    use crate::storage::queue::due;

    /// A service with the plugin `hooked` published: its manifest webhook takes
    /// `plugin.installed`.
    pub(crate) fn with_hooked_plugin() -> (Service, ManualClock, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::open_sled(dir.path(), false).expect("db");
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("ts"));
        let options = Options {
            mail_route: MailRoute::Smtp,
            ..Options::default()
        };
        let service =
            Service::with_options(db, Arc::new(clock.clone()), "admin", options).expect("service");
        publish_hooked(&service, "hooked");
        (service, clock, dir)
    }

    /// Publishes the plugin `name`, whose manifest has `hooks` webhooks taking `order.paid`.
    pub(crate) fn publish_paid_hooks(service: &Service, name: &str, hooks: usize) {
        let webhooks: Vec<_> = (0..hooks)
            .map(|n| {
                serde_json::json!({"url": format!("https://1.1.1.1/paid/{n}"),
                    "events": ["order.paid"], "secret": "0123456789abcdef"})
            })
            .collect();
        let manifest = serde_json::from_value(serde_json::json!({
            "name": name, "version": "1.0.0", "contact_email": "dev@hooked.example",
            "scopes": ["orders.read"], "webhooks": webhooks,
        }))
        .expect("manifest");
        service
            .publish_plugin(manifest, &BTreeMap::new(), None)
            .expect("publish");
    }

    #[test]
    fn an_event_committed_is_at_hand_for_the_fan_out_once_as_a_read_gives_it_back() {
        let (service, clock, store, _dir) = paid_hooks_installed(1);
        let deliveries = || keys(&service, "dlv/").len();
        let before = deliveries();
        // An instant between two milliseconds: the event keeps it as it is stored.
        clock.set("2026-01-05T00:01:00.123456789Z".parse().expect("ts"));
        let emitted = paid(&service, &store, 1);
        let key = event_key(&store.id, &emitted.id);
        let (fresh, size) = service
            .db
            .fresh_events()
            .take(&key)
            .expect("kept once committed");
        let (stored, stored_size): (Event, usize) =
            service.db.read_sized(&key).expect("read").expect("stored");
        assert_eq!(fresh, stored, "the very event a read gives back");
        assert_eq!(
            fresh.created_at,
            "2026-01-05T00:01:00.123Z".parse().expect("ts")
        );
        assert_eq!(size, stored_size, "its stored size");
        assert!(service.db.fresh_events().take(&key).is_none(), "taken once");
        // Taken and not fanned out (as by a fan-out that failed): read from storage then.
        assert_eq!(fan_out_all(&service, drop), 1);
        assert_eq!(deliveries(), before + 1, "its delivery made");
        // The next one is taken by the fan-out.
        let next = paid(&service, &store, 2);
        let key = event_key(&store.id, &next.id);
        assert_eq!(fan_out_all(&service, drop), 1);
        assert!(
            service.db.fresh_events().take(&key).is_none(),
            "the fan-out took it"
        );
        assert_eq!(deliveries(), before + 2);
    }

    #[test]
    fn an_event_whose_transaction_did_not_commit_is_not_kept() {
        let (service, _clock, store, _dir) = paid_hooks_installed(1);
        let mut emitted = None;
        let failed = service.db.tx(|tx| {
            let data = crate::model::event::data::OrderPaid {
                order: crate::model::event::data::PaidOrder {
                    id: "ord_x".parse().expect("order id"),
                    total: 1,
                    currency: "EUR".into(),
                },
            };
            emitted = Some(tx.emit(&store.reference(), data, service.now())?.id.clone());
            Err::<(), _>(Error::invalid("total", "refused"))
        });
        assert!(failed.is_err());
        let id = emitted.expect("emitted in the transaction");
        assert!(
            service
                .db
                .fresh_events()
                .take(&event_key(&store.id, &id))
                .is_none()
        );
        assert_eq!(fan_out_all(&service, drop), 0, "nothing in the outbox");
    }

    #[test]
    fn an_outbox_entry_whose_event_was_not_read_stays_unless_the_transaction_finds_none() {
        let (service, _clock, store, _dir) = paid_hooks_installed(1);
        let deliveries = || keys(&service, "dlv/").len();
        let before = deliveries();
        // Each event's outbox entry, fanned out as if its event had not been read.
        let unread = |event: &Event| {
            let key = crate::model::event::outbox_key(&event.id);
            let entry: OutboxEntry = service.db.read(&key).expect("read").expect("entry");
            let chunk = FanOutChunk {
                service: &service,
                now: service.now(),
                suspect: &|_| false,
                remove: &Alongside::default(),
                mark: None,
            };
            let fanned = chunk
                .run(
                    vec![(key.clone(), entry, None, Vec::new())],
                    &mut None,
                    &mut |_, _, _| panic!("nothing fanned out"),
                )
                .expect("fan out");
            assert_eq!(fanned, None, "no mark");
            service
                .db
                .read::<OutboxEntry>(&key)
                .expect("read")
                .is_some()
        };
        let event = paid(&service, &store, 1);
        assert!(unread(&event), "there: its entry stays");
        assert_eq!(deliveries(), before, "no delivery made");
        // A later fan-out reads it: fanned out as any other.
        assert_eq!(fan_out_all(&service, drop), 1);
        assert_eq!(deliveries(), before + 1, "its delivery made");
        // An event the transaction does not find either (purged): its entry is removed.
        let event = paid(&service, &store, 2);
        service
            .db
            .tx(|tx| tx.remove(&event_key(&store.id, &event.id)))
            .expect("purged");
        assert!(!unread(&event), "removed");
        assert_eq!(fan_out_all(&service, drop), 0, "nothing left");
        assert_eq!(deliveries(), before + 1, "nothing made");
    }

    /// An `order.paid` event committed to `store`.
    pub(crate) fn paid(service: &Service, store: &crate::model::store::Store, n: usize) -> Event {
        use crate::model::event::data::{OrderPaid, PaidOrder};
        let data = OrderPaid {
            order: PaidOrder {
                id: format!("ord_{n}").parse().expect("order id"),
                total: 4200,
                currency: "EUR".into(),
            },
        };
        service
            .db
            .tx(|tx| {
                tx.emit(&store.reference(), data.clone(), service.now())
                    .cloned()
            })
            .expect("emit")
    }

    #[test]
    fn other_stores_light_events_behind_a_backlog_in_the_outbox_go_out_first_in_a_transaction_alone()
     {
        let (service, _clock, _dir) = with_hooked_plugin();
        publish_paid_hooks(&service, "loud", 20);
        publish_paid_hooks(&service, "quiet", 1);
        let loud = service.create_store("loud.example").expect("store");
        service.install(&loud.id, "loud").expect("install");
        let quiet: Vec<_> = (0..3)
            .map(|n| {
                let store = service
                    .create_store(&format!("quiet{n}.example"))
                    .expect("store");
                service.install(&store.id, "quiet").expect("install");
                store
            })
            .collect();
        fan_out_all(&service, drop);
        // One store's backlog of 20 events, 20 deliveries each, then three other stores' events.
        for n in 0..20 {
            paid(&service, &loud, n);
        }
        let others: Vec<Event> = (0..3).map(|n| paid(&service, &quiet[n], 100 + n)).collect();
        // Each event as its transaction commits, with the deliveries made so far.
        let mut told = Vec::new();
        let count = || {
            service
                .db
                .list::<serde_json::Value>("dlv/", None, false, 1000)
                .expect("deliveries")
                .len()
        };
        let taken = fan_out_all(&service, |event| told.push((event.id, count())));
        assert_eq!(taken, 23);
        assert_eq!(told.len(), 23);
        // First, and in a transaction of their own, one for the three: when it committed, their
        // deliveries were the only ones made. (Until the fifteenth pass the first went second, in
        // a transaction with the backlog's first event and more.)
        let first: Vec<_> = told[..3].to_vec();
        let expected: Vec<_> = others.iter().map(|e| (e.id.clone(), 3)).collect();
        assert_eq!(first, expected, "first, in a transaction of their own");
        let made: std::collections::BTreeSet<usize> = told.iter().map(|(_, n)| *n).collect();
        assert_eq!(made.last(), Some(&(20 * 20 + 3)), "every delivery made");
        // The backlog's transactions still make up to a full transaction's deliveries each.
        assert!(
            made.iter().any(|n| n - 3 >= FAN_OUT_DELIVERIES_PER_TX - 20),
            "a full transaction of the backlog: {made:?}"
        );
        let mut before = 0;
        for n in &made {
            assert!(
                n - before <= FAN_OUT_DELIVERIES_PER_TX,
                "a transaction made {}",
                n - before
            );
            before = *n;
        }
        assert!(made.len() > 1, "the backlog took more than one transaction");
    }

    /// Fans out until the outbox is empty, as the engine does (a call stops after a few
    /// milliseconds); returns the entries taken.
    fn fan_out_all(service: &Service, mut fanned_out: impl FnMut(Event)) -> usize {
        let mut taken = 0;
        loop {
            let fanned = fan_out(service, service.now(), 256, None, |read, _, _| {
                fanned_out(read.event)
            })
            .expect("fan out");
            taken += fanned.entries;
            if !fanned.more {
                return taken;
            }
        }
    }

    /// The engine's side of a listing, for [`list_outbox`] alone: the entries it holds, and
    /// where the listing starts.
    #[derive(Default)]
    struct Holding {
        held: std::collections::BTreeSet<String>,
        cursor: std::sync::Mutex<Option<String>>,
    }

    impl FirstAttempts for Holding {
        fn held(&self, key: &str) -> bool {
            self.held.contains(key)
        }
        fn suspect(&self, _: &str) -> bool {
            false
        }
        fn room(&self) -> usize {
            0
        }
        fn take_done(&self) -> Alongside {
            Alongside::default()
        }
        fn removed(&self, _: Vec<String>, _: bool) {}
        fn kept_mark(&self) -> Option<String> {
            None
        }
        fn kept_up_to(&self, _: String) {}
        fn listed_from(&self) -> Option<String> {
            self.cursor.lock().expect("cursor").clone()
        }
        fn list_next_after(&self, key: Option<String>) {
            *self.cursor.lock().expect("cursor") = key;
        }
        fn store_room(&self, _: &StoreId, _: bool) -> StoreRoom {
            StoreRoom::Unbounded
        }
        fn park(&self, _: Vec<(String, OutboxEntry)>) {}
        fn unpark(&self, _: usize) -> Vec<(String, OutboxEntry)> {
            Vec::new()
        }
        fn parked_ready(&self) -> bool {
            false
        }
    }

    #[test]
    fn a_listing_reads_past_held_entries_in_growing_pages_and_only_a_few_more_for_its_last_places()
    {
        // A run of held entries: pages double, up to the most, however few are wanted (a listing
        // one short of its limit before a run of held entries reads past 2 000 of them in 9
        // pages, not 62 growing by one).
        assert_eq!(next_page(256, 256), 768);
        assert_eq!(next_page(256, 2048), HELD_PAGE);
        let (mut page, mut pages, mut read) = (next_page(1, 1), 1, 0);
        while read + page < 2000 {
            read += page;
            page = next_page(1, page);
            pages += 1;
        }
        assert_eq!(pages, 9);
        // A page short of a few: a few more, not a page of the most.
        assert_eq!(next_page(1, 1), 3);
        assert_eq!(next_page(3, 0), 3);
        // Never fewer than wanted.
        assert_eq!(next_page(HELD_PAGE + 10, 5), HELD_PAGE + 10);

        let (service, _clock, _dir) = with_hooked_plugin();
        let store = service.create_store("held.example").expect("store");
        for n in 0..700 {
            paid(&service, &store, n);
        }
        let all = keys(&service, OUTBOX_PREFIX);
        // Held: the first 600 but every hundredth, the way the engine's first attempts leave
        // entries behind; the listing reads past them and lists the others, in order.
        let holding = Holding {
            held: all[..600]
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 100 != 99)
                .map(|(_, k)| k.clone())
                .collect(),
            ..Holding::default()
        };
        let free: Vec<&String> = all.iter().filter(|k| !holding.held.contains(*k)).collect();
        assert_eq!(free.len(), 6 + 100);
        let (listed, full) = list_outbox(&service.db, 50, Some(&holding)).expect("list");
        let listed: Vec<&String> = listed.iter().map(|(k, _)| k).collect();
        assert_eq!(listed, free[..50], "the entries not held, in order");
        assert!(full, "more follow");
        let (whole, full) = list_outbox(&service.db, 256, Some(&holding)).expect("list");
        let whole: Vec<&String> = whole.iter().map(|(k, _)| k).collect();
        assert_eq!(whole, free, "read to the end");
        assert!(!full);
        assert_eq!(
            holding.listed_from().as_ref(),
            all.last(),
            "the next listing reads on from the last entry"
        );
    }

    /// The keys of the records under `prefix`.
    fn keys(service: &Service, prefix: &str) -> Vec<String> {
        let records = service
            .db
            .list::<serde_json::Value>(prefix, None, false, 1000);
        records.expect("list").into_iter().map(|(k, _)| k).collect()
    }

    /// Purges at `at` (the clock set to it): the records and the events purged.
    fn purge_at(service: &Service, clock: &ManualClock, at: Timestamp) -> (usize, usize) {
        clock.set(at);
        let purged = purge(&service.db, at, 64).expect("purge");
        (purged.records, purged.events)
    }

    /// A store with a plugin of `hooks` webhooks taking `order.paid` installed, its install
    /// event fanned out a minute before the clock's time.
    fn paid_hooks_installed(hooks: usize) -> (Service, ManualClock, Store, tempfile::TempDir) {
        let (service, clock, dir) = with_hooked_plugin();
        publish_paid_hooks(&service, "paid", hooks);
        let store = service.create_store("acme.example").expect("store");
        service.install(&store.id, "paid").expect("install");
        fan_out_all(&service, drop);
        clock.advance(SignedDuration::from_mins(1));
        (service, clock, store, dir)
    }

    #[test]
    fn an_event_its_deliveries_and_their_attempts_are_purged_at_its_retention_not_a_millisecond_before()
     {
        let (service, clock, store, _dir) = paid_hooks_installed(2);
        let event = paid(&service, &store, 1);
        fan_out_all(&service, drop);
        // An attempt of each delivery, failed: each is pending, its retry queued.
        let far = service.now() + SignedDuration::from_hours(48);
        let queued = due(&service.db, WorkKind::Webhook, far, None, 10).expect("due");
        assert_eq!(queued.len(), 2);
        for (key, work) in &queued {
            let Work::Delivery(entry) = work else {
                panic!("not a delivery: {work:?}")
            };
            service
                .record_attempt(key, entry, &failed(service.now()))
                .expect("record");
        }
        let held = |service: &Service| {
            let (events, dlv) = (
                keys(service, &events_prefix(&store.id)),
                keys(service, "dlv/"),
            );
            let (att, exp) = (keys(service, "att/"), keys(service, EXPIRY_PREFIX));
            let queued = due(&service.db, WorkKind::Webhook, far, None, 10).expect("due");
            [events.len(), dlv.len(), att.len(), exp.len(), queued.len()]
        };
        // The install event (no delivery) and this one; two deliveries, two attempts, two
        // expiry records (one a minute earlier), two retries.
        assert_eq!(held(&service), [2, 2, 2, 2, 2]);

        let expires = event.created_at + RETENTION;
        assert_eq!(
            purge_at(&service, &clock, expires - SignedDuration::from_millis(1)),
            (1, 1),
            "the install event only"
        );
        assert_eq!(
            held(&service),
            [1, 2, 2, 1, 2],
            "a millisecond before: all kept"
        );

        assert_eq!(purge_at(&service, &clock, expires), (1, 1));
        assert_eq!(
            held(&service),
            [0, 0, 0, 0, 0],
            "purged with everything about it"
        );
    }

    #[test]
    fn events_fanned_out_together_that_expire_within_a_second_share_one_expiry_record() {
        let (service, clock, store, _dir) = paid_hooks_installed(1);
        // Three events 0.5 s and then 1 s apart, fanned out in one transaction.
        let first = paid(&service, &store, 1);
        clock.advance(SignedDuration::from_millis(500));
        let second = paid(&service, &store, 2);
        clock.advance(SignedDuration::from_millis(1000));
        let third = paid(&service, &store, 3);
        let mut told = 0;
        fan_out_all(&service, |_| told += 1);
        assert_eq!(told, 3);
        let expiring = |e: &Event| expiry_key(e.created_at + RETENTION, &store.id, &e.id);
        let mut records = keys(&service, EXPIRY_PREFIX);
        records.remove(0); // The install event's, a minute earlier.
        // The first two under the first's key, at the second's expiry; the third alone.
        let first_key = expiry_key(second.created_at + RETENTION, &store.id, &first.id);
        assert_eq!(records, [first_key, expiring(&third)]);

        // At the first's expiry only the install event goes: the first is kept with the second.
        assert_eq!(
            purge_at(&service, &clock, first.created_at + RETENTION),
            (1, 1)
        );
        assert_eq!(keys(&service, &events_prefix(&store.id)).len(), 3);
        assert_eq!(
            purge_at(&service, &clock, second.created_at + RETENTION),
            (1, 2)
        );
        let left = keys(&service, &events_prefix(&store.id));
        assert_eq!(left, [event_key(&store.id, &third.id)]);
        assert_eq!(keys(&service, "dlv/").len(), 1, "the third's delivery");
        assert_eq!(
            purge_at(&service, &clock, third.created_at + RETENTION),
            (1, 1)
        );
        assert!(keys(&service, "dlv/").is_empty());
        assert!(keys(&service, EXPIRY_PREFIX).is_empty());
    }

    #[test]
    fn an_expiry_record_written_before_events_shared_them_is_read_and_purged() {
        let (service, clock, store, _dir) = paid_hooks_installed(1);
        let event = paid(&service, &store, 1);
        fan_out_all(&service, drop);
        // As written before: one event, no `also`.
        let key = expiry_key(event.created_at + RETENTION, &store.id, &event.id);
        let record: serde_json::Value = service.db.read(&key).expect("read").expect("record");
        assert!(
            record.get("also").is_none(),
            "not written when empty: {record}"
        );
        assert_eq!(
            purge_at(&service, &clock, event.created_at + RETENTION),
            (2, 2)
        );
        assert!(keys(&service, "dlv/").is_empty());
    }

    #[test]
    fn stores_share_the_fan_out_by_the_deliveries_it_makes_each_in_its_own_order() {
        let entry = |store: &str, n: u32| {
            let entry = OutboxEntry {
                store_id: store.parse().expect("store id"),
                event_id: crate::model::ids::EventId::generate(Timestamp::UNIX_EPOCH),
                cause: None,
                trace: None,
            };
            (format!("{store}/{n}"), entry)
        };
        // A store whose events make 50 deliveries each, one whose events make one, and one whose
        // events no target takes, committed in this order.
        let batch = vec![
            entry("store_a", 1),
            entry("store_a", 2),
            entry("store_b", 1),
            entry("store_a", 3),
            entry("store_b", 2),
            entry("store_c", 1),
            entry("store_b", 3),
            entry("store_c", 2),
        ];
        let mut turns = StoreTurns::new(batch, None);
        let mut order = Vec::new();
        while let Some((key, entry)) = turns.next() {
            let deliveries = match entry.store_id.to_string().as_str() {
                "store_a" => 50,
                "store_b" => 1,
                _ => 0,
            };
            turns.charge(&entry.store_id, deliveries);
            order.push(key);
        }
        assert_eq!(
            order,
            [
                "store_a/1",
                "store_b/1",
                "store_c/1",
                "store_b/2",
                "store_c/2",
                "store_b/3",
                "store_a/2",
                "store_a/3",
            ]
        );
    }

    #[test]
    fn a_light_transaction_ends_a_call_only_when_no_heavy_events_wait() {
        let late = FAN_OUT_TIME_PER_CALL;
        let early = std::time::Duration::ZERO;
        let heavy = |made, waiting| Progress { made, waiting };
        // Light events committed, a heavy one waiting: the call goes on to its transaction, on
        // time or late (a PostgreSQL transaction outlasts the time).
        assert!(!call_ends(heavy(0, 50), 3, late));
        assert!(!call_ends(heavy(0, 50), 3, early));
        // A heavy transaction made: the time ends the call.
        assert!(call_ends(heavy(200, 50), 3, late));
        assert!(call_ends(heavy(200, 0), 0, late));
        assert!(!call_ends(heavy(200, 50), 0, early));
        // Light events only: the time ends the call once a transaction of them was made.
        assert!(call_ends(heavy(0, 0), 32, late));
        assert!(!call_ends(heavy(0, 0), 0, late));
        assert!(!call_ends(heavy(0, 0), 32, early));
        // The deliveries a call makes at most, however early.
        assert!(call_ends(
            heavy(FAN_OUT_DELIVERIES_PER_CALL - 50, 50),
            0,
            early
        ));
    }

    #[test]
    fn an_events_id_tells_when_it_was_made_for_the_takeover_of_another_hosts_fan_out() {
        // An id as `new_id_body` writes it (lower case), of a known millisecond.
        let at: Timestamp = "2026-11-26T21:31:47.123Z".parse().expect("ts");
        let ulid = ulid::Ulid::from_parts(millis(at), 42).to_string();
        let id = format!("evt_{}", ulid.to_ascii_lowercase());
        assert_eq!(crate::model::ids::created_ms(&id), Some(millis(at)));
        // A new id is never older than the time it was made at (the process's ids only grow).
        let now = Timestamp::now();
        let made = crate::model::ids::EventId::generate(now);
        assert!(crate::model::ids::created_ms(made.as_str()) >= Some(millis(now)));
        assert_eq!(crate::model::ids::created_ms("evt_not-a-ulid"), None);
    }

    #[test]
    fn hosts_sharing_the_database_start_a_stores_backlog_at_parts_of_their_own() {
        let entries: Vec<_> = (0..2 * FAN_OUT_PER_TX)
            .map(|n| {
                let entry = OutboxEntry {
                    store_id: "store_a".parse().expect("store id"),
                    event_id: crate::model::ids::EventId::generate(Timestamp::UNIX_EPOCH),
                    cause: None,
                    trace: None,
                };
                (format!("{n:04}"), entry)
            })
            .collect();
        let first = |spread| {
            StoreTurns::new(entries.clone(), spread)
                .next()
                .map(|(key, _)| key)
        };
        assert_eq!(first(None).as_deref(), Some("0000"));
        assert_eq!(first(Some(2)).as_deref(), Some("0000"));
        assert_eq!(first(Some(3)), Some(format!("{FAN_OUT_PER_TX:04}")));
    }

    /// Publishes the plugin `name`, whose manifest webhook takes `plugin.installed`.
    fn publish_hooked(service: &Service, name: &str) {
        let manifest = serde_json::from_value(serde_json::json!({
            "name": name, "version": "1.0.0", "contact_email": "dev@hooked.example",
            "webhooks": [{"url": "https://1.1.1.1/in", "events": ["plugin.installed"],
                "secret": "0123456789abcdef"}],
        }))
        .expect("manifest");
        service
            .publish_plugin(manifest, &BTreeMap::new(), None)
            .expect("publish");
    }

    /// A store whose plugin's manifest webhook takes `plugin.installed`, installed: one delivery
    /// queued for the webhook.
    fn one_queued_delivery() -> (Service, ManualClock, tempfile::TempDir) {
        let (service, clock, dir) = with_hooked_plugin();
        let store = service.create_store("acme.example").expect("store");
        service.install(&store.id, "hooked").expect("install");
        fan_out(&service, service.now(), 10, None, |_, _, _| {}).expect("fan out");
        (service, clock, dir)
    }

    fn failed(at: Timestamp) -> Outcome {
        let mut outcome = Outcome::unsent(at, String::new());
        outcome.status_code = Some(500);
        outcome
    }

    /// The delivery's one entry in the work queue, whenever it is due.
    fn entry(service: &Service) -> (String, DueEntry) {
        let far = service.now() + SignedDuration::from_hours(48);
        let mut due = due(&service.db, WorkKind::Webhook, far, None, 10).expect("due");
        assert_eq!(due.len(), 1, "one webhook entry");
        match due.remove(0) {
            (key, Work::Delivery(entry)) => (key, entry),
            other => panic!("not a delivery: {other:?}"),
        }
    }

    fn mails(service: &Service) -> Vec<MailRecord> {
        service
            .db
            .list::<MailRecord>(MAIL_PREFIX, None, false, 10)
            .expect("mail")
            .into_iter()
            .map(|(_, m)| m)
            .collect()
    }

    fn subscription_status(service: &Service, entry: &DueEntry) -> WebhookStatus {
        let TargetRef::Webhook(id) = &entry.target else {
            panic!("a webhook target")
        };
        service
            .db
            .read::<Subscription>(&Subscription::key(&entry.store_id, id))
            .expect("read")
            .expect("subscription")
            .status
    }

    #[test]
    fn the_pause_notice_is_queued_in_the_transaction_that_pauses_the_target() {
        let (service, clock, _dir) = one_queued_delivery();
        for delay in RETRY_SCHEDULE {
            let (key, entry) = entry(&service);
            let paused = service
                .record_attempt(&key, &entry, &failed(service.now()))
                .expect("record");
            assert!(paused.is_none(), "a retry is left");
            clock.advance(delay);
        }
        let (key, entry) = entry(&service);

        // The last failure, in a transaction that then aborts: neither the pause nor its mail.
        let now = service.now();
        let aborted: Result<()> = service.db.tx(|tx| {
            let paused = record_attempt(tx, &key, &entry, &failed(now), now, MailRoute::Smtp)?;
            assert!(paused.is_some());
            Err(Error::invalid("x", "abort after the pause"))
        });
        assert!(aborted.is_err());
        assert_eq!(subscription_status(&service, &entry), WebhookStatus::Active);
        assert!(mails(&service).is_empty(), "no mail without its pause");
        assert_eq!(entry_key_of(&service), key, "the attempt is still due");

        // Committed: the pause and its queued mail together.
        let paused = service
            .record_attempt(&key, &entry, &failed(now))
            .expect("record")
            .expect("paused");
        assert_eq!(subscription_status(&service, &entry), WebhookStatus::Paused);
        let notice = paused.notice.expect("a notice");
        let mails = mails(&service);
        assert_eq!(mails.len(), 1);
        assert_eq!(mails[0].status, MailStatus::Queued);
        assert_eq!(mails[0].to, "dev@hooked.example");
        assert_eq!(mails[0].subject, notice.subject);
        let queued = due(&service.db, WorkKind::Mail, now, None, 10).expect("due");
        assert_eq!(
            queued.iter().map(|(_, w)| w.clone()).collect::<Vec<_>>(),
            [Work::Mail {
                mail_id: mails[0].id.clone()
            }]
        );
    }

    #[test]
    fn a_batch_of_attempts_is_recorded_in_one_transaction_each_as_alone() {
        let (service, _clock, _dir) = one_queued_delivery();
        let (key, entry) = entry(&service);
        let now = service.now();
        let mut ok = Outcome::unsent(now, String::new());
        ok.succeeded = true;
        ok.status_code = Some(200);
        let failed = failed(now);
        // The same delivery twice in one batch: the first attempt moves it on (succeeded), the
        // second is recorded in the log but no longer current.
        let paused = service
            .record_attempts(
                &[
                    ((&key, None), Stored::Maybe, &entry, &ok),
                    ((&key, None), Stored::Maybe, &entry, &failed),
                ],
                &Alongside::default(),
            )
            .expect("record");
        assert_eq!(paused.len(), 2);
        let delivery: Delivery = service
            .db
            .read(&delivery_key(
                &entry.store_id,
                &entry.target,
                &entry.event_id,
            ))
            .expect("read")
            .expect("delivery");
        assert_eq!(delivery.status, DeliveryStatus::Succeeded);
        assert_eq!(delivery.attempts, 2, "both attempts are in the log");
        assert!(
            due(&service.db, WorkKind::Webhook, now, None, 10)
                .expect("due")
                .is_empty(),
            "no retry queued by the stale second attempt"
        );
    }

    #[test]
    fn a_target_read_once_in_a_transaction_still_takes_each_event_by_its_own_rules() {
        // Two plugins installed in one store: each one's manifest webhook takes
        // `plugin.installed`, which concerns its own installation only.
        let (service, _clock, _dir) = with_hooked_plugin();
        publish_hooked(&service, "hooked-too");
        let store = service.create_store("acme.example").expect("store");
        service.install(&store.id, "hooked").expect("install");
        service.install(&store.id, "hooked-too").expect("install");
        let events: Vec<Event> = service
            .db
            .list::<OutboxEntry>(OUTBOX_PREFIX, None, false, 10)
            .expect("outbox")
            .into_iter()
            .map(|(_, entry)| {
                service
                    .db
                    .read(&event_key(&entry.store_id, &entry.event_id))
                    .expect("read")
                    .expect("event")
            })
            .collect();
        let subs: Vec<Subscription> = service
            .db
            .list(&Subscription::store_prefix(&store.id), None, false, 10)
            .expect("subscriptions")
            .into_iter()
            .map(|(_, sub)| sub)
            .collect();
        assert_eq!((events.len(), subs.len()), (2, 2));
        let installed_by = |sub: &Subscription| {
            events
                .iter()
                .position(|e| {
                    e.data
                        .installation()
                        .is_some_and(|i| i.id == sub.installation_id)
                })
                .expect("its installation's event")
        };
        let wants = |status: WebhookStatus| {
            service
                .db
                .tx(|tx| {
                    for sub in &subs {
                        let mut sub = sub.clone();
                        sub.status = status;
                        tx.write(&Subscription::key(&store.id, &sub.id), &sub)?;
                    }
                    let mut read = target::TargetsRead::default();
                    let mut seen = Vec::new();
                    // Every event to every subscription, twice: the second round reads nothing.
                    for _ in 0..2 {
                        for sub in &subs {
                            for event in &events {
                                seen.push(read.wants(tx, &store.id, &sub.target(), event)?);
                            }
                        }
                    }
                    Ok(seen)
                })
                .expect("tx")
        };
        let expected = |active: bool| -> Vec<Option<bool>> {
            let one: Vec<Option<bool>> = subs
                .iter()
                .flat_map(|sub| {
                    let own = installed_by(sub);
                    (0..events.len()).map(move |i| (i == own).then_some(active))
                })
                .collect();
            one.iter().chain(&one).copied().collect()
        };
        assert_eq!(wants(WebhookStatus::Active), expected(true));
        // Paused in the transaction before its first read of each: the read it keeps says so.
        assert_eq!(wants(WebhookStatus::Paused), expected(false));
    }

    fn entry_key_of(service: &Service) -> String {
        entry(service).0
    }
}
