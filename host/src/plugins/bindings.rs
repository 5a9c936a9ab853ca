//! Host bindings of `commerce:plugin@0.1.0`; only the documented `bindgen!` configuration lives here.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "commerce:plugin/plugin@0.1.0",
    // Every import may trap (a broken limit, a host bug): host functions return
    // `wasmtime::Result<Result<T, HostError>>`; the outer error traps, the inner one goes back to
    // the plugin as a typed `host-error`.
    imports: { default: trappable },
});
