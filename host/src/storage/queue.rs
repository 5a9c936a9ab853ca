//! The durable work queue: webhook attempts, component invocations, outgoing messages and the
//! host's own mail, as entries of [`Work`] under `work/{kind}/{due ms}/…` (see
//! [`crate::model::work`]).
//!
//! Work is queued with [`Tx::enqueue`] in the caller's transaction, so it commits (or not) with
//! its cause, and the commit wakes the delivery engine. The engine reads each kind's lane in due
//! order ([`due`]) and hands each entry to the service layer, which removes it in the transaction
//! that records what came of it, or moves it a lease ahead first ([`Tx::postpone`]) for work that
//! is retried only after a lease when a crash cuts it short.

use jiff::Timestamp;
use serde::de::IgnoredAny;

use super::{Db, Tx};
use crate::model::delivery::{DueEntry, millis};
use crate::model::error::Result;
use crate::model::ids::{MessageId, StoreId};
use crate::model::work::{Work, WorkKind, due_ms_of};

impl Tx<'_> {
    /// Queues `work`, due at `at`, in this transaction, and wakes the delivery engine once it
    /// commits. Returns the entry's key.
    pub fn enqueue(&mut self, work: &Work, at: Timestamp) -> Result<String> {
        let key = work.key(at);
        self.write(&key, work)?;
        self.wake_delivery();
        Ok(key)
    }

    /// Moves the entry at `key` to `until` (a lease: claimed work whose outcome is never recorded
    /// comes due again then). Returns the new key and the work, or `None` when the entry is gone.
    pub fn postpone(&mut self, key: &str, until: Timestamp) -> Result<Option<(String, Work)>> {
        let Some(work) = self.read::<Work>(key)? else {
            return Ok(None);
        };
        self.remove(key)?;
        let moved = work.key(until);
        self.write(&moved, &work)?;
        Ok(Some((moved, work)))
    }
}

/// Up to `limit` entries of `kind` due at `now`, in due order, after the key `after`. Fewer than
/// `limit` means that no other entry of the lane is due.
pub fn due(
    db: &Db,
    kind: WorkKind,
    now: Timestamp,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, Work)>> {
    let now_ms = millis(now);
    let batch: Vec<(String, Work)> = db.list(&kind.prefix(), after, false, limit)?;
    Ok(batch
        .into_iter()
        .take_while(|(key, _)| due_ms_of(key).is_some_and(|due| due <= now_ms))
        .collect())
}

/// The queue at `now`, for the metrics: how many entries of every kind are due (in flight
/// included), reading at most `limit` keys in all, and how long the oldest one has been due.
pub fn due_stats(db: &Db, now: Timestamp, limit: usize) -> Result<(usize, std::time::Duration)> {
    const BATCH: usize = 256;
    let now_ms = millis(now);
    let (mut due, mut read, mut oldest) = (0, 0, None::<u64>);
    for kind in WorkKind::ALL {
        let prefix = kind.prefix();
        let mut after: Option<String> = None;
        'lane: loop {
            let room = limit.saturating_sub(read).min(BATCH);
            if room == 0 {
                break;
            }
            let batch: Vec<(String, IgnoredAny)> =
                db.list(&prefix, after.as_deref(), false, room)?;
            read += batch.len();
            for (key, _) in &batch {
                match due_ms_of(key) {
                    Some(ms) if ms <= now_ms => {
                        due += 1;
                        oldest = Some(oldest.map_or(ms, |o| o.min(ms)));
                    }
                    _ => break 'lane,
                }
            }
            if batch.len() < room {
                break;
            }
            after = batch.last().map(|(key, _)| key.clone());
        }
    }
    let age = oldest.map_or(0, |ms| now_ms.saturating_sub(ms));
    Ok((due, std::time::Duration::from_millis(age)))
}

/// Where earlier versions queued deliveries: `due/{ms}/{store}/{target}/{event}`.
const LEGACY_DELIVERIES: &str = "due/";
/// Where earlier versions queued messages: `msgq/{ms}/{store}/{message}`.
const LEGACY_MESSAGES: &str = "msgq/";

/// The due time (ms) of a legacy queue key; an unreadable one is due at once.
fn legacy_ms(key: &str, prefix: &str) -> u64 {
    key.strip_prefix(prefix)
        .and_then(|rest| rest.get(..20))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or(0)
}

/// Moves the entries of the queues of earlier versions (`due/`, `msgq/`) into the work queue,
/// due at the same times, in batches of one transaction each. Run once at start, before the
/// engine; returns how many entries moved.
pub fn migrate_legacy(db: &Db) -> Result<usize> {
    const BATCH: usize = 256;
    let mut moved = 0;
    loop {
        let batch: Vec<(String, DueEntry)> = db.list(LEGACY_DELIVERIES, None, false, BATCH)?;
        if batch.is_empty() {
            break;
        }
        db.tx(|tx| {
            for (key, entry) in &batch {
                tx.remove(key)?;
                let work = Work::Delivery(entry.clone());
                tx.write(&work.key_at_ms(legacy_ms(key, LEGACY_DELIVERIES)), &work)?;
            }
            Ok(())
        })?;
        moved += batch.len();
    }
    loop {
        let batch: Vec<(String, MessageId)> = db.list(LEGACY_MESSAGES, None, false, BATCH)?;
        if batch.is_empty() {
            break;
        }
        db.tx(|tx| {
            for (key, message_id) in &batch {
                tx.remove(key)?;
                let Some(store_id) = key
                    .split('/')
                    .nth(2)
                    .and_then(|s| s.parse::<StoreId>().ok())
                else {
                    tracing::warn!(key, "dropped a malformed message queue entry");
                    continue;
                };
                let work = Work::Message {
                    store_id,
                    message_id: message_id.clone(),
                };
                tx.write(&work.key_at_ms(legacy_ms(key, LEGACY_MESSAGES)), &work)?;
            }
            Ok(())
        })?;
        moved += batch.len();
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::delivery::TargetRef;

    fn temp_db() -> (Db, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        (Db::open_sled(dir.path(), false).expect("open"), dir)
    }

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("ts")
    }

    fn message(n: u32) -> Work {
        Work::Message {
            store_id: "store_a".parse().expect("id"),
            message_id: format!("msg_{n}").parse().expect("id"),
        }
    }

    #[test]
    fn due_work_is_read_in_due_order_per_kind_up_to_now() {
        let (db, _dir) = temp_db();
        db.tx(|tx| {
            tx.enqueue(&message(3), at(30))?;
            tx.enqueue(&message(1), at(10))?;
            tx.enqueue(&message(2), at(20))?;
            tx.enqueue(
                &Work::Mail {
                    mail_id: "mail_a".parse().expect("id"),
                },
                at(5),
            )
        })
        .expect("enqueue");
        let found = due(&db, WorkKind::Message, at(20), None, 10).expect("due");
        let works: Vec<Work> = found.iter().map(|(_, w)| w.clone()).collect();
        assert_eq!(works, [message(1), message(2)]);
        let after = due(&db, WorkKind::Message, at(20), Some(&found[0].0), 10).expect("due");
        assert_eq!(after.len(), 1);
        let (count, oldest) = due_stats(&db, at(20), 100).expect("stats");
        assert_eq!(count, 3, "two messages and the mail");
        assert_eq!(oldest, std::time::Duration::from_secs(15));
    }

    #[test]
    fn a_postponed_entry_leaves_its_place_for_a_later_one() {
        let (db, _dir) = temp_db();
        let key = db
            .tx(|tx| tx.enqueue(&message(1), at(10)))
            .expect("enqueue");
        let (moved, work) = db
            .tx(|tx| tx.postpone(&key, at(300)))
            .expect("postpone")
            .expect("there");
        assert_eq!(work, message(1));
        assert_eq!(moved, message(1).key(at(300)));
        assert!(
            due(&db, WorkKind::Message, at(299), None, 10)
                .expect("due")
                .is_empty()
        );
        assert_eq!(db.tx(|tx| tx.postpone(&key, at(400))).expect("tx"), None);
    }

    #[test]
    fn entries_of_the_old_queues_move_into_the_work_queue_at_their_due_times() {
        let (db, _dir) = temp_db();
        let entry = DueEntry {
            store_id: "store_a".parse().expect("id"),
            target: TargetRef::Webhook("wh_a".parse().expect("id")),
            event_id: "evt_a".parse().expect("id"),
        };
        db.tx(|tx| {
            tx.write(
                "due/00000000000000010000/store_a/wh_a/evt_a",
                &serde_json::json!({"store_id": "store_a", "target": {"webhook": "wh_a"},
                    "event_id": "evt_a"}),
            )?;
            tx.write("msgq/00000000000000020000/store_a/msg_1", &"msg_1")
        })
        .expect("legacy entries");
        assert_eq!(migrate_legacy(&db).expect("migrate"), 2);
        assert_eq!(migrate_legacy(&db).expect("again"), 0);
        let delivery = Work::Delivery(entry);
        assert_eq!(
            db.read::<Work>(&delivery.key(at(10))).expect("read"),
            Some(delivery)
        );
        assert_eq!(
            db.read::<Work>(&message(1).key(at(20))).expect("read"),
            Some(message(1))
        );
        let left: Vec<(String, IgnoredAny)> = db.list("due/", None, false, 10).expect("list");
        assert!(left.is_empty());
    }
}
