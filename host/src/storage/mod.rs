//! Storage: a small key-value trait with serializable transactions, and a typed layer on top.
//!
//! Every record lives under a key that starts with its kind and its store (`ord/store_…/ord_…`), so a
//! query built from the caller's store can only see that store's data. Keys are text: ids contain no
//! `/`. Three backends implement the [`Storage`] trait: sled (embedded, the default), fjall
//! (embedded, `--store fjall`: `fjall_store.rs`) and PostgreSQL (`postgres.rs`, several hosts on
//! one database); nothing above this module knows which runs, and `contract.rs` tests what all
//! of them promise. The two embedded ones share their transactions (`optimistic.rs`).

pub mod bounded;
#[cfg(test)]
pub(crate) mod contract;
mod fjall_store;
pub mod fresh;
mod optimistic;
pub mod postgres;
pub mod queue;
mod sled_store;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::error::{Error, Result};
use crate::model::event::Event;

pub use fjall_store::FjallStorage;
pub use sled_store::SledStorage;

/// The memory the embedded store keeps of its records by default, in MiB (`--store-cache-mib`):
/// sled's cache of its pages, or fjall's of its tables' blocks. Beyond what fits, a read goes
/// to the files (mostly still in the operating system's page cache). sled's own default of
/// 1 GiB made a host under steady writes grow to about 950 MiB and stay there.
pub const DEFAULT_STORE_CACHE_MIB: u64 = 256;

/// The sizes of the embedded store's cache a host takes, in MiB (`--store-cache-mib`): from
/// 8 MiB, under which a store reads nearly every record from its files, to 1 TiB.
pub const STORE_CACHE_MIB: std::ops::RangeInclusive<u64> = 8..=1_048_576;

/// The embedded store of a data folder, where no PostgreSQL is given (`--store`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Embedded {
    /// sled, in `<data>/db`: the default.
    #[default]
    Sled,
    /// fjall, in `<data>/fjall`: a log-structured merge tree, about five times less CPU a key
    /// written than sled (README, "Performance").
    Fjall,
}

impl Embedded {
    /// Where the store keeps its files in the data folder `data`.
    pub fn folder(self, data: &std::path::Path) -> std::path::PathBuf {
        data.join(match self {
            Self::Sled => "db",
            Self::Fjall => "fjall",
        })
    }
}

impl std::fmt::Display for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Sled => "sled",
            Self::Fjall => "fjall",
        })
    }
}

impl std::str::FromStr for Embedded {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "sled" => Ok(Self::Sled),
            "fjall" => Ok(Self::Fjall),
            other => Err(format!("`{other}` is not an embedded store: sled or fjall")),
        }
    }
}

/// What hears the announcements of other processes ([`Storage::listen`]): one message, or `None`
/// when some may have been missed.
pub type Listener = Arc<dyn Fn(Option<&str>) + Send + Sync>;

/// One key and its value, as returned by a scan.
pub type Entry = (Vec<u8>, Vec<u8>);

/// What [`Storage::update`] makes of a key's current value (`None`: no value): the new value.
pub type Update<'a> = dyn FnMut(Option<&[u8]>) -> Result<Vec<u8>> + 'a;

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
    /// all, and the run that commits saw a consistent state (the backend may run `f` again after
    /// a conflict, so `f` must have no effects outside the transaction; on sled a run may read
    /// half of another transaction's writes, and is then run again, neither committed nor its
    /// error returned). An error from `f` aborts it.
    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()>;

    /// As [`Storage::transact`], for a transaction that builds many records and that few
    /// threads make at once (the delivery engine's bookkeeping), with a weaker promise that
    /// lets these transactions pass each other: `f` sees one consistent snapshot, and a key it
    /// writes (or removes) that another transaction committed a change to since that snapshot
    /// makes the backend run `f` again (the first to commit wins), so a read-modify-write of a
    /// key loses no update, and of several transactions that read an entry and remove it exactly
    /// one commits. A key `f` only reads may change before it commits (two such transactions may
    /// each act on what the other changes): a caller that needs a value to stay as read writes
    /// it. sled runs `f` outside the lock that serializes its commits and checks at the commit
    /// that every key `f` read is unchanged (serializable); PostgreSQL runs it at `REPEATABLE
    /// READ`, where the engine's reads of index pages that its own inserts share cost no
    /// serialization conflicts. By default, [`Storage::transact`].
    fn transact_optimistic(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        self.transact(f)
    }

    /// Makes every committed transaction durable (survives a crash of the process or machine).
    fn flush(&self) -> Result<()>;

    /// Replaces the value at `key` with what `f` makes of the current one (`None`: no value),
    /// atomically: concurrent updates of the key, from this process or another sharing the
    /// storage, each see the value the previous one left, and none is lost. For a small record
    /// that every request changes (a store's rate-limit state): cheaper than a transaction and
    /// never refused for a conflict, since updates of one key wait for each other instead. `f`
    /// may run more than once and must have no other effect; an error from it changes nothing.
    /// Keys written this way must not be read or written in transactions. An update is not
    /// flushed: a crash may lose the last ones.
    fn update(&self, key: &[u8], f: &mut Update<'_>) -> Result<()> {
        self.transact(&mut |txn| {
            let current = txn.get(key)?;
            let next = f(current.as_deref())?;
            txn.put(key, next)
        })
    }

    /// Tells `heard`, from now on, what other processes sharing this storage announce when their
    /// transactions commit ([`Txn::announce`]), and `None` when some may have been missed (after
    /// a lost connection): the listener must then assume that anything changed. sled belongs to
    /// one process: there is nothing to hear.
    fn listen(&self, heard: Listener) {
        let _ = heard;
    }

    /// Whether other processes may share this storage (PostgreSQL), so that what one host keeps
    /// on its own disk must also be in the storage for the others.
    fn is_shared(&self) -> bool {
        false
    }

    /// What the store's commits have applied since it was opened, where every commit of the
    /// process goes through one path, one batch at a time (sled and fjall; see `optimistic.rs`).
    /// `None` where each transaction commits on its own (PostgreSQL).
    fn commit_stats(&self) -> Option<CommitStats> {
        None
    }
}

/// What an embedded store's commits have applied since it was opened ([`Db::commit_stats`]).
/// Every write of the process goes through them, one batch at a time under one lock, so the
/// time spent [`applying`](CommitStats::applying) them, against the time that passed, is how
/// busy that single path is: near all of it, and the host's writes wait on the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Batches applied, each holding the writes of one or more transactions.
    pub batches: u64,
    /// Transactions whose writes the batches held.
    pub transactions: u64,
    /// Records written or removed in them.
    pub writes: u64,
    /// Time spent applying the batches to the store's engine.
    pub applying: std::time::Duration,
}

/// Up to `limit` entries of `items` (an embedded backend's range, in the scan's order) whose key
/// starts with `prefix`: a key before the prefix (the range began at a cursor ahead of it) is
/// passed over, and the first key past it ends the scan.
fn scanned<K, V, E>(
    items: impl Iterator<Item = std::result::Result<(K, V), E>>,
    prefix: &[u8],
    reverse: bool,
    limit: usize,
) -> Result<Vec<Entry>>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
    Error: From<E>,
{
    let mut out = Vec::with_capacity(limit.min(1024));
    for item in items {
        if out.len() >= limit {
            break;
        }
        let (key, value) = item?;
        let key = key.as_ref();
        if !key.starts_with(prefix) {
            if !reverse && key < prefix {
                continue;
            }
            break;
        }
        out.push((key.to_vec(), value.as_ref().to_vec()));
    }
    Ok(out)
}

/// The operations available inside a transaction.
pub trait Txn {
    /// The value at `key`, as this transaction sees it.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Writes `value` at `key`.
    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()>;
    /// Removes `key`.
    fn delete(&mut self, key: &[u8]) -> Result<()>;

    /// Whether reading keys ahead ([`Txn::prefetch`]) saves anything here: PostgreSQL, where
    /// each read is a round trip; not sled, which reads locally.
    fn prefetches(&self) -> bool {
        false
    }

    /// Reads `keys` ahead, in one go, for the [`Txn::get`]s of them that follow: a hint that
    /// changes nothing but the number of round trips. Asked only where [`Txn::prefetches`].
    fn prefetch(&mut self, keys: &[&[u8]]) -> Result<()> {
        let _ = keys;
        Ok(())
    }

    /// This transaction's commit need not wait until it is on disk: a crash may lose it, with
    /// the transactions committed after it and never one before (PostgreSQL's asynchronous
    /// commit). For the engine's bookkeeping, like [`Db::tx_relaxed`]; sled flushes only when
    /// asked anyway.
    fn relax(&mut self) {}

    /// Announces `message` to the other processes sharing the storage, once (and only if) this
    /// transaction commits. Nothing when no other process can share it (sled).
    fn announce(&mut self, message: &str) -> Result<()> {
        let _ = message;
        Ok(())
    }
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
    /// Shares one flush between the durable transactions that wait for it at the same time.
    group: Arc<GroupCommit>,
    /// The watched key prefixes ([`Db::watch`]), shared by every clone of this handle.
    watches: Arc<RwLock<Arc<[Arc<Changes>]>>>,
    /// The events committed through this handle (or a clone) and not yet fanned out.
    fresh: Arc<fresh::FreshEvents>,
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
        let db = Self {
            inner,
            durable,
            delivery: Arc::new(queue::Signal::default()),
            group: Arc::default(),
            watches: Arc::new(RwLock::new(Arc::from(Vec::new()))),
            fresh: Arc::default(),
        };
        // What other hosts on the same database commit: their queued work wakes this engine,
        // their changes of watched records make these copies stale.
        let delivery = Arc::downgrade(&db.delivery);
        let watches = Arc::downgrade(&db.watches);
        db.inner
            .listen(Arc::new(move |message| heard(message, &delivery, &watches)));
        db
    }

    /// Counts, from now on, the committed transactions that write or remove a key under one of
    /// `prefixes`: the returned [`Changes`] moves on after each of them commits (before it is
    /// flushed), so that whoever keeps a copy of those records in memory can tell it is stale.
    /// Every handle cloned from this one shares the watch.
    pub fn watch(&self, prefixes: &[&str]) -> Arc<Changes> {
        let changes = Arc::new(Changes {
            prefixes: prefixes.iter().map(|p| p.as_bytes().into()).collect(),
            generation: AtomicU64::new(0),
        });
        let mut watches = self.watches.write().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<Arc<Changes>> = watches.iter().cloned().collect();
        all.push(changes.clone());
        *watches = Arc::from(all);
        changes
    }

    /// Connects to the PostgreSQL database at `url` with a pool of at most `pool_size`
    /// connections, creating or migrating its schema.
    pub fn open_postgres(url: &str, pool_size: u32, durable: bool) -> Result<Self> {
        Ok(Self::new(
            Arc::new(postgres::PgStorage::connect(url, pool_size)?),
            durable,
        ))
    }

    /// Opens (or creates) the sled database in `dir`.
    pub fn open_sled(dir: &std::path::Path, durable: bool) -> Result<Self> {
        Ok(Self::new(Arc::new(SledStorage::open(dir)?), durable))
    }

    /// Opens (or creates) the fjall keyspace in `dir`.
    pub fn open_fjall(dir: &std::path::Path, durable: bool) -> Result<Self> {
        Ok(Self::new(Arc::new(FjallStorage::open(dir)?), durable))
    }

    /// Opens (or creates) the embedded store `store` of the data folder `data`
    /// ([`Embedded::folder`]) with a cache of `cache_mib` MiB ([`DEFAULT_STORE_CACHE_MIB`]; a
    /// size outside [`STORE_CACHE_MIB`] is refused), refusing to create it where the folder
    /// already holds the other one's records: a host started with the wrong `--store` would
    /// otherwise serve an empty store.
    pub fn open_embedded(
        store: Embedded,
        data: &std::path::Path,
        durable: bool,
        cache_mib: u64,
    ) -> Result<Self> {
        if !STORE_CACHE_MIB.contains(&cache_mib) {
            return Err(Error::Internal(anyhow::anyhow!(
                "a store cache of {cache_mib} MiB is outside {}..={} MiB",
                STORE_CACHE_MIB.start(),
                STORE_CACHE_MIB.end()
            )));
        }
        let other = match store {
            Embedded::Sled => Embedded::Fjall,
            Embedded::Fjall => Embedded::Sled,
        };
        let folder = store.folder(data);
        if !folder.exists() && other.folder(data).exists() {
            return Err(Error::Internal(anyhow::anyhow!(
                "{} holds a {other} store, not a {store} one: start with `--store {other}`, or move \
                 its records into a new data folder with `commerce-host export` and \
                 `commerce-host import --store {store}`",
                data.display()
            )));
        }
        let storage: Arc<dyn Storage> = match store {
            Embedded::Sled => Arc::new(SledStorage::open_cached(&folder, cache_mib)?),
            Embedded::Fjall => Arc::new(FjallStorage::open_cached(&folder, cache_mib)?),
        };
        Ok(Self::new(storage, durable))
    }

    /// Reads and decodes the record at `key`.
    pub fn read<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>> {
        self.inner
            .get(key.as_bytes())?
            .map(|v| decode(key, &v))
            .transpose()
    }

    /// Reads and decodes the record at `key`, with the size of the record as stored (bytes).
    pub fn read_sized<T: DeserializeOwned>(&self, key: &str) -> Result<Option<(T, usize)>> {
        self.inner
            .get(key.as_bytes())?
            .map(|v| decode(key, &v).map(|value| (value, v.len())))
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

    /// Replaces the record at `key` with what `f` makes of it (`None`: no record), atomically
    /// even across hosts sharing the storage, without a transaction (see [`Storage::update`]);
    /// returns what `f` returned with the record of the run that counted. Not flushed, and not
    /// seen by watches: for a hot counter, not for a record of the store.
    pub fn update<T, R>(&self, key: &str, mut f: impl FnMut(Option<T>) -> (T, R)) -> Result<R>
    where
        T: Serialize + DeserializeOwned,
    {
        let mut out = None;
        self.inner.update(key.as_bytes(), &mut |current| {
            let current = current.map(|v| decode(key, v)).transpose()?;
            let (next, answer) = f(current);
            out = Some(answer);
            encode(&next)
        })?;
        out.ok_or_else(|| Error::Internal(anyhow::anyhow!("an update produced no result")))
    }

    /// Runs `f` in one transaction and returns what it returns. `f` may run more than once.
    pub fn tx<R>(&self, f: impl FnMut(&mut Tx<'_>) -> Result<R>) -> Result<R> {
        self.transact(
            f,
            Kind::Request {
                flush: self.durable,
            },
        )
    }

    /// Like [`Db::tx`], but never flushes: for the delivery engine's own bookkeeping, whose loss
    /// in a crash only means that work is redone (an attempt repeated, an outbox entry fanned out
    /// again). sled recovers a prefix of the committed transactions, never one with a gap, and
    /// flushes on its own within half a second; the next durable transaction flushes these too.
    /// It runs with [`Storage::transact_optimistic`]'s isolation: a key `f` only reads may change
    /// before it commits, so what must hold at the commit is written (each engine step writes
    /// the delivery, outbox entry or target it decides on; the targets a fan-out only reads are
    /// checked again at each attempt).
    pub fn tx_relaxed<R>(&self, f: impl FnMut(&mut Tx<'_>) -> Result<R>) -> Result<R> {
        self.transact(f, Kind::Bookkeeping)
    }

    fn transact<R>(&self, mut f: impl FnMut(&mut Tx<'_>) -> Result<R>, kind: Kind) -> Result<R> {
        let flush = matches!(kind, Kind::Request { flush: true });
        let watches = self
            .watches
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Only hosts sharing the storage need to hear of a commit (no message is built on sled).
        let shared = self.inner.is_shared();
        let mut out = None;
        let mut queued_delivery = false;
        let mut emitted = false;
        let mut outbox_first = None;
        let mut fresh = Vec::new();
        let mut queued = queue::Queued::default();
        let mut must_flush = false;
        let mut touched = 0u64;
        let mut body = |txn: &mut dyn Txn| {
            let mut tx = Tx {
                inner: txn,
                queued_delivery: false,
                emitted: false,
                outbox_first: None,
                fresh: Vec::new(),
                queued: queue::Queued::default(),
                flush: false,
                watches: &watches,
                touched: 0,
            };
            out = Some(f(&mut tx)?);
            if shared && (tx.touched != 0 || tx.queued_delivery) {
                let message = announcement(&watches, tx.touched, &tx.queued, tx.emitted);
                tx.inner.announce(&message)?;
            }
            if !flush && !tx.flush {
                tx.inner.relax();
            }
            queued_delivery = tx.queued_delivery;
            emitted = tx.emitted;
            outbox_first = tx.outbox_first.take();
            fresh = std::mem::take(&mut tx.fresh);
            queued = std::mem::take(&mut tx.queued);
            must_flush = tx.flush;
            touched = tx.touched;
            Ok(())
        };
        // The engine's bookkeeping runs with `transact_optimistic`'s weaker promise (PostgreSQL:
        // `REPEATABLE READ`); requests' writes, durable or not, serializable. On sled both run
        // optimistically and share their commits (`sled_store.rs`; checked reads, so both are
        // serializable there).
        match kind {
            Kind::Bookkeeping => self.inner.transact_optimistic(&mut body)?,
            Kind::Request { .. } => self.inner.transact(&mut body)?,
        }
        // Committed: whoever watches these records learns at once that theirs are stale.
        for (i, changes) in watches.iter().enumerate() {
            if touched & watch_bit(i) != 0 {
                changes.generation.fetch_add(1, Ordering::AcqRel);
            }
        }
        if flush || must_flush {
            self.group.flush(self.inner.as_ref())?;
        }
        if queued_delivery {
            self.delivery.ring_queued(&queued);
        }
        if !fresh.is_empty() {
            self.fresh.keep(fresh);
        }
        if emitted {
            self.delivery.ring_outbox(outbox_first);
        }
        out.ok_or_else(|| Error::Internal(anyhow::anyhow!("transaction produced no result")))
    }

    /// Flushes every transaction committed so far to disk (sharing the flush with the durable
    /// transactions that wait for one at the same time).
    pub fn flush(&self) -> Result<()> {
        self.group.flush(self.inner.as_ref())
    }

    /// The events committed through this handle (or a clone) and not yet fanned out (see
    /// [`fresh`]): the fan-out takes each from there rather than read it back.
    pub fn fresh_events(&self) -> &fresh::FreshEvents {
        &self.fresh
    }

    /// Whether other hosts may share this storage (see [`Storage::is_shared`]).
    pub fn is_shared(&self) -> bool {
        self.inner.is_shared()
    }

    /// See [`Storage::commit_stats`].
    pub fn commit_stats(&self) -> Option<CommitStats> {
        self.inner.commit_stats()
    }

    /// How many batches an embedded store has applied (0 where it does not count them), for
    /// tests that count commits.
    #[cfg(test)]
    pub(crate) fn batches_applied(&self) -> usize {
        self.commit_stats().map_or(0, |stats| {
            usize::try_from(stats.batches).unwrap_or(usize::MAX)
        })
    }

    /// What the delivery engine waits on between polls.
    pub fn delivery_signal(&self) -> Arc<queue::Signal> {
        self.delivery.clone()
    }
}

/// The longest announcement made (bytes): PostgreSQL refuses a `NOTIFY` payload of 8 000 bytes or
/// more, and with it the transaction that announces it.
const ANNOUNCEMENT_MAX: usize = 7_000;

/// What a commit tells the other processes on the same storage: `work` (it queued work), `e` (it
/// emitted events, for their fan-out), a `w <prefix>` line for each prefix of the watches it
/// touched, and a `q <lane> <key>` line for each store's earliest key in each lane (another
/// host reads on from there; the groups of [`queue::Queued`] beyond it are read group by group
/// by this host's engine only), while the message stays within [`ANNOUNCEMENT_MAX`] (a key left
/// out is found by the other engines' cursors and sweeps).
fn announcement(
    watches: &[Arc<Changes>],
    touched: u64,
    queued: &queue::Queued,
    emitted: bool,
) -> String {
    let mut message = String::from("work");
    if emitted {
        message.push_str("\ne");
    }
    for (i, changes) in watches.iter().enumerate() {
        if touched & watch_bit(i) != 0 {
            for prefix in changes.prefixes.iter() {
                message.push_str("\nw ");
                message.push_str(&String::from_utf8_lossy(prefix));
            }
        }
    }
    'lanes: for lane in 0..queued.lanes().len() {
        for key in queued.earliest_of_stores(lane) {
            let line = format!("\nq {lane} {key}");
            if message.len() + line.len() > ANNOUNCEMENT_MAX {
                break 'lanes;
            }
            message.push_str(&line);
        }
    }
    message
}

/// Acts on what another process announced: wakes the delivery engine at the work it queued, and
/// moves on the watches of the prefixes it changed. `None` (announcements may have been missed)
/// moves on every watch and wakes the engine.
fn heard(
    message: Option<&str>,
    delivery: &std::sync::Weak<queue::Signal>,
    watches: &std::sync::Weak<RwLock<Arc<[Arc<Changes>]>>>,
) {
    let watches = watches
        .upgrade()
        .map(|w| w.read().unwrap_or_else(|e| e.into_inner()).clone());
    let mut queued = queue::Queued::default();
    let mut work = message.is_none();
    let mut emitted = message.is_none();
    for line in message.unwrap_or_default().lines() {
        if line == "work" {
            work = true;
        } else if line == "e" {
            emitted = true;
        } else if let Some((lane, key)) = line.strip_prefix("q ").and_then(|l| l.split_once(' '))
            && let Ok(lane) = lane.parse::<usize>()
        {
            queued.note_lane(lane, key);
        } else if let Some(prefix) = line.strip_prefix("w ")
            && let Some(watches) = &watches
        {
            for changes in watches.iter() {
                if changes
                    .prefixes
                    .iter()
                    .any(|p| p.as_ref() == prefix.as_bytes())
                {
                    changes.generation.fetch_add(1, Ordering::AcqRel);
                }
            }
        }
    }
    if message.is_none()
        && let Some(watches) = &watches
    {
        for changes in watches.iter() {
            changes.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
    if work && let Some(signal) = delivery.upgrade() {
        signal.ring_queued(&queued);
        if emitted {
            // Every host fans out (its own stores, see `peers`); where, is not told.
            signal.ring_outbox(Some(String::new()));
        }
    }
}

/// What [`Db::watch`] returns: a generation of the records under some key prefixes, which moves
/// on after every committed transaction that wrote or removed one of them.
#[derive(Debug)]
pub struct Changes {
    prefixes: Box<[Box<[u8]>]>,
    generation: AtomicU64,
}

impl Changes {
    /// The current generation. Read it *before* reading the watched records: a copy made of
    /// what was read is current for as long as the generation has not moved since.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn covers(&self, key: &[u8]) -> bool {
        self.prefixes.iter().any(|p| key.starts_with(p))
    }
}

/// An in-memory copy of records under watched prefixes ([`Db::watch`]), held as one `T` with the
/// generation it was made at. Used at any other generation it starts again from `T::default()`,
/// so it is never used past a committed change of what it copies, and nothing has to know which
/// part of it a change concerns. To add what was read from the records, read
/// [`Copied::generation`] first and add only if [`CopyGuard::generation`] is still that one: a
/// copy of records read while they changed is never kept.
#[derive(Debug)]
pub struct Copied<T> {
    changes: Arc<Changes>,
    state: Mutex<(u64, T)>,
}

/// The copy held by [`Copied::current`], locked.
#[derive(Debug)]
pub struct CopyGuard<'a, T>(MutexGuard<'a, (u64, T)>);

impl<T: Default> Copied<T> {
    /// An empty copy of the records `changes` watches.
    pub fn new(changes: Arc<Changes>) -> Self {
        Self {
            changes,
            state: Mutex::new((0, T::default())),
        }
    }

    /// The generation of the copied records now: read it before reading them.
    pub fn generation(&self) -> u64 {
        self.changes.generation()
    }

    /// The copy, emptied first if the records changed since it was made.
    pub fn current(&self) -> CopyGuard<'_, T> {
        let generation = self.generation();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 != generation {
            *state = (generation, T::default());
        }
        CopyGuard(state)
    }
}

impl<T> CopyGuard<'_, T> {
    /// The generation of the records the copy was made of.
    pub fn generation(&self) -> u64 {
        self.0.0
    }
}

impl<T> std::ops::Deref for CopyGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0.1
    }
}

impl<T> std::ops::DerefMut for CopyGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0.1
    }
}

/// Whose transaction [`Db::transact`] runs.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A request's or command's ([`Db::tx`]), flushed when the storage is durable.
    Request { flush: bool },
    /// The delivery engine's bookkeeping ([`Db::tx_relaxed`]): never flushed, and run with
    /// [`Storage::transact_optimistic`].
    Bookkeeping,
}

/// Group commit: a durable transaction must not return before a flush that started after it
/// committed has finished, but one flush makes every transaction committed before it durable. So
/// the transactions that wait at the same time share one: each takes a ticket once committed; one
/// of them (the leader) flushes for every ticket issued when its flush starts, while the others
/// wait; those that committed during that flush are covered by the next one, which one of them
/// leads. Under load, a flush serves every request that committed while the previous one ran.
#[derive(Debug, Default)]
struct GroupCommit {
    state: Mutex<FlushState>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct FlushState {
    /// Tickets issued so far: one per wait, taken after the transaction committed.
    issued: u64,
    /// Every ticket up to this one is on disk.
    durable: u64,
    /// A leader is flushing (without holding the lock).
    flushing: bool,
}

impl GroupCommit {
    fn lock(&self) -> MutexGuard<'_, FlushState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns once everything committed before the call is on disk. Blocks the thread: async
    /// callers run it on the blocking pool.
    fn flush(&self, storage: &dyn Storage) -> Result<()> {
        let mut state = self.lock();
        state.issued += 1;
        let ticket = state.issued;
        loop {
            if state.durable >= ticket {
                return Ok(());
            }
            if state.flushing {
                state = self.done.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Lead: this flush starts after every ticket issued so far was committed.
            state.flushing = true;
            let covers = state.issued;
            drop(state);
            let leader = Leader { group: self };
            let flushed = storage.flush();
            state = self.lock();
            if flushed.is_ok() {
                state.durable = state.durable.max(covers);
            }
            // The turn ends under the same lock that records what it made durable, so a waiter
            // woken by it never sees the turn over without its result (and flushes again).
            state.flushing = false;
            std::mem::forget(leader);
            self.done.notify_all();
            // On an error the waiters it covered try a flush of their own.
            flushed?;
        }
    }
}

/// The bit of the `i`-th watch in [`Tx::touched`]; watches past the 64th share the last bit (a
/// change under one of them moves them all on, which is only ever too cautious).
fn watch_bit(i: usize) -> u64 {
    1 << i.min(63)
}

/// Ends a leader's turn if its flush panicked, and wakes the waiters (a flush that returns ends
/// its turn itself).
struct Leader<'a> {
    group: &'a GroupCommit,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        self.group.lock().flushing = false;
        self.group.done.notify_all();
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
    /// Whether the transaction emitted an event (the fan-out is rung once it commits).
    emitted: bool,
    /// The first outbox entry (in key order) it wrote, if any.
    outbox_first: Option<String>,
    /// The events it wrote ([`Tx::write_event`]), kept for the fan-out once it commits.
    fresh: Vec<fresh::Committed>,
    queued: queue::Queued,
    flush: bool,
    /// The watched prefixes, and which of them this transaction wrote under ([`watch_bit`]).
    watches: &'a [Arc<Changes>],
    touched: u64,
}

impl Tx<'_> {
    /// Reads and decodes the record at `key`.
    pub fn read<T: DeserializeOwned>(&mut self, key: &str) -> Result<Option<T>> {
        self.inner
            .get(key.as_bytes())?
            .map(|v| decode(key, &v))
            .transpose()
    }

    /// Whether a record is stored at `key` (read, not decoded).
    pub fn exists(&mut self, key: &str) -> Result<bool> {
        Ok(self.inner.get(key.as_bytes())?.is_some())
    }

    /// Reads the records at `keys` ahead, for the reads of them that follow in this transaction
    /// (one round trip for all of them where hosts share PostgreSQL). Where it would save nothing
    /// (sled), `keys` is not even iterated: callers may build the keys lazily.
    pub fn prefetch<K: AsRef<str>>(&mut self, keys: impl IntoIterator<Item = K>) -> Result<()> {
        if !self.inner.prefetches() {
            return Ok(());
        }
        let keys: Vec<K> = keys.into_iter().collect();
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_ref().as_bytes()).collect();
        self.inner.prefetch(&keys)
    }

    /// Encodes and writes `value` at `key`.
    pub fn write<T: Serialize>(&mut self, key: &str, value: &T) -> Result<()> {
        self.write_sized(key, value).map(drop)
    }

    /// [`Tx::write`], returning the size of the record written (bytes).
    fn write_sized<T: Serialize>(&mut self, key: &str, value: &T) -> Result<usize> {
        let record = encode(value)?;
        let size = record.len();
        self.note(key);
        self.inner.put(key.as_bytes(), record)?;
        Ok(size)
    }

    /// Encodes and writes the event `event` at `key`, and keeps it, once this transaction
    /// commits, for the fan-out that reads it next ([`Db::fresh_events`]). Returns it.
    pub fn write_event(&mut self, key: String, event: Event) -> Result<&Event> {
        let size = self.write_sized(&key, &event)?;
        let (_, event, _) = self.fresh.push_mut((key, Box::new(event), size));
        Ok(event)
    }

    /// Removes the record at `key`.
    pub fn remove(&mut self, key: &str) -> Result<()> {
        self.note(key);
        self.inner.delete(key.as_bytes())
    }

    /// Notes a change of `key` for the watches that cover it.
    fn note(&mut self, key: &str) {
        for (i, changes) in self.watches.iter().enumerate() {
            if changes.covers(key.as_bytes()) {
                self.touched |= watch_bit(i);
            }
        }
    }

    /// Wakes the delivery engine once this transaction commits.
    pub fn wake_delivery(&mut self) {
        self.queued_delivery = true;
    }

    /// Wakes the delivery engine's fan-out once this transaction commits (it emitted an event
    /// into the outbox, under `key`), telling it the first key so emitted.
    pub fn wake_fan_out(&mut self, key: &str) {
        self.queued_delivery = true;
        self.emitted = true;
        if self.outbox_first.as_deref().is_none_or(|first| key < first) {
            self.outbox_first = Some(key.to_owned());
        }
    }

    /// Makes this transaction durable even in a relaxed [`Db::tx_relaxed`]: it is flushed when it
    /// commits, before the engine is woken, so nothing it queued starts before it is on disk.
    pub fn flush_on_commit(&mut self) {
        self.flush = true;
    }
}

/// A position just before `key` for a scan that reads on after a key ([`Db::list_raw`]'s
/// `after`): the key less its last byte (the keys of the queue and the outbox are ASCII), so that
/// the scan reads `key` itself.
pub fn just_before(key: &str) -> &str {
    key.get(..key.len().saturating_sub(1)).unwrap_or(key)
}

/// Most bytes [`encode`]'s buffer keeps between records (a larger one is let go after it): a
/// record is a KiB or two, and every thread that writes keeps one.
const ENCODE_BUFFER_KEPT: usize = 16 * 1024;

thread_local! {
    /// The buffer [`encode`] writes each record into before copying it out.
    static ENCODE_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `value` as its stored JSON, in a vector of its exact size: written into a buffer kept for the
/// thread, then copied out once. (`serde_json::to_vec` starts at 128 bytes and doubles: a
/// delivery's or an attempt's record, about half a KiB, was two reallocations and their copies,
/// three past 512 bytes, and the vector kept up to twice the record's size until its
/// transaction committed.)
fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    ENCODE_BUFFER.with(|buffer| {
        // Taken while it encodes: a `Serialize` that wrote a record itself (none does) would
        // find it taken and use a vector of its own.
        let Ok(mut buffer) = buffer.try_borrow_mut() else {
            return Ok(serde_json::to_vec(value)?);
        };
        buffer.clear();
        let encoded = serde_json::to_writer(&mut *buffer, value).map(|()| buffer.to_vec());
        if buffer.capacity() > ENCODE_BUFFER_KEPT {
            *buffer = Vec::new();
        }
        Ok(encoded?)
    })
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Internal(anyhow::Error::new(e).context(format!("decoding the record at {key}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest cache `--store-cache-mib` allows (the start of [`STORE_CACHE_MIB`], 8 MiB)
    /// with twice as many bytes of records written: every record reads back, at once and after
    /// the store is opened again. A MiB less is refused before anything is opened.
    #[test]
    fn an_embedded_store_with_the_smallest_cache_reads_back_twice_what_fits_in_it() {
        const RECORDS: usize = 4_000;
        let value = "x".repeat(4_096);
        let key = |i: usize| format!("big/{i:05}");
        for store in [Embedded::Sled, Embedded::Fjall] {
            let dir = tempfile::tempdir().expect("temp dir");
            let check = |db: &Db| {
                for i in (0..RECORDS).step_by(97).chain([RECORDS - 1]) {
                    let read: Option<String> = db.read(&key(i)).expect("read");
                    assert_eq!(read.as_deref(), Some(value.as_str()), "{store:?} {i}");
                }
                let mut listed = 0;
                db.scan_all("big/", |k, v: String| {
                    assert_eq!((k, v.len()), (key(listed), value.len()), "{store:?}");
                    listed += 1;
                    Ok(())
                })
                .expect("scan");
                assert_eq!(listed, RECORDS, "{store:?}");
            };
            {
                let smallest = *STORE_CACHE_MIB.start();
                let refused = Db::open_embedded(store, dir.path(), false, smallest - 1);
                assert!(
                    refused.is_err_and(|e| e.to_string().contains("outside 8..=1048576 MiB")),
                    "{store:?}"
                );
                assert!(
                    !store.folder(dir.path()).exists(),
                    "{store:?}: nothing opened"
                );
                let db = Db::open_embedded(store, dir.path(), false, smallest).expect("open");
                for chunk in 0..RECORDS / 100 {
                    db.tx(|tx| {
                        (chunk * 100..(chunk + 1) * 100).try_for_each(|i| tx.write(&key(i), &value))
                    })
                    .expect("write a hundred records");
                }
                db.flush().expect("flush");
                check(&db);
            }
            let db = Db::open_embedded(store, dir.path(), false, *STORE_CACHE_MIB.start())
                .expect("open again");
            check(&db);
        }
    }

    #[test]
    fn an_embedded_store_counts_the_batches_it_applied_their_transactions_and_writes() {
        for store in [Embedded::Sled, Embedded::Fjall] {
            let dir = tempfile::tempdir().expect("temp dir");
            let db =
                Db::open_embedded(store, dir.path(), false, DEFAULT_STORE_CACHE_MIB).expect("open");
            let before = db
                .commit_stats()
                .expect("an embedded store counts its commits");
            db.tx(|tx| {
                tx.write("s/a", &1)?;
                tx.write("s/b", &2)?;
                tx.write("s/c", &3)
            })
            .expect("three writes");
            db.tx(|tx| tx.remove("s/a")).expect("a removal");
            // Neither a transaction that wrote nothing nor one whose closure failed adds a write.
            db.tx(|tx| {
                tx.read::<i32>("s/b")?;
                tx.read::<i32>("s/c")
            })
            .expect("two reads");
            let failed = db.tx(|tx| {
                tx.read::<i32>("s/b")?;
                tx.write("s/d", &4)?;
                Err::<(), _>(Error::Validation {
                    field: "d".into(),
                    message: "refused".into(),
                })
            });
            assert!(failed.is_err());
            let after = db.commit_stats().expect("counted");
            assert_eq!(after.batches - before.batches, 2, "{store:?}");
            assert_eq!(after.transactions - before.transactions, 2, "{store:?}");
            assert_eq!(after.writes - before.writes, 4, "{store:?}");
            assert!(after.applying > before.applying, "{store:?}");
        }
    }

    #[test]
    fn each_record_is_encoded_as_its_json_in_a_vector_of_its_own_size() {
        let long = serde_json::json!({ "id": "dlv_1", "body": "x".repeat(900) });
        let short = serde_json::json!({ "id": "dlv_2" });
        for value in [&long, &short, &long] {
            let encoded = encode(value).expect("encode");
            assert_eq!(encoded, serde_json::to_vec(value).expect("to_vec"));
            assert_eq!(encoded.capacity(), encoded.len());
        }
        // A record past what the buffer keeps is encoded whole, and the buffer let go after it.
        let huge = serde_json::json!({ "body": "y".repeat(2 * ENCODE_BUFFER_KEPT) });
        assert_eq!(
            encode(&huge).expect("encode"),
            serde_json::to_vec(&huge).expect("to_vec")
        );
        ENCODE_BUFFER.with(|buffer| assert_eq!(buffer.borrow().capacity(), 0));
        assert_eq!(
            encode(&short).expect("encode"),
            serde_json::to_vec(&short).expect("to_vec")
        );
        // A value that cannot be encoded is an error, and leaves nothing behind for the next.
        let bad = std::collections::HashMap::from([((1, 2), 3)]);
        assert!(encode(&bad).is_err());
        assert_eq!(
            encode(&short).expect("encode"),
            serde_json::to_vec(&short).expect("to_vec")
        );
    }

    #[test]
    fn another_hosts_commit_rings_the_fan_out_only_when_it_emitted_events() {
        use futures::FutureExt as _;
        let signal = Arc::new(queue::Signal::default());
        let (delivery, watches) = (Arc::downgrade(&signal), std::sync::Weak::new());
        heard(
            Some("work\nq 0 work/webhook/1/store_a/wh_a/evt_1"),
            &delivery,
            &watches,
        );
        assert!(
            signal.notified().now_or_never().is_some(),
            "the engine rung"
        );
        assert!(
            signal.outbox_notified().now_or_never().is_none(),
            "no event: the fan-out not rung"
        );
        heard(Some("work\ne"), &delivery, &watches);
        assert!(signal.outbox_notified().now_or_never().is_some());
        // Announcements may have been missed: both.
        heard(None, &delivery, &watches);
        assert!(signal.notified().now_or_never().is_some());
        assert!(signal.outbox_notified().now_or_never().is_some());
    }

    #[test]
    fn an_announcement_names_each_stores_earliest_work_and_fits_postgresqls_notify() {
        use crate::model::delivery::{DueEntry, TargetRef};
        use crate::model::ids::{EventId, StoreId, WebhookId};
        use crate::model::work::Work;
        let (db, dir) = temp_db();
        let watches = db.watch(&["inst/"]);
        let now = jiff::Timestamp::now();
        let stores: Vec<StoreId> = (0..queue::STORES_NOTED)
            .map(|_| StoreId::generate(now))
            .collect();
        // What a commit queued: every group it may name, of every store, in every lane.
        let mut queued = queue::Queued::default();
        for lane in 0..4 {
            for store in &stores {
                for group in 0..queue::GROUPS_PER_STORE {
                    let work = Work::Delivery(DueEntry {
                        store_id: store.clone(),
                        target: TargetRef::Webhook(WebhookId::generate(now)),
                        event_id: EventId::generate(now),
                    });
                    let at = now
                        .checked_add(jiff::SignedDuration::from_millis(group as i64))
                        .expect("ts");
                    queued.note_lane(lane, &work.key(at));
                }
            }
        }
        assert_eq!(queued.lanes()[0].len(), queue::KEYS_NOTED);
        let message = announcement(&[watches], 1, &queued, true);
        assert!(message.len() <= ANNOUNCEMENT_MAX, "{} bytes", message.len());
        assert!(
            message.contains("\nw inst/"),
            "the watches' lines are all there"
        );
        // Heard by another host: each store's earliest work in the first lane, and no other
        // group's.
        let other = Arc::new(queue::Signal::default());
        heard(
            Some(&message),
            &Arc::downgrade(&other),
            &std::sync::Weak::new(),
        );
        let mut named = other.take_earliest().groups[0].clone();
        named.sort();
        let mut earliest: Vec<String> = stores
            .iter()
            .map(|store| {
                queued.lanes()[0]
                    .iter()
                    .filter(|k| queue::store_of_key(k) == store.as_str())
                    .min()
                    .expect("queued")
                    .clone()
            })
            .collect();
        earliest.sort();
        assert_eq!(named, earliest);
        drop(db);
        let _ = std::fs::remove_dir_all(dir);
    }

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

    /// A backend in memory that tells committed writes from flushed ones, counts flushes, and
    /// holds its first flush until `hold_first_flush_until` committed transactions wait for a
    /// flush in `group`.
    #[derive(Default)]
    struct Recording {
        committed: Mutex<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
        durable: Mutex<std::collections::BTreeMap<Vec<u8>, Vec<u8>>>,
        flushes: AtomicU64,
        hold_first_flush_until: u64,
        group: std::sync::OnceLock<Arc<GroupCommit>>,
        fail_next_flush: std::sync::atomic::AtomicBool,
        /// Transactions run with `transact_optimistic`.
        optimistic: AtomicU64,
    }

    struct Staged<'a> {
        base: &'a std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
        writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    }

    impl Txn for Staged<'_> {
        fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(match self.writes.iter().rev().find(|(k, _)| k == key) {
                Some((_, v)) => v.clone(),
                None => self.base.get(key).cloned(),
            })
        }
        fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()> {
            self.writes.push((key.to_vec(), Some(value)));
            Ok(())
        }
        fn delete(&mut self, key: &[u8]) -> Result<()> {
            self.writes.push((key.to_vec(), None));
            Ok(())
        }
    }

    impl Storage for Recording {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            Ok(self.committed.lock().expect("lock").get(key).cloned())
        }
        fn scan(&self, _: &[u8], _: Option<&[u8]>, _: bool, _: usize) -> Result<Vec<Entry>> {
            Ok(Vec::new())
        }
        fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
            let mut committed = self.committed.lock().expect("lock");
            let mut staged = Staged {
                base: &committed,
                writes: Vec::new(),
            };
            f(&mut staged)?;
            let writes = staged.writes;
            for (k, v) in writes {
                match v {
                    Some(v) => committed.insert(k, v),
                    None => committed.remove(&k),
                };
            }
            Ok(())
        }
        fn transact_optimistic(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
            self.optimistic.fetch_add(1, Ordering::SeqCst);
            self.transact(f)
        }
        fn flush(&self) -> Result<()> {
            // What this flush makes durable is what was committed when it started.
            let snapshot = self.committed.lock().expect("lock").clone();
            if self.flushes.load(Ordering::SeqCst) == 0
                && let Some(group) = self.group.get()
            {
                while group.lock().issued < self.hold_first_flush_until {
                    std::thread::yield_now();
                }
            }
            self.flushes.fetch_add(1, Ordering::SeqCst);
            if self.fail_next_flush.swap(false, Ordering::SeqCst) {
                return Err(Error::Internal(anyhow::anyhow!("the disk is full")));
            }
            *self.durable.lock().expect("lock") = snapshot;
            Ok(())
        }
    }

    #[test]
    fn concurrent_durable_transactions_share_flushes_and_each_returns_once_on_disk() {
        const WRITERS: u64 = 16;
        let backend = Arc::new(Recording {
            hold_first_flush_until: WRITERS,
            ..Recording::default()
        });
        let db = Db::new(backend.clone(), true);
        assert!(backend.group.set(db.group.clone()).is_ok());
        let threads: Vec<_> = (0..WRITERS)
            .map(|i| {
                let (db, backend) = (db.clone(), backend.clone());
                std::thread::spawn(move || {
                    let key = format!("order/{i}");
                    db.tx(|tx| tx.write(&key, &i)).expect("durable tx");
                    assert!(
                        backend
                            .durable
                            .lock()
                            .expect("lock")
                            .contains_key(key.as_bytes()),
                        "{key} returned before it was flushed"
                    );
                })
            })
            .collect();
        for t in threads {
            t.join().expect("writer");
        }
        let flushes = backend.flushes.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&flushes),
            "{WRITERS} durable commits took {flushes} flushes: the one held open until all had \
             committed, and at most one more for everyone who committed after it started"
        );
    }

    #[test]
    fn a_failed_flush_fails_its_transaction_and_the_next_one_flushes_again() {
        let backend = Arc::new(Recording::default());
        let db = Db::new(backend.clone(), true);
        backend.fail_next_flush.store(true, Ordering::SeqCst);
        let err = db.tx(|tx| tx.write("a", &1)).expect_err("the flush failed");
        assert!(matches!(err, Error::Internal(_)));
        assert!(backend.durable.lock().expect("lock").is_empty());
        db.tx(|tx| tx.write("b", &2)).expect("durable");
        let durable = backend.durable.lock().expect("lock");
        assert!(durable.contains_key(b"a".as_slice()) && durable.contains_key(b"b".as_slice()));
        assert_eq!(backend.flushes.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn only_the_engines_bookkeeping_runs_optimistically_durable_storage_or_not() {
        for durable in [true, false] {
            let backend = Arc::new(Recording::default());
            let db = Db::new(backend.clone(), durable);
            db.tx(|tx| tx.write("order/1", &1))
                .expect("a request's write");
            assert_eq!(
                backend.optimistic.load(Ordering::SeqCst),
                0,
                "durable: {durable}"
            );
            db.tx_relaxed(|tx| tx.write("work/1", &1))
                .expect("bookkeeping");
            assert_eq!(
                backend.optimistic.load(Ordering::SeqCst),
                1,
                "durable: {durable}"
            );
        }
    }

    #[test]
    fn relaxed_transactions_do_not_flush_unless_one_asks_to() {
        let backend = Arc::new(Recording::default());
        let db = Db::new(backend.clone(), true);
        db.tx_relaxed(|tx| tx.write("a", &1)).expect("relaxed");
        assert_eq!(backend.flushes.load(Ordering::SeqCst), 0);
        assert!(backend.durable.lock().expect("lock").is_empty());
        db.tx_relaxed(|tx| {
            tx.flush_on_commit();
            tx.write("b", &2)
        })
        .expect("flushed on commit");
        assert_eq!(backend.flushes.load(Ordering::SeqCst), 1);
        assert_eq!(backend.durable.lock().expect("lock").len(), 2);
        let relaxed_db = Db::new(backend.clone(), false);
        relaxed_db.tx(|tx| tx.write("c", &3)).expect("not durable");
        assert_eq!(backend.flushes.load(Ordering::SeqCst), 1);
        relaxed_db.flush().expect("flush");
        assert_eq!(backend.durable.lock().expect("lock").len(), 3);
    }

    #[test]
    fn a_watch_moves_on_with_each_committed_change_under_its_prefixes_only() {
        let db = Db::new(Arc::new(Recording::default()), false);
        let clone = db.clone();
        let inst = db.watch(&["inst/", "store/"]);
        let other = clone.watch(&["token/"]);
        let g = inst.generation();
        clone.tx(|tx| tx.write("order/s/1", &1)).expect("tx");
        assert_eq!(inst.generation(), g, "another prefix");
        clone.tx(|tx| tx.write("inst/s/1", &1)).expect("tx");
        assert_eq!(inst.generation(), g + 1, "a write, through a clone");
        db.tx_relaxed(|tx| tx.remove("store/s")).expect("tx");
        assert_eq!(inst.generation(), g + 2, "a removal, relaxed");
        let aborted: Result<()> = db.tx(|tx| {
            tx.write("inst/s/2", &2)?;
            Err(Error::invalid("x", "no"))
        });
        assert!(aborted.is_err());
        assert_eq!(
            inst.generation(),
            g + 2,
            "an aborted transaction changed nothing"
        );
        assert_eq!(other.generation(), 0);
        db.tx(|tx| tx.write("token/ab", &1)).expect("tx");
        assert_eq!((inst.generation(), other.generation()), (g + 2, 1));
    }
}
