//! Subscriptions: create, list, change, delete, resume, and rotate the signing secret.

use reqwest::Url;

use super::{insert, missing_scope, parse_subscribed_events, validate_secret, validate_url};
use crate::model::error::{Error, Result};
use crate::model::ids::WebhookId;
use crate::model::webhook::{
    NewWebhook, RotateSecret, SECRET_OVERLAP, SecretRotated, Subscription, Webhook, WebhookPatch,
    WebhookSource, WebhookStatus,
};
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::pagination::{Listing, Page, PageRequest};

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
}
