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
//! allowance); hosts sharing a database keep it there, one record per store updated atomically
//! per request, so the limits hold for all of them together.
//!
//! [`AuthFailureLimiter`] limits, per client address, the requests that fail authentication,
//! with the same token bucket.

use crate::model::store::RateLimits;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;

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
    shared: Option<Db>,
}

impl RateLimiter {
    /// A limiter that keeps its state in memory, or in `shared` storage when hosts share it:
    /// each admission is then one atomic update of the store's record (`ratelimit/{store}`,
    /// [`Db::update`]), so the requests of one store wait for each other there, never for
    /// another store's.
    pub fn new(shared: Option<Db>) -> Self {
        Self {
            stores: Mutex::default(),
            shared,
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
        if let Some(db) = &self.shared {
            let key = format!("ratelimit/{store}");
            let updated = db.update(&key, |state: Option<StoreState>| {
                let mut state = state.unwrap_or_else(|| StoreState::new(limits, now_ms));
                let answer = state.admit(limits, now_ms);
                (state, answer)
            });
            return updated.unwrap_or_else(|e| {
                let status = RateStatus {
                    remaining: 0,
                    reset_secs: 0,
                };
                Err((e, status))
            });
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
