//! Message templates: a key, a wording per channel, and the variables the wording may use.
//!
//! A plugin ships one TOML file per template in its package's `templates/` folder
//! (`templates/order-thanks.toml`: the file name is the key) and publishing uploads them. The
//! wording is MiniJinja (Jinja2) rendered in strict mode: every variable a wording uses must be
//! declared, every declared variable must be given, and nothing else may be. A merchant may
//! reword a template per store, never add a variable or a channel. The language is cut down and
//! every render bounded (see [`super::render`]); a wording is tried with sample values at publish
//! and at override.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use minijinja::{Environment, Value};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::render::{self, RenderError};
use super::text;
use crate::model::error::{Error, Result};
use crate::model::ids::StoreId;
use crate::model::message::{Channel, Rendered};
use crate::model::store::Installation;
use crate::service::Service;
use crate::storage::Tx;

/// At most 100 templates per plugin.
pub const MAX_TEMPLATES: usize = 100;
/// At most 50 variables per template.
pub const MAX_VARIABLES: usize = 50;
/// A wording's source: at most 64 KiB.
pub const MAX_SOURCE: usize = 64 * 1024;
/// What each declared variable is when a wording is tried out at publish.
const SAMPLE_VALUE: &str = "sample";

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
struct Part<'a> {
    path: &'static str,
    source: &'a str,
    max_chars: usize,
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
    fn parts(&self) -> Vec<Part<'_>> {
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

    /// Checks every part: its size and characters, that it compiles, stays within the wording
    /// language of [`render`](super::render), uses only `variables`, and renders within its
    /// channel's limits with a sample value for each variable. `at` prefixes the field paths.
    ///
    /// Waits for a place in [`render::RENDERS`]: call it on a blocking thread.
    pub fn check(&self, at: &str, variables: &[String]) -> Result<()> {
        let env = render::environment();
        let globals: BTreeSet<&str> = env.globals().map(|(name, _)| name).collect();
        let sample = Value::from(minijinja::value::Serde(
            variables
                .iter()
                .map(|v| (v.as_str(), SAMPLE_VALUE))
                .collect::<BTreeMap<_, _>>(),
        ));
        let _permit = render::RENDERS.enter();
        for part in self.parts() {
            let field = if at.is_empty() {
                part.path.to_owned()
            } else {
                format!("{at}.{}", part.path)
            };
            if part.source.len() > MAX_SOURCE {
                return Err(Error::invalid(field, format!("at most {MAX_SOURCE} bytes")));
            }
            text::check_chars(&field, part.source, text::Lines::Many)?;
            // Before compiling: MiniJinja folds constants as it compiles, so `'x' * 99999999`
            // would be built right there.
            render::check_language(part.source).map_err(|e| Error::invalid(&field, e))?;
            let template = env
                .template_from_named_str(part.path, part.source)
                .map_err(|e| Error::invalid(&field, format!("not a valid template: {e}")))?;
            let mut used: Vec<String> = template
                .undeclared_variables(false)
                .into_iter()
                .filter(|v| !globals.contains(v.as_str()) && !variables.contains(v))
                .collect();
            used.sort();
            if let Some(unknown) = used.first() {
                return Err(Error::invalid(
                    field,
                    format!("uses `{unknown}`, which the template does not declare in `variables`"),
                ));
            }
            // Other failures depend on the values a request gives (a sample string where a number
            // is expected): only what breaks the limits whatever the data is, is refused.
            match render::render(&env, part.path, part.source, sample.clone(), part.max_chars) {
                Err(RenderError::TooLong) => {
                    return Err(Error::invalid(
                        field,
                        format!(
                            "renders to more than {} characters even with short values",
                            part.max_chars
                        ),
                    ));
                }
                Err(RenderError::OutOfFuel) => {
                    return Err(Error::invalid(
                        field,
                        format!(
                            "needs more than {} rendering steps even with short values",
                            render::FUEL
                        ),
                    ));
                }
                Err(RenderError::Forbidden(e)) => return Err(Error::invalid(field, e)),
                Ok(_) | Err(RenderError::Failed(_)) => {}
            }
        }
        Ok(())
    }
}

fn valid_key(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn valid_variable(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Checks a plugin's templates at publish: keys, variables, and every wording's syntax and
/// variables. Fields are `templates.<key>.email.body` and the like.
pub fn validate_templates(templates: &BTreeMap<String, TemplateSource>) -> Result<()> {
    if templates.len() > MAX_TEMPLATES {
        return Err(Error::invalid(
            "templates",
            format!("at most {MAX_TEMPLATES} templates"),
        ));
    }
    for (key, template) in templates {
        let at = format!("templates.{key}");
        if !valid_key(key) {
            return Err(Error::invalid(
                at,
                "template keys are 1 to 64 of `a-z`, `0-9`, `-` and `_`, starting with a letter or digit",
            ));
        }
        if let Some(description) = &template.description {
            text::check_text(
                &format!("{at}.description"),
                description,
                0,
                1000,
                text::Lines::Many,
            )?;
        }
        if template.variables.len() > MAX_VARIABLES {
            return Err(Error::invalid(
                format!("{at}.variables"),
                format!("at most {MAX_VARIABLES} variables"),
            ));
        }
        for (i, name) in template.variables.iter().enumerate() {
            let field = format!("{at}.variables[{i}]");
            if !valid_variable(name) {
                return Err(Error::invalid(
                    field,
                    "variable names are letters, digits and `_`, not starting with a digit",
                ));
            }
            if template.variables[..i].contains(name) {
                return Err(Error::invalid(field, format!("`{name}` is declared twice")));
            }
        }
        let wording = template.wording();
        if wording.channels().is_empty() {
            return Err(Error::invalid(
                at,
                "a template needs a wording for at least one of email, sms, whatsapp, push",
            ));
        }
        wording.check(&at, &template.variables)?;
    }
    Ok(())
}

/// Checks `data` against the template's variables: each one given, nothing else, and no control
/// or bidirectional-override character in its strings (they end up in front of people).
fn check_data(
    template: &TemplateSource,
    data: &serde_json::Map<String, serde_json::Value>,
) -> Result<()> {
    if let Some(missing) = template.variables.iter().find(|v| !data.contains_key(*v)) {
        return Err(Error::invalid(
            format!("data.{missing}"),
            format!("the template needs `{missing}`"),
        ));
    }
    if let Some(extra) = data.keys().find(|k| !template.variables.contains(k)) {
        return Err(Error::invalid(
            format!("data.{extra}"),
            format!("the template does not declare `{extra}`"),
        ));
    }
    for (name, value) in data {
        text::check_value(&format!("data.{name}"), value)?;
    }
    Ok(())
}

fn render_part(
    env: &Environment<'static>,
    key: &str,
    part: &Part<'_>,
    data: &Value,
) -> Result<String> {
    render::render(env, part.path, part.source, data.clone(), part.max_chars).map_err(|e| match e {
        RenderError::TooLong => Error::invalid(
            "data",
            format!(
                "the rendered {} is longer than {} characters",
                part.path, part.max_chars
            ),
        ),
        RenderError::OutOfFuel => Error::invalid(
            "data",
            format!(
                "rendering {} takes more than {} steps",
                part.path,
                render::FUEL
            ),
        ),
        // Only a wording stored before the language was cut down gets here.
        RenderError::Forbidden(why) => Error::invalid(
            "template",
            format!("template `{key}` cannot be rendered ({}: {why})", part.path),
        ),
        RenderError::Failed(e) => {
            Error::invalid("data", format!("the template could not be rendered: {e}"))
        }
    })
}

/// Line breaks would end a header: a subject or title is one line.
fn one_line(text: String) -> String {
    text.replace(['\r', '\n'], " ")
}

/// Renders the wording of `channel`: the merchant's override when it has one for the channel,
/// else the plugin's. Refuses a template without that channel (`channel`) and bad `data`.
///
/// Rendering is bounded (see [`render`](super::render)) and waits for a place in
/// [`render::RENDERS`]: call it on a blocking thread.
pub fn render(
    channel: Channel,
    key: &str,
    template: &TemplateSource,
    over: Option<&Wording>,
    data: &serde_json::Map<String, serde_json::Value>,
) -> Result<Rendered> {
    check_data(template, data)?;
    let plugin = template.wording();
    let pick = |w: &Wording| -> bool { w.channels().contains(&channel) };
    let wording = match over {
        Some(o) if pick(o) => o,
        _ if pick(&plugin) => &plugin,
        _ => return Err(no_wording(key, channel)),
    };
    let parts = wording.parts();
    let part = |path: &str| parts.iter().find(|p| p.path == path);
    let env = render::environment();
    let data = Value::from(minijinja::value::Serde(data));
    let _permit = render::RENDERS.enter();
    let r = |path: &str| -> Result<String> {
        let part = part(path).ok_or_else(|| no_wording(key, channel))?;
        render_part(&env, key, part, &data)
    };
    let rendered = match channel {
        Channel::Email => Rendered {
            subject: Some(one_line(r("email.subject")?)),
            body: r("email.body")?,
            html: part("email.html")
                .map(|html| render_part(&env, key, html, &data))
                .transpose()?,
            title: None,
        },
        Channel::Sms => Rendered {
            body: r("sms.body")?,
            ..Rendered::default()
        },
        Channel::Whatsapp => Rendered {
            body: r("whatsapp.body")?,
            ..Rendered::default()
        },
        Channel::Push => Rendered {
            title: Some(one_line(r("push.title")?)),
            body: r("push.body")?,
            ..Rendered::default()
        },
        Channel::Banner | Channel::Feed => return Err(no_wording(key, channel)),
    };
    Ok(rendered)
}

fn no_wording(key: &str, channel: Channel) -> Error {
    Error::invalid(
        "channel",
        format!("template `{key}` has no `{channel}` wording"),
    )
}

/// Key of a template of one plugin version.
pub fn template_key(plugin: &str, version: &str, key: &str) -> String {
    format!("template/{plugin}/{version}/{key}")
}

fn override_key(store: &StoreId, plugin: &str, key: &str) -> String {
    format!("template-override/{store}/{plugin}/{key}")
}

/// A merchant's rewording of a template, in one store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    /// The new wording, for some of the template's channels.
    pub wording: Wording,
    /// When it was set.
    #[serde(with = "crate::model::clock::api_ts")]
    pub updated_at: Timestamp,
}

/// A template as a store sees it: the plugin's wording and the merchant's override.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TemplateView {
    /// The plugin.
    pub plugin: String,
    /// The plugin version installed in the store (templates come with a version).
    pub version: String,
    /// The template key.
    pub key: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The variables every request gives.
    pub variables: Vec<String>,
    /// The plugin's wording.
    pub wording: Wording,
    /// The merchant's wording, which wins for the channels it covers.
    #[serde(rename = "override")]
    pub override_wording: Option<Wording>,
    /// When the override was set.
    #[serde(default, with = "crate::model::clock::api_ts::option")]
    #[schema(value_type = Option<String>)]
    pub override_updated_at: Option<Timestamp>,
}

impl Tx<'_> {
    /// Stores a plugin version's templates (publish).
    pub fn write_templates(
        &mut self,
        plugin: &str,
        version: &str,
        templates: &BTreeMap<String, TemplateSource>,
    ) -> Result<()> {
        for (key, template) in templates {
            self.write(&template_key(plugin, version, key), template)?;
        }
        Ok(())
    }
}

impl Service {
    /// The active installation of `plugin` in `store` (templates follow its version).
    fn installed(&self, store: &StoreId, plugin: &str) -> Result<Installation> {
        self.store(store)?;
        let id = self
            .db
            .read(&Installation::by_plugin_key(store, plugin))?
            .ok_or_else(|| Error::not_found("installation of plugin", plugin))?;
        self.installation(store, &id)
    }

    /// A template of the plugin version installed as `installation`, with the store's override.
    pub fn template_for(
        &self,
        installation: &Installation,
        key: &str,
    ) -> Result<Option<(TemplateSource, Option<Wording>)>> {
        let Some(template) = self.db.read::<TemplateSource>(&template_key(
            &installation.plugin,
            &installation.version,
            key,
        ))?
        else {
            return Ok(None);
        };
        let over = self
            .db
            .read::<Override>(&override_key(
                &installation.store_id,
                &installation.plugin,
                key,
            ))?
            .map(|o| o.wording);
        Ok(Some((template, over)))
    }

    /// A template as `store` sees it (operator API).
    pub fn template_view(&self, store: &StoreId, plugin: &str, key: &str) -> Result<TemplateView> {
        let installation = self.installed(store, plugin)?;
        let template: TemplateSource = self
            .db
            .read(&template_key(plugin, &installation.version, key))?
            .ok_or_else(|| Error::not_found("template", key))?;
        let over: Option<Override> = self.db.read(&override_key(store, plugin, key))?;
        Ok(TemplateView {
            plugin: plugin.to_owned(),
            version: installation.version,
            key: key.to_owned(),
            description: template.description.clone(),
            variables: template.variables.clone(),
            wording: template.wording(),
            override_updated_at: over.as_ref().map(|o| o.updated_at),
            override_wording: over.map(|o| o.wording),
        })
    }

    /// Rewords a template for one store. The override may cover only the template's channels and
    /// use only its declared variables.
    pub fn set_template_override(
        &self,
        store: &StoreId,
        plugin: &str,
        key: &str,
        wording: Wording,
    ) -> Result<TemplateView> {
        let view = self.template_view(store, plugin, key)?;
        let covered = view.wording.channels();
        let channels = wording.channels();
        if channels.is_empty() {
            return Err(Error::invalid(
                "body",
                "give the new wording for at least one of email, sms, whatsapp, push",
            ));
        }
        if let Some(extra) = channels.iter().find(|c| !covered.contains(c)) {
            return Err(Error::invalid(
                extra.as_str(),
                format!("template `{key}` has no `{extra}` wording to override"),
            ));
        }
        wording.check("", &view.variables)?;
        let over = Override {
            wording,
            updated_at: self.now(),
        };
        self.db
            .tx(|tx| tx.write(&override_key(store, plugin, key), &over))?;
        self.template_view(store, plugin, key)
    }

    /// Removes a store's override: the plugin's wording applies again.
    pub fn delete_template_override(&self, store: &StoreId, plugin: &str, key: &str) -> Result<()> {
        self.template_view(store, plugin, key)?;
        self.db
            .tx(|tx| tx.remove(&override_key(store, plugin, key)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORDER_THANKS: &str = r#"
description = "Sent when an order is paid"
variables = ["first_name", "order_id"]

[email]
subject = "Thanks for order {{ order_id }}"
body = """
Hi {{ first_name }},
{% for i in range(2) %}!{% endfor %}
"""
html = "<p>Hi {{ first_name }}</p>"

[sms]
body = "Order {{ order_id }} confirmed"
"#;

    fn data(pairs: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
            .collect()
    }

    #[test]
    fn a_toml_template_file_validates_and_renders_strictly() {
        let template = TemplateSource::from_toml(ORDER_THANKS).expect("toml");
        let templates = BTreeMap::from([("order-thanks".to_owned(), template.clone())]);
        validate_templates(&templates).expect("valid");
        let data = data(&[("first_name", "<Ann>"), ("order_id", "1001")]);
        let email = render(Channel::Email, "order-thanks", &template, None, &data).expect("email");
        assert_eq!(email.subject.as_deref(), Some("Thanks for order 1001"));
        assert!(email.body.contains("Hi <Ann>,"), "{}", email.body);
        assert_eq!(email.html.as_deref(), Some("<p>Hi &lt;Ann&gt;</p>"));
        let err =
            render(Channel::Push, "order-thanks", &template, None, &data).expect_err("no push");
        assert_eq!(err.field(), Some("channel"));
    }

    #[test]
    fn a_stored_wording_outside_the_language_is_refused_before_it_renders() {
        // Stored before wordings were checked for it: refused at send, without rendering.
        let template = TemplateSource {
            sms: Some(TextWording {
                body: "{% for i in range(1000) %}{{ 'x' * 99999999 }}{% endfor %}".into(),
            }),
            ..TemplateSource::default()
        };
        let err = render(Channel::Sms, "bloat", &template, None, &data(&[])).expect_err("refused");
        assert_eq!(err.field(), Some("template"));
    }

    #[test]
    fn undeclared_variables_and_syntax_errors_name_the_wording() {
        let mut template = TemplateSource::from_toml(ORDER_THANKS).expect("toml");
        template.sms = Some(TextWording {
            body: "{{ coupon }}".into(),
        });
        let err = validate_templates(&BTreeMap::from([("t".to_owned(), template.clone())]))
            .expect_err("undeclared");
        assert_eq!(err.field(), Some("templates.t.sms.body"));
        template.sms = Some(TextWording {
            body: "{{ order_id ".into(),
        });
        let err =
            validate_templates(&BTreeMap::from([("t".to_owned(), template)])).expect_err("syntax");
        assert_eq!(err.field(), Some("templates.t.sms.body"));
    }
}
