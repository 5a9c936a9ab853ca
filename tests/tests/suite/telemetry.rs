//! What the host tells its operator: traces exported over OTLP/HTTP (`--otlp-endpoint`) that
//! run from a request to the deliveries of the events it caused, and JSON log lines
//! (`--log-format json`). The host is the real binary; the collector is a real HTTP receiver.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commerce_host_tests::components::publish_body;
use commerce_host_tests::receiver::Receiver;
use commerce_host_tests::{ADMIN_TOKEN, ALL_SCOPES};
use reqwest::Method;
use serde_json::{Value, json};

/// The binary under test, killed when dropped.
struct Host {
    child: Child,
    base: String,
    /// Every line the host wrote to stderr (its log), as it writes them.
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    async fn start(data: &Path, env: &[(&str, &str)]) -> Self {
        let mut env = env.to_vec();
        env.push(("COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8"));
        let (mut child, base) = commerce_host_tests::spawn_binary_with_log(
            Path::new(env!("CARGO_BIN_EXE_test-commerce-host")),
            data,
            &env,
            Stdio::piped(),
        )
        .await;
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().expect("stderr");
        let lines = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().expect("log").push(line);
            }
        });
        Self { child, base, log }
    }

    async fn send(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("request sent");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn expect(
        &self,
        token: &str,
        method: Method,
        path: &str,
        body: Option<Value>,
        status: u16,
    ) -> Value {
        let (got, body) = self.send(token, method, path, body, &[]).await;
        assert_eq!(got, status, "{path}: {body}");
        body
    }
}

/// One exported span, flattened from OTLP/JSON.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: HashMap<String, Value>,
}

impl Span {
    fn attribute(&self, key: &str) -> String {
        match self.attributes.get(key) {
            Some(Value::Object(value)) => value
                .values()
                .next()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .unwrap_or_default(),
            _ => String::new(),
        }
    }
}

/// Every span the collector received so far (OTLP/JSON `ExportTraceServiceRequest` bodies).
fn spans(collector: &Receiver) -> Vec<Span> {
    let mut spans = Vec::new();
    for request in collector.requests("/v1/traces") {
        let body = request.json();
        for resource in body["resourceSpans"].as_array().into_iter().flatten() {
            assert_eq!(
                resource["resource"]["attributes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|a| a["key"] == "service.name")
                    .map(|a| a["value"]["stringValue"].clone()),
                Some(json!("commerce-host")),
                "{resource}"
            );
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let text = |key: &str| span[key].as_str().unwrap_or("").to_owned();
                    spans.push(Span {
                        name: text("name"),
                        trace_id: text("traceId"),
                        span_id: text("spanId"),
                        parent_span_id: text("parentSpanId"),
                        attributes: span["attributes"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .map(|a| {
                                (
                                    a["key"].as_str().unwrap_or("").to_owned(),
                                    a["value"].clone(),
                                )
                            })
                            .collect(),
                    });
                }
            }
        }
    }
    spans
}

/// Polls `check` over the collected spans for up to 20 s of real time.
async fn eventually<T>(
    collector: &Receiver,
    what: &str,
    check: impl Fn(&[Span]) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let all = spans(collector);
        if let Some(found) = check(&all) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what}; spans so far (name trace span parent):\n{}",
            all.iter()
                .map(|s| format!(
                    "{} {} {} {} {:?}\n",
                    s.name,
                    s.trace_id,
                    s.span_id,
                    s.parent_span_id,
                    s.attributes.get("http.route")
                ))
                .collect::<String>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_from_a_request_to_the_webhook_attempt_and_the_component_invocation_it_caused()
 {
    let receiver = Receiver::start().await;
    let data = tempfile::tempdir().expect("temp dir");
    let host = Host::start(
        data.path(),
        &[
            ("COMMERCE_HOST_OTLP_ENDPOINT", &receiver.base),
            // Batches leave every 50 ms instead of every 5 s.
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
    )
    .await;

    // A store with an external plugin subscribed to order.paid and the order-thanks component.
    let store = host
        .expect(
            ADMIN_TOKEN,
            Method::POST,
            "/admin/v1/stores",
            Some(json!({"domain": "traced.example"})),
            201,
        )
        .await["id"]
        .as_str()
        .expect("store id")
        .to_owned();
    host.expect(ADMIN_TOKEN, Method::POST, "/admin/v1/plugins", Some(json!({"manifest": {"name": "shop", "version": "1.0.0", "contact_email": "dev@traced.example", "scopes": ALL_SCOPES}})), 201).await;
    host.expect(
        ADMIN_TOKEN,
        Method::POST,
        "/admin/v1/plugins",
        Some(publish_body("order-thanks")),
        201,
    )
    .await;
    let installations = format!("/admin/v1/stores/{store}/installations");
    let shop = host
        .expect(
            ADMIN_TOKEN,
            Method::POST,
            &installations,
            Some(json!({"plugin": "shop"})),
            201,
        )
        .await["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let component = host
        .expect(
            ADMIN_TOKEN,
            Method::POST,
            &installations,
            Some(json!({"plugin": "order-thanks"})),
            201,
        )
        .await["id"]
        .as_str()
        .expect("installation id")
        .to_owned();
    host.expect(
        &shop,
        Method::POST,
        "/v1/webhooks",
        Some(json!({"url": receiver.url("/hook"), "events": ["order.paid"], "secret": "whsec_0123456789abcdef0123456789abcdef"})),
        201,
    )
    .await;
    let customer = host
        .expect(
            &shop,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "ada@example.com"})),
            201,
        )
        .await;
    let order = host
        .expect(&shop, Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "customer_id": customer["id"], "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 2}]})), 201)
        .await;

    // The payment comes from a client that is itself traced.
    let (status, body) = host
        .send(
            ADMIN_TOKEN,
            Method::POST,
            &format!(
                "/admin/v1/stores/{store}/orders/{}/payments",
                order["id"].as_str().expect("order id")
            ),
            Some(json!({"amount": order["total"], "currency": "EUR"})),
            &[(
                "traceparent",
                &format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"),
            )],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    receiver.wait_for("/hook", 1, Duration::from_secs(20)).await;

    let found = eventually(
        &receiver,
        "the request's trace with its event, both attempts and the invocation",
        |spans| {
            let in_trace: Vec<&Span> = spans
                .iter()
                .filter(|s| s.trace_id == CLIENT_TRACE)
                .collect();
            let request = in_trace
                .iter()
                .find(|s| s.name.starts_with("POST /admin/v1/stores/"))?;
            let attempts: Vec<&&Span> = in_trace
                .iter()
                .filter(|s| s.name == "delivery.attempt")
                .collect();
            // The event span of the transaction that committed: one that lost a serialization
            // conflict and ran again (PostgreSQL) leaves a span of its own first try.
            let event = in_trace.iter().find(|s| {
                s.name == "event"
                    && attempts
                        .first()
                        .is_some_and(|a| a.parent_span_id == s.span_id)
            })?;
            let invocation = in_trace.iter().find(|s| s.name == "component.invoke")?;
            (attempts.len() == 2).then(|| {
                (
                    (*request).clone(),
                    (*event).clone(),
                    attempts.iter().map(|s| (**s).clone()).collect::<Vec<_>>(),
                    (*invocation).clone(),
                )
            })
        },
    )
    .await;
    let (request, event, attempts, invocation) = found;

    // The request continues the client's trace, under the client's span.
    assert_eq!(request.parent_span_id, CLIENT_SPAN);
    assert_eq!(
        request.name,
        "POST /admin/v1/stores/{store_id}/orders/{id}/payments"
    );
    assert_eq!(request.attribute("http.response.status_code"), "200");
    // The event is the request's child, and both attempts the event's.
    assert_eq!(event.parent_span_id, request.span_id);
    assert_eq!(event.attribute("event_type"), "order.paid");
    for attempt in &attempts {
        assert_eq!(attempt.parent_span_id, event.span_id, "{attempt:?}");
        assert_eq!(attempt.attribute("event_type"), "order.paid");
        assert_eq!(attempt.attribute("outcome"), "succeeded", "{attempt:?}");
    }
    let webhook = attempts
        .iter()
        .find(|a| a.attribute("target").starts_with("webhook"))
        .or_else(|| {
            attempts
                .iter()
                .find(|a| a.attribute("status_code") == "200")
        })
        .expect("the webhook's attempt");
    assert_eq!(webhook.attribute("status_code"), "200");
    // The component ran inside its attempt.
    let component_attempt = attempts
        .iter()
        .find(|a| a.span_id != webhook.span_id)
        .expect("the component's attempt");
    assert_eq!(invocation.parent_span_id, component_attempt.span_id);
    assert_eq!(invocation.attribute("plugin"), "order-thanks");
    assert_eq!(invocation.attribute("installation"), component);
    assert_eq!(invocation.attribute("outcome"), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_per_line_on_stderr_with_the_request_they_belong_to() {
    let data = tempfile::tempdir().expect("temp dir");
    let host = Host::start(
        data.path(),
        &[
            ("COMMERCE_HOST_LOG_FORMAT", "json"),
            ("COMMERCE_HOST_LOG", "info,commerce_host::http=debug"),
        ],
    )
    .await;
    // Each request's end is logged (at debug) inside the request's span.
    let (status, body) = host
        .send("not-a-token", Method::GET, "/v1/orders", None, &[])
        .await;
    assert_eq!(status, 401);
    let request_id = body["error"]["request_id"]
        .as_str()
        .expect("request id")
        .to_owned();

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = host.log.lock().expect("log").clone();
        let parsed: Vec<Value> = lines
            .iter()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
            })
            .collect();
        let listening = parsed
            .iter()
            .find(|l| l["fields"]["message"] == "commerce-host listening");
        let finished = parsed.iter().find(|l| {
            l["fields"]["message"] == "request finished"
                && l["span"]["request_id"] == request_id.as_str()
        });
        if let (Some(listening), Some(finished)) = (listening, finished) {
            assert_eq!(listening["level"], "INFO", "{listening}");
            assert!(listening["timestamp"].is_string(), "{listening}");
            assert!(
                listening["fields"]["addr"]
                    .as_str()
                    .is_some_and(|a| host.base.ends_with(a)),
                "{listening}"
            );
            assert_eq!(finished["level"], "DEBUG", "{finished}");
            assert_eq!(finished["fields"]["status"], 401, "{finished}");
            assert_eq!(finished["span"]["name"], "request", "{finished}");
            assert_eq!(finished["span"]["url.path"], "/v1/orders", "{finished}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no start line or request line in {lines:#?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
