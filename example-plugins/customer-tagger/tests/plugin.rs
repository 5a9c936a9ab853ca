//! customer-tagger as the host runs it (`plugin_run!` builds the component and runs it with
//! `commerce-host plugin run`).

use commerce_guest_sdk::plugin_run;

#[test]
fn a_customers_only_order_is_tagged_first_order() {
    let run = plugin_run!("order.paid").run();
    run.assert_ok();
    let order = run.event()["data"]["order"]["id"].clone();
    // It looks for earlier orders of the customer before writing the tag.
    assert!(run.calls_to("orders.list") >= 1);
    assert_eq!(run.calls_to("orders.update"), 1);
    let changes = run.changes();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["change"], "updated");
    assert_eq!(changes[0]["value"]["id"], order);
    assert_eq!(
        changes[0]["value"]["tags"],
        serde_json::json!(["first-order"])
    );
    // Tags fire no event (the spec has no `order.updated`).
    assert!(run.events().is_empty(), "{:?}", run.events());
}
