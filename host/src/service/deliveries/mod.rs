//! Deliveries' state: the fan-out of committed events to their targets, the record of each
//! attempt and the retry it schedules, the pause of a target whose retries ran out (and the notice
//! to its owner), replay, and the purge of expired events. Every change is one storage
//! transaction; the delivery engine (`crate::delivery`) only decides when to call them.

pub mod index;
pub mod peers;
pub mod queue;
pub mod target;
