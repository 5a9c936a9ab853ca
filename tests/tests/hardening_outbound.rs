//! Hardening of the notifications area (audit of issue 11): templates cannot take the host's
//! memory, a plugin reads an error category and never the provider's secrets or the recipient's
//! address, banners have quotas, everything the outbound API produces is purged after its
//! retention, and texts and links shown to a merchant cannot be disguised.

use std::time::Duration;

use commerce_host_tests::{Reply, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

/// Counts the bytes the process holds, to show a render never builds a huge text.
#[allow(unsafe_code)] // a global allocator is `unsafe` to implement; this one only counts
mod memory {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering};

    static LIVE: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);

    struct Counting;

    fn grew(by: usize) {
        let live = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        PEAK.fetch_max(live, Ordering::Relaxed);
    }

    // SAFETY: every call is passed on to the system allocator unchanged; the counters are atomics.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract is the system allocator's.
            let ptr = unsafe { System.alloc(layout) };
            if !ptr.is_null() {
                grew(layout.size());
            }
            ptr
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as above.
            unsafe { System.dealloc(ptr, layout) };
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: as above.
            let new = unsafe { System.realloc(ptr, layout, new_size) };
            if !new.is_null() {
                if new_size > layout.size() {
                    grew(new_size - layout.size());
                } else {
                    LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
                }
            }
            new
        }
    }

    #[global_allocator]
    static COUNTING: Counting = Counting;

    /// Runs `f` and returns what it returned with how far the bytes held rose above where they
    /// were when it started (other tests of this file allocate a little meanwhile).
    pub async fn peak_during<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
        let start = LIVE.load(Ordering::Relaxed);
        PEAK.store(start, Ordering::Relaxed);
        let out = f.await;
        (out, PEAK.load(Ordering::Relaxed).saturating_sub(start))
    }
}

const MIB: usize = 1024 * 1024;

async fn publish(host: &TestHost, name: &str, templates: Value) -> Reply {
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

fn thanks_templates() -> Value {
    json!({
        "order-thanks": {
            "variables": ["first_name", "order_id"],
            "email": {"subject": "Thanks for order {{ order_id }}",
                      "body": "Hi {{ first_name }}, order {{ order_id }} is confirmed."},
            "sms": {"body": "Order {{ order_id }} confirmed"},
        },
    })
}

/// A store with plugin `plugin` installed, shipping `templates`; returns (store, token).
async fn shop_with(
    host: &TestHost,
    domain: &str,
    plugin: &str,
    templates: Value,
) -> (String, String) {
    let store = host.create_store(domain).await;
    publish(host, plugin, templates).await.expect(201);
    let (_, token) = host.install(&store, plugin).await;
    (store, token)
}

async fn notify(host: &TestHost, token: &str, body: Value) -> Reply {
    host.call(token, Method::POST, "/v1/notifications", Some(body))
        .await
}

fn banner(title: &str) -> Value {
    json!({"channel": "banner", "banner": {"tone": "info", "title": title, "body": "Body."}})
}

fn id_of(reply: &Reply) -> String {
    reply.body["id"].as_str().expect("id").to_owned()
}

// ---------------------------------------------------------------------------------------------
// 3. A template cannot exhaust the host's memory.

#[tokio::test]
async fn a_wording_that_repeats_text_is_refused_at_publish_without_rendering_it() {
    let host = TestHost::start().await;
    let bloat = json!({"bloat": {"variables": [], "sms": {"body":
        "{% for i in range(1000) %}{{ 'x' * 99999999 }}{% endfor %}"}}});
    let (reply, grew) = memory::peak_during(publish(&host, "bloat", bloat)).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.code(), "validation_failed");
    assert_eq!(reply.field(), "templates.bloat.sms.body");
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("`*` is not allowed"),
        "{}",
        reply.body
    );
    assert!(grew < 64 * MIB, "publishing held {} MiB more", grew / MIB);
}

#[tokio::test]
async fn every_construct_that_can_grow_a_value_is_refused_with_its_field() {
    let host = TestHost::start().await;
    let wordings = [
        "{{ 'x' * 99999999 }}",
        "{{ [a] * 99999999 }}",
        "{% set s = a %}{% for i in range(60) %}{% set s = s ~ s %}{% endfor %}{{ s }}",
        "{% set ns = namespace(s=a) %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% macro grow(s, n) %}{% if n %}{{ grow(s ~ s, n - 1) }}{% endif %}{% endmacro %}{{ grow(a, 60) }}",
        "{% with s = a ~ a %}{{ s }}{% endwith %}",
        "{% filter upper %}{{ a }}{% endfilter %}",
        "{{ a|center(99999999) }}",
        "{{ a|indent(99999999) }}",
        "{{ a|replace('', a) }}",
        "{{ '%s'|format(a) }}",
        "{{ a|join(a) }}",
        "{{ a|join(',')|join(',') }}",
        "{{ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a ~ a }}",
        "{{ lipsum(99999) }}",
        "{{ a|safe }}",
        "{{ a|map('upper')|join(',') }}",
    ];
    for wording in wordings {
        let templates = json!({"t": {"variables": ["a"], "sms": {"body": wording}}});
        let reply = publish(&host, "grower", templates).await;
        assert_eq!(reply.status, 400, "{wording} → {}", reply.body);
        assert_eq!(reply.field(), "templates.t.sms.body", "{wording}");
    }
    // A loop that writes more than the channel takes, even with short values, is refused too.
    let long = json!({"t": {"variables": ["a"], "sms": {"body": "{% for i in range(5000) %}{{ a }}{% endfor %}"}}});
    let reply = publish(&host, "grower", long).await.expect(400);
    assert_eq!(reply.field(), "templates.t.sms.body");

    // What a message needs still works.
    let fine_body = "{% for item in items %}{{ loop.index }}. {{ item.name|upper }}\n{% else %}none{% endfor %}\
                     {% if total > 100 %}Free shipping!{% endif %} {{ name ~ ' / ' ~ total }}";
    let fine = json!({"t": {"variables": ["name", "items", "total"], "email": {
        "subject": "{{ name|title }}, {{ items|length }} items", "body": fine_body}}});
    let (store, token) = shop_with(&host, "fine.example", "fine", fine).await;
    let sent = notify(
        &host,
        &token,
        json!({"channel": "email", "to": "ann@buyer.example", "template": "t",
               "data": {"name": "ann lee", "items": [{"name": "tea"}, {"name": "cup"}], "total": 120}}),
    )
    .await
    .expect(202);
    let message = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/notifications/{}", id_of(&sent)),
            None,
        )
        .await
        .expect(200);
    assert_eq!(message.body["content"]["subject"], "Ann Lee, 2 items");
    assert_eq!(
        message.body["content"]["body"],
        "1. TEA\n2. CUP\nFree shipping! ann lee / 120"
    );
}

#[tokio::test]
async fn a_merchant_override_is_held_to_the_same_wording_rules() {
    let host = TestHost::start().await;
    let (store, _) = shop_with(&host, "acme.example", "thanks", thanks_templates()).await;
    let path = format!("/admin/v1/stores/{store}/templates/thanks/order-thanks");
    for (body, field) in [
        (
            json!({"sms": {"body": "{{ order_id * 99999999 }}"}}),
            "sms.body",
        ),
        (
            json!({"email": {"subject": "s", "body": "{% set x = order_id %}{{ x }}"}}),
            "email.body",
        ),
        (
            json!({"email": {"subject": "Order\u{202E}{{ order_id }}", "body": "b"}}),
            "email.subject",
        ),
    ] {
        let reply = host.admin(Method::PUT, &path, Some(body.clone())).await;
        assert_eq!(reply.status, 400, "{body} → {}", reply.body);
        assert_eq!(reply.field(), field, "{body}");
    }
}

#[tokio::test]
async fn rendering_stops_at_the_channel_limit_instead_of_building_the_whole_text() {
    let host = TestHost::start().await;
    // With short values this renders 60 000 characters, within an email's 1 Mi: it is
    // published. With a 30 000-character value it would be 300 MB if rendered in full.
    let loop_ = json!({"loop": {"variables": ["big"], "email": {"subject": "s",
        "body": "{% for i in range(10000) %}{{ big }}{% endfor %}"}}});
    let (_, token) = shop_with(&host, "acme.example", "looper", loop_).await;
    let request = json!({"channel": "email", "to": "ann@buyer.example", "template": "loop",
                         "data": {"big": "y".repeat(30_000)}});
    let (reply, grew) = memory::peak_during(notify(&host, &token, request)).await;
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(reply.field(), "data");
    assert!(
        reply.body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("longer than 1048576 characters"),
        "{}",
        reply.body
    );
    assert!(
        grew < 128 * MIB,
        "the request held {} MiB more while rendering",
        grew / MIB
    );
}

// ---------------------------------------------------------------------------------------------
// 5. A plugin reads an error category, never the provider's secrets or the recipient's address.

/// A port on which nothing listens.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

async fn wait_for_notification(
    host: &TestHost,
    token: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    host.eventually(&format!("notification {id}"), || async {
        let reply = host
            .call(token, Method::GET, &format!("/v1/notifications/{id}"), None)
            .await
            .expect(200);
        done(&reply.body).then_some(reply.body)
    })
    .await
}

#[tokio::test]
async fn an_unreachable_provider_shows_the_plugin_a_category_not_its_url_and_key() {
    let host = TestHost::start().await;
    let (store, token) = shop_with(&host, "acme.example", "thanks", thanks_templates()).await;
    let url = format!(
        "http://127.0.0.1:{}/send?api_key=sk-live-0123456789",
        closed_port()
    );
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/senders/sms"),
        Some(json!({ "url": url })),
    )
    .await
    .expect(200);
    let sent = notify(
        &host,
        &token,
        json!({"channel": "sms", "to": "+14155550123", "template": "order-thanks",
               "data": {"first_name": "Ann", "order_id": "1001"}}),
    )
    .await
    .expect(202);
    let id = id_of(&sent);
    let seen = wait_for_notification(&host, &token, &id, |n| n["attempts"] == 1).await;
    assert_eq!(seen["last_error_category"], "provider_unreachable");
    assert_eq!(
        seen["last_error"],
        "the merchant's provider could not be reached"
    );
    let text = seen.to_string();
    assert!(
        !text.contains("sk-live") && !text.contains("api_key") && !text.contains("127.0.0.1"),
        "{text}"
    );
    assert!(seen.get("last_error_detail").is_none(), "{text}");

    let operator = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/notifications/{id}"),
            None,
        )
        .await
        .expect(200);
    let detail = operator.body["last_error_detail"]
        .as_str()
        .expect("the operator reads the details");
    assert!(detail.contains("could not be reached"), "{detail}");
    assert!(
        !detail.contains("sk-live"),
        "stored without the key: {detail}"
    );
}

/// An SMTP server that refuses every recipient, naming the address as real servers do.
async fn refusing_smtp_server() -> u16 {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                write.write_all(b"220 refusing ESMTP\r\n").await.ok();
                while let Ok(Some(line)) = lines.next_line().await {
                    let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
                    let reply = match verb.as_str() {
                        "EHLO" => "250 refusing\r\n".to_owned(),
                        "RCPT" => {
                            let to = line.split_once(':').map_or("", |(_, a)| a.trim());
                            format!("550 5.1.1 {to}: Recipient address rejected: User unknown\r\n")
                        }
                        "QUIT" => {
                            write.write_all(b"221 bye\r\n").await.ok();
                            return;
                        }
                        _ => "250 ok\r\n".to_owned(),
                    };
                    if write.write_all(reply.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn an_smtp_refusal_does_not_show_the_plugin_the_customers_address() {
    let host = TestHost::start().await;
    let (store, token) = shop_with(&host, "acme.example", "thanks", thanks_templates()).await;
    let port = refusing_smtp_server().await;
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/senders/email"),
        Some(json!({"smtp": {"host": "127.0.0.1", "port": port,
                             "from": "shop@acme.example", "tls": "none"}})),
    )
    .await
    .expect(200);
    let customer = host
        .call(
            &token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "hidden.ann@buyer.example"})),
        )
        .await
        .expect(201);
    let to = format!("customer:{}", customer.body["id"].as_str().expect("id"));
    let sent = notify(
        &host,
        &token,
        json!({"channel": "email", "to": to, "template": "order-thanks",
               "data": {"first_name": "Ann", "order_id": "1001"}}),
    )
    .await
    .expect(202);
    let id = id_of(&sent);
    let seen = wait_for_notification(&host, &token, &id, |n| n["status"] == "failed").await;
    assert_eq!(seen["last_error_category"], "invalid_recipient");
    assert_eq!(
        seen["last_error"],
        "the recipient's address was refused (SMTP 550)"
    );
    assert!(!seen.to_string().contains("hidden.ann"), "{seen}");

    let operator = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/notifications/{id}"),
            None,
        )
        .await
        .expect(200);
    let detail = operator.body["last_error_detail"].as_str().expect("detail");
    assert!(
        detail.contains("hidden.ann@buyer.example"),
        "the operator reads the server's words: {detail}"
    );
}

// ---------------------------------------------------------------------------------------------
// 10. Banners have quotas; what the outbound API produces is purged after its retention.

#[tokio::test]
async fn an_installation_shows_at_most_20_banners_until_one_expires_or_is_dismissed() {
    let host = TestHost::start().await;
    let (store, token) = shop_with(&host, "acme.example", "bannerer", json!({})).await;
    let mut first = String::new();
    for i in 0..20 {
        let reply = notify(&host, &token, banner(&format!("Banner {i}")))
            .await
            .expect(202);
        if i == 0 {
            first = id_of(&reply);
        }
    }
    let refused = notify(&host, &token, banner("One too many"))
        .await
        .expect(429);
    assert_eq!(refused.code(), "quota_exceeded");
    assert_eq!(
        refused.header("retry-after"),
        Some("86400"),
        "until the first banner expires"
    );

    // Another plugin of the store has its own 20.
    publish(&host, "other", json!({})).await.expect(201);
    let (_, other) = host.install(&store, "other").await;
    notify(&host, &other, banner("Other")).await.expect(202);

    host.admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/banners/{first}/dismiss"),
        None,
    )
    .await
    .expect(200);
    notify(&host, &token, banner("A dismissed one frees a place"))
        .await
        .expect(202);
    notify(&host, &token, banner("Full again"))
        .await
        .expect(429);

    host.clock.advance(SignedDuration::from_hours(24));
    notify(&host, &token, banner("The first ones expired"))
        .await
        .expect(202);
}

#[tokio::test]
async fn a_store_takes_its_daily_banner_quota_and_the_operator_sets_it() {
    let host = TestHost::start().await;
    let (store, token) = shop_with(&host, "acme.example", "bannerer", json!({})).await;
    let patched = host
        .admin(
            Method::PATCH,
            &format!("/admin/v1/stores/{store}"),
            Some(json!({"quotas": {"banner": 3, "banner_active": 5}})),
        )
        .await
        .expect(200);
    assert_eq!(patched.body["quotas"]["banner"], 3);
    assert_eq!(patched.body["quotas"]["banner_active"], 5);
    host.clock.advance(SignedDuration::from_hours(18));
    for i in 0..3 {
        notify(&host, &token, banner(&format!("B{i}")))
            .await
            .expect(202);
    }
    let refused = notify(&host, &token, banner("B3")).await.expect(429);
    assert_eq!(refused.code(), "quota_exceeded");
    assert_eq!(
        refused.header("retry-after"),
        Some("21600"),
        "until midnight UTC"
    );
    assert_eq!(
        host.admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/banners"),
            None
        )
        .await
        .expect(200)
        .body["data"]
            .as_array()
            .map(Vec::len),
        Some(3),
        "nothing was recorded for the refused banner"
    );
    host.clock.advance(SignedDuration::from_hours(6));
    notify(&host, &token, banner("Next day")).await.expect(202);

    for (quotas, field) in [
        (json!({"banner": 1_000_001}), "quotas.banner"),
        (json!({"banner_active": 1001}), "quotas.banner_active"),
    ] {
        let reply = host
            .admin(
                Method::PATCH,
                &format!("/admin/v1/stores/{store}"),
                Some(json!({ "quotas": quotas })),
            )
            .await
            .expect(400);
        assert_eq!(reply.field(), field);
    }
}

#[tokio::test]
async fn thirty_concurrent_banners_never_exceed_the_active_quota() {
    let host = TestHost::start().await;
    let (_, token) = shop_with(&host, "acme.example", "bannerer", json!({})).await;
    let replies = futures::future::join_all(
        (0..30).map(|i| notify(&host, &token, banner(&format!("Race {i}")))),
    )
    .await;
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    let refused = replies.iter().filter(|r| r.status == 429).count();
    assert_eq!((accepted, refused), (20, 10));
}

/// The status of the plugin's `GET /v1/notifications/{id}` for the notification `sent`.
async fn status_of(host: &TestHost, token: &str, sent: &Reply) -> u16 {
    let path = format!("/v1/notifications/{}", id_of(sent));
    host.call(token, Method::GET, &path, None).await.status
}

/// Waits until housekeeping (every 10 ms of real time) has purged the notification `sent`.
async fn wait_gone(host: &TestHost, token: &str, sent: &Reply, what: &str) {
    host.eventually(what, || async {
        (status_of(host, token, sent).await == 404).then_some(())
    })
    .await;
}

#[tokio::test]
async fn housekeeping_purges_banners_cards_messages_and_counters_after_their_retention() {
    let mut host =
        TestHost::start_configured(|c| c.maintenance_interval = Duration::from_millis(10)).await;
    let (store, token) = shop_with(&host, "acme.example", "thanks", thanks_templates()).await;
    let short = notify(
        &host,
        &token,
        json!({"channel": "banner", "banner": {"tone": "info", "title": "Short", "body": "b", "ttl_hours": 1}}),
    )
    .await
    .expect(202);
    let dismissed = notify(&host, &token, banner("Dismissed")).await.expect(202);
    host.admin(
        Method::POST,
        &format!(
            "/admin/v1/stores/{store}/banners/{}/dismiss",
            id_of(&dismissed)
        ),
        None,
    )
    .await
    .expect(200);
    let long = notify(
        &host,
        &token,
        json!({"channel": "banner", "banner": {"tone": "info", "title": "Long", "body": "b", "ttl_hours": 720}}),
    )
    .await
    .expect(202);
    let card = notify(
        &host,
        &token,
        json!({"channel": "feed", "card": {"kind": "suggestion", "title": "Bundle", "body": "b",
               "primary": {"label": "Go", "href": "/bundles/new"}}}),
    )
    .await
    .expect(202);
    let email = notify(
        &host,
        &token,
        json!({"channel": "email", "to": "ann@buyer.example", "template": "order-thanks",
               "data": {"first_name": "Ann", "order_id": "1001"}}),
    )
    .await
    .expect(202);
    assert_eq!(email.body["status"], "outbox");

    // A week after they stopped showing, the short and the dismissed banner go.
    host.clock.advance(SignedDuration::from_hours(7 * 24 + 1));
    wait_gone(&host, &token, &short, "the expired banner is purged").await;
    wait_gone(&host, &token, &dismissed, "the dismissed banner is purged").await;
    for kept in [&long, &card, &email] {
        assert_eq!(status_of(&host, &token, kept).await, 200, "{}", kept.body);
    }

    // After 30 days the message that is done goes; the 30-day banner is still within its week.
    host.clock.advance(SignedDuration::from_hours(23 * 24));
    wait_gone(&host, &token, &email, "the outbox message is purged").await;
    assert_eq!(status_of(&host, &token, &long).await, 200);
    assert_eq!(status_of(&host, &token, &card).await, 200);

    // After 90 days the card goes, and long since the 30-day banner.
    host.clock.advance(SignedDuration::from_hours(60 * 24));
    wait_gone(&host, &token, &card, "the feed card is purged").await;
    wait_gone(&host, &token, &long, "the long banner is purged").await;
    let feed = host
        .admin(Method::GET, &format!("/admin/v1/stores/{store}/feed"), None)
        .await
        .expect(200);
    assert_eq!(feed.body["data"], json!([]));

    // The counters of past days are gone from storage too.
    host.stop().await;
    let db = commerce_host_tests::open_stopped(&host.data_dir());
    for prefix in [
        "quota/",
        "feed-last/",
        "banner-active/",
        "banner/",
        "feed/",
        "msg/",
    ] {
        let left: Vec<(String, Value)> = db.list(prefix, None, false, 10).expect("list");
        assert!(left.is_empty(), "{prefix}: {left:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// 16. Links stay on the dashboard; texts carry no control or bidirectional-override characters.

#[tokio::test]
async fn banner_and_card_links_must_be_dashboard_paths() {
    let host = TestHost::start().await;
    let (_, token) = shop_with(&host, "acme.example", "linker", json!({})).await;
    for href in [
        "/\\evil.example",
        "//evil.example",
        "/\t/evil.example",
        "https://evil.example",
        "javascript:alert(1)",
        "/ok\u{202E}",
        "/a\\b",
    ] {
        let reply = notify(
            &host,
            &token,
            json!({"channel": "banner", "banner": {"tone": "info", "title": "t", "body": "b",
                   "ctas": [{"label": "Go", "href": href}]}}),
        )
        .await;
        assert_eq!(reply.status, 400, "{href:?} → {}", reply.body);
        assert_eq!(reply.field(), "banner.ctas[0].href", "{href:?}");
        let reply = notify(
            &host,
            &token,
            json!({"channel": "feed", "card": {"kind": "suggestion", "title": "t", "body": "b",
                   "primary": {"label": "Go", "href": href}}}),
        )
        .await;
        assert_eq!(reply.status, 400, "{href:?} → {}", reply.body);
        assert_eq!(reply.field(), "card.primary.href", "{href:?}");
    }
    notify(
        &host,
        &token,
        json!({"channel": "banner", "banner": {"tone": "info", "title": "t", "body": "b",
               "ctas": [{"label": "Go", "href": "/settings/shipping?tab=labels#top"}]}}),
    )
    .await
    .expect(202);
}

#[tokio::test]
async fn texts_shown_to_a_merchant_refuse_nul_controls_and_bidi_overrides() {
    let host = TestHost::start().await;
    let (_, token) = shop_with(&host, "acme.example", "thanks", thanks_templates()).await;
    let banner_with = |title: &str, body: &str, label: &str| {
        json!({"channel": "banner", "banner": {"tone": "info", "title": title, "body": body,
               "ctas": [{"label": label, "dismiss": true}]}})
    };
    let card_with = |title: &str| {
        json!({"channel": "feed", "card": {"kind": "suggestion", "title": title, "body": "b",
               "primary": {"label": "Go", "href": "/go"}}})
    };
    let thanks_with = |first_name: Value| {
        json!({"channel": "sms", "to": "+14155550123", "template": "order-thanks",
               "data": {"first_name": first_name, "order_id": "1001"}})
    };
    let cases = [
        (banner_with("Sale\0", "b", "Ok"), "banner.title"),
        (
            banner_with("Sale \u{202E}gnp.exe", "b", "Ok"),
            "banner.title",
        ),
        (banner_with("Two\nlines", "b", "Ok"), "banner.title"),
        (
            banner_with("t", "b \u{2066}hidden\u{2069}", "Ok"),
            "banner.body",
        ),
        (banner_with("t", "b \u{1b}[2J", "Ok"), "banner.body"),
        (banner_with("t", "b", "Ok\u{7}"), "banner.ctas[0].label"),
        (card_with("Card\u{202D}"), "card.title"),
        (thanks_with(json!("Ann\0")), "data.first_name"),
        (thanks_with(json!("Ann \u{202E}")), "data.first_name"),
        (
            thanks_with(json!({"nick": ["ok", "bad\u{1}"]})),
            "data.first_name.nick[1]",
        ),
    ];
    for (body, field) in cases {
        let reply = notify(&host, &token, body.clone()).await;
        assert_eq!(reply.status, 400, "{body} → {}", reply.body);
        assert_eq!(reply.code(), "validation_failed");
        assert_eq!(reply.field(), field, "{body}");
    }
    // Line breaks in a body, right-to-left text and its marks stay allowed.
    notify(
        &host,
        &token,
        banner_with("שלום \u{200F}Shalom", "Line one\nLine two", "Ok"),
    )
    .await
    .expect(202);

    // Wordings and descriptions are checked at publish.
    for (templates, field) in [
        (
            json!({"t": {"sms": {"body": "Order \u{202E}confirmed"}}}),
            "templates.t.sms.body",
        ),
        (
            json!({"t": {"description": "Thanks\0", "sms": {"body": "b"}}}),
            "templates.t.description",
        ),
    ] {
        let reply = publish(&host, "worded", templates).await.expect(400);
        assert_eq!(reply.field(), field);
    }
}
