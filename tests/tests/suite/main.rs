//! The integration tests, one binary for all of them but `hardening_outbound` (which counts the
//! process's allocations and so needs a process of its own).
//!
//! One binary links the host once instead of thirty times: each test binary is about 120 MB, so
//! thirty of them cost gigabytes of disk and minutes of linking on a small CI machine. Run one
//! module with `cargo test -p commerce-host-tests --test suite webhooks::`.

mod accounts;
mod auth_cache;
mod browser;
mod cli;
mod commerce;
mod component_cache;
mod crash_burst;
mod developer;
mod export_import;
mod external_plugin;
mod foundation;
mod hardening_http;
mod hardening_orders;
mod hardening_plugins;
mod hardening_proxy;
mod layers;
mod metrics;
mod notifications;
mod plugin_dev;
mod plugin_harness;
mod plugin_run;
mod plugins;
mod rules;
mod scale_out;
mod sdk_client;
mod telemetry;
mod webhook_ops;
mod webhooks;
mod webhooks_restart;
mod wit_versions;
mod work_queue;
