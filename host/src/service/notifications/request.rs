//! The body of `POST /v1/notifications` and its validation into typed inputs.
//!
//! One endpoint, one `channel` selector. The message channels (`email`, `sms`, `whatsapp`,
//! `push`) take `to`, `template` and `data`; a banner comes in `banner`, a feed card in `card`.
//! A field that does not belong to the channel is refused, not ignored.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::text::{self, Lines};
use crate::model::error::{Error, Result};
use crate::model::ids::CustomerId;
use crate::model::message::{CardKind, Channel, Cta, Link, Tone};
use crate::service::validate;

/// Banner and card titles: 1 to 80 characters.
pub const MAX_TITLE: usize = 80;
/// Banner and card bodies: 1 to 500 characters.
pub const MAX_BODY: usize = 500;
/// Button labels: 1 to 40 characters.
pub const MAX_LABEL: usize = 40;
/// At most two calls to action on a banner.
pub const MAX_CTAS: usize = 2;
/// A banner lives 1 to 720 hours (30 days); 24 when not given.
pub const MAX_TTL_HOURS: u32 = 720;
/// Default banner lifetime.
pub const DEFAULT_TTL_HOURS: u32 = 24;
/// At most 50 template variables in `data`, 32 KiB of JSON in all.
pub const MAX_DATA_KEYS: usize = 50;
/// The largest `data`, as JSON.
pub const MAX_DATA_BYTES: usize = 32 * 1024;

/// Body of `POST /v1/notifications`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(
    json!({"channel": "email", "to": "customer:cus_01jd4z7k8m3n5p6q7r8s9t0v1w", "template": "order-thanks",
           "data": {"order_id": "ord_01jd4z7k8m3n5p6q7r8s9t0v1w", "order_url": "https://acme.example/orders/1"}}),
    json!({"channel": "sms", "to": "+14155550123", "template": "order-shipped", "data": {"tracking": "1Z999"}}),
    json!({"channel": "banner", "banner": {"tone": "warn", "title": "Shipping labels are failing",
           "body": "Reconnect your carrier account.", "ctas": [{"label": "Reconnect", "href": "/settings/shipping"},
           {"label": "Later", "dismiss": true}], "ttl_hours": 48}}),
    json!({"channel": "feed", "card": {"kind": "suggestion", "title": "Bundle your bestsellers",
           "body": "Stores like yours sell 12% more with bundles.", "primary": {"label": "Create a bundle", "href": "/bundles/new"}}})
))]
pub struct NotificationRequest {
    /// `email`, `sms`, `whatsapp`, `push`, `banner` or `feed`.
    pub channel: Option<Channel>,
    /// Message channels: `customer:<customer_id>`; for `email` also an email address, for `sms`
    /// and `whatsapp` also an E.164 phone number (`+14155550123`). `push` takes customers only.
    #[serde(default)]
    pub to: Option<String>,
    /// Message channels: the key of one of the plugin's templates.
    #[serde(default)]
    pub template: Option<String>,
    /// Message channels: a value for each of the template's variables, and nothing else.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub data: Option<serde_json::Map<String, serde_json::Value>>,
    /// `banner` only: the banner.
    #[serde(default)]
    pub banner: Option<BannerInput>,
    /// `feed` only: the card.
    #[serde(default)]
    pub card: Option<FeedCardInput>,
}

/// A banner, as a plugin posts it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BannerInput {
    /// `info`, `warn` or `success`.
    pub tone: Tone,
    /// 1 to 80 characters.
    pub title: String,
    /// 1 to 500 characters.
    pub body: String,
    /// Up to 2; each has a `label` and exactly one of `href` (a path) or `dismiss: true`.
    #[serde(default)]
    pub ctas: Vec<Cta>,
    /// Lifetime in hours, 1 to 720; 24 when absent.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 720, default = 24)]
    pub ttl_hours: Option<u32>,
}

/// A feed card, as a plugin posts it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedCardInput {
    /// The card's kind: `suggestion`. Kept as text until [`FeedCardInput::validate`], so that an
    /// unknown kind gets the same refusal over HTTP and from a component.
    #[schema(value_type = CardKind)]
    pub kind: String,
    /// 1 to 80 characters.
    pub title: String,
    /// 1 to 500 characters.
    pub body: String,
    /// The suggested action: a label and a dashboard path.
    pub primary: Link,
}

/// Who a message goes to, before it is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipient {
    /// A customer of the store: their email, phone, or (push) their id.
    Customer(CustomerId),
    /// An email address.
    Email(String),
    /// An E.164 phone number.
    Phone(String),
}

/// A templated message to one recipient, validated.
#[derive(Debug, Clone)]
pub struct MessageInput {
    /// `email`, `sms`, `whatsapp` or `push`.
    pub channel: Channel,
    /// The recipient as the plugin wrote it.
    pub to: String,
    /// The parsed recipient.
    pub recipient: Recipient,
    /// The template key.
    pub template: String,
    /// The template's variables.
    pub data: serde_json::Map<String, serde_json::Value>,
}

/// A notification request, validated and typed by channel: what the WIT host functions build.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// An email, SMS, WhatsApp message or push notification.
    Message(MessageInput),
    /// A dashboard banner.
    Banner(BannerInput),
    /// A feed card.
    Feed(FeedCardInput),
}

/// Refuses the first of `fields` that is present: it belongs to another channel.
fn absent(fields: &[(&str, bool)], channel: Channel) -> Result<()> {
    match fields.iter().find(|(_, present)| *present) {
        Some((field, _)) => Err(Error::invalid(
            *field,
            format!("`{field}` does not apply to the `{channel}` channel"),
        )),
        None => Ok(()),
    }
}

fn required<T: Clone>(field: &str, value: &Option<T>, channel: Channel) -> Result<T> {
    value
        .clone()
        .ok_or_else(|| Error::invalid(field, format!("the `{channel}` channel needs `{field}`")))
}

impl NotificationRequest {
    /// Checks the request and types it by channel. Every refusal names its field.
    pub fn validate(self) -> Result<Outgoing> {
        let channel = self.channel.ok_or_else(|| {
            Error::invalid(
                "channel",
                "required: one of email, sms, whatsapp, push, banner, feed",
            )
        })?;
        match channel {
            Channel::Banner => {
                absent(
                    &[
                        ("to", self.to.is_some()),
                        ("template", self.template.is_some()),
                        ("data", self.data.is_some()),
                        ("card", self.card.is_some()),
                    ],
                    channel,
                )?;
                // The content is checked by the service function that posts it.
                Ok(Outgoing::Banner(required("banner", &self.banner, channel)?))
            }
            Channel::Feed => {
                absent(
                    &[
                        ("to", self.to.is_some()),
                        ("template", self.template.is_some()),
                        ("data", self.data.is_some()),
                        ("banner", self.banner.is_some()),
                    ],
                    channel,
                )?;
                Ok(Outgoing::Feed(required("card", &self.card, channel)?))
            }
            _ => {
                absent(
                    &[
                        ("banner", self.banner.is_some()),
                        ("card", self.card.is_some()),
                    ],
                    channel,
                )?;
                let to = required("to", &self.to, channel)?;
                let recipient = parse_recipient(channel, &to)?;
                let template = required("template", &self.template, channel)?;
                validate::text("template", &template, 1, 64)?;
                let data = self.data.unwrap_or_default();
                if data.len() > MAX_DATA_KEYS {
                    return Err(Error::invalid(
                        "data",
                        format!("at most {MAX_DATA_KEYS} variables"),
                    ));
                }
                if serde_json::to_vec(&data)?.len() > MAX_DATA_BYTES {
                    return Err(Error::invalid(
                        "data",
                        format!("at most {MAX_DATA_BYTES} bytes of JSON"),
                    ));
                }
                Ok(Outgoing::Message(MessageInput {
                    channel,
                    to,
                    recipient,
                    template,
                    data,
                }))
            }
        }
    }
}

/// Parses `to` for a message channel.
pub fn parse_recipient(channel: Channel, to: &str) -> Result<Recipient> {
    if let Some(id) = to.strip_prefix("customer:") {
        return id
            .parse()
            .map(Recipient::Customer)
            .map_err(|_| Error::invalid("to", format!("`{id}` is not a customer id (`cus_…`)")));
    }
    match channel {
        Channel::Email => {
            validate::email("to", to)?;
            Ok(Recipient::Email(to.to_owned()))
        }
        Channel::Sms | Channel::Whatsapp => {
            validate::phone("to", to)?;
            Ok(Recipient::Phone(to.to_owned()))
        }
        _ => Err(Error::invalid(
            "to",
            format!("`{channel}` recipients are `customer:<customer_id>`"),
        )),
    }
}

fn link_label(field: &str, label: &str) -> Result<()> {
    text::check_text(&format!("{field}.label"), label, 1, MAX_LABEL, Lines::One)
}

/// A title (one line) and a body (lines allowed) of a banner or card.
fn title_and_body(at: &str, title: &str, body: &str) -> Result<()> {
    text::check_text(&format!("{at}.title"), title, 1, MAX_TITLE, Lines::One)?;
    text::check_text(&format!("{at}.body"), body, 1, MAX_BODY, Lines::Many)
}

impl BannerInput {
    /// Checks the banner's limits; `at` is the path of the banner in the request.
    pub fn validate(&self, at: &str) -> Result<()> {
        title_and_body(at, &self.title, &self.body)?;
        if self.ctas.len() > MAX_CTAS {
            return Err(Error::invalid(
                format!("{at}.ctas"),
                format!("at most {MAX_CTAS} calls to action"),
            ));
        }
        for (i, cta) in self.ctas.iter().enumerate() {
            let field = format!("{at}.ctas[{i}]");
            link_label(&field, &cta.label)?;
            match (&cta.href, cta.dismiss) {
                (Some(href), None | Some(false)) => {
                    text::check_path(&format!("{field}.href"), href)?;
                }
                (None, Some(true)) => {}
                _ => {
                    return Err(Error::invalid(
                        field,
                        "needs exactly one of `href` (a path) or `dismiss: true`",
                    ));
                }
            }
        }
        let ttl = self.ttl_hours.unwrap_or(DEFAULT_TTL_HOURS);
        if !(1..=MAX_TTL_HOURS).contains(&ttl) {
            return Err(Error::invalid(
                format!("{at}.ttl_hours"),
                format!("must be from 1 to {MAX_TTL_HOURS} hours"),
            ));
        }
        Ok(())
    }
}

/// A card's kind from its name; anything else is refused on `field`.
fn card_kind(field: &str, kind: &str) -> Result<CardKind> {
    match kind {
        "suggestion" => Ok(CardKind::Suggestion),
        other => Err(Error::invalid(
            field,
            format!("`{other}` is not a card kind; use `suggestion`"),
        )),
    }
}

impl FeedCardInput {
    /// Checks the card's kind and limits, and returns its kind; `at` is the path of the card in
    /// the request.
    pub fn validate(&self, at: &str) -> Result<CardKind> {
        let kind = card_kind(&format!("{at}.kind"), &self.kind)?;
        title_and_body(at, &self.title, &self.body)?;
        let primary = format!("{at}.primary");
        link_label(&primary, &self.primary.label)?;
        text::check_path(&format!("{primary}.href"), &self.primary.href)?;
        Ok(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: serde_json::Value) -> Result<Outgoing> {
        serde_json::from_value::<NotificationRequest>(body)
            .expect("shape")
            .validate()
    }

    fn field(body: serde_json::Value) -> String {
        match parse(body) {
            Err(Error::Validation { field, .. }) => field,
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn each_channel_refuses_the_fields_of_the_others() {
        use serde_json::json;
        let banner = json!({"tone": "info", "title": "t", "body": "b"});
        assert_eq!(
            field(json!({"channel": "banner", "banner": banner, "to": "x"})),
            "to"
        );
        assert_eq!(
            field(
                json!({"channel": "email", "to": "a@b.example", "template": "t", "banner": banner})
            ),
            "banner"
        );
        assert_eq!(
            field(json!({"channel": "feed", "banner": banner})),
            "banner"
        );
        assert_eq!(
            field(json!({"channel": "push", "to": "+14155550123", "template": "t"})),
            "to"
        );
        assert!(matches!(
            parse(json!({"channel": "sms", "to": "customer:cus_01abc", "template": "t"})),
            Ok(Outgoing::Message(MessageInput {
                recipient: Recipient::Customer(_),
                ..
            }))
        ));
    }
}
