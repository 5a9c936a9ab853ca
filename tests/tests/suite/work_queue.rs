//! The one work queue: a paused target's notice is queued with the pause and survives a `kill -9`
//! of the real binary right after the pause commits; a notice that finds the SMTP server down is
//! retried until it is sent; work queued by an earlier version (`due/`, `msgq/`) is still done
//! after an upgrade; and leftover entries ahead of real work never hold it up until the next poll.

use std::path::Path;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use commerce_host_tests::receiver::{Behavior, Receiver};
use commerce_host_tests::smtp::SmtpServer;
use commerce_host_tests::{ADMIN_TOKEN, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// The retries after the first failed attempt, in minutes: 1 min, 5 min, 30 min, 2 h, 6 h, 24 h.
const RETRY_MINUTES: [i64; 6] = [1, 5, 30, 120, 360, 1440];

/// Polls `check` every 20 ms until it returns `Some`; panics with `what` after [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A store whose plugin (contact `dev@plugin.example`) subscribes `url` to `customer.created`;
/// returns (store, token, subscription id).
async fn hooked_store(host: &TestHost, url: &str) -> (String, String, String) {
    let (store, token) = host
        .store_with_plugin("acme.example", &["customers.read"])
        .await;
    let sub = host.subscribe(&token, url, &["customer.created"]).await;
    let id = sub["id"].as_str().expect("subscription id").to_owned();
    (store, token, id)
}

/// Fires one event, which fails at `path` its first attempt and then `retries` retries, the
/// clock moving through the schedule once each failure is recorded.
async fn fail(
    host: &TestHost,
    receiver: &Receiver,
    (store, token, wh): (&str, &str, &str),
    path: &str,
    retries: usize,
) {
    let attempts = format!("/v1/webhooks/{wh}/attempts?limit=100");
    let recorded = |n: usize| {
        let attempts = attempts.clone();
        async move {
            host.eventually("the attempt recorded", || async {
                let reply = host.call(token, Method::GET, &attempts, None).await;
                let logged = reply.body["data"].as_array().map_or(0, Vec::len);
                (logged >= n).then_some(())
            })
            .await;
        }
    };
    host.fire_customer_created(store).await;
    receiver.wait_for(path, 1, WAIT).await;
    for (i, minutes) in RETRY_MINUTES.iter().take(retries).enumerate() {
        recorded(i + 1).await;
        host.clock.advance(SignedDuration::from_mins(*minutes));
        receiver.wait_for(path, i + 2, WAIT).await;
    }
    recorded(retries + 1).await;
}

/// The host's recorded mail, newest first.
async fn mail(http: &reqwest::Client, base: &str) -> Vec<Value> {
    let reply: Value = http
        .get(format!("{base}/admin/v1/mail"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    reply["data"].as_array().cloned().unwrap_or_default()
}

/// An SMTP server that accepts connections and never says a word: a mail sent to it stays in
/// flight.
async fn silent_smtp_server() -> (String, Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("smtp://{}", listener.local_addr().expect("addr"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    (url, accepted, task)
}

async fn spawn_host(data: &Path, smtp_url: &str) -> (Child, String) {
    commerce_host_tests::spawn_binary(
        Path::new(env!("CARGO_BIN_EXE_test-commerce-host")),
        data,
        &[
            ("COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"),
            ("COMMERCE_HOST_SMTP_URL", smtp_url),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_mail_survives_a_kill_9_right_after_the_pause_commits() {
    let receiver = Receiver::start().await;
    receiver.set("/down", Behavior::Status(500));
    // In process, on a manual clock 33 hours behind the real one: the first attempt and five
    // retries fail, so the sixth and last retry came due on the real clock 24 minutes ago.
    let start = jiff::Timestamp::now() - SignedDuration::from_hours(33);
    let mut host = TestHost::start_at(start, |config| {
        config.webhook_allow_networks = vec!["127.0.0.0/8".parse().expect("network")];
        config.delivery_poll_interval = Duration::from_millis(10);
    })
    .await;
    let (store, token, wh) = hooked_store(&host, &receiver.url("/down")).await;
    fail(&host, &receiver, (&store, &token, &wh), "/down", 5).await;
    host.stop().await;

    // The real binary, on the real clock, makes the last retry at once and pauses the
    // subscription; its notice cannot be sent: the SMTP server accepts and never answers.
    let (silent, accepted, _silent) = silent_smtp_server().await;
    let http = reqwest::Client::new();
    let (mut child, base) = spawn_host(&host.data_dir(), &silent).await;
    let queued = eventually("the notice queued with the pause", || async {
        let mail = mail(&http, &base).await;
        (mail.len() == 1 && mail[0]["status"] == "queued").then(|| mail[0].clone())
    })
    .await;
    eventually("the mail attempt in flight", || async {
        (accepted.load(Ordering::SeqCst) > 0).then_some(())
    })
    .await;
    assert_eq!(
        receiver.requests("/down").len(),
        7,
        "the last retry was made"
    );
    child.kill().expect("SIGKILL"); // std's kill is SIGKILL on Unix.
    child.wait().expect("reaped");

    // Restarted with a working SMTP server: the notice is sent, once.
    let smtp = SmtpServer::start().await;
    let (mut child, base) = spawn_host(&host.data_dir(), &smtp.url).await;
    let mails = smtp.wait_for(1, WAIT).await;
    assert_eq!(mails[0].to, ["dev@plugin.example"]);
    assert!(mails[0].data.contains(&wh), "{}", mails[0].data);
    let sent = eventually("the mail recorded as sent", || async {
        let mail = mail(&http, &base).await;
        (mail.first().is_some_and(|m| m["status"] == "sent")).then_some(mail)
    })
    .await;
    assert_eq!(sent.len(), 1, "one notice: {sent:?}");
    assert_eq!(sent[0]["subject"], queued["subject"]);
    let subscription: Value = http
        .get(format!("{base}/v1/webhooks/{wh}"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json");
    assert_eq!(subscription["status"], "paused");
    assert_eq!(
        receiver.requests("/down").len(),
        7,
        "no attempt after the pause"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::test]
async fn a_pause_notice_that_finds_the_smtp_server_down_is_retried_until_it_is_sent() {
    // A port held but not listened on: every connection is refused, a transient failure.
    let held = tokio::net::TcpSocket::new_v4().expect("socket");
    held.bind("127.0.0.1:0".parse().expect("address"))
        .expect("bind");
    let closed = format!("smtp://{}", held.local_addr().expect("addr"));
    let for_webhooks = |config: &mut commerce_host::Config, smtp: &str| {
        config.webhook_allow_networks = vec!["127.0.0.0/8".parse().expect("network")];
        config.delivery_poll_interval = Duration::from_millis(10);
        config.smtp_url = Some(smtp.to_owned());
    };
    let down = closed.clone();
    let host = TestHost::start_configured(move |c| for_webhooks(c, &down)).await;
    let receiver = Receiver::start().await;
    receiver.set("/down", Behavior::Status(503));
    let (store, token, wh) = hooked_store(&host, &receiver.url("/down")).await;
    fail(&host, &receiver, (&store, &token, &wh), "/down", 6).await;
    let waiting = host
        .eventually("the first failed attempt at the notice", || async {
            let mail = mail(&host.http, &host.base).await;
            mail.first().filter(|m| m["attempts"] == 1).cloned()
        })
        .await;
    assert_eq!(waiting["status"], "queued", "{waiting}");
    assert!(
        waiting["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("smtp:")),
        "{waiting}"
    );
    assert_eq!(
        waiting["next_attempt_at"], "2026-01-06T08:36:30.000Z",
        "retried 30 s later"
    );

    let smtp = SmtpServer::start().await;
    let up = smtp.url.clone();
    let host = host.restart_configured(move |c| for_webhooks(c, &up)).await;
    host.clock.advance(SignedDuration::from_secs(30));
    let mails = smtp.wait_for(1, WAIT).await;
    assert_eq!(mails[0].to, ["dev@plugin.example"]);
    let sent = host
        .eventually("the mail recorded as sent", || async {
            let mail = mail(&host.http, &host.base).await;
            mail.first().filter(|m| m["status"] == "sent").cloned()
        })
        .await;
    assert_eq!(sent["attempts"], 2);
    assert!(sent.get("error").is_none(), "{sent}");
}

use commerce_host_tests::open_stopped;

/// Rewrites every work queue entry of the stopped host's data folder in the format of the
/// queues before the work queue; returns how many.
fn rewrite_as_legacy_queues(data: &Path) -> usize {
    let db = open_stopped(data);
    let entries: Vec<(String, Value)> = db.list("work/", None, false, 100).expect("list");
    db.tx(|tx| {
        for (key, work) in &entries {
            let parts: Vec<&str> = key.split('/').collect();
            let (legacy, value) = match parts[1] {
                "webhook" | "component" => {
                    let mut entry = work.clone();
                    entry.as_object_mut().expect("an object").remove("work");
                    (format!("due/{}", parts[2..].join("/")), entry)
                }
                "message" => (
                    format!("msgq/{}", parts[2..].join("/")),
                    work["message_id"].clone(),
                ),
                other => panic!("unexpected work `{other}`"),
            };
            tx.remove(key)?;
            tx.write(&legacy, &value)?;
        }
        Ok(())
    })
    .expect("rewrite");
    db.flush().expect("flush");
    entries.len()
}

#[tokio::test]
async fn work_queued_by_an_earlier_version_is_still_done_after_the_upgrade() {
    let mut host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/hook", Behavior::Status(500));
    receiver.set("/sms", Behavior::Status(503));
    let store = host.create_store("acme.example").await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({
            "manifest": {"name": "shop", "version": "1.0.0", "contact_email": "dev@shop.example",
                "scopes": ["customers.read", "customers.write"],
                "webhooks": [{"url": receiver.url("/hook"), "events": ["customer.created"],
                    "secret": "0123456789abcdef"}]},
            "templates": {"hello": {"variables": [], "sms": {"body": "Hello"}}},
        })),
    )
    .await
    .expect(201);
    let (_, token) = host.install(&store, "shop").await;
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/senders/sms"),
        Some(json!({"url": receiver.url("/sms")})),
    )
    .await
    .expect(200);
    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "ann@buyer.example"})),
    )
    .await
    .expect(201);
    let message = host
        .call(
            &token,
            Method::POST,
            "/v1/notifications",
            Some(json!({"channel": "sms", "to": "+14155550123", "template": "hello", "data": {}})),
        )
        .await
        .expect(202);
    let message = message.body["id"].as_str().expect("message id").to_owned();
    let notification = format!("/admin/v1/stores/{store}/notifications/{message}");
    // Both failed once; their retries wait in the queue.
    host.eventually("the message's retry queued", || async {
        let reply = host.admin(Method::GET, &notification, None).await;
        (reply.body["attempts"] == 1).then_some(())
    })
    .await;
    let webhooks = host.call(&token, Method::GET, "/v1/webhooks", None).await;
    let wh = webhooks.body["data"][0]["id"]
        .as_str()
        .expect("the manifest's subscription")
        .to_owned();
    let deliveries = format!("/v1/webhooks/{wh}/deliveries");
    host.eventually("the delivery's retry queued", || async {
        let reply = host.call(&token, Method::GET, &deliveries, None).await;
        (reply.body["data"][0]["retries"] == 1).then_some(())
    })
    .await;

    host.stop().await;
    assert_eq!(rewrite_as_legacy_queues(&host.data_dir()), 2);
    receiver.set("/hook", Behavior::Status(204));
    receiver.set("/sms", Behavior::Status(200));
    let host = host.restart().await;
    host.clock.advance(SignedDuration::from_mins(1));

    receiver.wait_for("/sms", 2, WAIT).await;
    receiver.wait_for("/hook", 2, WAIT).await;
    host.eventually("the message sent", || async {
        let reply = host.admin(Method::GET, &notification, None).await;
        (reply.body["status"] == "sent").then_some(())
    })
    .await;
    host.eventually("the delivery succeeded", || async {
        let reply = host.call(&token, Method::GET, &deliveries, None).await;
        (reply.body["data"][0]["status"] == "succeeded").then_some(())
    })
    .await;
}

/// Writes `count` leftover queue entries for the webhook `wh` of `store` into the stopped host's
/// data folder, due at `at`: entries whose delivery is gone (as after a purge, or a replay that
/// moved the delivery on), which the engine drops when it finds them.
fn write_leftovers(data: &Path, store: &str, wh: &str, at: jiff::Timestamp, count: usize) {
    use commerce_host::model::delivery::{DueEntry, TargetRef};
    use commerce_host::model::ids::EventId;
    use commerce_host::model::work::Work;
    let db = open_stopped(data);
    db.tx(|tx| {
        for _ in 0..count {
            let work = Work::Delivery(DueEntry {
                store_id: store.parse().expect("store id"),
                target: TargetRef::Webhook(wh.parse().expect("subscription id")),
                event_id: EventId::generate(at),
            });
            tx.enqueue(&work, at)?;
        }
        Ok(())
    })
    .expect("leftovers written");
    db.flush().expect("flush");
}

/// How many webhook entries the stopped host's work queue holds.
fn webhook_entries(data: &Path) -> usize {
    let db = open_stopped(data);
    db.list::<Value>("work/webhook/", None, false, 1000)
        .expect("list")
        .len()
}

#[tokio::test]
async fn leftover_entries_ahead_of_a_delivery_do_not_hold_it_up_until_the_next_poll() {
    // The engine polls once an hour: only its own wake-ups can bring the delivery out.
    let hourly = |config: &mut commerce_host::Config| {
        config.delivery_poll_interval = Duration::from_secs(3600);
        config.message_poll_interval = Duration::from_secs(3600);
    };
    let mut host = TestHost::start_for_webhooks(hourly).await;
    let receiver = Receiver::start().await;
    let (store, _token, wh) = hooked_store(&host, &receiver.url("/hook")).await;
    host.stop().await;
    // Far more leftovers of the one subscription than a round starts for one target (8): each
    // round claims some, finds them gone and drops them, and no attempt of theirs ends to wake
    // the engine for the next round.
    let due = commerce_host::model::clock::Clock::now(&host.clock) - SignedDuration::from_secs(1);
    write_leftovers(&host.data_dir(), &store, &wh, due, 200);
    let mut host = host
        .restart_configured(move |config| {
            config.webhook_allow_networks = vec!["127.0.0.0/8".parse().expect("network")];
            config.durable_writes = false;
            hourly(config);
        })
        .await;
    host.fire_customer_created(&store).await;
    receiver.wait_for("/hook", 1, WAIT).await;
    host.stop().await;
    assert_eq!(
        webhook_entries(&host.data_dir()),
        0,
        "the leftovers were dropped, the delivery made"
    );
}
