//! The cache of authenticated tokens: what [`Service::authenticate`] and [`Service::admit`]
//! would read from storage on every request (the token record, the installation, the store), kept
//! in memory for as long as none of those records has changed. A component's invocation asks it
//! the same way for its store (its actor's rate limits) and its installation's settings.
//!
//! Validity is one number: the generation of a [`Changes`] watch on the installation, store and
//! token records ([`WATCHED`]), which storage moves on after every committed transaction that
//! writes or removes one of them, whichever service function made it (install, uninstall,
//! reinstall, a change of scopes, a store's rate limits, a component's pause). Whenever the
//! generation has moved, the whole cache is dropped before it is used; an entry is only added if
//! the generation read *before* its records were read is still the current one, so a copy of
//! records read while they changed is never kept. Such changes are rare next to requests, so a
//! cache that starts afresh after each of them costs a few reads, and nothing has to know which
//! entries a change concerns.
//!
//! [`AuthCache::generation`] is the one place that decides whether the cache is current: a
//! host sharing its database with others would consult the shared state there.
//!
//! [`Service::authenticate`]: super::Service::authenticate
//! [`Service::admit`]: super::Service::admit

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::ids::{InstallationId, StoreId};
use crate::model::store::Store;
use crate::storage::{Changes, Copied, CopyGuard};

use super::auth::Actor;

/// The key prefixes of the records an actor is made of: installations, stores and tokens.
pub const WATCHED: [&str; 3] = ["inst/", "store/", "token/"];

/// How many tokens (and, apart, installations known to be installed) the cache holds at most.
pub const CAPACITY: usize = 10_000;

/// Authenticated tokens and installations known to be installed, as of one generation of their
/// records.
#[derive(Debug)]
pub struct AuthCache {
    copy: Copied<State>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct State {
    /// Token hash → the actor it authenticates.
    tokens: HashMap<[u8; 32], Actor>,
    /// Installations known to be installed, with their store.
    installed: HashMap<InstallationId, StoreId>,
    /// Store records, for the actors of components.
    stores: HashMap<StoreId, Arc<Store>>,
    /// Installations' settings, with their store, for `settings.get`.
    settings: HashMap<InstallationId, (StoreId, Arc<serde_json::Value>)>,
}

impl AuthCache {
    /// An empty cache of at most `capacity` tokens, current while `changes` (a watch on
    /// [`WATCHED`]) does not move.
    pub fn new(changes: Arc<Changes>, capacity: usize) -> Self {
        Self {
            copy: Copied::new(changes),
            capacity: capacity.max(1),
        }
    }

    /// The validity check: the generation of the records the cache copies. Entries made at
    /// another generation are not used. Read it before reading the records to remember.
    pub fn generation(&self) -> u64 {
        self.copy.generation()
    }

    /// The state, emptied first if the records changed since it was filled.
    fn current(&self) -> CopyGuard<'_, State> {
        self.copy.current()
    }

    /// The actor of the token with SHA-256 `hash`, if it is known and current.
    pub fn actor(&self, hash: &[u8; 32]) -> Option<Actor> {
        self.current().tokens.get(hash).cloned()
    }

    /// Remembers the actor of a token, read from records at generation `read_at` (its
    /// installation, then, was installed); ignored if they have changed since.
    pub fn remember_actor(&self, hash: [u8; 32], actor: &Actor, read_at: u64) {
        let mut state = self.current();
        if state.generation() != read_at {
            return;
        }
        insert_bounded(&mut state.tokens, self.capacity, hash, actor.clone());
        remember_installed(
            &mut state,
            self.capacity,
            actor.store_id(),
            &actor.installation,
        );
    }

    /// Whether `installation` of `store` is known to be installed right now.
    pub fn is_installed(&self, store: &StoreId, installation: &InstallationId) -> bool {
        self.current()
            .installed
            .get(installation)
            .is_some_and(|s| s == store)
    }

    /// Remembers that `installation` of `store` was installed at generation `read_at`; ignored
    /// if the records have changed since.
    pub fn remember_installed(&self, store: &StoreId, installation: &InstallationId, read_at: u64) {
        let mut state = self.current();
        if state.generation() == read_at {
            remember_installed(&mut state, self.capacity, store, installation);
        }
    }

    /// The store record `id`, if it is known and current.
    pub fn store(&self, id: &StoreId) -> Option<Arc<Store>> {
        self.current().stores.get(id).cloned()
    }

    /// Remembers a store record read at generation `read_at`; ignored if the records have
    /// changed since.
    pub fn remember_store(&self, store: Arc<Store>, read_at: u64) {
        let mut state = self.current();
        if state.generation() == read_at {
            insert_bounded(&mut state.stores, self.capacity, store.id.clone(), store);
        }
    }

    /// The settings of `installation` of `store`, if they are known and current.
    pub fn settings(
        &self,
        store: &StoreId,
        installation: &InstallationId,
    ) -> Option<Arc<serde_json::Value>> {
        self.current()
            .settings
            .get(installation)
            .filter(|(s, _)| s == store)
            .map(|(_, settings)| settings.clone())
    }

    /// Remembers the settings of `installation` of `store`, read at generation `read_at`;
    /// ignored if the records have changed since.
    pub fn remember_settings(
        &self,
        store: &StoreId,
        installation: &InstallationId,
        settings: Arc<serde_json::Value>,
        read_at: u64,
    ) {
        let mut state = self.current();
        if state.generation() == read_at {
            let entry = (store.clone(), settings);
            insert_bounded(
                &mut state.settings,
                self.capacity,
                installation.clone(),
                entry,
            );
        }
    }

    /// How many tokens are cached now.
    pub fn len(&self) -> usize {
        self.current().tokens.len()
    }

    /// Whether no token is cached now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn remember_installed(
    state: &mut State,
    capacity: usize,
    store: &StoreId,
    installation: &InstallationId,
) {
    if !state.installed.contains_key(installation) {
        insert_bounded(
            &mut state.installed,
            capacity,
            installation.clone(),
            store.clone(),
        );
    }
}

/// Inserts into a map of at most `capacity` entries: a new key in a full map first drops any one
/// of its entries.
fn insert_bounded<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    capacity: usize,
    key: K,
    value: V,
) {
    if map.len() >= capacity
        && !map.contains_key(&key)
        && let Some(old) = map.keys().next().cloned()
    {
        map.remove(&old);
    }
    map.insert(key, value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::event::StoreRef;
    use crate::model::scopes::Scope;
    use crate::model::store::{Installation, RateLimits, Store};
    use crate::service::auth::{hash_token, token_key};
    use crate::storage::{Db, SledStorage};

    fn db() -> (Db, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::new(
            Arc::new(SledStorage::open(dir.path()).expect("open")),
            false,
        );
        (db, dir)
    }

    fn actor(n: u8) -> Actor {
        let now = jiff::Timestamp::now();
        Actor {
            store: StoreRef {
                id: StoreId::generate(now),
                domain: format!("s{n}.example"),
            },
            installation: InstallationId::generate(now),
            plugin: format!("p{n}"),
            scopes: [Scope::OrdersRead].into_iter().collect(),
            limits: RateLimits::default(),
        }
    }

    #[test]
    fn the_watched_prefixes_are_those_of_installations_stores_and_tokens() {
        let now = jiff::Timestamp::now();
        let (store, inst) = (StoreId::generate(now), InstallationId::generate(now));
        for key in [
            Installation::key(&store, &inst),
            Store::key(&store),
            token_key(&hash_token("chp_x")),
        ] {
            assert!(WATCHED.iter().any(|p| key.starts_with(p)), "{key}");
        }
        for key in [
            Installation::by_plugin_key(&store, "p"),
            "store-domain/a.example".to_owned(),
        ] {
            assert!(!WATCHED.iter().any(|p| key.starts_with(p)), "{key}");
        }
    }

    #[test]
    fn any_committed_change_of_an_installation_store_or_token_empties_the_cache() {
        let (db, _dir) = db();
        let cache = AuthCache::new(db.watch(&WATCHED), 100);
        let a = actor(1);
        for key in ["inst/s/i", "store/s", "token/ab"] {
            let read_at = cache.generation();
            cache.remember_actor([1; 32], &a, read_at);
            assert!(cache.actor(&[1; 32]).is_some());
            assert!(cache.is_installed(a.store_id(), &a.installation));
            db.tx(|tx| tx.write("order/s/o", &1)).expect("tx");
            assert!(cache.actor(&[1; 32]).is_some(), "an order is not watched");
            db.tx_relaxed(|tx| tx.write(key, &1)).expect("tx");
            assert!(cache.actor(&[1; 32]).is_none(), "{key} changed");
            assert!(!cache.is_installed(a.store_id(), &a.installation));
        }
    }

    #[test]
    fn records_read_while_they_changed_are_not_remembered() {
        let (db, _dir) = db();
        let cache = AuthCache::new(db.watch(&WATCHED), 100);
        let a = actor(1);
        let read_at = cache.generation();
        // The uninstall commits between the reads and the remembering.
        db.tx(|tx| tx.write("inst/s/i", &1)).expect("tx");
        cache.remember_actor([1; 32], &a, read_at);
        cache.remember_installed(a.store_id(), &a.installation, read_at);
        assert!(cache.actor(&[1; 32]).is_none());
        assert!(!cache.is_installed(a.store_id(), &a.installation));
        cache.remember_actor([1; 32], &a, cache.generation());
        assert!(cache.actor(&[1; 32]).is_some());
    }

    #[test]
    fn stores_and_settings_are_kept_until_a_store_or_installation_changes() {
        let (db, _dir) = db();
        let cache = AuthCache::new(db.watch(&WATCHED), 100);
        let a = actor(1);
        let store = Arc::new(Store {
            id: a.store_id().clone(),
            domain: a.store.domain.clone(),
            created_at: jiff::Timestamp::now(),
            rate_limits: RateLimits::default(),
            quotas: Default::default(),
        });
        for key in ["inst/s/i", "store/s"] {
            let read_at = cache.generation();
            cache.remember_store(store.clone(), read_at);
            let settings = Arc::new(serde_json::json!({"threshold": 3}));
            cache.remember_settings(a.store_id(), &a.installation, settings, read_at);
            assert_eq!(
                cache.store(&store.id).map(|s| s.id.clone()),
                Some(store.id.clone())
            );
            assert_eq!(
                cache.settings(a.store_id(), &a.installation).as_deref(),
                Some(&serde_json::json!({"threshold": 3}))
            );
            db.tx(|tx| tx.write("token/ab", &1)).expect("tx");
            assert!(
                cache.store(&store.id).is_none(),
                "a token changed: all is dropped"
            );
            cache.remember_store(store.clone(), cache.generation());
            db.tx(|tx| tx.write(key, &1)).expect("tx");
            assert!(cache.store(&store.id).is_none(), "{key} changed");
            assert!(cache.settings(a.store_id(), &a.installation).is_none());
        }
    }

    #[test]
    fn settings_read_while_they_changed_are_not_remembered_and_belong_to_their_store() {
        let (db, _dir) = db();
        let cache = AuthCache::new(db.watch(&WATCHED), 100);
        let (a, b) = (actor(1), actor(2));
        let read_at = cache.generation();
        db.tx(|tx| tx.write("inst/s/i", &1)).expect("tx");
        let settings = Arc::new(serde_json::json!({}));
        cache.remember_settings(a.store_id(), &a.installation, settings.clone(), read_at);
        assert!(cache.settings(a.store_id(), &a.installation).is_none());
        cache.remember_settings(a.store_id(), &a.installation, settings, cache.generation());
        assert!(cache.settings(a.store_id(), &a.installation).is_some());
        assert!(cache.settings(b.store_id(), &a.installation).is_none());
    }

    #[test]
    fn an_installation_is_installed_only_in_its_own_store() {
        let (db, _dir) = db();
        let cache = AuthCache::new(db.watch(&WATCHED), 100);
        let (a, b) = (actor(1), actor(2));
        cache.remember_installed(a.store_id(), &a.installation, cache.generation());
        assert!(cache.is_installed(a.store_id(), &a.installation));
        assert!(!cache.is_installed(b.store_id(), &a.installation));
        assert!(!cache.is_installed(a.store_id(), &b.installation));
    }

    #[test]
    fn the_cache_holds_at_most_its_capacity() {
        let (db, _dir) = db();
        let cache = AuthCache::new(db.watch(&WATCHED), 3);
        for n in 0..10u8 {
            cache.remember_actor([n; 32], &actor(n), cache.generation());
            assert!(cache.actor(&[n; 32]).is_some(), "the newest is kept");
            assert!(cache.len() <= 3);
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.current().installed.len() <= 3);
    }
}
