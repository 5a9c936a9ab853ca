//! What a plugin's developer sees of it in the stores that installed it: its versions and
//! installations, and, per installation, the same operations the installation's own token has
//! on its webhooks and component (status, resume, deliveries and attempts, replay, resend, secret
//! rotation). The developer console's pages call these; every rule stays in the operations they
//! reach, so a developer can do through the console exactly what their plugin can do through
//! `/v1`, in the stores that installed it, and nothing in another developer's.

use super::Service;
use super::auth::Actor;
use crate::model::error::{Error, Result};
use crate::model::ids::{AccountId, InstallationId, StoreId};
use crate::model::plugin::Plugin;
use crate::model::store::{Installation, Store};

/// At most this many installations are listed per plugin in the console's overview.
pub const MAX_LISTED_INSTALLATIONS: usize = 200;

/// One of a developer's plugins, with its versions and where it is installed.
#[derive(Debug, Clone)]
pub struct DeveloperPlugin {
    /// The current version.
    pub plugin: Plugin,
    /// Every published version, oldest first.
    pub versions: Vec<String>,
    /// Installations (active and uninstalled), each with its store's domain; at most
    /// [`MAX_LISTED_INSTALLATIONS`].
    pub installations: Vec<(Installation, String)>,
    /// Whether there were more installations than listed.
    pub more: bool,
}

impl Service {
    /// The developer's plugins, each with its versions and the stores that installed it.
    pub fn developer_overview(&self, developer: &AccountId) -> Result<Vec<DeveloperPlugin>> {
        let mut mine: Vec<DeveloperPlugin> = self
            .developer_plugins(developer)?
            .into_iter()
            .map(|plugin| DeveloperPlugin {
                plugin,
                versions: Vec::new(),
                installations: Vec::new(),
                more: false,
            })
            .collect();
        if mine.is_empty() {
            return Ok(mine);
        }
        for entry in &mut mine {
            let prefix = format!("plugin-version/{}/", entry.plugin.name);
            let mut versions = Vec::new();
            self.db.scan(&prefix).each(|_, p: Plugin| {
                versions.push(p.version);
                Ok(())
            })?;
            versions.sort_by_key(|v| super::plugins::parse_version(v));
            entry.versions = versions;
        }
        let mut domains = std::collections::BTreeMap::<StoreId, String>::new();
        self.db.scan("inst/").each(|_, inst: Installation| {
            let Some(entry) = mine.iter_mut().find(|e| e.plugin.name == inst.plugin) else {
                return Ok(());
            };
            if entry.installations.len() >= MAX_LISTED_INSTALLATIONS {
                entry.more = true;
                return Ok(());
            }
            let domain = match domains.get(&inst.store_id) {
                Some(d) => d.clone(),
                None => {
                    let d = self
                        .db
                        .read::<Store>(&Store::key(&inst.store_id))?
                        .map(|s| s.domain)
                        .unwrap_or_default();
                    domains.insert(inst.store_id.clone(), d.clone());
                    d
                }
            };
            entry.installations.push((inst, domain));
            Ok(())
        })?;
        Ok(mine)
    }

    /// An installation of one of the developer's plugins, and the actor its own token would be:
    /// the console acts through the same operations with it. An installation of anyone else's
    /// plugin is 404, as one that does not exist.
    pub fn developer_installation(
        &self,
        developer: &AccountId,
        store: &StoreId,
        id: &InstallationId,
    ) -> Result<(Installation, Actor)> {
        let installation = self.installation(store, id)?;
        let owned = self
            .db
            .read::<Plugin>(&Plugin::key(&installation.plugin))?
            .is_some_and(|p| p.owner.as_ref() == Some(developer));
        if !owned {
            return Err(Error::not_found("installation", id));
        }
        let actor = self.component_actor(&installation)?;
        Ok((installation, actor))
    }
}

impl Service {
    /// Rotates a subscription's secret to a new random one (`whsec_…`, 48 hex digits), with the
    /// overlap of [`Service::rotate_secret`]; returns the new secret, which is not shown again.
    pub fn rotate_to_random_secret(
        &self,
        actor: &Actor,
        id: &crate::model::ids::WebhookId,
    ) -> Result<(crate::model::webhook::SecretRotated, String)> {
        use rand::RngCore as _;
        let mut bytes = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut bytes);
        let secret = format!("whsec_{}", hex::encode(bytes));
        let rotated = self.rotate_secret(
            actor,
            id,
            &crate::model::webhook::RotateSecret {
                secret: secret.clone(),
            },
        )?;
        Ok((rotated, secret))
    }
}

/// What `GET /dev/v1/invocations/{id}` answers: the exact inputs of one invocation of a
/// developer's component, for `commerce-host plugin run --replay`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct InvocationReplay {
    /// The invocation (its attempt id, `att_…`).
    #[schema(value_type = String)]
    pub id: crate::model::ids::AttemptId,
    /// The plugin.
    pub plugin: String,
    /// The version the installation runs.
    pub version: String,
    /// The installation.
    #[schema(value_type = String)]
    pub installation_id: InstallationId,
    /// The event as the component got it (its scopes applied).
    #[schema(value_type = Object)]
    pub event: serde_json::Value,
    /// The records and settings it read.
    pub recording: crate::model::log::Recording,
}

impl Service {
    /// The inputs of one invocation (`att_…`) of the developer's own component: the event, as the
    /// component got it, and what it read. Another developer's, or one whose event has expired,
    /// is 404.
    pub fn developer_invocation(
        &self,
        developer: &AccountId,
        id: &str,
    ) -> Result<InvocationReplay> {
        let attempt: crate::model::ids::AttemptId =
            id.parse().map_err(|_| Error::not_found("invocation", id))?;
        let kept: crate::model::log::InvocationRecord = self
            .db
            .read(&crate::model::log::invocation_key(&attempt))?
            .ok_or_else(|| Error::not_found("invocation", id))?;
        let (installation, _) = self
            .developer_installation(developer, &kept.store_id, &kept.installation_id)
            .map_err(|_| Error::not_found("invocation", id))?;
        let event = self
            .stored_event(&kept.store_id, &kept.event_id)?
            .ok_or_else(|| Error::not_found("invocation", id))?;
        let scopes: std::collections::BTreeSet<_> = installation.scopes.iter().copied().collect();
        let event = serde_json::to_value(event.for_scopes(&scopes).as_ref())
            .map_err(|e| Error::Internal(anyhow::anyhow!("the event: {e}")))?;
        Ok(InvocationReplay {
            id: attempt,
            plugin: installation.plugin,
            version: installation.version,
            installation_id: installation.id,
            event,
            recording: kept.recording,
        })
    }
}
