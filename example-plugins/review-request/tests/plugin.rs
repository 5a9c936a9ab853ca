//! review-request as the host runs it (`plugin_run!` builds the component and runs it with
//! `commerce-host plugin run`).

use commerce_guest_sdk::plugin_run;

#[test]
fn a_shipped_order_posts_a_review_suggestion_naming_the_customer() {
    let run = plugin_run!("order.fulfilled").run();
    run.assert_ok();
    assert_eq!(run.calls_to("customers.get"), 1);
    assert_eq!(run.calls_to("notifications.post-feed-card"), 1);
    assert_eq!(run.notifications()[0]["channel"], "feed");
    let card = &run.host_calls()[1];
    // The seeded order is Ada's: the card asks her by first name.
    assert!(card.args.contains("Ask Ada for a review"), "{}", card.args);
    assert!(card.args.contains("CardKind::Suggestion"), "{}", card.args);
}

#[test]
fn an_order_without_a_customer_names_its_email_and_reads_no_customer() {
    let mut data = plugin_run!("order.fulfilled").run().event()["data"].clone();
    data["order"]["customer_id"] = serde_json::Value::Null;
    data["order"]["email"] = "guest@example.com".into();
    let run = plugin_run!("order.fulfilled").data(data).run();
    run.assert_ok();
    assert_eq!(run.calls_to("customers.get"), 0);
    let card = &run.host_calls()[0];
    assert!(
        card.args.contains("Ask guest@example.com for a review"),
        "{}",
        card.args
    );
}
