//! Storage: a small key-value trait with serializable transactions, and a typed layer on top.
//!
//! Every record lives under a key that starts with its kind and its store (`ord/store_…/ord_…`), so a
//! query built from the caller's store can only see that store's data. Keys are text: ids contain no
//! `/`. A second backend (PostgreSQL) implements the same [`Storage`] trait; nothing above this module
//! knows it is sled.

pub mod queue;
mod sled_store;

use std::ops::ControlFlow;
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
    delivery: Arc<queue::Signal>,
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
            delivery: Arc::new(queue::Signal::default()),
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

    /// Up to `limit` records under `prefix` in key order after the key `after`, as stored (not
    /// decoded), with their keys.
    pub fn list_raw(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>> {
        self.inner
            .scan(prefix.as_bytes(), after.map(str::as_bytes), false, limit)?
            .into_iter()
            .map(|(k, v)| {
                let key = String::from_utf8(k)
                    .map_err(|e| Error::Internal(anyhow::Error::new(e).context("key")))?;
                Ok((key, v))
            })
            .collect()
    }

    /// Decodes a record read with [`Db::list_raw`].
    pub fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
        decode(key, bytes)
    }

    /// A scan of every record under `prefix`, read [`SCAN_BATCH`] at a time: see [`Scan`].
    pub fn scan<'a>(&'a self, prefix: &'a str) -> Scan<'a> {
        Scan {
            db: self,
            prefix,
            after: None,
            reverse: false,
            batch: SCAN_BATCH,
        }
    }

    /// Calls `f` with every record under `prefix` and its key, in key order, reading
    /// [`SCAN_BATCH`] records at a time; the first error stops the scan and is returned.
    pub fn scan_all<T: DeserializeOwned>(
        &self,
        prefix: &str,
        f: impl FnMut(String, T) -> Result<()>,
    ) -> Result<()> {
        self.scan(prefix).each(f)
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
        let mut queued = queue::Queued::default();
        let mut must_flush = false;
        self.inner.transact(&mut |txn| {
            let mut tx = Tx {
                inner: txn,
                queued_delivery: false,
                queued: queue::Queued::default(),
                flush: false,
            };
            out = Some(f(&mut tx)?);
            queued_delivery = tx.queued_delivery;
            queued = std::mem::take(&mut tx.queued);
            must_flush = tx.flush;
            Ok(())
        })?;
        if flush || must_flush {
            self.inner.flush()?;
        }
        if queued_delivery {
            self.delivery.ring_queued(&queued);
        }
        out.ok_or_else(|| Error::Internal(anyhow::anyhow!("transaction produced no result")))
    }

    /// Flushes pending writes to disk.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// What the delivery engine waits on between polls.
    pub fn delivery_signal(&self) -> Arc<queue::Signal> {
        self.delivery.clone()
    }
}

/// How many records a [`Scan`] reads at a time unless told otherwise.
pub const SCAN_BATCH: usize = 256;

/// A scan of the records under a prefix, in key order (or reverse key order), read in batches so
/// that a scan of any length holds one batch in memory. Each batch is one read of the storage,
/// not a snapshot of the whole scan: a record written behind the scan's position while it runs is
/// not seen, one written ahead of it is. The records may be changed (or removed) while the scan
/// runs, including by the scan's own callback.
#[derive(Debug)]
#[must_use = "a scan reads nothing until `each`, `until` or `batches` runs it"]
pub struct Scan<'a> {
    db: &'a Db,
    prefix: &'a str,
    after: Option<String>,
    reverse: bool,
    batch: usize,
}

impl Scan<'_> {
    /// Starts strictly after `key` (in the scan's order); from the first record when `None`.
    pub fn after(mut self, key: Option<String>) -> Self {
        self.after = key;
        self
    }

    /// Scans in reverse key order (newest first, for time-ordered ids) when `reverse`.
    pub fn reverse(mut self, reverse: bool) -> Self {
        self.reverse = reverse;
        self
    }

    /// Reads `size` records at a time (at least one).
    pub fn batch(mut self, size: usize) -> Self {
        self.batch = size.max(1);
        self
    }

    /// Calls `f` with each batch of records and their keys until `f` breaks, fails, or the
    /// records run out. No batch is empty.
    pub fn batches<T: DeserializeOwned>(
        self,
        mut f: impl FnMut(Vec<(String, T)>) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let Scan {
            db,
            prefix,
            mut after,
            reverse,
            batch,
        } = self;
        loop {
            let records: Vec<(String, T)> = db.list(prefix, after.as_deref(), reverse, batch)?;
            let Some((last, _)) = records.last() else {
                return Ok(());
            };
            let last = last.clone();
            let exhausted = records.len() < batch;
            if f(records)?.is_break() || exhausted {
                return Ok(());
            }
            after = Some(last);
        }
    }

    /// Calls `f` with each record and its key until `f` breaks, fails, or the records run out.
    pub fn until<T: DeserializeOwned>(
        self,
        mut f: impl FnMut(String, T) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        self.batches(|records| {
            for (key, record) in records {
                if f(key, record)?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            Ok(ControlFlow::Continue(()))
        })
    }

    /// Calls `f` with every record and its key; the first error stops the scan.
    pub fn each<T: DeserializeOwned>(
        self,
        mut f: impl FnMut(String, T) -> Result<()>,
    ) -> Result<()> {
        self.until(|key, record| f(key, record).map(|()| ControlFlow::Continue(())))
    }
}

/// A transaction with typed records.
pub struct Tx<'a> {
    inner: &'a mut dyn Txn,
    queued_delivery: bool,
    queued: queue::Queued,
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
    fn a_scan_sees_every_record_once_in_order_across_batches_and_stops_when_told() {
        let (db, dir) = temp_db();
        db.tx(|tx| {
            for i in 0..600 {
                tx.write(&format!("s/{i:04}"), &i)?;
            }
            tx.write("sx/0", &-1)?;
            tx.write("r/0", &-1)
        })
        .expect("write");

        let mut seen = Vec::new();
        db.scan_all("s/", |key, n: i32| {
            assert_eq!(key, format!("s/{n:04}"));
            seen.push(n);
            Ok(())
        })
        .expect("scan");
        assert_eq!(
            seen,
            (0..600).collect::<Vec<_>>(),
            "each once, in key order"
        );

        let mut sizes = Vec::new();
        db.scan("s/")
            .batch(250)
            .batches(|batch: Vec<(String, i32)>| {
                sizes.push(batch.len());
                Ok(ControlFlow::Continue(()))
            })
            .expect("batches");
        assert_eq!(sizes, [250, 250, 100]);

        let mut newest = Vec::new();
        db.scan("s/")
            .reverse(true)
            .after(Some("s/0590".to_owned()))
            .batch(3)
            .until(|_, n: i32| {
                newest.push(n);
                Ok(if newest.len() == 4 {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                })
            })
            .expect("until");
        assert_eq!(
            newest,
            [589, 588, 587, 586],
            "after the cursor, stopped when told"
        );

        let mut removed = 0;
        db.scan_all("s/", |key, _: i32| {
            removed += 1;
            db.tx(|tx| tx.remove(&key))
        })
        .expect("removing while scanning");
        assert_eq!(removed, 600);
        db.scan_all("s/", |key, _: i32| -> Result<()> {
            panic!("{key} is gone")
        })
        .expect("empty");

        let err = db
            .scan_all("sx/", |_, _: i32| Err(Error::invalid("x", "no")))
            .expect_err("an error stops the scan");
        assert!(matches!(err, Error::Validation { .. }));
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
