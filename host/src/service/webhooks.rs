//! Webhook subscriptions: create, list, read, change, delete, resume, replay, and their delivery
//! and attempt logs. A subscription belongs to the installation that made it (or whose manifest
//! declared it): another installation, even in the same store, gets 404.

use crate::model::webhook::DeliveryFilter;
use crate::model::webhook::MAX_SECRET_BYTES;
use crate::model::webhook::MAX_URL_BYTES;
use crate::model::webhook::MAX_WEBHOOKS_PER_INSTALLATION;
use crate::model::webhook::MIN_SECRET_BYTES;
use crate::model::webhook::NewWebhook;
use crate::model::webhook::ReplayRequest;
use crate::model::webhook::ReplayResult;
use crate::model::webhook::RotateSecret;
use crate::model::webhook::SECRET_OVERLAP;
use crate::model::webhook::SecretRotated;
use crate::model::webhook::Subscription;
use crate::model::webhook::TestEventRequest;
use crate::model::webhook::Webhook;
use crate::model::webhook::WebhookPatch;
use crate::model::webhook::WebhookSource;
use crate::model::webhook::WebhookStatus;
use std::collections::BTreeSet;

use jiff::Timestamp;
use reqwest::Url;

use super::Service;
use crate::model::delivery::{
    Attempt, Delivery, DeliveryStatus, TargetRef, attempts_prefix, deliveries_prefix, delivery_key,
};
use crate::model::error::{Error, Result};
use crate::model::event::{Event, event_key};
use crate::model::ids::{InstallationId, StoreId, WebhookId};
use crate::model::plugin::{Manifest, ManifestWebhook};
use crate::model::scopes::{EventType, Scope};
use crate::model::store::Installation;
use crate::service::auth::Actor;
use crate::service::pagination::{Listing, Page, PageRequest};
use crate::service::plugins::parse_events;
use crate::storage::Tx;

/// Checks a webhook URL's form: `http` or `https`, with a host, at most 2048 bytes.
pub fn validate_url(field: &str, raw: &str) -> Result<Url> {
    if raw.len() > MAX_URL_BYTES {
        return Err(Error::invalid(
            field,
            format!("must be at most {MAX_URL_BYTES} bytes"),
        ));
    }
    let url =
        Url::parse(raw).map_err(|e| Error::invalid(field, format!("`{raw}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Error::invalid(
            field,
            format!(
                "must be an http or https URL; got scheme `{}`",
                url.scheme()
            ),
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(field, "must name a host"));
    }
    Ok(url)
}

/// Checks a signing secret's length.
pub fn validate_secret(field: &str, secret: &str) -> Result<()> {
    if (MIN_SECRET_BYTES..=MAX_SECRET_BYTES).contains(&secret.len()) {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("must be {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes long"),
        ))
    }
}

/// Parses event names (no duplicates) and checks that `scopes` allow receiving each.
pub fn parse_subscribed_events(
    field: &str,
    events: &[String],
    scopes: &BTreeSet<Scope>,
    missing: impl Fn(usize, Scope) -> Error,
) -> Result<Vec<EventType>> {
    let parsed = parse_events(field, events)?;
    let mut seen = BTreeSet::new();
    for (i, event) in parsed.iter().enumerate() {
        if !seen.insert(*event) {
            return Err(Error::invalid(
                format!("{field}[{i}]"),
                format!("`{event}` is listed twice"),
            ));
        }
        if let Some(scope) = event.required_scope()
            && !scopes.contains(&scope)
        {
            return Err(missing(i, scope));
        }
    }
    Ok(parsed)
}

/// Checks the `webhooks` of a manifest: URL form, events (each within the manifest's scopes),
/// secret length.
pub fn validate_manifest_webhooks(at: &str, manifest: &Manifest) -> Result<()> {
    let scopes: BTreeSet<Scope> = manifest
        .scopes
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    for (i, hook) in manifest.webhooks.iter().enumerate() {
        let field = format!("{at}.webhooks[{i}]");
        validate_url(&format!("{field}.url"), &hook.url)?;
        parse_subscribed_events(
            &format!("{field}.events"),
            &hook.events,
            &scopes,
            |j, scope| {
                Error::invalid(
                    format!("{field}.events[{j}]"),
                    format!(
                        "receiving this event needs the `{scope}` scope, which the manifest does not declare"
                    ),
                )
            },
        )?;
        validate_secret(&format!("{field}.secret"), &hook.secret)?;
    }
    Ok(())
}

/// Creates the manifest's subscriptions for a new installation, inside the install transaction.
pub fn create_manifest_webhooks(
    tx: &mut Tx<'_>,
    installation: &Installation,
    webhooks: &[ManifestWebhook],
    now: Timestamp,
) -> Result<()> {
    for hook in webhooks {
        let events = hook
            .events
            .iter()
            .map(|e| e.parse::<EventType>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| anyhow::anyhow!("a published manifest has a bad event: {e}"))?;
        let sub = Subscription {
            id: WebhookId::generate(now),
            store_id: installation.store_id.clone(),
            installation_id: installation.id.clone(),
            url: hook.url.clone(),
            events,
            secret: hook.secret.clone(),
            status: WebhookStatus::Active,
            source: WebhookSource::Manifest,
            created_at: now,
            updated_at: now,
            paused_at: None,
            pause_reason: None,
            previous_secret: None,
            previous_secret_until: None,
        };
        insert(tx, &sub)?;
    }
    Ok(())
}

/// Removes every subscription of an installation, inside the uninstall transaction. Their queued
/// deliveries are dropped when they come due; their records expire with their events.
pub fn remove_installation_webhooks(
    tx: &mut Tx<'_>,
    store: &StoreId,
    installation: &InstallationId,
) -> Result<()> {
    let index = Subscription::by_installation_key(store, installation);
    let ids: Vec<WebhookId> = tx.read(&index)?.unwrap_or_default();
    for id in ids {
        tx.remove(&Subscription::key(store, &id))?;
    }
    tx.remove(&index)
}

fn insert(tx: &mut Tx<'_>, sub: &Subscription) -> Result<()> {
    let index = Subscription::by_installation_key(&sub.store_id, &sub.installation_id);
    let mut ids: Vec<WebhookId> = tx.read(&index)?.unwrap_or_default();
    if ids.len() >= MAX_WEBHOOKS_PER_INSTALLATION {
        return Err(Error::conflict(
            "too_many_webhooks",
            format!(
                "an installation has at most {MAX_WEBHOOKS_PER_INSTALLATION} webhook subscriptions"
            ),
        ));
    }
    ids.push(sub.id.clone());
    tx.write(&index, &ids)?;
    tx.write(&Subscription::key(&sub.store_id, &sub.id), sub)
}

fn paused_conflict(what: &str) -> Error {
    Error::conflict(
        "webhook_paused",
        format!("the webhook is paused; resume it before {what}"),
    )
}

fn missing_scope(_: usize, scope: Scope) -> Error {
    Error::MissingScope {
        scope: scope.as_str(),
    }
}

impl Service {
    async fn vet_url(&self, field: &str, raw: &str) -> Result<Url> {
        let url = validate_url(field, raw)?;
        self.network
            .check(&url)
            .await
            .map_err(|refusal| Error::invalid(field, refusal.to_string()))?;
        Ok(url)
    }

    /// Subscribes the caller's installation. Each event needs the read scope of its resource.
    pub async fn create_webhook(&self, actor: &Actor, new: NewWebhook) -> Result<Webhook> {
        validate_url("url", &new.url)?;
        let events = parse_subscribed_events("events", &new.events, &actor.scopes, missing_scope)?;
        validate_secret("secret", &new.secret)?;
        self.vet_url("url", &new.url).await?;
        let now = self.now();
        let sub = Subscription {
            id: WebhookId::generate(now),
            store_id: actor.store_id().clone(),
            installation_id: actor.installation.clone(),
            url: new.url,
            events,
            secret: new.secret,
            status: WebhookStatus::Active,
            source: WebhookSource::Api,
            created_at: now,
            updated_at: now,
            paused_at: None,
            pause_reason: None,
            previous_secret: None,
            previous_secret_until: None,
        };
        self.db.tx(|tx| insert(tx, &sub))?;
        Ok(sub.view())
    }

    /// The caller's subscription `id`; another installation's is not found.
    pub fn own_subscription(&self, actor: &Actor, id: &WebhookId) -> Result<Subscription> {
        self.db
            .read::<Subscription>(&Subscription::key(actor.store_id(), id))?
            .filter(|s| s.installation_id == actor.installation)
            .ok_or_else(|| Error::not_found("webhook", id))
    }

    /// The caller's subscriptions, oldest first.
    pub fn list_webhooks(&self, actor: &Actor, page: &PageRequest) -> Result<Page<Webhook>> {
        let prefix = Subscription::store_prefix(actor.store_id());
        let list_id = format!("{prefix}{}", actor.installation);
        let page = Listing {
            prefix: &prefix,
            list_id: &list_id,
            newest_first: false,
        }
        .page(&self.db, &self.cursors, page, |s: &Subscription| {
            s.installation_id == actor.installation
        })?;
        Ok(page.map(|s| s.view()))
    }

    /// Changes URL, events or secret.
    pub async fn update_webhook(
        &self,
        actor: &Actor,
        id: &WebhookId,
        patch: WebhookPatch,
    ) -> Result<Webhook> {
        self.own_subscription(actor, id)?;
        if let Some(url) = &patch.url {
            validate_url("url", url)?;
        }
        let events = match &patch.events {
            Some(events) => Some(parse_subscribed_events(
                "events",
                events,
                &actor.scopes,
                missing_scope,
            )?),
            None => None,
        };
        if let Some(secret) = &patch.secret {
            validate_secret("secret", secret)?;
        }
        if let Some(url) = &patch.url {
            self.vet_url("url", url).await?;
        }
        let now = self.now();
        let sub = self.modify(actor, id, |sub| {
            if let Some(url) = &patch.url {
                sub.url = url.clone();
            }
            if let Some(events) = &events {
                sub.events = events.clone();
            }
            if let Some(secret) = &patch.secret {
                // An immediate switch, without overlap (`rotate-secret` has one).
                sub.secret = secret.clone();
                sub.previous_secret = None;
                sub.previous_secret_until = None;
            }
            sub.updated_at = now;
            Ok(())
        })?;
        Ok(sub.view())
    }

    fn modify(
        &self,
        actor: &Actor,
        id: &WebhookId,
        mut change: impl FnMut(&mut Subscription) -> Result<()>,
    ) -> Result<Subscription> {
        let key = Subscription::key(actor.store_id(), id);
        self.db.tx(|tx| {
            let mut sub = tx
                .read::<Subscription>(&key)?
                .filter(|s| s.installation_id == actor.installation)
                .ok_or_else(|| Error::not_found("webhook", id))?;
            change(&mut sub)?;
            tx.write(&key, &sub)?;
            Ok(sub)
        })
    }

    /// Deletes a subscription. Its queued deliveries are dropped.
    pub fn delete_webhook(&self, actor: &Actor, id: &WebhookId) -> Result<()> {
        let key = Subscription::key(actor.store_id(), id);
        self.db.tx(|tx| {
            tx.read::<Subscription>(&key)?
                .filter(|s| s.installation_id == actor.installation)
                .ok_or_else(|| Error::not_found("webhook", id))?;
            tx.remove(&key)?;
            let index = Subscription::by_installation_key(actor.store_id(), &actor.installation);
            let mut ids: Vec<WebhookId> = tx.read(&index)?.unwrap_or_default();
            ids.retain(|i| i != id);
            tx.write(&index, &ids)
        })
    }

    /// Resumes a paused subscription: new events are delivered again. Events that failed while
    /// it was paused stay failed until replayed. Resuming an active subscription changes nothing.
    pub fn resume_webhook(&self, actor: &Actor, id: &WebhookId) -> Result<Webhook> {
        let now = self.now();
        let sub = self.modify(actor, id, |sub| {
            if sub.status == WebhookStatus::Paused {
                sub.status = WebhookStatus::Active;
                sub.paused_at = None;
                sub.pause_reason = None;
                sub.updated_at = now;
            }
            Ok(())
        })?;
        Ok(sub.view())
    }

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

    /// Sends a synthetic event of one of the subscription's types (default: its first) to this
    /// subscription only, through the delivery engine: signed, retried, logged, marked with
    /// `X-Service-Test: true`. It is not in the store's event log and reaches no other target.
    pub fn send_test_event(
        &self,
        actor: &Actor,
        id: &WebhookId,
        request: &TestEventRequest,
    ) -> Result<Delivery> {
        let sub = self.own_subscription(actor, id)?;
        if sub.status == WebhookStatus::Paused {
            return Err(paused_conflict("sending a test event"));
        }
        let kind = match &request.event_type {
            None => *sub
                .events
                .first()
                .ok_or_else(|| Error::invalid("event_type", "the subscription has no events"))?,
            Some(raw) => {
                let kind: EventType = raw.parse().map_err(|_| {
                    Error::invalid("event_type", format!("`{raw}` is not an event type"))
                })?;
                if !sub.events.contains(&kind) {
                    return Err(Error::invalid(
                        "event_type",
                        format!(
                            "the subscription does not receive `{kind}`; it receives {}",
                            sub.events
                                .iter()
                                .map(|e| format!("`{e}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                kind
            }
        };
        let now = self.now();
        let installation: Installation = self
            .db
            .read(&Installation::key(&sub.store_id, &sub.installation_id))?
            .ok_or_else(|| Error::not_found("webhook", id))?;
        let event = Event::new(
            &actor.store,
            crate::service::events::examples::example_data(kind, &installation, now),
            now,
        );
        let target = sub.target();
        self.db
            .tx(|tx| crate::service::deliveries::queue::enqueue_test(tx, &event, &target, now))
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

    /// Replaces the signing secret with an overlap: from now on deliveries are signed with the
    /// new secret, and for 24 hours also with the one it replaces (in
    /// `X-Service-Signature-Previous`). A rotation within the overlap drops the older secret.
    pub fn rotate_secret(
        &self,
        actor: &Actor,
        id: &WebhookId,
        request: &RotateSecret,
    ) -> Result<SecretRotated> {
        validate_secret("secret", &request.secret)?;
        let now = self.now();
        let until = now
            .checked_add(SECRET_OVERLAP)
            .map_err(|e| Error::Internal(anyhow::anyhow!("time out of range: {e}")))?;
        let sub = self.modify(actor, id, |sub| {
            if sub.secret == request.secret {
                return Err(Error::invalid(
                    "secret",
                    "must differ from the current secret",
                ));
            }
            let old = std::mem::replace(&mut sub.secret, request.secret.clone());
            sub.previous_secret = Some(old);
            sub.previous_secret_until = Some(until);
            sub.updated_at = now;
            Ok(())
        })?;
        Ok(SecretRotated {
            webhook: sub.view(),
            previous_secret_expires_at: until,
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
        let status = match filter.status.as_deref() {
            None => None,
            Some("pending") => Some(DeliveryStatus::Pending),
            Some("succeeded") => Some(DeliveryStatus::Succeeded),
            Some("failed") => Some(DeliveryStatus::Failed),
            Some(other) => {
                return Err(Error::invalid(
                    "status",
                    format!("`{other}` is not one of pending, succeeded, failed"),
                ));
            }
        };
        let page = PageRequest::parse(&super::PageParams {
            limit: filter.limit.clone(),
            cursor: filter.cursor.clone(),
        })?;
        let prefix = deliveries_prefix(&sub.store_id, &sub.target());
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

    /// The event a delivery carries, if it has not expired.
    pub fn stored_event(
        &self,
        store: &StoreId,
        id: &crate::model::ids::EventId,
    ) -> Result<Option<Event>> {
        self.db.read(&event_key(store, id))
    }
}
