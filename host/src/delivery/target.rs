//! Targets: who receives deliveries, whether they are active, and pausing them. The one place
//! that knows what kinds of target exist: webhook subscriptions and installed components.

use jiff::Timestamp;

use super::records::TargetRef;
use crate::error::Result;
use crate::ids::{InstallationId, StoreId};
use crate::service::events::Event;
use crate::service::plugins::Plugin;
use crate::service::scopes::EventType;
use crate::service::stores::{Installation, InstallationStatus};
use crate::service::webhooks::{Subscription, WebhookStatus};
use crate::storage::{Db, Tx};

/// An installed component, loaded for an attempt.
#[derive(Debug, Clone)]
pub struct ComponentTarget {
    /// The installation (its identity is the actor of the plugin's host calls).
    pub installation: Installation,
    /// The installed version of the plugin.
    pub plugin: Plugin,
}

/// A target, loaded for an attempt.
#[derive(Debug, Clone)]
pub enum Target {
    /// POST the envelope, signed with the subscription's secret, to its URL.
    Webhook(Box<Subscription>),
    /// Run the installation's component on the event, in a fresh instance.
    Component(Box<ComponentTarget>),
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

/// A lifecycle event (`plugin.*`) concerns one installation: only that installation's targets
/// receive it. Other events concern the whole store.
fn concerns(event: &Event, installation: &InstallationId) -> bool {
    match event.kind {
        EventType::PluginInstalled | EventType::PluginConfigured | EventType::PluginUninstalled => {
            event.data["installation"]["id"].as_str() == Some(installation.as_str())
        }
        _ => true,
    }
}

/// Whether an installation's component takes `event`: it subscribed to it, and the installation
/// is active, or the event is its own `plugin.uninstalled` (the last event it receives).
fn component_takes(installation: &Installation, event: &Event) -> bool {
    installation.component_events.contains(&event.kind)
        && concerns(event, &installation.id)
        && (installation.status == InstallationStatus::Active
            || event.kind == EventType::PluginUninstalled)
}

/// Loads a target for an attempt at `event`.
pub fn load(db: &Db, store: &StoreId, target: &TargetRef, event: &Event) -> Result<TargetState> {
    Ok(match target {
        TargetRef::Webhook(id) => match db.read::<Subscription>(&Subscription::key(store, id))? {
            None => TargetState::Gone,
            Some(sub) if sub.status == WebhookStatus::Paused => TargetState::Paused,
            Some(sub) => TargetState::Active(Target::Webhook(Box::new(sub))),
        },
        TargetRef::Component(id) => match db.read::<Installation>(&Installation::key(store, id))? {
            Some(i) if component_takes(&i, event) => {
                if i.component_paused_at.is_some() {
                    TargetState::Paused
                } else {
                    match db.read::<Plugin>(&Plugin::version_key(&i.plugin, &i.version))? {
                        Some(plugin) => {
                            TargetState::Active(Target::Component(Box::new(ComponentTarget {
                                installation: i,
                                plugin,
                            })))
                        }
                        None => TargetState::Gone,
                    }
                }
            }
            _ => TargetState::Gone,
        },
    })
}

/// The targets in `store` that may want `event`, read outside a transaction: the fan-out checks
/// each again inside its transaction with [`wants_in_tx`].
pub fn candidates(db: &Db, store: &StoreId, event: &Event) -> Result<Vec<TargetRef>> {
    let mut out = Vec::new();
    scan(
        db,
        &Subscription::store_prefix(store),
        |sub: Subscription| {
            if sub.events.contains(&event.kind) && concerns(event, &sub.installation_id) {
                out.push(sub.target());
            }
        },
    )?;
    scan(db, &format!("inst/{store}/"), |i: Installation| {
        if component_takes(&i, event) {
            out.push(TargetRef::Component(i.id));
        }
    })?;
    Ok(out)
}

fn scan<T: serde::de::DeserializeOwned>(db: &Db, prefix: &str, mut f: impl FnMut(T)) -> Result<()> {
    let mut after: Option<String> = None;
    loop {
        let batch: Vec<(String, T)> = db.list(prefix, after.as_deref(), false, 256)?;
        let done = batch.len() < 256;
        for (key, item) in batch {
            f(item);
            after = Some(key);
        }
        if done {
            return Ok(());
        }
    }
}

/// Inside a transaction: `None` when the target is gone or no longer wants `event`, else whether
/// it is active.
pub fn wants_in_tx(
    tx: &mut Tx<'_>,
    store: &StoreId,
    target: &TargetRef,
    event: &Event,
) -> Result<Option<bool>> {
    Ok(match target {
        TargetRef::Webhook(id) => tx
            .read::<Subscription>(&Subscription::key(store, id))?
            .filter(|sub| sub.events.contains(&event.kind) && concerns(event, &sub.installation_id))
            .map(|sub| sub.status == WebhookStatus::Active),
        TargetRef::Component(id) => tx
            .read::<Installation>(&Installation::key(store, id))?
            .filter(|i| component_takes(i, event))
            .map(|i| i.component_paused_at.is_none()),
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
        TargetRef::Component(id) => {
            let key = Installation::key(store, id);
            let Some(mut installation) = tx.read::<Installation>(&key)?.filter(|i| {
                i.status == InstallationStatus::Active && i.component_paused_at.is_none()
            }) else {
                return Ok(None);
            };
            installation.component_paused_at = Some(now);
            installation.component_pause_reason = Some(reason.to_owned());
            tx.write(&key, &installation)?;
            let Some(plugin) = tx.read::<Plugin>(&Plugin::version_key(
                &installation.plugin,
                &installation.version,
            ))?
            else {
                return Ok(None);
            };
            Ok(Some(Target::Component(Box::new(ComponentTarget {
                installation,
                plugin,
            }))))
        }
    }
}
