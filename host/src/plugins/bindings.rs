//! Host bindings of every supported version of the plugin contract; only the documented
//! `bindgen!` configuration lives here. A released version is frozen under `wit/<version>/`:
//! the latest (`v0_2`) is what the host implements, and each older one (`v0_1`) is adapted to it
//! at the boundary (`plugins/compat.rs`), so a component built against it keeps running.

/// `commerce:plugin@0.2.0`, the latest version: what the host implements.
pub mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit/0.2.0",
        world: "commerce:plugin/plugin@0.2.0",
        // Every import may trap (a broken limit, a host bug): host functions return
        // `wasmtime::Result<Result<T, HostError>>`; the outer error traps, the inner one goes
        // back to the plugin as a typed `host-error`.
        imports: { default: trappable },
        // Older versions' records convert to these through serde (`plugins/compat.rs`).
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

/// `commerce:plugin@0.1.0` (frozen): the feed card's `kind` is a string.
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit/0.1.0",
        world: "commerce:plugin/plugin@0.1.0",
        imports: { default: trappable },
        // `types` is the same in both versions: its records are shared, not converted.
        with: {
            "commerce:plugin/types@0.1.0": super::v0_2::commerce::plugin::types,
        },
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

pub use v0_2::*;
