//! A host killed with `kill -9` in the middle of a 10,000-delivery burst loses nothing and records
//! nothing twice: the real `commerce-host` binary runs as a child process with durable writes on
//! the wall clock, 200 committed events fan out to 50 webhook subscriptions, the host is killed
//! once a quarter of the deliveries reached the receiver, and after a restart on the same data
//! folder every committed delivery reaches the receiver at least once (repeats are allowed:
//! delivery is at least once) and the attempt log holds exactly one successful attempt for each.
//!
//! On PostgreSQL the same burst also runs on two hosts sharing the database, events made through
//! both: one is killed, and the other, never restarted, makes every committed delivery, taking
//! over the dead host's claims when their lease (3 s here) ends.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use commerce_host_tests::ADMIN_TOKEN;
use commerce_host_tests::receiver::Receiver;
use futures::StreamExt;
use reqwest::Method;
use serde_json::{Value, json};

/// How long the whole burst may take to arrive after the restart (debug build, shared machine).
const DEADLINE: Duration = Duration::from_secs(300);

/// The child host, killed when dropped (also when the test fails).
struct Host {
    child: Option<Child>,
    base: String,
}

impl Host {
    /// Starts the binary on `data`, durable writes on (the default), webhooks allowed to reach
    /// the receiver on 127.0.0.1, a webhook timeout long enough that requests the receiver holds
    /// never time out, and `env`.
    async fn start(data: &Path, env: &[(&str, &str)]) -> Self {
        let mut all = vec![
            ("COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"),
            ("COMMERCE_HOST_WEBHOOK_TIMEOUT_MS", "600000"),
        ];
        all.extend_from_slice(env);
        let (child, base) = commerce_host_tests::spawn_binary(
            Path::new(env!("CARGO_BIN_EXE_test-commerce-host")),
            data,
            &all,
        )
        .await;
        Self {
            child: Some(child),
            base,
        }
    }

    /// `kill -9` (std's kill is SIGKILL on Unix), and waits until the process is gone.
    fn kill_9(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sends a request to `host` and returns the JSON body, panicking unless the status is `expected`.
async fn send(
    http: &reqwest::Client,
    host: &Host,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
    expected: u16,
) -> Value {
    let mut request = http
        .request(method, format!("{}{path}", host.base))
        .bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, expected, "{path}: {body}");
    body
}

/// Every item of a listing, following `next_cursor` to the last page.
async fn every_page(http: &reqwest::Client, host: &Host, token: &str, path: &str) -> Vec<Value> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut request = http
            .get(format!("{}{path}", host.base))
            .bearer_auth(token)
            .query(&[("limit", "250")]);
        if let Some(cursor) = &cursor {
            request = request.query(&[("cursor", cursor)]);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        let page: Value = response.json().await.expect("a JSON page");
        assert_eq!(status, 200, "{path}: {page}");
        items.extend(page["data"].as_array().expect("data").iter().cloned());
        match page["page"]["next_cursor"].as_str() {
            Some(next) if page["page"]["has_more"] == true => cursor = Some(next.to_owned()),
            _ => return items,
        }
    }
}

/// How often each (event id, receiver path) arrived.
fn arrivals(receiver: &Receiver) -> HashMap<(String, String), usize> {
    let mut counts = HashMap::new();
    for request in receiver.all() {
        let event = request
            .header("x-service-event-id")
            .expect("every delivery names its event");
        *counts.entry((event, request.path)).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_burst_makes_every_committed_delivery_and_records_each_once() {
    // 50 webhook subscriptions, the most one installation may have.
    burst(200, 50, Survivor::Restarted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_hosts_on_one_database_the_one_left_makes_every_committed_delivery() {
    if commerce_host_tests::test_database(tempfile::tempdir().expect("temp dir").path()).is_none() {
        eprintln!(
            "two hosts share a PostgreSQL database only: set COMMERCE_HOST_TEST_DATABASE_URL"
        );
        return;
    }
    burst(100, 20, Survivor::OtherHost).await;
}

/// Who makes the deliveries left after the kill.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Survivor {
    /// The killed host, restarted on its data folder.
    Restarted,
    /// A second host on the same database, running all along (events are made through both).
    OtherHost,
}

/// The lease of a host's claims in the two-host burst: how long the other host waits before it
/// takes over the work the killed one had claimed.
const CLAIM_LEASE_MS: &str = "3000";

/// `event_count` committed `customer.created` events, each delivered to `subscriptions` webhook
/// subscriptions; the host is killed once a quarter of the deliveries reached the receiver.
async fn burst(event_count: usize, subscriptions_wanted: usize, survivor: Survivor) {
    let deliveries_wanted = event_count * subscriptions_wanted;
    let started = Instant::now();
    let receiver = Receiver::start().await;
    // Nothing is answered until every event is committed, so that the kill lands in the burst
    // however fast the engine is.
    receiver.hold();
    let data = tempfile::tempdir().expect("temp dir");
    let other_data = tempfile::tempdir().expect("temp dir");
    let http = reqwest::Client::new();
    let lease = [("COMMERCE_HOST_CLAIM_LEASE_MS", CLAIM_LEASE_MS)];
    let mut host = Host::start(data.path(), &lease).await;
    let other = match survivor {
        Survivor::Restarted => None,
        Survivor::OtherHost => {
            let url = commerce_host_tests::test_database(data.path()).expect("on PostgreSQL");
            std::fs::write(other_data.path().join("test-database-url"), url)
                .expect("share the database");
            Some(Host::start(other_data.path(), &lease).await)
        }
    };

    // A store, a plugin installed in it, and 50 subscriptions to customer.created.
    let store = send(
        &http,
        &host,
        ADMIN_TOKEN,
        Method::POST,
        "/admin/v1/stores",
        Some(json!({"domain": "burst.example"})),
        201,
    )
    .await["id"]
        .as_str()
        .expect("store id")
        .to_owned();
    let limits = json!({"rate_limits": {"requests_per_second": 100000, "burst": 100000, "requests_per_minute": 1000000}});
    let store_path = format!("/admin/v1/stores/{store}");
    send(
        &http,
        &host,
        ADMIN_TOKEN,
        Method::PATCH,
        &store_path,
        Some(limits),
        200,
    )
    .await;
    send(
        &http,
        &host,
        ADMIN_TOKEN,
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({"manifest": {"name": "burst", "version": "1.0.0",
            "contact_email": "dev@burst.example", "scopes": ["customers.read", "customers.write"]}})),
        201,
    )
    .await;
    let installation = send(
        &http,
        &host,
        ADMIN_TOKEN,
        Method::POST,
        &format!("{store_path}/installations"),
        Some(json!({"plugin": "burst"})),
        201,
    )
    .await;
    let token = installation["token"].as_str().expect("token").to_owned();
    let mut subscriptions = Vec::new(); // (subscription id, receiver path)
    for i in 0..subscriptions_wanted {
        let path = format!("/s{i}");
        let subscription = send(
            &http,
            &host,
            &token,
            Method::POST,
            "/v1/webhooks",
            Some(
                json!({"url": receiver.url(&path), "events": ["customer.created"],
                "secret": "a-secret-of-16-bytes-or-more"}),
            ),
            201,
        )
        .await;
        let id = subscription["id"].as_str().expect("subscription id");
        subscriptions.push((id.to_owned(), path));
    }

    // 200 customers created, eight requests at a time: each 201 is a committed event.
    let committed: HashSet<String> = futures::stream::iter(0..event_count)
        .map(|i| {
            // Through both hosts when there are two.
            let host = match &other {
                Some(other) if i % 2 == 1 => other,
                _ => &host,
            };
            let (http, token) = (&http, &token);
            async move {
                let customer = send(
                    http,
                    host,
                    token,
                    Method::POST,
                    "/v1/customers",
                    Some(json!({"email": format!("c{i}@burst.example")})),
                    201,
                )
                .await;
                customer["id"].as_str().expect("customer id").to_owned()
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(committed.len(), event_count);
    let committed_at = started.elapsed();

    // The burst starts; a quarter in, the host is killed.
    receiver.release();
    receiver
        .wait_for_total(deliveries_wanted / 4, DEADLINE)
        .await;
    host.kill_9();
    let killed_at = started.elapsed();
    let before_kill = arrivals(&receiver);
    assert!(
        before_kill.len() < deliveries_wanted,
        "the kill came before every delivery was made ({} of {deliveries_wanted})",
        before_kill.len()
    );

    // Restarted on the same folder, the host makes every committed delivery; or the other host
    // does, never restarted.
    let host = match other {
        Some(other) => other,
        None => Host::start(data.path(), &lease).await,
    };
    let events = every_page(
        &http,
        &host,
        ADMIN_TOKEN,
        &format!("{store_path}/events?type=customer.created"),
    )
    .await;
    let mut customer_of_event = HashMap::new();
    for event in &events {
        let customer = event["data"]["customer"]["id"].as_str().expect("customer");
        let id = event["id"].as_str().expect("event id");
        customer_of_event.insert(id.to_owned(), customer.to_owned());
    }
    let customers: HashSet<String> = customer_of_event.values().cloned().collect();
    assert_eq!(customers, committed, "one event per committed customer");
    assert_eq!(customer_of_event.len(), event_count, "and no other");
    let expected: HashSet<(String, String)> = customer_of_event
        .keys()
        .flat_map(|event| {
            subscriptions
                .iter()
                .map(move |(_, path)| (event.clone(), path.clone()))
        })
        .collect();
    assert_eq!(expected.len(), deliveries_wanted);

    let deadline = Instant::now() + DEADLINE;
    let arrived = loop {
        // Counting the distinct deliveries needs every request copied: only once enough came.
        if receiver.total() >= deliveries_wanted {
            let arrived = arrivals(&receiver);
            if expected.iter().all(|pair| arrived.contains_key(pair)) {
                break arrived;
            }
        }
        if Instant::now() > deadline {
            let arrived = arrivals(&receiver);
            let missing = expected
                .iter()
                .filter(|pair| !arrived.contains_key(*pair))
                .count();
            panic!("{missing} of {deliveries_wanted} committed deliveries never arrived");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let delivered_at = started.elapsed();
    let unexpected: Vec<_> = arrived
        .keys()
        .filter(|pair| !expected.contains(*pair))
        .collect();
    assert!(
        unexpected.is_empty(),
        "deliveries of no committed event: {unexpected:?}"
    );

    // The attempt log: once the last outcomes are recorded, every delivery succeeded with exactly
    // one attempt, the one the log lists for it.
    let deadline = Instant::now() + DEADLINE;
    for (id, _) in &subscriptions {
        let pending = format!("/v1/webhooks/{id}/deliveries?status=pending");
        while !every_page(&http, &host, &token, &pending).await.is_empty() {
            assert!(
                Instant::now() < deadline,
                "{id} still has pending deliveries"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let mut attempts_recorded = 0;
    for (id, path) in &subscriptions {
        let deliveries = every_page(
            &http,
            &host,
            &token,
            &format!("/v1/webhooks/{id}/deliveries"),
        )
        .await;
        let events: Vec<&str> = deliveries
            .iter()
            .map(|d| d["event_id"].as_str().expect("event id"))
            .collect();
        let distinct: HashSet<&str> = events.iter().copied().collect();
        assert_eq!(events.len(), distinct.len(), "{id}: one delivery per event");
        let wanted: HashSet<&str> = customer_of_event.keys().map(String::as_str).collect();
        assert_eq!(
            distinct, wanted,
            "{id}: a delivery of every committed event"
        );

        let attempts =
            every_page(&http, &host, &token, &format!("/v1/webhooks/{id}/attempts")).await;
        attempts_recorded += attempts.len();
        let mut attempts_of: HashMap<&str, Vec<&Value>> = HashMap::new();
        for attempt in &attempts {
            let delivery = attempt["delivery_id"].as_str().expect("delivery id");
            attempts_of.entry(delivery).or_default().push(attempt);
        }
        for delivery in &deliveries {
            let event = delivery["event_id"].as_str().expect("event id");
            assert_eq!(
                delivery["status"], "succeeded",
                "{id} {event} ({path}): {delivery}"
            );
            let logged = attempts_of
                .remove(delivery["id"].as_str().expect("delivery id"))
                .unwrap_or_default();
            assert_eq!(
                logged.len(),
                1,
                "{id} {event}: exactly one attempt recorded: {}",
                json!(logged)
            );
            let attempt = logged[0];
            assert_eq!(attempt["succeeded"], true, "{attempt}");
            assert_eq!(attempt["event_id"], event, "{attempt}");
            assert_eq!(delivery["attempts"], 1, "{delivery}");
            assert_eq!(
                delivery["attempt_ids"],
                json!([attempt["id"]]),
                "{delivery}"
            );
        }
        assert!(
            attempts_of.is_empty(),
            "{id}: attempts of no delivery: {}",
            json!(attempts_of)
        );
    }
    assert_eq!(attempts_recorded, deliveries_wanted);

    let twice = arrived.values().filter(|&&n| n >= 2).count();
    let most = arrived.values().copied().max().unwrap_or(0);
    println!(
        "crash burst ({}): {deliveries_wanted} deliveries ({event_count} events x \
         {subscriptions_wanted} subscriptions); \
         {} distinct had arrived when the host was killed ({} requests); \
         after the kill all arrived, {} requests in all, {twice} arrived more than once \
         (at most {most} times); {attempts_recorded} attempts recorded, one per delivery",
        match survivor {
            Survivor::Restarted => "restarted",
            Survivor::OtherHost => "two hosts",
        },
        before_kill.len(),
        before_kill.values().sum::<usize>(),
        arrived.values().sum::<usize>(),
    );
    println!(
        "crash burst timing: events committed at {:.1} s, killed at {:.1} s, all delivered at \
         {:.1} s, checked at {:.1} s",
        committed_at.as_secs_f64(),
        killed_at.as_secs_f64(),
        delivered_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
