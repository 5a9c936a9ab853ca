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
    pub fn authenticate(&self, token: &str) -> Result<Actor> {
        let unknown = || Error::Unauthorized("the project token is unknown or revoked".into());
        if !token.starts_with(TOKEN_PREFIX) {
            return Err(Error::Unauthorized(format!(
                "malformed project token: expected `Bearer {TOKEN_PREFIX}…`"
            )));
        }
        let record: TokenRecord = self
            .db
            .read(&token_key(&hash_token(token)))?
            .ok_or_else(unknown)?;
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
        Ok(Actor {
            store: store.reference(),
            installation: installation.id,
            plugin: installation.plugin,
            scopes: installation.scopes.into_iter().collect(),
            limits: store.rate_limits,
        })
    }

    /// The actor of an installation's component: its store, identity and scopes. An uninstalled
    /// installation (receiving its `plugin.uninstalled`) keeps its identity but has no scopes:
    /// its token is revoked, and so is its access.
    pub fn component_actor(&self, installation: &Installation) -> Result<Actor> {
        let store: Store = self
            .db
            .read(&Store::key(&installation.store_id))?
            .ok_or_else(|| Error::not_found("store", &installation.store_id))?;
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
    /// settings). Then the call counts against the store's rate limits; a refusal carries the
    /// values of the `X-RateLimit-*` headers.
    pub fn admit(&self, actor: &Actor) -> Result<RateStatus, (Error, RateStatus)> {
        const NONE: RateStatus = RateStatus {
            remaining: 0,
            reset_secs: 0,
        };
        let installed = self
            .db
            .read::<Installation>(&Installation::key(actor.store_id(), &actor.installation))
            .map_err(|e| (e, NONE))?
            .is_some_and(|i| i.status == InstallationStatus::Active);
        if !installed {
            return Err((
                Error::Unauthorized("the plugin was uninstalled from this store".into()),
                NONE,
            ));
        }
        self.limiter
            .admit(actor.store_id(), actor.limits, self.clock.now())
            .inspect_err(|_| self.metrics.rate_limited(crate::metrics::RateLimit::Store))
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
