//! The embedded backend: one sled tree, serializable transactions, run optimistically and
//! committed in shared batches (see [`super::optimistic::Commits::transact`]).

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::optimistic::{Commits, Engine};
use super::{Entry, Storage, Txn, scanned};
use crate::model::error::{Error, Result};

/// Storage in a sled database on local disk.
#[derive(Debug, Clone)]
pub struct SledStorage {
    db: sled::Db,
    commits: Arc<Commits<SledTree>>,
}

/// The tree every record is kept in, as [`Commits`] uses it.
#[derive(Debug)]
struct SledTree(sled::Tree);

impl Engine for SledTree {
    type Value = sled::IVec;

    fn read(&self, key: &[u8]) -> Result<Option<sled::IVec>> {
        Ok(self.0.get(key)?)
    }

    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<()> {
        let mut batch = sled::Batch::default();
        for (key, value) in writes {
            match value {
                Some(value) => batch.insert(key, value),
                None => batch.remove(key),
            }
        }
        Ok(self.0.apply_batch(batch)?)
    }
}

/// How long opening waits for the folder's lock while it is held: sled's I/O threads keep the
/// files (and their lock) a moment after the last handle of a closed database is dropped, so a
/// host restarted in the same process (or a command run right after it) finds it still held.
/// Another process that holds it keeps it: opening then fails with sled's error.
const LOCK_WAIT: Duration = Duration::from_secs(2);

impl SledStorage {
    /// Opens (or creates) the database in `dir`, waiting up to [`LOCK_WAIT`] for its lock, with
    /// a cache of [`DEFAULT_STORE_CACHE_MIB`](super::DEFAULT_STORE_CACHE_MIB).
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_cached(dir, super::DEFAULT_STORE_CACHE_MIB)
    }

    /// [`SledStorage::open`] with a cache of `cache_mib` MiB: the pages sled keeps in memory,
    /// the largest share of the store's memory, not all of it (sled also keeps a small entry
    /// for every page of its tree; sled's own default cache is 1 GiB).
    pub fn open_cached(dir: &Path, cache_mib: u64) -> Result<Self> {
        Self::open_waiting(dir, LOCK_WAIT, cache_mib)
    }

    fn open_waiting(dir: &Path, wait: Duration, cache_mib: u64) -> Result<Self> {
        let started = Instant::now();
        let db = loop {
            let opened = sled::Config::new()
                .path(dir)
                .mode(sled::Mode::HighThroughput)
                .cache_capacity(cache_mib.saturating_mul(1024 * 1024))
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
            commits: Arc::new(Commits::new(SledTree(tree))),
        })
    }
}

impl SledStorage {
    fn tree(&self) -> &sled::Tree {
        &self.commits.engine.0
    }
}

impl Storage for SledStorage {
    fn commit_stats(&self) -> Option<super::CommitStats> {
        Some(self.commits.stats())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree().get(key)?.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let range = match (after, reverse) {
            (None, _) => self.tree().scan_prefix(prefix),
            (Some(after), false) => self
                .tree()
                .range::<&[u8], _>((Bound::Excluded(after), Bound::Unbounded)),
            (Some(after), true) => self
                .tree()
                .range::<&[u8], _>((Bound::Included(prefix), Bound::Excluded(after))),
        };
        if reverse {
            scanned(range.rev(), prefix, reverse, limit)
        } else {
            scanned(range, prefix, reverse, limit)
        }
    }

    /// Optimistic, committed in batches shared with the transactions queued at the same moment
    /// ([`Commits::transact`]; sled writes a batch to its log as one unit, recovered whole or not
    /// at all; no sled transaction, which reads the old value of every key it writes), and
    /// serializable (every key read is checked at the commit), so the engine's transactions
    /// (`transact_optimistic`, by default this) are the same. sled runs every transaction of its
    /// own under one lock for the whole process, and every read waits for it: the engine's
    /// fan-out held it while it built and encoded hundreds of deliveries. The requests'
    /// transactions share their commits with each other and with the engine's, where each
    /// committed alone in a sled transaction (64 clients' durable `POST /v1/orders` at a median
    /// of 7 820 against 5 300 req/s in 8 alternated runs: PERFORMANCE.md, the twenty-fourth
    /// pass).
    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        self.commits.transact(f)
    }

    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::optimistic::tests::BETWEEN;
    use crate::storage::optimistic::{Committed, OPTIMISTIC_TRIES, Queued};
    use parking_lot::Mutex;

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

    #[test]
    fn a_locked_transaction_cannot_commit_between_an_optimistic_ones_check_and_its_batch() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = SledStorage::open(dir.path()).expect("open");
        let (started, locked) = std::sync::mpsc::channel();
        let other = storage.clone();
        // Once the optimistic transaction below found its read current, one under the lock
        // adds 1 to "k", given 500 ms before the batch is applied: it must wait for the batch.
        BETWEEN.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                let adds = std::thread::spawn(move || {
                    other.commits.transact_locked(&mut |txn| {
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
        let adds = locked.recv().expect("the locked transaction was started");
        adds.join()
            .expect("thread")
            .expect("the locked one committed");
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
        storage.commits.queued.lock().push(Queued {
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
        storage.tree().insert("k", "0").expect("insert");
        let first = queue(&storage, &[("k", Some("0"))], &[("k", "1")], false);
        // Read "k" as it was before the first: stale, though the tree still holds "0".
        let second = queue(&storage, &[("k", Some("0"))], &[("j", "x")], false);
        let third = queue(&storage, &[("m", None)], &[("m", "y")], false);
        // Its closure failed on current reads: the failure stands, nothing is written.
        let failed = queue(&storage, &[("n", None)], &[("n", "z")], true);
        // Read "k" as it was before too, but it changed in the tree before the check.
        storage.tree().insert("p", "old").expect("insert");
        let changed = queue(&storage, &[("p", Some("older"))], &[("q", "w")], false);
        {
            let _commit = storage.commits.commit.write();
            storage.commits.commit_queued();
        }
        assert_eq!(outcome(&first), "Some(Current)");
        assert_eq!(outcome(&second), "Some(Stale)");
        assert_eq!(outcome(&third), "Some(Current)");
        assert_eq!(outcome(&failed), "Some(Current)");
        assert_eq!(outcome(&changed), "Some(Stale)");
        let value = |k: &str| storage.tree().get(k).expect("get").map(|v| v.to_vec());
        assert_eq!(value("k"), Some(b"1".to_vec()));
        assert_eq!(value("j"), None, "the stale one wrote nothing");
        assert_eq!(value("m"), Some(b"y".to_vec()));
        assert_eq!(value("n"), None, "the failed one wrote nothing");
        assert_eq!(value("q"), None);
        assert_eq!(
            storage.commits.stats().batches,
            1,
            "one batch for all of them"
        );
        assert!(storage.commits.queued.lock().is_empty());
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
                while others.commits.queued.lock().len() < OTHERS
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
            assert!(storage.tree().get(&key).expect("get").is_some(), "{key}");
        }
        assert_eq!(
            storage.commits.stats().batches,
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
        second.tree().insert("k", "v").expect("usable");
    }

    #[test]
    fn a_lock_held_past_the_wait_fails_the_open_and_names_the_folder() {
        let dir = tempfile::tempdir().expect("temp dir");
        let _held = SledStorage::open(dir.path()).expect("open");
        let started = Instant::now();
        let err = SledStorage::open_waiting(dir.path(), Duration::from_millis(50), 8)
            .expect_err("the lock is held");
        assert!(started.elapsed() >= Duration::from_millis(50), "it waited");
        let message = format!("{err:#}");
        assert!(message.contains("opening the database in"), "{message}");
        assert!(message.contains("lock"), "{message}");
    }
}
