//! order-thanks as the host runs it (`plugin_run!` builds the component and runs it with
//! `commerce-host plugin run`).

use commerce_guest_sdk::plugin_run;

#[test]
fn a_paid_order_emails_its_customer_the_thank_you_template() {
    let run = plugin_run!("order.paid").run();
    run.assert_ok();
    assert_eq!(run.calls_to("orders.get"), 1);
    assert_eq!(run.calls_to("notifications.send"), 1);
    let sent = &run.notifications()[0];
    assert_eq!(sent["channel"], "email");
    assert_eq!(sent["template"], "order-thanks");
    assert_eq!(sent["status"], "outbox");
    let to = sent["to"].as_str().unwrap_or_default();
    assert!(
        to.starts_with("customer:cus_"),
        "sent to the order's customer: {to}"
    );
    let (level, line) = &run.logs()[0];
    assert_eq!(level, "info");
    assert!(line.starts_with("thank-you for ord_"), "{line}");
    // Nothing in the store changed: the plugin only reads the order and sends.
    assert!(run.changes().is_empty(), "{:?}", run.changes());
}

#[test]
fn an_order_that_is_not_in_the_store_fails_the_run_with_the_hosts_answer() {
    let run = plugin_run!("order.paid")
        .data(serde_json::json!({
            "order": {"id": "ord_00000000000000000000000000", "total": 100, "currency": "EUR"}
        }))
        .run();
    assert!(!run.ok());
    let call = &run.host_calls()[0];
    assert_eq!(call.function, "orders.get");
    assert!(
        call.error
            .as_deref()
            .unwrap_or_default()
            .contains("not-found"),
        "{call:?}"
    );
    assert_eq!(run.calls_to("notifications.send"), 0);
    assert!(run.notifications().is_empty());
}
