//! The inbound request rate limit, per store and shared by all of its installations.
//!
//! Two limits hold together:
//! - a token bucket of `burst` requests (default 120) that refills at `requests_per_second`
//!   (default 60) per second, so a store may burst to 120 in a second and sustain 60 per second;
//! - a fixed window of `requests_per_minute` (default 600) per UTC calendar minute.
//!
//! A request is admitted when both allow it, and then counts against both. Arithmetic is in
//! integers (tokens scaled by the window length in milliseconds), so the schedule is exact under
//! the injected clock.
//!
//! One host keeps the state in memory (after a restart every store starts with a full
//! allowance); hosts sharing a database keep it there, one record per store updated atomically,
//! so the limits hold for all of them together. A host's requests of one store that arrive while
//! that record is being updated share the next update, each judged in turn as if alone.
//!
//! [`AuthFailureLimiter`] limits, per client address, the requests that fail authentication,
//! with the same token bucket.

use crate::model::store::RateLimits;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Condvar, Mutex};

use jiff::Timestamp;

use crate::model::error::{Error, Result};
use crate::model::ids::StoreId;
use crate::storage::Db;

/// What the limiter says about an admitted request: the values of the `X-RateLimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateStatus {
    /// Requests the store could still make right now (the smaller allowance of the two limits).
    pub remaining: u64,
    /// Seconds until the current minute window ends and its count starts again.
    pub reset_secs: u64,
}

const MINUTE_MS: i64 = 60_000;
const SECOND_MS: i64 = 1_000;

/// A token bucket in integer arithmetic: one token is 1000 units, and the bucket refills
/// `per_second` units per millisecond, so the schedule is exact under the injected clock.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct TokenBucket {
    /// Level in tokens × 1000.
    level: i64,
    /// When the level was last brought up to date, in ms.
    at_ms: i64,
}

impl TokenBucket {
    fn full(capacity: u32, now_ms: i64) -> Self {
        Self {
            level: i64::from(capacity) * SECOND_MS,
            at_ms: now_ms,
        }
    }

    /// Refills for the time passed (never backwards, never over capacity).
    fn refill(&mut self, capacity: u32, per_second: u32, now_ms: i64) {
        let elapsed = (now_ms - self.at_ms).max(0);
        self.level =
            (self.level + elapsed * i64::from(per_second)).min(i64::from(capacity) * SECOND_MS);
        self.at_ms = self.at_ms.max(now_ms);
    }

    fn has_token(&self) -> bool {
        self.level >= SECOND_MS
    }

    /// Takes one token (the level never goes below zero).
    fn take(&mut self) {
        self.level = (self.level - SECOND_MS).max(0);
    }

    /// Whole tokens left.
    fn tokens(&self) -> i64 {
        self.level / SECOND_MS
    }

    fn is_full(&self, capacity: u32) -> bool {
        self.level >= i64::from(capacity) * SECOND_MS
    }

    /// Seconds until one token has refilled (at least 1).
    fn retry_after_secs(&self, per_second: u32) -> u64 {
        let secs = ceil_div(SECOND_MS - self.level, i64::from(per_second) * SECOND_MS).max(1);
        u64::try_from(secs).unwrap_or(1)
    }
}

/// A store's state under both limits: kept in memory by one host, or as the record
/// `ratelimit/{store}` where hosts share the storage.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct StoreState {
    bucket: TokenBucket,
    window_start_ms: i64,
    window_used: u32,
}

impl StoreState {
    fn new(limits: RateLimits, now_ms: i64) -> Self {
        Self {
            bucket: TokenBucket::full(limits.burst, now_ms),
            window_start_ms: now_ms.div_euclid(MINUTE_MS) * MINUTE_MS,
            window_used: 0,
        }
    }

    /// Admits one request at `now_ms` (counting it against both limits), or refuses it with
    /// the `Retry-After` seconds (a refused request does not count).
    fn admit(
        &mut self,
        limits: RateLimits,
        now_ms: i64,
    ) -> Result<RateStatus, (Error, RateStatus)> {
        let window_start = now_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        self.bucket
            .refill(limits.burst, limits.requests_per_second, now_ms);
        if window_start > self.window_start_ms {
            self.window_start_ms = window_start;
            self.window_used = 0;
        }
        let reset_secs = ceil_div(self.window_start_ms + MINUTE_MS - now_ms, SECOND_MS).max(1);
        let reset_secs = u64::try_from(reset_secs).unwrap_or(1);
        let bucket_ok = self.bucket.has_token();
        let window_ok = self.window_used < limits.requests_per_minute;
        if bucket_ok && window_ok {
            self.bucket.take();
            self.window_used += 1;
            let remaining = self.bucket.tokens().min(i64::from(
                limits.requests_per_minute.saturating_sub(self.window_used),
            ));
            return Ok(RateStatus {
                remaining: u64::try_from(remaining).unwrap_or(0),
                reset_secs,
            });
        }
        let retry_after = if window_ok {
            // Wait for one token to refill.
            self.bucket.retry_after_secs(limits.requests_per_second)
        } else {
            reset_secs
        };
        let status = RateStatus {
            remaining: 0,
            reset_secs,
        };
        Err((Error::RateLimited { retry_after }, status))
    }
}

/// Per-store limiter state: in this host's memory, or, where hosts share the storage, in it,
/// so that a store's limits hold across all of them together.
#[derive(Debug, Default)]
pub struct RateLimiter {
    stores: Mutex<HashMap<StoreId, StoreState>>,
    /// The storage the hosts share, when they do.
    shared: Option<SharedLimits>,
}

/// What the limiter answers one request.
type Admission = Result<RateStatus, (Error, RateStatus)>;

impl RateStatus {
    /// The headers' values of a request that was not counted at all (refused before the
    /// limiter, or an error of the storage).
    pub const UNCOUNTED: RateStatus = RateStatus {
        remaining: 0,
        reset_secs: 0,
    };
}

/// Below this many stores the shared limiter does not forget idle ones.
const TURNS_PRUNE_MIN: usize = 4096;

/// The store limits where hosts share the storage: each store's state is its record
/// `ratelimit/{store}`, changed by [`Db::update`] (on PostgreSQL a row lock held for the update's
/// round trips). A store's requests that arrive on this host while its record is being updated
/// wait, and the next update judges all of them, one after the other in the order they came:
/// one update, and one hold of the row, for as many requests as came meanwhile, instead of one
/// each (group commit, for the limiter). Each request is judged exactly as alone, at its own
/// time, by the same [`StoreState::admit`].
#[derive(Debug)]
struct SharedLimits {
    db: Db,
    /// Each store's queue of requests on this host; idle ones are forgotten past
    /// [`TURNS_PRUNE_MIN`] stores (their state is in the storage).
    turns: Mutex<TurnsByStore>,
}

#[derive(Debug, Default)]
struct TurnsByStore {
    stores: HashMap<StoreId, Arc<Turns>>,
    prune_at: usize,
}

/// One store's requests on this host waiting for the update of its record.
#[derive(Debug, Default)]
struct Turns {
    queue: Mutex<Queue>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct Queue {
    /// Requests no update has taken yet, in the order they came.
    waiting: Vec<Ask>,
    /// An update of the record is running (its requests are out of `waiting`).
    updating: bool,
    /// The answers of requests whose update ended, until each asker takes its own.
    answers: HashMap<u64, Admission>,
    /// The ticket of the next request.
    next: u64,
}

/// One request waiting to be judged.
#[derive(Debug, Clone, Copy)]
struct Ask {
    ticket: u64,
    limits: RateLimits,
    now_ms: i64,
}

impl Turns {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A turn at updating a store's record: hands its answers to the waiting requests when it ends,
/// and an error to each of them if the update panicked, so that none waits for ever.
struct Lead<'a> {
    turns: &'a Turns,
    asks: Vec<Ask>,
    /// The leading request's ticket: its answer is returned, not handed over.
    own: u64,
    answers: Option<Vec<(u64, Admission)>>,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        let answers = self.answers.take().unwrap_or_else(|| {
            self.asks
                .iter()
                .filter(|ask| ask.ticket != self.own)
                .map(|ask| {
                    let e = anyhow::anyhow!("the update of the store's rate limit panicked");
                    (ask.ticket, Err((Error::Internal(e), RateStatus::UNCOUNTED)))
                })
                .collect()
        });
        let mut queue = self.turns.lock();
        queue.answers.extend(answers);
        queue.updating = false;
        self.turns.done.notify_all();
    }
}

impl SharedLimits {
    fn new(db: Db) -> Self {
        Self {
            db,
            turns: Mutex::default(),
        }
    }

    /// The queue of `store`'s requests on this host.
    fn turns(&self, store: &StoreId) -> Arc<Turns> {
        let mut all = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(turns) = all.stores.get(store) {
            return turns.clone();
        }
        if all.stores.len() >= all.prune_at.max(TURNS_PRUNE_MIN) {
            // Forget the stores no request is waiting in (nobody else holds their queue); prune
            // again when the map has doubled, so pruning costs O(1) per new store on average.
            all.stores.retain(|_, turns| Arc::strong_count(turns) > 1);
            all.prune_at = all.stores.len() * 2;
        }
        let turns = Arc::new(Turns::default());
        all.stores.insert(store.clone(), turns.clone());
        turns
    }

    /// Admits one request for `store` at `now_ms`: waits for the update of the store's record
    /// running now, if one is, and is judged by the next, with every request that came
    /// meanwhile; or runs that update itself.
    fn admit(&self, store: &StoreId, limits: RateLimits, now_ms: i64) -> Admission {
        let turns = self.turns(store);
        let mut queue = turns.lock();
        let ticket = queue.next;
        queue.next += 1;
        queue.waiting.push(Ask {
            ticket,
            limits,
            now_ms,
        });
        loop {
            if let Some(answer) = queue.answers.remove(&ticket) {
                return answer;
            }
            if queue.updating {
                queue = turns.done.wait(queue).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Lead: one update judges every request waiting now, this one among them.
            queue.updating = true;
            let mut lead = Lead {
                turns: &turns,
                asks: std::mem::take(&mut queue.waiting),
                own: ticket,
                answers: None,
            };
            drop(queue);
            let mut answers = self.judge(store, &lead.asks);
            let own = answers.iter().position(|(t, _)| *t == ticket);
            let mine = own.map(|i| answers.swap_remove(i).1);
            lead.answers = Some(answers);
            drop(lead);
            // Its request was waiting (it has no answer, and no update was running), so the
            // update judged it.
            return mine.unwrap_or_else(|| {
                let e = anyhow::anyhow!("a request was left out of its store's rate limit update");
                Err((Error::Internal(e), RateStatus::UNCOUNTED))
            });
        }
    }

    /// One update of `store`'s record that judges `asks` in their order.
    fn judge(&self, store: &StoreId, asks: &[Ask]) -> Vec<(u64, Admission)> {
        let key = format!("ratelimit/{store}");
        let updated = self.db.update(&key, |state: Option<StoreState>| {
            let mut state = state.unwrap_or_else(|| match asks.first() {
                Some(first) => StoreState::new(first.limits, first.now_ms),
                None => StoreState::new(RateLimits::default(), 0),
            });
            let answers: Vec<_> = asks
                .iter()
                .map(|ask| (ask.ticket, state.admit(ask.limits, ask.now_ms)))
                .collect();
            (state, answers)
        });
        updated.unwrap_or_else(|e| {
            let message = e.to_string();
            asks.iter()
                .map(|ask| {
                    let e = anyhow::anyhow!("updating the store's rate limit: {message}");
                    (ask.ticket, Err((Error::Internal(e), RateStatus::UNCOUNTED)))
                })
                .collect()
        })
    }
}

impl RateLimiter {
    /// A limiter that keeps its state in memory, or in `shared` storage when hosts share it:
    /// admissions are then atomic updates of the store's record (`ratelimit/{store}`,
    /// [`Db::update`]), each judging the store's requests that came on this host meanwhile
    /// (`SharedLimits`), so the requests of one store wait for each other there, never for
    /// another store's.
    pub fn new(shared: Option<Db>) -> Self {
        Self {
            stores: Mutex::default(),
            shared: shared.map(SharedLimits::new),
        }
    }

    /// Admits one request for `store` at `now`, or refuses it with `rate_limited` and the
    /// `Retry-After` seconds. A refused request does not count.
    pub fn admit(
        &self,
        store: &StoreId,
        limits: RateLimits,
        now: Timestamp,
    ) -> Result<RateStatus, (Error, RateStatus)> {
        let now_ms = now.as_millisecond();
        if let Some(shared) = &self.shared {
            return shared.admit(store, limits, now_ms);
        }
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        stores
            .entry(store.clone())
            .or_insert_with(|| StoreState::new(limits, now_ms))
            .admit(limits, now_ms)
    }
}

/// Failed authentications an address may make at once.
pub const AUTH_FAILURE_BURST: u32 = 20;
/// Failed authentications an address may make per second, sustained.
pub const AUTH_FAILURE_PER_SECOND: u32 = 10;
/// Below this many tracked addresses the limiter does not prune.
const AUTH_PRUNE_MIN: usize = 4096;

/// How many failed authentications an address may make: at once (`burst`), and per second
/// sustained. The operator's setting; [`AuthFailureLimits::default`] is 20 and 10.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthFailureLimits {
    /// Failures an address may make at once.
    pub burst: u32,
    /// Failures an address may make per second, sustained (at least 1).
    pub per_second: u32,
}

impl Default for AuthFailureLimits {
    fn default() -> Self {
        Self {
            burst: AUTH_FAILURE_BURST,
            per_second: AUTH_FAILURE_PER_SECOND,
        }
    }
}

#[derive(Debug, Default)]
struct AuthState {
    buckets: HashMap<IpAddr, TokenBucket>,
    prune_at: usize,
}

/// Failed authentication per client address: requests to `/v1` or `/admin/v1` without a token,
/// with a malformed one, or with one that is unknown or revoked. Each address has a bucket of
/// the operator's burst of failures ([`AUTH_FAILURE_BURST`] by default) refilling at their rate
/// ([`AUTH_FAILURE_PER_SECOND`] by default); while it is empty,
/// every request of that address that needs authentication is refused with 429 `rate_limited`
/// before its token is looked at (so guessing is slowed down, whatever the guess). Requests that
/// authenticate do not count. IPv6 addresses count per /64 (what one client usually holds).
///
/// In memory, like the store limiter; addresses whose bucket has refilled are forgotten.
#[derive(Debug, Default)]
pub struct AuthFailureLimiter {
    state: Mutex<AuthState>,
    limits: AuthFailureLimits,
}

/// The address a client is counted under: IPv4 as is (also when written as IPv6), IPv6 by /64.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut segments = v6.segments();
                segments[4..].fill(0);
                IpAddr::V6(Ipv6Addr::from(segments))
            }
        },
        v4 => v4,
    }
}

impl AuthFailureLimiter {
    /// A limiter with the operator's `limits` (a sustained rate below 1 counts as 1).
    pub fn new(limits: AuthFailureLimits) -> Self {
        Self {
            state: Mutex::default(),
            limits: AuthFailureLimits {
                burst: limits.burst,
                per_second: limits.per_second.max(1),
            },
        }
    }

    /// Refuses with `Retry-After` while `ip` has no failures left.
    pub fn check(&self, ip: IpAddr, now: Timestamp) -> Result<()> {
        let now_ms = now.as_millisecond();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(bucket) = state.buckets.get_mut(&client_key(ip)) else {
            return Ok(());
        };
        bucket.refill(self.limits.burst, self.limits.per_second, now_ms);
        if bucket.has_token() {
            Ok(())
        } else {
            Err(Error::AuthRateLimited {
                retry_after: bucket.retry_after_secs(self.limits.per_second),
            })
        }
    }

    /// Counts one failed authentication of `ip`.
    pub fn failed(&self, ip: IpAddr, now: Timestamp) {
        let now_ms = now.as_millisecond();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = state
            .buckets
            .entry(client_key(ip))
            .or_insert_with(|| TokenBucket::full(self.limits.burst, now_ms));
        bucket.refill(self.limits.burst, self.limits.per_second, now_ms);
        bucket.take();
        if state.buckets.len() > state.prune_at.max(AUTH_PRUNE_MIN) {
            // Forget addresses that are back to a full allowance; prune again when the map has
            // doubled, so pruning costs O(1) per failure on average.
            state.buckets.retain(|_, bucket| {
                bucket.refill(self.limits.burst, self.limits.per_second, now_ms);
                !bucket.is_full(self.limits.burst)
            });
            state.prune_at = state.buckets.len() * 2;
        }
    }

    /// How many addresses are tracked.
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .buckets
            .len()
    }
}

/// `ceil(a / b)` for a positive divisor.
fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1).div_euclid(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).expect("ts")
    }

    /// The limiter in memory, and kept in storage (sled, and PostgreSQL when the tests have one)
    /// as hosts sharing a database keep it: both follow the same schedule.
    fn each_limiter(check: impl Fn(&str, RateLimiter)) {
        check("memory", RateLimiter::default());
        let dir = tempfile::tempdir().expect("temp dir");
        let sled = Db::open_sled(dir.path(), false).expect("sled");
        check("sled", RateLimiter::new(Some(sled)));
        if let Some(pg) = crate::storage::contract::fresh_postgres() {
            check("postgres", RateLimiter::new(Some(Db::new(pg, true))));
        }
    }

    #[test]
    fn bucket_refills_at_the_sustained_rate_in_exact_steps() {
        each_limiter(|kind, limiter| {
            let store = StoreId::generate(at(0));
            let limits = RateLimits::default();
            for _ in 0..120 {
                limiter.admit(&store, limits, at(0)).expect("burst");
            }
            let (err, _) = limiter.admit(&store, limits, at(0)).expect_err("empty");
            assert_eq!(err.retry_after(), Some(1), "{kind}");
            // 60 per second = one token every 16.67 ms: after 16 ms still empty, after 17 ms one.
            assert!(limiter.admit(&store, limits, at(16)).is_err(), "{kind}");
            assert!(limiter.admit(&store, limits, at(17)).is_ok(), "{kind}");
            // Another store has its own allowance.
            let other = StoreId::generate(at(1));
            assert!(limiter.admit(&other, limits, at(17)).is_ok(), "{kind}");
        });
    }

    #[test]
    fn the_minute_window_caps_a_store_that_keeps_under_the_bucket() {
        each_limiter(|kind, limiter| {
            let store = StoreId::generate(at(0));
            let limits = RateLimits::default();
            // 10 requests every 200 ms stays within the bucket (50/s) but reaches 600 in the
            // minute's first 12 s: the 601st is refused until the minute ends.
            let mut admitted = 0;
            let mut ms = 0;
            let refused = loop {
                match limiter.admit(&store, limits, at(ms)) {
                    Ok(status) => {
                        admitted += 1;
                        assert_eq!(status.remaining, (600 - admitted).min(status.remaining));
                    }
                    Err((err, status)) => break (err, status, ms),
                }
                if admitted % 10 == 0 {
                    ms += 200;
                }
            };
            assert_eq!(admitted, 600, "{kind}");
            let (err, status, ms) = refused;
            assert_eq!(status.remaining, 0, "{kind}");
            let reset = u64::try_from((60_000 - (1_800_000_000_000 + ms) % 60_000 + 999) / 1_000)
                .expect("positive");
            assert_eq!(err.retry_after(), Some(reset), "{kind}");
        });
    }

    #[test]
    fn a_shared_limiter_counts_the_requests_of_every_host_together() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut dbs = vec![Db::open_sled(dir.path(), false).expect("sled")];
        if let Some(pg) = crate::storage::contract::fresh_postgres() {
            dbs.push(Db::new(pg, true));
        }
        for db in dbs {
            // Two hosts' limiters over one storage, eight threads each.
            let hosts = [
                std::sync::Arc::new(RateLimiter::new(Some(db.clone()))),
                std::sync::Arc::new(RateLimiter::new(Some(db))),
            ];
            let store = StoreId::generate(at(0));
            let threads: Vec<_> = (0..16)
                .map(|i| {
                    let limiter = hosts[i % 2].clone();
                    let store = store.clone();
                    std::thread::spawn(move || {
                        (0..20)
                            .filter(|_| limiter.admit(&store, RateLimits::default(), at(0)).is_ok())
                            .count()
                    })
                })
                .collect();
            let admitted: usize = threads.into_iter().map(|t| t.join().expect("thread")).sum();
            assert_eq!(
                admitted, 120,
                "320 requests at one instant: the burst of 120, once"
            );
        }
    }

    /// A storage whose first [`Storage::update`] waits until it is let go, then goes on or
    /// panics: the requests that come meanwhile queue behind it.
    struct Gated {
        inner: Arc<dyn crate::storage::Storage>,
        /// `None` while held; then whether the held update panics.
        gate: Mutex<Option<bool>>,
        opened: Condvar,
        /// Updates made so far.
        updates: std::sync::atomic::AtomicU64,
    }

    impl Gated {
        fn new() -> (Arc<Self>, tempfile::TempDir) {
            let dir = tempfile::tempdir().expect("temp dir");
            let sled = crate::storage::SledStorage::open(dir.path()).expect("sled");
            let gated = Arc::new(Self {
                inner: Arc::new(sled),
                gate: Mutex::new(None),
                opened: Condvar::new(),
                updates: std::sync::atomic::AtomicU64::new(0),
            });
            (gated, dir)
        }

        fn open(&self, panic: bool) {
            *self.gate.lock().expect("gate") = Some(panic);
            self.opened.notify_all();
        }
    }

    impl crate::storage::Storage for Gated {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.inner.get(key)
        }
        fn scan(
            &self,
            prefix: &[u8],
            after: Option<&[u8]>,
            reverse: bool,
            limit: usize,
        ) -> Result<Vec<crate::storage::Entry>> {
            self.inner.scan(prefix, after, reverse, limit)
        }
        fn transact(
            &self,
            f: &mut dyn FnMut(&mut dyn crate::storage::Txn) -> Result<()>,
        ) -> Result<()> {
            self.inner.transact(f)
        }
        fn flush(&self) -> Result<()> {
            self.inner.flush()
        }
        fn update(&self, key: &[u8], f: &mut crate::storage::Update<'_>) -> Result<()> {
            if self
                .updates
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                == 0
            {
                let mut gate = self.gate.lock().expect("gate");
                while gate.is_none() {
                    gate = self.opened.wait(gate).expect("gate");
                }
                assert_eq!(*gate, Some(false), "the held update panics, as told");
            }
            self.inner.update(key, f)
        }
    }

    /// Holds the first request's update of `store` in `gated`, sends 15 more from threads of
    /// their own, waits until all 15 wait in the limiter, and lets the update go (or panic).
    /// Returns each thread's answer (the first one's `None` if it panicked) and the updates made.
    fn sixteen_behind_one(
        panic: bool,
        limits: RateLimits,
    ) -> (Vec<Option<Result<RateStatus, String>>>, u64) {
        let (gated, _dir) = Gated::new();
        let limiter = Arc::new(RateLimiter::new(Some(Db::new(gated.clone(), false))));
        let store = StoreId::generate(at(0));
        let send = |limiter: &Arc<RateLimiter>| {
            let (limiter, store) = (limiter.clone(), store.clone());
            std::thread::spawn(move || {
                limiter
                    .admit(&store, limits, at(0))
                    .map_err(|(e, _)| e.to_string())
            })
        };
        let shared = limiter.shared.as_ref().expect("shared");
        let first = send(&limiter);
        let turns = shared.turns(&store);
        let waiting = |n: usize| {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let queue = turns.lock();
                if queue.updating && queue.waiting.len() >= n {
                    return;
                }
                drop(queue);
                assert!(std::time::Instant::now() < deadline, "{n} requests waiting");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        };
        waiting(0);
        let others: Vec<_> = (0..15).map(|_| send(&limiter)).collect();
        waiting(15);
        gated.open(panic);
        let mut answers = vec![first.join().ok()];
        answers.extend(others.into_iter().map(|t| Some(t.join().expect("thread"))));
        let updates = gated.updates.load(std::sync::atomic::Ordering::SeqCst);
        (answers, updates)
    }

    #[test]
    fn a_stores_requests_that_come_during_an_update_of_its_record_share_the_next_one() {
        let limits = RateLimits {
            burst: 10,
            ..RateLimits::default()
        };
        let (answers, updates) = sixteen_behind_one(false, limits);
        assert_eq!(updates, 2, "the held update, then one for the 15 behind it");
        // Each judged in turn at one instant: the burst of 10 once, each admitted request with
        // one fewer left than the one before it, and the other 6 refused.
        let mut remaining: Vec<u64> = answers
            .iter()
            .filter_map(|a| a.clone().expect("answered").ok())
            .map(|status| status.remaining)
            .collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (0..10).collect::<Vec<u64>>());
        let refused = answers
            .iter()
            .filter_map(|a| a.clone().expect("answered").err())
            .collect::<Vec<_>>();
        assert_eq!(refused.len(), 6, "{refused:?}");
        assert!(
            refused.iter().all(|e| e.contains("rate limit")),
            "{refused:?}"
        );
    }

    #[test]
    fn an_update_that_panics_leaves_no_request_of_its_store_waiting() {
        let (answers, updates) = sixteen_behind_one(true, RateLimits::default());
        assert!(answers[0].is_none(), "the request whose update panicked");
        assert_eq!(updates, 2, "the next update judged the 15 that waited");
        assert!(
            answers[1..]
                .iter()
                .all(|a| a.as_ref().is_some_and(Result::is_ok)),
            "{answers:?}"
        );
    }

    #[test]
    fn failed_authentication_is_limited_per_address_with_an_exact_refill() {
        let limiter = AuthFailureLimiter::default();
        let ip: IpAddr = "203.0.113.7".parse().expect("ip");
        let other: IpAddr = "203.0.113.8".parse().expect("ip");
        for _ in 0..AUTH_FAILURE_BURST {
            limiter.check(ip, at(0)).expect("allowance left");
            limiter.failed(ip, at(0));
        }
        let err = limiter.check(ip, at(0)).expect_err("exhausted");
        assert_eq!(err.code(), "rate_limited");
        assert_eq!(err.retry_after(), Some(1));
        // Written as IPv6, the same address; another address is not affected.
        assert!(
            limiter
                .check("::ffff:203.0.113.7".parse().expect("ip"), at(0))
                .is_err()
        );
        assert!(limiter.check(other, at(0)).is_ok());
        // 10 per second: one failure back after 100 ms, not before.
        assert!(limiter.check(ip, at(99)).is_err());
        assert!(limiter.check(ip, at(100)).is_ok());
    }

    #[test]
    fn the_operators_limits_replace_the_default_allowance_and_refill() {
        let limiter = AuthFailureLimiter::new(AuthFailureLimits {
            burst: 2,
            per_second: 0,
        });
        let ip: IpAddr = "203.0.113.7".parse().expect("ip");
        for _ in 0..2 {
            limiter.check(ip, at(0)).expect("allowance left");
            limiter.failed(ip, at(0));
        }
        assert!(limiter.check(ip, at(0)).is_err());
        // A rate of 0 counts as 1 per second: back after 1 s, not before.
        assert!(limiter.check(ip, at(999)).is_err());
        assert!(limiter.check(ip, at(1000)).is_ok());
    }

    #[test]
    fn ipv6_clients_count_per_64_and_refilled_addresses_are_forgotten() {
        let limiter = AuthFailureLimiter::default();
        for _ in 0..AUTH_FAILURE_BURST {
            limiter.failed("2001:db8:1:2::1".parse().expect("ip"), at(0));
        }
        assert!(
            limiter
                .check("2001:db8:1:2:ffff::9".parse().expect("ip"), at(0))
                .is_err()
        );
        assert!(
            limiter
                .check("2001:db8:1:3::1".parse().expect("ip"), at(0))
                .is_ok()
        );
        let min = u32::try_from(AUTH_PRUNE_MIN).expect("small");
        let v4 = |n: u32| IpAddr::from(std::net::Ipv4Addr::from(n));
        for i in 0..min {
            limiter.failed(v4(0x0a00_0000 + i), at(0));
        }
        // Three seconds later those buckets are full again: growing past the pruning mark
        // forgets them, and only the addresses still short of failures stay.
        for i in 0..2 * min {
            limiter.failed(v4(0x0b00_0000 + i), at(3_000));
        }
        assert_eq!(limiter.tracked(), 2 * AUTH_PRUNE_MIN);
    }
}
