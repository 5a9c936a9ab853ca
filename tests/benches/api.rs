//! Inbound API throughput and latency over loopback: `GET /v1/orders/{id}` and `POST /v1/orders`
//! on the real host (sled on disk, durable writes), beside a bare axum handler in the same run.
//!
//! `cargo bench -p commerce-host-tests --bench api` (env `BENCH_SECS`; `BENCH_WARMUP_SECS`, the
//! unmeasured load before each figure, 1 by default; `BENCH_CONCURRENCY`, the
//! clients of the GETs, 16 by default; `BENCH_POST_CONCURRENCY`, the clients of the POSTs, 64 by
//! default). The figures are also written to `target/bench/api.json`. With `BENCH_DATABASE_URL`
//! (a PostgreSQL server; the run makes a fresh database on it) the durable run is repeated on
//! PostgreSQL, its figures named with a `_pg` suffix.

use std::time::{Duration, Instant};

use commerce_host_tests::bench::Figures;
use commerce_host_tests::metrics::scrape;
use commerce_host_tests::{ALL_SCOPES, TestHost};
use reqwest::Method;
use serde_json::json;

/// The allocator the `commerce-host` binary runs with.
#[global_allocator]
static ALLOCATOR: commerce_host::Allocator = commerce_host::Allocator;

struct Run {
    name: &'static str,
    requests: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
    /// CPU time of the whole process (clients, server and engine) during the run.
    cpu: Duration,
}

impl Run {
    /// Prints the run's line and returns its requests per second, p99 in milliseconds and CPU
    /// microseconds per request.
    fn print(&mut self) -> (f64, f64, f64) {
        self.latencies.sort();
        let pct = |p: f64| {
            let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
            self.latencies.get(i).copied().unwrap_or_default()
        };
        let per_s = self.requests as f64 / self.elapsed.as_secs_f64();
        let p99_ms = pct(0.99).as_secs_f64() * 1e3;
        let cpu_us = self.cpu.as_secs_f64() * 1e6 / self.requests.max(1) as f64;
        println!(
            "{:<34} {:>9.0} req/s   p50 {:>8.3} ms   p99 {:>8.3} ms   {:>6.0} µs CPU/req   ({} requests)",
            self.name,
            per_s,
            pct(0.50).as_secs_f64() * 1e3,
            p99_ms,
            cpu_us,
            self.requests
        );
        (per_s, p99_ms, cpu_us)
    }
}

/// Drives `make` from `concurrency` clients for `secs` seconds, after a warm-up of
/// `BENCH_WARMUP_SECS` (1 s by default) under the same load that is not measured: the first
/// seconds of a freshly started host (its allocator growing, its caches filling, connections being
/// opened) cost more CPU per request than the rest, and only the first endpoint measured would
/// pay for them.
async fn drive<F, Fut>(name: &'static str, concurrency: usize, secs: u64, make: F) -> Run
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = u16> + Send,
{
    let warmup: u64 = commerce_host_tests::bench::env_or("BENCH_WARMUP_SECS", 1);
    if warmup > 0 {
        measure(name, concurrency, warmup, make.clone()).await;
    }
    measure(name, concurrency, secs, make).await
}

async fn measure<F, Fut>(name: &'static str, concurrency: usize, secs: u64, make: F) -> Run
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = u16> + Send,
{
    let start = Instant::now();
    let cpu_at_start = commerce_host_tests::bench::process_cpu();
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
    Run {
        name,
        requests: latencies.len(),
        elapsed: start.elapsed(),
        latencies,
        cpu: commerce_host_tests::bench::process_cpu().saturating_sub(cpu_at_start),
    }
}

#[tokio::main]
async fn main() {
    let secs: u64 = commerce_host_tests::bench::env_or("BENCH_SECS", 5);
    let concurrency: usize = commerce_host_tests::bench::env_or("BENCH_CONCURRENCY", 16);
    let post_concurrency: usize = commerce_host_tests::bench::env_or("BENCH_POST_CONCURRENCY", 64);
    let mut figures = Figures::default();
    let (mut bare_per_s, mut get_per_s) = (0.0, 0.0);

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

    let postgres = std::env::var("BENCH_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .map(|server| {
            commerce_host::storage::postgres::fresh_database(&server)
                .expect("a fresh database on BENCH_DATABASE_URL")
        });
    let mut runs = vec![(true, None), (false, None)];
    if let Some(url) = postgres {
        runs.push((true, Some(url)));
    }
    for (durable, database_url) in runs {
        let on_postgres = database_url.is_some();
        let mut host = TestHost::start_configured(move |c| {
            c.clock = std::sync::Arc::new(commerce_host::model::clock::SystemClock);
            c.durable_writes = durable;
            if database_url.is_some() {
                c.database_url = database_url.clone();
                c.database_pool_size = 16;
            }
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
            "\n== {}, durable_writes = {durable}, {concurrency} concurrent clients for GET, \
             {post_concurrency} for POST, {secs} s each",
            if on_postgres {
                "PostgreSQL".to_owned()
            } else {
                commerce_host_tests::test_store().to_string()
            }
        );
        // `get_order_…`, `post_order_durable_…`; `get_order_nondurable_…`,
        // `post_order_nondurable_…`; on PostgreSQL the durable names with `_pg` at the end.
        let (get_name, post_name) = if durable {
            ("get_order", "post_order_durable")
        } else {
            ("get_order_nondurable", "post_order_nondurable")
        };
        let pg = if on_postgres { "_pg" } else { "" };
        if durable && !on_postgres {
            let c = client.clone();
            let url = bare_url.clone();
            let (per_s, p99_ms, cpu_us) =
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
            figures.set("bare_req_per_s", per_s);
            bare_per_s = per_s;
            figures.set("bare_p99_ms", p99_ms);
            figures.set("bare_cpu_us_per_req", cpu_us);
        }
        let (c, t) = (client.clone(), token.clone());
        let (per_s, p99_ms, cpu_us) = drive("GET /v1/orders/{id}", concurrency, secs, move || {
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
        figures.set(&format!("{get_name}_req_per_s{pg}"), per_s);
        figures.set(&format!("{get_name}_p99_ms{pg}"), p99_ms);
        figures.set(&format!("{get_name}_cpu_us_per_req{pg}"), cpu_us);
        if durable && !on_postgres {
            get_per_s = per_s;
        }
        let (c, t) = (client.clone(), token.clone());
        let commits_before = scrape(&host).await.commit_stats();
        let posting = Instant::now();
        let (per_s, p99_ms, cpu_us) = drive("POST /v1/orders", post_concurrency, secs, move || {
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
        figures.set(&format!("{post_name}_req_per_s{pg}"), per_s);
        figures.set(&format!("{post_name}_p99_ms{pg}"), p99_ms);
        figures.set(&format!("{post_name}_cpu_us_per_req{pg}"), cpu_us);
        // Over the warm-up and the measured seconds, under the same load.
        let commits = commerce_host_tests::bench::CommitsDuring::between(
            commits_before,
            scrape(&host).await.commit_stats(),
            posting.elapsed(),
        );
        if let Some(commits) = commits {
            println!(
                "{}",
                commits.line("a transaction", commits.transactions as usize)
            );
            figures.set(
                &format!("{post_name}_store_transactions_per_batch"),
                commits.transactions as f64 / commits.batches.max(1) as f64,
            );
            figures.set(
                &format!("{post_name}_store_commit_busy_percent"),
                commits.busy_percent,
            );
        }
        // Stopped before the next pass (and before the runtime ends with the last one): a host
        // only dropped would still be stopping its engine as the runtime shut down.
        host.stop().await;
    }
    if bare_per_s > 0.0 {
        figures.set("get_order_vs_bare_pct", 100.0 * get_per_s / bare_per_s);
    }
    figures.write("api").expect("writing the figures");
}
