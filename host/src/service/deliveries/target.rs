//! Targets: who receives deliveries, whether they are active, and pausing them. The one place
//! that knows what kinds of target exist: webhook subscriptions and installed components.

use crate::model::clock::format_ts;
use crate::model::mail::Mail;
use crate::model::store::Store;
use jiff::Timestamp;

use super::index::StoreTargets;
use crate::model::delivery::TargetRef;
use crate::model::error::Result;
use crate::model::event::Event;
use crate::model::ids::{InstallationId, StoreId};
use crate::model::plugin::Plugin;
use crate::model::scopes::{EventType, Scope};
use crate::model::store::{Installation, InstallationStatus};
use crate::model::webhook::{Subscription, WebhookStatus};
use crate::service::Service;
use crate::storage::Tx;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// An installed component, loaded for an attempt (shared with the store's targets in memory).
#[derive(Debug, Clone)]
pub struct ComponentTarget {
    /// The installation (its identity is the actor of the plugin's host calls).
    pub installation: Arc<Installation>,
    /// The installed version of the plugin.
    pub plugin: Arc<Plugin>,
}

/// A target, loaded for an attempt.
#[derive(Debug, Clone)]
pub enum Target {
    /// POST the envelope, signed with the subscription's secret, to its URL.
    Webhook(Arc<Subscription>),
    /// Run the installation's component on the event, in a fresh instance.
    Component(Box<ComponentTarget>),
}

/// What a target is now.
#[derive(Debug, Clone)]
pub enum TargetState {
    /// It receives deliveries; with the scopes of its installation, which decide what the event
    /// may show it.
    Active(Target, BTreeSet<Scope>),
    /// It is paused: deliveries to it fail without an attempt.
    Paused,
    /// It was deleted (or its installation removed).
    Gone,
}

/// A lifecycle event (`plugin.*`) concerns one installation: only that installation's targets
/// receive it. Other events concern the whole store.
fn concerns(event: &Event, installation: &InstallationId) -> bool {
    event
        .data
        .installation()
        .is_none_or(|about| &about.id == installation)
}

/// Whether an installation's component takes `event`: it subscribed to it, and the installation
/// is active, or the event is its own `plugin.uninstalled` (the last event it receives).
fn component_takes(installation: &Installation, event: &Event) -> bool {
    installation.component_events.contains(&event.kind())
        && concerns(event, &installation.id)
        && (installation.status == InstallationStatus::Active
            || event.kind() == EventType::PluginUninstalled)
}

/// Loads a target for an attempt at `event`, from the store's targets
/// ([`TargetIndex::for_attempt`](super::index::TargetIndex::for_attempt)). Where hosts share the
/// database, a target that copy shows gone or paused is read again from storage: another host's
/// change (a subscription just made, or resumed) reaches the copy only with its notice, while the
/// fan-out, which reads afresh, may have made the delivery for it already.
pub fn load(
    service: &Service,
    store: &StoreId,
    target: &TargetRef,
    event: &Event,
) -> Result<TargetState> {
    let targets = service.targets.for_attempt(&service.db, store)?;
    let state = state_in(&targets, target, event);
    if service.db.is_shared() && !matches!(state, TargetState::Active(..)) {
        let fresh = service.targets.fresh(&service.db, store)?;
        return Ok(state_in(&fresh, target, event));
    }
    Ok(state)
}

/// What `targets` say of `target` for an attempt at `event`.
fn state_in(targets: &StoreTargets, target: &TargetRef, event: &Event) -> TargetState {
    match target {
        TargetRef::Webhook(id) => match targets.subscription(id) {
            None => TargetState::Gone,
            Some(sub) if sub.status == WebhookStatus::Paused => TargetState::Paused,
            Some(sub) => {
                let scopes = targets
                    .installation(&sub.installation_id)
                    .map(|i| i.scopes.iter().copied().collect())
                    .unwrap_or_default();
                TargetState::Active(Target::Webhook(Arc::clone(sub)), scopes)
            }
        },
        TargetRef::Component(id) => match targets.installation(id) {
            Some(i) if component_takes(i, event) => {
                if i.component_paused_at.is_some() {
                    TargetState::Paused
                } else {
                    match targets.plugin_of(i) {
                        Some(plugin) => {
                            let scopes = i.scopes.iter().copied().collect();
                            TargetState::Active(
                                Target::Component(Box::new(ComponentTarget {
                                    installation: Arc::clone(i),
                                    plugin: Arc::clone(plugin),
                                })),
                                scopes,
                            )
                        }
                        None => TargetState::Gone,
                    }
                }
            }
            _ => TargetState::Gone,
        },
    }
}

/// The targets of a store (`targets`, from [`TargetIndex::of`](super::index::TargetIndex::of))
/// that may want `event`: its subscriptions, then its components. The fan-out checks each again
/// inside its transaction with [`TargetsRead::wants`].
pub fn candidates(targets: &StoreTargets, event: &Event) -> Vec<TargetRef> {
    let subscriptions = targets
        .subscriptions()
        .filter(|sub| sub.events.contains(&event.kind()) && concerns(event, &sub.installation_id))
        .map(Subscription::target);
    let components = targets
        .installations()
        .filter(|i| component_takes(i, event))
        .map(|i| TargetRef::Component(i.id.clone()));
    subscriptions.chain(components).collect()
}

/// The key of the record a target is: its subscription, or its installation.
pub fn record_key(store: &StoreId, target: &TargetRef) -> String {
    match target {
        TargetRef::Webhook(id) => Subscription::key(store, id),
        TargetRef::Component(id) => Installation::key(store, id),
    }
}

/// The targets one fan-out transaction has read, each read and decoded once: a transaction sees
/// one version of a record, so a second read of a target (the next event of a burst to the same
/// subscription) would only decode the same bytes again. Made afresh inside each run of the
/// transaction's closure (a retried transaction reads again).
#[derive(Debug, Default)]
pub struct TargetsRead(HashMap<String, Option<TargetRecord>>);

/// A target's record as a transaction read it.
#[derive(Debug)]
enum TargetRecord {
    Webhook(Subscription),
    Component(Installation),
}

impl TargetsRead {
    /// Inside the transaction `tx`: `None` when the target is gone or no longer wants `event`,
    /// else whether it is active.
    pub fn wants(
        &mut self,
        tx: &mut Tx<'_>,
        store: &StoreId,
        target: &TargetRef,
        event: &Event,
    ) -> Result<Option<bool>> {
        let record = match self.0.entry(record_key(store, target)) {
            Entry::Occupied(read) => read.into_mut(),
            Entry::Vacant(unread) => {
                let record = match target {
                    TargetRef::Webhook(_) => tx
                        .read::<Subscription>(unread.key())?
                        .map(TargetRecord::Webhook),
                    TargetRef::Component(_) => tx
                        .read::<Installation>(unread.key())?
                        .map(TargetRecord::Component),
                };
                unread.insert(record)
            }
        };
        Ok(match record {
            Some(TargetRecord::Webhook(sub))
                if sub.events.contains(&event.kind()) && concerns(event, &sub.installation_id) =>
            {
                Some(sub.status == WebhookStatus::Active)
            }
            Some(TargetRecord::Component(i)) if component_takes(i, event) => {
                Some(i.component_paused_at.is_none())
            }
            _ => None,
        })
    }
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
            Ok(Some(Target::Webhook(Arc::new(sub))))
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
                installation: Arc::new(installation),
                plugin: Arc::new(plugin),
            }))))
        }
    }
}

/// A target that was just paused, with the notice to its owner (none when the plugin is gone).
#[derive(Debug, Clone)]
pub struct Paused {
    /// The target, as paused.
    pub target: Target,
    /// The mail to the plugin's contact.
    pub notice: Option<Mail>,
}

/// The notice to the owner of a target that was just paused.
pub fn pause_notice(tx: &mut Tx<'_>, target: &Target) -> Result<Option<Mail>> {
    match target {
        Target::Webhook(sub) => webhook_paused_notice(tx, sub),
        Target::Component(component) => component_paused_notice(tx, component),
    }
}

fn store_domain(tx: &mut Tx<'_>, store: &StoreId) -> Result<String> {
    Ok(tx
        .read::<Store>(&Store::key(store))?
        .map(|s| s.domain)
        .unwrap_or_default())
}

fn webhook_paused_notice(tx: &mut Tx<'_>, sub: &Subscription) -> Result<Option<Mail>> {
    let installation: Option<Installation> =
        tx.read(&Installation::key(&sub.store_id, &sub.installation_id))?;
    let plugin: Option<Plugin> = match &installation {
        Some(i) => tx.read(&Plugin::key(&i.plugin))?,
        None => None,
    };
    let Some(plugin) = plugin else {
        return Ok(None); // Uninstalled meanwhile: nobody to tell.
    };
    let domain = store_domain(tx, &sub.store_id)?;
    Ok(Some(Mail {
        to: plugin.manifest.contact_email.clone(),
        subject: format!("[commerce-host] webhook {} paused for {domain}", sub.id),
        body: format!(
            "Your plugin `{plugin}`'s webhook subscription {id} to {url} in store {domain} \
             ({store}) was paused at {at}.\n\nWhy: {reason}\n\nWhile it is paused it receives \
             nothing; its events are recorded as failed deliveries and kept for 30 days.\n\
             Fix the receiver, then resume the subscription (POST /v1/webhooks/{id}/resume) \
             and re-send what it missed (POST /v1/webhooks/{id}/replay with \
             {{\"since\": \"<time>\"}}).\n",
            plugin = plugin.name,
            id = sub.id,
            url = sub.url,
            store = sub.store_id,
            at = sub.paused_at.map(format_ts).unwrap_or_default(),
            reason = sub.pause_reason.as_deref().unwrap_or("retries ran out"),
        ),
    }))
}

fn component_paused_notice(tx: &mut Tx<'_>, component: &ComponentTarget) -> Result<Option<Mail>> {
    let i = &component.installation;
    tracing::warn!(installation = %i.id, plugin = i.plugin, "component paused");
    let domain = store_domain(tx, &i.store_id)?;
    Ok(Some(Mail {
        to: component.plugin.manifest.contact_email.clone(),
        subject: format!("[commerce-host] plugin {} paused for {domain}", i.plugin),
        body: format!(
            "Your plugin `{plugin}` (installation {id}) in store {domain} ({store}) failed every \
             retry of a delivery and was paused at {at}.\n\nWhy: {reason}\n\nWhile it is paused it \
             receives nothing; its events are recorded as failed deliveries and kept for 30 days.\n\
             Once fixed, the operator resumes it (POST /admin/v1/stores/{store}/installations/{id}/resume) \
             and re-sends what it missed (POST /admin/v1/stores/{store}/installations/{id}/replay).\n",
            plugin = i.plugin,
            id = i.id,
            store = i.store_id,
            at = i.component_paused_at.map(format_ts).unwrap_or_default(),
            reason = i
                .component_pause_reason
                .as_deref()
                .unwrap_or("retries ran out"),
        ),
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::clock::ManualClock;
    use crate::service::deliveries::queue::tests::{paid, publish_paid_hooks};
    use crate::storage::{Db, Entry as Record, SledStorage, Storage, Txn};

    /// sled that says it is shared: two [`Db`]s over one stand for two hosts sharing a database
    /// whose notices never arrive (sled has none to hear), so one host's copy of a store's
    /// targets never learns of the other's changes.
    struct Shared(Arc<SledStorage>);

    impl Storage for Shared {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.0.get(key)
        }
        fn scan(
            &self,
            prefix: &[u8],
            after: Option<&[u8]>,
            reverse: bool,
            limit: usize,
        ) -> Result<Vec<Record>> {
            self.0.scan(prefix, after, reverse, limit)
        }
        fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
            self.0.transact(f)
        }
        fn flush(&self) -> Result<()> {
            self.0.flush()
        }
        fn is_shared(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_subscription_made_on_another_host_is_attempted_before_its_notice_reaches_this_hosts_copy()
    {
        let dir = tempfile::tempdir().expect("temp dir");
        let storage = Arc::new(SledStorage::open(dir.path()).expect("open"));
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("ts"));
        let host = || {
            let db = Db::new(Arc::new(Shared(storage.clone())), false);
            let clock = Arc::new(clock.clone());
            Service::with_options(db, clock, "admin", Default::default()).expect("service")
        };
        let (here, there) = (host(), host());
        let store = there.create_store("acme.example").expect("store");
        // This host keeps a copy of the store's targets: none yet.
        let copy = here.targets.for_attempt(&here.db, &store.id).expect("copy");
        assert!(copy.subscriptions().next().is_none());

        // The other host installs a plugin with a webhook, and an event is fanned out to it.
        publish_paid_hooks(&there, "paid", 1);
        there.install(&store.id, "paid").expect("install");
        let prefix = format!("wh/{}/", store.id);
        let subs = there.db.list::<Subscription>(&prefix, None, false, 10);
        let (_, sub) = subs
            .expect("subscriptions")
            .pop()
            .expect("one subscription");
        let event = paid(&there, &store, 1);
        let target = TargetRef::Webhook(sub.id.clone());

        // This host's copy has not heard of it ...
        let copy = here.targets.for_attempt(&here.db, &store.id).expect("copy");
        assert!(matches!(
            state_in(&copy, &target, &event),
            TargetState::Gone
        ));
        // ... and its attempt reads the targets again: the subscription is active.
        let state = load(&here, &store.id, &target, &event).expect("load");
        assert!(
            matches!(&state, TargetState::Active(Target::Webhook(s), _) if s.id == sub.id),
            "{state:?}"
        );

        // Paused on the other host since: read again, it is paused.
        let paused = there
            .db
            .tx(|tx| pause(tx, &store.id, &target, there.now(), "test"));
        assert!(paused.expect("pause").is_some());
        let state = load(&here, &store.id, &target, &event).expect("load");
        assert!(matches!(state, TargetState::Paused), "{state:?}");
    }
}
