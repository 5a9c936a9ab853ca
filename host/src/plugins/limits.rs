//! The translation of a component's per-invocation [`Limits`] (resolved by the service layer)
//! into wasmtime's memory limiter, and the meters that enforce the ones wasmtime does not.

use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};

pub use crate::service::limits::Limits;

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

/// `StoreLimits` decides tables and counts; memory is bounded here for the whole instance, the
/// sum of every linear memory (a component with four memories gets the same budget as one with
/// one). A refused growth becomes a typed trap instead of `memory.grow` returning -1 (a Rust
/// guest would abort with an opaque `unreachable`).
pub struct Limiter {
    inner: StoreLimits,
    memory_bytes: usize,
    /// Bytes of linear memory the instance holds now, all memories together.
    memory_in_use: usize,
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
            memory_in_use: 0,
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
        // `current` is this memory's share of `memory_in_use` (0 when it is being created).
        let total = self
            .memory_in_use
            .saturating_sub(current)
            .saturating_add(desired);
        if total <= self.memory_bytes && self.inner.memory_growing(current, desired, maximum)? {
            self.memory_in_use = total;
            Ok(true)
        } else {
            Err(wasmtime::Error::new(LimitExceeded::Memory {
                desired: total,
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

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::{Engine, Instance, Module, Store};

    /// A core module with four memories of one page each, and a function that grows memory `n`
    /// by `pages`, returning the old size or -1.
    const FOUR_MEMORIES: &str = r#"(module
        (memory $m0 1) (memory $m1 1) (memory $m2 1) (memory $m3 1)
        (func (export "grow") (param $n i32) (param $pages i32) (result i32)
          (block $b3 (block $b2 (block $b1 (block $b0
            (br_table $b0 $b1 $b2 $b3 (local.get $n)))
            (return (memory.grow $m0 (local.get $pages))))
            (return (memory.grow $m1 (local.get $pages))))
            (return (memory.grow $m2 (local.get $pages))))
          (memory.grow $m3 (local.get $pages))))"#;

    fn limited(memory_bytes: usize) -> Store<Limiter> {
        let engine = Engine::default();
        let limits = Limits {
            memory_bytes,
            ..Limits::default()
        };
        let mut store = Store::new(&engine, Limiter::new(&limits));
        store.limiter(|l| l);
        store
    }

    #[test]
    fn the_memory_limit_counts_every_memory_of_the_instance() {
        const PAGE: usize = 64 << 10;
        // Four memories of one page each start at 4 pages; the limit is 10 pages in all.
        let mut store = limited(10 * PAGE);
        let wasm = wat::parse_str(FOUR_MEMORIES).expect("valid wat");
        let module = Module::new(store.engine(), wasm).expect("module compiles");
        let instance = Instance::new(&mut store, &module, &[]).expect("instantiates");
        let grow = instance
            .get_typed_func::<(i32, i32), i32>(&mut store, "grow")
            .expect("grow is exported");
        // Each memory alone stays far below the limit; together they reach it.
        assert_eq!(grow.call(&mut store, (0, 2)).expect("fits"), 1);
        assert_eq!(grow.call(&mut store, (1, 2)).expect("fits"), 1);
        assert_eq!(grow.call(&mut store, (2, 2)).expect("fits"), 1); // 10 pages now
        let err = grow
            .call(&mut store, (3, 1))
            .expect_err("an 11th page over four memories is refused");
        let limit = err
            .downcast_ref::<LimitExceeded>()
            .expect("a typed limit error");
        assert_eq!(
            *limit,
            LimitExceeded::Memory {
                desired: 11 * PAGE,
                limit: 10 * PAGE
            }
        );
    }

    #[test]
    fn a_single_memory_still_grows_up_to_the_limit() {
        const PAGE: usize = 64 << 10;
        let mut store = limited(4 * PAGE);
        let module = Module::new(
            store.engine(),
            wat::parse_str(r#"(module (memory 1) (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#)
                .expect("valid wat"),
        )
        .expect("module compiles");
        let instance = Instance::new(&mut store, &module, &[]).expect("instantiates");
        let grow = instance
            .get_typed_func::<i32, i32>(&mut store, "grow")
            .expect("grow is exported");
        assert_eq!(grow.call(&mut store, 3).expect("fits"), 1);
        assert!(grow.call(&mut store, 1).is_err());
    }
}
