//! Accepted messages in the work queue: claiming a due one for an attempt and recording what the
//! attempt came to (the sending itself is the delivery engine's, `crate::delivery::messages`).
//!
//! The entry (`work/message/<due ms>/<store>/<msg>`, see `crate::model::work`) is written in the
//! transaction that accepted the message, so nothing accepted is lost in a crash. A claim moves
//! the entry a lease ahead (a crash mid-send retries it when the lease ends); the outcome is then
//! `sent`; after a transient failure (connection error, timeout, HTTP 408/429/5xx, SMTP 4xx) a
//! retry 30 s, 2 min, 10 min, then 1 h later; after a permanent one (other HTTP 4xx, SMTP 5xx), or
//! the fifth failed attempt, `failed`. Due times follow the injected clock.

use jiff::{SignedDuration, Timestamp};

use super::senders::Sender;
use crate::metrics::NotificationOutcome;
use crate::model::error::Result;
use crate::model::failure::SendOutcome;
use crate::model::message::{Message, MessageStatus};
use crate::model::work::Work;
use crate::service::Service;

/// Delays before the retries of a message after a transient failure.
pub const RETRY_DELAYS: [SignedDuration; 4] = [
    SignedDuration::from_secs(30),
    SignedDuration::from_mins(2),
    SignedDuration::from_mins(10),
    SignedDuration::from_hours(1),
];
/// How long a claimed message is left to its sender before another pass may retry it.
pub const LEASE: SignedDuration = SignedDuration::from_mins(5);

/// A message claimed for one attempt.
pub struct Claim {
    /// The queue entry that holds the lease.
    pub lease: String,
    /// The message.
    pub message: Message,
    /// The store's sender for its channel, if one is connected.
    pub sender: Option<Sender>,
}

impl Service {
    /// Claims the due work queue entry at `key`: moves it a lease ahead and reads the message and
    /// its sender. `None` when another pass took it, or the message is no longer queued (the
    /// entry is then removed).
    pub fn claim_message(&self, key: &str, now: Timestamp) -> Result<Option<Claim>> {
        self.db.tx(|tx| {
            let Some(Work::Message {
                store_id,
                message_id,
            }) = tx.read::<Work>(key)?
            else {
                return Ok(None);
            };
            let Some(message) = tx
                .read::<Message>(&Message::key(&store_id, &message_id))?
                .filter(|m| m.notification.status == MessageStatus::Queued)
            else {
                tx.remove(key)?;
                return Ok(None);
            };
            let lease_until = now.saturating_add(LEASE).unwrap_or(Timestamp::MAX);
            let Some((lease, _)) = tx.postpone(key, lease_until)? else {
                return Ok(None);
            };
            let sender = tx.read(&Sender::key(&store_id, message.notification.channel))?;
            Ok(Some(Claim {
                lease,
                message,
                sender,
            }))
        })
    }

    /// Records an attempt's outcome (or, with no sender connected any more, moves the message to
    /// the outbox) and schedules the retry.
    pub fn finish_message(
        &self,
        claim: &Claim,
        outcome: Option<SendOutcome>,
        now: Timestamp,
    ) -> Result<()> {
        let store = &claim.message.store.id;
        let id = claim.message.id();
        let status = self.db.tx(|tx| {
            tx.remove(&claim.lease)?;
            let key = Message::key(store, id);
            let Some(mut record) = tx.read::<Message>(&key)? else {
                return Ok(None);
            };
            let n = &mut record.notification;
            n.updated_at = now;
            n.next_attempt_at = None;
            match &outcome {
                None => n.status = MessageStatus::Outbox,
                Some(SendOutcome::Sent) => {
                    n.attempts += 1;
                    n.status = MessageStatus::Sent;
                    n.sent_at = Some(now);
                    n.last_error = None;
                    n.last_error_category = None;
                    record.last_error_detail = None;
                }
                Some(failure @ (SendOutcome::Transient(e) | SendOutcome::Permanent(e))) => {
                    n.attempts += 1;
                    n.last_error = Some(e.text());
                    n.last_error_category = Some(e.category);
                    record.last_error_detail = Some(e.detail.clone());
                    let retry = RETRY_DELAYS.get(n.attempts as usize - 1);
                    match (failure, retry) {
                        (SendOutcome::Transient(_), Some(delay)) => {
                            let due = now.saturating_add(*delay).unwrap_or(Timestamp::MAX);
                            n.next_attempt_at = Some(due);
                            tx.enqueue(
                                &Work::Message {
                                    store_id: store.clone(),
                                    message_id: id.clone(),
                                },
                                due,
                            )?;
                        }
                        _ => n.status = MessageStatus::Failed,
                    }
                }
            }
            tx.write(&key, &record)?;
            Ok(Some(record.notification.status))
        })?;
        let outcome = match status {
            Some(MessageStatus::Sent) => NotificationOutcome::Sent,
            Some(MessageStatus::Failed) => NotificationOutcome::Failed,
            _ => return Ok(()),
        };
        let channel = claim.message.notification.channel;
        self.metrics.notification(channel.as_str(), outcome);
        Ok(())
    }
}
