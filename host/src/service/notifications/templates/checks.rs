//! Checking templates before they are stored: a plugin's at publish (keys, variables, every
//! wording) and a merchant's rewording at override. Each wording is compiled, held to the cut-down
//! language of [`render`](crate::service::notifications::render), and tried with sample values
//! within its channel's limits.

use std::collections::{BTreeMap, BTreeSet};

use minijinja::Value;

use super::source::{TemplateSource, Wording};
use crate::model::error::{Error, Result};
use crate::service::notifications::render::{self, RenderError};
use crate::service::notifications::text;

/// At most 100 templates per plugin.
pub const MAX_TEMPLATES: usize = 100;
/// At most 50 variables per template.
pub const MAX_VARIABLES: usize = 50;
/// A wording's source: at most 64 KiB.
pub const MAX_SOURCE: usize = 64 * 1024;
/// What each declared variable is when a wording is tried out at publish.
const SAMPLE_VALUE: &str = "sample";

impl Wording {
    /// Checks every part: its size and characters, that it compiles, stays within the wording
    /// language of [`render`](crate::service::notifications::render), uses only `variables`, and
    /// renders within its channel's limits with a sample value for each variable. `at` prefixes
    /// the field paths.
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
