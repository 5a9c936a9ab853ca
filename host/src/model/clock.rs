//! Time, injected: everything scheduled (rate limits, retries, quotas, retention) asks a [`Clock`],
//! so tests drive the schedule with a [`ManualClock`] in milliseconds.

use std::fmt;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant, UTC.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to. Cloning shares the same instant.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<Timestamp>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves the clock forward (or back, with a negative duration).
    pub fn advance(&self, by: SignedDuration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now = now.saturating_add(by).unwrap_or(*now);
    }

    /// Sets the clock to `to`.
    pub fn set(&self, to: Timestamp) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Formats a timestamp the way the API does: ISO 8601, UTC, milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn format_ts(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S.%3fZ").to_string()
}

/// Serde adapter for timestamps in the API's format.
pub mod api_ts {
    use jiff::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Serializes as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn serialize<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_ts(*ts))
    }

    /// Accepts any RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }

    /// The same for optional timestamps.
    pub mod option {
        use jiff::Timestamp;
        use serde::{Deserialize, Deserializer, Serializer};

        /// Serializes `Some` as a timestamp string and `None` as null.
        pub fn serialize<S: Serializer>(ts: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
            match ts {
                Some(ts) => s.serialize_str(&super::super::format_ts(*ts)),
                None => s.serialize_none(),
            }
        }

        /// Accepts null or any RFC 3339 timestamp.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
            let s = Option::<String>::deserialize(d)?;
            s.map(|s| s.parse().map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}
