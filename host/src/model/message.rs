//! The records of the outbound API: messages, banners and feed cards, and the views of them that
//! plugins and the operator read.

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::failure::{FailureCategory, UNCATEGORIZED};

use crate::model::event::StoreRef;
use crate::model::ids::{InstallationId, MessageId, StoreId};

/// An outbound channel.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    /// Transactional and lifecycle email to the store's customers, through the merchant's SMTP.
    Email,
    /// A short message to a phone number, through the merchant's SMS provider.
    Sms,
    /// A templated message on WhatsApp, through the merchant's WhatsApp provider.
    Whatsapp,
    /// Web or storefront app push, through the merchant's push endpoint.
    Push,
    /// A banner at the top of the merchant dashboard.
    Banner,
    /// A card on the merchant's decision feed.
    Feed,
}

impl Channel {
    /// The channels that deliver a rendered template to a recipient through a sender.
    pub const MESSAGES: [Channel; 4] = [Self::Email, Self::Sms, Self::Whatsapp, Self::Push];

    /// The channel's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Email => "email",
            Self::Sms => "sms",
            Self::Whatsapp => "whatsapp",
            Self::Push => "push",
            Self::Banner => "banner",
            Self::Feed => "feed",
        }
    }

    /// Whether this channel sends a template to a recipient (not a dashboard channel).
    pub fn is_message(self) -> bool {
        Self::MESSAGES.contains(&self)
    }

    /// Parses a channel name.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Banner, Self::Feed]
            .into_iter()
            .chain(Self::MESSAGES)
            .find(|c| c.as_str() == name)
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a notification stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    /// Accepted; the delivery engine sends it (again, after a transient failure, at
    /// `next_attempt_at`).
    Queued,
    /// The merchant's sender accepted it.
    Sent,
    /// Sending failed for good (a permanent refusal, or every attempt failed).
    Failed,
    /// No sender is connected for the channel: kept in the store's outbox, not sent.
    Outbox,
    /// A banner or feed card: on the merchant dashboard.
    Shown,
}

/// The tone of a banner.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tone {
    /// Neutral information.
    Info,
    /// Something needs the merchant's attention.
    Warn,
    /// Something went well.
    Success,
}

/// A call to action on a banner: a link, or a button that dismisses the banner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Cta {
    /// The button's text (1 to 40 characters).
    pub label: String,
    /// A dashboard path: one `/` then a path (not `//`, no `\`, no scheme, space or control
    /// character); exactly one of `href` and `dismiss: true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub href: Option<String>,
    /// `true` makes the button dismiss the banner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dismiss: Option<bool>,
}

/// A link: a label and a dashboard path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// The button's text (1 to 40 characters).
    pub label: String,
    /// A dashboard path: one `/` then a path (not `//`, no `\`, no scheme, space or control
    /// character).
    pub href: String,
}

/// The kind of a feed card.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CardKind {
    /// A suggested action.
    Suggestion,
}

/// A banner on the merchant dashboard, attributed to the plugin that posted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Banner {
    /// The banner's id: the id of the notification that posted it (`msg_…`).
    pub id: MessageId,
    /// The plugin that posted it.
    pub plugin: String,
    /// The installation that posted it.
    pub installation_id: InstallationId,
    /// Info, warn or success.
    pub tone: Tone,
    /// Title.
    pub title: String,
    /// Body text.
    pub body: String,
    /// Up to two calls to action.
    pub ctas: Vec<Cta>,
    /// Lifetime in hours.
    pub ttl_hours: u32,
    /// When it was posted.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When it stops showing (`created_at` + `ttl_hours`).
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub expires_at: Timestamp,
    /// When the merchant dismissed it.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub dismissed_at: Option<Timestamp>,
}

impl Banner {
    /// Key of a banner record.
    pub fn key(store: &StoreId, id: &MessageId) -> String {
        format!("banner/{store}/{id}")
    }

    /// Whether the banner shows at `now`: neither expired nor dismissed.
    pub fn is_active(&self, now: Timestamp) -> bool {
        self.dismissed_at.is_none() && now < self.expires_at
    }
}

/// A card on the merchant's decision feed, attributed to the plugin that posted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FeedCard {
    /// The card's id: the id of the notification that posted it (`msg_…`).
    pub id: MessageId,
    /// The plugin that posted it.
    pub plugin: String,
    /// The installation that posted it.
    pub installation_id: InstallationId,
    /// The card's kind.
    pub kind: CardKind,
    /// Title.
    pub title: String,
    /// Body text.
    pub body: String,
    /// The action the card suggests.
    pub primary: Link,
    /// When it was posted.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When the merchant dismissed it (it then leaves the feed page; the API still lists it).
    #[serde(
        default,
        with = "crate::model::clock::api_ts::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(value_type = Option<String>)]
    pub dismissed_at: Option<Timestamp>,
}

impl FeedCard {
    /// Key of a feed card record.
    pub fn key(store: &StoreId, id: &MessageId) -> String {
        format!("feed/{store}/{id}")
    }
}

/// A message's content, rendered from its template when the request was accepted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Rendered {
    /// Email subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Push title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The text: the email's plain-text part, the SMS, WhatsApp or push body.
    pub body: String,
    /// The email's HTML part, when the template has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
}

/// A notification as the host records it, and as the operator reads it: what the plugin sees,
/// plus the resolved address and the rendered content, which the plugin never sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Message {
    /// What the sending plugin reads (without `banner` and `card`, which have their own records).
    #[serde(flatten)]
    pub notification: Notification,
    /// The store it was sent for.
    pub store: StoreRef,
    /// The plugin that sent it.
    pub plugin: String,
    /// The installation that sent it.
    pub installation_id: InstallationId,
    /// The resolved address: an email address, an E.164 phone, or a customer id for push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The rendered content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Rendered>,
    /// The provider's own words about the last failure (operator only: they may name the
    /// recipient's address; URL secrets are removed before they are stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_detail: Option<String>,
}

impl Message {
    /// Key of a message record.
    pub fn key(store: &StoreId, id: &MessageId) -> String {
        format!("msg/{store}/{id}")
    }

    /// Key prefix of a store's messages.
    pub fn prefix(store: &StoreId) -> String {
        format!("msg/{store}/")
    }

    /// The message's id.
    pub fn id(&self) -> &MessageId {
        &self.notification.id
    }

    /// What the plugin that sent it may read, with its banner or card.
    pub fn view(&self, banner: Option<Banner>, card: Option<FeedCard>) -> Notification {
        let mut view = Notification {
            banner,
            card,
            ..self.notification.clone()
        };
        // A failure recorded before categories kept the provider's raw words in `last_error`.
        if view.last_error.is_some() && view.last_error_category.is_none() {
            view.last_error = Some(UNCATEGORIZED.to_owned());
        }
        view
    }
}

/// A notification, as the plugin that sent it reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Notification {
    /// Notification id (`msg_…`).
    pub id: MessageId,
    /// The channel.
    pub channel: Channel,
    /// `queued`, `sent`, `failed`, `outbox` (no sender connected) or `shown` (banner, feed).
    pub status: MessageStatus,
    /// The recipient as given (`customer:cus_…`, an email address, a phone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The template key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// Delivery attempts made so far.
    pub attempts: u32,
    /// Why the last attempt failed: a fixed text per `last_error_category`, with the HTTP or
    /// SMTP status code when there is one (the provider's own words are the operator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Why the last attempt failed, as a category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_category: Option<FailureCategory>,
    /// When it was accepted.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub created_at: Timestamp,
    /// When its status last changed.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String)]
    pub updated_at: Timestamp,
    /// When the next attempt is due (queued messages).
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub next_attempt_at: Option<Timestamp>,
    /// When the merchant's sender accepted it.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub sent_at: Option<Timestamp>,
    /// The banner, for `channel: banner` (with `expires_at` and `dismissed_at`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub banner: Option<Banner>,
    /// The feed card, for `channel: feed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub card: Option<FeedCard>,
}

/// The answer to `POST /v1/notifications`: the notification and what is left of the quota.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NotificationAccepted {
    /// The notification.
    #[serde(flatten)]
    pub notification: Notification,
    /// The store's quota for the channel after this message; null for banners and feed cards.
    pub quota: Option<QuotaState>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_recorded_before_categories_shows_the_plugin_a_fixed_text() {
        let legacy = serde_json::json!({
            "id": "msg_01a", "channel": "sms", "status": "failed", "attempts": 1,
            "last_error": "the provider could not be reached: error sending request for url \
                           (https://sms.example/send?api_key=sk-1)",
            "created_at": "2026-01-05T00:00:00.000Z", "updated_at": "2026-01-05T00:00:00.000Z",
            "store": {"id": "store_a", "domain": "a.example"}, "plugin": "p",
            "installation_id": "inst_a", "address": "+14155550123",
        });
        let message: Message = serde_json::from_value(legacy).expect("a legacy record loads");
        let view = message.view(None, None);
        assert_eq!(view.last_error.as_deref(), Some(UNCATEGORIZED));
        assert_eq!(view.last_error_category, None);
    }
}

/// A channel's quota after a message was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuotaState {
    /// Messages allowed per day.
    pub limit: u64,
    /// Messages counted today, this one included.
    pub used: u64,
    /// Messages left today.
    pub remaining: u64,
    /// When the count starts again from zero: the next midnight UTC.
    #[serde(with = "crate::model::clock::api_ts")]
    #[schema(value_type = String, example = "2026-11-23T00:00:00.000Z")]
    pub resets_at: Timestamp,
}
