//! Published plugins and their manifests.

use crate::model::plugin::Manifest;
use crate::model::plugin::Plugin;
use std::collections::{BTreeMap, BTreeSet};

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::scopes::{EventType, Scope};
use crate::service::notifications::templates::{TemplateSource, validate_templates};
use crate::service::pagination::{Listing, Page, PageRequest};

pub fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(|p| {
        if p.is_empty() || (p.len() > 1 && p.starts_with('0')) {
            None
        } else {
            p.parse::<u64>().ok()
        }
    });
    let version = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(version)
}

/// Checks an email address's shape (one `@`, a dotted domain, no spaces).
pub fn validate_email(field: &str, email: &str) -> Result<()> {
    let ok = email.len() <= 254
        && !email.chars().any(char::is_whitespace)
        && matches!(email.split_once('@'), Some((local, domain))
            if !local.is_empty() && domain.contains('.') && !domain.contains('@')
               && !domain.starts_with('.') && !domain.ends_with('.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            field,
            format!("`{email}` is not an email address"),
        ))
    }
}

/// Parses a list of event names, naming the offending index.
pub fn parse_events(field: &str, events: &[String]) -> Result<Vec<EventType>> {
    if events.is_empty() {
        return Err(Error::invalid(field, "must name at least one event"));
    }
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            e.parse::<EventType>().map_err(|msg| {
                let known: Vec<_> = EventType::ALL.iter().map(|e| e.as_str()).collect();
                Error::invalid(
                    format!("{field}[{i}]"),
                    format!("{msg}; known events: {}", known.join(", ")),
                )
            })
        })
        .collect()
}

/// A developer acts on their own plugins only; the operator (`None`) on any.
fn owned_by(developer: Option<&crate::model::ids::AccountId>, plugin: &Plugin) -> Result<()> {
    match developer {
        Some(id) if plugin.owner.as_ref() != Some(id) => Err(Error::Forbidden {
            code: "not_your_plugin",
            message: format!("`{}` is another developer's plugin", plugin.name),
            field: Some("manifest.name".into()),
        }),
        _ => Ok(()),
    }
}

impl Service {
    /// Refuses, before anything is compiled, a developer publishing a plugin that is not theirs.
    pub fn check_owner(
        &self,
        developer: Option<&crate::model::ids::AccountId>,
        name: &str,
    ) -> Result<()> {
        match self.db.read::<Plugin>(&Plugin::key(name))? {
            Some(current) => owned_by(developer, &current),
            None => Ok(()),
        }
    }

    /// A developer's plugins (the current version of each), by name; at most 1,000.
    pub fn developer_plugins(
        &self,
        developer: &crate::model::ids::AccountId,
    ) -> Result<Vec<Plugin>> {
        let mut mine = Vec::new();
        self.db.scan("plugin/").each(|_, plugin: Plugin| {
            if plugin.owner.as_ref() == Some(developer) && mine.len() < 1_000 {
                mine.push(plugin);
            }
            Ok(())
        })?;
        Ok(mine)
    }
}

fn version_is_newer(manifest: &Manifest, current: &Plugin) -> Result<()> {
    if parse_version(&manifest.version) > parse_version(&current.version) {
        return Ok(());
    }
    Err(Error::Conflict {
        code: "version_not_newer",
        message: format!(
            "plugin `{}` is already published at version {}; publish a higher version",
            manifest.name, current.version
        ),
        field: Some("manifest.version".into()),
    })
}

impl Service {
    /// Publishes a new plugin, or a new version of one, with the version's message templates and
    /// its component (compiled by the caller). Versions only go up.
    pub fn publish_plugin(
        &self,
        manifest: Manifest,
        templates: &BTreeMap<String, TemplateSource>,
        component: Option<crate::model::plugin::ComponentInfo>,
    ) -> Result<Plugin> {
        self.publish_plugin_as(None, manifest, templates, component)
    }

    /// [`Service::publish_plugin`] by a developer (`Some`, with their API key) or the operator
    /// (`None`). A developer publishes a new plugin, which becomes theirs, or a new version of
    /// their own; another's plugin, or one the operator published, is 403 `not_your_plugin`.
    /// The operator publishes any, and a plugin keeps its owner.
    pub fn publish_plugin_as(
        &self,
        developer: Option<&crate::model::ids::AccountId>,
        manifest: Manifest,
        templates: &BTreeMap<String, TemplateSource>,
        component: Option<crate::model::plugin::ComponentInfo>,
    ) -> Result<Plugin> {
        self.check_publishable(&manifest, templates, component.is_some())?;
        self.check_owner(developer, &manifest.name)?;
        let now = self.now();
        self.db.tx(|tx| {
            let current = tx.read::<Plugin>(&Plugin::key(&manifest.name))?;
            if let Some(current) = &current {
                version_is_newer(&manifest, current)?;
                owned_by(developer, current)?;
            }
            let owner = match (&current, developer) {
                (Some(current), _) => current.owner.clone(),
                (None, developer) => developer.cloned(),
            };
            let plugin = Plugin {
                owner,
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                manifest: manifest.clone(),
                published_at: now,
                templates: templates.keys().cloned().collect(),
                component: component.clone(),
            };
            tx.write_templates(&plugin.name, &plugin.version, templates)?;
            tx.write(&Plugin::key(&plugin.name), &plugin)?;
            tx.write(&Plugin::version_key(&plugin.name, &plugin.version), &plugin)?;
            Ok(plugin)
        })
    }

    /// Checks a manifest before anything is stored: its fields, that a component and its
    /// `events` come together, that the version is higher than the published one, and that its
    /// `limits` (a component's only) are within the operator's maxima.
    pub fn check_publishable(
        &self,
        manifest: &Manifest,
        templates: &BTreeMap<String, TemplateSource>,
        has_component: bool,
    ) -> Result<()> {
        manifest.validate("manifest")?;
        validate_templates(templates)?;
        match (has_component, manifest.events.is_empty()) {
            (false, false) => {
                return Err(Error::invalid(
                    "manifest.events",
                    "only a component receives events this way; publish a component, or subscribe with `webhooks`",
                ));
            }
            (true, true) => {
                return Err(Error::invalid(
                    "manifest.events",
                    "a component must name the events it receives",
                ));
            }
            _ => {}
        }
        if let Some(current) = self.db.read::<Plugin>(&Plugin::key(&manifest.name))? {
            version_is_newer(manifest, &current)?;
        }
        self.check_manifest_limits(manifest, has_component)
    }

    /// The current version of a plugin.
    pub fn plugin(&self, name: &str) -> Result<Plugin> {
        self.db
            .read(&Plugin::key(name))?
            .ok_or_else(|| Error::not_found("plugin", name))
    }

    /// Published plugins, by name.
    pub fn list_plugins(&self, page: &PageRequest) -> Result<Page<Plugin>> {
        Listing {
            prefix: "plugin/",
            list_id: "plugins",
            newest_first: false,
        }
        .page(&self.db, &self.cursors, page, |_| true)
    }
}

impl Manifest {
    /// Checks every field, naming the first offending one (`manifest.scopes[1]`).
    pub fn validate(&self, at: &str) -> Result<()> {
        let field = |name: &str| format!("{at}.{name}");
        let name_ok = (2..=64).contains(&self.name.len())
            && self.name.starts_with(|c: char| c.is_ascii_lowercase())
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !name_ok {
            return Err(Error::invalid(
                field("name"),
                "must be 2 to 64 lower-case letters, digits or `-`, starting with a letter",
            ));
        }
        if parse_version(&self.version).is_none() {
            return Err(Error::invalid(
                field("version"),
                format!(
                    "`{}` is not a version of the form MAJOR.MINOR.PATCH",
                    self.version
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, scope) in self.scopes.iter().enumerate() {
            let parsed: Scope = scope
                .parse()
                .map_err(|msg: String| Error::invalid(format!("{at}.scopes[{i}]"), msg))?;
            if !seen.insert(parsed) {
                return Err(Error::invalid(
                    format!("{at}.scopes[{i}]"),
                    format!("`{scope}` is listed twice"),
                ));
            }
        }
        validate_email(&field("contact_email"), &self.contact_email)?;
        crate::service::webhooks::validate_manifest_webhooks(at, self)?;
        if !self.events.is_empty() {
            let events = parse_events(&field("events"), &self.events)?;
            for (i, event) in events.iter().enumerate() {
                if let Some(scope) = event.required_scope()
                    && !self.scopes.iter().any(|s| s == scope.as_str())
                {
                    return Err(Error::invalid(
                        format!("{at}.events[{i}]"),
                        format!(
                            "receiving `{event}` needs the `{scope}` scope; add it to `scopes`"
                        ),
                    ));
                }
            }
        }
        if let Some(description) = &self.description
            && description.chars().count() > 1000
        {
            return Err(Error::invalid(
                field("description"),
                "must be at most 1000 characters",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_are_strict_semver_triples() {
        assert_eq!(parse_version("1.2.3"), Some((1, 2, 3)));
        assert_eq!(parse_version("1.2"), None);
        assert_eq!(parse_version("01.2.3"), None);
        assert_eq!(parse_version("1.2.3.4"), None);
        assert!(parse_version("1.10.0") > parse_version("1.9.9"));
    }
}
