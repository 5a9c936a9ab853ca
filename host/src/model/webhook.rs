//! Webhook subscriptions: the stored record (with its secret), the API's view, and the bodies of the webhook operations.

use crate::model::delivery::TargetRef;
use crate::model::ids::InstallationId;
use crate::model::ids::StoreId;
use crate::model::ids::WebhookId;
use crate::model::scopes::EventType;
use jiff::Timestamp;
use serde::Deserialize;
use serde::Serialize;
use utoipa::ToSchema;
/// The shortest secret accepted, in bytes (128 bits of a random hex or base64 string).
pub const MIN_SECRET_BYTES: usize = 16;
/// The longest secret accepted, in bytes.
pub const MAX_SECRET_BYTES: usize = 256;
/// The longest URL accepted.
pub const MAX_URL_BYTES: usize = 2048;
/// Subscriptions per installation.
pub const MAX_WEBHOOKS_PER_INSTALLATION: usize = 50;

/// Whether a subscription receives events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookStatus {
    /// Receives its events.
    Active,
    /// Paused after the retries of a delivery ran out; its events are recorded as failed
    /// deliveries until it is resumed.
    Paused,
}

/// Where a subscription came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WebhookSource {
    /// `POST /v1/webhooks`.
    Api,
    /// The plugin manifest's `webhooks`, created at install.
    Manifest,
}

/// A subscription as stored (with its secret).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Subscription {
    /// Subscription id (`wh_…`).
    pub id: WebhookId,
    /// The store.
    pub store_id: StoreId,
    /// The installation that owns it.
    pub installation_id: InstallationId,
    /// Where events are POSTed.
    pub url: String,
    /// The events it receives.
    pub events: Vec<EventType>,
    /// The signing secret.
    pub secret: String,
    /// Active or paused.
    pub status: WebhookStatus,
    /// API or manifest.
    pub source: WebhookSource,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// When it was paused.
    pub paused_at: Option<Timestamp>,
    /// Why it was paused.
    pub pause_reason: Option<String>,
    /// The secret replaced by the last rotation, which also signs deliveries until
    /// `previous_secret_until`.
    #[serde(default)]
    pub previous_secret: Option<String>,
    /// When the previous secret stops signing (24 hours after the rotation).
    #[serde(default)]
    pub previous_secret_until: Option<Timestamp>,
}

/// How long the replaced secret keeps signing deliveries after a rotation.
pub const SECRET_OVERLAP: jiff::SignedDuration = jiff::SignedDuration::from_hours(24);

impl Subscription {
    /// The previous secret, if it still signs at `at` (within 24 hours of the rotation).
    pub fn previous_secret_at(&self, at: Timestamp) -> Option<&str> {
        match (&self.previous_secret, self.previous_secret_until) {
            (Some(secret), Some(until)) if at < until => Some(secret),
            _ => None,
        }
    }

    /// Key of a subscription.
    pub fn key(store: &StoreId, id: &WebhookId) -> String {
        format!("wh/{store}/{id}")
    }

    /// Prefix of a store's subscriptions.
    pub fn store_prefix(store: &StoreId) -> String {
        format!("wh/{store}/")
    }

    pub fn by_installation_key(store: &StoreId, installation: &InstallationId) -> String {
        format!("wh-inst/{store}/{installation}")
    }

    /// The delivery target it is.
    pub fn target(&self) -> TargetRef {
        TargetRef::Webhook(self.id.clone())
    }

    /// The API's view: everything but the secret.
    pub fn view(&self) -> Webhook {
        Webhook {
            id: self.id.clone(),
            installation_id: self.installation_id.clone(),
            url: self.url.clone(),
            events: self.events.clone(),
            status: self.status,
            source: self.source,
            created_at: self.created_at,
            updated_at: self.updated_at,
            paused_at: self.paused_at,
            pause_reason: self.pause_reason.clone(),
        }
    }
}

/// A webhook subscription. The secret is write-only: the subscriber chose it, and it is never
/// sent back.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Webhook {
    /// Subscription id (`wh_…`).
    pub id: WebhookId,
    /// The installation that owns it.
    pub installation_id: InstallationId,
    /// Where events are POSTed.
    #[schema(example = "https://plugin.example/hooks")]
    pub url: String,
    /// The events it receives.
    pub events: Vec<EventType>,
    /// `active`, or `paused` after the retries of a delivery ran out.
    pub status: WebhookStatus,
    /// `api` or `manifest`.
    pub source: WebhookSource,
    /// Creation time.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// Last change.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    /// When it was paused (null while active).
    #[serde(with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub paused_at: Option<Timestamp>,
    /// Why it was paused (null while active).
    pub pause_reason: Option<String>,
}

/// Body of `POST /v1/webhooks`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWebhook {
    /// An `http` or `https` URL whose host resolves to public addresses.
    #[schema(example = "https://plugin.example/hooks")]
    pub url: String,
    /// Event names; each needs the read scope of its resource (`order.*`: `orders.read`).
    #[schema(example = json!(["order.paid"]))]
    pub events: Vec<String>,
    /// Signing secret, 16 to 256 bytes.
    #[schema(example = "whsec-3f9a1c2e8b7d4f60")]
    pub secret: String,
}

/// Body of `POST /v1/webhooks/{id}/test`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TestEventRequest {
    /// One of the subscription's events; default: its first.
    #[schema(example = "order.paid")]
    #[serde(default)]
    pub event_type: Option<String>,
}

/// Body of `POST /v1/webhooks/{id}/rotate-secret`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateSecret {
    /// The new signing secret, 16 to 256 bytes, different from the current one.
    #[schema(example = "whsec-7c1d9e4f2a6b8053")]
    pub secret: String,
}

/// Answer of `POST /v1/webhooks/{id}/rotate-secret`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SecretRotated {
    /// The subscription.
    pub webhook: Webhook,
    /// Until when deliveries also carry `X-Service-Signature-Previous` (the old secret's
    /// signature): 24 hours from the rotation.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub previous_secret_expires_at: Timestamp,
}

/// Body of `PATCH /v1/webhooks/{id}`: the fields to change.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookPatch {
    /// A new URL.
    pub url: Option<String>,
    /// A new list of events (replaces the old one).
    pub events: Option<Vec<String>>,
    /// A new secret (rotation: deliveries sign with it from the next attempt on).
    pub secret: Option<String>,
}

/// Body of `POST /v1/webhooks/{id}/replay`: exactly one of the two fields.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Re-send this one failed event.
    #[schema(value_type = Option<String>, example = "evt_01jd4z7k8m3n5p6q7r8s9t0v1w")]
    pub event_id: Option<String>,
    /// Re-send every failed event that happened at or after this time (RFC 3339).
    #[schema(value_type = Option<String>, example = "2026-01-05T00:00:00Z")]
    pub since: Option<String>,
}

/// Response of `POST /v1/webhooks/{id}/replay`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ReplayResult {
    /// How many failed deliveries were queued again.
    pub requeued: usize,
}

/// Query of `GET /v1/webhooks/{id}/deliveries`.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryFilter {
    /// Only deliveries in this state: `pending`, `succeeded` or `failed`.
    pub status: Option<String>,
    /// Items per page, 1 to 250; 50 when absent.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 250)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<String>,
}
