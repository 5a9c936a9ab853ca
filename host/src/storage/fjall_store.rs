//! The other embedded backend: one fjall partition (a log-structured merge tree, which appends
//! each commit to its journal and sorts in memory, where sled rewrites leaves of its B-tree),
//! with the same serializable transactions as sled's, run optimistically and committed in
//! shared batches (see [`super::optimistic::Commits::transact`]). Chosen with `--store fjall`;
//! sled stays the default.

mod journal;

use std::fs::{File, TryLockError};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::{Keyspace, PartitionHandle, PersistMode};
use parking_lot::Mutex;

use self::journal::Journal;
use super::optimistic::{Commits, Engine};
use super::{Entry, Storage, Txn, scanned};
use crate::model::error::{Error, Result};

/// Storage in a fjall keyspace on local disk.
#[derive(Clone)]
pub struct FjallStorage {
    commits: Arc<Commits<FjallRecords>>,
    /// Where the live keys under a prefix scanned from its start begin (see [`Heads`]).
    heads: Arc<Mutex<Heads>>,
    /// The folder's lock, held while any handle is open (fjall keeps none of its own).
    _lock: Arc<File>,
}

impl std::fmt::Debug for FjallStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FjallStorage")
    }
}

/// The partition every record is kept in, as [`Commits`] uses it.
struct FjallRecords {
    keyspace: Keyspace,
    records: PartitionHandle,
    heads: Arc<Mutex<Heads>>,
    /// Flushed outside fjall's lock ([`Journal::sync`]).
    journal: Journal,
}

/// The most prefixes whose heads are kept: past it, all are forgotten (a scan without a head
/// starts at its prefix, as it would anyway).
const HEADS_KEPT: usize = 4096;

/// Where the live keys under each prefix begin, for the scans from a prefix's start.
///
/// fjall removes a key by writing a tombstone over it, dropped only when compaction reaches
/// the last level of its tree; until then a scan passes over every tombstone ahead of its first
/// live key. The engine's queues (the outbox, the work lanes) are scanned from their start and
/// removed from their start, so after a backlog of 100 000 a scan for the next entry passed
/// over 100 000 tombstones (45 ms each time, measured with fjall 2.11 on the development VM;
/// 600 ms after a million). A scan from a prefix's start therefore starts at its head: a key at
/// or before the first key that was live under it when it was last scanned, lowered by every
/// insert under it since, so no live key is ever before it, and the tombstones before it are
/// skipped by a seek. An insert lowers the heads before its batch is visible, and a scan that
/// begins before the batch is visible may not see it: such a scan's head goes no further than
/// the keys of every batch being committed when it began (see [`Heads::committing`]), nor than
/// those inserted while it ran.
#[derive(Debug, Default)]
struct Heads {
    /// For each prefix scanned from its start: a key at or before every live key under it.
    known: foldhash::HashMap<Vec<u8>, Vec<u8>>,
    /// The lengths of the prefixes in `known` (an insert looks each of its own up once).
    lengths: std::collections::BTreeMap<usize, usize>,
    /// The scans from a prefix's start under way: their prefix, and the least key inserted
    /// under it since they began (which their view of the partition may not show).
    scanning: Vec<(u64, Vec<u8>, Option<Vec<u8>>)>,
    next_scan: u64,
    /// The keys inserted by each batch being committed (from before the heads were lowered for
    /// it until its commit returned, when it is visible): a scan that begins meanwhile may not
    /// see them. (Without them, a scan that began while an outbox entry's batch was committed
    /// left the head past the entry, and every later scan from the head passed it by.)
    committing: Vec<(u64, Vec<Vec<u8>>)>,
    next_batch: u64,
}

/// The first key after every key that starts with `prefix` (`None`: there is none, the prefix
/// being empty or all `0xFF`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|b| *b != 0xFF)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// Whether the range's end `end` lies at or before `start`: the range is empty.
fn bound_before(end: Bound<&[u8]>, start: &[u8]) -> bool {
    matches!(end, Bound::Excluded(end) if end <= start)
}

impl Heads {
    /// A scan from `prefix`'s start begins: where it may start, and its id.
    fn begin(&mut self, prefix: &[u8]) -> (Option<Vec<u8>>, u64) {
        let id = self.next_scan;
        self.next_scan += 1;
        // A batch being committed may be visible to the scan or not: its keys count as inserted
        // while the scan runs.
        let committing = self
            .committing
            .iter()
            .flat_map(|(_, keys)| keys)
            .filter(|key| key.starts_with(prefix))
            .min()
            .cloned();
        self.scanning.push((id, prefix.to_vec(), committing));
        (self.known.get(prefix).cloned(), id)
    }

    /// The scan `id` of `prefix` ended having found `first` as its first live key (`None`:
    /// none): no live key under it is before `first`, nor before what was inserted meanwhile.
    fn end(&mut self, id: u64, prefix: &[u8], first: Option<&[u8]>) {
        let Some(at) = self.scanning.iter().position(|(s, _, _)| *s == id) else {
            return;
        };
        let (_, _, inserted) = self.scanning.swap_remove(at);
        // With no live key found, the head is past every key under the prefix (ours are text,
        // never 0xFF), until an insert lowers it.
        let end = [prefix, &[0xFF]].concat();
        let mut head = first.map_or(end, <[u8]>::to_vec);
        if let Some(inserted) = inserted.filter(|i| *i < head) {
            head = inserted;
        }
        if !self.known.contains_key(prefix) {
            if self.known.len() >= HEADS_KEPT {
                self.known.clear();
                self.lengths.clear();
            }
            *self.lengths.entry(prefix.len()).or_default() += 1;
        }
        self.known.insert(prefix.to_vec(), head);
    }

    /// The scan `id` ended without telling where its prefix's live keys begin.
    fn end_without_head(&mut self, id: u64) {
        self.scanning.retain(|(s, _, _)| *s != id);
    }

    /// A batch inserting `keys` is about to be committed: the heads move back to its keys, which
    /// count as inserted for every scan that begins before [`Heads::committed`] (the batch is
    /// visible by then). Returns the batch's id.
    fn committing(&mut self, keys: Vec<Vec<u8>>) -> u64 {
        for key in &keys {
            self.inserting(key);
        }
        let id = self.next_batch;
        self.next_batch += 1;
        if !keys.is_empty() {
            self.committing.push((id, keys));
        }
        id
    }

    /// The batch `id` was committed (or failed): a scan that begins now sees what it inserted.
    fn committed(&mut self, id: u64) {
        self.committing.retain(|(batch, _)| *batch != id);
    }

    /// `key` is about to be inserted: every head after it, of a prefix of it, moves back to it.
    fn inserting(&mut self, key: &[u8]) {
        for &length in self.lengths.keys() {
            if length > key.len() {
                break;
            }
            if let Some(head) = self.known.get_mut(&key[..length])
                && key < head.as_slice()
            {
                *head = key.to_vec();
            }
        }
        for (_, prefix, inserted) in &mut self.scanning {
            if key.starts_with(prefix) && inserted.as_deref().is_none_or(|i| key < i) {
                *inserted = Some(key.to_vec());
            }
        }
    }
}

impl FjallRecords {
    /// The partition as of the last batch committed whole. fjall applies a batch's writes to
    /// its memory table one after another, all under one sequence number, and makes that number
    /// visible once all are: the partition's own reads (`get`, `range`) read the latest of each
    /// key, a batch being applied included, so a read could see some of a batch's writes and
    /// not the others (an event's outbox entry without its record: the fan-out removed the entry
    /// as of an expired event, and its deliveries were never made). A snapshot at the keyspace's
    /// visible number sees whole batches only.
    fn view(&self) -> fjall::Snapshot {
        self.records.snapshot_at(self.keyspace.instant())
    }
}

impl std::fmt::Debug for FjallRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FjallRecords")
    }
}

impl Engine for FjallRecords {
    type Value = fjall::Slice;

    fn read(&self, key: &[u8]) -> Result<Option<fjall::Slice>> {
        Ok(self.view().get(key)?)
    }

    /// One batch, in the journal as one entry (recovered whole or not at all) and handed to the
    /// operating system before it returns: a host killed afterwards keeps it; a machine that
    /// loses power keeps what the last [`Storage::flush`] made durable.
    fn apply(&self, writes: Vec<(Vec<u8>, Option<Vec<u8>>)>) -> Result<()> {
        // Sized for its writes: a batch of a few hundred records grown a push at a time
        // reallocated (and copied) its items again and again.
        let mut batch = fjall::Batch::with_capacity(self.keyspace.clone(), writes.len())
            .durability(Some(PersistMode::Buffer));
        let mut inserted = Vec::with_capacity(writes.len());
        for (key, value) in writes {
            match value {
                Some(value) => {
                    batch.insert(&self.records, key.as_slice(), value);
                    inserted.push(key);
                }
                None => batch.remove(&self.records, key),
            }
        }
        // Before the batch is visible: a scan that sees it starts at or before its keys, and
        // one that begins before it is visible keeps its head at or before them.
        let id = self.heads.lock().committing(inserted);
        #[cfg(test)]
        tests::before_commit();
        let committed = batch.commit();
        self.heads.lock().committed(id);
        Ok(committed?)
    }
}

/// How long opening waits for the folder's lock while another handle holds it (a host restarted
/// in the same process, or a command run right after it). As sled's.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// The journal's size past which fjall writes its memory tables out (and so the most a restart
/// after a crash replays): 64 MiB, where fjall's default of 512 MiB would take seconds.
const MAX_JOURNAL: u64 = 64 * 1024 * 1024;

impl FjallStorage {
    /// Opens (or creates) the keyspace in `dir`, waiting up to [`LOCK_WAIT`] for its lock, with
    /// a cache of [`DEFAULT_STORE_CACHE_MIB`](super::DEFAULT_STORE_CACHE_MIB).
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_cached(dir, super::DEFAULT_STORE_CACHE_MIB)
    }

    /// [`FjallStorage::open`] with a cache of `cache_mib` MiB: the blocks of its tables fjall
    /// keeps in memory (fjall's own default is 32 MiB). Its memory tables come on top, up to
    /// its write buffer of 64 MiB.
    pub fn open_cached(dir: &Path, cache_mib: u64) -> Result<Self> {
        Self::open_waiting(dir, LOCK_WAIT, cache_mib)
    }

    fn open_waiting(dir: &Path, wait: Duration, cache_mib: u64) -> Result<Self> {
        let context = |e: std::io::Error| {
            Error::Internal(
                anyhow::Error::new(e).context(format!("opening the database in {}", dir.display())),
            )
        };
        std::fs::create_dir_all(dir).map_err(context)?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("lock"))
            .map_err(context)?;
        let started = Instant::now();
        loop {
            match lock.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if started.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(context(std::io::Error::other(format!(
                        "could not acquire lock on {}: another process holds it",
                        dir.join("lock").display()
                    ))));
                }
                Err(TryLockError::Error(e)) => return Err(context(e)),
            }
        }
        let keyspace = fjall::Config::new(dir.join("keyspace"))
            .max_journaling_size(MAX_JOURNAL)
            .cache_size(cache_mib.saturating_mul(1024 * 1024))
            .open()?;
        let records = keyspace.open_partition("records", Default::default())?;
        let heads = Arc::new(Mutex::new(Heads::default()));
        let journal = Journal::new(&dir.join("keyspace"));
        Ok(Self {
            commits: Arc::new(Commits::new(FjallRecords {
                keyspace,
                records,
                heads: heads.clone(),
                journal,
            })),
            heads,
            _lock: Arc::new(lock),
        })
    }

    /// See [`FjallRecords::view`].
    fn view(&self) -> fjall::Snapshot {
        self.commits.engine.view()
    }
}

impl Storage for FjallStorage {
    fn commit_stats(&self) -> Option<super::CommitStats> {
        Some(self.commits.stats())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let value = self.view().get(key)?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let from_head = after.is_none() && !reverse;
        #[cfg(test)]
        tests::before_scan_begins();
        let (head, scan) = if from_head {
            let (head, scan) = self.heads.lock().begin(prefix);
            (head, Some(scan))
        } else {
            (None, None)
        };
        // Taken once the scan began: a batch committed before that is in the view, and one
        // being committed then counts as inserted during the scan (see `Heads::begin`). (Taken
        // before, a batch committed in between was in neither, and the head went past its keys.)
        let records = self.view();
        // Every forward range ends where the prefix does: an open end reads on past it to the
        // next live key, over every removed key between (an empty lane's scan passed over the
        // next lane's removed entries, thousands of them, at every poll).
        let end = prefix_end(prefix);
        let end = match &end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        };
        type Items = Box<dyn DoubleEndedIterator<Item = Result<fjall::KvPair, fjall::LsmError>>>;
        let range: Items = match (after, reverse, head) {
            (None, false, Some(head)) => {
                if bound_before(end, &head) {
                    Box::new(std::iter::empty())
                } else {
                    Box::new(records.range::<&[u8], _>((Bound::Included(&head[..]), end)))
                }
            }
            (None, _, _) => Box::new(records.prefix(prefix)),
            (Some(after), false, _) => {
                if bound_before(end, after) {
                    Box::new(std::iter::empty())
                } else {
                    Box::new(records.range::<&[u8], _>((Bound::Excluded(after), end)))
                }
            }
            (Some(after), true, _) => Box::new(
                records.range::<&[u8], _>((Bound::Included(prefix), Bound::Excluded(after))),
            ),
        };
        let ordered: Box<dyn Iterator<Item = Result<fjall::KvPair, fjall::LsmError>>> = if reverse {
            Box::new(range.rev())
        } else {
            range
        };
        let out = scanned(ordered, prefix, reverse, limit);
        if let Some(scan) = scan {
            let mut heads = self.heads.lock();
            match &out {
                // A scan that found nothing because it asked for nothing tells nothing.
                Ok(found) if limit > 0 => {
                    heads.end(scan, prefix, found.first().map(|(k, _)| k.as_slice()))
                }
                _ => heads.end_without_head(scan),
            }
        }
        out
    }

    /// As sled's: optimistic, committed in batches shared with the transactions queued at the
    /// same moment ([`Commits::transact`]), each batch one entry of fjall's journal, and
    /// serializable (every key read is checked at the commit), so the engine's transactions
    /// (`transact_optimistic`, by default this) are the same.
    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        self.commits.transact(f)
    }

    /// Writes the journal to disk (`fdatasync`): every batch committed before is durable. Other
    /// transactions commit meanwhile ([`Journal::sync`]).
    fn flush(&self) -> Result<()> {
        let engine = &self.commits.engine;
        engine.journal.sync(&engine.keyspace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        /// Run by a batch committed on this thread once the heads moved back for it, before it
        /// is committed.
        static BEFORE_COMMIT: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
        /// Run by the next scan on this thread before it begins (before its view is taken).
        static BEFORE_SCAN: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
        /// Run by the next flush on this thread just before its `fdatasync` ([`Journal::sync`]).
        pub(super) static BEFORE_SYNC: RefCell<Option<Box<dyn FnOnce()>>> = RefCell::new(None);
    }

    type Hook = std::thread::LocalKey<RefCell<Option<Box<dyn FnOnce()>>>>;

    /// Runs the closure set in `hook`, if any, once.
    fn run(hook: &'static Hook) {
        if let Some(f) = hook.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    pub(super) fn before_commit() {
        run(&BEFORE_COMMIT);
    }

    pub(super) fn before_scan_begins() {
        run(&BEFORE_SCAN);
    }

    pub(super) fn before_sync() {
        run(&BEFORE_SYNC);
    }

    /// The first key under `prefix`, scanned from its start.
    fn first_under(storage: &FjallStorage, prefix: &str) -> Option<String> {
        storage
            .scan(prefix.as_bytes(), None, false, 1)
            .expect("scan")
            .first()
            .map(|(k, _)| String::from_utf8(k.clone()).expect("utf-8"))
    }

    #[test]
    fn a_read_sees_a_batch_whole_or_not_at_all() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        const BATCHES: usize = 200;
        // Each batch writes `a/N`, then many keys, then `b/N`: fjall applies them one after
        // another, and a reader that sees `a/N` must see `b/N` too.
        let writer = {
            let storage = storage.clone();
            std::thread::spawn(move || {
                for n in 0..BATCHES {
                    let mut writes = vec![(format!("a/{n:05}").into_bytes(), Some(b"v".to_vec()))];
                    for i in 0..200 {
                        writes.push((format!("c/{n:05}/{i:03}").into_bytes(), Some(vec![0; 64])));
                    }
                    writes.push((format!("b/{n:05}").into_bytes(), Some(b"v".to_vec())));
                    storage.commits.engine.apply(writes).expect("applied");
                }
            })
        };
        let (mut n, mut halves) = (0, 0);
        while n < BATCHES {
            if storage
                .get(format!("a/{n:05}").as_bytes())
                .expect("get")
                .is_some()
            {
                if storage
                    .get(format!("b/{n:05}").as_bytes())
                    .expect("get")
                    .is_none()
                {
                    halves += 1;
                }
                let scanned = storage.scan(b"b/", None, true, 1).expect("scan");
                let last = scanned.first().map(|(k, _)| k.clone());
                assert!(
                    last >= Some(format!("b/{n:05}").into_bytes()),
                    "a scan sees it too"
                );
                n += 1;
            }
        }
        writer.join().expect("writer");
        assert_eq!(halves, 0, "reads that saw half a batch");
    }

    #[test]
    fn a_batch_committed_just_before_a_scan_begins_is_in_its_view_and_under_its_head() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        let put = |storage: &FjallStorage, key: &str| {
            storage
                .transact(&mut |txn| txn.put(key.as_bytes(), b"v".to_vec()))
                .expect("committed")
        };
        put(&storage, "q/5");
        assert_eq!(first_under(&storage, "q/").as_deref(), Some("q/5"));
        // `q/1` is committed whole as the next scan is about to begin.
        let during = storage.clone();
        BEFORE_SCAN.with(|h| *h.borrow_mut() = Some(Box::new(move || put(&during, "q/1"))));
        assert_eq!(first_under(&storage, "q/").as_deref(), Some("q/1"));
        assert_eq!(first_under(&storage, "q/").as_deref(), Some("q/1"));
    }

    #[test]
    fn a_scan_that_begins_while_an_insert_is_committed_leaves_the_head_at_or_before_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        let put = |key: &str| {
            storage
                .transact(&mut |txn| txn.put(key.as_bytes(), b"v".to_vec()))
                .expect("committed")
        };
        put("q/5");
        assert_eq!(first_under(&storage, "q/").as_deref(), Some("q/5"));
        // A scan from the start runs once the heads moved back for `q/1`, before its batch is
        // visible: it finds `q/5` only.
        let during = storage.clone();
        let seen = Arc::new(Mutex::new(None));
        let seen_during = seen.clone();
        BEFORE_COMMIT.with(|b| {
            *b.borrow_mut() = Some(Box::new(move || {
                *seen_during.lock() = Some(first_under(&during, "q/"));
            }))
        });
        put("q/1");
        assert_eq!(
            seen.lock().clone(),
            Some(Some("q/5".to_owned())),
            "the scan ran before the batch was visible"
        );
        // Every scan from the start after the commit finds it (the head that scan left was past
        // it, and every later scan from the head passed it by).
        for _ in 0..2 {
            assert_eq!(first_under(&storage, "q/").as_deref(), Some("q/1"));
        }
        assert!(storage.heads.lock().committing.is_empty(), "none left");
    }

    #[test]
    fn a_second_open_of_a_held_folder_waits_then_fails_and_names_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let held = FjallStorage::open(dir.path()).expect("open");
        let started = Instant::now();
        let err = FjallStorage::open_waiting(dir.path(), Duration::from_millis(50), 8)
            .expect_err("the lock is held");
        assert!(started.elapsed() >= Duration::from_millis(50), "it waited");
        let message = format!("{err:#}");
        assert!(message.contains("opening the database in"), "{message}");
        assert!(message.contains("lock"), "{message}");
        // Once the first handle is gone, the folder opens, with what was committed.
        held.transact(&mut |txn| txn.put(b"k", b"v".to_vec()))
            .expect("committed");
        let closing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        let second = FjallStorage::open(dir.path()).expect("opened once the lock was free");
        closing.join().expect("closed");
        assert_eq!(second.get(b"k").expect("get"), Some(b"v".to_vec()));
    }

    #[test]
    fn a_scan_with_a_cursor_before_its_prefix_finds_the_prefix_and_stops_after_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        storage
            .transact(&mut |txn| {
                for key in ["a/1", "b/1", "b/2", "b/3", "c/1"] {
                    txn.put(key.as_bytes(), key.as_bytes().to_vec())?;
                }
                Ok(())
            })
            .expect("committed");
        let keys = |entries: Vec<Entry>| {
            entries
                .into_iter()
                .map(|(k, _)| String::from_utf8(k).expect("utf-8"))
                .collect::<Vec<_>>()
        };
        let scan = |after: Option<&[u8]>, reverse, limit| {
            keys(storage.scan(b"b/", after, reverse, limit).expect("scan"))
        };
        assert_eq!(scan(Some(b"a/1"), false, 10), ["b/1", "b/2", "b/3"]);
        assert_eq!(scan(Some(b"b/1"), false, 1), ["b/2"]);
        assert_eq!(scan(Some(b"b/3"), true, 10), ["b/2", "b/1"]);
        assert_eq!(scan(None, true, 2), ["b/3", "b/2"]);
    }

    #[test]
    fn a_forward_scan_ends_where_its_prefix_does() {
        assert_eq!(prefix_end(b"work/mail/"), Some(b"work/mail0".to_vec()));
        assert_eq!(prefix_end(b"a\xff\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff"), None);
        assert_eq!(prefix_end(b""), None);
        // An empty prefix before keys removed by the thousand: its scans, from its start or
        // from a cursor, find nothing and read no key of the next prefix (the range ends at
        // `work/mail0`: nothing past it is read, removed or not).
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        let keys: Vec<String> = (0..2000).map(|n| format!("work/webhook/{n:05}")).collect();
        storage
            .transact(&mut |txn| keys.iter().try_for_each(|k| txn.put(k.as_bytes(), vec![1])))
            .expect("committed");
        storage
            .transact(&mut |txn| {
                keys[..1999]
                    .iter()
                    .try_for_each(|k| txn.delete(k.as_bytes()))
            })
            .expect("committed");
        for _ in 0..2 {
            assert!(
                storage
                    .scan(b"work/mail/", None, false, 10)
                    .expect("scan")
                    .is_empty()
            );
        }
        let after = storage.scan(b"work/mail/", Some(b"work/mail/5"), false, 10);
        assert!(after.expect("scan").is_empty());
        let last = storage
            .scan(b"work/webhook/", None, false, 10)
            .expect("scan");
        assert_eq!(
            last.len(),
            1,
            "the next prefix's live key is still found by its own scans"
        );
    }

    #[test]
    fn a_scan_from_a_prefixs_start_starts_at_its_head_and_every_insert_before_it_moves_it_back() {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = FjallStorage::open(dir.path()).expect("open");
        let put = |keys: &[&str]| {
            storage
                .transact(&mut |txn| {
                    for key in keys {
                        txn.put(key.as_bytes(), b"v".to_vec())?;
                    }
                    Ok(())
                })
                .expect("committed")
        };
        let remove = |keys: &[String]| {
            storage
                .transact(&mut |txn| keys.iter().try_for_each(|k| txn.delete(k.as_bytes())))
                .expect("committed")
        };
        let first = |prefix: &str| {
            storage
                .scan(prefix.as_bytes(), None, false, 1)
                .expect("scan")
                .first()
                .map(|(k, _)| String::from_utf8(k.clone()).expect("utf-8"))
        };
        let head = |prefix: &str| {
            storage
                .heads
                .lock()
                .known
                .get(prefix.as_bytes())
                .map(|h| String::from_utf8_lossy(h).into_owned())
        };
        // A queue drained from its start: tombstones ahead of its one live entry.
        let drained: Vec<String> = (0..1000).map(|i| format!("q/{i:05}")).collect();
        put(&drained.iter().map(String::as_str).collect::<Vec<_>>());
        put(&["q/99999"]);
        remove(&drained);
        assert_eq!(head("q/"), None, "no scan yet");
        assert_eq!(first("q/").as_deref(), Some("q/99999"));
        assert_eq!(head("q/").as_deref(), Some("q/99999"), "its first live key");
        // An entry inserted before the head is found by the next scan, and becomes the head.
        put(&["q/00500"]);
        assert_eq!(head("q/").as_deref(), Some("q/00500"));
        assert_eq!(first("q/").as_deref(), Some("q/00500"));
        // Removing the head leaves it where it is (no live key is before it): the next scan
        // finds the next live entry and moves the head on to it.
        remove(&["q/00500".to_owned()]);
        assert_eq!(first("q/").as_deref(), Some("q/99999"));
        assert_eq!(head("q/").as_deref(), Some("q/99999"));
        // A prefix with nothing live: its head is past its keys, until an insert under it.
        remove(&["q/99999".to_owned()]);
        assert_eq!(first("q/"), None);
        assert_eq!(head("q/").as_deref(), Some("q/\u{FFFD}"), "q/ and 0xFF");
        put(&["q/00001"]);
        assert_eq!(first("q/").as_deref(), Some("q/00001"));
        // Another prefix's inserts, before or after, leave this head alone.
        put(&["p/1", "r/1"]);
        assert_eq!(head("q/").as_deref(), Some("q/00001"));
    }

    #[test]
    fn an_insert_during_a_scan_from_the_start_moves_the_head_that_scan_leaves_back_to_it() {
        let mut heads = Heads::default();
        let (start, scan) = heads.begin(b"q/");
        assert_eq!(start, None);
        // The scan's view does not show the insert: it found q/5 first.
        heads.inserting(b"q/2");
        heads.inserting(b"p/1");
        heads.end(scan, b"q/", Some(b"q/5"));
        assert_eq!(
            heads.known.get(b"q/".as_slice()).map(Vec::as_slice),
            Some(b"q/2".as_slice())
        );
        // A scan that tells nothing leaves no head and no trace.
        let (_, other) = heads.begin(b"r/");
        heads.end_without_head(other);
        assert!(heads.scanning.is_empty());
        assert!(!heads.known.contains_key(b"r/".as_slice()));
    }

    #[test]
    fn the_heads_kept_are_bounded() {
        let mut heads = Heads::default();
        for i in 0..=HEADS_KEPT {
            let prefix = format!("p{i}/");
            let (_, scan) = heads.begin(prefix.as_bytes());
            heads.end(scan, prefix.as_bytes(), None);
        }
        assert_eq!(
            heads.known.len(),
            1,
            "all forgotten when full, then the newest kept"
        );
        assert_eq!(heads.lengths.values().sum::<usize>(), 1);
    }
}
