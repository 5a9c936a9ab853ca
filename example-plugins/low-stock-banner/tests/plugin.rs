//! low-stock-banner as the host runs it (`plugin_run!` builds the component and runs it with
//! `commerce-host plugin run`).

use commerce_guest_sdk::plugin_run;

/// The seeded store sells 2 of the red mug, 6 → 4, past its low-stock threshold of 5.
#[test]
fn stock_falling_past_the_threshold_shows_a_warning_banner() {
    let run = plugin_run!("product.inventory.updated").run();
    run.assert_ok();
    assert_eq!(run.calls_to("notifications.show-banner"), 1);
    let banner = &run.notifications()[0];
    assert_eq!(banner["channel"], "banner");
    assert_eq!(banner["status"], "shown");
    let call = &run.host_calls()[0];
    assert!(call.args.contains("Tone::Warn"), "{}", call.args);
    assert!(call.args.contains("is running low"), "{}", call.args);
}

#[test]
fn stock_running_out_says_out_of_stock() {
    let mut data = plugin_run!("product.inventory.updated").run().event()["data"].clone();
    data["inventory"]["crossed"] = serde_json::json!([
        {"direction": "down", "threshold": "low_stock", "value": 5},
        {"direction": "down", "threshold": "out_of_stock", "value": 0},
    ]);
    data["inventory"]["inventory_quantity"] = 0.into();
    let run = plugin_run!("product.inventory.updated").data(data).run();
    run.assert_ok();
    let call = &run.host_calls()[0];
    assert!(call.args.contains("is out of stock"), "{}", call.args);
}

#[test]
fn rising_stock_shows_nothing() {
    let mut data = plugin_run!("product.inventory.updated").run().event()["data"].clone();
    data["inventory"]["crossed"] =
        serde_json::json!([{"direction": "up", "threshold": "low_stock", "value": 5}]);
    let run = plugin_run!("product.inventory.updated").data(data).run();
    run.assert_ok();
    assert!(run.host_calls().is_empty());
    assert!(run.notifications().is_empty());
    assert_eq!(run.logs()[0].1, "stock rose; nothing to warn about");
}
