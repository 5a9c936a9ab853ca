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

/// `ts` to the millisecond, as the API writes it and every record keeps it ([`format_ts`]).
pub fn to_millisecond(ts: Timestamp) -> Timestamp {
    Timestamp::from_millisecond(ts.as_millisecond()).unwrap_or(ts)
}

/// Formats a timestamp the way the API does: ISO 8601, UTC, milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn format_ts(ts: Timestamp) -> String {
    let at = jiff::tz::Offset::UTC.to_datetime(ts);
    let Ok(year) = u32::try_from(at.year()) else {
        // Years before 0 (which no record has) take the general formatter.
        return ts.strftime("%Y-%m-%dT%H:%M:%S.%3fZ").to_string();
    };
    // Written digit by digit: every response and record carries timestamps.
    let mut out = String::with_capacity(24);
    let mut digits = |value: u32, width: u32, then: char| {
        for place in (0..width).rev() {
            let digit = value / 10u32.pow(place) % 10;
            out.push(char::from(b'0' + u8::try_from(digit).unwrap_or(0)));
        }
        out.push(then);
    };
    let part = |v: i8| u32::try_from(v).unwrap_or(0);
    digits(year, 4, '-');
    digits(part(at.month()), 2, '-');
    digits(part(at.day()), 2, 'T');
    digits(part(at.hour()), 2, ':');
    digits(part(at.minute()), 2, ':');
    digits(part(at.second()), 2, '.');
    digits(
        u32::try_from(at.subsec_nanosecond() / 1_000_000).unwrap_or(0),
        3,
        'Z',
    );
    out
}

/// Serde adapter for timestamps in the API's format.
pub mod api_ts {
    use jiff::Timestamp;
    use serde::{Deserializer, Serializer};

    /// Serializes as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn serialize<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_ts(*ts))
    }

    /// Accepts any RFC 3339 timestamp.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        d.deserialize_str(TimestampText)
    }

    /// Parses a timestamp from the text as it is read, without a copy of it.
    struct TimestampText;

    impl serde::de::Visitor<'_> for TimestampText {
        type Value = Timestamp;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an RFC 3339 timestamp")
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Timestamp, E> {
            text.parse().map_err(E::custom)
        }
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
            #[derive(Deserialize)]
            struct Ts(#[serde(deserialize_with = "super::deserialize")] Timestamp);
            Ok(Option::<Ts>::deserialize(d)?.map(|Ts(ts)| ts))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_written_as_the_general_formatter_writes_them_and_read_back() {
        let mut at: i64 = -2_000_000_000_000;
        while at < 253_402_300_799_000 {
            let ts = Timestamp::from_millisecond(at).expect("in range")
                + jiff::SignedDuration::from_nanos(at.rem_euclid(1_000_003) * 997 % 1_000_000);
            let text = format_ts(ts);
            assert_eq!(text, ts.strftime("%Y-%m-%dT%H:%M:%S.%3fZ").to_string());
            let json = serde_json::to_string(&text).expect("json");
            let mut de = serde_json::Deserializer::from_str(&json);
            let back = api_ts::deserialize(&mut de).expect("read back");
            assert_eq!(format_ts(back), text);
            at += 987_654_321_123;
        }
        let none: Option<Timestamp> =
            api_ts::option::deserialize(&mut serde_json::Deserializer::from_str("null"))
                .expect("null");
        assert_eq!(none, None);
        let some = api_ts::option::deserialize(&mut serde_json::Deserializer::from_str(
            "\"2026-01-05T00:00:00.123Z\"",
        ))
        .expect("some");
        assert_eq!(
            some.map(format_ts).as_deref(),
            Some("2026-01-05T00:00:00.123Z")
        );
        assert!(
            api_ts::deserialize(&mut serde_json::Deserializer::from_str("\"yesterday\"")).is_err()
        );
    }
}
