//! Stores and the plugins installed into them.

use crate::model::store::Installation;
use crate::model::store::InstallationStatus;
use crate::model::store::MAX_SETTINGS_BYTES;
use crate::model::store::NewInstallation;
use crate::model::store::Store;
use crate::model::store::UpdateStore;
use crate::model::store::empty_settings;

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::event::data::{PluginConfigured, PluginInstalled, PluginUninstalled};
use crate::model::ids::{InstallationId, StoreId};
use crate::model::plugin::{Manifest, Plugin};
use crate::model::store::Quotas;
use crate::model::store::RateLimits;
use crate::service::auth::{TokenRecord, hash_token, new_token, token_key};
use crate::service::pagination::{Listing, Page, PageRequest};

fn validate_domain(domain: &str) -> Result<()> {
    let labels_ok = domain.split('.').all(|label| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    });
    if domain.len() <= 253 && domain.contains('.') && labels_ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "domain",
            format!("`{domain}` is not a lower-case domain name such as `acme.example`"),
        ))
    }
}

impl Service {
    /// Creates a store with the default limits. Domains are unique.
    pub fn create_store(&self, domain: &str) -> Result<Store> {
        validate_domain(domain)?;
        let now = self.now();
        let store = Store {
            id: StoreId::generate(now),
            domain: domain.to_owned(),
            created_at: now,
            rate_limits: RateLimits::default(),
            quotas: Quotas::default(),
        };
        self.db.tx(|tx| {
            let domain_key = format!("store-domain/{domain}");
            if tx.read::<StoreId>(&domain_key)?.is_some() {
                return Err(Error::Conflict {
                    code: "domain_taken",
                    message: format!("a store with domain `{domain}` already exists"),
                    field: Some("domain".into()),
                });
            }
            tx.write(&domain_key, &store.id)?;
            tx.write(&Store::key(&store.id), &store)?;
            Ok(store.clone())
        })
    }

    /// A store by id.
    pub fn store(&self, id: &StoreId) -> Result<Store> {
        self.db
            .read(&Store::key(id))?
            .ok_or_else(|| Error::not_found("store", id))
    }

    /// Stores, oldest first.
    pub fn list_stores(&self, page: &PageRequest) -> Result<Page<Store>> {
        Listing {
            prefix: "store/",
            list_id: "stores",
            newest_first: false,
        }
        .page(&self.db, &self.cursors, page, |_| true)
    }

    /// Changes a store's settings, all or nothing: every part given is checked first (a refusal
    /// names its field, `rate_limits.burst` or `quotas.sms`), then all of them are written in one
    /// transaction, so the store is never seen with one part changed and not the other. New
    /// quotas apply to today's count at once. Returns the store as changed.
    pub fn update_store(&self, id: &StoreId, update: &UpdateStore) -> Result<Store> {
        if let Some(limits) = &update.rate_limits {
            limits.validate("rate_limits")?;
        }
        if let Some(quotas) = &update.quotas {
            quotas.validate("quotas")?;
        }
        if update.rate_limits.is_none() && update.quotas.is_none() {
            return self.store(id);
        }
        self.db.tx(|tx| {
            let mut store: Store = tx
                .read(&Store::key(id))?
                .ok_or_else(|| Error::not_found("store", id))?;
            if let Some(limits) = update.rate_limits {
                store.rate_limits = limits;
            }
            if let Some(quotas) = update.quotas {
                store.quotas = quotas;
            }
            tx.write(&Store::key(id), &store)?;
            Ok(store)
        })
    }

    /// Sets a store's rate limits (an [`Service::update_store`] of them alone).
    pub fn set_rate_limits(&self, id: &StoreId, limits: RateLimits) -> Result<Store> {
        self.update_store(
            id,
            &UpdateStore {
                rate_limits: Some(limits),
                quotas: None,
            },
        )
    }

    /// Sets a store's daily outbound quotas (an [`Service::update_store`] of them alone).
    pub fn set_quotas(&self, id: &StoreId, quotas: Quotas) -> Result<Store> {
        self.update_store(
            id,
            &UpdateStore {
                rate_limits: None,
                quotas: Some(quotas),
            },
        )
    }

    /// Installs the current version of `plugin` into `store_id`: checks where the manifest's
    /// webhooks would go, then issues a project token with exactly the manifest's scopes,
    /// creates the manifest's webhook subscriptions and fires `plugin.installed`.
    ///
    /// A webhook URL that resolves to a non-public address the operator did not allow is 400 on
    /// `manifest.webhooks[i].url`, and nothing is installed. Resolving names waits on the system
    /// resolver: call this on a blocking thread.
    pub fn install(&self, store_id: &StoreId, plugin: &str) -> Result<NewInstallation> {
        let store = self.store(store_id)?;
        let plugin: Plugin = self.db.read(&Plugin::key(plugin))?.ok_or_else(|| {
            Error::invalid("plugin", format!("no plugin named `{plugin}` is published"))
        })?;
        self.vet_manifest_webhooks(&plugin.manifest)?;
        let now = self.now();
        let token = new_token();
        let installation = Installation {
            id: InstallationId::generate(now),
            store_id: store_id.clone(),
            plugin: plugin.name.clone(),
            version: plugin.version.clone(),
            scopes: plugin.scopes().into_iter().collect(),
            status: InstallationStatus::Active,
            created_at: now,
            uninstalled_at: None,
            component_events: match &plugin.component {
                Some(_) => crate::service::plugins::parse_events(
                    "manifest.events",
                    &plugin.manifest.events,
                )?,
                None => Vec::new(),
            },
            component_paused_at: None,
            component_pause_reason: None,
            settings: empty_settings(),
        };
        self.db.tx(|tx| {
            let by_plugin = Installation::by_plugin_key(store_id, &plugin.name);
            if tx.read::<InstallationId>(&by_plugin)?.is_some() {
                return Err(Error::Conflict {
                    code: "already_installed",
                    message: format!("`{}` is already installed in this store", plugin.name),
                    field: Some("plugin".into()),
                });
            }
            tx.write(&by_plugin, &installation.id)?;
            tx.write(
                &Installation::key(store_id, &installation.id),
                &installation,
            )?;
            tx.write(
                &token_key(&hash_token(&token)),
                &TokenRecord {
                    store_id: store_id.clone(),
                    installation_id: installation.id.clone(),
                },
            )?;
            crate::service::webhooks::create_manifest_webhooks(
                tx,
                &installation,
                &plugin.manifest.webhooks,
                now,
            )?;
            tx.emit(
                &store.reference(),
                PluginInstalled {
                    installation: installation.clone(),
                },
                now,
            )?;
            Ok(())
        })?;
        Ok(NewInstallation {
            installation,
            token,
        })
    }

    /// Checks the addresses of a manifest's webhooks before it is installed: their form was
    /// checked at publish, but what their names resolve to, and the operator's allowed
    /// networks, may have changed since. Blocking (it resolves names).
    fn vet_manifest_webhooks(&self, manifest: &Manifest) -> Result<()> {
        for (i, hook) in manifest.webhooks.iter().enumerate() {
            let field = format!("manifest.webhooks[{i}].url");
            let url = crate::service::webhooks::validate_url(&field, &hook.url)?;
            self.network
                .check_blocking(&url)
                .map_err(|refusal| Error::invalid(&field, refusal.to_string()))?;
        }
        Ok(())
    }

    /// An installation of a store.
    pub fn installation(&self, store_id: &StoreId, id: &InstallationId) -> Result<Installation> {
        self.db
            .read(&Installation::key(store_id, id))?
            .ok_or_else(|| Error::not_found("installation", id))
    }

    /// The installations of a store, oldest first.
    pub fn list_installations(
        &self,
        store_id: &StoreId,
        page: &PageRequest,
    ) -> Result<Page<Installation>> {
        self.store(store_id)?;
        let prefix = format!("inst/{store_id}/");
        Listing {
            prefix: &prefix,
            list_id: &prefix,
            newest_first: false,
        }
        .page(&self.db, &self.cursors, page, |_| true)
    }

    /// Uninstalls: revokes the token at once, removes the installation's webhook subscriptions
    /// and fires `plugin.uninstalled`.
    pub fn uninstall(&self, store_id: &StoreId, id: &InstallationId) -> Result<Installation> {
        let store = self.store(store_id)?;
        let now = self.now();
        self.db.tx(|tx| {
            let key = Installation::key(store_id, id);
            let mut installation = active_installation(tx, &key, id)?;
            installation.status = InstallationStatus::Uninstalled;
            installation.uninstalled_at = Some(now);
            tx.write(&key, &installation)?;
            tx.remove(&Installation::by_plugin_key(store_id, &installation.plugin))?;
            crate::service::webhooks::remove_installation_webhooks(tx, store_id, id)?;
            tx.emit(
                &store.reference(),
                PluginUninstalled {
                    installation: installation.clone(),
                },
                now,
            )?;
            Ok(installation)
        })
    }
}

impl Service {
    /// Moves an installation to its plugin's current version, as `plugin dev` does after each
    /// publish and an operator does to roll out a fix: the installation's scopes and the events
    /// its component receives become the new version's (the operator's call is the merchant's
    /// consent to new scopes), and its token, settings and webhook subscriptions stay. Already
    /// current: returned unchanged, nothing written. A version whose manifest `webhooks` differ
    /// from the installed one's is 409 `webhooks_changed`: those subscriptions are made at
    /// install, so uninstall and install it instead.
    pub fn upgrade(&self, store_id: &StoreId, id: &InstallationId) -> Result<Installation> {
        self.store(store_id)?;
        self.db.tx(|tx| {
            let key = Installation::key(store_id, id);
            let mut installation = active_installation(tx, &key, id)?;
            let current: Plugin = tx
                .read(&Plugin::key(&installation.plugin))?
                .ok_or_else(|| Error::not_found("plugin", &installation.plugin))?;
            if current.version == installation.version {
                return Ok(installation);
            }
            let installed: Option<Plugin> = tx.read(&Plugin::version_key(
                &installation.plugin,
                &installation.version,
            ))?;
            if installed.is_some_and(|p| p.manifest.webhooks != current.manifest.webhooks) {
                return Err(Error::Conflict {
                    code: "webhooks_changed",
                    message: format!(
                        "{}@{}'s manifest webhooks differ from the installed {}'s; its subscriptions are made at install: uninstall and install it",
                        current.name, current.version, installation.version
                    ),
                    field: None,
                });
            }
            installation.version = current.version.clone();
            installation.scopes = current.scopes().into_iter().collect();
            installation.component_events = match &current.component {
                Some(_) => crate::service::plugins::parse_events(
                    "manifest.events",
                    &current.manifest.events,
                )?,
                None => Vec::new(),
            };
            tx.write(&key, &installation)?;
            Ok(installation)
        })
    }

    /// Replaces the merchant's settings of an installation; fires `plugin.configured` when they
    /// change.
    pub fn configure(
        &self,
        store_id: &StoreId,
        id: &InstallationId,
        settings: serde_json::Value,
    ) -> Result<Installation> {
        if !settings.is_object() {
            return Err(Error::invalid("settings", "must be a JSON object"));
        }
        if serde_json::to_vec(&settings)?.len() > MAX_SETTINGS_BYTES {
            return Err(Error::invalid(
                "settings",
                format!("must be at most {MAX_SETTINGS_BYTES} bytes of JSON"),
            ));
        }
        let store = self.store(store_id)?;
        let now = self.now();
        self.db.tx(|tx| {
            let key = Installation::key(store_id, id);
            let mut installation = active_installation(tx, &key, id)?;
            if installation.settings == settings {
                return Ok(installation);
            }
            installation.settings = settings.clone();
            tx.write(&key, &installation)?;
            tx.emit(
                &store.reference(),
                PluginConfigured {
                    installation: installation.clone(),
                },
                now,
            )?;
            Ok(installation)
        })
    }

    /// The settings of the actor's own installation: from the [`AuthCache`] while the
    /// installation record is unchanged (a component may read them on every event).
    ///
    /// [`AuthCache`]: super::auth_cache::AuthCache
    pub fn own_settings(&self, actor: &super::Actor) -> Result<serde_json::Value> {
        let (store, id) = (actor.store_id(), &actor.installation);
        if let Some(settings) = self.auth_cache.settings(store, id) {
            return Ok((*settings).clone());
        }
        let read_at = self.auth_cache.generation();
        let settings = self.installation(store, id)?.settings;
        self.auth_cache.remember_settings(
            store,
            id,
            std::sync::Arc::new(settings.clone()),
            read_at,
        );
        Ok(settings)
    }
}

/// The active installation under `key`, else 404 (an uninstalled one is gone for its callers).
fn active_installation(
    tx: &mut crate::storage::Tx<'_>,
    key: &str,
    id: &InstallationId,
) -> Result<Installation> {
    tx.read::<Installation>(key)?
        .filter(|i| i.status == InstallationStatus::Active)
        .ok_or_else(|| Error::not_found("installation", id))
}
