//! The embedded backend: one sled tree, serializable transactions (the engine's optimistic, see
//! [`SledStorage::transact_optimistic`]).

// The transaction's own maps hash with foldhash (seeded per process) rather than SipHash: a
// transaction holds a bounded number of keys, so even keys a client chose (an idempotency key)
// cannot make a long chain out of them.
use foldhash::HashMap;
use std::cell::RefCell;
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;

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
    /// [`SledStorage::transact`]; sled runs them one at a time itself), alone by the commit of an
    /// optimistic one (see [`SledStorage::transact_optimistic`]), whose check of the keys it read
    /// and whose batch no other commit may come between.
    commit: Arc<RwLock<()>>,
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
        })
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

    /// Whether every key read still holds the value it read (holding the commit lock alone: no
    /// other transaction commits meanwhile).
    fn still_valid(&self) -> Result<bool> {
        for (key, seen) in &self.reads {
            if self.tree.get(key)? != *seen {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The buffered writes, as one batch (built before the commit lock is taken).
    fn batch(&mut self) -> sled::Batch {
        let mut batch = sled::Batch::default();
        for (key, value) in self.writes.drain() {
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
        batch
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

    /// The closure runs in a sled transaction, holding the commit lock shared: sled runs its
    /// transactions one at a time, and an optimistic commit waits for the one running.
    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
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

    /// Optimistic: the closure runs outside any lock, reading the tree and buffering its writes;
    /// then, holding the commit lock alone, the keys it read are read again, and if none changed
    /// its writes are applied as one atomic batch (sled writes a batch to its log as one unit,
    /// recovered whole or not at all; no sled transaction, which reads the old value of every key
    /// it writes). A changed key runs the closure again, on the current values; after
    /// [`OPTIMISTIC_TRIES`] the closure runs in a sled transaction ([`SledStorage::transact`]),
    /// so a transaction always ends. An error from the closure is returned only when what it read
    /// was still current (one drawn from values that changed meanwhile runs it again). sled runs
    /// every transaction under one lock for the whole process, and every read waits for it: the
    /// engine's fan-out held it while it built and encoded hundreds of deliveries.
    fn transact_optimistic(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        for _ in 0..OPTIMISTIC_TRIES {
            let mut overlay = Overlay::new(&self.tree);
            let ran = f(&mut overlay);
            if overlay.writes.is_empty() && overlay.reads.len() <= 1 {
                return ran; // One read (or none) is consistent as read, and nothing to write.
            }
            let batch = overlay.batch();
            let _commit = self.commit.write();
            if !overlay.still_valid()? {
                continue;
            }
            #[cfg(test)]
            tests::between_check_and_batch();
            ran?;
            self.tree.apply_batch(batch)?;
            return Ok(());
        }
        self.transact(f)
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
                    other.transact(&mut |txn| {
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
