//! Outbound HTTP never goes through a proxy from the environment: a proxy resolves names itself,
//! past the webhook address policy.
//!
//! Proxy variables are process-wide, so the test runs itself again as a child process with
//! `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` (and their lower-case forms) pointing at a local
//! listener that counts connections. In the child a host delivers a webhook and sends an SMS to
//! local receivers; both must arrive directly, and nothing may connect to the proxy.

use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use commerce_host_tests::TestHost;
use commerce_host_tests::receiver::Receiver;
use reqwest::Method;
use serde_json::json;

/// Set in the child process.
const CHILD: &str = "COMMERCE_HOST_TESTS_PROXY_CHILD";

const PROXY_VARIABLES: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// A listener that accepts connections, counts them and closes them at once.
fn counting_proxy() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            seen.fetch_add(1, Ordering::SeqCst);
            drop(stream);
        }
    });
    (url, count)
}

#[test]
fn webhooks_and_sms_providers_are_reached_directly_with_a_proxy_in_the_environment() {
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(deliver_with_proxy_variables_set());
        return;
    }
    let (proxy, proxied) = counting_proxy();
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    child
        .args([
            "--exact",
            "webhooks_and_sms_providers_are_reached_directly_with_a_proxy_in_the_environment",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    for var in PROXY_VARIABLES {
        child.env(var, &proxy);
    }
    let status = child.status().expect("run the child");
    assert!(status.success(), "the child failed: {status}");
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "nothing went through the proxy"
    );
}

/// The child's part: the proxy variables are set in its environment from the start.
async fn deliver_with_proxy_variables_set() {
    for var in PROXY_VARIABLES {
        assert!(std::env::var_os(var).is_some(), "{var} is set");
    }
    let receiver = Receiver::start().await;
    let mut host = TestHost::start_for_webhooks(|_| {}).await;
    // The test's own client must not use the proxy either.
    host.http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let store = host.create_store("acme.example").await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({
            "manifest": {"name": "shop", "version": "1.0.0", "contact_email": "dev@shop.example",
                         "scopes": ["customers.read", "customers.write"]},
            "templates": {"hello": {"variables": [], "sms": {"body": "Hello"}}},
        })),
    )
    .await
    .expect(201);
    let (_, token) = host.install(&store, "shop").await;
    host.admin(
        Method::PUT,
        &format!("/admin/v1/stores/{store}/senders/sms"),
        Some(json!({"url": receiver.url("/sms"), "auth_token": "sms-secret"})),
    )
    .await
    .expect(200);
    host.call(
        &token,
        Method::POST,
        "/v1/webhooks",
        Some(
            json!({"url": receiver.url("/hook"), "events": ["customer.created"],
                    "secret": "0123456789abcdef"}),
        ),
    )
    .await
    .expect(201);

    host.call(
        &token,
        Method::POST,
        "/v1/customers",
        Some(json!({"email": "ann@buyer.example"})),
    )
    .await
    .expect(201);
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(json!({"channel": "sms", "to": "+14155550123", "template": "hello", "data": {}})),
    )
    .await
    .expect(202);

    let hooks = receiver.wait_for("/hook", 1, Duration::from_secs(10)).await;
    assert_eq!(
        hooks[0].header("x-service-event-type").as_deref(),
        Some("customer.created")
    );
    let sms = receiver.wait_for("/sms", 1, Duration::from_secs(10)).await;
    assert_eq!(
        sms[0].header("authorization").as_deref(),
        Some("Bearer sms-secret")
    );
}
