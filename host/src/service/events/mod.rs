//! Store events and the outbox they are written to.
//!
//! An event is written in the same transaction as the change that fires it, together with an
//! outbox entry that the delivery engine consumes. A crash after the commit loses nothing; a crash
//! before it fires nothing.
//!
//! [`examples`] holds the example data of test events.

pub mod examples;

use crate::model::event::Cause;
use crate::model::event::Event;
use crate::model::event::EventData;
use crate::model::event::OutboxEntry;
use crate::model::event::StoreRef;
use crate::model::event::event_key;
use crate::model::event::outbox_key;
use jiff::Timestamp;

use crate::model::error::Result;
use crate::storage::Tx;

thread_local! {
    /// The cause of the changes made on this thread now: set while a component runs, which it does
    /// on one thread from start to end (host calls are synchronous).
    static CAUSE: std::cell::RefCell<Option<Cause>> = const { std::cell::RefCell::new(None) };
}

/// Runs `f` (a component invocation) with every event it causes marked as caused by `cause`.
pub fn with_cause<R>(cause: Cause, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<Cause>);
    impl Drop for Reset {
        fn drop(&mut self) {
            CAUSE.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _reset = Reset(CAUSE.with(|c| c.borrow_mut().replace(cause)));
    f()
}

/// When traces are exported and a span is current (the request or the component invocation that
/// made the change), an `event` span under it, whose context the event's deliveries carry.
fn event_trace(event: &Event) -> Option<String> {
    crate::telemetry::current_traceparent()?;
    tracing::info_span!(
        "event",
        event.id = %event.id,
        event_type = event.kind().as_str(),
        store = %event.store.id,
    )
    .in_scope(crate::telemetry::current_traceparent)
}

fn current_cause() -> Option<Cause> {
    CAUSE.with(|c| c.borrow().clone())
}

impl Tx<'_> {
    /// Records the event `data` (whose variant is the event's type) in `store` as part of this
    /// transaction, and queues it for delivery. Returns the event (kept for the fan-out once
    /// the transaction commits: see [`Tx::write_event`]).
    pub fn emit(
        &mut self,
        store: &StoreRef,
        data: impl Into<EventData>,
        now: Timestamp,
    ) -> Result<&Event> {
        let event = Event::new(store, data, now);
        let outbox = outbox_key(&event.id);
        let entry = OutboxEntry {
            store_id: store.id.clone(),
            event_id: event.id.clone(),
            cause: current_cause(),
            trace: event_trace(&event),
        };
        self.write(&outbox, &entry)?;
        self.wake_fan_out(&outbox);
        self.write_event(event_key(&store.id, &entry.event_id), event)
    }
}
