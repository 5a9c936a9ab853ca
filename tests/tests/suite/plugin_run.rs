//! `commerce-host plugin run`: the real command line runs a built example component on one event
//! against a throwaway store, with no host running, and prints what the plugin did.

use std::path::{Path, PathBuf};
use std::process::Command;

use commerce_host_tests::components::{component_file, plugin_dir};

/// What one run of the command line printed, and how it exited.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn says(&self, text: &str) -> &Self {
        assert!(
            self.stdout.contains(text),
            "stdout lacks {text:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    fn complains(&self, text: &str) -> &Self {
        assert!(
            self.stderr.contains(text),
            "stderr lacks {text:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }

    fn succeeded(&self) -> &Self {
        assert_eq!(
            self.code, 0,
            "the run failed\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    fn failed(&self) -> &Self {
        assert_ne!(
            self.code, 0,
            "the run succeeded\n--- stdout:\n{}\n--- stderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Runs `commerce-host plugin run <args>`.
fn plugin_run(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
        .args(["plugin", "run"])
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .env("COMMERCE_HOST_LOG", "warn")
        .output()
        .expect("the CLI runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A JSON file in `dir`.
fn json_file(dir: &Path, name: &str, json: serde_json::Value) -> PathBuf {
    let file = dir.join(name);
    std::fs::write(&file, json.to_string()).expect("writes the file");
    file
}

fn manifest(name: &str) -> PathBuf {
    plugin_dir(name).join("plugin.toml")
}

#[test]
fn order_thanks_run_on_order_paid_prints_its_host_calls_and_the_email_it_would_send() {
    let component = component_file("order-thanks");
    let manifest = manifest("order-thanks");
    let run = plugin_run(&[
        path(&component),
        "--event",
        "order.paid",
        "--manifest",
        path(&manifest),
    ]);
    run.succeeded()
        .says("event order.paid evt_")
        .says("orders.get(\"ord_")
        .says(") -> ok")
        .says("notifications.send(")
        .says("host calls: 2")
        .says("[info] thank-you for ord_")
        .says("notifications: 1")
        .says("(ada@example.com) [outbox] template order-thanks")
        .says("subject: Thank you for your order ord_")
        .says("50.00 EUR")
        .says("records written: 0")
        .says("outcome: ok");
}

#[test]
fn a_plugin_looping_forever_is_stopped_by_its_fuel_limit_and_the_run_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = json_file(dir.path(), "s.json", serde_json::json!({"mode": "loop"}));
    let component = component_file("hostile");
    let manifest = manifest("hostile");
    let run = plugin_run(&[
        path(&component),
        "--event",
        "plugin.configured",
        "--settings",
        path(&settings),
        "--manifest",
        path(&manifest),
    ]);
    run.failed()
        .says("settings.get() -> ok")
        .says("outcome: stopped: the CPU budget (fuel) ran out")
        .says("fuel 1000000000 of 1000000000")
        .complains("fuel");
}

#[test]
fn a_host_call_outside_the_plugins_scopes_is_named_with_the_scope_and_the_run_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = json_file(
        dir.path(),
        "s.json",
        serde_json::json!({"mode": "forbidden"}),
    );
    let component = component_file("hostile");
    let manifest = manifest("hostile");
    let run = plugin_run(&[
        path(&component),
        "--event",
        "plugin.configured",
        "--settings",
        path(&settings),
        "--manifest",
        path(&manifest),
    ]);
    run.failed()
        .says("customers.create(NewCustomer { email: Some(\"intruder@example.com\")")
        .says("-> refused: forbidden: customers.write")
        .says("records written: 0")
        .complains("customers.create (forbidden: customers.write)");
}

#[test]
fn without_a_manifest_the_plugin_holds_every_scope_and_the_records_it_writes_are_shown() {
    let dir = tempfile::tempdir().expect("temp dir");
    let settings = json_file(
        dir.path(),
        "s.json",
        serde_json::json!({"mode": "forbidden"}),
    );
    let component = component_file("hostile");
    let run = plugin_run(&[
        path(&component),
        "--event",
        "plugin.configured",
        "--settings",
        path(&settings),
    ]);
    run.succeeded()
        .says("default manifest: the event and every scope")
        .says("customers.create(")
        .says("records written: 1")
        .says("created customer cus_")
        .says("intruder@example.com")
        .says("events fired: 1")
        .says("customer.created evt_")
        .says("outcome: ok");
}

#[test]
fn data_replaces_the_data_of_the_event_delivered() {
    let dir = tempfile::tempdir().expect("temp dir");
    let order = "ord_01jd4z7k8m3n5p6q7r8s9t0v1w";
    let data = json_file(
        dir.path(),
        "event.json",
        serde_json::json!({"order": {"id": order, "total": 999, "currency": "EUR"}}),
    );
    let component = component_file("order-thanks");
    let manifest = manifest("order-thanks");
    let run = plugin_run(&[
        path(&component),
        "--event",
        "order.paid",
        "--data",
        path(&data),
        "--manifest",
        path(&manifest),
    ]);
    // The plugin looks up the order it was given, which the seeded store does not have.
    run.failed()
        .says(&format!(
            "data: {{\"order\":{{\"currency\":\"EUR\",\"id\":\"{order}\",\"total\":999}}}}"
        ))
        .says(&format!("orders.get(\"{order}\") -> refused: not-found"))
        .says("notifications: 0")
        .complains("orders.get (not-found)");
}

#[test]
fn an_unknown_event_type_is_refused_with_the_events_there_are() {
    let component = component_file("order-thanks");
    let run = plugin_run(&[path(&component), "--event", "order.shipped"]);
    run.failed()
        .complains("--event: unknown event `order.shipped`")
        .complains("order.paid, order.fulfilled");
    assert!(run.stdout.is_empty(), "printed {}", run.stdout);
}

#[test]
fn an_event_the_manifest_does_not_receive_is_refused() {
    let component = component_file("order-thanks");
    let manifest = manifest("order-thanks");
    let run = plugin_run(&[
        path(&component),
        "--event",
        "order.created",
        "--manifest",
        path(&manifest),
    ]);
    run.failed()
        .complains("does not list `order.created` in `events` (order.paid)");
}

#[test]
fn a_component_in_a_plugin_crates_target_folder_runs_with_that_crates_manifest_and_templates() {
    // A plugin crate as `plugin build` leaves it: plugin.toml, templates/, and the component
    // under target/wasm32-wasip2/release/.
    let dir = tempfile::tempdir().expect("temp dir");
    let source = plugin_dir("order-thanks");
    std::fs::copy(source.join("plugin.toml"), dir.path().join("plugin.toml")).expect("copies");
    std::fs::create_dir(dir.path().join("templates")).expect("creates templates/");
    for entry in std::fs::read_dir(source.join("templates")).expect("reads templates/") {
        let entry = entry.expect("an entry");
        std::fs::copy(
            entry.path(),
            dir.path().join("templates").join(entry.file_name()),
        )
        .expect("copies a template");
    }
    let release = dir.path().join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&release).expect("creates the target folder");
    let component = release.join("order_thanks.wasm");
    std::fs::copy(component_file("order-thanks"), &component).expect("copies the component");

    let run = plugin_run(&[path(&component), "--event", "order.paid"]);
    run.succeeded()
        .says("plugin order-thanks@1.0.0 (")
        .says("plugin.toml)")
        .says("template order-thanks")
        .says("subject: Thank you for your order ord_");
}

#[test]
fn the_delivery_engines_invocations_record_host_calls_without_argument_summaries() {
    use commerce_host::plugins::Plugins;
    use commerce_host::service::PageRequest;

    let data = tempfile::tempdir().expect("temp dir");
    let mut config = commerce_host_tests::test_config(data.path());
    config.admin_token = Some("plugin-run-admin-token-0123456789".to_owned());
    let service = commerce_host::open_service(&config).expect("a service");
    let plugins = Plugins::new(
        &data.path().join("components"),
        config.plugin_runtime.clone(),
    )
    .expect("a runtime");
    let package = commerce_host::cli::package::check(&plugin_dir("hostile")).expect("a manifest");
    plugins
        .publish(
            &service,
            package.manifest.clone(),
            &package.templates,
            Some(&commerce_host_tests::components::component("hostile")),
        )
        .expect("published");
    let store = service.create_store("log.example").expect("a store");
    let installed = service.install(&store.id, "hostile").expect("installed");
    let installation = service
        .configure(
            &store.id,
            &installed.installation.id,
            serde_json::json!({"mode": "forbidden"}),
        )
        .expect("configured");
    let event = service
        .list_events(
            &store.id,
            Some("plugin.configured".parse().expect("an event type")),
            &PageRequest::first(1),
        )
        .expect("events")
        .data
        .remove(0);
    let actor = service.component_actor(&installation).expect("an actor");
    let outcome = plugins
        .invoke(&service, actor, &package.manifest, &event)
        .expect("invoked");
    let calls: Vec<(&str, bool)> = outcome
        .host_calls
        .iter()
        .map(|call| (call.function, call.error.is_some()))
        .collect();
    assert_eq!(
        calls,
        [("settings.get", false), ("customers.create", true)],
        "{:?}",
        outcome.host_calls
    );
    assert!(
        outcome.host_calls.iter().all(|call| call.args.is_none()),
        "an untraced invocation keeps no argument summaries: {:?}",
        outcome.host_calls
    );
}
