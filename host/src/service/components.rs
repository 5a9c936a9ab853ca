//! The operator's view of installed components as delivery targets: resume after a pause,
//! replay failed events, and the attempt log with the plugin's log lines.

use super::Service;
use crate::model::delivery::{Attempt, TargetRef};
use crate::model::error::{Error, Result};
use crate::model::ids::{InstallationId, StoreId};
use crate::model::store::{Installation, InstallationStatus};
use crate::model::webhook::{ReplayRequest, ReplayResult};
use crate::service::pagination::{Page, PageRequest};

impl Service {
    fn component_installation(&self, store: &StoreId, id: &InstallationId) -> Result<Installation> {
        let installation = self.installation(store, id)?;
        if installation.component_events.is_empty() {
            return Err(Error::conflict(
                "no_component",
                "this installation's plugin has no component",
            ));
        }
        Ok(installation)
    }

    /// Resumes deliveries to a paused component; a no-op on an active one. Missed events are
    /// re-sent with a replay.
    pub fn resume_component(&self, store: &StoreId, id: &InstallationId) -> Result<Installation> {
        self.component_installation(store, id)?;
        self.db.tx(|tx| {
            let key = Installation::key(store, id);
            let mut installation: Installation = tx
                .read(&key)?
                .ok_or_else(|| Error::not_found("installation", id))?;
            if installation.status != InstallationStatus::Active {
                return Err(Error::not_found("installation", id));
            }
            if installation.component_paused_at.take().is_some() {
                installation.component_pause_reason = None;
                tx.write(&key, &installation)?;
            }
            Ok(installation)
        })
    }

    /// Re-sends failed events to an active component.
    pub fn replay_component(
        &self,
        store: &StoreId,
        id: &InstallationId,
        request: &ReplayRequest,
    ) -> Result<ReplayResult> {
        let installation = self.component_installation(store, id)?;
        if installation.component_paused_at.is_some() {
            return Err(Error::conflict(
                "component_paused",
                "the component is paused; resume it before replaying",
            ));
        }
        self.replay_target(store, &TargetRef::Component(id.clone()), request)
    }

    /// The component's attempts, newest first, each with the lines the plugin logged.
    pub fn list_component_attempts(
        &self,
        store: &StoreId,
        id: &InstallationId,
        page: &PageRequest,
    ) -> Result<Page<Attempt>> {
        self.component_installation(store, id)?;
        self.list_target_attempts(store, &TargetRef::Component(id.clone()), page)
    }
}

/// Key of a component's bytes kept in a shared database.
fn component_bytes_key(name: &str, version: &str) -> String {
    format!("component-wasm/{name}/{version}")
}

impl Service {
    /// Keeps a published component's bytes in the database when other hosts share it, so that
    /// each of them can compile it into its own cache (an embedded store belongs to one host: its
    /// components folder is enough).
    pub fn keep_component_bytes(&self, name: &str, version: &str, wasm: &[u8]) -> Result<()> {
        if !self.db.is_shared() {
            return Ok(());
        }
        use base64::Engine as _;
        let encoded = base64::engine::general_purpose::STANDARD.encode(wasm);
        self.db
            .tx(|tx| tx.write(&component_bytes_key(name, version), &encoded))
    }

    /// A component's bytes as another host published them, if they are kept in the database.
    pub fn component_bytes(&self, name: &str, version: &str) -> Result<Option<Vec<u8>>> {
        use base64::Engine as _;
        let Some(encoded) = self
            .db
            .read::<String>(&component_bytes_key(name, version))?
        else {
            return Ok(None);
        };
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map(Some)
            .map_err(|e| {
                Error::Internal(anyhow::anyhow!(
                    "the stored component {name}@{version}: {e}"
                ))
            })
    }
}
