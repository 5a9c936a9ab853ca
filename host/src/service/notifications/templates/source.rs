//! What a plugin ships: a template's variables and its wording per channel (TOML files in the
//! package's `templates/` folder, or JSON in the publish body), and the parts a wording renders.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::message::Channel;

/// An email's wording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailWording {
    /// The subject line (line breaks in the rendered subject become spaces).
    #[schema(example = "Thanks for your order {{ order_id }}")]
    pub subject: String,
    /// The plain-text body.
    #[schema(
        example = "Hi {{ first_name }}, your order {{ order_id }} is confirmed: {{ order_url }}"
    )]
    pub body: String,
    /// An HTML body, sent beside the text one; values are HTML-escaped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
}

/// An SMS or WhatsApp wording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TextWording {
    /// The text (rendered: at most 1600 characters for SMS, 4096 for WhatsApp).
    pub body: String,
}

/// A push wording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushWording {
    /// The title (rendered: at most 100 characters).
    pub title: String,
    /// The text (rendered: at most 1000 characters).
    pub body: String,
}

/// The wording of a template per channel: a plugin's, or a merchant's override of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Wording {
    /// Email: subject, text body and optional HTML body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<EmailWording>,
    /// SMS text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<TextWording>,
    /// WhatsApp text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whatsapp: Option<TextWording>,
    /// Push title and text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushWording>,
}

/// A template as a plugin ships it (`templates/<key>.toml`, or JSON in the publish body).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"variables": ["first_name", "order_id", "order_url"],
    "email": {"subject": "Thanks for order {{ order_id }}", "body": "Hi {{ first_name }}, see {{ order_url }}"},
    "sms": {"body": "Order {{ order_id }} confirmed: {{ order_url }}"}}))]
pub struct TemplateSource {
    /// What the template is for, for the merchant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The variables every request must give in `data` (and the only ones the wording may use).
    #[serde(default)]
    pub variables: Vec<String>,
    /// Email wording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<EmailWording>,
    /// SMS wording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<TextWording>,
    /// WhatsApp wording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub whatsapp: Option<TextWording>,
    /// Push wording.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<PushWording>,
}

impl TemplateSource {
    /// The plugin's wording.
    pub fn wording(&self) -> Wording {
        Wording {
            email: self.email.clone(),
            sms: self.sms.clone(),
            whatsapp: self.whatsapp.clone(),
            push: self.push.clone(),
        }
    }

    /// Reads a template file (`templates/<key>.toml`).
    pub fn from_toml(text: &str) -> std::result::Result<Self, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// Reads every `*.toml` of a plugin's `templates/` folder: the file name is the key. This is what
/// the plugin tool sends as `templates` when it publishes.
pub fn load_dir(dir: &std::path::Path) -> anyhow::Result<BTreeMap<String, TemplateSource>> {
    let mut templates = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let key = path
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| anyhow::anyhow!("{}: not a UTF-8 file name", path.display()))?
            .to_owned();
        let text = std::fs::read_to_string(&path)?;
        let template = TemplateSource::from_toml(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        templates.insert(key, template);
    }
    Ok(templates)
}

/// One renderable part of a wording: its path (`email.body`), source and the longest text it may
/// render to.
pub(super) struct Part<'a> {
    pub(super) path: &'static str,
    pub(super) source: &'a str,
    pub(super) max_chars: usize,
}

/// Rendered lengths: SMS 1600 characters, WhatsApp 4096, push title 100 and body 1000, email
/// subject 255 and bodies 1 Mi.
const EMAIL_SUBJECT: usize = 255;
const EMAIL_BODY: usize = 1 << 20;
const SMS_BODY: usize = 1600;
const WHATSAPP_BODY: usize = 4096;
const PUSH_TITLE: usize = 100;
const PUSH_BODY: usize = 1000;

impl Wording {
    /// The wording's parts, each with its path, source and the longest text it may render to.
    pub(super) fn parts(&self) -> Vec<Part<'_>> {
        let part = |path, source, max_chars| Part {
            path,
            source,
            max_chars,
        };
        let mut parts = Vec::new();
        if let Some(e) = &self.email {
            parts.push(part("email.subject", e.subject.as_str(), EMAIL_SUBJECT));
            parts.push(part("email.body", e.body.as_str(), EMAIL_BODY));
            if let Some(html) = &e.html {
                // The `.html` name turns on MiniJinja's HTML auto-escaping.
                parts.push(part("email.html", html.as_str(), EMAIL_BODY));
            }
        }
        if let Some(s) = &self.sms {
            parts.push(part("sms.body", s.body.as_str(), SMS_BODY));
        }
        if let Some(w) = &self.whatsapp {
            parts.push(part("whatsapp.body", w.body.as_str(), WHATSAPP_BODY));
        }
        if let Some(p) = &self.push {
            parts.push(part("push.title", p.title.as_str(), PUSH_TITLE));
            parts.push(part("push.body", p.body.as_str(), PUSH_BODY));
        }
        parts
    }

    /// The channels this wording covers.
    pub fn channels(&self) -> Vec<Channel> {
        [
            (Channel::Email, self.email.is_some()),
            (Channel::Sms, self.sms.is_some()),
            (Channel::Whatsapp, self.whatsapp.is_some()),
            (Channel::Push, self.push.is_some()),
        ]
        .into_iter()
        .filter_map(|(c, has)| has.then_some(c))
        .collect()
    }
}
