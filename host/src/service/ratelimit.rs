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
//! The state is in memory: after a restart every store starts with a full allowance.

use std::collections::HashMap;
use std::sync::Mutex;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{Error, Result};
use crate::ids::StoreId;

/// The rate limits of one store, set by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Sustained requests per second (refill rate of the burst bucket).
    #[serde(default = "default_per_second")]
    pub requests_per_second: u32,
    /// Requests that may arrive at once (size of the burst bucket).
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// Requests per UTC calendar minute.
    #[serde(default = "default_per_minute")]
    pub requests_per_minute: u32,
}

fn default_per_second() -> u32 {
    60
}
fn default_burst() -> u32 {
    120
}
fn default_per_minute() -> u32 {
    600
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            requests_per_second: default_per_second(),
            burst: default_burst(),
            requests_per_minute: default_per_minute(),
        }
    }
}

impl RateLimits {
    /// Checks that the limits make sense.
    pub fn validate(&self, field: &str) -> Result<()> {
        let positive = [
            ("requests_per_second", self.requests_per_second),
            ("burst", self.burst),
            ("requests_per_minute", self.requests_per_minute),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(Error::invalid(
                    format!("{field}.{name}"),
                    "must be at least 1",
                ));
            }
        }
        if self.burst < self.requests_per_second {
            return Err(Error::invalid(
                format!("{field}.burst"),
                "must be at least requests_per_second",
            ));
        }
        Ok(())
    }
}

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

#[derive(Debug)]
struct StoreState {
    /// Bucket level in tokens × 1000 (one token is 1000 units; refill is `per_second` units per ms).
    bucket: i64,
    bucket_at_ms: i64,
    window_start_ms: i64,
    window_used: u32,
}

/// Per-store limiter state.
#[derive(Debug, Default)]
pub struct RateLimiter {
    stores: Mutex<HashMap<StoreId, StoreState>>,
}

impl RateLimiter {
    /// Admits one request for `store` at `now`, or refuses it with `rate_limited` and the
    /// `Retry-After` seconds. A refused request does not count.
    pub fn admit(
        &self,
        store: &StoreId,
        limits: RateLimits,
        now: Timestamp,
    ) -> Result<RateStatus, (Error, RateStatus)> {
        let now_ms = now.as_millisecond();
        let window_start = now_ms.div_euclid(MINUTE_MS) * MINUTE_MS;
        let capacity = i64::from(limits.burst) * SECOND_MS;
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        let state = stores.entry(store.clone()).or_insert(StoreState {
            bucket: capacity,
            bucket_at_ms: now_ms,
            window_start_ms: window_start,
            window_used: 0,
        });
        // Refill the bucket for the time passed (never backwards, never over capacity).
        let elapsed = (now_ms - state.bucket_at_ms).max(0);
        state.bucket =
            (state.bucket + elapsed * i64::from(limits.requests_per_second)).min(capacity);
        state.bucket_at_ms = state.bucket_at_ms.max(now_ms);
        if window_start > state.window_start_ms {
            state.window_start_ms = window_start;
            state.window_used = 0;
        }
        let reset_secs = ceil_div(state.window_start_ms + MINUTE_MS - now_ms, SECOND_MS).max(1);
        let bucket_ok = state.bucket >= SECOND_MS;
        let window_ok = state.window_used < limits.requests_per_minute;
        if bucket_ok && window_ok {
            state.bucket -= SECOND_MS;
            state.window_used += 1;
            let remaining = (state.bucket / SECOND_MS)
                .min(i64::from(limits.requests_per_minute - state.window_used));
            return Ok(RateStatus {
                remaining: u64::try_from(remaining).unwrap_or(0),
                reset_secs: u64::try_from(reset_secs).unwrap_or(1),
            });
        }
        let retry_after = if window_ok {
            // Wait for one token to refill.
            ceil_div(
                SECOND_MS - state.bucket,
                i64::from(limits.requests_per_second) * SECOND_MS,
            )
            .max(1)
        } else {
            reset_secs
        };
        let status = RateStatus {
            remaining: 0,
            reset_secs: u64::try_from(reset_secs).unwrap_or(1),
        };
        Err((
            Error::RateLimited {
                retry_after: u64::try_from(retry_after).unwrap_or(1),
            },
            status,
        ))
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

    #[test]
    fn bucket_refills_at_the_sustained_rate_in_exact_steps() {
        let limiter = RateLimiter::default();
        let store = StoreId::generate(at(0));
        let limits = RateLimits::default();
        for _ in 0..120 {
            limiter.admit(&store, limits, at(0)).expect("burst");
        }
        let (err, _) = limiter.admit(&store, limits, at(0)).expect_err("empty");
        assert_eq!(err.retry_after(), Some(1));
        // 60 per second = one token every 16.67 ms: after 16 ms still empty, after 17 ms one.
        assert!(limiter.admit(&store, limits, at(16)).is_err());
        assert!(limiter.admit(&store, limits, at(17)).is_ok());
    }
}
