//! Stores and the plugins installed into them.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Service;
use super::auth::{TokenRecord, hash_token, new_token, token_key};
use super::events::StoreRef;
use super::pagination::{Listing, Page, PageRequest};
use super::plugins::Plugin;
use super::ratelimit::RateLimits;
use super::scopes::{EventType, Scope};
use crate::error::{Error, Result};
use crate::ids::{InstallationId, StoreId};
use crate::outbound::quota::Quotas;

/// A merchant store.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Store {
    /// Store id (`store_…`).
    pub id: StoreId,
    /// The store's domain, unique on this host.
    pub domain: String,
    /// When the store was created.
    #[serde(with = "crate::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// Inbound API rate limits, shared by every installation of the store.
    pub rate_limits: RateLimits,
    /// Outbound messages per UTC day and channel (stores created before quotas get the defaults).
    #[serde(default)]
    pub quotas: Quotas,
}

impl Store {
    /// Key of a store record.
    pub fn key(id: &StoreId) -> String {
        format!("store/{id}")
    }

    /// The `{id, domain}` pair used in event envelopes.
    pub fn reference(&self) -> StoreRef {
        StoreRef {
            id: self.id.clone(),
            domain: self.domain.clone(),
        }
    }
}

/// Whether an installation is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InstallationStatus {
    /// Installed; its token works.
    Active,
    /// Removed by the merchant; its token is revoked.
    Uninstalled,
}

/// A plugin installed into a store.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Installation {
    /// Installation id (`inst_…`).
    pub id: InstallationId,
    /// The store.
    pub store_id: StoreId,
    /// The plugin's name.
    pub plugin: String,
    /// The plugin version installed.
    pub version: String,
    /// Exactly the manifest's scopes.
    pub scopes: Vec<Scope>,
    /// Active or uninstalled.
    pub status: InstallationStatus,
    /// When it was installed.
    #[serde(with = "crate::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it was uninstalled.
    #[serde(
        default,
        with = "crate::clock::api_ts::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub uninstalled_at: Option<Timestamp>,
    /// For a plugin with a component: the events its component receives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub component_events: Vec<EventType>,
    /// When deliveries to the component were paused (its retries ran out); none while active.
    #[serde(
        default,
        with = "crate::clock::api_ts::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub component_paused_at: Option<Timestamp>,
    /// Why deliveries to the component were paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component_pause_reason: Option<String>,
    /// The merchant's settings for this plugin (a JSON object; `{}` until configured).
    #[serde(default = "empty_settings")]
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
}

fn empty_settings() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// The largest settings object accepted, in bytes of JSON.
pub const MAX_SETTINGS_BYTES: usize = 64 * 1024;

impl Installation {
    /// Key of an installation record.
    pub fn key(store: &StoreId, id: &InstallationId) -> String {
        format!("inst/{store}/{id}")
    }

    /// Key of the index from a plugin name to its active installation in a store.
    pub fn by_plugin_key(store: &StoreId, plugin: &str) -> String {
        format!("inst-by-plugin/{store}/{plugin}")
    }
}

/// A new installation and its token, which is shown only this once.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NewInstallation {
    /// The installation.
    #[serde(flatten)]
    pub installation: Installation,
    /// The project token (`chp_…`): keep it secret; it is not stored and cannot be shown again.
    pub token: String,
}

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

    /// Sets a store's rate limits.
    pub fn set_rate_limits(&self, id: &StoreId, limits: RateLimits) -> Result<Store> {
        limits.validate("rate_limits")?;
        self.update_store(id, |store| store.rate_limits = limits)
    }

    /// Sets a store's daily outbound quotas; the new quotas apply to today's count at once.
    pub fn set_quotas(&self, id: &StoreId, quotas: Quotas) -> Result<Store> {
        quotas.validate("quotas")?;
        self.update_store(id, |store| store.quotas = quotas)
    }

    fn update_store(&self, id: &StoreId, change: impl Fn(&mut Store)) -> Result<Store> {
        self.db.tx(|tx| {
            let mut store: Store = tx
                .read(&Store::key(id))?
                .ok_or_else(|| Error::not_found("store", id))?;
            change(&mut store);
            tx.write(&Store::key(id), &store)?;
            Ok(store)
        })
    }

    /// Installs the current version of `plugin` into `store_id`: issues a project token with
    /// exactly the manifest's scopes, creates the manifest's webhook subscriptions and fires
    /// `plugin.installed`.
    pub fn install(&self, store_id: &StoreId, plugin: &str) -> Result<NewInstallation> {
        let store = self.store(store_id)?;
        let plugin: Plugin = self.db.read(&Plugin::key(plugin))?.ok_or_else(|| {
            Error::invalid("plugin", format!("no plugin named `{plugin}` is published"))
        })?;
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
            super::webhooks::create_manifest_webhooks(
                tx,
                &installation,
                &plugin.manifest.webhooks,
                now,
            )?;
            tx.emit(
                &store.reference(),
                EventType::PluginInstalled,
                serde_json::json!({ "installation": &installation }),
                now,
            )?;
            Ok(())
        })?;
        Ok(NewInstallation {
            installation,
            token,
        })
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
            let mut installation: Installation = tx
                .read(&key)?
                .filter(|i: &Installation| i.status == InstallationStatus::Active)
                .ok_or_else(|| Error::not_found("installation", id))?;
            installation.status = InstallationStatus::Uninstalled;
            installation.uninstalled_at = Some(now);
            tx.write(&key, &installation)?;
            tx.remove(&Installation::by_plugin_key(store_id, &installation.plugin))?;
            super::webhooks::remove_installation_webhooks(tx, store_id, id)?;
            tx.emit(
                &store.reference(),
                EventType::PluginUninstalled,
                serde_json::json!({ "installation": &installation }),
                now,
            )?;
            Ok(installation)
        })
    }
}

impl Service {
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
            let mut installation: Installation = tx
                .read(&key)?
                .filter(|i: &Installation| i.status == InstallationStatus::Active)
                .ok_or_else(|| Error::not_found("installation", id))?;
            if installation.settings == settings {
                return Ok(installation);
            }
            installation.settings = settings.clone();
            tx.write(&key, &installation)?;
            tx.emit(
                &store.reference(),
                EventType::PluginConfigured,
                serde_json::json!({ "installation": &installation }),
                now,
            )?;
            Ok(installation)
        })
    }

    /// The settings of the actor's own installation.
    pub fn own_settings(&self, actor: &super::Actor) -> Result<serde_json::Value> {
        Ok(self
            .installation(actor.store_id(), &actor.installation)?
            .settings)
    }
}
