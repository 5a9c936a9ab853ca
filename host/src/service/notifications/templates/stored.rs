//! Templates in storage: a plugin version's templates (written at publish) and a merchant's
//! overrides per store, and the operator's view of both.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::source::{TemplateSource, Wording};
use crate::model::error::{Error, Result};
use crate::model::ids::StoreId;
use crate::model::store::Installation;
use crate::service::Service;
use crate::storage::Tx;

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
