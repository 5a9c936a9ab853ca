//! The plugin runtime: installed plugins run as sandboxed WebAssembly components.
//!
//! One [`Runtime`] (one wasmtime `Engine`, the pooling allocator, an epoch ticker) for every plugin;
//! each component is validated and compiled once at publish, kept precompiled on disk beside its
//! original bytes (so a restart does not compile again). A plugin version is loaded on its first
//! event, not before (a restart maps nothing), by mapping its precompiled file; versions whose
//! compiled bytes are identical share one loaded component (one `InstancePre`), and the
//! components held are bounded ([`RuntimeConfig::max_loaded_components`]): the least recently
//! used are let go and mapped again on their next event (see `cache`). Every event is delivered to
//! a fresh instance with the installation's identity; host functions go through the same service
//! layer as the REST API.

use crate::model::plugin::ComponentInfo;
pub mod bindings;
pub mod cache;
mod compat;
mod convert;
mod deadline;
mod host;
pub mod limits;
pub mod runtime;
pub mod state;
pub mod watch;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::model::error::{Error, Result};
use crate::model::event::Event;
use crate::model::plugin::Manifest;
use crate::service::{Actor, Service};
pub use cache::CacheStats;
pub use limits::Limits;
pub use runtime::{Failure, Outcome, RuntimeConfig};
pub use runtime::{LoadedPlugin, Runtime};
pub use state::HostCall;
pub use watch::FileChecks;

/// Installed components and the runtime that runs them.
pub struct Plugins {
    runtime: Runtime,
    dir: PathBuf,
    loaded: Mutex<Loaded>,
}

/// The loaded components and the watch that keeps them current, under one lock.
struct Loaded {
    cache: cache::Cache<FileId, LoadedPlugin>,
    watcher: watch::Watcher,
}

impl Loaded {
    /// Forgets the versions whose files changed since the last look (when the folder is watched).
    fn sync(&mut self) {
        match self.watcher.drain() {
            None => {}
            Some(watch::Changes::Stems(stems)) => {
                for stem in &stems {
                    self.cache.forget(stem);
                }
            }
            Some(watch::Changes::Everything) => self.cache.forget_all(),
        }
    }
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
    /// layer's ([`Service::component_limits`]). Nothing is loaded yet: each plugin version is, on
    /// its first event.
    pub fn new(dir: &Path, config: RuntimeConfig) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let bounds = cache::Bounds {
            max_components: config.max_loaded_components,
            max_bytes: config.max_loaded_component_bytes,
        };
        let watcher = watch::Watcher::new(dir, config.file_checks);
        Ok(Self {
            runtime: Runtime::new(config)
                .map_err(|e| anyhow::anyhow!("starting the component runtime: {e:#}"))?,
            dir: dir.to_owned(),
            loaded: Mutex::new(Loaded {
                cache: cache::Cache::new(bounds),
                watcher,
            }),
        })
    }

    /// What the cache of loaded components holds and has done since the start.
    pub fn cache_stats(&self) -> CacheStats {
        self.loaded().cache.stats()
    }

    /// Whether the components folder is watched for changes ([`FileChecks::Watch`] where the
    /// platform allows it); otherwise every load checks its file.
    pub fn watches_files(&self) -> bool {
        self.loaded().watcher.watching()
    }

    /// The loaded components, current with the changes the watch noticed.
    fn loaded(&self) -> MutexGuard<'_, Loaded> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.sync();
        loaded
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
        let (compiled, wit_version) = self
            .runtime
            .precompile(wasm)
            .map_err(|e| Error::invalid(field, e.to_string()))?;
        let stem = file_stem(&manifest.name, &manifest.version);
        write_atomically(&self.dir.join(format!("{stem}.wasm")), wasm)?;
        write_atomically(&self.dir.join(format!("{stem}.cwasm")), &compiled)?;
        // Whatever was loaded under this name and version is not what runs from now on.
        self.loaded().cache.forget(&stem);
        Ok(ComponentInfo {
            sha256: hex::encode(Sha256::digest(wasm)),
            size: wasm.len() as u64,
            wit_version: wit_version.to_owned(),
            sdk_version: runtime::built_with(wasm).map(|b| b.sdk),
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
        self.publish_as(service, None, manifest, templates, component)
    }

    /// [`Plugins::publish`] by a developer (`Some`) or the operator (`None`): see
    /// [`Service::publish_plugin_as`]. Ownership is checked before anything is compiled.
    pub fn publish_as(
        &self,
        service: &Service,
        developer: Option<&crate::model::ids::AccountId>,
        manifest: Manifest,
        templates: &std::collections::BTreeMap<
            String,
            crate::service::notifications::templates::TemplateSource,
        >,
        component: Option<&[u8]>,
    ) -> Result<crate::model::plugin::Plugin> {
        service.check_publishable(&manifest, templates, component.is_some())?;
        service.check_owner(developer, &manifest.name)?;
        let info = component
            .map(|wasm| self.store_component(&manifest, wasm, "component"))
            .transpose()?;
        if let Some(wasm) = component {
            service.keep_component_bytes(&manifest.name, &manifest.version, wasm)?;
        }
        service.publish_plugin_as(developer, manifest, templates, info)
    }

    /// The `InstancePre` of a plugin version: the loaded component while its precompiled file is
    /// unchanged, else the one loaded for identical compiled bytes (by SHA-256), else mapped from
    /// its precompiled file (no compilation), else compiled again from its bytes (after a host
    /// upgrade changed the format, or when only the compiled file is missing). A version whose
    /// files were replaced runs the new ones, and one whose files were removed fails instead of
    /// running from memory: the watch on the folder forgets them at once, or, where the folder is
    /// not watched, every call compares the compiled file's identity (see [`FileChecks`]).
    pub fn load(&self, name: &str, version: &str) -> Result<LoadedPlugin> {
        self.load_for(None, name, version)
    }

    /// [`Plugins::load`]; a component this host never had (another host on the same database
    /// published it) is fetched from `service`'s storage and compiled into this host's folder.
    pub fn load_for(
        &self,
        service: Option<&Service>,
        name: &str,
        version: &str,
    ) -> Result<LoadedPlugin> {
        let stem = file_stem(name, version);
        {
            // A watched folder: a version still known has unchanged files.
            let mut loaded = self.loaded();
            if loaded.watcher.watching()
                && let Some(hit) = loaded.cache.get(&stem)
            {
                return Ok(hit);
            }
        }
        let cwasm = self.dir.join(format!("{stem}.cwasm"));
        let mut recompiled = false;
        // A file replaced while it is hashed or mapped is looked at again (a few times at most).
        for _ in 0..4 {
            let file = match std::fs::metadata(&cwasm) {
                Ok(meta) => FileId::of(&meta),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !recompiled => {
                    self.loaded().cache.forget(&stem);
                    self.fetch_if_missing(service, name, version)?;
                    self.recompile(&stem, &cwasm, "the precompiled file is missing")?;
                    recompiled = true;
                    continue;
                }
                Err(e) => {
                    self.loaded().cache.forget(&stem);
                    return Err(anyhow::anyhow!("component {stem}: {e}").into());
                }
            };
            let lookup = self.loaded().cache.lookup(&stem, &file);
            let digest = match lookup {
                cache::Lookup::Hit(loaded) => return Ok(loaded),
                cache::Lookup::Known(digest) => digest,
                cache::Lookup::Unknown => {
                    let Some(digest) = digest_file(&cwasm, &file)? else {
                        continue;
                    };
                    let mut loaded = self.loaded();
                    if !is_file(&cwasm, &file) {
                        continue;
                    }
                    if let Some(shared) = loaded.cache.share(&stem, file, digest) {
                        return Ok(shared);
                    }
                    digest
                }
            };
            // SAFETY: the file was written by `store_component` (or `recompile`) from
            // `precompile_component` of an engine of this host (wasmtime checks its version and
            // settings) and is never modified in place (replaced atomically by rename).
            #[allow(unsafe_code)]
            let mapped = unsafe { self.runtime.load_precompiled(&cwasm) };
            match mapped {
                Ok(mapped) => {
                    let mut loaded = self.loaded();
                    if !is_file(&cwasm, &file) {
                        continue;
                    }
                    return Ok(loaded.cache.insert(&stem, file, digest, mapped, file.len));
                }
                Err(first) if !recompiled => {
                    self.loaded().cache.forget(&stem);
                    self.recompile(&stem, &cwasm, &first)?;
                    recompiled = true;
                }
                Err(e) => return Err(anyhow::anyhow!("loading {stem}: {e}").into()),
            }
        }
        Err(anyhow::anyhow!("component {stem} kept changing while it was loaded").into())
    }

    /// Writes a component this host does not have into its folder, from the shared storage, when
    /// another host published it there.
    fn fetch_if_missing(&self, service: Option<&Service>, name: &str, version: &str) -> Result<()> {
        let wasm = self.dir.join(format!("{}.wasm", file_stem(name, version)));
        if wasm.exists() {
            return Ok(());
        }
        if let Some(bytes) = service
            .map(|s| s.component_bytes(name, version))
            .transpose()?
            .flatten()
        {
            write_atomically(&wasm, &bytes)?;
        }
        Ok(())
    }

    /// Compiles `stem`'s component again from its bytes into its precompiled file.
    fn recompile(&self, stem: &str, cwasm: &Path, why: impl std::fmt::Display) -> Result<()> {
        let wasm = std::fs::read(self.dir.join(format!("{stem}.wasm")))
            .map_err(|e| anyhow::anyhow!("component {stem} is missing ({why}): {e}"))?;
        let (compiled, _) = self
            .runtime
            .precompile(&wasm)
            .map_err(|e| anyhow::anyhow!("recompiling {stem}: {e}"))?;
        write_atomically(cwasm, &compiled)
    }

    /// Loads every given plugin version ahead of its first event (within the cache's bounds:
    /// beyond them, the least recently loaded are let go again).
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
    /// a thread that may block (the engine's invoker, or a blocking thread).
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
        let span = tracing::info_span!(
            "component.invoke",
            plugin = %manifest.name,
            version = %manifest.version,
            installation = %actor.installation,
            event.id = %event.id,
            event_type = event.kind().as_str(),
            outcome = tracing::field::Empty,
            fuel_used = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let _entered = span.enter();
        let limits = service.component_limits(manifest)?;
        let loaded = self.load_for(Some(service), &manifest.name, &manifest.version)?;
        let wit = convert::event(event)?;
        let outcome =
            self.runtime
                .invoke_with(&loaded, actor, service.clone(), &limits, &wit, trace);
        let result = runtime::invocation_outcome(Some(&outcome.result));
        span.record("outcome", result);
        span.record("fuel_used", outcome.fuel_used);
        span.record(
            "duration_ms",
            u64::try_from(outcome.elapsed.as_millis()).unwrap_or(u64::MAX),
        );
        if outcome.result.is_err() {
            span.record("otel.status_code", "ERROR");
        }
        Ok(outcome)
    }
}

/// A stored event as the typed WIT event a component receives.
pub fn wit_event(event: &Event) -> Result<bindings::commerce::plugin::events::Event> {
    Ok(convert::event(event)?)
}

/// The identity of a file: a file replaced by another (a rename over it) or rewritten differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    len: u64,
    modified: Option<SystemTime>,
    #[cfg(unix)]
    dev: u64,
    #[cfg(unix)]
    ino: u64,
}

impl FileId {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        use std::os::unix::fs::MetadataExt as _;
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            dev: meta.dev(),
            #[cfg(unix)]
            ino: meta.ino(),
        }
    }
}

/// Whether `path` is still the file `file`. Checked under the lock before a version is recorded:
/// a change before it is seen here, and one after it is queued for the watch (so a recorded
/// version is never stale, even when another thread drained the change meanwhile).
fn is_file(path: &Path, file: &FileId) -> bool {
    matches!(std::fs::metadata(path), Ok(meta) if FileId::of(&meta) == *file)
}

/// The SHA-256 of the file at `path`, if it is still the file `expected`.
fn digest_file(path: &Path, expected: &FileId) -> Result<Option<cache::Digest>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", path.display()).into()),
    };
    let meta = file
        .metadata()
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
    if FileId::of(&meta) != *expected {
        return Ok(None);
    }
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        if n == 0 {
            return Ok(Some(hasher.finalize().into()));
        }
        hasher.update(&buffer[..n]);
    }
}

/// Writes `bytes` to `path` whole or not at all: into a temporary file of this writer's own
/// (two writers of the same file never share one), then renamed over `path`.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("writing {}: {e}", tmp.display())
    })?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("renaming to {}: {e}", path.display())
    })?;
    Ok(())
}

/// A shared handle.
pub type SharedPlugins = Arc<Plugins>;
