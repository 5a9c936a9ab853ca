//! Targets: who receives deliveries, whether they are active, and pausing them. The one place
//! that knows what kinds of target exist; the component runtime adds its kind here.

use jiff::Timestamp;

use super::records::TargetRef;
use crate::error::Result;
use crate::ids::StoreId;
use crate::service::scopes::EventType;
use crate::service::webhooks::{Subscription, WebhookStatus};
use crate::storage::{Db, Tx};

/// A target, loaded for an attempt.
#[derive(Debug, Clone)]
pub enum Target {
    /// POST the envelope, signed with the subscription's secret, to its URL.
    Webhook(Box<Subscription>),
}

/// What a target is now.
#[derive(Debug, Clone)]
pub enum TargetState {
    /// It receives deliveries.
    Active(Target),
    /// It is paused: deliveries to it fail without an attempt.
    Paused,
    /// It was deleted (or its installation removed).
    Gone,
}

/// Loads a target for an attempt.
pub fn load(db: &Db, store: &StoreId, target: &TargetRef) -> Result<TargetState> {
    Ok(match target {
        TargetRef::Webhook(id) => match db.read::<Subscription>(&Subscription::key(store, id))? {
            None => TargetState::Gone,
            Some(sub) if sub.status == WebhookStatus::Paused => TargetState::Paused,
            Some(sub) => TargetState::Active(Target::Webhook(Box::new(sub))),
        },
    })
}

/// The targets in `store` that may want `kind`, read outside a transaction: the fan-out checks
/// each again inside its transaction with [`wants_in_tx`].
pub fn candidates(db: &Db, store: &StoreId, kind: EventType) -> Result<Vec<TargetRef>> {
    let prefix = Subscription::store_prefix(store);
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let batch: Vec<(String, Subscription)> = db.list(&prefix, after.as_deref(), false, 256)?;
        let done = batch.len() < 256;
        for (key, sub) in batch {
            if sub.events.contains(&kind) {
                out.push(sub.target());
            }
            after = Some(key);
        }
        if done {
            return Ok(out);
        }
    }
}

/// Inside a transaction: `None` when the target is gone or no longer wants `kind`, else whether
/// it is active.
pub fn wants_in_tx(
    tx: &mut Tx<'_>,
    store: &StoreId,
    target: &TargetRef,
    kind: EventType,
) -> Result<Option<bool>> {
    Ok(match target {
        TargetRef::Webhook(id) => tx
            .read::<Subscription>(&Subscription::key(store, id))?
            .filter(|sub| sub.events.contains(&kind))
            .map(|sub| sub.status == WebhookStatus::Active),
    })
}

/// Pauses an active target; returns it as paused, for the notice to its owner.
pub fn pause(
    tx: &mut Tx<'_>,
    store: &StoreId,
    target: &TargetRef,
    now: Timestamp,
    reason: &str,
) -> Result<Option<Target>> {
    match target {
        TargetRef::Webhook(id) => {
            let key = Subscription::key(store, id);
            let Some(mut sub) = tx
                .read::<Subscription>(&key)?
                .filter(|s| s.status == WebhookStatus::Active)
            else {
                return Ok(None);
            };
            sub.status = WebhookStatus::Paused;
            sub.paused_at = Some(now);
            sub.pause_reason = Some(reason.to_owned());
            sub.updated_at = now;
            tx.write(&key, &sub)?;
            Ok(Some(Target::Webhook(Box::new(sub))))
        }
    }
}
