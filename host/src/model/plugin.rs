//! Plugins: the published record, its manifest (webhooks, limits), and its component.

use crate::model::scopes::Scope;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use std::collections::BTreeSet;
use utoipa::ToSchema;
/// A plugin's manifest (`plugin.toml`, or JSON over HTTP). Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Unique plugin name: lower-case letters, digits and `-`, starting with a letter, 2 to 64
    /// characters.
    #[schema(example = "order-thanks")]
    pub name: String,
    /// Semantic version `MAJOR.MINOR.PATCH`; each publish of a name needs a higher version.
    #[schema(example = "1.0.0")]
    pub version: String,
    /// What the plugin does, for the merchant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The scopes the plugin needs; its installations get exactly these.
    #[serde(default)]
    #[schema(example = json!(["orders.read"]))]
    pub scopes: Vec<String>,
    /// Who is told when one of the plugin's webhook subscriptions is paused.
    #[schema(example = "dev@plugin.example")]
    pub contact_email: String,
    /// Webhook subscriptions created at install.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<ManifestWebhook>,
    /// For a component: the events it receives.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<String>,
    /// For a component: limits per invocation, within the operator's maxima.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ManifestLimits>,
}

/// A webhook subscription declared in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestWebhook {
    /// Endpoint that receives callbacks.
    pub url: String,
    /// Event names.
    pub events: Vec<String>,
    /// Shared signing secret.
    pub secret: String,
}

/// Per-invocation limits a component asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ManifestLimits {
    /// Linear memory, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// CPU budget, in fuel units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Wall-clock bound, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    /// Host function calls per invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_calls: Option<u32>,
    /// Log bytes per invocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_bytes: Option<u32>,
}

/// A plugin as published by the operator.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Plugin {
    /// The manifest's name.
    pub name: String,
    /// The current (latest published) version.
    pub version: String,
    /// The manifest of the current version.
    pub manifest: Manifest,
    /// When the current version was published.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub published_at: Timestamp,
    /// The keys of the current version's message templates.
    #[serde(default)]
    pub templates: Vec<String>,
    /// The WebAssembly component of this version, when the plugin runs inside the host; none for
    /// an external (HTTP-only) plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<crate::model::plugin::ComponentInfo>,
    /// The developer who publishes it (`acct_…`), when one published it with their API key;
    /// only they (and the operator) publish its next versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub owner: Option<crate::model::ids::AccountId>,
}

impl Plugin {
    /// Key of a plugin's current version.
    pub fn key(name: &str) -> String {
        format!("plugin/{name}")
    }

    /// Key of one published version of a plugin (installations run the version they installed).
    pub fn version_key(name: &str, version: &str) -> String {
        format!("plugin-version/{name}/{version}")
    }

    /// The manifest's scopes, parsed (validated at publish).
    pub fn scopes(&self) -> BTreeSet<Scope> {
        self.manifest
            .scopes
            .iter()
            .filter_map(|s| s.parse().ok())
            .collect()
    }
}

/// A published component, as recorded with its plugin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ComponentInfo {
    /// SHA-256 of the component's bytes, hex.
    pub sha256: String,
    /// Size in bytes.
    pub size: u64,
    /// The version of the plugin contract, `commerce:plugin@<version>`, the component was built
    /// against (read from its `handler` export). Components published before versions were
    /// recorded are `0.1.0`, the only version there was.
    #[serde(default = "first_wit_version")]
    pub wit_version: String,
    /// The guest SDK version that built the component, when it recorded one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk_version: Option<String>,
}

fn first_wit_version() -> String {
    "0.1.0".to_owned()
}
