//! The events the engine keeps decoded for their attempts: an event's deliveries to each of its
//! targets come due together (at its fan-out, or at the same retry), and events never change, so
//! each is read and decoded once for all of them. The fan-out keeps each event it fans out, and
//! an attempt keeps one it had to read.
//!
//! The oldest are let go first, past [`MAX_EVENTS`] or [`MAX_BYTES`] of stored records: a
//! backlog's attempts follow its fan-out in the same order, up to [`first::MAX_GIVEN`]
//! deliveries behind, so the events of that many deliveries are kept (a cache that was emptied
//! whenever it held 1 024 events made the attempts of a deeper backlog read each event again).
//! And all of them go once none was kept or read between two of the engine's idle polls
//! ([`Recent::forget_unused`]): an idle host does not hold a burst's events (up to
//! [`MAX_BYTES`] of records, more decoded).
//!
//! Each event kept also keeps its envelope as webhooks receive it, encoded at the first
//! webhook attempt that sends it whole ([`RecentEvent::body`]): an event fanned out to 50
//! subscriptions is encoded once, not 50 times. It takes about the event's stored size again
//! (the same JSON), so what the kept events hold is bounded by twice [`MAX_BYTES`], and their
//! decoded form.

use bytes::Bytes;
use std::sync::{Arc, Mutex, OnceLock};

use crate::model::event::Event;
use crate::storage::bounded::Bounded;

use super::first;

/// Events kept at most: as many as the deliveries handed over for their first attempt.
pub const MAX_EVENTS: usize = first::MAX_GIVEN;

/// Stored bytes of the events kept at most (an event alone larger than this is not kept).
pub const MAX_BYTES: usize = 32 * 1024 * 1024;

/// An event kept for its attempts.
#[derive(Debug)]
pub struct RecentEvent {
    /// The event, decoded.
    pub event: Event,
    /// Its envelope as JSON, once encoded (see [`RecentEvent::body`]).
    body: OnceLock<Bytes>,
}

impl RecentEvent {
    /// `event`, its envelope not yet encoded.
    pub fn new(event: Event) -> Self {
        Self {
            event,
            body: OnceLock::new(),
        }
    }

    /// The event's envelope as JSON, the body of a webhook delivery: encoded at the first call,
    /// shared by the later ones.
    pub fn body(&self) -> serde_json::Result<Bytes> {
        if let Some(body) = self.body.get() {
            return Ok(body.clone());
        }
        let body = Bytes::from(serde_json::to_vec(&self.event)?);
        // Two attempts that encoded it at once keep the first one's (the same bytes).
        Ok(self.body.get_or_init(|| body).clone())
    }
}

/// Recent events, by their storage key.
#[derive(Debug)]
pub struct Recent {
    kept: Mutex<Kept>,
}

#[derive(Debug)]
struct Kept {
    /// Each event, with its stored size.
    events: Bounded<Arc<RecentEvent>>,
    /// Whether one was kept or read since the last [`Recent::forget_unused`].
    used: bool,
}

impl Default for Recent {
    fn default() -> Self {
        Self::with(MAX_EVENTS, MAX_BYTES)
    }
}

impl Recent {
    fn with(max_events: usize, max_bytes: usize) -> Self {
        Self {
            kept: Mutex::new(Kept {
                events: Bounded::new(max_events, max_bytes),
                used: false,
            }),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The event stored under `key`, if kept (a use, see [`Recent::forget_unused`]).
    pub fn get(&self, key: &str) -> Option<Arc<RecentEvent>> {
        let mut kept = self.kept();
        kept.used = true;
        kept.events.get(key).cloned()
    }

    /// Keeps `event`, stored under `key` in `bytes`, letting the oldest go as needed. One kept
    /// already under `key` stays (events never change).
    pub fn keep(&self, key: String, event: Event, bytes: usize) -> Arc<RecentEvent> {
        let mut kept = self.kept();
        kept.used = true;
        if let Some(kept) = kept.events.get(&key) {
            return kept.clone();
        }
        let event = Arc::new(RecentEvent::new(event));
        kept.events.insert(key, event.clone(), bytes);
        event
    }

    /// Lets every event go, and the room they took, if none was kept or read since the last
    /// call. The engine calls it each time it has had nothing to do for a poll, so the events go
    /// after one to two polls of nothing (250–500 ms). An event let go is read again if an
    /// attempt needs it.
    pub fn forget_unused(&self) {
        let mut kept = self.kept();
        if kept.used {
            kept.used = false;
        } else {
            kept.events.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::event::tests::numbered as event;

    #[test]
    fn the_oldest_go_first_past_the_count() {
        let recent = Recent::with(3, usize::MAX);
        for n in 0..5 {
            let (key, e) = event(n);
            recent.keep(key, e, 10);
        }
        let kept: Vec<bool> = (0..5)
            .map(|n| recent.get(&format!("evt-{n}")).is_some())
            .collect();
        assert_eq!(kept, [false, false, true, true, true]);
        assert_eq!(recent.kept().events.bytes(), 30);
    }

    #[test]
    fn the_oldest_go_first_past_the_bytes_and_one_larger_than_all_is_not_kept() {
        let recent = Recent::with(100, 100);
        for (n, size) in [(0, 40), (1, 40), (2, 40)] {
            let (key, e) = event(n);
            recent.keep(key, e, size);
        }
        // 120 bytes do not fit in 100: the first went.
        assert!(recent.get("evt-0").is_none());
        assert!(recent.get("evt-1").is_some() && recent.get("evt-2").is_some());
        let (key, e) = event(3);
        let id = e.id.clone();
        let big = recent.keep(key, e, 101);
        assert_eq!(big.event.id, id, "handed back all the same");
        assert!(recent.get("evt-3").is_none(), "larger than the budget");
        assert!(recent.get("evt-1").is_some(), "nothing let go for it");
        assert_eq!(recent.kept().events.bytes(), 80);
    }

    #[test]
    fn all_go_once_none_was_kept_or_read_since_the_last_idle_poll() {
        let recent = Recent::with(10, usize::MAX);
        let count = |recent: &Recent| recent.kept().events.len();
        for n in 0..3 {
            let (key, e) = event(n);
            recent.keep(key, e, 10);
        }
        recent.forget_unused();
        assert_eq!(count(&recent), 3, "kept since the last poll");
        // A read counts as a use.
        assert!(recent.get("evt-0").is_some());
        recent.forget_unused();
        assert_eq!(count(&recent), 3, "read since the last poll");
        // Nothing kept or read since: all go, with their room.
        recent.forget_unused();
        let kept = recent.kept();
        assert!(kept.events.is_empty());
        assert_eq!(kept.events.bytes(), 0);
        assert_eq!(kept.events.capacity(), 0, "the room went too");
        drop(kept);
        // Kept again afterwards, as before.
        let (key, e) = event(3);
        recent.keep(key, e, 10);
        recent.forget_unused();
        assert!(recent.get("evt-3").is_some());
    }

    #[test]
    fn an_events_body_is_its_envelope_encoded_once_and_shared() {
        let recent = Recent::with(2, usize::MAX);
        let (key, e) = event(0);
        let envelope = serde_json::to_vec(&e).expect("JSON");
        let kept = recent.keep(key, e, 10);
        let body = kept.body().expect("encoded");
        assert_eq!(
            &body[..],
            &envelope[..],
            "the envelope as webhooks receive it"
        );
        let again = recent.get("evt-0").expect("kept").body().expect("encoded");
        assert_eq!(
            again.as_ptr(),
            body.as_ptr(),
            "the same bytes, not encoded again"
        );
    }

    #[test]
    fn an_event_kept_again_stays_as_it_was_and_counts_once() {
        let recent = Recent::with(2, usize::MAX);
        let (key, e) = event(0);
        let first = recent.keep(key.clone(), e.clone(), 10);
        let again = recent.keep(key, e, 10);
        assert!(Arc::ptr_eq(&first, &again));
        let (key, e) = event(1);
        recent.keep(key, e, 10);
        // Two distinct events fit in two places: the first is still kept.
        assert!(recent.get("evt-0").is_some() && recent.get("evt-1").is_some());
        assert_eq!(recent.kept().events.bytes(), 20);
    }
}
