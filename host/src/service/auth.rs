//! Project tokens, the actor they authenticate, scope checks and the operator's admin token.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::event::StoreRef;
use crate::model::ids::{InstallationId, StoreId};
use crate::model::scopes::Scope;
use crate::model::store::RateLimits;
use crate::model::store::{Installation, InstallationStatus, Store};
use crate::service::ratelimit::RateStatus;

/// Prefix of every project token, so that leaked tokens are easy to recognise and scan for.
pub const TOKEN_PREFIX: &str = "chp_";

/// Who is calling: an installation of a plugin in one store, with the scopes it was granted.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The store that installed the plugin; every operation is confined to it.
    pub store: StoreRef,
    /// The installation.
    pub installation: InstallationId,
    /// The plugin's name.
    pub plugin: String,
    /// Exactly the scopes of the plugin's manifest.
    pub scopes: BTreeSet<Scope>,
    /// The store's rate limits.
    pub limits: RateLimits,
}

impl Actor {
    /// Refuses the call unless the actor holds `scope`.
    pub fn require(&self, scope: Scope) -> Result<()> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(Error::MissingScope {
                scope: scope.as_str(),
            })
        }
    }

    /// The actor's store id.
    pub fn store_id(&self) -> &StoreId {
        &self.store.id
    }
}

/// What a token hash points at.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The token's store.
    pub store_id: StoreId,
    /// The token's installation.
    pub installation_id: InstallationId,
}

/// SHA-256 of a token: tokens are stored only as hashes.
pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Key of a token record.
pub fn token_key(hash: &[u8; 32]) -> String {
    format!("token/{}", hex::encode(hash))
}

/// A new project token: 256 random bits.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("{TOKEN_PREFIX}{}", hex::encode(bytes))
}

impl Service {
    /// Resolves a project token to its actor. Unknown, malformed or revoked tokens are 401.
    ///
    /// The actor of a token that authenticated before comes from the [`AuthCache`] while its
    /// records are unchanged; otherwise it is read (the token record, the installation, the
    /// store) and remembered.
    ///
    /// [`AuthCache`]: super::auth_cache::AuthCache
    pub fn authenticate(&self, token: &str) -> Result<Actor> {
        let unknown = || Error::Unauthorized("the project token is unknown or revoked".into());
        if !token.starts_with(TOKEN_PREFIX) {
            return Err(Error::Unauthorized(format!(
                "malformed project token: expected `Bearer {TOKEN_PREFIX}…`"
            )));
        }
        let hash = hash_token(token);
        if let Some(actor) = self.auth_cache.actor(&hash) {
            return Ok(actor);
        }
        let read_at = self.auth_cache.generation();
        let record: TokenRecord = self.db.read(&token_key(&hash))?.ok_or_else(unknown)?;
        let installation: Installation = self
            .db
            .read(&Installation::key(
                &record.store_id,
                &record.installation_id,
            ))?
            .ok_or_else(unknown)?;
        if installation.status != InstallationStatus::Active {
            return Err(unknown());
        }
        let store: Store = self
            .db
            .read(&Store::key(&record.store_id))?
            .ok_or_else(unknown)?;
        let actor = Actor {
            store: store.reference(),
            installation: installation.id,
            plugin: installation.plugin,
            scopes: installation.scopes.into_iter().collect(),
            limits: store.rate_limits,
        };
        self.auth_cache.remember_actor(hash, &actor, read_at);
        Ok(actor)
    }

    /// The actor of an installation's component: its store, identity and scopes. An uninstalled
    /// installation (receiving its `plugin.uninstalled`) keeps its identity but has no scopes:
    /// its token is revoked, and so is its access.
    ///
    /// The store record comes from the [`AuthCache`] while it is unchanged (an invocation needs
    /// it for every event).
    ///
    /// [`AuthCache`]: super::auth_cache::AuthCache
    pub fn component_actor(&self, installation: &Installation) -> Result<Actor> {
        let store = match self.auth_cache.store(&installation.store_id) {
            Some(store) => store,
            None => {
                let read_at = self.auth_cache.generation();
                let store: Store = self
                    .db
                    .read(&Store::key(&installation.store_id))?
                    .ok_or_else(|| Error::not_found("store", &installation.store_id))?;
                let store = std::sync::Arc::new(store);
                self.auth_cache.remember_store(store.clone(), read_at);
                store
            }
        };
        let active = installation.status == InstallationStatus::Active;
        Ok(Actor {
            store: store.reference(),
            installation: installation.id.clone(),
            plugin: installation.plugin.clone(),
            scopes: if active {
                installation.scopes.iter().copied().collect()
            } else {
                BTreeSet::new()
            },
            limits: store.rate_limits,
        })
    }

    /// Admits one call of `actor` into its store, whichever way it came: an HTTP request on
    /// `/v1` or a host call of a component. Every adapter calls this once per request or host
    /// call, so both count alike against the store's one rate limit (and its metrics).
    ///
    /// The installation must still be installed: checked afresh on every call, since a request
    /// or an invocation can outlive an uninstall (the invocation that delivers
    /// `plugin.uninstalled` runs after it), so an uninstalled plugin can no longer reach the
    /// store, not even through the calls that need no scope (banners, feed cards, messages,
    /// settings). The [`AuthCache`] answers that without a read while no installation, store
    /// or token has changed since the installation was last seen installed. Then the call
    /// counts against the store's rate limits; a refusal carries the values of the
    /// `X-RateLimit-*` headers.
    ///
    /// [`AuthCache`]: super::auth_cache::AuthCache
    pub fn admit(&self, actor: &Actor) -> Result<RateStatus, (Error, RateStatus)> {
        let installed = self
            .still_installed(actor)
            .map_err(|e| (e, RateStatus::UNCOUNTED))?;
        if !installed {
            return Err((
                Error::Unauthorized("the plugin was uninstalled from this store".into()),
                RateStatus::UNCOUNTED,
            ));
        }
        self.limiter
            .admit(actor.store_id(), actor.limits, self.clock.now())
            .inspect_err(|_| self.metrics.rate_limited(crate::metrics::RateLimit::Store))
    }

    /// Whether the actor's installation is still installed: known from the cache, or read.
    fn still_installed(&self, actor: &Actor) -> Result<bool> {
        if self
            .auth_cache
            .is_installed(actor.store_id(), &actor.installation)
        {
            return Ok(true);
        }
        let read_at = self.auth_cache.generation();
        let installed = self
            .db
            .read::<Installation>(&Installation::key(actor.store_id(), &actor.installation))?
            .is_some_and(|i| i.status == InstallationStatus::Active);
        if installed {
            self.auth_cache
                .remember_installed(actor.store_id(), &actor.installation, read_at);
        }
        Ok(installed)
    }

    /// Refuses a request that needs authentication while its client address has no failed
    /// authentications left (429 `rate_limited`); its token is then not looked at. Without a
    /// known address (a request that did not come over a socket) nothing is limited.
    pub fn admit_unauthenticated(&self, client: Option<IpAddr>) -> Result<()> {
        match client {
            Some(ip) => self
                .auth_limiter
                .check(ip, self.clock.now())
                .inspect_err(|_| self.metrics.rate_limited(crate::metrics::RateLimit::Auth)),
            None => Ok(()),
        }
    }

    /// Counts a request of `client` that failed authentication (no token, a malformed, unknown
    /// or revoked one).
    pub fn authentication_failed(&self, client: Option<IpAddr>) {
        if let Some(ip) = client {
            self.auth_limiter.failed(ip, self.clock.now());
        }
    }

    /// Checks the operator's admin token, in constant time.
    pub fn check_admin(&self, token: &str) -> Result<()> {
        let ok: bool = hash_token(token).ct_eq(&self.admin_token_hash).into();
        if ok {
            Ok(())
        } else {
            Err(Error::Unauthorized("the admin token is not valid".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::clock::ManualClock;
    use crate::model::plugin::Manifest;
    use crate::storage::Db;

    struct World {
        _dir: tempfile::TempDir,
        service: Service,
        store: StoreId,
        installation: InstallationId,
        token: String,
    }

    fn world() -> World {
        let dir = tempfile::tempdir().expect("dir");
        let clock = ManualClock::new("2026-01-05T00:00:00Z".parse().expect("ts"));
        let db = Db::open_sled(dir.path(), false).expect("db");
        let service = Service::new(db, Arc::new(clock), "admin-token-for-tests").expect("service");
        let store = service.create_store("acme.example").expect("store").id;
        let manifest = Manifest {
            name: "reader".to_owned(),
            version: "1.0.0".to_owned(),
            description: None,
            scopes: vec!["orders.read".to_owned()],
            contact_email: "dev@plugin.example".to_owned(),
            webhooks: Vec::new(),
            events: Vec::new(),
            limits: None,
        };
        service
            .publish_plugin(manifest, &Default::default(), None)
            .expect("publish");
        let installed = service.install(&store, "reader").expect("install");
        World {
            _dir: dir,
            service,
            store,
            installation: installed.installation.id,
            token: installed.token,
        }
    }

    #[test]
    fn an_authenticated_token_is_answered_from_the_cache_until_its_records_change() {
        let w = world();
        assert!(w.service.auth_cache.is_empty());
        let actor = w.service.authenticate(&w.token).expect("authenticated");
        assert_eq!(w.service.auth_cache.len(), 1);
        assert!(w.service.auth_cache.is_installed(&w.store, &w.installation));
        let again = w.service.authenticate(&w.token).expect("from the cache");
        assert_eq!(again.installation, actor.installation);
        w.service.admit(&again).expect("admitted");
        // Unknown tokens are never remembered.
        for _ in 0..3 {
            assert!(w.service.authenticate(&new_token()).is_err());
        }
        assert_eq!(w.service.auth_cache.len(), 1);
    }

    #[test]
    fn an_uninstall_revokes_a_cached_token_and_refuses_its_actor_at_once() {
        let w = world();
        let actor = w.service.authenticate(&w.token).expect("authenticated");
        w.service.admit(&actor).expect("admitted");
        w.service
            .uninstall(&w.store, &w.installation)
            .expect("uninstall");
        let err = w.service.authenticate(&w.token).expect_err("revoked");
        assert!(matches!(err, Error::Unauthorized(_)));
        let (err, _) = w.service.admit(&actor).expect_err("an actor of before");
        assert!(matches!(err, Error::Unauthorized(_)), "{err:?}");
        // A reinstall gives a new token; the old one stays revoked.
        let again = w.service.install(&w.store, "reader").expect("reinstall");
        let fresh = w.service.authenticate(&again.token).expect("new token");
        assert_eq!(fresh.installation, again.installation.id);
        assert!(w.service.authenticate(&w.token).is_err());
        assert!(w.service.admit(&actor).is_err());
    }

    #[test]
    fn a_component_actor_is_refused_at_its_next_host_call_after_the_uninstall() {
        let w = world();
        let installation = w
            .service
            .installation(&w.store, &w.installation)
            .expect("installation");
        let actor = w.service.component_actor(&installation).expect("actor");
        w.service.admit(&actor).expect("first host call");
        w.service.admit(&actor).expect("second, from the cache");
        w.service
            .uninstall(&w.store, &w.installation)
            .expect("uninstall");
        assert!(w.service.admit(&actor).is_err());
    }

    #[test]
    fn new_rate_limits_reach_the_next_authentication() {
        let w = world();
        let before = w.service.authenticate(&w.token).expect("authenticated");
        assert_eq!(before.limits, RateLimits::default());
        let limits = RateLimits {
            requests_per_second: 1,
            burst: 2,
            requests_per_minute: 5,
        };
        w.service
            .set_rate_limits(&w.store, limits)
            .expect("patch the store");
        let after = w.service.authenticate(&w.token).expect("authenticated");
        assert_eq!(after.limits, limits);
    }

    #[test]
    fn any_change_of_the_installation_record_such_as_its_scopes_applies_at_once() {
        let w = world();
        let before = w.service.authenticate(&w.token).expect("authenticated");
        assert!(before.require(Scope::OrdersRead).is_ok());
        // No service call changes an installation's scopes today (a new version needs a
        // reinstall); whatever writes the record in the future, the cache follows.
        let key = Installation::key(&w.store, &w.installation);
        w.service
            .db
            .tx(|tx| {
                let mut installation: Installation = tx.read(&key)?.expect("installation");
                installation.scopes = vec![Scope::CustomersRead];
                tx.write(&key, &installation)
            })
            .expect("change the scopes");
        let after = w.service.authenticate(&w.token).expect("authenticated");
        assert!(after.require(Scope::OrdersRead).is_err());
        assert!(after.require(Scope::CustomersRead).is_ok());
    }
}
