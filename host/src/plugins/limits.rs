//! Per-invocation limits and the meters that enforce the ones wasmtime does not.

use std::time::Duration;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

/// Limits of one invocation (one event delivered to one fresh instance).
///
/// The stack limit is not here: `Config::max_wasm_stack` is engine-wide, so it is the
/// operator maximum for every plugin (see `RuntimeConfig::max_wasm_stack`).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Wasm fuel (roughly one unit per wasm operator): the CPU budget.
    pub fuel: u64,
    /// Wall-clock bound, enforced through epoch interruption (host calls included).
    pub wall_clock: Duration,
    /// Bytes of linear memory per memory (the guest's heap, stack and data).
    pub memory_bytes: usize,
    /// Host calls (store capabilities, notifications, settings, log) per invocation.
    pub host_calls: u32,
    /// Bytes of log messages per invocation.
    pub log_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: 1_000_000_000,
            wall_clock: Duration::from_secs(10),
            memory_bytes: 32 << 20,
            host_calls: 1_000,
            log_bytes: 64 << 10,
        }
    }
}

/// Which limit a plugin broke, carried inside the trap so the caller can tell them apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitExceeded {
    /// More host calls than `Limits::host_calls`.
    HostCalls { limit: u32 },
    /// More log bytes than `Limits::log_bytes`.
    LogBytes { limit: usize },
    /// A memory tried to grow past `Limits::memory_bytes`.
    Memory { desired: usize, limit: usize },
}

impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::HostCalls { limit } => write!(f, "host call limit of {limit} exceeded"),
            Self::LogBytes { limit } => write!(f, "log limit of {limit} bytes exceeded"),
            Self::Memory { desired, limit } => {
                write!(
                    f,
                    "memory limit of {limit} bytes exceeded (wanted {desired})"
                )
            }
        }
    }
}

impl std::error::Error for LimitExceeded {}

/// Counts host calls and log bytes; every host function charges it first.
#[derive(Debug)]
pub struct Meter {
    calls_left: u32,
    call_limit: u32,
    log_left: usize,
    log_limit: usize,
}

impl Meter {
    pub fn new(limits: &Limits) -> Self {
        Self {
            calls_left: limits.host_calls,
            call_limit: limits.host_calls,
            log_left: limits.log_bytes,
            log_limit: limits.log_bytes,
        }
    }

    /// Charges one host call; an error here becomes a trap.
    pub fn charge_call(&mut self) -> wasmtime::Result<()> {
        if self.calls_left == 0 {
            return Err(wasmtime::Error::new(LimitExceeded::HostCalls {
                limit: self.call_limit,
            }));
        }
        self.calls_left -= 1;
        Ok(())
    }

    /// Charges log bytes; an error here becomes a trap.
    pub fn charge_log(&mut self, bytes: usize) -> wasmtime::Result<()> {
        if bytes > self.log_left {
            self.log_left = 0;
            return Err(wasmtime::Error::new(LimitExceeded::LogBytes {
                limit: self.log_limit,
            }));
        }
        self.log_left -= bytes;
        Ok(())
    }
}

/// `StoreLimits` decides; this wrapper turns a refused growth into a typed trap instead
/// of `memory.grow` returning -1 (a Rust guest would abort with an opaque `unreachable`).
pub struct Limiter {
    inner: StoreLimits,
    memory_bytes: usize,
}

impl Limiter {
    pub fn new(limits: &Limits) -> Self {
        let inner = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .table_elements(100_000)
            .instances(64)
            .tables(64)
            .memories(8)
            .build();
        Self {
            inner,
            memory_bytes: limits.memory_bytes,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if self.inner.memory_growing(current, desired, maximum)? {
            Ok(true)
        } else {
            Err(wasmtime::Error::new(LimitExceeded::Memory {
                desired,
                limit: self.memory_bytes,
            }))
        }
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}
