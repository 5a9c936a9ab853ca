//! What plugins do with their deliveries: the delivery and attempt logs, replay (failed and
//! pending deliveries since a time, or of one event) and resend (one delivery, whatever its
//! status). The state changes themselves are `crate::service::deliveries::queue`'s.

use jiff::Timestamp;

use super::paused_conflict;
use crate::model::delivery::{
    Attempt, Delivery, DeliveryStatus, TargetRef, attempt_key, attempts_prefix, deliveries_prefix,
    delivery_key,
};
use crate::model::error::{Error, Result};
use crate::model::event::{Event, event_key};
use crate::model::ids::{StoreId, WebhookId};
use crate::model::webhook::{DeliveryFilter, ReplayRequest, ReplayResult, WebhookStatus};
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::pagination::{Listing, Page, PageRequest};

/// The `status` filter of a delivery listing: none, or `pending`, `succeeded`, `failed`.
pub fn status_filter(status: Option<&str>) -> Result<Option<DeliveryStatus>> {
    match status {
        None => Ok(None),
        Some("pending") => Ok(Some(DeliveryStatus::Pending)),
        Some("succeeded") => Ok(Some(DeliveryStatus::Succeeded)),
        Some("failed") => Ok(Some(DeliveryStatus::Failed)),
        Some(other) => Err(Error::invalid(
            "status",
            format!("`{other}` is not one of pending, succeeded, failed"),
        )),
    }
}

impl Service {
    /// Queues failed and pending deliveries of an active subscription again, due now, with a
    /// fresh retry schedule: one event (`event_id`), or every such event since a time (`since`).
    /// A pending delivery is moved to now, not duplicated; succeeded ones are left alone.
    pub fn replay(
        &self,
        actor: &Actor,
        id: &WebhookId,
        request: &ReplayRequest,
    ) -> Result<ReplayResult> {
        let sub = self.own_subscription(actor, id)?;
        if sub.status == WebhookStatus::Paused {
            return Err(Error::conflict(
                "webhook_paused",
                "the webhook is paused; resume it before replaying",
            ));
        }
        self.replay_target(&sub.store_id, &sub.target(), request)
    }

    /// Queues failed and pending deliveries to `target` again (webhook or component), due now,
    /// with a fresh retry schedule. The caller has checked ownership and that the target is active.
    pub fn replay_target(
        &self,
        store: &StoreId,
        target: &TargetRef,
        request: &ReplayRequest,
    ) -> Result<ReplayResult> {
        let keys: Vec<String> = match (&request.event_id, &request.since) {
            (Some(event), None) => {
                let event = event
                    .parse()
                    .map_err(|_| Error::invalid("event_id", "must be an event id (`evt_…`)"))?;
                let key = delivery_key(store, target, &event);
                let delivery = self
                    .db
                    .read::<Delivery>(&key)?
                    .ok_or_else(|| Error::not_found("event", &event))?;
                if delivery.status == DeliveryStatus::Succeeded {
                    return Err(Error::Conflict {
                        code: "delivery_not_failed",
                        message: format!(
                            "the delivery of `{event}` to this target succeeded; a replay re-sends failed and pending deliveries"
                        ),
                        field: Some("event_id".into()),
                    });
                }
                vec![key]
            }
            (None, Some(since)) => {
                let since: Timestamp = since.parse().map_err(|_| {
                    Error::invalid(
                        "since",
                        "must be an RFC 3339 time such as 2026-01-05T00:00:00Z",
                    )
                })?;
                let prefix = deliveries_prefix(store, target);
                let mut keys = Vec::new();
                self.db.scan_all(&prefix, |key, d: Delivery| {
                    if d.status != DeliveryStatus::Succeeded && d.event_created_at >= since {
                        keys.push(key);
                    }
                    Ok(())
                })?;
                keys
            }
            _ => {
                return Err(Error::invalid(
                    "body",
                    "give exactly one of `event_id` (one event) or `since` (every failed event since a time)",
                ));
            }
        };
        let now = self.now();
        let mut requeued = 0;
        for chunk in keys.chunks(100) {
            requeued += self.db.tx(|tx| {
                let mut n = 0;
                for key in chunk {
                    if crate::service::deliveries::queue::requeue(tx, key, now, |s| {
                        s != DeliveryStatus::Succeeded
                    })? {
                        n += 1;
                    }
                }
                Ok(n)
            })?;
        }
        Ok(ReplayResult { requeued })
    }

    /// Attempts one delivery (named by its event) again at once, with a fresh retry schedule,
    /// whatever its status: a failed or succeeded one is queued again, a pending one is moved to
    /// now (not duplicated).
    pub fn resend(&self, actor: &Actor, id: &WebhookId, event: &str) -> Result<Delivery> {
        let sub = self.own_subscription(actor, id)?;
        let event: crate::model::ids::EventId = event
            .parse()
            .map_err(|_| Error::invalid("event_id", "must be an event id (`evt_…`)"))?;
        if sub.status == WebhookStatus::Paused {
            return Err(paused_conflict("resending"));
        }
        let key = delivery_key(&sub.store_id, &sub.target(), &event);
        let now = self.now();
        self.db.tx(|tx| {
            if !crate::service::deliveries::queue::requeue(tx, &key, now, |_| true)? {
                return Err(Error::not_found("event", &event));
            }
            tx.read::<Delivery>(&key)?
                .ok_or_else(|| Error::not_found("event", &event))
        })
    }

    /// The subscription's attempt log, newest first.
    pub fn list_attempts(
        &self,
        actor: &Actor,
        id: &WebhookId,
        page: &PageRequest,
    ) -> Result<Page<Attempt>> {
        let sub = self.own_subscription(actor, id)?;
        self.list_target_attempts(&sub.store_id, &sub.target(), page)
    }

    /// A target's attempt log (webhook or component), newest first.
    pub fn list_target_attempts(
        &self,
        store: &StoreId,
        target: &TargetRef,
        page: &PageRequest,
    ) -> Result<Page<Attempt>> {
        let prefix = attempts_prefix(store, target);
        Listing {
            prefix: &prefix,
            list_id: &prefix,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, page, |_| true)
    }

    /// The subscription's deliveries (one per event), newest event first.
    pub fn list_deliveries(
        &self,
        actor: &Actor,
        id: &WebhookId,
        filter: &DeliveryFilter,
    ) -> Result<Page<Delivery>> {
        let sub = self.own_subscription(actor, id)?;
        let status = status_filter(filter.status.as_deref())?;
        self.list_target_deliveries(&sub.store_id, &sub.target(), status, filter)
    }

    /// A target's deliveries (webhook or component), newest event first, of one status or all.
    pub fn list_target_deliveries(
        &self,
        store: &StoreId,
        target: &TargetRef,
        status: Option<DeliveryStatus>,
        filter: &DeliveryFilter,
    ) -> Result<Page<Delivery>> {
        let page = PageRequest::parse(&crate::service::PageParams {
            limit: filter.limit.clone(),
            cursor: filter.cursor.clone(),
        })?;
        let prefix = deliveries_prefix(store, target);
        let list_id = format!("{prefix}?status={:?}", status);
        Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: true,
        }
        .page(&self.db, &self.cursors, &page, |d: &Delivery| {
            status.is_none_or(|s| d.status == s)
        })
    }

    /// One delivery to a target and its attempts, oldest first (at most the last 100).
    pub fn target_delivery(
        &self,
        store: &StoreId,
        target: &TargetRef,
        event: &crate::model::ids::EventId,
    ) -> Result<(Delivery, Vec<Attempt>)> {
        let delivery: Delivery = self
            .db
            .read(&delivery_key(store, target, event))?
            .ok_or_else(|| Error::not_found("delivery", event))?;
        let skip = delivery.attempt_ids.len().saturating_sub(100);
        let mut attempts = Vec::new();
        for id in &delivery.attempt_ids[skip..] {
            if let Some(a) = self.db.read::<Attempt>(&attempt_key(store, target, id))? {
                attempts.push(a);
            }
        }
        Ok((delivery, attempts))
    }

    /// The event a delivery carries, if it has not expired.
    pub fn stored_event(
        &self,
        store: &StoreId,
        id: &crate::model::ids::EventId,
    ) -> Result<Option<Event>> {
        self.db.read(&event_key(store, id))
    }
}
