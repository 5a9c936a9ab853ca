//! Inbound API throughput and latency over loopback: `GET /v1/orders/{id}` and `POST /v1/orders`
//! on the real host (sled on disk, durable writes), beside a bare axum handler in the same run.
//!
//! `cargo bench -p commerce-host-tests --bench api` (env `BENCH_SECS`, `BENCH_CONCURRENCY`).

use std::time::{Duration, Instant};

use commerce_host_tests::{ALL_SCOPES, TestHost};
use reqwest::Method;
use serde_json::json;

struct Figures {
    name: &'static str,
    requests: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Figures {
    fn print(&mut self) {
        self.latencies.sort();
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
            self.latencies.get(i).copied().unwrap_or_default()
        };
        println!(
            "{:<34} {:>9.0} req/s   p50 {:>8.3} ms   p99 {:>8.3} ms   ({} requests)",
            self.name,
            self.requests as f64 / self.elapsed.as_secs_f64(),
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            self.requests
        );
    }
}

async fn drive<F, Fut>(name: &'static str, concurrency: usize, secs: u64, make: F) -> Figures
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = u16> + Send,
{
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let make = make.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                let status = make().await;
                assert!(status < 300, "{name}: status {status}");
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("task"));
    }
    Figures {
        name,
        requests: latencies.len(),
        elapsed: start.elapsed(),
        latencies,
    }
}

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let concurrency: usize = std::env::var("BENCH_CONCURRENCY")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);

    let bare = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let bare_url = format!("http://{}/bare", bare.local_addr().expect("addr"));
    let app = axum::Router::new().route(
        "/bare",
        axum::routing::get(|| async {
            axum::Json(json!({"id": "ord_1", "total": 1250, "currency": "EUR"}))
        }),
    );
    tokio::spawn(async move { axum::serve(bare, app).await });

    for durable in [true, false] {
        let host = TestHost::start_configured(move |c| {
            c.clock = std::sync::Arc::new(commerce_host::model::clock::SystemClock);
            c.durable_writes = durable;
        })
        .await;
        let (store, token) = host.store_with_plugin("bench.example", &ALL_SCOPES).await;
        host.admin(
            Method::PATCH,
            &format!("/admin/v1/stores/{store}"),
            Some(json!({"rate_limits": {"requests_per_second": 1_000_000, "burst": 1_000_000, "requests_per_minute": 4_000_000_000u32}})),
        )
        .await
        .expect(200);
        let order = host
            .call(&token, Method::POST, "/v1/orders", Some(json!({"currency": "EUR", "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 2}]})))
            .await
            .expect(201);
        let order_url = format!(
            "{}/v1/orders/{}",
            host.base,
            order.body["id"].as_str().expect("id")
        );
        let create_url = format!("{}/v1/orders", host.base);
        let client = reqwest::Client::new();

        println!(
            "\n== durable_writes = {durable}, {concurrency} concurrent clients, {secs} s each"
        );
        if durable {
            let c = client.clone();
            let url = bare_url.clone();
            drive("bare axum handler (GET)", concurrency, secs, move || {
                let (c, url) = (c.clone(), url.clone());
                async move {
                    c.get(url)
                        .send()
                        .await
                        .map(|r| r.status().as_u16())
                        .unwrap_or(599)
                }
            })
            .await
            .print();
        }
        let (c, t) = (client.clone(), token.clone());
        drive("GET /v1/orders/{id}", concurrency, secs, move || {
            let (c, t, url) = (c.clone(), t.clone(), order_url.clone());
            async move {
                c.get(url)
                    .bearer_auth(t)
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(599)
            }
        })
        .await
        .print();
        let (c, t) = (client.clone(), token.clone());
        drive("POST /v1/orders", concurrency, secs, move || {
            let (c, t, url) = (c.clone(), t.clone(), create_url.clone());
            async move {
                c.post(url)
                    .bearer_auth(t)
                    .json(&json!({"currency": "EUR", "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 2}]}))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(599)
            }
        })
        .await
        .print();
    }
}
