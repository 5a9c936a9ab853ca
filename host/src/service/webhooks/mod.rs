//! Webhook subscriptions and what plugins do with their deliveries. A subscription belongs to the
//! installation that made it (or whose manifest declared it): another installation, even in the
//! same store, gets 404.
//!
//! - this file: the checks of a subscription's fields, the manifest's subscriptions (created at
//!   install, removed at uninstall), and who owns a subscription;
//! - [`subscriptions`]: create, list, change, delete, resume, rotate the secret;
//! - [`deliveries`]: the delivery and attempt logs, replay and resend;
//! - [`test_events`]: synthetic test events and their example data.

mod deliveries;
pub use deliveries::status_filter;
mod subscriptions;
mod test_events;

use std::collections::BTreeSet;

use jiff::Timestamp;
use reqwest::Url;

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::ids::{InstallationId, StoreId, WebhookId};
use crate::model::plugin::{Manifest, ManifestWebhook};
use crate::model::scopes::{EventType, Scope};
use crate::model::store::Installation;
use crate::model::webhook::{
    MAX_SECRET_BYTES, MAX_URL_BYTES, MAX_WEBHOOKS_PER_INSTALLATION, MIN_SECRET_BYTES, Subscription,
    WebhookSource, WebhookStatus,
};
use crate::service::auth::Actor;
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
    /// The caller's subscription `id`; another installation's is not found.
    pub fn own_subscription(&self, actor: &Actor, id: &WebhookId) -> Result<Subscription> {
        self.db
            .read::<Subscription>(&Subscription::key(actor.store_id(), id))?
            .filter(|s| s.installation_id == actor.installation)
            .ok_or_else(|| Error::not_found("webhook", id))
    }
}
