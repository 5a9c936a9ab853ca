//! Serializable transactions for an embedded engine that applies a batch of writes atomically
//! (sled, fjall): each runs its closure outside any lock, then queues for the commit lock, and
//! whoever takes the lock next commits every queued transaction whose reads are still current,
//! as one batch (see [`Commits::transact`]).

// The transaction's own maps hash with foldhash (seeded per process) rather than SipHash: a
// transaction holds a bounded number of keys, so even keys a client chose (an idempotency key)
// cannot make a long chain out of them.
use foldhash::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::{Mutex, RwLock};

use super::{CommitStats, Txn};
use crate::model::error::{Error, Result};

/// What an engine gives [`Commits`]: reads of single keys, and batches applied as one.
pub(super) trait Engine: Send + Sync + 'static {
    /// A value as the engine returns it, compared with a later read at the commit.
    type Value: AsRef<[u8]> + PartialEq + Clone + Send + std::fmt::Debug;

    /// The value at `key`.
    fn read(&self, key: &[u8]) -> Result<Option<Self::Value>>;

    /// Applies every write (`None`: a removal) as one unit: a reader that looks afterwards sees
    /// all of them, and a crash keeps all or none.
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<()>;
}

/// How many times a transaction's closure runs outside the commit lock before it runs under it
/// (see [`Commits::transact`]).
pub(super) const OPTIMISTIC_TRIES: usize = 3;

/// The commits of one engine: the lock they take and the transactions queued for it.
#[derive(Debug)]
pub(super) struct Commits<E: Engine> {
    pub(super) engine: E,
    /// Held alone by whoever commits the queued transactions (see [`Commits::commit_queued`]),
    /// whose checks of the keys they read and whose batch no other commit may come between, and
    /// by a transaction whose closure runs under it (see [`Commits::transact_locked`]).
    pub(super) commit: RwLock<()>,
    /// The optimistic commits waiting for the commit lock: whichever of them takes it first
    /// commits all of them, as one batch.
    pub(super) queued: Mutex<Vec<Queued<E::Value>>>,
    /// What the batches applied so far held, and the time applying them took.
    applied: Applied,
}

/// [`CommitStats`] as they are counted, each batch adding to them as it is applied.
#[derive(Debug, Default)]
struct Applied {
    batches: AtomicU64,
    transactions: AtomicU64,
    writes: AtomicU64,
    nanos: AtomicU64,
}

/// An optimistic transaction at its commit: what its closure read (checked again under the
/// commit lock), the writes it buffered, and whether its closure failed (then nothing is
/// written, but the failure counts only if what it read was current).
#[derive(Debug)]
pub(super) struct Queued<V> {
    pub(super) reads: HashMap<Vec<u8>, Option<V>>,
    pub(super) writes: HashMap<Vec<u8>, Option<Vec<u8>>>,
    pub(super) failed: bool,
    pub(super) outcome: Arc<Mutex<Option<Committed>>>,
}

/// What became of a queued commit.
#[derive(Debug, Clone)]
pub(super) enum Committed {
    /// What it read was current: its writes were applied (or, when its closure failed, its
    /// failure stands).
    Current,
    /// A key it read had changed (or was written by a transaction committed before it in the
    /// same batch): its closure runs again.
    Stale,
    /// The batch could not be applied (the engine's error, as text: it is shared by the batch).
    Failed(String),
}

impl<E: Engine> Commits<E> {
    pub(super) fn new(engine: E) -> Self {
        Self {
            engine,
            commit: RwLock::new(()),
            queued: Mutex::new(Vec::new()),
            applied: Applied::default(),
        }
    }

    /// What the batches applied since the store was opened held, and the time applying them
    /// took.
    pub(super) fn stats(&self) -> CommitStats {
        let applied = &self.applied;
        CommitStats {
            batches: applied.batches.load(Ordering::Relaxed),
            transactions: applied.transactions.load(Ordering::Relaxed),
            writes: applied.writes.load(Ordering::Relaxed),
            applying: std::time::Duration::from_nanos(applied.nanos.load(Ordering::Relaxed)),
        }
    }

    /// Applies `batch`, the writes of `transactions` transactions, under the commit lock (held
    /// by the caller), counting it in [`Commits::stats`] once the engine has applied it (one it
    /// failed to apply wrote nothing, and is not counted).
    fn apply(&self, transactions: u64, batch: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<()> {
        let writes = batch.len() as u64;
        let started = Instant::now();
        self.engine.apply(batch)?;
        let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let counted = &self.applied;
        counted.batches.fetch_add(1, Ordering::Relaxed);
        counted
            .transactions
            .fetch_add(transactions, Ordering::Relaxed);
        counted.writes.fetch_add(writes, Ordering::Relaxed);
        counted.nanos.fetch_add(took, Ordering::Relaxed);
        Ok(())
    }

    /// Runs `f` as one serializable transaction. Optimistic: the closure runs outside any lock,
    /// reading the engine and buffering its writes; then the transaction queues for the commit
    /// lock, and whoever holds it next reads the keys it read again and, if none changed,
    /// applies its writes in one atomic batch with those of every transaction queued meanwhile
    /// ([`Commits::commit_queued`]). A changed key runs the closure again, on the current
    /// values; after [`OPTIMISTIC_TRIES`] the closure runs holding the commit lock
    /// ([`Commits::transact_locked`]), so a transaction always ends. An error from the closure
    /// is returned only when what it read was still current (one drawn from values that
    /// changed meanwhile runs it again, as does a run that saw half of another's writes).
    pub(super) fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        for _ in 0..OPTIMISTIC_TRIES {
            let mut overlay = Overlay::new(&self.engine);
            let ran = f(&mut overlay);
            if overlay.writes.is_empty() && overlay.reads.len() <= 1 {
                return ran; // One read (or none) is consistent as read, and nothing to write.
            }
            let outcome = Arc::new(Mutex::new(None));
            self.queued.lock().push(Queued {
                reads: overlay.reads,
                writes: overlay.writes,
                failed: ran.is_err(),
                outcome: outcome.clone(),
            });
            {
                let _commit = self.commit.write();
                // Committed by whoever held the lock before, or else now, with whatever else
                // is queued.
                if outcome.lock().is_none() {
                    self.commit_queued();
                }
            }
            let committed = outcome.lock().take();
            match committed {
                Some(Committed::Current) => return ran,
                Some(Committed::Stale) => continue,
                Some(Committed::Failed(e)) => {
                    return Err(Error::Internal(anyhow::anyhow!("applying a batch: {e}")));
                }
                None => {
                    return Err(Error::Internal(anyhow::anyhow!(
                        "an optimistic commit was left unanswered"
                    )));
                }
            }
        }
        self.transact_locked(f)
    }

    /// The closure runs holding the commit lock alone, so nothing commits between its reads and
    /// its batch: the last resort of a transaction whose reads kept changing.
    pub(super) fn transact_locked(
        &self,
        f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>,
    ) -> Result<()> {
        let _commit = self.commit.write();
        let mut overlay = Overlay::new(&self.engine);
        f(&mut overlay)?;
        if overlay.writes.is_empty() {
            return Ok(());
        }
        self.apply(1, overlay.writes.into_iter().collect())
    }

    /// Commits every optimistic transaction queued, holding the commit lock alone (no other
    /// transaction commits meanwhile), in the order they were queued: each whose reads are all
    /// still current (none changed in the engine, none written by one before it in this batch)
    /// joins the batch; the others run again. The batch is applied as one: sled writes it to
    /// its log as one unit, with one seal of its log buffer however many transactions it holds
    /// (sled seals it twice for each batch or transaction it commits, and writes every sealed
    /// buffer to disk on its own); fjall appends it to its journal in one write. The
    /// transactions that queued while one committed share the next commit: whichever of them
    /// takes the lock first commits them all.
    pub(super) fn commit_queued(&self) {
        let queued = std::mem::take(&mut *self.queued.lock());
        let mut batch = Vec::new();
        let mut joined = 0;
        let mut written: HashSet<Vec<u8>> = HashSet::default();
        let mut outcomes = Vec::with_capacity(queued.len());
        for commit in queued {
            let current = commit.reads.iter().try_fold(true, |current, (key, seen)| {
                Ok::<_, Error>(current && !written.contains(key) && self.engine.read(key)? == *seen)
            });
            let outcome = match current {
                Ok(true) => {
                    if !commit.failed && !commit.writes.is_empty() {
                        joined += 1;
                        for (key, value) in commit.writes {
                            written.insert(key.clone());
                            batch.push((key, value));
                        }
                    }
                    Committed::Current
                }
                Ok(false) => Committed::Stale,
                Err(e) => Committed::Failed(format!("{e:#}")),
            };
            outcomes.push((commit.outcome, outcome));
        }
        #[cfg(test)]
        tests::between_check_and_batch();
        let applied = if !batch.is_empty() {
            self.apply(joined, batch).map_err(|e| format!("{e:#}"))
        } else {
            Ok(())
        };
        for (slot, outcome) in outcomes {
            let outcome = match (&applied, outcome) {
                (Err(e), Committed::Current) => Committed::Failed(e.clone()),
                (_, outcome) => outcome,
            };
            *slot.lock() = Some(outcome);
        }
    }
}

/// A transaction's view of the engine while its closure runs, outside any lock: what it read
/// (the first value of each key, kept for its later reads and checked again at the commit) and
/// the writes it buffered (which its later reads see).
struct Overlay<'a, E: Engine> {
    engine: &'a E,
    reads: HashMap<Vec<u8>, Option<E::Value>>,
    writes: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a, E: Engine> Overlay<'a, E> {
    fn new(engine: &'a E) -> Self {
        Self {
            engine,
            reads: HashMap::default(),
            writes: HashMap::default(),
        }
    }
}

impl<E: Engine> Txn for Overlay<'_, E> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(written) = self.writes.get(key) {
            return Ok(written.clone());
        }
        if let Some(seen) = self.reads.get(key) {
            return Ok(seen.as_ref().map(|v| v.as_ref().to_vec()));
        }
        let value = self.engine.read(key)?;
        let out = value.as_ref().map(|v| v.as_ref().to_vec());
        self.reads.insert(key.to_vec(), value);
        Ok(out)
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()> {
        self.writes.insert(key.to_vec(), Some(value));
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.writes.insert(key.to_vec(), None);
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::cell::RefCell;

    thread_local! {
        /// Run by an optimistic commit of this thread after its reads were found current and
        /// before its batch is applied (under the commit lock).
        pub(in crate::storage) static BETWEEN: RefCell<Option<Box<dyn FnOnce()>>> =
            RefCell::new(None);
    }

    pub(in crate::storage) fn between_check_and_batch() {
        if let Some(f) = BETWEEN.with(|b| b.borrow_mut().take()) {
            f();
        }
    }

    /// An engine in memory whose batches fail while `failing` is set.
    #[derive(Default)]
    struct Memory {
        records: parking_lot::Mutex<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
        failing: std::sync::atomic::AtomicBool,
    }

    impl super::Engine for Memory {
        type Value = Vec<u8>;

        fn read(&self, key: &[u8]) -> crate::model::error::Result<Option<Vec<u8>>> {
            Ok(self.records.lock().get(key).cloned())
        }

        fn apply(
            &self,
            writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        ) -> crate::model::error::Result<()> {
            if self.failing.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(crate::model::error::Error::Internal(anyhow::anyhow!(
                    "disk full"
                )));
            }
            let mut records = self.records.lock();
            for (key, value) in writes {
                match value {
                    Some(value) => records.insert(key, value),
                    None => records.remove(&key),
                };
            }
            Ok(())
        }
    }

    #[test]
    fn a_batch_the_engine_failed_to_apply_is_not_counted() {
        let commits = super::Commits::new(Memory::default());
        let write = |commits: &super::Commits<Memory>, key: &'static [u8]| {
            commits.transact(&mut |txn| {
                txn.put(key, b"1".to_vec())?;
                txn.put(b"other", b"2".to_vec())
            })
        };
        commits
            .engine
            .failing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            write(&commits, b"a").is_err(),
            "the engine's error is the commit's"
        );
        // Its lone transaction ran under the lock too, and failed the same way.
        assert!(
            commits
                .transact_locked(&mut |txn| txn.put(b"b", b"1".to_vec()))
                .is_err()
        );
        assert_eq!(commits.stats(), super::CommitStats::default());
        commits
            .engine
            .failing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        write(&commits, b"a").expect("applied");
        let stats = commits.stats();
        assert_eq!((stats.batches, stats.transactions, stats.writes), (1, 1, 2));
        assert!(stats.applying > std::time::Duration::ZERO);
        let stored = super::Engine::read(&commits.engine, b"a").expect("read");
        assert_eq!(stored, Some(b"1".to_vec()));
    }
}
