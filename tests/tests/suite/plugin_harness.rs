//! The authors' test harness (`commerce_guest_sdk::testing`): `cargo test` inside a plugin crate
//! builds its component and runs it with this repository's `commerce-host plugin run`. Every
//! example plugin's own tests pass, and so does the test `plugin new` scaffolds.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use commerce_host_tests::components::{repo_root, target_dir};

/// Runs `cargo test` in the crate or workspace at `dir` against the binary under test; returns
/// its combined output, panicking with it when the tests fail.
fn cargo_test(dir: &Path) -> String {
    let examples = target_dir();
    let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(["test", "--no-fail-fast"])
        .current_dir(dir)
        .env(
            "COMMERCE_HOST_BIN",
            env!("CARGO_BIN_EXE_test-commerce-host"),
        )
        // Native test builds and the components' wasm builds, each in a folder shared by both
        // tests here (the cargo locks serialise them) and kept apart from the host's.
        .env("CARGO_TARGET_DIR", examples.join("native"))
        .env("COMMERCE_PLUGIN_TEST_TARGET_DIR", &examples)
        .env("COMMERCE_HOST_LOG", "warn")
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("cargo runs");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "cargo test failed in {}:\n{text}",
        dir.display()
    );
    text
}

/// How many tests passed, summed over the `test result:` lines.
fn passed(output: &str) -> usize {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("test result: ok. "))
        .filter_map(|rest| rest.split(' ').next()?.parse::<usize>().ok())
        .sum()
}

#[test]
fn every_example_plugin_passes_its_own_tests() {
    let output = cargo_test(&repo_root().join("example-plugins"));
    // The five plugins have 13 tests: the harness ran them all, one of each named here.
    assert!(passed(&output) >= 13, "{output}");
    for test in [
        "a_paid_order_emails_its_customer_the_thank_you_template ... ok",
        "a_customers_only_order_is_tagged_first_order ... ok",
        "rising_stock_shows_nothing ... ok",
        "a_shipped_order_posts_a_review_suggestion_naming_the_customer ... ok",
        "a_busy_loop_runs_out_of_fuel ... ok",
        "a_write_outside_its_scopes_is_refused_and_changes_nothing ... ok",
    ] {
        assert!(output.contains(test), "{test} did not pass:\n{output}");
    }
}

#[test]
fn a_new_plugin_passes_the_test_it_is_scaffolded_with() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let start = Instant::now();
    let new = Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
        .args(["plugin", "new", "thanks-test", "--dir"])
        .arg(dir.path().join("thanks-test"))
        .arg("--sdk")
        .arg(repo_root().join("guest-sdk"))
        .output()
        .expect("the CLI runs");
    assert!(
        new.status.success(),
        "plugin new failed: {}",
        String::from_utf8_lossy(&new.stderr)
    );
    let output = cargo_test(&dir.path().join("thanks-test"));
    assert!(
        output.contains("a_paid_order_sends_the_customer_a_thank_you ... ok"),
        "{output}"
    );
    // The scaffold's unit test and its plugin test.
    assert!(passed(&output) >= 2, "{output}");
    eprintln!(
        "plugin new → passing plugin test: {:.1} s (dependencies already built)",
        start.elapsed().as_secs_f64()
    );
}
