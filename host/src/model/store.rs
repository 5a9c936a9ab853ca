//! Stores and installations: the records, their limits and quotas, and what an install returns.

use crate::model::error::{Error, Result};
use crate::model::event::StoreRef;
use crate::model::ids::InstallationId;
use crate::model::ids::StoreId;
use crate::model::message::Channel;
use crate::model::scopes::EventType;
use crate::model::scopes::Scope;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use utoipa::ToSchema;
/// A merchant store.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Store {
    /// Store id (`store_…`).
    pub id: StoreId,
    /// The store's domain, unique on this host.
    pub domain: String,
    /// When the store was created.
    #[serde(with = "crate::model::clock::api_ts")]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
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
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it was uninstalled.
    #[serde(
        default,
        with = "crate::model::clock::api_ts::option",
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
        with = "crate::model::clock::api_ts::option",
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

pub fn empty_settings() -> serde_json::Value {
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

/// A change of a store's settings (`PATCH /admin/v1/stores/{store_id}`): the parts given replace
/// the store's, the parts left out stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateStore {
    /// New inbound rate limits; fields left out take the defaults (60/s, burst 120, 600/min).
    pub rate_limits: Option<RateLimits>,
    /// New daily outbound quotas; fields left out take the defaults (email 200, sms 50,
    /// whatsapp 20, push 1000).
    pub quotas: Option<Quotas>,
}

/// The largest daily quota the operator may set.
pub const MAX_QUOTA: u64 = 1_000_000;

/// Messages a store may send per UTC day, per channel; banners per day and showing at once. Feed
/// cards have their own per-plugin rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Quotas {
    /// Emails per day (default 200).
    #[schema(default = 200, maximum = 1_000_000)]
    pub email: u64,
    /// SMS per day (default 50).
    #[schema(default = 50, maximum = 1_000_000)]
    pub sms: u64,
    /// WhatsApp messages per day (default 20).
    #[schema(default = 20, maximum = 1_000_000)]
    pub whatsapp: u64,
    /// Push notifications per day (default 1000).
    #[schema(default = 1000, maximum = 1_000_000)]
    pub push: u64,
    /// Banners per day, from all the store's plugins (default 50).
    #[schema(default = 50, maximum = 1_000_000)]
    pub banner: u64,
    /// Banners one installation may have showing at once: not expired, not dismissed (default
    /// 20).
    #[schema(default = 20, maximum = 1000)]
    pub banner_active: u64,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            email: 200,
            sms: 50,
            whatsapp: 20,
            push: 1000,
            banner: 50,
            banner_active: 20,
        }
    }
}

impl Quotas {
    /// Checks every daily quota is within 0 (channel off) and [`MAX_QUOTA`], and
    /// `banner_active` within 0 and [`MAX_ACTIVE_BANNERS`].
    pub fn validate(&self, field: &str) -> Result<()> {
        for channel in Channel::MESSAGES.into_iter().chain([Channel::Banner]) {
            if self.limit(channel).unwrap_or(0) > MAX_QUOTA {
                return Err(Error::invalid(
                    format!("{field}.{channel}"),
                    format!("must be from 0 to {MAX_QUOTA} per day"),
                ));
            }
        }
        if self.banner_active > MAX_ACTIVE_BANNERS {
            return Err(Error::invalid(
                format!("{field}.banner_active"),
                format!("must be from 0 to {MAX_ACTIVE_BANNERS} banners"),
            ));
        }
        Ok(())
    }

    /// The daily quota of a channel; `None` for the feed (one card per plugin per 24 hours).
    pub fn limit(&self, channel: Channel) -> Option<u64> {
        match channel {
            Channel::Email => Some(self.email),
            Channel::Sms => Some(self.sms),
            Channel::Whatsapp => Some(self.whatsapp),
            Channel::Push => Some(self.push),
            Channel::Banner => Some(self.banner),
            Channel::Feed => None,
        }
    }
}

/// The rate limits of one store, set by the operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Sustained requests per second (refill rate of the burst bucket).
    #[serde(default = "default_per_second")]
    pub requests_per_second: u32,
    /// Requests that may arrive at once (size of the burst bucket).
    #[serde(default = "default_burst")]
    pub burst: u32,
    /// Requests per UTC calendar minute.
    #[serde(default = "default_per_minute")]
    pub requests_per_minute: u32,
}

fn default_per_second() -> u32 {
    60
}
fn default_burst() -> u32 {
    120
}
fn default_per_minute() -> u32 {
    600
}

impl Default for RateLimits {
    fn default() -> Self {
        Self {
            requests_per_second: default_per_second(),
            burst: default_burst(),
            requests_per_minute: default_per_minute(),
        }
    }
}

impl RateLimits {
    /// Checks that the limits make sense.
    pub fn validate(&self, field: &str) -> Result<()> {
        let positive = [
            ("requests_per_second", self.requests_per_second),
            ("burst", self.burst),
            ("requests_per_minute", self.requests_per_minute),
        ];
        for (name, value) in positive {
            if value == 0 {
                return Err(Error::invalid(
                    format!("{field}.{name}"),
                    "must be at least 1",
                ));
            }
        }
        if self.burst < self.requests_per_second {
            return Err(Error::invalid(
                format!("{field}.burst"),
                "must be at least requests_per_second",
            ));
        }
        Ok(())
    }
}

/// The largest number of banners one installation may be allowed to show at once.
pub const MAX_ACTIVE_BANNERS: u64 = 1000;
