//! Storage: a small key-value trait with serializable transactions, and a typed layer on top.
//!
//! Every record lives under a key that starts with its kind and its store (`ord/store_…/ord_…`), so a
//! query built from the caller's store can only see that store's data. Keys are text: ids contain no
//! `/`. A second backend (PostgreSQL) implements the same [`Storage`] trait; nothing above this module
//! knows it is sled.

pub mod queue;
mod sled_store;

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::error::{Error, Result};

pub use sled_store::SledStorage;

/// One key and its value, as returned by a scan.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A key-value store with atomic, serializable multi-key transactions.
pub trait Storage: Send + Sync + 'static {
    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Up to `limit` entries whose key starts with `prefix`, in key order (descending when
    /// `reverse`), starting strictly after `after` in that order.
    fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>>;

    /// Runs `f` as one atomic transaction: every write it makes is committed together or not at
    /// all, and reads see a consistent state (the backend may run `f` again after a conflict, so
    /// `f` must have no effects outside the transaction). An error from `f` aborts it.
    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()>;

    /// Makes every committed transaction durable (survives a crash of the process or machine).
    fn flush(&self) -> Result<()>;
}

/// The operations available inside a transaction.
pub trait Txn {
    /// The value at `key`, as this transaction sees it.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Writes `value` at `key`.
    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()>;
    /// Removes `key`.
    fn delete(&mut self, key: &[u8]) -> Result<()>;
}

/// A cheap, cloneable handle on the storage with typed (JSON-encoded) records.
#[derive(Clone)]
pub struct Db {
    inner: Arc<dyn Storage>,
    /// Flush after every write transaction so that an acknowledged write survives `kill -9`.
    durable: bool,
    /// Rung after a commit that queued delivery work (an event, a replay), so the delivery
    /// engine starts at once instead of at its next poll.
    delivery: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db")
            .field("durable", &self.durable)
            .finish()
    }
}

impl Db {
    /// Wraps a backend. With `durable`, every write transaction is flushed before it returns.
    pub fn new(inner: Arc<dyn Storage>, durable: bool) -> Self {
        Self {
            inner,
            durable,
            delivery: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Opens (or creates) the sled database in `dir`.
    pub fn open_sled(dir: &std::path::Path, durable: bool) -> Result<Self> {
        Ok(Self::new(Arc::new(SledStorage::open(dir)?), durable))
    }

    /// Reads and decodes the record at `key`.
    pub fn read<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        self.inner
            .get(key.as_bytes())?
            .map(|v| decode(key, &v))
            .transpose()
    }

    /// Up to `limit` records under `prefix` (key order, or newest-first when `reverse`), after the
    /// key `after`. Returns each record with its key.
    pub fn list<T: DeserializeOwned>(
        &self,
        prefix: &str,
        after: Option<&str>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(String, T)>> {
        self.inner
            .scan(prefix.as_bytes(), after.map(str::as_bytes), reverse, limit)?
            .into_iter()
            .map(|(k, v)| {
                let key = String::from_utf8(k)
                    .map_err(|e| Error::Internal(anyhow::Error::new(e).context("key")))?;
                let value = decode(&key, &v)?;
                Ok((key, value))
            })
            .collect()
    }

    /// Runs `f` in one transaction and returns what it returns. `f` may run more than once.
    pub fn tx<R>(&self, f: impl FnMut(&mut Tx<'_>) -> Result<R>) -> Result<R> {
        self.transact(f, self.durable)
    }

    /// Like [`Db::tx`], but never flushes: for the delivery engine's own bookkeeping, whose loss
    /// in a crash only means that work is redone (an attempt repeated, an outbox entry fanned out
    /// again). sled recovers a prefix of the committed transactions, never one with a gap, and
    /// flushes on its own within half a second; the next durable transaction flushes these too.
    pub fn tx_relaxed<R>(&self, f: impl FnMut(&mut Tx<'_>) -> Result<R>) -> Result<R> {
        self.transact(f, false)
    }

    fn transact<R>(&self, mut f: impl FnMut(&mut Tx<'_>) -> Result<R>, flush: bool) -> Result<R> {
        let mut out = None;
        let mut queued_delivery = false;
        let mut must_flush = false;
        self.inner.transact(&mut |txn| {
            let mut tx = Tx {
                inner: txn,
                queued_delivery: false,
                flush: false,
            };
            out = Some(f(&mut tx)?);
            queued_delivery = tx.queued_delivery;
            must_flush = tx.flush;
            Ok(())
        })?;
        if flush || must_flush {
            self.inner.flush()?;
        }
        if queued_delivery {
            self.delivery.notify_one();
        }
        out.ok_or_else(|| Error::Internal(anyhow::anyhow!("transaction produced no result")))
    }

    /// Flushes pending writes to disk.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// What the delivery engine waits on between polls.
    pub fn delivery_signal(&self) -> Arc<tokio::sync::Notify> {
        self.delivery.clone()
    }
}

/// A transaction with typed records.
pub struct Tx<'a> {
    inner: &'a mut dyn Txn,
    queued_delivery: bool,
    flush: bool,
}

impl Tx<'_> {
    /// Reads and decodes the record at `key`.
    pub fn read<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>> {
        self.inner
            .get(key.as_bytes())?
            .map(|v| decode(key, &v))
            .transpose()
    }

    /// Encodes and writes `value` at `key`.
    pub fn write<T: Serialize>(&mut self, key: &str, value: &T) -> Result<()> {
        self.inner.put(key.as_bytes(), serde_json::to_vec(value)?)
    }

    /// Removes the record at `key`.
    pub fn remove(&mut self, key: &str) -> Result<()> {
        self.inner.delete(key.as_bytes())
    }

    /// Wakes the delivery engine once this transaction commits.
    pub fn wake_delivery(&mut self) {
        self.queued_delivery = true;
    }

    /// Makes this transaction durable even in a relaxed [`Db::tx_relaxed`]: it is flushed when it
    /// commits, before the engine is woken, so nothing it queued starts before it is on disk.
    pub fn flush_on_commit(&mut self) {
        self.flush = true;
    }
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Internal(anyhow::Error::new(e).context(format!("decoding the record at {key}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_db() -> (Db, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "ch-storage-{}",
            crate::model::ids::new_id_body(jiff::Timestamp::now())
        ));
        (Db::open_sled(&dir, false).expect("open"), dir)
    }

    #[test]
    fn scans_respect_prefix_order_and_cursor() {
        let (db, dir) = temp_db();
        db.tx(|tx| {
            for k in ["a/1", "a/2", "a/3", "ab/1", "b/1"] {
                tx.write(k, &k.to_owned())?;
            }
            Ok(())
        })
        .expect("write");
        let keys = |after, reverse| {
            db.list::<String>("a/", after, reverse, 10)
                .expect("list")
                .into_iter()
                .map(|(k, _)| k)
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(None, false), ["a/1", "a/2", "a/3"]);
        assert_eq!(keys(Some("a/1"), false), ["a/2", "a/3"]);
        assert_eq!(keys(None, true), ["a/3", "a/2", "a/1"]);
        assert_eq!(keys(Some("a/3"), true), ["a/2", "a/1"]);
        assert_eq!(
            db.list::<String>("a/", None, false, 2).expect("list").len(),
            2
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_error_aborts_the_whole_transaction() {
        let (db, dir) = temp_db();
        let r: Result<()> = db.tx(|tx| {
            tx.write("x", &1)?;
            Err(Error::invalid("x", "no"))
        });
        assert!(matches!(r, Err(Error::Validation { .. })));
        assert_eq!(db.read::<i32>("x").expect("read"), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn concurrent_increments_are_not_lost() {
        let (db, dir) = temp_db();
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        db.tx(|tx| {
                            let n: u64 = tx.read("n")?.unwrap_or(0);
                            tx.write("n", &(n + 1))
                        })
                        .expect("tx");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("join");
        }
        assert_eq!(db.read::<u64>("n").expect("read"), Some(400));
        let _ = std::fs::remove_dir_all(dir);
    }
}
