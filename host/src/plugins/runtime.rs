//! One `Engine` for every plugin, components precompiled once and mapped from their file, one
//! `InstancePre` per distinct loaded component, a fresh `Store` and instance per event.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

use super::bindings::commerce::plugin::events::Event;
use super::bindings::v0_1;
use super::limits::{LimitExceeded, Limits};
use super::state::{HostCall, Invocation};
use super::{compat, deadline, host};
use crate::model::log::LogLine;
use crate::service::{Actor, Service};

/// The versions of `commerce:plugin` the host runs, oldest first; the last is the latest.
/// A released version is supported until the first host release a year after its successor.
pub const WIT_VERSIONS: [&str; 2] = ["0.1.0", "0.2.0"];

/// The latest version of `commerce:plugin`: the last of [`WIT_VERSIONS`].
const LATEST: &str = WIT_VERSIONS[WIT_VERSIONS.len() - 1];

/// The export every plugin has, in every version: `commerce:plugin/handler@<version>`.
const HANDLER: &str = "commerce:plugin/handler@";

/// Engine-wide settings (operator maxima). Per-invocation limits are in [`Limits`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Instances that may run at the same time; sizes the pool, and bounds the engine's component
    /// invocations in flight and the threads they run on (`delivery/invoker.rs`). 128 by default:
    /// the twenty-third pass measured the component backlog of 10 000 about 11 % faster than with
    /// 64 (medians of 8 alternated runs, faster in each), for 1 to 3 MiB more resident with 1 000
    /// plugins (see PERFORMANCE.md). The pool's slots are address space until used.
    pub max_concurrent_instances: u32,
    /// Hard cap on any linear memory; `Limits::memory_bytes` must stay below it.
    pub max_memory_bytes: usize,
    /// Wasm stack per call, for every plugin (not configurable per store).
    pub max_wasm_stack: usize,
    /// Epoch tick; the wall-clock deadline is rounded up to whole ticks.
    pub epoch_tick: Duration,
    /// Keep the wasm address map (trap backtraces with wasm offsets); off shrinks cwasm.
    pub address_map: bool,
    /// Distinct components held loaded at most (versions with identical compiled bytes share
    /// one); past it the least recently used is let go and mapped again from its precompiled file
    /// on its next event (about a millisecond). At least one is always held.
    pub max_loaded_components: usize,
    /// Total size of the compiled forms of the loaded components at most, in bytes (the same
    /// least-recently-used rule; the component in use is held even when larger).
    pub max_loaded_component_bytes: u64,
    /// How a loaded component notices that its files on disk changed or vanished.
    pub file_checks: super::FileChecks,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            max_concurrent_instances: 128,
            max_memory_bytes: 64 << 20,
            max_wasm_stack: 512 << 10,
            epoch_tick: Duration::from_millis(10),
            address_map: true,
            max_loaded_components: 128,
            max_loaded_component_bytes: 256 << 20,
            file_checks: super::FileChecks::Watch,
        }
    }
}

/// Why a component was refused at install time.
#[derive(Debug)]
pub enum LoadError {
    /// The bytes are a core wasm module, not a component.
    NotAComponent,
    /// Not wasm at all, or invalid wasm.
    Invalid(String),
    /// A component that does not export `commerce:plugin/handler` (or with a different type),
    /// listing what it does export.
    WrongWorld(String),
    /// A component built against a version of `commerce:plugin` the host does not know (with
    /// the SDK version that built it, when recorded).
    UnknownVersion { wit: String, sdk: Option<String> },
    /// It imports something the host does not provide (a non-WASI-p2 or unknown interface).
    UnsupportedImport(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotAComponent => write!(
                f,
                "this is a core wasm module, not a component: build with --target wasm32-wasip2"
            ),
            Self::Invalid(e) => write!(f, "not a valid wasm component: {e}"),
            Self::WrongWorld(e) => write!(
                f,
                "component does not target the commerce:plugin/plugin world: {e}"
            ),
            Self::UnknownVersion { wit, sdk } => write!(
                f,
                "the component is built against commerce:plugin@{wit}{}, which this host does not know: it runs commerce:plugin@{}; rebuild the plugin with a guest SDK for one of those, or upgrade the host",
                sdk.as_ref()
                    .map(|v| format!(" (commerce-guest-sdk {v})"))
                    .unwrap_or_default(),
                WIT_VERSIONS.join(" and @")
            ),
            Self::UnsupportedImport(e) => write!(
                f,
                "component imports something the host does not provide: {e}"
            ),
        }
    }
}

impl std::error::Error for LoadError {}

/// Why an invocation failed; each kind is distinguishable for the attempt log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The handler returned `err(message)`.
    Handler(String),
    /// Fuel ran out (CPU budget).
    OutOfFuel,
    /// The wall-clock deadline passed (epoch interruption).
    Timeout,
    /// Wasm stack exhausted.
    StackOverflow,
    /// A limit enforced by the host (host calls, log bytes, memory growth).
    Limit(LimitExceeded),
    /// Out-of-bounds memory access: a wild pointer, or Rust's shadow stack (in linear
    /// memory) overflowing below address 0.
    MemoryFault,
    /// The guest panicked or aborted (`unreachable`); its message is in the stderr log line.
    Panic,
    /// Any other trap.
    Trap(String),
    /// Instantiation failed (for example the instance pool is full).
    Instantiate(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Handler(m) => write!(f, "the handler returned an error: {m}"),
            Self::OutOfFuel => f.write_str("stopped: the CPU budget (fuel) ran out"),
            Self::Timeout => f.write_str("stopped: the wall-clock limit passed"),
            Self::StackOverflow => f.write_str("stopped: stack overflow"),
            Self::Limit(limit) => write!(f, "stopped: {limit}"),
            Self::MemoryFault => f.write_str(
                "stopped: out-of-bounds memory access (often a stack overflow in linear memory)",
            ),
            Self::Panic => f.write_str("the plugin panicked or aborted (see its stderr log line)"),
            Self::Trap(m) => write!(f, "stopped by a trap: {m}"),
            Self::Instantiate(m) => write!(f, "could not instantiate the component: {m}"),
        }
    }
}

/// The `outcome` label of a component invocation that ended with `failure`.
pub fn failure_outcome(failure: &Failure) -> &'static str {
    match failure {
        Failure::Handler(_) => "handler_error",
        Failure::OutOfFuel => "fuel",
        Failure::Timeout => "timeout",
        Failure::Limit(LimitExceeded::Memory { .. }) => "memory",
        Failure::Limit(LimitExceeded::HostCalls { .. } | LimitExceeded::LogBytes { .. }) => "limit",
        Failure::StackOverflow | Failure::MemoryFault | Failure::Panic | Failure::Trap(_) => "trap",
        Failure::Instantiate(_) => "instantiate",
    }
}

/// The `outcome` label of a component invocation: `ok`, a [`failure_outcome`], or `host_error`
/// when the host could not run it at all.
pub fn invocation_outcome(result: Option<&Result<(), Failure>>) -> &'static str {
    match result {
        Some(Ok(())) => "ok",
        Some(Err(failure)) => failure_outcome(failure),
        None => "host_error",
    }
}

/// The result of delivering one event.
#[derive(Debug)]
pub struct Outcome {
    pub result: Result<(), Failure>,
    pub logs: Vec<LogLine>,
    /// The store capabilities it called, in order, with what each answered.
    pub host_calls: Vec<HostCall>,
    /// What it read from its store, for a replay (`plugin run --replay`).
    pub recording: crate::model::log::Recording,
    pub fuel_used: u64,
    pub elapsed: Duration,
}

/// A loaded component, ready to instantiate (shared by the plugin versions with identical
/// compiled bytes).
#[derive(Clone)]
pub struct LoadedPlugin {
    pre: Pre,
}

/// The component ready to instantiate, with the bindings of the version it was built against.
#[derive(Clone)]
enum Pre {
    V0_1(v0_1::PluginPre<Invocation>),
    V0_2(Arc<Latest>),
}

/// `handle-event`'s type in the latest version, as the host calls it.
type HandleEvent<'a> = wasmtime::component::TypedFunc<(&'a Event,), (Result<(), String>,)>;

/// A component of the latest version, its handler looked up once. The bindings' own
/// `instantiate` checks the handler's type against theirs on every instance (a walk of the whole
/// `event` type: about 2 % of a component backlog's samples); a component's export types are
/// the same in all its instances, so this checks it on the first instance only.
struct Latest {
    pre: wasmtime::component::InstancePre<Invocation>,
    /// `commerce:plugin/handler@<LATEST>#handle-event`.
    handle_event: wasmtime::component::ComponentExportIndex,
    /// Set once an instance of this component had its handler's type checked.
    checked: AtomicBool,
}

impl Latest {
    fn new(pre: wasmtime::component::InstancePre<Invocation>) -> wasmtime::Result<Self> {
        let component = pre.component();
        let handler = component
            .get_export_index(None, format!("{HANDLER}{LATEST}"))
            .ok_or_else(|| wasmtime::format_err!("no export {HANDLER}{LATEST}"))?;
        let handle_event = component
            .get_export_index(Some(&handler), "handle-event")
            .ok_or_else(|| wasmtime::format_err!("{HANDLER}{LATEST} exports no handle-event"))?;
        Ok(Self {
            pre,
            handle_event,
            checked: AtomicBool::new(false),
        })
    }

    /// Instantiates the component in `store` and calls its handler on `event`.
    fn handle<'a>(
        &self,
        store: &mut Store<Invocation>,
        event: &'a Event,
        instantiated: impl Fn(wasmtime::Error) -> Failure,
    ) -> Result<wasmtime::Result<Result<(), String>>, Failure> {
        let instance = self.pre.instantiate(&mut *store).map_err(&instantiated)?;
        let handler = if self.checked.load(Ordering::Acquire) {
            let func = instance
                .get_func(&mut *store, self.handle_event)
                .ok_or_else(|| Failure::Instantiate("handle-event is not a function".into()))?;
            // SAFETY: `checked` is set below only once `get_typed_func` accepted these types for
            // this export on an instance of this same component, and every instance of a
            // component has its types.
            #[allow(unsafe_code)]
            unsafe {
                HandleEvent::<'a>::new_unchecked(func)
            }
        } else {
            let typed: HandleEvent<'a> = instance
                .get_typed_func(&mut *store, self.handle_event)
                .map_err(&instantiated)?;
            self.checked.store(true, Ordering::Release);
            typed
        };
        Ok(handler
            .call(&mut *store, (event,))
            .map(|(handled,)| handled))
    }
}

impl LoadedPlugin {
    /// The version of `commerce:plugin` the component was built against.
    pub fn wit_version(&self) -> &'static str {
        match self.pre {
            Pre::V0_1(_) => "0.1.0",
            Pre::V0_2(_) => LATEST,
        }
    }
}

pub struct Runtime {
    engine: Engine,
    /// The latest version's imports.
    linker: Linker<Invocation>,
    /// `commerce:plugin@0.1.0`'s, adapted to the latest (`compat`).
    linker_v0_1: Linker<Invocation>,
    config: RuntimeConfig,
    ticker: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> wasmtime::Result<Self> {
        let engine = Engine::new(&engine_config(&config))?;
        let linker = new_linker(&engine, host::add_to_linker)?;
        let linker_v0_1 = new_linker(&engine, compat::add_to_linker)?;

        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (engine, stop, tick) = (engine.clone(), stop.clone(), config.epoch_tick);
            std::thread::Builder::new()
                .name("epoch-ticker".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })?
        };
        Ok(Self {
            engine,
            linker,
            linker_v0_1,
            config,
            ticker: Some((stop, ticker)),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Validates and compiles a component; returns the precompiled artifact to cache on disk and
    /// the version of `commerce:plugin` it was built against.
    #[allow(unsafe_code)]
    pub fn precompile(&self, wasm: &[u8]) -> Result<(Vec<u8>, &'static str), LoadError> {
        match wasm.get(0..8) {
            Some([0, b'a', b's', b'm', 0x01, 0, 0, 0]) => return Err(LoadError::NotAComponent),
            Some([0, b'a', b's', b'm', 0x0d, 0, 0x01, 0]) => {}
            _ => {
                return Err(LoadError::Invalid(
                    "missing the wasm component header".into(),
                ));
            }
        }
        // What the SDK recorded refuses an unknown version before the costly compilation, and
        // with the SDK's version in the message.
        if let Some(built) = built_with(wasm)
            && !WIT_VERSIONS.contains(&built.wit.as_str())
        {
            return Err(LoadError::UnknownVersion {
                wit: built.wit,
                sdk: Some(built.sdk),
            });
        }
        let bytes = self
            .engine
            .precompile_component(wasm)
            .map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        // SAFETY: `bytes` was produced just now by `precompile_component` of this engine.
        let component = unsafe { Component::deserialize(&self.engine, &bytes) }
            .map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        let loaded = self.check_world(&component)?;
        Ok((bytes, loaded.wit_version()))
    }

    /// Loads a precompiled artifact written by [`Runtime::precompile`] (no compilation).
    ///
    /// # Safety
    ///
    /// `path` must hold bytes produced by `precompile_component`/`serialize` (wasmtime
    /// checks version and engine settings, but not integrity: arbitrary bytes are native
    /// code), and the file must not change while loaded (it is mmapped).
    #[allow(unsafe_code)]
    pub unsafe fn load_precompiled(&self, path: &Path) -> Result<LoadedPlugin, LoadError> {
        // SAFETY: forwarded to the caller.
        let component = unsafe { Component::deserialize_file(&self.engine, path) }
            .map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        self.check_world(&component)
    }

    /// Which version of `commerce:plugin` the component was built against (the version of its
    /// `handler` export), and its ready-to-instantiate form with that version's bindings.
    fn check_world(&self, component: &Component) -> Result<LoadedPlugin, LoadError> {
        let exports: Vec<String> = component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let Some(version) = exports.iter().find_map(|name| name.strip_prefix(HANDLER)) else {
            return Err(LoadError::WrongWorld(format!(
                "no export {HANDLER}<version> (exports: [{}])",
                exports.join(", ")
            )));
        };
        let linker = match version {
            "0.1.0" => &self.linker_v0_1,
            "0.2.0" => &self.linker,
            other => {
                return Err(LoadError::UnknownVersion {
                    wit: other.to_owned(),
                    sdk: None,
                });
            }
        };
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| LoadError::UnsupportedImport(format!("{e:#}")))?;
        let wrong = |e: wasmtime::Error| LoadError::WrongWorld(format!("{e:#}"));
        let pre = match version {
            "0.1.0" => Pre::V0_1(v0_1::PluginPre::new(pre).map_err(wrong)?),
            _ => Pre::V0_2(Arc::new(Latest::new(pre).map_err(wrong)?)),
        };
        Ok(LoadedPlugin { pre })
    }

    /// Delivers one event to a fresh instance of `plugin`. Never panics on guest behaviour.
    pub fn invoke(
        &self,
        plugin: &LoadedPlugin,
        actor: Actor,
        service: Service,
        limits: &Limits,
        event: &Event,
    ) -> Outcome {
        self.invoke_with(plugin, actor, service, limits, event, false)
    }

    /// [`Runtime::invoke`], with `trace`: the outcome's host calls keep a summary of their
    /// arguments (for `plugin run`; the delivery engine does not pay for it).
    pub fn invoke_with(
        &self,
        plugin: &LoadedPlugin,
        actor: Actor,
        service: Service,
        limits: &Limits,
        event: &Event,
        trace: bool,
    ) -> Outcome {
        let started = Instant::now();
        let state = Invocation::with_trace(actor, service, limits, trace);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        let result = self.run(&mut store, plugin, limits, event);
        let fuel_used = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
        let (logs, host_calls, recording) = store.into_data().into_parts();
        Outcome {
            result,
            logs,
            host_calls,
            recording,
            fuel_used,
            elapsed: started.elapsed(),
        }
    }

    fn run(
        &self,
        store: &mut Store<Invocation>,
        plugin: &LoadedPlugin,
        limits: &Limits,
        event: &Event,
    ) -> Result<(), Failure> {
        store
            .set_fuel(limits.fuel)
            .map_err(|e| Failure::Instantiate(format!("{e:#}")))?;
        let tick = self.config.epoch_tick.as_nanos().max(1);
        let ticks = limits.wall_clock.as_nanos().div_ceil(tick) as u64;
        store.set_epoch_deadline(ticks.max(1));
        store.epoch_deadline_trap();

        // Instantiation runs guest code too (start functions), so its traps are classified.
        let instantiated = |e| match classify(e) {
            Failure::Trap(m) => Failure::Instantiate(m),
            other => other,
        };
        let handled = match &plugin.pre {
            Pre::V0_2(latest) => latest.handle(store, event, instantiated)?,
            Pre::V0_1(pre) => {
                let event = compat::event_v0_1(event)
                    .map_err(|e| Failure::Instantiate(format!("adapting the event: {e:#}")))?;
                pre.instantiate(&mut *store)
                    .map_err(instantiated)?
                    .commerce_plugin_handler()
                    .call_handle_event(&mut *store, &event)
            }
        };
        match handled {
            Ok(Ok(())) => Ok(()),
            Ok(Err(message)) => Err(Failure::Handler(message)),
            Err(e) => Err(classify(e)),
        }
    }
}

/// What the guest SDK recorded in a component: its custom section `commerce-plugin`, holding
/// `{"wit":"<version>","sdk":"<version>"}` (see `commerce_plugin!` in the guest SDK).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BuiltWith {
    /// The `commerce:plugin` version it targets.
    pub wit: String,
    /// The guest SDK's version.
    pub sdk: String,
}

/// The custom section the guest SDK writes.
pub const BUILT_WITH_SECTION: &str = "commerce-plugin";

/// What the guest SDK recorded in `wasm` (a component or a core module), if anything: `None`
/// for a component built without the SDK, or whose record does not parse. Reads the sections
/// without validating or compiling anything.
pub fn built_with(wasm: &[u8]) -> Option<BuiltWith> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload {
            Ok(wasmparser::Payload::CustomSection(section))
                if section.name() == BUILT_WITH_SECTION =>
            {
                return serde_json::from_slice(section.data()).ok();
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// A linker with WASI p2 and one version's `commerce:plugin` imports (`add`).
fn new_linker(
    engine: &Engine,
    add: fn(&mut Linker<Invocation>) -> wasmtime::Result<()>,
) -> wasmtime::Result<Linker<Invocation>> {
    let mut linker = Linker::new(engine);
    // WASI p2, sync flavour: Rust's wasip2 std imports wasi:cli/environment,
    // wasi:cli/exit, wasi:io/*, wasi:clocks/*, wasi:filesystem/*, wasi:random/* even when
    // unused; the empty WasiCtx makes them inert (no preopens, env, args, sockets).
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
    // ... except that a guest's waits end at its deadline (see `deadline`).
    deadline::add_to_linker(&mut linker)?;
    add(&mut linker)?;
    Ok(linker)
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.ticker.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
    }
}

/// Turns a wasmtime error into a failure kind: our own typed limit errors first (they
/// are the root of the chain when a host function or the limiter refused), then traps.
pub fn classify(e: wasmtime::Error) -> Failure {
    if let Some(limit) = e.downcast_ref::<LimitExceeded>() {
        return Failure::Limit(limit.clone());
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Failure::OutOfFuel,
        Some(Trap::Interrupt) => Failure::Timeout,
        Some(Trap::StackOverflow) => Failure::StackOverflow,
        Some(Trap::MemoryOutOfBounds) => Failure::MemoryFault,
        Some(Trap::UnreachableCodeReached) => Failure::Panic,
        Some(trap) => Failure::Trap(trap.to_string()),
        None => Failure::Trap(format!("{e:#}")),
    }
}

/// How much of each linear memory slot stays resident when an instance ends, reset in place for
/// the next one. With Linux's `PAGEMAP_SCAN` (6.7 and later) only the pages the instance wrote
/// are reset, by copying the image back or zeroing them, up to this much; a plugin's working set
/// (a few pages of stack, data and heap) then costs no system call and no page fault on the next
/// instance. Unmapping them instead (`madvise`) cost a TLB shoot-down on every core the process
/// ran on, per instance, and page faults on the next one: an invocation took 0.026 ms at the
/// median then and 0.015 ms now (the dispatch bench, 2-core machine). Without the scan the first
/// bytes of the slot are reset whether written or not, so little is kept. Warm slots are at most
/// a quarter of the pool, so this keeps at most a few MiB more resident.
fn keep_resident() -> usize {
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        256 << 10
    } else {
        64 << 10
    }
}

fn engine_config(rc: &RuntimeConfig) -> Config {
    let n = rc.max_concurrent_instances;
    let mut pool = PoolingAllocationConfig::default();
    // The pool bounds *concurrent* instances, not installed plugins: 1,000 installed
    // plugins are 1,000 `InstancePre`s that hold no slot. A Rust wasip2 component
    // instantiates a few core instances (main module + shims) with 1-2 memories.
    pool.total_component_instances(n)
        .total_core_instances(n * 8)
        .total_memories(n * 2)
        .total_tables(n * 4)
        .max_core_instances_per_component(16)
        .max_memories_per_component(4)
        .max_tables_per_component(8)
        .max_memory_size(rc.max_memory_bytes)
        // Reset what an instance wrote in place, so reuse neither unmaps nor page-faults.
        .linear_memory_keep_resident(keep_resident())
        .table_keep_resident(16 << 10)
        .pagemap_scan(wasmtime::Enabled::Auto)
        .max_unused_warm_slots(n / 4);

    let mut config = Config::new();
    config
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool))
        .consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(rc.max_wasm_stack)
        .generate_address_map(rc.address_map)
        .wasm_component_model(true);
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_component_failure_maps_to_its_outcome_label() {
        let cases = [
            (Failure::Handler("no".into()), "handler_error"),
            (Failure::OutOfFuel, "fuel"),
            (Failure::Timeout, "timeout"),
            (
                Failure::Limit(LimitExceeded::Memory {
                    desired: 2,
                    limit: 1,
                }),
                "memory",
            ),
            (
                Failure::Limit(LimitExceeded::HostCalls { limit: 1 }),
                "limit",
            ),
            (
                Failure::Limit(LimitExceeded::LogBytes { limit: 1 }),
                "limit",
            ),
            (Failure::StackOverflow, "trap"),
            (Failure::MemoryFault, "trap"),
            (Failure::Panic, "trap"),
            (Failure::Trap("unreachable".into()), "trap"),
            (Failure::Instantiate("pool full".into()), "instantiate"),
        ];
        let listed = |label: &str| crate::metrics::INVOCATION_OUTCOMES.contains(&label);
        for (failure, label) in cases {
            assert_eq!(failure_outcome(&failure), label, "{failure}");
            assert_eq!(invocation_outcome(Some(&Err(failure))), label);
            assert!(listed(label), "{label} has its metric series kept");
        }
        assert_eq!(invocation_outcome(Some(&Ok(()))), "ok");
        assert_eq!(invocation_outcome(None), "host_error");
        assert!(listed("ok") && listed("host_error"));
    }
}
