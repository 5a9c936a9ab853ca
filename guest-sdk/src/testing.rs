//! Test a plugin the way the host runs it, from `cargo test` in the plugin's crate.
//!
//! [`plugin_run!`](crate::plugin_run) builds the crate's component for `wasm32-wasip2` (once per
//! test process) and runs it on one event against a throwaway store seeded with fixtures (two
//! products, two customers, an order in the state the event implies), with no host running: it
//! is `commerce-host plugin run --json`, so the `commerce-host` command must be installed (on the
//! `PATH`, or named by `COMMERCE_HOST_BIN`). The [`Run`] it returns holds every host call the
//! plugin made with its result, its log lines, the notifications it sent, the events its
//! changes fired, the records it changed, and the outcome.
//!
//! ```no_run
//! use commerce_guest_sdk::plugin_run;
//!
//! #[test]
//! fn a_paid_order_gets_a_thank_you() {
//!     let run = plugin_run!("order.paid").run();
//!     run.assert_ok();
//!     assert_eq!(run.calls_to("notifications.send"), 1);
//!     assert_eq!(run.notifications()[0]["template"], "order-thanks");
//! }
//! ```
//!
//! The component is built with `cargo build --release --target wasm32-wasip2` into
//! `plugin-test` inside the crate's Cargo target folder (`COMMERCE_PLUGIN_TEST_TARGET_DIR` to change
//! it), a target folder of its own so that the build does not wait on the `cargo test` running it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

/// Starts a [`PluginRun`] of the calling crate's plugin on `event` (`"order.paid"`, …).
#[macro_export]
macro_rules! plugin_run {
    ($event:expr) => {
        $crate::testing::PluginRun::new(env!("CARGO_MANIFEST_DIR"), env!("CARGO_PKG_NAME"), $event)
    };
}

/// One run to make: the plugin, the event, and optionally the event's data and the merchant's
/// settings.
#[derive(Debug, Clone)]
pub struct PluginRun {
    crate_dir: PathBuf,
    package: String,
    event: String,
    data: Option<Value>,
    settings: Option<Value>,
}

impl PluginRun {
    /// A run of the plugin crate at `crate_dir` (package `package`) on `event`; use
    /// [`plugin_run!`](crate::plugin_run), which fills in the crate.
    pub fn new(crate_dir: impl Into<PathBuf>, package: &str, event: &str) -> Self {
        Self {
            crate_dir: crate_dir.into(),
            package: package.to_owned(),
            event: event.to_owned(),
            data: None,
            settings: None,
        }
    }

    /// Replaces the event's `data` (by default it is built from the seeded store's records).
    pub fn data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The merchant's settings for the plugin (by default none, `{}`).
    pub fn settings(mut self, settings: Value) -> Self {
        self.settings = Some(settings);
        self
    }

    /// Builds the component if this process has not yet, runs it, and returns what happened.
    /// Panics with the reason when the run could not be made (the CLI or the wasm target is
    /// missing, the crate does not build, the event is not in the manifest's `events`): a test
    /// cannot pass without it.
    pub fn run(self) -> Run {
        let component = component(&self.crate_dir, &self.package);
        let scratch = tempdir();
        let mut command = Command::new(cli());
        command
            .args(["plugin", "run"])
            .arg(&component)
            .args(["--event", &self.event, "--json", "--manifest"])
            .arg(self.crate_dir.join("plugin.toml"))
            .env("COMMERCE_HOST_LOG", "error");
        for (flag, value, file) in [
            ("--data", &self.data, "data.json"),
            ("--settings", &self.settings, "settings.json"),
        ] {
            if let Some(value) = value {
                let path = scratch.join(file);
                write(&path, &value.to_string());
                command.arg(flag).arg(&path);
            }
        }
        let output = command
            .output()
            .unwrap_or_else(|e| panic!("running `{}`: {e}", cli().display()));
        let _ = std::fs::remove_dir_all(&scratch);
        let stdout = String::from_utf8_lossy(&output.stdout);
        let report: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
            panic!(
                "`commerce-host plugin run` could not run the plugin:\n{}{}",
                String::from_utf8_lossy(&output.stderr),
                stdout
            )
        });
        Run { report }
    }
}

/// What one run of the plugin did (the JSON report of `plugin run --json`).
#[derive(Debug, Clone)]
pub struct Run {
    report: Value,
}

/// One host call the plugin made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCall {
    /// `interface.function`, e.g. `orders.get` or `notifications.send`.
    pub function: String,
    /// A summary of its arguments.
    pub args: String,
    /// Why the host refused it (`forbidden: orders.write`, `not-found`, …), or `None`.
    pub error: Option<String>,
}

impl Run {
    /// Whether the plugin succeeded: its handler returned `Ok`, it stayed within its limits, and
    /// the host refused none of its calls.
    pub fn ok(&self) -> bool {
        self.report["outcome"]["ok"] == true
    }

    /// Why the run failed (a trap, a limit, a handler error, refused calls), or `ok`.
    pub fn verdict(&self) -> &str {
        self.report["outcome"]["verdict"].as_str().unwrap_or("")
    }

    /// Panics with the verdict, the host calls and the logs unless the run succeeded.
    #[track_caller]
    pub fn assert_ok(&self) {
        assert!(
            self.ok(),
            "the plugin failed: {}\nhost calls: {:#?}\nlogs: {:#?}",
            self.verdict(),
            self.host_calls(),
            self.logs()
        );
    }

    /// Every host call, in order.
    pub fn host_calls(&self) -> Vec<HostCall> {
        self.list("host_calls")
            .iter()
            .map(|call| HostCall {
                function: call["function"].as_str().unwrap_or("").to_owned(),
                args: call["args"].as_str().unwrap_or("").to_owned(),
                error: call["error"].as_str().map(str::to_owned),
            })
            .collect()
    }

    /// How many calls the plugin made to `function` (`orders.get`, `notifications.send`, `notifications.post-feed-card`, …).
    pub fn calls_to(&self, function: &str) -> usize {
        self.host_calls()
            .iter()
            .filter(|call| call.function == function)
            .count()
    }

    /// The lines it logged, as `(level, message)`.
    pub fn logs(&self) -> Vec<(String, String)> {
        self.list("logs")
            .iter()
            .map(|line| {
                (
                    line["level"].as_str().unwrap_or("").to_owned(),
                    line["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect()
    }

    /// The notifications it sent (`channel`, `template`, `to`, `status`, … as the API shows
    /// them).
    pub fn notifications(&self) -> &[Value] {
        self.list("notifications")
    }

    /// The events its changes fired, as the API shows them.
    pub fn events(&self) -> &[Value] {
        self.list("events")
    }

    /// The records it created or changed: `change` (`created`/`updated`), `record` (`order
    /// ord_…`) and `value` (the record after the run).
    pub fn changes(&self) -> &[Value] {
        self.list("changes")
    }

    /// The event the plugin received.
    pub fn event(&self) -> &Value {
        &self.report["event"]
    }

    /// The whole report.
    pub fn report(&self) -> &Value {
        &self.report
    }

    fn list(&self, key: &str) -> &[Value] {
        self.report[key].as_array().map_or(&[], Vec::as_slice)
    }
}

/// The `commerce-host` command: `COMMERCE_HOST_BIN`, else the one on the `PATH`.
fn cli() -> PathBuf {
    std::env::var_os("COMMERCE_HOST_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("commerce-host"))
}

/// Builds the component of the crate at `crate_dir` once per process; returns its path.
fn component(crate_dir: &Path, package: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<(PathBuf, PathBuf)>>> = OnceLock::new();
    let built = BUILT.get_or_init(Mutex::default);
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, wasm)) = built.iter().find(|(dir, _)| dir == crate_dir) {
        return wasm.clone();
    }
    let target = std::env::var_os("COMMERCE_PLUGIN_TEST_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir(crate_dir).join("plugin-test"));
    let output = Command::new(cargo())
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--manifest-path",
        ])
        .arg(crate_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .output()
        .unwrap_or_else(|e| panic!("running cargo to build the plugin: {e}"));
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint =
            if stderr.contains("wasm32-wasip2") && stderr.contains("target may not be installed") {
                "the wasm32-wasip2 target is missing: run `rustup target add wasm32-wasip2`\n"
            } else {
                ""
            };
        panic!("{hint}building the plugin for wasm32-wasip2 failed:\n{stderr}");
    }
    let wasm = target
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{}.wasm", package.replace('-', "_")));
    assert!(wasm.is_file(), "the build made no {}", wasm.display());
    built.push((crate_dir.to_owned(), wasm.clone()));
    wasm
}

/// The `cargo` running the tests, else the one on the `PATH`.
fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The crate's Cargo target folder (its workspace's, or `CARGO_TARGET_DIR`), as `cargo metadata`
/// says; `target` beside the crate if it cannot tell.
fn target_dir(crate_dir: &Path) -> PathBuf {
    let fallback = crate_dir.join("target");
    let Ok(output) = Command::new(cargo())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
            "--manifest-path",
        ])
        .arg(crate_dir.join("Cargo.toml"))
        .output()
    else {
        return fallback;
    };
    serde_json::from_slice::<Value>(&output.stdout)
        .ok()
        .and_then(|m| m["target_directory"].as_str().map(PathBuf::from))
        .unwrap_or(fallback)
}

/// A fresh folder for the run's input files.
fn tempdir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("plugin-run-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
