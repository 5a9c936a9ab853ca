//! What a wasmtime `Store` holds for one invocation, and the narrow views host functions get.

use crate::model::log::{LogLine, Recording};
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::commerce::plugin::types::HostError;
use super::limits::{Limiter, Limits, Meter};
use crate::service::{Actor, Service};

/// Longest argument summary kept for a traced host call, in bytes.
pub const MAX_ARGS_SUMMARY: usize = 200;

/// One store capability a component called during an invocation, as `plugin run` prints it.
///
/// Recorded for every invocation (a push of a static name and `None` for a call that succeeded;
/// the host-call limit bounds how many); the argument summary only when the invocation is traced.
#[derive(Debug, Clone)]
pub struct HostCall {
    /// `interface.function`, e.g. `orders.get`.
    pub function: &'static str,
    /// Its arguments, summarised and cut to [`MAX_ARGS_SUMMARY`] bytes (traced invocations only).
    pub args: Option<String>,
    /// The typed error the plugin got, or `None` when the call succeeded.
    pub error: Option<HostError>,
}

/// The `T` of `Store<T>`: per-invocation state, dropped with the instance.
pub struct Invocation {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) meter: Meter,
    pub(crate) actor: Actor,
    pub(crate) service: Service,
    pub(crate) logs: Vec<LogLine>,
    pub(crate) calls: Vec<HostCall>,
    /// What the invocation read, for a replay.
    pub(crate) recording: Recording,
    /// Whether host calls keep a summary of their arguments (`plugin run`).
    trace: bool,
    stderr: MemoryOutputPipe,
    /// When the invocation must end: epoch interruption enforces it while wasm runs, and
    /// [`super::deadline`] while the guest waits inside WASI.
    deadline: Instant,
}

impl Invocation {
    /// State for one event delivered to `actor`'s plugin.
    pub fn new(actor: Actor, service: Service, limits: &Limits) -> Self {
        Self::with_trace(actor, service, limits, false)
    }

    /// State for one event, keeping argument summaries of host calls when `trace`.
    pub fn with_trace(actor: Actor, service: Service, limits: &Limits, trace: bool) -> Self {
        // No preopened folders, environment, arguments or sockets: WASI's imports are inert. Stderr
        // (where a Rust panic message goes) is captured within the log budget; stdout is dropped.
        let stderr = MemoryOutputPipe::new(limits.log_bytes.min(16 << 10));
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter::new(limits),
            meter: Meter::new(limits),
            actor,
            service,
            logs: Vec::new(),
            calls: Vec::new(),
            recording: Recording::default(),
            trace,
            stderr,
            deadline: Instant::now() + limits.wall_clock,
        }
    }

    /// The plugin's log lines, then what it wrote to stderr.
    pub fn into_logs(self) -> Vec<LogLine> {
        self.into_parts().0
    }

    /// The plugin's log lines (then what it wrote to stderr), the host calls it made and what it
    /// read.
    pub fn into_parts(self) -> (Vec<LogLine>, Vec<HostCall>, Recording) {
        let mut logs = self.logs;
        let stderr = self.stderr.contents();
        if !stderr.is_empty() {
            logs.push(LogLine {
                level: "stderr".into(),
                message: String::from_utf8_lossy(&stderr).into_owned(),
            });
        }
        (logs, self.calls, self.recording)
    }

    pub(crate) fn store_calls(&mut self) -> StoreCalls<'_> {
        StoreCalls {
            meter: &mut self.meter,
            actor: &self.actor,
            service: &self.service,
            calls: &mut self.calls,
            recording: &mut self.recording,
            trace: self.trace,
        }
    }

    pub(crate) fn deadline_poll(&mut self) -> super::deadline::DeadlinePoll<'_> {
        super::deadline::DeadlinePoll {
            table: &mut self.table,
            deadline: self.deadline,
        }
    }

    pub(crate) fn log_sink(&mut self) -> LogSink<'_> {
        LogSink {
            meter: &mut self.meter,
            lines: &mut self.logs,
        }
    }
}

impl WasiView for Invocation {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The view the store capabilities get: the meter, who is calling, and the service layer.
pub struct StoreCalls<'a> {
    pub(crate) meter: &'a mut Meter,
    pub(crate) actor: &'a Actor,
    pub(crate) service: &'a Service,
    pub(crate) calls: &'a mut Vec<HostCall>,
    pub(crate) recording: &'a mut Recording,
    pub(crate) trace: bool,
}

/// The view the `log` interface gets.
pub struct LogSink<'a> {
    pub(crate) meter: &'a mut Meter,
    pub(crate) lines: &'a mut Vec<LogLine>,
}
