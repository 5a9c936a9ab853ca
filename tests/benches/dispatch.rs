//! Event dispatch to a component: a fresh instance per event making host calls, through the host
//! (`Plugins::invoke`: stored event → typed WIT event, limits, actor) and through the whole
//! delivery engine (event committed → attempt recorded), beside the bare floor measured in the same
//! run (the same component instantiated from its `InstancePre` and called directly with a prepared
//! event); then the host's memory with 1,000 installed plugins after one event each (the same
//! component under 1,000 names, then with distinct compiled bytes each), and the time a restarted
//! host (a fresh process running `commerce_host::run` on that data folder) takes until it serves an
//! event to one of them.
//!
//! `cargo bench -p commerce-host-tests --bench dispatch` (env `DISPATCH_EVENTS`, `PLUGINS`,
//! `DISPATCH_BURST`: the backlog drained, 1 000 by default); the
//! figures also go to `target/bench/dispatch.json`.

use std::time::{Duration, Instant};

use commerce_host::Config;
use commerce_host::model::plugin::{ComponentInfo, Manifest};
use commerce_host::plugins::Plugins;
use commerce_host::service::PageRequest;
use commerce_host_tests::bench::Figures;
use commerce_host_tests::components::component;

/// The allocator the `commerce-host` binary runs with.
#[global_allocator]
static ALLOCATOR: commerce_host::Allocator = commerce_host::Allocator;

const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
/// Set in the child process that measures a restart: the data folder to serve.
const RESTART_DIR: &str = "DISPATCH_RESTART_DIR";

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    (at(0.5), at(0.99))
}

/// Prints a line of the table; returns events/s and the p50 in milliseconds.
fn report(name: &str, n: usize, elapsed: Duration, samples: Vec<Duration>) -> (f64, f64) {
    let (p50, p99) = percentiles(samples);
    let per_s = n as f64 / elapsed.as_secs_f64();
    println!(
        "{name:<44} {per_s:>8.0} events/s   p50 {:>8.3} ms   p99 {:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    (per_s, p50.as_secs_f64() * 1e3)
}

/// A line of `/proc/self/status` in MiB (`VmRSS`, `RssAnon`, `RssFile`, `RssShmem`).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn rss_mib() -> f64 {
    status_mib("VmRSS")
}

/// The resident set as `total (anon + file + shmem)`.
fn rss_parts() -> String {
    format!(
        "{:.0} MiB (anon {:.0} + file {:.0} + shmem {:.0})",
        status_mib("VmRSS"),
        status_mib("RssAnon"),
        status_mib("RssFile"),
        status_mib("RssShmem")
    )
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

/// The manifest of each of the many installed plugins: it receives `plugin.configured` only, so
/// installing it queues no delivery and a restarted host finds no backlog.
fn many_manifest(name: &str) -> Manifest {
    Manifest {
        events: vec!["plugin.configured".into()],
        ..manifest(name)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Some(dir) = std::env::var_os(RESTART_DIR) {
        return restart_child(dir.into()).await;
    }
    let mut figures = Figures::default();
    // The engine's attempts are seen as they are recorded, without polling storage.
    let attempts = commerce_host_tests::bench::Attempts::install()?;
    let events: usize = commerce_host_tests::bench::env_or("DISPATCH_EVENTS", 2000);
    let plugin_count: usize = commerce_host_tests::bench::env_or("PLUGINS", 1000);
    let data = tempfile::tempdir()?;
    let mut config = Config::new(data.path());
    config.store = commerce_host_tests::test_store();
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    let service = commerce_host::open_service(&config)?;
    let plugins = std::sync::Arc::new(Plugins::new(
        &data.path().join("components"),
        config.plugin_runtime.clone(),
    )?);
    let wasm = component("hostile");
    let fail = |e: commerce_host::Error| anyhow::anyhow!("{e}");
    let bench_plugin = plugins
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
    let (floor, _) = report(
        "floor: InstancePre → instance → call",
        events,
        start.elapsed(),
        samples,
    );
    figures.set("floor_events_per_s", floor);

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
    let (invoke, _) = report(
        "host: Plugins::invoke (stored event)",
        events,
        start.elapsed(),
        samples,
    );
    figures.set("invoke_events_per_s", invoke);

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
    let serial_p50 = one_at_a_time(
        "engine: event committed → attempt recorded",
        (&service, &store.id, &installation.id),
        &attempts,
        rounds,
    )
    .await?;
    figures.set("engine_serial_p50_ms", serial_p50);

    // The burst: committed while the engine is stopped, then drained by a fresh engine, so the
    // figure is the engine's own rate (committing is measured on its own).
    engine
        .stop(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await;
    let burst: usize = commerce_host_tests::bench::env_or("DISPATCH_BURST", events.min(1000));
    let already = count_attempts(&service, &store.id, &target)?;
    let recorded_before = attempts.count();
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
    let commits_before = service.db.commit_stats();
    let start = Instant::now();
    let cpu_before = commerce_host_tests::bench::process_cpu();
    let engine = commerce_host::delivery::Engine::start(
        service.clone(),
        commerce_host::delivery::EngineConfig::from(&config),
        Some(plugins.clone()),
    )
    .map_err(fail)?;
    let last = attempts
        .wait_for(recorded_before + burst as u64, Duration::from_secs(600))
        .await?;
    let elapsed = last.saturating_duration_since(start);
    let cpu = commerce_host_tests::bench::process_cpu().saturating_sub(cpu_before);
    let commits = commerce_host_tests::bench::CommitsDuring::between(
        commits_before,
        service.db.commit_stats(),
        elapsed,
    );
    engine
        .stop(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await;
    anyhow::ensure!(
        count_attempts(&service, &store.id, &target)? == already + burst,
        "every event of the burst has its attempt in the log, once"
    );
    let cpu_us = cpu.as_secs_f64() * 1e6 / burst as f64;
    println!(
        "{:<44} {:>8.0} events/s   ({burst} committed in {:.2} s beforehand, all attempted in {:.2} s; \
         {cpu_us:.0} µs of CPU an event, all threads)",
        "engine: burst (a backlog drained)",
        burst as f64 / elapsed.as_secs_f64(),
        committed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    figures.set("engine_burst_cpu_us_per_event", cpu_us);
    if let Some(commits) = &commits {
        println!("{}", commits.line("an event", burst));
        figures.set(
            "engine_burst_store_commit_busy_percent",
            commits.busy_percent,
        );
        figures.set("engine_burst_store_us_per_write", commits.us_per_write);
        figures.set(
            "engine_burst_store_writes_per_event",
            commits.writes_per(burst),
        );
    }
    figures.set(
        "burst_commit_events_per_s",
        burst as f64 / committed.as_secs_f64(),
    );
    figures.set(
        "engine_burst_events_per_s",
        burst as f64 / elapsed.as_secs_f64(),
    );
    figures.set(
        "engine_burst_vs_invoke_percent",
        100.0 * burst as f64 / elapsed.as_secs_f64() / invoke,
    );

    // One at a time again, right after the backlog: its queue entries are removed, and a store
    // that keeps removals as tombstones until it compacts (fjall) must not pass over them at
    // every event (`fjall_store.rs`, `Heads`).
    let engine = commerce_host::delivery::Engine::start(
        service.clone(),
        commerce_host::delivery::EngineConfig::from(&config),
        Some(plugins.clone()),
    )
    .map_err(fail)?;
    let after_p50 = one_at_a_time(
        "engine: the same, after the backlog",
        (&service, &store.id, &installation.id),
        &attempts,
        rounds,
    )
    .await?;
    figures.set("engine_serial_after_burst_p50_ms", after_p50);
    engine
        .stop(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await;

    // Memory with many installed plugins: the same component published under `plugin_count`
    // names and installed in a store, each receiving one event through `Plugins::invoke` (what the
    // engine calls), loaded on demand as the host does.
    let before = rss_parts();
    let before_mib = rss_mib();
    let many = service.create_store("many.example").map_err(fail)?;
    service.set_rate_limits(&many.id, unlimited).map_err(fail)?;
    let compiled = std::fs::read(plugins.dir().join("bench@1.0.0.cwasm"))?;
    let info: ComponentInfo = bench_plugin
        .component
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the bench plugin has no component"))?;
    // An engine runs meanwhile, as in a live host: it fans each `plugin.installed` out (to no
    // target: these plugins do not take it), so that the restart finds no backlog.
    let engine = commerce_host::delivery::Engine::start(
        service.clone(),
        commerce_host::delivery::EngineConfig::from(&config),
        Some(plugins.clone()),
    )
    .map_err(fail)?;
    let t = Instant::now();
    let mut targets = Vec::with_capacity(plugin_count);
    for i in 0..plugin_count {
        let manifest = many_manifest(&format!("p{i:04}"));
        // What `Plugins::publish` leaves on disk (the component and its compiled form, which the
        // bench copies instead of compiling the same bytes a thousand times), then the record.
        std::fs::write(
            plugins.dir().join(format!("{}@1.0.0.wasm", manifest.name)),
            &wasm,
        )?;
        std::fs::write(
            plugins.dir().join(format!("{}@1.0.0.cwasm", manifest.name)),
            &compiled,
        )?;
        service
            .publish_plugin(manifest.clone(), &Default::default(), Some(info.clone()))
            .map_err(fail)?;
        let installed = service.install(&many.id, &manifest.name).map_err(fail)?;
        targets.push((manifest, installed.installation));
    }
    let installed_in = t.elapsed();
    let outbox = commerce_host::model::event::OUTBOX_PREFIX;
    while !service
        .db
        .list::<serde_json::Value>(outbox, None, false, 1)
        .map_err(fail)?
        .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    engine
        .stop(tokio::time::Instant::now() + std::time::Duration::from_secs(30))
        .await;
    let t = Instant::now();
    for (manifest, installation) in &targets {
        let actor = service.component_actor(installation).map_err(fail)?;
        let out = plugins
            .invoke(&service, actor, manifest, &stored)
            .map_err(fail)?;
        assert!(out.result.is_ok(), "{:?}", out.result);
    }
    let ran_in = t.elapsed();
    let after_events = rss_mib();
    println!(
        "== {plugin_count} installed plugins ({} KiB compiled each, installed in {:.2} s): RSS {before} → {} after one event each ({:.0} KiB each, the {plugin_count} first events in {:.2} s)",
        compiled.len() / 1024,
        installed_in.as_secs_f64(),
        rss_parts(),
        (after_events - before_mib) * 1024.0 / plugin_count as f64,
        ran_in.as_secs_f64()
    );
    figures.set("rss_1000_plugins_mib", after_events);

    // The worst case for memory: the same plugins as if each had code of its own. Each compiled
    // file gets bytes of its own after its end (outside the image wasmtime reads), written beside
    // it and renamed over it as a publish writes it, so that no two are identical; then one more
    // event each.
    for (i, (manifest, _)) in targets.iter().enumerate() {
        let path = plugins.dir().join(format!("{}@1.0.0.cwasm", manifest.name));
        let tmp = plugins
            .dir()
            .join(format!("{}@1.0.0.cwasm.bench", manifest.name));
        let mut own = compiled.clone();
        own.extend_from_slice(&(i as u64).to_le_bytes());
        std::fs::write(&tmp, &own)?;
        std::fs::rename(&tmp, &path)?;
    }
    let t = Instant::now();
    for (manifest, installation) in &targets {
        let actor = service.component_actor(installation).map_err(fail)?;
        let out = plugins
            .invoke(&service, actor, manifest, &stored)
            .map_err(fail)?;
        assert!(out.result.is_ok(), "{:?}", out.result);
    }
    let ran_in = t.elapsed();
    let distinct = rss_mib();
    println!(
        "== the same {plugin_count} plugins with distinct compiled bytes: RSS {} after one more event each (in {:.2} s)",
        rss_parts(),
        ran_in.as_secs_f64()
    );
    figures.set("rss_1000_distinct_plugins_mib", distinct);

    // A restart: this host lets go of its data folder, and a fresh process serves it.
    service.db.flush().map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let (last_manifest, last) = targets
        .last()
        .ok_or_else(|| anyhow::anyhow!("PLUGINS=0"))?
        .clone();
    drop((targets, loaded, plugins, service));
    let restart = restart(data.path(), &many.id.to_string(), &last.id.to_string())?;
    println!(
        "== restart with {plugin_count} installed plugins: serving HTTP after {:.3} s, first event to {} served after {:.3} s, RSS then {}",
        restart.http_s, last_manifest.name, restart.served_s, restart.rss
    );
    figures.set("restart_ready_s", restart.served_s);
    figures.set("restart_http_s", restart.http_s);
    figures.write("dispatch")?;
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

/// What the restarted process measured.
struct Restart {
    /// From its start until `/readyz` answered 200.
    http_s: f64,
    /// From its start until the first event was delivered to a component (its attempt recorded).
    served_s: f64,
    /// Its resident set then.
    rss: String,
}

/// Runs this bench again as a fresh process on `data` (see [`restart_child`]) and reads what it
/// measured; the time counts from the spawn.
fn restart(data: &std::path::Path, store: &str, installation: &str) -> anyhow::Result<Restart> {
    use std::io::BufRead as _;
    let spawned = Instant::now();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .env(RESTART_DIR, data)
        .env("DISPATCH_RESTART_STORE", store)
        .env("DISPATCH_RESTART_INSTALLATION", installation)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut http_s = None;
    let mut served = None;
    let mut rss = String::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        if line == "http" {
            http_s = Some(spawned.elapsed().as_secs_f64());
        } else if let Some(r) = line.strip_prefix("served ") {
            served = Some(spawned.elapsed().as_secs_f64());
            rss = r.to_owned();
        }
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "the restarted host failed: {status}");
    match (http_s, served) {
        (Some(http_s), Some(served_s)) => Ok(Restart {
            http_s,
            served_s,
            rss,
        }),
        _ => anyhow::bail!("the restarted host did not report"),
    }
}

/// The restarted host: `commerce_host::run` on the data folder, as `commerce-host serve` starts
/// it; prints `http` once `/readyz` answers 200, then configures the installation (which fires
/// `plugin.configured`, the event its component takes) and prints `served <rss>` once the
/// component's attempt is recorded, then shuts the host down.
/// `rounds` events one at a time (a configuration each, which the component receives), each
/// from its commit to its attempt recorded; prints them as `name` and returns their p50 (ms).
async fn one_at_a_time(
    name: &str,
    (service, store, installation): (
        &commerce_host::Service,
        &commerce_host::model::ids::StoreId,
        &commerce_host::model::ids::InstallationId,
    ),
    attempts: &commerce_host_tests::bench::Attempts,
    rounds: usize,
) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(rounds);
    let start = Instant::now();
    for i in 0..rounds {
        let before = attempts.count();
        service
            .configure(store, installation, serde_json::json!({ name: i }))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // From the commit (the configuration's durable write returned) to the attempt recorded.
        let t = Instant::now();
        let recorded = attempts
            .wait_for(before + 1, Duration::from_secs(30))
            .await?;
        samples.push(recorded.saturating_duration_since(t));
    }
    Ok(report(name, rounds, start.elapsed(), samples).1)
}

async fn restart_child(dir: std::path::PathBuf) -> anyhow::Result<()> {
    let store = std::env::var("DISPATCH_RESTART_STORE")?;
    let installation = std::env::var("DISPATCH_RESTART_INSTALLATION")?;
    let mut config = Config::new(dir);
    config.store = commerce_host_tests::test_store();
    config.admin_token = Some(ADMIN_TOKEN.to_owned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let host = tokio::spawn(commerce_host::run(config, listener, async {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::new();
    loop {
        anyhow::ensure!(!host.is_finished(), "the host stopped");
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await
            && r.status() == reqwest::StatusCode::OK
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!("http");
    let installation_url = format!("{base}/admin/v1/stores/{store}/installations/{installation}");
    let r = client
        .put(format!("{installation_url}/settings"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({ "settings": { "restarted": true } }))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "configure: {}", r.status());
    loop {
        let page: serde_json::Value = client
            .get(format!("{installation_url}/attempts"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await?
            .json()
            .await?;
        if let Some(attempt) = page["data"].as_array().and_then(|a| a.first()) {
            anyhow::ensure!(
                attempt["succeeded"] == serde_json::json!(true),
                "the component failed after the restart: {attempt}"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    println!("served {}", rss_parts());
    let _ = stop.send(());
    host.await??;
    Ok(())
}
