//! The hostile plugin as the host runs it: each misbehaviour ends the run with the limit or the
//! refusal that stopped it, and `plugin run` reports it (these runs are meant to fail).

use commerce_guest_sdk::plugin_run;
use commerce_guest_sdk::testing::Run;
use serde_json::json;

fn misbehaving(mode: &str) -> Run {
    plugin_run!("plugin.configured")
        .settings(json!({"mode": mode}))
        .run()
}

#[test]
fn behaving_it_logs_the_event() {
    let run = misbehaving("none");
    run.assert_ok();
    assert!(
        run.logs()[0].1.starts_with("handled evt_"),
        "{:?}",
        run.logs()
    );
}

#[test]
fn a_busy_loop_runs_out_of_fuel() {
    let run = misbehaving("loop");
    assert!(!run.ok());
    assert!(run.verdict().contains("fuel"), "{}", run.verdict());
}

#[test]
fn a_write_outside_its_scopes_is_refused_and_changes_nothing() {
    let run = misbehaving("forbidden");
    assert!(!run.ok());
    let call = run
        .host_calls()
        .into_iter()
        .find(|c| c.function == "customers.create")
        .expect("the plugin tried to create a customer");
    assert!(
        call.error
            .as_deref()
            .unwrap_or_default()
            .contains("customers.write"),
        "{call:?}"
    );
    assert!(run.changes().is_empty(), "{:?}", run.changes());
}

#[test]
fn a_handler_error_is_the_verdict() {
    let run = misbehaving("fail");
    assert!(!run.ok());
    assert!(run.verdict().contains("on purpose"), "{}", run.verdict());
}

#[test]
fn a_log_flood_is_cut_at_the_log_limit() {
    let run = misbehaving("log");
    assert!(!run.ok());
    assert!(run.verdict().contains("log"), "{}", run.verdict());
}
