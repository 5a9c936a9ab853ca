//! fjall's journal made durable without holding its lock.
//!
//! fjall appends every batch to its journal under the journal's lock, and
//! [`fjall::Keyspace::persist`] calls `fdatasync` holding the same lock: every commit waits
//! for the flush. A durable request's flush (0.8 ms at the median on the development VM, up to
//! several) so held back every transaction of the delivery engine: in the fan-out bench, the
//! engine's commits stood waiting behind the other store's events, each flushed alone.
//!
//! [`Journal::sync`] flushes outside that lock, through a file handle of its own on the journal
//! fjall writes to: the newest file of its `journals` folder (fjall numbers them from 0 up, one
//! more at each rotation). `fdatasync` on any handle of a file writes out everything written to
//! it, and fjall hands each batch to the operating system before its commit returns (the commits
//! use [`fjall::PersistMode::Buffer`]), so a sync that starts after a commit returned makes it
//! durable while fjall goes on appending. A batch in an older journal is durable too: fjall
//! `fsync`s a journal before it creates the next one, so a later file there means the earlier
//! one was synced. Where the folder holds no numbered file, or its newest one is gone each time
//! it is opened, it falls back to fjall's own `persist`: slower, never less durable.

use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use fjall::{Keyspace, PersistMode};
use parking_lot::Mutex;

use crate::model::error::{Error, Result};

/// How many times [`Journal::sync`] lists the folder before it falls back to fjall's flush.
const LISTINGS: usize = 3;

/// The keyspace's journal, synced outside fjall's lock (see the module's documentation).
pub(super) struct Journal {
    /// `<keyspace>/journals`.
    folder: PathBuf,
    /// The newest journal as last opened, with its number.
    newest: Mutex<Option<(u64, File)>>,
}

impl Journal {
    /// The journal of the keyspace in `dir`.
    pub(super) fn new(dir: &Path) -> Journal {
        Journal {
            folder: dir.join("journals"),
            newest: Mutex::new(None),
        }
    }

    /// Makes every batch committed to `keyspace` before the call durable, without holding
    /// fjall's lock.
    pub(super) fn sync(&self, keyspace: &Keyspace) -> Result<()> {
        let mut newest = self.newest.lock();
        // The journal opened last is still the one written to unless the next one exists (one
        // `stat`; the folder is listed again only after a rotation).
        if let Some((number, file)) = newest.as_ref()
            && self
                .folder
                .join((number + 1).to_string())
                .try_exists()
                .is_ok_and(|next| !next)
        {
            return sync(file);
        }
        // Listed again if the newest one is gone when opened (sealed and removed since it was
        // listed: a later one is there), a few times at most.
        for _ in 0..LISTINGS {
            let Some(number) = newest_in(&self.folder) else {
                break;
            };
            match File::open(self.folder.join(number.to_string())) {
                Ok(file) => return sync(&newest.insert((number, file)).1),
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(journal_error(e)),
            }
        }
        Ok(keyspace.persist(PersistMode::SyncData)?)
    }

    /// The number of the journal synced last.
    #[cfg(test)]
    pub(super) fn synced(&self) -> Option<u64> {
        self.newest.lock().as_ref().map(|(number, _)| *number)
    }
}

/// The number of the newest journal in `folder`, if any.
fn newest_in(folder: &Path) -> Option<u64> {
    std::fs::read_dir(folder)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
}

/// `fdatasync` of `file`.
fn sync(file: &File) -> Result<()> {
    #[cfg(test)]
    super::tests::before_sync();
    file.sync_data().map_err(journal_error)
}

fn journal_error(e: std::io::Error) -> Error {
    Error::Internal(anyhow::Error::new(e).context("syncing the journal"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::storage::fjall_store::FjallStorage;
    use crate::storage::fjall_store::tests::BEFORE_SYNC;
    use crate::storage::{Storage, Txn};

    fn put(storage: &FjallStorage, key: &str) {
        storage
            .transact(&mut |txn: &mut dyn Txn| txn.put(key.as_bytes(), b"v".to_vec()))
            .expect("committed");
    }

    #[test]
    fn other_transactions_commit_while_a_flush_syncs() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        put(&storage, "a");
        let other = storage.clone();
        let (done, committed) = std::sync::mpsc::channel();
        BEFORE_SYNC.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                // The flush is about to write the journal out: another thread's commit goes
                // through now (with fjall's `persist`, which syncs holding the journal's lock,
                // it would wait for the sync).
                std::thread::spawn(move || {
                    put(&other, "b");
                    let _ = done.send(());
                });
                committed
                    .recv_timeout(Duration::from_secs(10))
                    .expect("a commit went through while the flush held the journal");
            }))
        });
        storage.flush().expect("flushed");
        assert!(
            BEFORE_SYNC.with(|h| h.borrow().is_none()),
            "the flush synced the journal itself"
        );
        assert_eq!(storage.get(b"b").expect("read"), Some(b"v".to_vec()));
    }

    #[test]
    fn a_flush_syncs_the_journal_written_to_after_a_rotation_too() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        let engine = &storage.commits.engine;
        put(&storage, "a");
        storage.flush().expect("flushed");
        let first = engine.journal.synced().expect("a journal synced");
        assert_eq!(newest_in(&engine.journal.folder), Some(first));
        // A full memory table is sealed with its journal, and the next one is written to.
        assert!(engine.records.rotate_memtable().expect("rotated"));
        put(&storage, "b");
        storage.flush().expect("flushed");
        assert_eq!(engine.journal.synced(), Some(first + 1));
        assert_eq!(newest_in(&engine.journal.folder), Some(first + 1));
        // Without a rotation, the same one.
        put(&storage, "c");
        storage.flush().expect("flushed");
        assert_eq!(engine.journal.synced(), Some(first + 1));
    }

    #[test]
    fn a_folder_without_journals_falls_back_to_fjalls_own_flush() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        put(&storage, "a");
        let elsewhere = Journal::new(&dir.path().join("elsewhere"));
        elsewhere
            .sync(&storage.commits.engine.keyspace)
            .expect("flushed by fjall");
        assert_eq!(elsewhere.synced(), None, "no file of its own opened");
    }
}
