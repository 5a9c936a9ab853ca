//! `POST /v1/notifications` on every channel, against the real server: email through a real SMTP
//! conversation, sms/whatsapp/push to a real HTTP receiver, banners and feed cards through the
//! operator API, the outbox, templates and overrides, quotas (with the clock), retries.

use std::time::Duration;

use commerce_host_tests::receiver::{Behavior, Receiver};
use commerce_host_tests::smtp::SmtpServer;
use commerce_host_tests::{Reply, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

fn templates() -> Value {
    json!({
        "order-thanks": {
            "description": "Sent when an order is paid",
            "variables": ["first_name", "order_id"],
            "email": {
                "subject": "Thanks for order {{ order_id }}",
                "body": "Hi {{ first_name }}, order {{ order_id }} is confirmed.",
            },
            "sms": {"body": "Order {{ order_id }} confirmed"},
            "whatsapp": {"body": "Hi {{ first_name }}, order {{ order_id }} is on its way"},
            "push": {"title": "Order {{ order_id }}", "body": "Thanks {{ first_name }}!"},
        },
        "welcome": {"variables": [], "email": {"subject": "Welcome", "body": "Welcome aboard"}},
    })
}

/// A store with a plugin that ships [`templates`].
struct Shop {
    store: String,
    token: String,
}

async fn publish_with_templates(host: &TestHost, name: &str, templates: Value) -> Reply {
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({
            "manifest": {"name": name, "version": "1.0.0", "scopes": ["customers.write"],
                         "contact_email": "dev@plugin.example"},
            "templates": templates,
        })),
    )
    .await
}

async fn shop(host: &TestHost, domain: &str) -> Shop {
    let store = host.create_store(domain).await;
    let plugin = format!("n-{}", domain.replace('.', "-"));
    publish_with_templates(host, &plugin, templates())
        .await
        .expect(201);
    let (_, token) = host.install(&store, &plugin).await;
    Shop { store, token }
}

async fn customer(host: &TestHost, shop: &Shop, body: Value) -> String {
    let reply = host
        .call(&shop.token, Method::POST, "/v1/customers", Some(body))
        .await
        .expect(201);
    reply.body["id"].as_str().expect("id").to_owned()
}

async fn notify(host: &TestHost, token: &str, body: Value) -> Reply {
    host.call(token, Method::POST, "/v1/notifications", Some(body))
        .await
}

fn thanks(channel: &str, to: &str) -> Value {
    json!({"channel": channel, "to": to, "template": "order-thanks",
           "data": {"first_name": "Ann", "order_id": "1001"}})
}

async fn list(host: &TestHost, path: &str) -> Vec<Value> {
    let reply = host.admin(Method::GET, path, None).await.expect(200);
    reply.body["data"].as_array().cloned().unwrap_or_default()
}

async fn outbox(host: &TestHost, store: &str) -> Vec<Value> {
    list(host, &format!("/admin/v1/stores/{store}/outbox?limit=250")).await
}

async fn set_sender(host: &TestHost, store: &str, channel: &str, body: Value) -> Reply {
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/senders/{channel}"),
        Some(body),
    )
    .await
}

/// A local HTTP provider connected as the store's sender for each of `channels`, at
/// `/<channel>`, with the token `<channel>-secret`.
async fn provider_for(host: &TestHost, store: &str, channels: &[&str]) -> Receiver {
    let provider = Receiver::start().await;
    for channel in channels {
        set_sender(
            host,
            store,
            channel,
            json!({"url": provider.url(&format!("/{channel}")), "auth_token": format!("{channel}-secret")}),
        )
        .await
        .expect(200);
    }
    provider
}

async fn set_quotas(host: &TestHost, store: &str, quotas: Value) {
    host.admin(
        Method::PATCH,
        &format!("/admin/v1/stores/{store}"),
        Some(json!({ "quotas": quotas })),
    )
    .await
    .expect(200);
}

/// The plugin's view of one of its notifications.
async fn read_notification(host: &TestHost, token: &str, id: &str) -> Reply {
    host.call(token, Method::GET, &format!("/v1/notifications/{id}"), None)
        .await
        .expect(200)
}

/// Polls the plugin's view of a notification until `done` holds.
async fn wait_for(host: &TestHost, token: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    host.eventually(&format!("notification {id}"), || async {
        let reply = read_notification(host, token, id).await;
        done(&reply.body).then_some(reply.body)
    })
    .await
}

fn id_of(reply: &Reply) -> String {
    reply.body["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn email_reaches_the_customer_through_the_merchants_smtp_server() {
    let host = TestHost::start().await;
    let smtp = SmtpServer::start().await;
    let shop = shop(&host, "acme.example").await;
    let ann = customer(&host, &shop, json!({"email": "ann@buyer.example"})).await;
    let port: u16 = smtp
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    set_sender(
        &host,
        &shop.store,
        "email",
        json!({"smtp": {"host": "127.0.0.1", "port": port, "from": "Acme <shop@acme.example>", "tls": "none"}}),
    )
    .await
    .expect(200);

    let reply = notify(
        &host,
        &shop.token,
        thanks("email", &format!("customer:{ann}")),
    )
    .await
    .expect(202);
    assert!(reply.body["id"].as_str().expect("id").starts_with("msg_"));
    assert_eq!(reply.body["channel"], "email");
    assert_eq!(reply.body["status"], "queued");
    assert_eq!(reply.body["to"], format!("customer:{ann}"));
    assert_eq!(
        reply.body["quota"],
        json!({"limit": 200, "used": 1, "remaining": 199, "resets_at": "2026-01-06T00:00:00.000Z"})
    );
    assert!(
        !reply.body.to_string().contains("ann@buyer.example"),
        "the plugin never sees the customer's address: {}",
        reply.body
    );

    let mails = smtp.wait_for(1, Duration::from_secs(10)).await;
    assert_eq!(mails[0].from, "shop@acme.example");
    assert_eq!(mails[0].to, ["ann@buyer.example"]);
    assert!(
        mails[0].data.contains("Subject: Thanks for order 1001"),
        "{}",
        mails[0].data
    );
    assert!(
        mails[0].data.contains("Hi Ann, order 1001 is confirmed."),
        "{}",
        mails[0].data
    );
    let sent = wait_for(&host, &shop.token, &id_of(&reply), |n| {
        n["status"] == "sent"
    })
    .await;
    assert_eq!(sent["attempts"], 1);
    assert!(sent["sent_at"].is_string());

    // A plain address works too.
    notify(&host, &shop.token, thanks("email", "bob@buyer.example"))
        .await
        .expect(202);
    let mails = smtp.wait_for(2, Duration::from_secs(10)).await;
    assert_eq!(mails[1].to, ["bob@buyer.example"]);
}

#[tokio::test]
async fn sms_whatsapp_and_push_reach_the_merchants_http_providers() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let ann = customer(&host, &shop, json!({"phone": "+14155550123"})).await;
    let provider = provider_for(&host, &shop.store, &["sms", "whatsapp", "push"]).await;

    let sms = notify(
        &host,
        &shop.token,
        thanks("sms", &format!("customer:{ann}")),
    )
    .await
    .expect(202);
    assert_eq!(sms.body["quota"]["limit"], 50);
    let wa = notify(&host, &shop.token, thanks("whatsapp", "+14155550199"))
        .await
        .expect(202);
    assert_eq!(wa.body["quota"]["limit"], 20);
    let push = notify(
        &host,
        &shop.token,
        thanks("push", &format!("customer:{ann}")),
    )
    .await
    .expect(202);
    assert_eq!(push.body["quota"]["limit"], 1000);

    let got = provider.wait_for("/sms", 1, Duration::from_secs(10)).await;
    assert_eq!(
        got[0].header("authorization").as_deref(),
        Some("Bearer sms-secret")
    );
    assert_eq!(got[0].header("idempotency-key"), Some(id_of(&sms)));
    let body = got[0].json();
    assert_eq!(body["id"], sms.body["id"]);
    assert_eq!(body["channel"], "sms");
    assert_eq!(body["to"], "+14155550123");
    assert_eq!(body["body"], "Order 1001 confirmed");
    assert_eq!(body["store"]["id"], shop.store.as_str());
    assert_eq!(body["store"]["domain"], "acme.example");

    let got = provider
        .wait_for("/whatsapp", 1, Duration::from_secs(10))
        .await;
    let body = got[0].json();
    assert_eq!(body["to"], "+14155550199");
    assert_eq!(body["body"], "Hi Ann, order 1001 is on its way");
    assert_eq!(
        got[0].header("authorization").as_deref(),
        Some("Bearer whatsapp-secret")
    );

    let got = provider.wait_for("/push", 1, Duration::from_secs(10)).await;
    let body = got[0].json();
    assert_eq!(body["to"], ann.as_str());
    assert_eq!(body["title"], "Order 1001");
    assert_eq!(body["body"], "Thanks Ann!");

    for reply in [&sms, &wa, &push] {
        wait_for(&host, &shop.token, &id_of(reply), |n| n["status"] == "sent").await;
    }
}

#[tokio::test]
async fn without_a_sender_messages_land_in_the_outbox() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let ann = customer(&host, &shop, json!({"email": "ann@buyer.example"})).await;
    let reply = notify(
        &host,
        &shop.token,
        thanks("email", &format!("customer:{ann}")),
    )
    .await
    .expect(202);
    assert_eq!(reply.body["status"], "outbox");
    assert_eq!(
        reply.body["quota"]["used"], 1,
        "the outbox counts against the quota"
    );

    let kept = outbox(&host, &shop.store).await;
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["id"], reply.body["id"]);
    assert_eq!(kept[0]["address"], "ann@buyer.example");
    assert_eq!(kept[0]["plugin"], "n-acme-example");
    assert_eq!(kept[0]["content"]["subject"], "Thanks for order 1001");
    assert_eq!(
        kept[0]["content"]["body"],
        "Hi Ann, order 1001 is confirmed."
    );
    let read = read_notification(&host, &shop.token, &id_of(&reply)).await;
    assert_eq!(read.body["status"], "outbox");
    assert!(read.body.get("address").is_none() && read.body.get("content").is_none());
}

#[tokio::test]
async fn senders_never_echo_their_secrets() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    let reply = set_sender(
        &host,
        &store,
        "email",
        json!({"smtp": {"host": "smtp.acme.example", "port": 587, "username": "shop",
                        "password": "hunter2", "from": "shop@acme.example", "tls": "starttls"}}),
    )
    .await
    .expect(200);
    assert_eq!(reply.body["smtp"]["password_set"], true);
    set_sender(
        &host,
        &store,
        "sms",
        json!({"url": "https://sms.example/send", "auth_token": "tok-123"}),
    )
    .await
    .expect(200);
    let listed = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/senders"),
            None,
        )
        .await
        .expect(200);
    let text = format!("{}{}", reply.body, listed.body);
    assert!(
        !text.contains("hunter2") && !text.contains("tok-123"),
        "{text}"
    );
    assert_eq!(listed.body[1]["auth_token_set"], true);

    for (channel, body, field) in [
        ("email", json!({"url": "https://x.example"}), "url"),
        (
            "email",
            json!({"smtp": {"host": "h", "port": 0, "from": "a@b.example", "tls": "none"}}),
            "smtp.port",
        ),
        (
            "email",
            json!({"smtp": {"host": "h", "port": 25, "from": "nobody", "tls": "none"}}),
            "smtp.from",
        ),
        (
            "email",
            json!({"smtp": {"host": "h", "port": 25, "from": "a@b.example", "tls": "ssl"}}),
            "smtp.tls",
        ),
        ("sms", json!({}), "url"),
        ("push", json!({"url": "ftp://x.example"}), "url"),
        (
            "whatsapp",
            json!({"smtp": {"host": "h", "port": 25, "from": "a@b.example", "tls": "none"}}),
            "smtp",
        ),
    ] {
        let reply = set_sender(&host, &store, channel, body).await.expect(400);
        assert_eq!(reply.field(), field, "{}", reply.body);
    }
    set_sender(&host, &store, "banner", json!({}))
        .await
        .expect(404);
    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/senders/sms"),
        None,
    )
    .await
    .expect(204);
}

#[tokio::test]
async fn banners_show_newest_first_until_they_expire_or_are_dismissed() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let short = notify(
        &host,
        &shop.token,
        json!({"channel": "banner", "banner": {"tone": "info", "title": "Sync done",
               "body": "Your catalogue is synced.", "ttl_hours": 2}}),
    )
    .await
    .expect(202);
    assert_eq!(short.body["status"], "shown");
    assert_eq!(short.body["quota"], Value::Null);
    assert_eq!(
        short.body["banner"]["expires_at"],
        "2026-01-05T02:00:00.000Z"
    );
    let long = notify(
        &host,
        &shop.token,
        json!({"channel": "banner", "banner": {"tone": "warn", "title": "Labels failing",
               "body": "Reconnect your carrier.", "ttl_hours": 48,
               "ctas": [{"label": "Reconnect", "href": "/settings/shipping"},
                        {"label": "Later", "dismiss": true}]}}),
    )
    .await
    .expect(202);

    let path = format!("/admin/v1/stores/{}/banners", shop.store);
    let shown = list(&host, &path).await;
    assert_eq!(shown.len(), 2);
    assert_eq!(shown[0]["id"], long.body["id"], "newest first");
    assert_eq!(shown[0]["plugin"], "n-acme-example");
    assert_eq!(
        shown[0]["ctas"][1],
        json!({"label": "Later", "dismiss": true})
    );
    assert_eq!(shown[1]["id"], short.body["id"]);

    host.clock.advance(SignedDuration::from_hours(2));
    let shown = list(&host, &path).await;
    assert_eq!(shown.len(), 1, "the two-hour banner expired");
    assert_eq!(shown[0]["id"], long.body["id"]);

    let dismiss = format!("{path}/{}/dismiss", id_of(&long));
    let dismissed = host.admin(Method::POST, &dismiss, None).await.expect(200);
    assert_eq!(dismissed.body["dismissed_at"], "2026-01-05T02:00:00.000Z");
    assert!(list(&host, &path).await.is_empty());
    host.clock.advance(SignedDuration::from_mins(1));
    let again = host.admin(Method::POST, &dismiss, None).await.expect(200);
    assert_eq!(
        again.body["dismissed_at"], "2026-01-05T02:00:00.000Z",
        "dismissing twice changes nothing"
    );
    let read = read_notification(&host, &shop.token, &id_of(&long)).await;
    assert_eq!(
        read.body["banner"]["dismissed_at"],
        "2026-01-05T02:00:00.000Z"
    );
    host.admin(Method::POST, &format!("{path}/msg_01unknown/dismiss"), None)
        .await
        .expect(404);
}

fn card(title: &str) -> Value {
    json!({"channel": "feed", "card": {"kind": "suggestion", "title": title,
           "body": "Stores like yours sell more with bundles.",
           "primary": {"label": "Create a bundle", "href": "/bundles/new"}}})
}

#[tokio::test]
async fn the_feed_takes_one_card_per_plugin_per_24_hours() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    host.publish("other-plugin", &[]).await;
    let (_, other) = host.install(&shop.store, "other-plugin").await;
    let path = format!("/admin/v1/stores/{}/feed", shop.store);

    let first = notify(&host, &shop.token, card("Bundle bestsellers"))
        .await
        .expect(202);
    assert_eq!(first.body["status"], "shown");
    assert_eq!(first.body["card"]["plugin"], "n-acme-example");
    let refused = notify(&host, &shop.token, card("Again")).await.expect(429);
    assert_eq!(refused.code(), "quota_exceeded");
    assert_eq!(refused.header("retry-after"), Some("86400"));

    host.clock.advance(SignedDuration::from_hours(23));
    let refused = notify(&host, &shop.token, card("Again")).await.expect(429);
    assert_eq!(
        refused.header("retry-after"),
        Some("3600"),
        "24 h from the last card"
    );
    notify(&host, &other, card("From another plugin"))
        .await
        .expect(202);
    assert_eq!(
        list(&host, &path).await.len(),
        2,
        "refused cards were not posted"
    );

    host.clock.advance(SignedDuration::from_hours(1));
    notify(&host, &shop.token, card("A day later"))
        .await
        .expect(202);
    let cards = list(&host, &path).await;
    let titles: Vec<&str> = cards.iter().filter_map(|c| c["title"].as_str()).collect();
    assert_eq!(
        titles,
        ["A day later", "From another plugin", "Bundle bestsellers"]
    );
    assert_eq!(cards[1]["plugin"], "other-plugin");
    assert_eq!(
        cards[0]["primary"],
        json!({"label": "Create a bundle", "href": "/bundles/new"})
    );
}

#[tokio::test]
async fn every_invalid_request_is_refused_with_its_field() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let phoneless = customer(&host, &shop, json!({"email": "ann@buyer.example"})).await;
    let emailless = customer(&host, &shop, json!({"phone": "+14155550123"})).await;
    let elsewhere = shop_customer_elsewhere(&host).await;
    let banner = |b: Value| json!({"channel": "banner", "banner": b});
    let ok_banner = json!({"tone": "info", "title": "t", "body": "b"});
    let feed = |c: Value| json!({"channel": "feed", "card": c});
    let long = "x".repeat(81);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"to": "a@b.example"}), "channel"),
        (
            json!({"channel": "fax", "to": "a@b.example", "template": "welcome"}),
            "channel",
        ),
        (json!({"channel": "email", "template": "welcome"}), "to"),
        (json!({"channel": "email", "to": "a@b.example"}), "template"),
        (
            json!({"channel": "email", "to": "not-an-address", "template": "welcome"}),
            "to",
        ),
        (
            json!({"channel": "sms", "to": "0612", "template": "order-thanks"}),
            "to",
        ),
        (
            json!({"channel": "push", "to": "+14155550123", "template": "order-thanks"}),
            "to",
        ),
        (
            json!({"channel": "email", "to": "customer:nobody", "template": "welcome"}),
            "to",
        ),
        (
            json!({"channel": "email", "to": "customer:cus_01unknown", "template": "welcome"}),
            "to",
        ),
        (
            json!({"channel": "email", "to": format!("customer:{elsewhere}"), "template": "welcome"}),
            "to",
        ),
        (
            json!({"channel": "email", "to": format!("customer:{emailless}"), "template": "welcome"}),
            "to",
        ),
        (thanks("sms", &format!("customer:{phoneless}")), "to"),
        (
            json!({"channel": "email", "to": "a@b.example", "template": "nope"}),
            "template",
        ),
        (
            json!({"channel": "sms", "to": "+14155550123", "template": "welcome"}),
            "channel",
        ),
        (
            json!({"channel": "email", "to": "a@b.example", "template": "order-thanks",
                "data": {"first_name": "Ann"}}),
            "data.order_id",
        ),
        (
            json!({"channel": "email", "to": "a@b.example", "template": "welcome", "data": {"x": 1}}),
            "data.x",
        ),
        (
            json!({"channel": "email", "to": "a@b.example", "template": "welcome", "data": []}),
            "data",
        ),
        (
            json!({"channel": "email", "to": "a@b.example", "template": "welcome", "banner": ok_banner}),
            "banner",
        ),
        (
            json!({"channel": "email", "to": "a@b.example", "template": "welcome", "extra": 1}),
            "extra",
        ),
        (
            json!({"channel": "banner", "to": "a@b.example", "banner": ok_banner}),
            "to",
        ),
        (json!({"channel": "banner"}), "banner"),
        (
            banner(json!({"tone": "loud", "title": "t", "body": "b"})),
            "banner.tone",
        ),
        (
            banner(json!({"tone": "info", "title": "", "body": "b"})),
            "banner.title",
        ),
        (
            banner(json!({"tone": "info", "title": long, "body": "b"})),
            "banner.title",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b".repeat(501)})),
            "banner.body",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b", "ttl_hours": 0})),
            "banner.ttl_hours",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b", "ttl_hours": 721})),
            "banner.ttl_hours",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b", "ctas": [
            {"label": "a", "dismiss": true}, {"label": "b", "dismiss": true}, {"label": "c", "dismiss": true}]})),
            "banner.ctas",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b",
            "ctas": [{"label": "a", "href": "/x", "dismiss": true}]})),
            "banner.ctas[0]",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b",
            "ctas": [{"label": "a", "dismiss": false}]})),
            "banner.ctas[0]",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b",
            "ctas": [{"label": "ok", "dismiss": true}, {"label": "a", "href": "https://evil.example"}]})),
            "banner.ctas[1].href",
        ),
        (
            banner(json!({"tone": "info", "title": "t", "body": "b",
            "ctas": [{"label": "", "href": "/x"}]})),
            "banner.ctas[0].label",
        ),
        (
            feed(
                json!({"kind": "ad", "title": "t", "body": "b", "primary": {"label": "l", "href": "/x"}}),
            ),
            "card.kind",
        ),
        (
            feed(
                json!({"kind": "suggestion", "title": "t", "body": "b", "primary": {"label": "l", "href": "x"}}),
            ),
            "card.primary.href",
        ),
        (
            feed(
                json!({"kind": "suggestion", "title": "t", "body": "b", "primary": {"href": "/x"}}),
            ),
            "card.primary.label",
        ),
        (
            feed(
                json!({"kind": "suggestion", "title": "t", "body": "", "primary": {"label": "l", "href": "/x"}}),
            ),
            "card.body",
        ),
    ];
    for (body, field) in cases {
        let reply = notify(&host, &shop.token, body.clone()).await;
        assert_eq!(reply.status, 400, "{body} → {}", reply.body);
        assert_eq!(reply.code(), "validation_failed", "{body} → {}", reply.body);
        assert_eq!(reply.field(), field, "{body} → {}", reply.body);
    }
    assert!(
        outbox(&host, &shop.store).await.is_empty(),
        "nothing invalid was kept"
    );
    let store = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{}", shop.store),
            None,
        )
        .await
        .expect(200);
    assert_eq!(
        store.body["quotas"],
        json!({"email": 200, "sms": 50, "whatsapp": 20, "push": 1000, "banner": 50, "banner_active": 20})
    );
}

/// A customer of another store.
async fn shop_customer_elsewhere(host: &TestHost) -> String {
    let other = shop(host, "other.example").await;
    customer(host, &other, json!({"email": "zed@buyer.example"})).await
}

#[tokio::test]
async fn templates_are_checked_when_the_plugin_is_published() {
    let host = TestHost::start().await;
    let cases = [
        (
            json!({"t": {"variables": ["a"], "email": {"subject": "s", "body": "{{ a "}}}),
            "templates.t.email.body",
        ),
        (
            json!({"t": {"variables": ["a"], "sms": {"body": "{{ a }} {{ coupon }}"}}}),
            "templates.t.sms.body",
        ),
        (
            json!({"t": {"variables": [], "push": {"title": "{% if x %}y{% endif %}", "body": "b"}}}),
            "templates.t.push.title",
        ),
        (
            json!({"t": {"email": {"body": "b"}}}),
            "templates.t.email.subject",
        ),
        (json!({"t": {"variables": ["a"]}}), "templates.t"),
        (
            json!({"Bad Key": {"sms": {"body": "b"}}}),
            "templates.Bad Key",
        ),
        (
            json!({"t": {"variables": ["a", "a"], "sms": {"body": "{{ a }}"}}}),
            "templates.t.variables[1]",
        ),
        (
            json!({"t": {"variables": ["1a"], "sms": {"body": "b"}}}),
            "templates.t.variables[0]",
        ),
        (
            json!({"t": {"sms": {"body": "b"}, "fax": {}}}),
            "templates.t.fax",
        ),
    ];
    for (templates, field) in cases {
        let reply = publish_with_templates(&host, "templated", templates.clone()).await;
        assert_eq!(reply.status, 400, "{templates} → {}", reply.body);
        assert_eq!(reply.code(), "validation_failed");
        assert_eq!(reply.field(), field, "{templates} → {}", reply.body);
    }
    host.admin(Method::GET, "/admin/v1/plugins/templated", None)
        .await
        .expect(404);
    let published = publish_with_templates(&host, "templated", templates())
        .await
        .expect(201);
    assert_eq!(
        published.body["templates"],
        json!(["order-thanks", "welcome"])
    );
}

#[tokio::test]
async fn merchants_reword_templates_but_cannot_add_variables() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let path = format!(
        "/admin/v1/stores/{}/templates/n-acme-example/order-thanks",
        shop.store
    );
    let reword = json!({"email": {"subject": "Order {{ order_id }}: thank you, {{ first_name }}!",
                                  "body": "Dear {{ first_name }}, we got order {{ order_id }}."}});
    let view = host
        .admin(Method::PUT, &path, Some(reword.clone()))
        .await
        .expect(200);
    assert_eq!(view.body["override"], reword);
    assert_eq!(view.body["variables"], json!(["first_name", "order_id"]));

    notify(&host, &shop.token, thanks("email", "ann@buyer.example"))
        .await
        .expect(202);
    notify(&host, &shop.token, thanks("sms", "+14155550123"))
        .await
        .expect(202);
    let kept = outbox(&host, &shop.store).await;
    assert_eq!(
        kept[1]["content"]["subject"], "Order 1001: thank you, Ann!",
        "the override wins"
    );
    assert_eq!(kept[1]["content"]["body"], "Dear Ann, we got order 1001.");
    assert_eq!(
        kept[0]["content"]["body"], "Order 1001 confirmed",
        "other channels keep the plugin's wording"
    );

    for (body, field) in [
        (
            json!({"email": {"subject": "s", "body": "Use {{ coupon }}"}}),
            "email.body",
        ),
        (json!({"sms": {"body": "{{ order_id"}}), "sms.body"),
        (json!({}), "body"),
    ] {
        let reply = host.admin(Method::PUT, &path, Some(body)).await.expect(400);
        assert_eq!(reply.code(), "validation_failed");
        assert_eq!(reply.field(), field, "{}", reply.body);
    }
    let welcome = format!(
        "/admin/v1/stores/{}/templates/n-acme-example/welcome",
        shop.store
    );
    let reply = host
        .admin(Method::PUT, &welcome, Some(json!({"sms": {"body": "hi"}})))
        .await
        .expect(400);
    assert_eq!(
        reply.field(),
        "sms",
        "a channel the template lacks cannot be added"
    );
    host.admin(
        Method::PUT,
        &format!("{welcome}-nope"),
        Some(reword.clone()),
    )
    .await
    .expect(404);

    host.admin(Method::DELETE, &path, None).await.expect(204);
    notify(&host, &shop.token, thanks("email", "ann@buyer.example"))
        .await
        .expect(202);
    let kept = outbox(&host, &shop.store).await;
    assert_eq!(kept[0]["content"]["subject"], "Thanks for order 1001");
}

#[tokio::test]
async fn every_quota_refuses_with_429_and_queues_nothing() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    set_quotas(
        &host,
        &shop.store,
        json!({"email": 1, "sms": 1, "whatsapp": 1, "push": 1}),
    )
    .await;
    let ann = customer(
        &host,
        &shop,
        json!({"email": "ann@buyer.example", "phone": "+14155550123"}),
    )
    .await;
    for channel in ["email", "sms", "whatsapp", "push"] {
        let to = format!("customer:{ann}");
        let first = notify(&host, &shop.token, thanks(channel, &to))
            .await
            .expect(202);
        assert_eq!(first.body["quota"]["remaining"], 0, "{channel}");
        let before = outbox(&host, &shop.store).await.len();
        let refused = notify(&host, &shop.token, thanks(channel, &to)).await;
        assert_eq!(refused.status, 429, "{channel}: {}", refused.body);
        assert_eq!(refused.code(), "quota_exceeded");
        assert_eq!(
            refused.header("retry-after"),
            Some("86400"),
            "until midnight UTC"
        );
        assert!(
            refused.body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(channel)
        );
        assert_eq!(
            outbox(&host, &shop.store).await.len(),
            before,
            "{channel}: nothing kept"
        );
    }
    let all = list(
        &host,
        &format!("/admin/v1/stores/{}/notifications", shop.store),
    )
    .await;
    assert_eq!(all.len(), 4, "only the accepted messages exist");

    // Banners have no quota.
    for _ in 0..3 {
        notify(
            &host,
            &shop.token,
            json!({"channel": "banner", "banner": {"tone": "info", "title": "t", "body": "b"}}),
        )
        .await
        .expect(202);
    }
    // A quota of 0 turns a channel off; bad quotas are refused.
    set_quotas(&host, &shop.store, json!({"sms": 0})).await;
    notify(&host, &shop.token, thanks("email", "ann@buyer.example"))
        .await
        .expect(202);
    let reply = host
        .admin(
            Method::PATCH,
            &format!("/admin/v1/stores/{}", shop.store),
            Some(json!({"quotas": {"sms": 1_000_001}})),
        )
        .await
        .expect(400);
    assert_eq!(reply.field(), "quotas.sms");
}

#[tokio::test]
async fn the_daily_quota_resets_at_midnight_utc() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    set_quotas(&host, &shop.store, json!({"sms": 2})).await;
    for _ in 0..2 {
        notify(&host, &shop.token, thanks("sms", "+14155550123"))
            .await
            .expect(202);
    }
    let refused = notify(&host, &shop.token, thanks("sms", "+14155550123"))
        .await
        .expect(429);
    assert_eq!(refused.header("retry-after"), Some("86400"));

    host.clock.advance(SignedDuration::from_secs(86_399));
    let refused = notify(&host, &shop.token, thanks("sms", "+14155550123"))
        .await
        .expect(429);
    assert_eq!(refused.header("retry-after"), Some("1"));

    host.clock.advance(SignedDuration::from_secs(1));
    let fresh = notify(&host, &shop.token, thanks("sms", "+14155550123"))
        .await
        .expect(202);
    assert_eq!(
        fresh.body["quota"],
        json!({"limit": 2, "used": 1, "remaining": 1, "resets_at": "2026-01-07T00:00:00.000Z"})
    );
}

#[tokio::test]
async fn fifty_concurrent_requests_never_exceed_the_quota() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    set_quotas(&host, &shop.store, json!({"email": 7})).await;
    for _ in 0..2 {
        notify(&host, &shop.token, thanks("email", "ann@buyer.example"))
            .await
            .expect(202);
    }
    let replies = futures::future::join_all(
        (0..50).map(|_| notify(&host, &shop.token, thanks("email", "ann@buyer.example"))),
    )
    .await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    let refused = replies
        .iter()
        .filter(|r| r.status == 429 && r.code() == "quota_exceeded")
        .count();
    assert_eq!(
        (accepted, refused),
        (5, 45),
        "exactly the 5 remaining slots were given"
    );
    assert_eq!(outbox(&host, &shop.store).await.len(), 7);
}

#[tokio::test]
async fn a_transient_failure_is_retried_on_schedule_then_delivered() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let provider = provider_for(&host, &shop.store, &["sms"]).await;
    provider.set("/sms", Behavior::Status(503));
    let reply = notify(&host, &shop.token, thanks("sms", "+14155550123"))
        .await
        .expect(202);
    let id = id_of(&reply);
    provider.wait_for("/sms", 1, Duration::from_secs(10)).await;
    let waiting = wait_for(&host, &shop.token, &id, |n| n["attempts"] == 1).await;
    assert_eq!(waiting["status"], "queued");
    assert_eq!(waiting["next_attempt_at"], "2026-01-05T00:00:30.000Z");
    assert!(
        waiting["last_error"].as_str().unwrap_or("").contains("503"),
        "{waiting}"
    );

    provider.set("/sms", Behavior::Status(200));
    host.clock.advance(SignedDuration::from_secs(30));
    let got = provider.wait_for("/sms", 2, Duration::from_secs(10)).await;
    assert_eq!(
        got[0].header("idempotency-key"),
        got[1].header("idempotency-key")
    );
    let sent = wait_for(&host, &shop.token, &id, |n| n["status"] == "sent").await;
    assert_eq!(sent["attempts"], 2);
}

#[tokio::test]
async fn a_permanent_failure_or_the_fifth_failed_attempt_fails_the_message() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let provider = provider_for(&host, &shop.store, &["sms", "push"]).await;
    provider.set("/sms", Behavior::Status(422));
    provider.set("/push", Behavior::Status(500));
    let ann = customer(&host, &shop, json!({"phone": "+14155550123"})).await;

    let sms = notify(&host, &shop.token, thanks("sms", "+14155550123"))
        .await
        .expect(202);
    let failed = wait_for(&host, &shop.token, &id_of(&sms), |n| {
        n["status"] == "failed"
    })
    .await;
    assert_eq!(failed["attempts"], 1, "a 4xx is not retried");

    let push = notify(
        &host,
        &shop.token,
        thanks("push", &format!("customer:{ann}")),
    )
    .await
    .expect(202);
    for (attempt, delay) in [(1, 30), (2, 120), (3, 600), (4, 3600)] {
        wait_for(&host, &shop.token, &id_of(&push), |n| {
            n["attempts"] == attempt
        })
        .await;
        host.clock.advance(SignedDuration::from_secs(delay));
    }
    let failed = wait_for(&host, &shop.token, &id_of(&push), |n| {
        n["status"] == "failed"
    })
    .await;
    assert_eq!(failed["attempts"], 5);
    assert_eq!(provider.requests("/push").len(), 5);
    assert_eq!(provider.requests("/sms").len(), 1);
}

#[tokio::test]
async fn a_plugin_reads_only_its_own_notifications() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    host.publish("other-plugin", &[]).await;
    let (_, other) = host.install(&shop.store, "other-plugin").await;
    let reply = notify(&host, &shop.token, thanks("email", "ann@buyer.example"))
        .await
        .expect(202);
    let path = format!("/v1/notifications/{}", id_of(&reply));
    host.call(&other, Method::GET, &path, None)
        .await
        .expect(404);
    let unknown = notify(&host, &other, thanks("email", "ann@buyer.example"))
        .await
        .expect(400);
    assert_eq!(
        unknown.field(),
        "template",
        "a plugin uses only its own templates"
    );
    host.call(
        &shop.token,
        Method::GET,
        "/v1/notifications/msg_01nope",
        None,
    )
    .await
    .expect(404);

    for (document, path) in [
        ("/v1/openapi.json", "/v1/notifications"),
        ("/v1/openapi.json", "/v1/notifications/{id}"),
        (
            "/admin/v1/openapi.json",
            "/admin/v1/stores/{store_id}/outbox",
        ),
        (
            "/admin/v1/openapi.json",
            "/admin/v1/stores/{store_id}/senders/{channel}",
        ),
        (
            "/admin/v1/openapi.json",
            "/admin/v1/stores/{store_id}/banners",
        ),
    ] {
        let spec = host
            .send(Method::GET, document, None, None)
            .await
            .expect(200);
        assert!(
            spec.body["paths"].get(path).is_some(),
            "{path} is documented in {document}"
        );
    }
}

#[tokio::test]
async fn an_idempotent_retry_is_not_counted_twice() {
    let host = TestHost::start().await;
    let shop = shop(&host, "acme.example").await;
    let send = || {
        TestHost::read(
            host.request(Method::POST, "/v1/notifications")
                .bearer_auth(&shop.token)
                .header("idempotency-key", "order-1001-thanks")
                .json(&thanks("email", "ann@buyer.example")),
        )
    };
    let first = send().await.expect(202);
    let again = send().await.expect(202);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(first.body["id"], again.body["id"]);
    assert_eq!(outbox(&host, &shop.store).await.len(), 1);
}
