//! WASI's blocking waits, bounded by the invocation's deadline.
//!
//! Epoch interruption stops a guest that computes past its wall-clock limit, but it only fires
//! while wasm runs: a guest blocked inside a host call (`std::thread::sleep`, or `poll` on a
//! clock's pollable) would hold its instance slot for as long as it asked. The two blocking entry
//! points of `wasi:io/poll` (`poll` and `pollable.block`) are replaced here by versions that wait
//! at most until the invocation's deadline and then trap with [`Trap::Interrupt`], the same trap
//! the epoch deadline raises, so the attempt is recorded as a timeout. Every other blocking WASI
//! call of a Rust guest ends at once in this sandbox (stdin is empty, stdout and stderr are
//! memory pipes, there are no files or sockets).

use std::time::Instant;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime::{Result, Trap};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::p2::bindings::io::poll as async_poll;
use wasmtime_wasi::p2::bindings::sync::io::poll;
use wasmtime_wasi::runtime::in_tokio;

use super::state::Invocation;

/// The view `wasi:io/poll` gets: the resource table and when the invocation must end.
pub struct DeadlinePoll<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) deadline: Instant,
}

impl DeadlinePoll<'_> {
    /// Runs a WASI wait until it completes or the deadline passes (then traps).
    fn wait<T>(deadline: Instant, wait: impl Future<Output = Result<T>>) -> Result<T> {
        let left = deadline.saturating_duration_since(Instant::now());
        match in_tokio(tokio::time::timeout(left, wait)) {
            Ok(result) => result,
            Err(_elapsed) => Err(wasmtime::Error::new(Trap::Interrupt)),
        }
    }
}

impl poll::Host for DeadlinePoll<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> Result<Vec<u32>> {
        let deadline = self.deadline;
        Self::wait(deadline, async_poll::Host::poll(self.table, pollables))
    }
}

impl poll::HostPollable for DeadlinePoll<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> Result<bool> {
        // Never blocks: it only asks whether the pollable is ready now.
        in_tokio(async_poll::HostPollable::ready(self.table, pollable))
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> Result<()> {
        let deadline = self.deadline;
        Self::wait(
            deadline,
            async_poll::HostPollable::block(self.table, pollable),
        )
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> Result<()> {
        async_poll::HostPollable::drop(self.table, pollable)
    }
}

struct DeadlinePollData;
impl HasData for DeadlinePollData {
    type Data<'a> = DeadlinePoll<'a>;
}

/// Replaces the `wasi:io/poll` that `wasmtime_wasi::p2::add_to_linker_sync` linked.
pub fn add_to_linker(linker: &mut Linker<Invocation>) -> Result<()> {
    linker.allow_shadowing(true);
    let view: fn(&mut Invocation) -> DeadlinePoll<'_> = Invocation::deadline_poll;
    poll::add_to_linker::<_, DeadlinePollData>(linker, view)?;
    linker.allow_shadowing(false);
    Ok(())
}
