//! Pages, the installation, webhook subscriptions and notifications, with the field names of the
//! REST JSON. Records ignore fields this version does not know; bodies leave out what is `None`.

use serde::{Deserialize, Serialize};

/// One page of a list: `{"data": […], "page": {"next_cursor", "has_more"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    /// The items, newest first.
    pub data: Vec<T>,
    /// Where the next page starts.
    pub page: PageInfo,
}

/// Pagination state of a [`Page`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageInfo {
    /// Opaque cursor of the next page; `None` on the last page.
    #[serde(default)]
    pub next_cursor: Option<String>,
    /// True when more items follow.
    #[serde(default)]
    pub has_more: bool,
}

/// Query of the lists without filters (`GET /v1/webhooks`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PageQuery {
    /// Page size, 1 to 250 (50 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Where the page starts: a previous page's `next_cursor`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// A store, as other records refer to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreRef {
    /// `store_…`.
    pub id: String,
    /// The store's domain.
    pub domain: String,
}

/// The calling installation (`GET /v1/installation`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Installation {
    /// `inst_…`.
    pub id: String,
    /// The store that installed the plugin.
    pub store: StoreRef,
    /// The plugin's name.
    pub plugin: String,
    /// The scopes granted (`orders.read`, …).
    pub scopes: Vec<String>,
    /// The merchant's settings (`{}` until configured).
    #[serde(default)]
    pub settings: serde_json::Value,
}

/// A webhook subscription. Its secret is write-only: the host never returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// `wh_…`.
    pub id: String,
    /// The installation it belongs to.
    pub installation_id: String,
    /// Where deliveries go.
    pub url: String,
    /// Event types it receives (`order.created`, …).
    pub events: Vec<String>,
    /// `active` or `paused`.
    pub status: String,
    /// `api` or `manifest`.
    pub source: String,
    /// When it was created.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When it was paused, if it is.
    #[serde(default)]
    pub paused_at: Option<String>,
    /// Why it was paused.
    #[serde(default)]
    pub pause_reason: Option<String>,
}

/// Body of `POST /v1/webhooks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewWebhook {
    /// `http` or `https` URL, at most 2048 bytes.
    pub url: String,
    /// Event types, at least one, no duplicates.
    pub events: Vec<String>,
    /// The signing secret, 16 to 256 bytes; give the same to
    /// [`webhook::verify`](crate::webhook::verify).
    pub secret: String,
}

/// Body of `PATCH /v1/webhooks/{id}`; what is `None` stays as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPatch {
    /// New URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// New event types.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<String>>,
    /// New secret (signs from the next attempt on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// Body of `POST /v1/webhooks/{id}/replay`: one failed event, or every failed one since a time.
///
/// ```
/// use commerce_guest_sdk::client::Replay;
///
/// let one = serde_json::to_value(Replay::Event("evt_01".into())).unwrap();
/// assert_eq!(one, serde_json::json!({"event_id": "evt_01"}));
/// let since = serde_json::to_value(Replay::Since("2026-01-05T00:00:00Z".into())).unwrap();
/// assert_eq!(since, serde_json::json!({"since": "2026-01-05T00:00:00Z"}));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Replay {
    /// One failed event (`evt_…`).
    #[serde(rename = "event_id")]
    Event(String),
    /// Every failed event since this RFC 3339 time.
    #[serde(rename = "since")]
    Since(String),
}

/// Answer of a replay: how many deliveries were queued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayResult {
    /// Deliveries queued.
    pub requeued: u64,
}

/// A call to action on a banner: a `label` and exactly one of `href` or `dismiss`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cta {
    /// 1 to 40 characters.
    pub label: String,
    /// A dashboard path starting with `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub href: Option<String>,
    /// `Some(true)`: the button dismisses the banner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dismiss: Option<bool>,
}

impl Cta {
    /// A button that opens a dashboard path.
    pub fn link(label: impl Into<String>, href: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            href: Some(href.into()),
            dismiss: None,
        }
    }

    /// A button that dismisses the banner.
    pub fn dismiss(label: impl Into<String>) -> Self {
        Self {
            label: label.into(),
            href: None,
            dismiss: Some(true),
        }
    }
}

/// A label and a dashboard path (a feed card's action).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// 1 to 40 characters.
    pub label: String,
    /// A dashboard path starting with `/`.
    pub href: String,
}

/// A banner as a plugin posts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BannerInput {
    /// `info`, `warn` or `success`.
    pub tone: String,
    /// 1 to 80 characters.
    pub title: String,
    /// 1 to 500 characters.
    pub body: String,
    /// At most 2.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ctas: Vec<Cta>,
    /// Lifetime, 1 to 720 hours (24 when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_hours: Option<u32>,
}

/// A feed card as a plugin posts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedCardInput {
    /// `suggestion`.
    pub kind: String,
    /// 1 to 80 characters.
    pub title: String,
    /// 1 to 500 characters.
    pub body: String,
    /// The suggested action.
    pub primary: Link,
}

/// Body of `POST /v1/notifications`; build it with [`message`](Self::message),
/// [`banner`](Self::banner) or [`feed`](Self::feed).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SendNotification {
    /// `email`, `sms`, `whatsapp`, `push`, `banner` or `feed`.
    pub channel: String,
    /// Message channels: `customer:<id>`, or an address for the channel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Message channels: the key of one of the plugin's templates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Message channels: the template's variables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
    /// `banner` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub banner: Option<BannerInput>,
    /// `feed` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub card: Option<FeedCardInput>,
}

impl SendNotification {
    /// A templated message on `channel` (`email`, `sms`, `whatsapp` or `push`) to `to`
    /// (`customer:<id>`, or an address for the channel), with the template's variables.
    pub fn message(
        channel: impl Into<String>,
        to: impl Into<String>,
        template: impl Into<String>,
        data: serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        Self {
            channel: channel.into(),
            to: Some(to.into()),
            template: Some(template.into()),
            data: Some(data),
            ..Self::default()
        }
    }

    /// A banner on the merchant's dashboard.
    pub fn banner(banner: BannerInput) -> Self {
        Self {
            channel: "banner".into(),
            banner: Some(banner),
            ..Self::default()
        }
    }

    /// A card in the merchant's feed (one per plugin per store per 24 hours).
    pub fn feed(card: FeedCardInput) -> Self {
        Self {
            channel: "feed".into(),
            card: Some(card),
            ..Self::default()
        }
    }
}

/// A channel's daily quota after a message was counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuotaState {
    /// Messages allowed per day.
    pub limit: u64,
    /// Messages counted today, this one included.
    pub used: u64,
    /// Messages left today.
    pub remaining: u64,
    /// When the count starts again (midnight UTC).
    pub resets_at: String,
}

/// A notification: a message, a banner or a feed card, and its delivery state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// `msg_…`.
    pub id: String,
    /// Its channel.
    pub channel: String,
    /// `queued`, `sent`, `failed`, `outbox` or `shown`.
    pub status: String,
    /// The recipient as the plugin wrote it.
    #[serde(default)]
    pub to: Option<String>,
    /// The template key.
    #[serde(default)]
    pub template: Option<String>,
    /// Attempts made.
    #[serde(default)]
    pub attempts: u32,
    /// Why the last attempt failed.
    #[serde(default)]
    pub last_error: Option<String>,
    /// When it was accepted.
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// When the next attempt is due.
    #[serde(default)]
    pub next_attempt_at: Option<String>,
    /// When it was sent.
    #[serde(default)]
    pub sent_at: Option<String>,
    /// The banner, for a banner (with `expires_at`, `dismissed_at`).
    #[serde(default)]
    pub banner: Option<serde_json::Value>,
    /// The card, for a feed card.
    #[serde(default)]
    pub card: Option<serde_json::Value>,
}

/// The answer of `POST /v1/notifications`: the notification and, for messages, the quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationAccepted {
    /// The notification.
    #[serde(flatten)]
    pub notification: Notification,
    /// The channel's quota after this message (`None` for banners and feed cards).
    #[serde(default)]
    pub quota: Option<QuotaState>,
}
