//! Rendering one message: the template's `data` checked against its variables, the merchant's
//! override or the plugin's wording picked for the channel, each part rendered within its limits
//! (the bounded engine is [`render`](crate::service::notifications::render)).

use minijinja::{Environment, Value};

use super::source::{Part, TemplateSource, Wording};
use crate::model::error::{Error, Result};
use crate::model::message::{Channel, Rendered};
use crate::service::notifications::render::{self, RenderError};
use crate::service::notifications::text;

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
/// Rendering is bounded (see [`render`](crate::service::notifications::render)) and waits for a
/// place in [`render::RENDERS`]: call it on a blocking thread.
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
