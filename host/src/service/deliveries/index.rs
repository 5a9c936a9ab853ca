//! Each store's targets in memory: its webhook subscriptions, its installations and the plugin
//! versions they run, as the fan-out and every attempt need them. Without it the fan-out scanned
//! a store's subscriptions and installations for every event, and every attempt read its target
//! (and, for a component, the plugin version; for a webhook, the installation's scopes).
//!
//! Validity works as in the [`AuthCache`](crate::service::auth_cache::AuthCache), through the
//! same [`Copied`]: one number, the generation of a [`Changes`] watch on the records a store's
//! targets are made of ([`WATCHED`]), which storage moves on after every committed transaction
//! that writes or removes one of them (a subscription created, changed, paused, resumed, rotated
//! or deleted; an installation made, paused, resumed or removed; a version published). When it
//! has moved, the whole index is dropped before it is used, and a store's targets are only kept
//! if the generation read *before* they were read is still current, so a copy read while they
//! changed is never kept. Where hosts share a database the fan-out does not use the index
//! ([`TargetIndex::of`]): another host's change moves the generation only when its notice arrives
//! (milliseconds), and until then a copy would miss a subscription just made there, so an event
//! committed after it could pass it by; there a call of the fan-out reads a store's targets
//! afresh, once, after it has listed the outbox, so that every event it fans out was committed
//! before they were read. Attempts use the copy on every backend ([`TargetIndex::for_attempt`]):
//! for them a change seen a moment late is the same as one committed a moment later.
//!
//! The fan-out still reads each target again inside its transaction
//! ([`TargetsRead::wants`](super::target::TargetsRead::wants)): the index only tells it which to
//! read.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::model::error::Result;
use crate::model::ids::{InstallationId, StoreId, WebhookId};
use crate::model::plugin::Plugin;
use crate::model::store::Installation;
use crate::model::webhook::Subscription;
use crate::storage::{Changes, Copied, Db};

/// The key prefixes of the records a store's targets are made of: subscriptions, installations
/// and published plugin versions.
pub const WATCHED: [&str; 3] = ["wh/", "inst/", "plugin-version/"];

/// How many records (subscriptions, installations and plugin versions, over all stores) the
/// index holds at most; past this it starts afresh.
pub const CAPACITY: usize = 100_000;

/// The targets of the stores that had events lately, as of one generation of their records.
#[derive(Debug)]
pub struct TargetIndex {
    copy: Copied<State>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct State {
    stores: HashMap<StoreId, Arc<StoreTargets>>,
    /// Records held, over all stores.
    records: usize,
}

/// A store's targets, as read at one generation.
#[derive(Debug, Default)]
pub struct StoreTargets {
    /// Subscriptions by id, in the order of their keys.
    subscriptions: BTreeMap<WebhookId, Arc<Subscription>>,
    /// Installations by id, in the order of their keys (shared with the attempts that load them).
    installations: BTreeMap<InstallationId, Arc<Installation>>,
    /// The plugin versions the installations run, by name and then version (shared likewise).
    plugins: HashMap<String, HashMap<String, Arc<Plugin>>>,
}

impl StoreTargets {
    /// Reads a store's targets from storage, with the plugin versions its installations run.
    fn read(db: &Db, store: &StoreId) -> Result<Self> {
        let mut targets = Self::read_without_plugins(db, store)?;
        for i in targets.installations.values() {
            let versions = targets.plugins.entry(i.plugin.clone()).or_default();
            if versions.contains_key(&i.version) {
                continue;
            }
            if let Some(plugin) = db.read::<Plugin>(&Plugin::version_key(&i.plugin, &i.version))? {
                versions.insert(i.version.clone(), Arc::new(plugin));
            }
        }
        Ok(targets)
    }

    /// Reads a store's subscriptions and installations only ([`StoreTargets::plugin_of`] then
    /// knows no version): what the fan-out's candidates need.
    fn read_without_plugins(db: &Db, store: &StoreId) -> Result<Self> {
        let mut targets = Self::default();
        db.scan_all(
            &Subscription::store_prefix(store),
            |_, sub: Subscription| {
                targets.subscriptions.insert(sub.id.clone(), Arc::new(sub));
                Ok(())
            },
        )?;
        db.scan_all(&format!("inst/{store}/"), |_, i: Installation| {
            targets.installations.insert(i.id.clone(), Arc::new(i));
            Ok(())
        })?;
        Ok(targets)
    }

    fn records(&self) -> usize {
        let plugins: usize = self.plugins.values().map(HashMap::len).sum();
        self.subscriptions.len() + self.installations.len() + plugins
    }

    /// The store's subscriptions, in key order.
    pub fn subscriptions(&self) -> impl Iterator<Item = &Subscription> {
        self.subscriptions.values().map(|s| &**s)
    }

    /// The store's installations (removed ones included), in key order.
    pub fn installations(&self) -> impl Iterator<Item = &Installation> {
        self.installations.values().map(|i| &**i)
    }

    /// One subscription.
    pub fn subscription(&self, id: &WebhookId) -> Option<&Arc<Subscription>> {
        self.subscriptions.get(id)
    }

    /// One installation.
    pub fn installation(&self, id: &InstallationId) -> Option<&Arc<Installation>> {
        self.installations.get(id)
    }

    /// The plugin version an installation runs.
    pub fn plugin_of(&self, installation: &Installation) -> Option<&Arc<Plugin>> {
        self.plugins
            .get(&installation.plugin)?
            .get(&installation.version)
    }
}

impl TargetIndex {
    /// An empty index of at most `capacity` records, current while `changes` (a watch on
    /// [`WATCHED`]) does not move.
    pub fn new(changes: Arc<Changes>, capacity: usize) -> Self {
        Self {
            copy: Copied::new(changes),
            capacity: capacity.max(1),
        }
    }

    /// `store`'s targets as they are now, for the fan-out: from memory while their records are
    /// unchanged, else read from `db` (and kept). Where hosts share the database they are read
    /// from storage each time, and not kept (see the module's documentation), without the
    /// plugin versions, which the fan-out does not use ([`StoreTargets::plugin_of`] knows none).
    pub fn of(&self, db: &Db, store: &StoreId) -> Result<Arc<StoreTargets>> {
        if db.is_shared() {
            return StoreTargets::read_without_plugins(db, store).map(Arc::new);
        }
        self.copy_of(db, store)
    }

    /// `store`'s targets for an attempt, or for the engine's shares: from memory while their
    /// records are unchanged, on every backend. Where hosts share the database, another host's
    /// change is seen here once its notice arrives (milliseconds): an attempt started meanwhile
    /// goes out as it would have a moment before the change, as does one already in flight when
    /// the change commits; one whose target this copy shows gone or paused reads it again
    /// ([`TargetIndex::fresh`], see `target::load`). (The fan-out, which must not miss a
    /// subscription just made, reads with [`TargetIndex::of`]; and it reads each target again
    /// in its transaction.)
    pub fn for_attempt(&self, db: &Db, store: &StoreId) -> Result<Arc<StoreTargets>> {
        self.copy_of(db, store)
    }

    /// `store`'s targets read from `db` now, with their plugin versions, not kept: for an attempt
    /// whose target the copy ([`TargetIndex::for_attempt`]) does not show active, where another
    /// host's change may not have reached it yet.
    pub fn fresh(&self, db: &Db, store: &StoreId) -> Result<StoreTargets> {
        StoreTargets::read(db, store)
    }

    /// `store`'s targets from memory, or read (and kept while current).
    fn copy_of(&self, db: &Db, store: &StoreId) -> Result<Arc<StoreTargets>> {
        let generation = self.copy.generation();
        if let Some(known) = self.copy.current().stores.get(store) {
            return Ok(known.clone());
        }
        let read = Arc::new(StoreTargets::read(db, store)?);
        let mut state = self.copy.current();
        if state.generation() == generation {
            if state.records.saturating_add(read.records()) > self.capacity {
                *state = State::default();
            }
            state.records = state.records.saturating_add(read.records());
            state.stores.insert(store.clone(), read.clone());
        }
        Ok(read)
    }

    /// How many stores' targets are held (for tests).
    #[cfg(test)]
    fn stores(&self) -> usize {
        self.copy.current().stores.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::webhook::WebhookStatus;
    use crate::service::Service;

    /// A service with the plugin `hooked` published: a manifest webhook to `plugin.installed`.
    fn service() -> (tempfile::TempDir, Service) {
        let (service, _clock, dir) = super::super::queue::tests::with_hooked_plugin();
        (dir, service)
    }

    /// A new store with `hooked` installed: one subscription, one installation, one version.
    fn store(service: &Service, domain: &str) -> StoreId {
        let store = service.create_store(domain).expect("store");
        service.install(&store.id, "hooked").expect("install");
        store.id
    }

    #[test]
    fn a_store_is_read_once_until_one_of_its_targets_changes() {
        let (_dir, service) = service();
        let store = store(&service, "index.example");
        let index = &service.targets;
        let first = index.of(&service.db, &store).expect("targets");
        let sub = first
            .subscriptions()
            .next()
            .expect("the manifest webhook")
            .clone();
        let installation = first.installations().next().expect("installed").clone();
        assert_eq!(sub.installation_id, installation.id);
        assert_eq!(
            first.plugin_of(&installation).map(|p| p.version.as_str()),
            Some("1.0.0")
        );
        let again = index.of(&service.db, &store).expect("targets");
        assert!(Arc::ptr_eq(&first, &again), "kept while nothing changed");
        assert_eq!(index.stores(), 1);

        // A record of another kind does not drop it.
        service.create_store("other.example").expect("store");
        let still = index.of(&service.db, &store).expect("targets");
        assert!(Arc::ptr_eq(&first, &still));

        // A change of the subscription does: the next call reads it as it is now.
        let mut paused = sub.clone();
        paused.status = WebhookStatus::Paused;
        service
            .db
            .tx(|tx| tx.write(&Subscription::key(&store, &sub.id), &paused))
            .expect("write");
        let fresh = index.of(&service.db, &store).expect("targets");
        assert!(!Arc::ptr_eq(&first, &fresh), "read again after the change");
        assert_eq!(
            fresh.subscription(&sub.id).map(|s| s.status),
            Some(WebhookStatus::Paused)
        );
        assert_eq!(index.stores(), 1, "the other stores were dropped with it");
    }

    #[test]
    fn past_its_capacity_the_index_starts_afresh() {
        let (_dir, service) = service();
        let (a, b) = (store(&service, "a.example"), store(&service, "b.example"));
        // Each store's targets are three records: a subscription, an installation, a version.
        let index = TargetIndex::new(service.db.watch(&WATCHED), 5);
        index.of(&service.db, &a).expect("a");
        assert_eq!(index.stores(), 1);
        let kept = index.of(&service.db, &a).expect("a");
        // The second store would make six: the first is dropped to keep it.
        index.of(&service.db, &b).expect("b");
        assert_eq!(index.stores(), 1);
        let a_again = index.of(&service.db, &a).expect("a");
        assert!(!Arc::ptr_eq(&kept, &a_again), "read again");
        assert_eq!(a_again.subscriptions().count(), 1);
    }
}
