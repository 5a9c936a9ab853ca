//! The embedded backend: one sled tree, serializable transactions, run optimistically and
//! committed in shared batches (see [`SledStorage::transact_optimistic`]).

// The transaction's own maps hash with foldhash (seeded per process) rather than SipHash: a
// transaction holds a bounded number of keys, so even keys a client chose (an idempotency key)
// cannot make a long chain out of them.
use foldhash::HashMap;
use std::cell::RefCell;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};

use super::{Entry, Storage, Txn};
use crate::model::error::{Error, Result};

/// Storage in a sled database on local disk.
#[derive(Debug, Clone)]
pub struct SledStorage {
    db: sled::Db,
    tree: sled::Tree,
    /// Taken by every commit: shared by the transactions that run in sled's (see
    /// [`SledStorage::transact_locked`]; sled runs them one at a time itself), alone by the
    /// commit of optimistic ones (see [`SledStorage::commit_queued`]), whose checks of the keys
    /// they read and whose batch no other commit may come between.
    commit: Arc<RwLock<()>>,
    /// The optimistic commits waiting for the commit lock: whichever of them takes it first
    /// commits all of them, as one batch (see [`SledStorage::commit_queued`]).
    queued: Arc<Mutex<Vec<Queued>>>,
    /// How many batches [`SledStorage::commit_queued`] applied.
    #[cfg(test)]
    batches: Arc<std::sync::atomic::AtomicUsize>,
}

/// An optimistic transaction at its commit: what its closure read (checked again under the
/// commit lock), the writes it buffered, and whether its closure failed (then nothing is
/// written, but the failure counts only if what it read was current).
#[derive(Debug)]
struct Queued {
    reads: HashMap<Vec<u8>, Option<sled::IVec>>,
    writes: HashMap<Vec<u8>, Option<Vec<u8>>>,
    failed: bool,
    outcome: Arc<Mutex<Option<Committed>>>,
}

/// What became of a queued commit.
#[derive(Debug, Clone)]
enum Committed {
    /// What it read was current: its writes were applied (or, when its closure failed, its
    /// failure stands).
    Current,
    /// A key it read had changed (or was written by a transaction committed before it in the
    /// same batch): its closure runs again.
    Stale,
    /// The batch could not be applied (sled's error, as text: it is shared by the batch).
    Failed(String),
}

/// How long opening waits for the folder's lock while it is held: sled's I/O threads keep the
/// files (and their lock) a moment after the last handle of a closed database is dropped, so a
/// host restarted in the same process (or a command run right after it) finds it still held.
/// Another process that holds it keeps it: opening then fails with sled's error.
const LOCK_WAIT: Duration = Duration::from_secs(2);

impl SledStorage {
    /// Opens (or creates) the database in `dir`, waiting up to [`LOCK_WAIT`] for its lock.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_waiting(dir, LOCK_WAIT)
    }

    fn open_waiting(dir: &Path, wait: Duration) -> Result<Self> {
        let started = Instant::now();
        let db = loop {
            let opened = sled::Config::new()
                .path(dir)
                .mode(sled::Mode::HighThroughput)
                .open();
            match opened {
                // sled tells a held lock only by its message (an `Other` I/O error).
                Err(sled::Error::Io(e))
                    if e.to_string().starts_with("could not acquire lock")
                        && started.elapsed() < wait =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => {
                    break other.map_err(|e| {
                        Error::Internal(
                            anyhow::Error::new(e)
                                .context(format!("opening the database in {}", dir.display())),
                        )
                    })?;
                }
            }
        };
        let tree = db.open_tree("records")?;
        Ok(Self {
            db,
            tree,
            commit: Arc::new(RwLock::new(())),
            queued: Arc::new(Mutex::new(Vec::new())),
            #[cfg(test)]
            batches: Arc::default(),
        })
    }
}

impl SledStorage {
    /// The closure runs in a sled transaction, holding the commit lock shared: sled runs its
    /// transactions one at a time, and an optimistic commit waits for the one running. The last
    /// resort of an optimistic transaction whose reads kept changing.
    fn transact_locked(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        let _commit = self.commit.read();
        let f = RefCell::new(f);
        let result = self.tree.transaction(|t| {
            let mut f = f.borrow_mut();
            match (*f)(&mut SledTxn(t)) {
                Ok(()) => Ok(()),
                Err(Error::Internal(e)) if e.is::<Conflict>() => {
                    Err(ConflictableTransactionError::Conflict)
                }
                Err(e) => Err(ConflictableTransactionError::Abort(e)),
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(TransactionError::Abort(e)) => Err(e),
            Err(TransactionError::Storage(e)) => Err(e.into()),
        }
    }

    /// Commits every optimistic transaction queued, holding the commit lock alone (no other
    /// transaction commits meanwhile), in the order they were queued: each whose reads are all
    /// still current (none changed in the tree, none written by one before it in this batch)
    /// joins the batch; the others run again. The batch is applied as one (sled writes it to its
    /// log as one unit, recovered whole or not at all, with one seal of its log buffer however
    /// many transactions it holds: sled seals it twice for each batch or transaction it commits,
    /// and writes every sealed buffer to disk on its own). The transactions that queued while one
    /// committed share the next commit: whichever of them takes the lock first commits them all.
    fn commit_queued(&self) {
        let queued = std::mem::take(&mut *self.queued.lock());
        let mut batch = sled::Batch::default();
        let mut written: foldhash::HashSet<Vec<u8>> = foldhash::HashSet::default();
        let mut outcomes = Vec::with_capacity(queued.len());
        for commit in queued {
            let current = commit.reads.iter().try_fold(true, |current, (key, seen)| {
                Ok::<_, sled::Error>(
                    current && !written.contains(key) && self.tree.get(key)? == *seen,
                )
            });
            let outcome = match current {
                Ok(true) => {
                    if !commit.failed {
                        for (key, value) in commit.writes {
                            match value {
                                Some(value) => batch.insert(key.as_slice(), value),
                                None => batch.remove(key.as_slice()),
                            }
                            written.insert(key);
                        }
                    }
                    Committed::Current
                }
                Ok(false) => Committed::Stale,
                Err(e) => Committed::Failed(e.to_string()),
            };
            outcomes.push((commit.outcome, outcome));
        }
        #[cfg(test)]
        tests::between_check_and_batch();
        let applied = if !written.is_empty() {
            #[cfg(test)]
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.tree.apply_batch(batch).map_err(|e| e.to_string())
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

/// How many times a transaction's closure runs outside the commit lock before it runs under it
/// (see [`SledStorage::transact_optimistic`]).
const OPTIMISTIC_TRIES: usize = 3;

/// Marks a sled conflict travelling through our error type, so the transaction is retried.
#[derive(Debug, thiserror::Error)]
#[error("transaction conflict")]
struct Conflict;

fn txn_err(e: UnabortableTransactionError) -> Error {
    match e {
        UnabortableTransactionError::Conflict => Error::Internal(anyhow::Error::new(Conflict)),
        UnabortableTransactionError::Storage(e) => Error::from(e),
    }
}

struct SledTxn<'a>(&'a TransactionalTree);

impl Txn for SledTxn<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0
            .get(key)
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(txn_err)
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()> {
        self.0.insert(key, value).map(drop).map_err(txn_err)
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        self.0.remove(key).map(drop).map_err(txn_err)
    }
}

/// A transaction's view of the tree while its closure runs, outside any lock: what it read
/// (the first value of each key, kept for its later reads and checked again at the commit) and
/// the writes it buffered (which its later reads see).
struct Overlay<'a> {
    tree: &'a sled::Tree,
    reads: HashMap<Vec<u8>, Option<sled::IVec>>,
    writes: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl<'a> Overlay<'a> {
    fn new(tree: &'a sled::Tree) -> Self {
        Self {
            tree,
            reads: HashMap::default(),
            writes: HashMap::default(),
        }
    }
}

impl Txn for Overlay<'_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(written) = self.writes.get(key) {
            return Ok(written.clone());
        }
        if let Some(seen) = self.reads.get(key) {
            return Ok(seen.as_ref().map(|v| v.to_vec()));
        }
        let value = self.tree.get(key)?;
        let out = value.as_ref().map(|v| v.to_vec());
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

impl Storage for SledStorage {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let mut out = Vec::with_capacity(limit.min(1024));
        let iter = match (after, reverse) {
            (None, _) => self.tree.scan_prefix(prefix),
            (Some(after), false) => self
                .tree
                .range::<&[u8], _>((Bound::Excluded(after), Bound::Unbounded)),
            (Some(after), true) => self
                .tree
                .range::<&[u8], _>((Bound::Included(prefix), Bound::Excluded(after))),
        };
        let mut push = |item: sled::Result<(sled::IVec, sled::IVec)>| -> Result<bool> {
            let (k, v) = item?;
            if !k.starts_with(prefix) {
                return Ok(!reverse && k.as_ref() < prefix);
            }
            out.push((k.to_vec(), v.to_vec()));
            Ok(out.len() < limit)
        };
        if reverse {
            for item in iter.rev() {
                if !push(item)? {
                    break;
                }
            }
        } else {
            for item in iter {
                if !push(item)? {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Optimistic: the closure runs outside any lock, reading the tree and buffering its writes;
    /// then the transaction queues for the commit lock, and whoever holds it next reads the keys
    /// it read again and, if none changed, applies its writes in one atomic batch with those of
    /// every transaction queued meanwhile ([`SledStorage::commit_queued`]; sled writes a batch to
    /// its log as one unit, recovered whole or not at all; no sled transaction, which reads the
    /// old value of every key it writes). A changed key runs the closure again, on the current
    /// values; after [`OPTIMISTIC_TRIES`] the closure runs in a sled transaction
    /// ([`SledStorage::transact_locked`]), so a transaction always ends. An error from the
    /// closure is returned only when what it read was still current (one drawn from values that
    /// changed meanwhile runs it again, as does a run that saw half of another's writes). sled
    /// runs every transaction of its own under one lock for the whole process, and every read
    /// waits for it: the engine's fan-out held it while it built and encoded hundreds of
    /// deliveries.
    fn transact_optimistic(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        for _ in 0..OPTIMISTIC_TRIES {
            let mut overlay = Overlay::new(&self.tree);
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

    /// As [`SledStorage::transact_optimistic`], which is serializable on sled (every key read is
    /// checked at the commit): the requests' transactions share their commits with each other
    /// and with the engine's, where each committed alone in a sled transaction (64 clients'
    /// durable `POST /v1/orders` at a median of 7 820 against 5 300 req/s in 8 alternated runs:
    /// PERFORMANCE.md, the twenty-fourth pass).
    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        self.transact_optimistic(f)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value at `key` as a number (0 when absent).
    fn number(txn: &mut dyn Txn, key: &[u8]) -> u64 {
        txn.get(key).expect("read").map_or(0, |v| {
            String::from_utf8_lossy(&v).parse().expect("a number")
        })
    }

    /// Sets `key` to `value` in a transaction of its own, from another thread (as another
    /// request would, while the transaction under test runs its closure).
    fn set_meanwhile(storage: &SledStorage, key: &'static [u8], value: u64) {
        let other = storage.clone();
        std::thread::spawn(move || {
            other.transact_optimistic(&mut |txn| txn.put(key, value.to_string().into_bytes()))
        })
        .join()
        .expect("thread")
        .expect("committed");
    }

    /// Adds `add` to "k" in an optimistic transaction whose first `interfered` runs each see
    /// another transaction set "k" (to 100 × the run) before they commit. Returns the runs, and
    /// checks that the value committed was made from the last value set.
    fn add_while_another_sets(storage: &SledStorage, interfered: usize, add: u64) -> usize {
        let mut runs = 0;
        storage
            .transact_optimistic(&mut |txn| {
                runs += 1;
                let seen = number(txn, b"k");
                if runs <= interfered {
                    set_meanwhile(storage, b"k", 100 * runs as u64);
                }
                txn.put(b"k", (seen + add).to_string().into_bytes())?;
                txn.put(b"done", b"1".to_vec())
            })
            .expect("committed");
        let mut check = |txn: &mut dyn Txn| {
            let last = 100 * interfered as u64;
            assert_eq!(number(txn, b"k"), last + add, "made on the last value set");
            assert_eq!(number(txn, b"done"), 1);
            Ok(())
        };
        storage.transact(&mut check).expect("read");
        runs
    }

    #[test]
    fn a_closure_whose_read_changed_before_its_commit_runs_again_on_the_new_value() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        let runs = add_while_another_sets(&storage, 1, 10);
        assert_eq!(
            runs, 2,
            "the first run read a value changed before its commit"
        );
    }

    #[test]
    fn a_closure_that_loses_every_optimistic_run_commits_under_the_lock() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        let runs = add_while_another_sets(&storage, OPTIMISTIC_TRIES, 1);
        assert_eq!(
            runs,
            OPTIMISTIC_TRIES + 1,
            "the last run held the commit lock"
        );
    }

    thread_local! {
        /// Run by an optimistic commit of this thread after its reads were found current and
        /// before its batch is applied (under the commit lock).
        static BETWEEN: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    pub(super) fn between_check_and_batch() {
        if let Some(f) = BETWEEN.with(|b| b.borrow_mut().take()) {
            f();
        }
    }

    #[test]
    fn a_transaction_in_sleds_cannot_commit_between_an_optimistic_ones_check_and_its_batch() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        let (started, durable) = std::sync::mpsc::channel();
        let other = storage.clone();
        // Once the optimistic transaction below found its read current, a durable one (sled's)
        // adds 1 to "k", given 500 ms before the batch is applied: it must wait for the batch.
        BETWEEN.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                let adds = std::thread::spawn(move || {
                    other.transact_locked(&mut |txn| {
                        let seen = number(txn, b"k");
                        txn.put(b"k", (seen + 1).to_string().into_bytes())
                    })
                });
                let _ = started.send(adds);
                std::thread::sleep(Duration::from_millis(500));
            }))
        });
        storage
            .transact_optimistic(&mut |txn| {
                let seen = number(txn, b"k");
                txn.put(b"k", (seen + 10).to_string().into_bytes())
            })
            .expect("committed");
        let adds = durable.recv().expect("the durable transaction was started");
        adds.join().expect("thread").expect("durable committed");
        let mut check = |txn: &mut dyn Txn| {
            assert_eq!(number(txn, b"k"), 11, "neither write lost");
            Ok(())
        };
        storage.transact(&mut check).expect("read");
    }

    /// Queues an optimistic commit as `transact_optimistic` does; returns its outcome's slot.
    fn queue(
        storage: &SledStorage,
        reads: &[(&str, Option<&str>)],
        writes: &[(&str, &str)],
        failed: bool,
    ) -> Arc<Mutex<Option<Committed>>> {
        let outcome = Arc::new(Mutex::new(None));
        storage.queued.lock().push(Queued {
            reads: reads
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.map(sled::IVec::from)))
                .collect(),
            writes: writes
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
                .collect(),
            failed,
            outcome: outcome.clone(),
        });
        outcome
    }

    fn outcome(slot: &Arc<Mutex<Option<Committed>>>) -> String {
        format!("{:?}", slot.lock().clone())
    }

    #[test]
    fn queued_commits_join_one_batch_and_one_that_read_what_an_earlier_one_wrote_runs_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        storage.tree.insert("k", "0").expect("insert");
        let first = queue(&storage, &[("k", Some("0"))], &[("k", "1")], false);
        // Read "k" as it was before the first: stale, though the tree still holds "0".
        let second = queue(&storage, &[("k", Some("0"))], &[("j", "x")], false);
        let third = queue(&storage, &[("m", None)], &[("m", "y")], false);
        // Its closure failed on current reads: the failure stands, nothing is written.
        let failed = queue(&storage, &[("n", None)], &[("n", "z")], true);
        // Read "k" as it was before too, but it changed in the tree before the check.
        storage.tree.insert("p", "old").expect("insert");
        let changed = queue(&storage, &[("p", Some("older"))], &[("q", "w")], false);
        {
            let _commit = storage.commit.write();
            storage.commit_queued();
        }
        assert_eq!(outcome(&first), "Some(Current)");
        assert_eq!(outcome(&second), "Some(Stale)");
        assert_eq!(outcome(&third), "Some(Current)");
        assert_eq!(outcome(&failed), "Some(Current)");
        assert_eq!(outcome(&changed), "Some(Stale)");
        let value = |k: &str| storage.tree.get(k).expect("get").map(|v| v.to_vec());
        assert_eq!(value("k"), Some(b"1".to_vec()));
        assert_eq!(value("j"), None, "the stale one wrote nothing");
        assert_eq!(value("m"), Some(b"y".to_vec()));
        assert_eq!(value("n"), None, "the failed one wrote nothing");
        assert_eq!(value("q"), None);
        assert_eq!(
            storage.batches.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "one batch for all of them"
        );
        assert!(storage.queued.lock().is_empty());
    }

    #[test]
    fn transactions_that_queue_while_one_commits_share_the_next_batch() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        const OTHERS: usize = 6;
        let (done, finished) = std::sync::mpsc::channel();
        let others = storage.clone();
        // While the first commits (holding the lock), six more queue behind it.
        BETWEEN.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                for i in 0..OTHERS {
                    let storage = others.clone();
                    let done = done.clone();
                    std::thread::spawn(move || {
                        let key = format!("other-{i}");
                        let ran = storage.transact_optimistic(&mut |txn| {
                            let _ = number(txn, key.as_bytes());
                            let _ = number(txn, b"shared");
                            txn.put(key.as_bytes(), b"1".to_vec())
                        });
                        let _ = done.send(ran);
                    });
                }
                let started = Instant::now();
                while others.queued.lock().len() < OTHERS
                    && started.elapsed() < Duration::from_secs(10)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }))
        });
        storage
            .transact_optimistic(&mut |txn| {
                let _ = (number(txn, b"first"), number(txn, b"shared"));
                txn.put(b"first", b"1".to_vec())
            })
            .expect("committed");
        for _ in 0..OTHERS {
            finished
                .recv_timeout(Duration::from_secs(10))
                .expect("another finished")
                .expect("committed");
        }
        for i in 0..OTHERS {
            let key = format!("other-{i}");
            assert!(storage.tree.get(&key).expect("get").is_some(), "{key}");
        }
        assert_eq!(
            storage.batches.load(std::sync::atomic::Ordering::Relaxed),
            2,
            "the six that queued meanwhile shared one batch"
        );
    }

    #[test]
    fn concurrent_increments_of_one_key_lose_none() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        const THREADS: usize = 8;
        const EACH: u64 = 200;
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let storage = storage.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let own = format!("own-{t}");
                        storage
                            .transact(&mut |txn| {
                                let seen = number(txn, b"counter");
                                txn.put(b"counter", (seen + 1).to_string().into_bytes())?;
                                txn.put(own.as_bytes(), (i + 1).to_string().into_bytes())
                            })
                            .expect("committed");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        let mut check = |txn: &mut dyn Txn| {
            assert_eq!(number(txn, b"counter"), THREADS as u64 * EACH);
            for t in 0..THREADS {
                assert_eq!(number(txn, format!("own-{t}").as_bytes()), EACH);
            }
            Ok(())
        };
        storage.transact(&mut check).expect("read");
    }

    #[test]
    fn an_error_drawn_from_a_value_changed_meanwhile_is_not_returned_but_run_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        let mut runs = 0;
        storage
            .transact_optimistic(&mut |txn| {
                runs += 1;
                let (a, b) = (number(txn, b"a"), number(txn, b"b"));
                if runs == 1 {
                    // What it read is already stale when it decides: the error is not real.
                    set_meanwhile(&storage, b"a", 5);
                    return Err(Error::invalid("a", "refused on a stale read"));
                }
                txn.put(b"sum", (a + b).to_string().into_bytes())
            })
            .expect("the second run, on current values, commits");
        assert_eq!(runs, 2);
        // A closure's error on values that did not change is the transaction's.
        let failed = storage.transact_optimistic(&mut |txn| {
            let _ = (number(txn, b"a"), number(txn, b"b"));
            Err(Error::invalid("a", "refused"))
        });
        assert!(failed.is_err(), "{failed:?}");
    }

    #[test]
    fn opening_waits_for_the_lock_a_closing_handle_still_holds() {
        let dir = tempfile::tempdir().expect("temp dir");
        let first = SledStorage::open(dir.path()).expect("open");
        // The first handle goes away a moment later, as a stopped host's files do.
        let closing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(first);
        });
        let second = SledStorage::open(dir.path()).expect("opened once the lock was free");
        closing.join().expect("closed");
        second.tree.insert("k", "v").expect("usable");
    }

    #[test]
    fn a_lock_held_past_the_wait_fails_the_open_and_names_the_folder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let _held = SledStorage::open(dir.path()).expect("open");
        let started = Instant::now();
        let err = SledStorage::open_waiting(dir.path(), Duration::from_millis(50))
            .expect_err("the lock is held");
        assert!(started.elapsed() >= Duration::from_millis(50), "it waited");
        let message = format!("{err:#}");
        assert!(message.contains("opening the database in"), "{message}");
        assert!(message.contains("lock"), "{message}");
    }
}
