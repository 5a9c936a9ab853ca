//! The plugin runtime: installed plugins run as sandboxed WebAssembly components.
//!
//! One [`Runtime`] (one wasmtime `Engine`, the pooling allocator, an epoch ticker) for every plugin;
//! each component is validated and compiled once at publish, kept precompiled on disk beside its
//! original bytes (so a restart does not compile again), and loaded into one `InstancePre` per
//! plugin version. Every event is delivered to a fresh instance with the installation's identity;
//! host functions go through the same service layer as the REST API.

use crate::model::plugin::ComponentInfo;
pub mod bindings;
mod convert;
mod deadline;
mod host;
pub mod limits;
pub mod runtime;
pub mod state;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::model::error::{Error, Result};
use crate::model::event::Event;
use crate::model::plugin::Manifest;
use crate::service::{Actor, Service};
pub use limits::Limits;
pub use runtime::{Failure, Outcome, RuntimeConfig};
pub use runtime::{LoadedPlugin, Runtime};
pub use state::HostCall;

/// Installed components and the runtime that runs them.
pub struct Plugins {
    runtime: Runtime,
    dir: PathBuf,
    loaded: Mutex<HashMap<(String, String), LoadedPlugin>>,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn file_stem(name: &str, version: &str) -> String {
    format!("{name}@{version}")
}

impl Plugins {
    /// A runtime keeping components in `dir`. The limits of each invocation are the service
    /// layer's ([`Service::component_limits`]).
    pub fn new(dir: &Path, config: RuntimeConfig) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            runtime: Runtime::new(config)
                .map_err(|e| anyhow::anyhow!("starting the component runtime: {e:#}"))?,
            dir: dir.to_owned(),
            loaded: Mutex::new(HashMap::new()),
        })
    }

    /// The runtime underneath (for benchmarks that measure it bare).
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The folder of the components and their compiled forms.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Validates and compiles a component for `manifest` (a real component that targets our world,
    /// or a clear `validation_failed` on `field`), and keeps it and its compiled form on disk.
    /// The manifest itself (its limits among the rest) is the service layer's to check.
    pub fn store_component(
        &self,
        manifest: &Manifest,
        wasm: &[u8],
        field: &str,
    ) -> Result<ComponentInfo> {
        let compiled = self
            .runtime
            .precompile(wasm)
            .map_err(|e| Error::invalid(field, e.to_string()))?;
        let stem = file_stem(&manifest.name, &manifest.version);
        write_atomically(&self.dir.join(format!("{stem}.wasm")), wasm)?;
        write_atomically(&self.dir.join(format!("{stem}.cwasm")), &compiled)?;
        Ok(ComponentInfo {
            sha256: hex::encode(Sha256::digest(wasm)),
            size: wasm.len() as u64,
        })
    }

    /// Publishes a plugin: the service checks the manifest (its limits included), then (for a
    /// component) this validates, compiles and stores it, then the service records the plugin. Blocking (compiling takes about a second): call it
    /// from a blocking thread.
    pub fn publish(
        &self,
        service: &Service,
        manifest: Manifest,
        templates: &std::collections::BTreeMap<
            String,
            crate::service::notifications::templates::TemplateSource,
        >,
        component: Option<&[u8]>,
    ) -> Result<crate::model::plugin::Plugin> {
        service.check_publishable(&manifest, templates, component.is_some())?;
        let info = component
            .map(|wasm| self.store_component(&manifest, wasm, "component"))
            .transpose()?;
        service.publish_plugin(manifest, templates, info)
    }

    /// The `InstancePre` of a plugin version: from memory, else from its precompiled file (no
    /// compilation), else compiled again from its bytes (after a host upgrade changed the format).
    pub fn load(&self, name: &str, version: &str) -> Result<LoadedPlugin> {
        let key = (name.to_owned(), version.to_owned());
        if let Some(loaded) = self
            .loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(loaded.clone());
        }
        let stem = file_stem(name, version);
        let cwasm = self.dir.join(format!("{stem}.cwasm"));
        // SAFETY: the file was written by `store_component` from `precompile_component` of an
        // engine of this host (wasmtime checks its version and settings) and is never modified
        // in place (replaced atomically by rename).
        #[allow(unsafe_code)]
        let loaded = match unsafe { self.runtime.load_precompiled(&cwasm) } {
            Ok(loaded) => loaded,
            Err(first) => {
                let wasm = std::fs::read(self.dir.join(format!("{stem}.wasm")))
                    .map_err(|e| anyhow::anyhow!("component {stem} is missing ({first}): {e}"))?;
                let compiled = self
                    .runtime
                    .precompile(&wasm)
                    .map_err(|e| anyhow::anyhow!("recompiling {stem}: {e}"))?;
                write_atomically(&cwasm, &compiled)?;
                #[allow(unsafe_code)]
                // SAFETY: as above; written just now.
                unsafe { self.runtime.load_precompiled(&cwasm) }
                    .map_err(|e| anyhow::anyhow!("loading {stem}: {e}"))?
            }
        };
        self.loaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, loaded.clone());
        Ok(loaded)
    }

    /// Loads every given plugin version ahead of its first event.
    pub fn preload<'a>(
        &self,
        versions: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<usize> {
        let mut n = 0;
        for (name, version) in versions {
            self.load(name, version)?;
            n += 1;
        }
        Ok(n)
    }

    /// Delivers `event` to a fresh instance of the installation's plugin. Blocking: call it from
    /// a blocking thread.
    pub fn invoke(
        &self,
        service: &Service,
        actor: Actor,
        manifest: &Manifest,
        event: &Event,
    ) -> Result<Outcome> {
        self.invoke_with(service, actor, manifest, event, false)
    }

    /// [`Plugins::invoke`], keeping a summary of each host call's arguments when `trace`
    /// (`plugin run`).
    pub fn invoke_with(
        &self,
        service: &Service,
        actor: Actor,
        manifest: &Manifest,
        event: &Event,
        trace: bool,
    ) -> Result<Outcome> {
        let limits = service.component_limits(manifest)?;
        let loaded = self.load(&manifest.name, &manifest.version)?;
        let event = convert::event(event)?;
        Ok(self
            .runtime
            .invoke_with(&loaded, actor, service.clone(), &limits, &event, trace))
    }
}

/// A stored event as the typed WIT event a component receives.
pub fn wit_event(event: &Event) -> Result<bindings::commerce::plugin::events::Event> {
    Ok(convert::event(event)?)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| anyhow::anyhow!("renaming to {}: {e}", path.display()))?;
    Ok(())
}

/// A shared handle.
pub type SharedPlugins = Arc<Plugins>;
