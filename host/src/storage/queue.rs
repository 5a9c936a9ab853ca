//! The durable work queue: webhook attempts, component invocations, outgoing messages and the
//! host's own mail, as entries of [`Work`] under `work/{kind}/{due ms}/…` (see
//! [`crate::model::work`]).
//!
//! Work is queued with [`Tx::enqueue`] in the caller's transaction, so it commits (or not) with
//! its cause, and the commit wakes the delivery engine. The engine reads each kind's lane in due
//! order ([`due`]) and hands each entry to the service layer, which removes it in the transaction
//! that records what came of it, or moves it a lease ahead first ([`Tx::postpone`]) for work that
//! is retried only after a lease when a crash cuts it short.

use std::sync::Mutex;

use jiff::Timestamp;
use serde::de::IgnoredAny;

use super::{Db, Tx};
use crate::model::delivery::{DueEntry, millis};
use crate::model::error::Result;
use crate::model::ids::{MessageId, StoreId};
use crate::model::work::{WORK_PREFIX, Work, WorkKind, due_ms_of};

/// What the delivery engine waits on: rung after every commit that queued work (or an event to
/// fan out), with the earliest key the commits queued in each lane for each store since the
/// engine last looked, so that it reads each lane from there instead of from its head (where the
/// work in flight is), and finds one store's new work even behind another's backlog queued in
/// the same millisecond.
#[derive(Debug, Default)]
pub struct Signal {
    notify: tokio::sync::Notify,
    /// Rung after every commit that emitted an event: the engine's fan-out waits on it.
    outbox: tokio::sync::Notify,
    earliest: Mutex<Queued>,
    /// Deliveries the engine holds in memory for their first attempt, their queue entries never
    /// written (see [`crate::service::deliveries::queue::FirstAttempts`]): how many are due at
    /// each millisecond. [`due_stats`] counts them with the queue's.
    held: Mutex<std::collections::BTreeMap<u64, usize>>,
    /// See [`Signal::take_outbox_earliest`].
    outbox_earliest: Mutex<Option<String>>,
    /// Outbox entries the engine's fan-out holds parked (see
    /// [`crate::service::deliveries::queue::FirstAttempts::park`]), for the metrics.
    parked: std::sync::atomic::AtomicUsize,
}

impl Signal {
    /// Waits for the next ring (one ring while nobody waits is kept for the next wait).
    pub async fn notified(&self) {
        self.notify.notified().await;
    }

    /// Waits for the next commit that emitted an event (one while nobody waits is kept).
    pub async fn outbox_notified(&self) {
        self.outbox.notified().await;
    }

    /// Rings without naming work, for the fan-out too (a test wakes the engine, or another
    /// process committed): the fan-out reads the outbox from its head.
    pub fn ring(&self) {
        self.note_outbox(String::new());
        self.notify.notify_one();
        self.outbox.notify_one();
    }

    /// Notes how many outbox entries the fan-out holds parked.
    pub fn set_parked(&self, parked: usize) {
        self.parked
            .store(parked, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many outbox entries the fan-out holds parked.
    pub fn parked(&self) -> usize {
        self.parked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Rings the fan-out without naming an entry: it reads on from where it left off (the
    /// engine settled deliveries of a store whose events wait, parked, for room).
    pub fn ring_fan_out(&self) {
        self.outbox.notify_one();
    }

    /// Rings the fan-out: a commit emitted an event, the first under `first` (`None`: a key
    /// not told, the fan-out reads from the head).
    pub(super) fn ring_outbox(&self, first: Option<String>) {
        self.note_outbox(first.unwrap_or_default());
        self.outbox.notify_one();
    }

    fn note_outbox(&self, key: String) {
        let mut earliest = self
            .outbox_earliest
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if earliest.as_ref().is_none_or(|e| key < *e) {
            *earliest = Some(key);
        }
    }

    /// The first outbox key (in key order) emitted since the last call (`""`: read from the
    /// head), for a fan-out that reads the outbox on from where it left off.
    pub fn take_outbox_earliest(&self) -> Option<String> {
        self.outbox_earliest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Rings after a commit that queued `queued`.
    pub(super) fn ring_queued(&self, queued: &Queued) {
        if queued.groups.iter().any(|keys| !keys.is_empty()) {
            let mut earliest = self.earliest.lock().unwrap_or_else(|e| e.into_inner());
            let past = queued.groups.iter().zip(&queued.past);
            for (lane, (keys, past)) in past.enumerate() {
                for key in keys.iter().chain(past) {
                    earliest.note_lane(lane, key);
                }
            }
        }
        self.notify.notify_one();
    }

    /// Notes a delivery held in memory, due at `due_ms` (see [`Signal::held`]).
    pub fn hold(&self, due_ms: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        *held.entry(due_ms).or_default() += 1;
    }

    /// Forgets a delivery held in memory, due at `due_ms`.
    pub fn release(&self, due_ms: u64) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&due_ms) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&due_ms);
            }
        }
    }

    /// How many deliveries held in memory are due at `now_ms`, and the earliest due time.
    fn held_due(&self, now_ms: u64) -> (usize, Option<u64>) {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let due = held.range(..=now_ms).map(|(_, n)| n).sum();
        (due, held.keys().next().copied().filter(|&ms| ms <= now_ms))
    }

    /// The earliest key queued in each lane for each group of each store (a few stores; see
    /// [`Queued`]) since the last call, and each store's earliest past its groups, and forgets
    /// them all.
    pub fn take_earliest(&self) -> Queued {
        let mut earliest = self.earliest.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *earliest)
    }
}

/// Stores whose earliest keys [`Queued`] keeps apart in a lane: past them, a key takes the place
/// of the latest one when it is earlier (the engine's cursor and sweep find the others).
pub const STORES_NOTED: usize = 16;

/// Groups (a store's work due in one millisecond, see [`group_of_key`]) that [`Queued`] keeps
/// apart for each store: its earliest ones. A store's events committed one after another while
/// the engine was busy each queue their work in a group of their own, and another store's
/// backlog due in the same milliseconds lies between them in the lane.
pub const GROUPS_PER_STORE: usize = 8;

/// Keys [`Queued`] keeps in a lane at most.
pub const KEYS_NOTED: usize = STORES_NOTED * GROUPS_PER_STORE;

/// The earliest key queued in each lane (in the order of [`WorkKind::ALL`]) for each group of
/// each store ([`GROUPS_PER_STORE`] groups of [`STORES_NOTED`] stores at most), and for each of
/// those stores, its earliest key queued past its groups.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Each lane's groups: the earliest key of each.
    pub groups: [Vec<String>; 4],
    /// Each lane's keys queued past their stores' groups: the earliest of each store (one of
    /// the stores of `groups`). The store's work queued since lies in its groups or at or after
    /// this key: the engine reads it millisecond by millisecond from there (where a store's
    /// events committed one after another while the engine was busy queued more groups than
    /// are kept, those past them waited for the cursor, behind another store's backlog: up to
    /// 1.6 s behind a burst of 50 000 deliveries).
    pub past: [Vec<String>; 4],
}

/// The store a queue key names (`work/{kind}/{due}/{store}/…`; a mail's key, which names none,
/// stands for itself).
pub fn store_of_key(key: &str) -> &str {
    key.split('/').nth(3).unwrap_or(key)
}

/// The group of a queue key: the work of one store due in one millisecond, the key's prefix
/// `work/{kind}/{due}/{store}/` (a key without a store, a mail's, is a group of its own). A
/// group's entries are next to each other in the lane, wherever other stores' work lies.
pub fn group_of_key(key: &str) -> &str {
    key.match_indices('/')
        .nth(3)
        .and_then(|(i, _)| key.get(..=i))
        .unwrap_or(key)
}

impl Queued {
    /// The earliest keys of each lane's groups, in lane order.
    pub(super) fn lanes(&self) -> &[Vec<String>; 4] {
        &self.groups
    }

    /// Each store's earliest key in lane `index` (of its groups'), in the order first noted.
    pub(super) fn earliest_of_stores(&self, index: usize) -> Vec<String> {
        let mut earliest = Vec::new();
        for key in self.groups.get(index).into_iter().flatten() {
            keep_earliest_of_store(&mut earliest, key);
        }
        earliest
    }

    /// Notes `key` as queued in lane `index` (also what another process announced): the
    /// earliest key of its group is kept, of the earliest [`GROUPS_PER_STORE`] groups of its
    /// store, of [`STORES_NOTED`] stores; past its store's groups, the store's earliest such key.
    pub(super) fn note_lane(&mut self, index: usize, key: &str) {
        let (Some(keys), Some(past)) = (self.groups.get_mut(index), self.past.get_mut(index))
        else {
            return;
        };
        let group = group_of_key(key);
        // A commit queues its work group by group: the last group noted is the likely one.
        if let Some(same) = keys.iter_mut().rev().find(|k| group_of_key(k) == group) {
            if key < same.as_str() {
                *same = key.to_owned();
            }
            return;
        }
        let store = store_of_key(key);
        let of_store = keys.iter().filter(|k| store_of_key(k) == store).count();
        if of_store > 0 && of_store < GROUPS_PER_STORE
            || of_store == 0 && stores_in(keys) < STORES_NOTED
        {
            keys.push(key.to_owned());
            return;
        }
        // Full: the key takes the place of the latest one (of its store's, when it has its
        // share of groups) when it is earlier; past its store's groups, the later one is the
        // store's past key if it is its earliest.
        let only_store = of_store > 0;
        let mut later = key;
        let replaced;
        if let Some(latest) = keys
            .iter_mut()
            .filter(|k| !only_store || store_of_key(k) == store)
            .max()
            && key < latest.as_str()
        {
            replaced = std::mem::replace(latest, key.to_owned());
            later = &replaced;
        }
        if !only_store {
            return; // A store not noted: the cursor and the sweep find its work.
        }
        keep_earliest_of_store(past, later);
    }

    fn note(&mut self, kind: WorkKind, key: &str) {
        self.note_lane(lane_index(kind), key);
    }
}

/// Keeps `key` in `keys` if it is the earliest of its store there: one key per store, of
/// [`STORES_NOTED`] stores at most (past them, the cursor and the sweep find a store's work).
pub fn keep_earliest_of_store(keys: &mut Vec<String>, key: &str) {
    let store = store_of_key(key);
    let room = keys.len() < STORES_NOTED;
    match keys.iter_mut().find(|k| store_of_key(k) == store) {
        Some(earliest) if key < earliest.as_str() => key.clone_into(earliest),
        None if room => keys.push(key.to_owned()),
        Some(_) | None => {}
    }
}

/// How many stores `keys` name.
fn stores_in(keys: &[String]) -> usize {
    let mut stores: Vec<&str> = keys.iter().map(|k| store_of_key(k)).collect();
    stores.sort_unstable();
    stores.dedup();
    stores.len()
}

/// The position of `kind` in [`WorkKind::ALL`].
pub fn lane_index(kind: WorkKind) -> usize {
    match kind {
        WorkKind::Webhook => 0,
        WorkKind::Component => 1,
        WorkKind::Message => 2,
        WorkKind::Mail => 3,
    }
}

/// The position in a lane just before every entry due in the same millisecond as `key`: a scan
/// after it reads them all.
pub fn before_same_ms(key: &str) -> &str {
    let lane_end = key
        .strip_prefix(WORK_PREFIX)
        .and_then(|rest| rest.find('/'))
        .map_or(0, |i| WORK_PREFIX.len() + i + 1);
    key.get(..lane_end + 21).unwrap_or(key)
}

impl Tx<'_> {
    /// Queues `work`, due at `at`, in this transaction, and wakes the delivery engine once it
    /// commits. Returns the entry's key.
    pub fn enqueue(&mut self, work: &Work, at: Timestamp) -> Result<String> {
        let key = work.key(at);
        self.write(&key, work)?;
        self.queued.note(work.kind(), &key);
        self.wake_delivery();
        Ok(key)
    }

    /// Moves the entry at `key` to `until` (a lease: claimed work whose outcome is never recorded
    /// comes due again then). Returns the new key and the work, or `None` when the entry is gone.
    pub fn postpone(&mut self, key: &str, until: Timestamp) -> Result<Option<(String, Work)>> {
        let Some(work) = self.read::<Work>(key)? else {
            return Ok(None);
        };
        self.remove(key)?;
        let moved = work.key(until);
        self.write(&moved, &work)?;
        Ok(Some((moved, work)))
    }
}

use crate::model::work::Claim;
pub use crate::model::work::Holder;

impl Tx<'_> {
    /// Claims the work queue entry `due_key` for `holder` until `now + lease`, under the record
    /// `claim_key`, in this transaction, so that one host makes the attempt: `false` while a
    /// claim of another holder on the same entry holds ([`Claim::holds_against`]: a claim of
    /// the same host's earlier boot is taken over at once, another host's only when its lease
    /// ends). The claim is released with [`Tx::release_claim`] in the transaction that records
    /// the outcome. (A delivery's claim is kept on the delivery itself instead.)
    pub fn take_claim(
        &mut self,
        claim_key: &str,
        due_key: &str,
        holder: &Holder,
        now: Timestamp,
        lease: std::time::Duration,
    ) -> Result<bool> {
        if let Some(held) = self.read::<Claim>(claim_key)?
            && held.holds_against(due_key, holder, now)
        {
            return Ok(false);
        }
        self.write(claim_key, &Claim::new(due_key, holder, now, lease))?;
        Ok(true)
    }

    /// Releases the claim at `claim_key` (see [`Tx::take_claim`]).
    pub fn release_claim(&mut self, claim_key: &str) -> Result<()> {
        self.remove(claim_key)
    }
}

/// Up to `limit` entries of `kind` due at `now`, in due order, after the key `after`, as stored
/// (the caller decodes those it takes). Fewer than `limit` means that no other entry of the lane
/// is due.
pub fn due_raw(
    db: &Db,
    kind: WorkKind,
    now: Timestamp,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, Vec<u8>)>> {
    let now_ms = millis(now);
    let batch = db.list_raw(&kind.prefix(), after, limit)?;
    Ok(batch
        .into_iter()
        .take_while(|(key, _)| due_ms_of(key).is_some_and(|due| due <= now_ms))
        .collect())
}

/// Up to `limit` entries of the group of `from` ([`group_of_key`]: one store's work due in one
/// millisecond) after the key `from`, if that millisecond is due at `now`, as stored.
pub fn due_in_group(
    db: &Db,
    now: Timestamp,
    from: &str,
    limit: usize,
) -> Result<Vec<(String, Vec<u8>)>> {
    let group = group_of_key(from);
    if due_ms_of(group).is_none_or(|due| due > millis(now)) {
        return Ok(Vec::new());
    }
    db.list_raw(group, Some(from), limit)
}

/// Up to `limit` entries of `kind` due at `now`, in due order, after the key `after`. Fewer than
/// `limit` means that no other entry of the lane is due.
pub fn due(
    db: &Db,
    kind: WorkKind,
    now: Timestamp,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, Work)>> {
    let now_ms = millis(now);
    let batch: Vec<(String, Work)> = db.list(&kind.prefix(), after, false, limit)?;
    Ok(batch
        .into_iter()
        .take_while(|(key, _)| due_ms_of(key).is_some_and(|due| due <= now_ms))
        .collect())
}

/// The queue at `now`, for the metrics: how many entries of every kind are due (in flight
/// included, and the deliveries the engine holds in memory for their first attempt), reading at
/// most `limit` keys in all, and how long the oldest one has been due.
pub fn due_stats(db: &Db, now: Timestamp, limit: usize) -> Result<(usize, std::time::Duration)> {
    const BATCH: usize = 256;
    let now_ms = millis(now);
    let (mut due, mut read, mut oldest) = (0, 0, None::<u64>);
    for kind in WorkKind::ALL {
        let prefix = kind.prefix();
        let mut after: Option<String> = None;
        'lane: loop {
            let room = limit.saturating_sub(read).min(BATCH);
            if room == 0 {
                break;
            }
            let batch: Vec<(String, IgnoredAny)> =
                db.list(&prefix, after.as_deref(), false, room)?;
            read += batch.len();
            for (key, _) in &batch {
                match due_ms_of(key) {
                    Some(ms) if ms <= now_ms => {
                        due += 1;
                        oldest = Some(oldest.map_or(ms, |o| o.min(ms)));
                    }
                    _ => break 'lane,
                }
            }
            if batch.len() < room {
                break;
            }
            after = batch.last().map(|(key, _)| key.clone());
        }
    }
    let (held, earliest) = db.delivery_signal().held_due(now_ms);
    due += held;
    oldest = match (oldest, earliest) {
        (Some(queued), Some(held)) => Some(queued.min(held)),
        (queued, held) => queued.or(held),
    };
    let age = oldest.map_or(0, |ms| now_ms.saturating_sub(ms));
    Ok((due, std::time::Duration::from_millis(age)))
}

/// Where earlier versions queued deliveries: `due/{ms}/{store}/{target}/{event}`.
const LEGACY_DELIVERIES: &str = "due/";
/// Where earlier versions queued messages: `msgq/{ms}/{store}/{message}`.
const LEGACY_MESSAGES: &str = "msgq/";

/// The due time (ms) of a legacy queue key; an unreadable one is due at once.
fn legacy_ms(key: &str, prefix: &str) -> u64 {
    key.strip_prefix(prefix)
        .and_then(|rest| rest.get(..20))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}

/// Moves the entries of the queues of earlier versions (`due/`, `msgq/`) into the work queue,
/// due at the same times, in batches of one transaction each. Run once at start, before the
/// engine; returns how many entries moved.
pub fn migrate_legacy(db: &Db) -> Result<usize> {
    const BATCH: usize = 256;
    let mut moved = 0;
    loop {
        let batch: Vec<(String, DueEntry)> = db.list(LEGACY_DELIVERIES, None, false, BATCH)?;
        if batch.is_empty() {
            break;
        }
        db.tx(|tx| {
            for (key, entry) in &batch {
                tx.remove(key)?;
                let work = Work::Delivery(entry.clone());
                tx.write(&work.key_at_ms(legacy_ms(key, LEGACY_DELIVERIES)), &work)?;
            }
            Ok(())
        })?;
        moved += batch.len();
    }
    loop {
        let batch: Vec<(String, MessageId)> = db.list(LEGACY_MESSAGES, None, false, BATCH)?;
        if batch.is_empty() {
            break;
        }
        db.tx(|tx| {
            for (key, message_id) in &batch {
                tx.remove(key)?;
                let Some(store_id) = key
                    .split('/')
                    .nth(2)
                    .and_then(|s| s.parse::<StoreId>().ok())
                else {
                    tracing::warn!(key, "dropped a malformed message queue entry");
                    continue;
                };
                let work = Work::Message {
                    store_id,
                    message_id: message_id.clone(),
                };
                tx.write(&work.key_at_ms(legacy_ms(key, LEGACY_MESSAGES)), &work)?;
            }
            Ok(())
        })?;
        moved += batch.len();
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::delivery::TargetRef;

    fn temp_db() -> (Db, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        (Db::open_sled(dir.path(), false).expect("open"), dir)
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("ts")
    }

    fn message(n: u32) -> Work {
        Work::Message {
            store_id: "store_a".parse().expect("id"),
            message_id: format!("msg_{n}").parse().expect("id"),
        }
    }

    #[test]
    fn a_claim_holds_against_other_hosts_until_its_lease_ends_but_not_against_its_hosts_next_boot()
    {
        let (db, _dir) = temp_db();
        let holder = |host: &str, boot: &str| Holder {
            host: host.to_owned(),
            boot: boot.to_owned(),
        };
        let lease = std::time::Duration::from_secs(120);
        let take = |who: &Holder, entry: &str, now: Timestamp| {
            db.tx(|tx| tx.take_claim("claim/d", entry, who, now, lease))
                .expect("claim")
        };
        let (a1, a2, b) = (holder("a", "1"), holder("a", "2"), holder("b", "1"));
        assert!(take(&a1, "work/x/1", at(0)), "unclaimed");
        assert!(!take(&a1, "work/x/1", at(1)), "in flight in this boot");
        assert!(
            !take(&b, "work/x/1", at(119)),
            "another host waits for the lease"
        );
        assert!(
            take(&a2, "work/x/1", at(2)),
            "the host's next boot takes it back at once"
        );
        assert!(
            !take(&a1, "work/x/1", at(3)),
            "and it is the next boot's now"
        );
        assert!(
            take(&b, "work/x/1", at(122)),
            "the lease ended: another host takes it over"
        );
        assert!(
            take(&a2, "work/x/2", at(123)),
            "a claim of another entry holds nothing"
        );
        db.tx(|tx| tx.release_claim("claim/d")).expect("release");
        assert!(take(&b, "work/x/2", at(124)), "released");
    }

    #[test]
    fn a_commit_tells_the_engine_the_earliest_work_it_queued_in_each_lane() {
        let (db, _dir) = temp_db();
        let signal = db.delivery_signal();
        db.tx(|tx| {
            tx.enqueue(&message(2), at(20))?;
            tx.enqueue(&message(1), at(10))?;
            tx.enqueue(
                &Work::Mail {
                    mail_id: "mail_a".parse().expect("id"),
                },
                at(5),
            )
        })
        .expect("enqueue");
        db.tx(|tx| tx.enqueue(&message(3), at(30)).map(drop))
            .expect("enqueue");
        let earliest = signal.take_earliest().groups;
        // Each group of the store apart (its work due in one millisecond: see
        // `group_of_key`), the earliest key of each.
        let mut messages = earliest[lane_index(WorkKind::Message)].clone();
        messages.sort();
        assert_eq!(
            messages,
            vec![
                message(1).key(at(10)),
                message(2).key(at(20)),
                message(3).key(at(30))
            ]
        );
        assert_eq!(
            earliest[lane_index(WorkKind::Mail)]
                .iter()
                .map(|k| due_ms_of(k))
                .collect::<Vec<_>>(),
            vec![Some(5000)]
        );
        assert!(earliest[lane_index(WorkKind::Webhook)].is_empty());
        assert_eq!(signal.take_earliest(), Queued::default(), "taken");

        // An aborted transaction tells nothing.
        let _ = db.tx(|tx| {
            tx.enqueue(&message(0), at(1))?;
            Err::<(), _>(crate::model::error::Error::invalid("x", "abort"))
        });
        assert_eq!(signal.take_earliest(), Queued::default());
    }

    /// The `n`th message of `store`, as queued work.
    fn of(store: &str, n: u32) -> Work {
        Work::Message {
            store_id: store.parse().expect("id"),
            message_id: format!("msg_{n:03}").parse().expect("id"),
        }
    }

    #[test]
    fn a_commit_tells_each_stores_earliest_work_apart_for_a_few_stores() {
        let (db, _dir) = temp_db();
        let signal = db.delivery_signal();
        // Another store's work queued in the same commit as one store's backlog, later in key
        // order: told apart, so the engine reads from each; and each store's groups (its work
        // due in one millisecond) apart, each from its earliest key.
        db.tx(|tx| {
            for n in 0..100 {
                tx.enqueue(&of("store_a", n), at(10))?;
            }
            tx.enqueue(&of("store_b", 0), at(10))?;
            tx.enqueue(&of("store_a", 100), at(5))
        })
        .expect("enqueue");
        let lane = lane_index(WorkKind::Message);
        assert_eq!(
            signal.take_earliest().groups[lane],
            vec![
                of("store_a", 0).key(at(10)),
                of("store_b", 0).key(at(10)),
                of("store_a", 100).key(at(5))
            ]
        );
        // Past a few stores, the earliest keys are kept.
        db.tx(|tx| {
            for n in 0..(STORES_NOTED as u32 + 4) {
                tx.enqueue(&of(&format!("store_{n:02}"), n), at(100 - i64::from(n)))?;
            }
            Ok(())
        })
        .expect("enqueue");
        let mut kept = signal.take_earliest().groups[lane].clone();
        kept.sort();
        let mut expected: Vec<String> = (4..STORES_NOTED as u32 + 4)
            .map(|n| of(&format!("store_{n:02}"), n).key(at(100 - i64::from(n))))
            .collect();
        expected.sort();
        assert_eq!(kept, expected);
    }

    #[test]
    fn a_stores_commits_in_turn_with_anothers_backlog_are_each_told_up_to_its_share_of_groups() {
        let (db, _dir) = temp_db();
        let signal = db.delivery_signal();
        // A quiet store's events, each committed a millisecond after the last, between the
        // commits of a loud store's backlog due in the same milliseconds, before the engine
        // looks.
        let quiet = (GROUPS_PER_STORE + 2) as u32;
        for n in 0..quiet {
            let ms = 10 + i64::from(n);
            db.tx(|tx| {
                for m in 0..50 {
                    tx.enqueue(&of("store_loud", 50 * n + m), at(ms))?;
                }
                Ok(())
            })
            .expect("enqueue");
            db.tx(|tx| tx.enqueue(&of("store_quiet", n), at(ms)).map(drop))
                .expect("enqueue");
        }
        let taken = signal.take_earliest();
        let noted = &taken.groups[lane_index(WorkKind::Message)];
        let of_store = |store: &str| -> Vec<String> {
            let mut keys: Vec<String> = noted
                .iter()
                .filter(|k| store_of_key(k) == store)
                .cloned()
                .collect();
            keys.sort();
            keys
        };
        // Each group's earliest key, of each store's earliest groups.
        let expected = |store: &str, first: fn(u32) -> u32| -> Vec<String> {
            (0..GROUPS_PER_STORE as u32)
                .map(|n| of(store, first(n)).key(at(10 + i64::from(n))))
                .collect()
        };
        assert_eq!(of_store("store_quiet"), expected("store_quiet", |n| n));
        assert_eq!(of_store("store_loud"), expected("store_loud", |n| 50 * n));
        assert!(noted.len() <= KEYS_NOTED);
        // Past its groups, each store's earliest key: the rest of its work lies at or after it.
        let past = GROUPS_PER_STORE as u32;
        let mut past_keys = taken.past[lane_index(WorkKind::Message)].clone();
        past_keys.sort();
        assert_eq!(
            past_keys,
            vec![
                of("store_loud", 50 * past).key(at(10 + i64::from(past))),
                of("store_quiet", past).key(at(10 + i64::from(past))),
            ]
        );
        // A key earlier than a store's latest group takes its place, and that group's key
        // becomes the store's past key if it is its earliest.
        let mut queued = Queued::default();
        let lane = lane_index(WorkKind::Message);
        for n in 0..GROUPS_PER_STORE as u32 {
            queued.note_lane(lane, &of("store_a", n).key(at(20 + i64::from(n))));
        }
        let latest = of("store_a", past - 1).key(at(20 + i64::from(past) - 1));
        queued.note_lane(lane, &of("store_a", 99).key(at(90)));
        assert_eq!(queued.past[lane], vec![of("store_a", 99).key(at(90))]);
        queued.note_lane(lane, &of("store_a", 98).key(at(1)));
        assert!(queued.groups[lane].contains(&of("store_a", 98).key(at(1))));
        assert!(!queued.groups[lane].contains(&latest));
        assert_eq!(
            queued.past[lane],
            vec![latest],
            "the earliest past the groups"
        );
        // A group is one store's work due in one millisecond, wherever others' lies.
        let key = of("store_quiet", 1).key(at(11));
        let group = group_of_key(&key);
        assert!(key.starts_with(group) && group.ends_with("/store_quiet/"));
        assert_eq!(due_ms_of(group), Some(11_000));
        assert_eq!(
            group_of_key("work/mail/00000000000000000001/mail_a"),
            "work/mail/00000000000000000001/mail_a"
        );
    }

    #[test]
    fn a_scan_after_the_same_ms_position_reads_every_entry_due_in_that_ms() {
        let (db, _dir) = temp_db();
        db.tx(|tx| {
            for n in [1, 2, 3] {
                tx.enqueue(&message(n), at(10))?;
            }
            tx.enqueue(&message(9), at(9)).map(drop)
        })
        .expect("enqueue");
        let key = message(2).key(at(10));
        let from = before_same_ms(&key);
        assert!(from < message(1).key(at(10)).as_str() && from > message(9).key(at(9)).as_str());
        let found = due_raw(&db, WorkKind::Message, at(10), Some(from), 10).expect("due");
        assert_eq!(found.len(), 3);
        assert_eq!(before_same_ms("not a work key"), "not a work key");
    }

    #[test]
    fn due_work_is_read_in_due_order_per_kind_up_to_now() {
        let (db, _dir) = temp_db();
        db.tx(|tx| {
            tx.enqueue(&message(3), at(30))?;
            tx.enqueue(&message(1), at(10))?;
            tx.enqueue(&message(2), at(20))?;
            tx.enqueue(
                &Work::Mail {
                    mail_id: "mail_a".parse().expect("id"),
                },
                at(5),
            )
        })
        .expect("enqueue");
        let found = due(&db, WorkKind::Message, at(20), None, 10).expect("due");
        let works: Vec<Work> = found.iter().map(|(_, w)| w.clone()).collect();
        assert_eq!(works, [message(1), message(2)]);
        let after = due(&db, WorkKind::Message, at(20), Some(&found[0].0), 10).expect("due");
        assert_eq!(after.len(), 1);
        let (count, oldest) = due_stats(&db, at(20), 100).expect("stats");
        assert_eq!(count, 3, "two messages and the mail");
        assert_eq!(oldest, std::time::Duration::from_secs(15));
    }

    #[test]
    fn a_postponed_entry_leaves_its_place_for_a_later_one() {
        let (db, _dir) = temp_db();
        let key = db
            .tx(|tx| tx.enqueue(&message(1), at(10)))
            .expect("enqueue");
        let (moved, work) = db
            .tx(|tx| tx.postpone(&key, at(300)))
            .expect("postpone")
            .expect("there");
        assert_eq!(work, message(1));
        assert_eq!(moved, message(1).key(at(300)));
        assert!(
            due(&db, WorkKind::Message, at(299), None, 10)
                .expect("due")
                .is_empty()
        );
        assert_eq!(db.tx(|tx| tx.postpone(&key, at(400))).expect("tx"), None);
    }

    #[test]
    fn entries_of_the_old_queues_move_into_the_work_queue_at_their_due_times() {
        let (db, _dir) = temp_db();
        let entry = DueEntry {
            store_id: "store_a".parse().expect("id"),
            target: TargetRef::Webhook("wh_a".parse().expect("id")),
            event_id: "evt_a".parse().expect("id"),
        };
        db.tx(|tx| {
            tx.write(
                "due/00000000000000010000/store_a/wh_a/evt_a",
                &serde_json::json!({"store_id": "store_a", "target": {"webhook": "wh_a"},
                    "event_id": "evt_a"}),
            )?;
            tx.write("msgq/00000000000000020000/store_a/msg_1", &"msg_1")
        })
        .expect("legacy entries");
        assert_eq!(migrate_legacy(&db).expect("migrate"), 2);
        assert_eq!(migrate_legacy(&db).expect("again"), 0);
        let delivery = Work::Delivery(entry);
        assert_eq!(
            db.read::<Work>(&delivery.key(at(10))).expect("read"),
            Some(delivery)
        );
        assert_eq!(
            db.read::<Work>(&message(1).key(at(20))).expect("read"),
            Some(message(1))
        );
        let left: Vec<(String, IgnoredAny)> = db.list("due/", None, false, 10).expect("list");
        assert!(left.is_empty());
    }
}
