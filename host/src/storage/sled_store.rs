//! The embedded backend: one sled tree, serializable transactions.

use std::cell::RefCell;
use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, Instant};

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
        Ok(Self { db, tree })
    }
}

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

    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
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

    fn flush(&self) -> Result<()> {
        self.db.flush()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
