//! Event dispatch to a component: a fresh instance per event making host calls, through the host
//! (`Plugins::invoke`: stored event → typed WIT event, limits, actor) and through the whole
//! delivery engine (event committed → attempt recorded), beside the bare floor measured in the same
//! run (the same component instantiated from its `InstancePre` and called directly with a prepared
//! event); then the host's memory with 1,000 installed plugins.
//!
//! `cargo bench -p commerce-host-tests --bench dispatch` (env `DISPATCH_EVENTS`, `PLUGINS`).

use std::time::{Duration, Instant};

use commerce_host::Config;
use commerce_host::model::plugin::Manifest;
use commerce_host::plugins::Plugins;
use commerce_host::service::PageRequest;
use commerce_host_tests::components::component;

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99))
}

fn report(name: &str, n: usize, elapsed: Duration, samples: Vec<Duration>) {
    let (p50, p99) = percentiles(samples);
    println!(
        "{name:<44} {:>8.0} events/s   p50 {:>8.3} ms   p99 {:>8.3} ms",
        n as f64 / elapsed.as_secs_f64(),
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn manifest(name: &str) -> Manifest {
    Manifest {
        name: name.to_owned(),
        version: "1.0.0".into(),
        description: None,
        scopes: vec!["orders.read".into()],
        contact_email: "dev@bench.example".into(),
        webhooks: Vec::new(),
        events: vec!["plugin.installed".into(), "plugin.configured".into()],
        limits: None,
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events: usize = std::env::var("DISPATCH_EVENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let plugin_count: usize = std::env::var("PLUGINS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let data = tempfile::tempdir()?;
    let mut config = Config::new(data.path());
    config.admin_token = Some("bench-admin-token-0123456789".to_owned());
    let service = commerce_host::open_service(&config)?;
    let plugins = std::sync::Arc::new(Plugins::new(
        &data.path().join("components"),
        config.plugin_runtime.clone(),
    )?);
    let wasm = component("hostile");
    let fail = |e: commerce_host::Error| anyhow::anyhow!("{e}");
    plugins
        .publish(
            &service,
            manifest("bench"),
            &Default::default(),
            Some(&wasm),
        )
        .map_err(fail)?;
    let store = service.create_store("bench.example").map_err(fail)?;
    // Host calls count against the store's rate limit, as over HTTP: raise it for the bench.
    let unlimited = commerce_host::model::store::RateLimits {
        requests_per_second: 1_000_000,
        burst: 1_000_000,
        requests_per_minute: 4_000_000_000,
    };
    service
        .set_rate_limits(&store.id, unlimited)
        .map_err(fail)?;
    let installed = service.install(&store.id, "bench").map_err(fail)?;
    let installation = installed.installation;
    let stored = service
        .list_events(&store.id, None, &PageRequest::first(1))
        .map_err(fail)?
        .data
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no plugin.installed event"))?;
    let actor = service.component_actor(&installation).map_err(fail)?;
    let manifest = manifest("bench");
    let limits = service.component_limits(&manifest).map_err(fail)?;
    let loaded = plugins.load("bench", "1.0.0").map_err(fail)?;
    let wit_event = commerce_host::plugins::wit_event(&stored).map_err(fail)?;
    println!(
        "== {events} events to a fresh instance each (the component logs a line and reads its settings: 2 host calls), one thread"
    );

    // Warm up both paths.
    for _ in 0..50 {
        let _ =
            plugins
                .runtime()
                .invoke(&loaded, actor.clone(), service.clone(), &limits, &wit_event);
    }

    let mut samples = Vec::with_capacity(events);
    let start = Instant::now();
    for _ in 0..events {
        let t = Instant::now();
        let out =
            plugins
                .runtime()
                .invoke(&loaded, actor.clone(), service.clone(), &limits, &wit_event);
        assert!(out.result.is_ok(), "{:?}", out.result);
        samples.push(t.elapsed());
    }
    report(
        "floor: InstancePre → instance → call",
        events,
        start.elapsed(),
        samples,
    );

    let mut samples = Vec::with_capacity(events);
    let start = Instant::now();
    for _ in 0..events {
        let t = Instant::now();
        let out = plugins
            .invoke(&service, actor.clone(), &manifest, &stored)
            .map_err(fail)?;
        assert!(out.result.is_ok(), "{:?}", out.result);
        samples.push(t.elapsed());
    }
    report(
        "host: Plugins::invoke (stored event)",
        events,
        start.elapsed(),
        samples,
    );

    // Through the delivery engine: each configuration fires plugin.configured, which the
    // component receives. Latency one event at a time; throughput as a burst.
    let engine = commerce_host::delivery::Engine::start(
        service.clone(),
        commerce_host::delivery::EngineConfig::from(&config),
        Some(plugins.clone()),
    )
    .map_err(fail)?;
    let target = commerce_host::model::delivery::TargetRef::Component(installation.id.clone());
    let newest = |service: &commerce_host::Service| -> anyhow::Result<Option<String>> {
        Ok(service
            .list_target_attempts(&store.id, &target, &PageRequest::first(1))
            .map_err(fail)?
            .data
            .first()
            .map(|a| a.event_id.to_string()))
    };
    // Let the plugin.installed event drain first.
    while newest(&service)?.is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rounds = 200;
    let mut samples = Vec::with_capacity(rounds);
    let start = Instant::now();
    for i in 0..rounds {
        let before = newest(&service)?;
        let t = Instant::now();
        service
            .configure(&store.id, &installation.id, serde_json::json!({ "n": i }))
            .map_err(fail)?;
        while newest(&service)? == before {
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        samples.push(t.elapsed());
    }
    report(
        "engine: event committed → attempt recorded",
        rounds,
        start.elapsed(),
        samples,
    );

    let burst = events.min(1000);
    let already = count_attempts(&service, &store.id, &target)?;
    let start = Instant::now();
    for i in 0..burst {
        service
            .configure(
                &store.id,
                &installation.id,
                serde_json::json!({ "burst": i }),
            )
            .map_err(fail)?;
    }
    let committed = start.elapsed();
    while count_attempts(&service, &store.id, &target)? < already + burst {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = start.elapsed();
    engine
        .stop(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await;
    println!(
        "{:<44} {:>8.0} events/s   ({burst} committed in {:.2} s, all attempted in {:.2} s)",
        "engine: burst throughput",
        burst as f64 / elapsed.as_secs_f64(),
        committed.as_secs_f64(),
        elapsed.as_secs_f64()
    );

    // Memory with many installed plugins: the same component under `plugin_count` names, as a
    // restarted host finds them on disk (precompiled), loaded into one InstancePre each.
    let before = rss_mib();
    let compiled = std::fs::read(plugins.dir().join("bench@1.0.0.cwasm"))?;
    let names: Vec<String> = (0..plugin_count).map(|i| format!("p{i:04}")).collect();
    for name in &names {
        std::fs::write(plugins.dir().join(format!("{name}@1.0.0.cwasm")), &compiled)?;
    }
    let t = Instant::now();
    plugins
        .preload(names.iter().map(|n| (n.as_str(), "1.0.0")))
        .map_err(fail)?;
    let loaded_in = t.elapsed();
    let after_load = rss_mib();
    for name in &names {
        let loaded = plugins.load(name, "1.0.0").map_err(fail)?;
        let out =
            plugins
                .runtime()
                .invoke(&loaded, actor.clone(), service.clone(), &limits, &wit_event);
        assert!(out.result.is_ok());
    }
    let after_events = rss_mib();
    println!(
        "== {plugin_count} installed plugins ({} KiB compiled each): RSS {before:.0} MiB → {after_load:.0} MiB loaded ({:.0} KiB each, in {:.2} s) → {after_events:.0} MiB after one event each",
        compiled.len() / 1024,
        (after_load - before) * 1024.0 / plugin_count as f64,
        loaded_in.as_secs_f64()
    );
    Ok(())
}

fn count_attempts(
    service: &commerce_host::Service,
    store: &commerce_host::model::ids::StoreId,
    target: &commerce_host::model::delivery::TargetRef,
) -> anyhow::Result<usize> {
    let mut n = 0;
    let mut page = PageRequest::first(250);
    loop {
        let got = service
            .list_target_attempts(store, target, &page)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        n += got.data.len();
        match got.page.next_cursor {
            Some(c) => page = PageRequest::after(250, c),
            None => return Ok(n),
        }
    }
}
