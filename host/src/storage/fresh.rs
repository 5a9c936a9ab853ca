//! The events this host committed and has not fanned out yet, kept decoded for the fan-out: a
//! transaction that emits an event has it in hand already, and the fan-out, a moment later,
//! would read it back from storage and decode it (a tenth of the engine's workers' time in a
//! component backlog). It takes each event from here instead, or reads it when it is not here.
//!
//! Only an optimisation, never the record: an event is kept after its transaction commits, and
//! nothing is lost when one is not kept or is let go (the fan-out reads it). The oldest go first
//! past [`MAX_EVENTS`] or [`MAX_BYTES`] of stored records, so a backlog deeper than that is read
//! from storage as before; and those the fan-out has not taken by two of the engine's idle polls
//! go ([`FreshEvents::forget_stale`]): another host sharing the storage fanned them out, or no
//! engine runs in this process.

use std::sync::{Mutex, MutexGuard};

use super::bounded::Bounded;
use crate::model::event::Event;

/// Events kept at most (as many as the engine hands over for their first attempts).
pub const MAX_EVENTS: usize = 16_384;

/// Stored bytes of the events kept at most (an event alone larger than this is not kept).
pub const MAX_BYTES: usize = 16 * 1024 * 1024;

/// An event committed, under its storage key, with its stored size. Boxed: an event is 480
/// bytes, and the map's table, which keeps its room for the most events it held until it is
/// emptied, would take that much for each place (8 MiB at 16 384), kept or not.
pub type Committed = (String, Box<Event>, usize);

/// The events committed and not yet taken by the fan-out (see the module's documentation).
#[derive(Debug)]
pub struct FreshEvents(Mutex<Bounded<Box<Event>>>);

impl Default for FreshEvents {
    fn default() -> Self {
        Self(Mutex::new(Bounded::new(MAX_EVENTS, MAX_BYTES)))
    }
}

impl FreshEvents {
    fn kept(&self) -> MutexGuard<'_, Bounded<Box<Event>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps the events of a transaction that committed, letting the oldest go as needed.
    pub(crate) fn keep(&self, committed: Vec<Committed>) {
        let mut kept = self.kept();
        for (key, event, bytes) in committed {
            kept.insert(key, event, bytes);
        }
    }

    /// Takes the event stored under `key`, with its stored size, if kept.
    pub fn take(&self, key: &str) -> Option<(Event, usize)> {
        self.kept().remove(key).map(|(event, size)| (*event, size))
    }

    /// Keeps again an event taken and not fanned out (its entry put aside for later), as if it
    /// were committed now.
    pub fn put_back(&self, key: String, event: Event, bytes: usize) {
        self.kept().insert(key, Box::new(event), bytes);
    }

    /// Lets go the events kept before the last call. The engine calls it each time it has had
    /// nothing to do for a poll: what its fan-out has not taken by then, it is not going to.
    pub fn forget_stale(&self) {
        self.kept().forget_stale();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event `n`, committed under `evt-{n}` in 10 bytes.
    fn event(n: usize) -> Committed {
        let (key, event) = crate::model::event::tests::numbered(n);
        (key, Box::new(event), 10)
    }

    fn kept(fresh: &FreshEvents, n: usize) -> bool {
        fresh.kept().get(&format!("evt-{n}")).is_some()
    }

    #[test]
    fn an_event_is_taken_once_with_its_size_and_one_put_back_is_kept_as_the_newest() {
        let fresh = FreshEvents(Mutex::new(Bounded::new(2, usize::MAX)));
        let (key, event, _) = event(0);
        let id = event.id.clone();
        fresh.keep(vec![(key, event, 42), self::event(1)]);
        let (taken, size) = fresh.take("evt-0").expect("kept");
        assert_eq!((&taken.id, size), (&id, 42));
        assert!(fresh.take("evt-0").is_none(), "taken already");
        assert_eq!(fresh.kept().len(), 1);
        fresh.put_back("evt-0".to_owned(), taken, size);
        fresh.keep(vec![self::event(2)]);
        // evt-1 was now the oldest.
        assert!(!kept(&fresh, 1) && kept(&fresh, 0) && kept(&fresh, 2));
    }

    #[test]
    fn those_not_taken_by_the_second_idle_poll_go() {
        let fresh = FreshEvents::default();
        fresh.keep(vec![event(0), event(1)]);
        fresh.forget_stale();
        assert!(kept(&fresh, 0) && kept(&fresh, 1), "kept since the last");
        fresh.keep(vec![event(2)]);
        fresh.forget_stale();
        assert!(!kept(&fresh, 0) && !kept(&fresh, 1), "kept before the last");
        assert!(kept(&fresh, 2));
        fresh.forget_stale();
        assert!(fresh.kept().is_empty());
    }
}
