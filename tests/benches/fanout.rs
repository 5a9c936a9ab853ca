//! Fan-out benchmark: events fired into many subscriptions, delivered and signed by the engine to
//! a local receiver, beside a plain reqwest POST loop to the same receiver in the same run.
//!
//! `cargo bench -p commerce-host-tests --bench fanout` (release). Sizes:
//! `FANOUT_EVENTS` (default 200) × `FANOUT_SUBSCRIPTIONS` (default 50) deliveries in a burst,
//! after `FANOUT_SERIAL` (default 200) events one at a time to one subscription of a second store
//! (the latency from the commit to the first attempt's arrival); during the burst that second
//! store goes on with an event every 5 ms or so, one at a time (another store's latency while
//! one bursts, its events' writes beside the burst's). Every event is committed on a blocking
//! thread, as the host's HTTP handlers write, so that a durable write's flush never holds up one
//! of the runtime's workers, which the engine and the receiver run on. Figures also go to
//! `target/bench/fanout.json`. A burst whose deliveries have not all arrived after
//! `FANOUT_DEADLINE_SECS` (600) fails, saying what the storage still holds of it.
//! `FANOUT_WARM_BURSTS` (0) runs that many bursts on each host first, not counted (see
//! `warm_up`): the measured burst then meets a host that has had one.
//!
//! With `BENCH_DATABASE_URL` (a PostgreSQL server; each run makes fresh databases on it) the
//! same runs follow on PostgreSQL, with one host and then with two hosts (two services, each with
//! its own engine, in this process) on one database, events committed through both: figures
//! with a `_pg` suffix, the two hosts' burst with `_pg_2hosts` (`engine_deliveries_per_s_pg_2hosts`
//! and the rest of the burst's), and `scale_out_ratio_pg` (two hosts' deliveries/s over one
//! host's; on one machine the two share its cores).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use commerce_host::delivery::{Engine, EngineConfig};
use commerce_host::model::delivery::{Attempt, TargetRef, attempts_prefix};
use commerce_host::model::event::data::{OrderPaid, PaidOrder};
use commerce_host::model::plugin::Manifest;
use commerce_host::model::store::Store;
use commerce_host::model::webhook::NewWebhook;
use commerce_host::service::Service;
use commerce_host_tests::bench::CommitsDuring;

/// The allocator the `commerce-host` binary runs with.
#[global_allocator]
static ALLOCATOR: commerce_host::Allocator = commerce_host::Allocator;

#[derive(Default)]
struct Arrivals {
    /// (event id, path) → when its first request arrived.
    first: Mutex<HashMap<(String, String), Instant>>,
    /// Woken by every request to the quiet store's path, the only ones anyone waits for
    /// (waiting for one costs the engine no core, as a polling loop would on a small machine;
    /// woken by the burst's requests too, the waiter took a wake-up, a task's poll and the
    /// map's lock from the engine for each of them).
    arrived: tokio::sync::Notify,
    /// How many first requests of an event arrived on a path other than the quiet store's: what
    /// the burst waits for, counted here so that its wait does not copy the map (10 000 entries,
    /// every 5 ms: 3.5 % of a profile's samples, taken from the engine it measures). Set to 0 as
    /// each burst starts.
    burst: std::sync::atomic::AtomicUsize,
}

async fn receive(
    State(arrivals): State<Arc<Arrivals>>,
    uri: Uri,
    headers: HeaderMap,
    _body: Bytes,
) -> &'static str {
    let now = Instant::now();
    let event = headers
        .get("x-service-event-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("plain")
        .to_owned();
    let path = uri.path();
    let first = match arrivals
        .first
        .lock()
        .expect("lock")
        .entry((event, path.to_owned()))
    {
        std::collections::hash_map::Entry::Occupied(_) => false,
        std::collections::hash_map::Entry::Vacant(vacant) => {
            vacant.insert(now);
            true
        }
    };
    if path == QUIET {
        arrivals.arrived.notify_waiters();
    } else if first {
        arrivals
            .burst
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    "ok"
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Prints a line of figures; returns (requests/s, p50 ms, p99 ms).
fn report(
    name: &str,
    count: usize,
    elapsed: Duration,
    latencies: &mut [Duration],
) -> (f64, f64, f64) {
    latencies.sort();
    let figures = (
        count as f64 / elapsed.as_secs_f64(),
        percentile(latencies, 50.0).as_secs_f64() * 1e3,
        percentile(latencies, 99.0).as_secs_f64() * 1e3,
    );
    println!(
        "{name:<34} {count:>6} requests in {:>7.3} s = {:>8.0} req/s   latency p50 {:>7.2} ms  p99 {:>7.2} ms",
        elapsed.as_secs_f64(),
        count as f64 / elapsed.as_secs_f64(),
        percentile(latencies, 50.0).as_secs_f64() * 1e3,
        percentile(latencies, 99.0).as_secs_f64() * 1e3,
    );
    figures
}

/// The hosts of a run: services over one storage, each with its engine, a store with
/// `subscriptions` webhook subscriptions to `order.paid`, and a quiet store with one.
struct Hosts {
    services: Vec<Service>,
    engines: Vec<Engine>,
    store: Store,
    quiet: Store,
    /// The quiet store's one subscription.
    quiet_target: TargetRef,
    _data: Vec<tempfile::TempDir>,
}

impl Hosts {
    /// `hosts` hosts on `database_url` (one host on sled when `None`), delivering to `base`.
    async fn start(
        database_url: Option<&str>,
        hosts: usize,
        base: &str,
        sizes: &Sizes,
    ) -> anyhow::Result<Self> {
        // Hosts on sled would each have a storage of their own, not one store between them.
        anyhow::ensure!(
            hosts == 1 || database_url.is_some(),
            "several hosts share one PostgreSQL database; on sled there is one host"
        );
        let (subscriptions, concurrency) = (sizes.subscriptions, sizes.concurrency);
        let (mut services, mut engines, mut data) = (Vec::new(), Vec::new(), Vec::new());
        let mut configs = Vec::new();
        for _ in 0..hosts {
            let dir = tempfile::tempdir()?;
            let mut config = commerce_host::Config::new(dir.path());
            config.store = commerce_host_tests::test_store();
            config.admin_token = Some("bench-admin-token-0123456789".to_owned());
            // Loopback, by address or by name (`localhost` may also resolve to `::1`).
            config.webhook_allow_networks = vec!["127.0.0.0/8".parse()?, "::1/128".parse()?];
            config.delivery_concurrency = concurrency;
            config.database_url = database_url.map(str::to_owned);
            services.push(commerce_host::open_service(&config)?);
            configs.push(config);
            data.push(dir);
        }
        let service = &services[0];
        let store = service.create_store("bench.example")?;
        // The quiet store runs a plugin of its own: one plugin, over every store, may hold a
        // quarter of the engine's places once half are used, and the burst's holds half.
        for name in ["bench", "bench-quiet"] {
            service.publish_plugin(
                Manifest {
                    name: name.into(),
                    version: "1.0.0".into(),
                    description: None,
                    scopes: vec!["orders.read".into()],
                    contact_email: "dev@bench.example".into(),
                    webhooks: Vec::new(),
                    events: Vec::new(),
                    limits: None,
                },
                &Default::default(),
                None,
            )?;
        }
        let installed = service.install(&store.id, "bench")?;
        let actor = service.authenticate(&installed.token)?;
        for i in 0..subscriptions {
            service
                .create_webhook(
                    &actor,
                    NewWebhook {
                        url: format!("{base}/s{i}"),
                        events: vec!["order.paid".into()],
                        secret: "bench-secret-0123456789".into(),
                    },
                )
                .await?;
        }
        // A second store with one subscription, for the latency of one event at a time.
        let quiet = service.create_store("quiet.example")?;
        let quiet_token = service.install(&quiet.id, "bench-quiet")?.token;
        let quiet_webhook = service
            .create_webhook(
                &service.authenticate(&quiet_token)?,
                NewWebhook {
                    url: format!("{base}/quiet"),
                    events: vec!["order.paid".into()],
                    secret: "bench-secret-0123456789".into(),
                },
            )
            .await?;
        for (service, config) in services.iter().zip(&configs) {
            engines.push(Engine::start(
                service.clone(),
                EngineConfig::from(config),
                None,
            )?);
        }
        // Let the plugin.installed events (no subscriber) be fanned out first.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !service
            .db
            .list::<serde_json::Value>(commerce_host::model::event::OUTBOX_PREFIX, None, false, 1)?
            .is_empty()
        {
            anyhow::ensure!(Instant::now() < deadline, "the outbox did not drain");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        Ok(Self {
            services,
            engines,
            store,
            quiet,
            quiet_target: TargetRef::Webhook(quiet_webhook.id),
            _data: data,
        })
    }

    async fn stop(self) {
        for engine in self.engines {
            engine
                .stop(tokio::time::Instant::now() + Duration::from_secs(30))
                .await;
        }
    }
}

/// The quiet store's receiver path: its arrivals are not the burst's.
const QUIET: &str = "/quiet";

/// An event committed to the quiet store: its arrivals key, when its write started (the durable
/// flush included: the engine may see the commit, and deliver it, before the flush returns), and
/// how long the write took, flush included.
struct QuietSent {
    key: (String, String),
    committed: Instant,
    /// When its write started, by the host's clock (which its attempts' times are by).
    at: jiff::Timestamp,
    write: Duration,
}

/// Commits an `order.paid` event of the order `order` to `store`, as one durable write.
fn emit_paid(
    service: &Service,
    store: &commerce_host::model::event::StoreRef,
    order: &str,
) -> anyhow::Result<commerce_host::model::event::Event> {
    let data = OrderPaid {
        order: PaidOrder {
            id: order.parse()?,
            total: 4200,
            currency: "EUR".into(),
        },
    };
    Ok(service
        .db
        .tx(|tx| tx.emit(store, data.clone(), service.now()).cloned())?)
}

/// Commits an event to the quiet store (the `n`th), on a blocking thread as the host's HTTP
/// handlers write (a durable write's flush waits there, not on one of the runtime's workers,
/// which the engine and the receiver run on).
async fn quiet_commit(hosts: &Hosts, n: usize) -> anyhow::Result<QuietSent> {
    let service = hosts.services[0].clone();
    let store = hosts.quiet.reference();
    let (committed, at) = (Instant::now(), service.now());
    let event =
        tokio::task::spawn_blocking(move || emit_paid(&service, &store, &format!("ord_q{n}")))
            .await??;
    Ok(QuietSent {
        key: (event.id.to_string(), QUIET.to_owned()),
        committed,
        at,
        write: committed.elapsed(),
    })
}

/// Waits for the first attempt of the quiet event `key` and takes it out of `arrivals`; returns
/// its latency from `committed`.
async fn quiet_arrival(
    arrivals: &Arrivals,
    key: &(String, String),
    committed: Instant,
) -> anyhow::Result<Duration> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let arrived = loop {
        let woken = arrivals.arrived.notified();
        if let Some(at) = arrivals.first.lock().expect("lock").remove(key) {
            break at;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        anyhow::ensure!(
            tokio::time::timeout(left, woken).await.is_ok(),
            "the event was not delivered"
        );
    };
    Ok(arrived.saturating_duration_since(committed))
}

/// One event to the quiet store (the `n`th): from the commit's start to its first attempt's
/// arrival.
async fn quiet_event(hosts: &Hosts, arrivals: &Arrivals, n: usize) -> anyhow::Result<Duration> {
    let sent = quiet_commit(hosts, n).await?;
    quiet_arrival(arrivals, &sent.key, sent.committed).await
}

/// One event at a time to the quiet store: from the commit's start to its first attempt's
/// arrival. Returns (p50, p99) in ms.
async fn serial(hosts: &Hosts, arrivals: &Arrivals, count: usize) -> anyhow::Result<(f64, f64)> {
    let mut latencies = Vec::with_capacity(count);
    for n in 0..count {
        latencies.push(quiet_event(hosts, arrivals, n).await?);
    }
    let (_, p50, p99) = report(
        "  one at a time (write -> first attempt)",
        count,
        latencies.iter().sum(),
        &mut latencies,
    );
    arrivals.first.lock().expect("lock").clear();
    Ok((p50, p99))
}

/// The burst's arrivals so far (the quiet store's left out).
fn burst_arrivals(arrivals: &Arrivals) -> Vec<((String, String), Instant)> {
    let first = arrivals.first.lock().expect("lock");
    first
        .iter()
        .filter(|((_, path), _)| path != QUIET)
        .map(|(key, at)| (key.clone(), *at))
        .collect()
}

/// What a burst measured: its deliveries/s and latencies, and those of the quiet store's events
/// sent one at a time while it ran.
struct Burst {
    /// Deliveries made (events × subscriptions).
    deliveries: usize,
    per_s: f64,
    /// CPU of the whole process (host, receiver, bench) per delivery, in µs.
    cpu_us: f64,
    p50_ms: f64,
    p99_ms: f64,
    quiet_p50_ms: f64,
    quiet_p99_ms: f64,
    /// The slowest of the quiet store's events (its p99 over the 60-120 of a run is the
    /// second slowest, or so).
    quiet_max_ms: f64,
    /// The slowest event's write, its flush included (the rest of its latency is the engine's
    /// and its attempt's).
    quiet_max_write_ms: f64,
    /// The slowest of the quiet store's writes (flush included), whichever event it was.
    quiet_slowest_write_ms: f64,
    /// From the start of the slowest event's write (so its write included) to its first
    /// attempt's start, by the host's clock (to the millisecond); the rest is the attempt's own,
    /// to the receiver.
    quiet_max_to_attempt_ms: f64,
    /// The engine's part of the quiet store's events: from the end of an event's write (flush
    /// included) to its first attempt's start, p50, p99 and max, by the attempts' records (to
    /// the millisecond).
    quiet_engine_ms: [f64; 3],
    /// The store's commits over the burst (`None` where it does not count them: PostgreSQL).
    commits: Option<CommitsDuring>,
}

/// `events` events committed to the store (through each host in turn), each fanned out to
/// every subscription, while the quiet store's events go one at a time (another store's latency
/// under the burst). Deliveries/s and latencies from commit to first arrival.
async fn burst(
    hosts: &Hosts,
    arrivals: &Arrivals,
    events: usize,
    subscriptions: usize,
) -> anyhow::Result<Burst> {
    let done = std::sync::atomic::AtomicBool::new(false);
    let quiet = async {
        // An event every 5 ms or so, without waiting for the last one's delivery.
        let mut sent = Vec::new();
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            sent.push(quiet_commit(hosts, 100_000 + sent.len()).await?);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut latencies = Vec::with_capacity(sent.len());
        for one in sent {
            let latency = quiet_arrival(arrivals, &one.key, one.committed).await?;
            latencies.push((latency, one));
        }
        anyhow::Ok(latencies)
    };
    let loud = async {
        let measured = burst_of(hosts, arrivals, events, subscriptions).await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        measured
    };
    let (quiet, loud) = tokio::join!(quiet, loud);
    let (per_s, p50_ms, p99_ms, cpu_us, commits) = loud?;
    let quiet = quiet?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let slowest = quiet.iter().max_by_key(|(latency, _)| *latency);
    let (quiet_max_ms, quiet_max_write_ms) =
        slowest.map_or((0.0, 0.0), |(latency, one)| (ms(*latency), ms(one.write)));
    // An attempt is recorded after it arrived (on PostgreSQL, some milliseconds later): wait
    // until each event's first one is.
    let deadline = Instant::now() + Duration::from_secs(60);
    let first = loop {
        let first = quiet_first_attempts(hosts)?;
        if quiet.iter().all(|(_, one)| first.contains_key(&one.key.0)) {
            break first;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the quiet store's attempts were not recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // From an event's write's start to its first attempt's start, in ms.
    let to_attempt_ms = |one: &QuietSent| {
        first
            .get(&one.key.0)
            .map(|started| started.duration_since(one.at).as_secs_f64() * 1e3)
            .ok_or_else(|| anyhow::anyhow!("no attempt recorded for {}", one.key.0))
    };
    let quiet_max_to_attempt_ms = match slowest {
        Some((_, one)) => to_attempt_ms(one)?,
        None => 0.0,
    };
    // The engine's part of each: from its write's end (flush included) to its first attempt's
    // start (none when the engine started it before the flush returned).
    let mut engine = Vec::with_capacity(quiet.len());
    for (_, one) in &quiet {
        let after_write = (to_attempt_ms(one)? - ms(one.write)).max(0.0);
        engine.push(Duration::from_secs_f64(after_write / 1e3));
    }
    engine.sort();
    let quiet_engine_ms = [50.0, 99.0, 100.0].map(|p| ms(percentile(&engine, p)));
    let quiet_slowest_write_ms = quiet
        .iter()
        .map(|(_, one)| ms(one.write))
        .fold(0.0, f64::max);
    let mut quiet: Vec<Duration> = quiet.into_iter().map(|(latency, _)| latency).collect();
    let total = quiet.iter().sum();
    let (_, quiet_p50_ms, quiet_p99_ms) = report(
        "  another store meanwhile, one at a time",
        quiet.len(),
        total,
        &mut quiet,
    );
    println!(
        "  another store meanwhile, the slowest   {quiet_max_ms:.2} ms \
         (its write, flush included, {quiet_max_write_ms:.2} ms; its first attempt started \
         {quiet_max_to_attempt_ms:.0} ms after its write began; the slowest write \
         {quiet_slowest_write_ms:.2} ms)"
    );
    println!(
        "  another store meanwhile, the engine's part (write's end -> first attempt's start, to the ms) \
         p50 {:.0} ms  p99 {:.0} ms  max {:.0} ms",
        quiet_engine_ms[0], quiet_engine_ms[1], quiet_engine_ms[2]
    );
    Ok(Burst {
        deliveries: events * subscriptions,
        per_s,
        cpu_us,
        p50_ms,
        p99_ms,
        quiet_p50_ms,
        quiet_p99_ms,
        quiet_max_ms,
        quiet_max_write_ms,
        quiet_slowest_write_ms,
        quiet_max_to_attempt_ms,
        quiet_engine_ms,
        commits,
    })
}

/// When each of the quiet store's events had its first attempt start, by its record (which keeps
/// the start to the millisecond), by event id.
fn quiet_first_attempts(hosts: &Hosts) -> anyhow::Result<HashMap<String, jiff::Timestamp>> {
    let prefix = attempts_prefix(&hosts.quiet.id, &hosts.quiet_target);
    let mut first: HashMap<String, jiff::Timestamp> = HashMap::new();
    for (_, attempt) in hosts.services[0]
        .db
        .list::<Attempt>(&prefix, None, false, 100_000)?
    {
        if attempt.retry == 0 {
            let at = first
                .entry(attempt.event_id.to_string())
                .or_insert(attempt.attempted_at);
            *at = (*at).min(attempt.attempted_at);
        }
    }
    Ok(first)
}

/// What a burst that did not finish left in the storage: the outbox entries and the queue's
/// webhook entries not taken yet, and the burst store's deliveries by status, with a few of
/// their failures (a delivery made but not yet written is counted in none).
fn what_is_left(hosts: &Hosts) -> anyhow::Result<String> {
    use commerce_host::model::delivery::Delivery;
    use commerce_host::model::event::OUTBOX_PREFIX;
    use commerce_host::model::work::WorkKind;
    let db = &hosts.services[0].db;
    let outbox = db.list_raw(OUTBOX_PREFIX, None, 1_000_000)?.len();
    let queued = db
        .list_raw(&WorkKind::Webhook.prefix(), None, 1_000_000)?
        .len();
    let mut statuses: std::collections::BTreeMap<String, usize> = Default::default();
    let mut failures = Vec::new();
    let prefix = format!("dlv/{}/", hosts.store.id);
    for (_, delivery) in db.list::<Delivery>(&prefix, None, false, 1_000_000)? {
        *statuses
            .entry(format!(
                "{:?} after {} attempts",
                delivery.status, delivery.attempts
            ))
            .or_default() += 1;
        if let Some(failure) = delivery.failure.filter(|_| failures.len() < 3) {
            failures.push(failure);
        }
    }
    Ok(format!(
        "left: {outbox} outbox entries, {queued} queued webhook attempts; the store's \
         deliveries: {statuses:?}; failures: {failures:?}"
    ))
}

async fn burst_of(
    hosts: &Hosts,
    arrivals: &Arrivals,
    events: usize,
    subscriptions: usize,
) -> anyhow::Result<(f64, f64, f64, f64, Option<CommitsDuring>)> {
    arrivals
        .burst
        .store(0, std::sync::atomic::Ordering::Relaxed);
    // The first host's commits (`None` where hosts share PostgreSQL, which does not count them).
    let commit_stats = || hosts.services[0].db.commit_stats();
    let commits_before = commit_stats();
    let start = Instant::now();
    let cpu_before = commerce_host_tests::bench::process_cpu();
    // One event after another, on a blocking thread as the host's HTTP handlers write: the
    // runtime's workers are the engine's and the receiver's meanwhile (and the quiet store's
    // events go on beside the burst's).
    let (services, store) = (hosts.services.clone(), hosts.store.reference());
    let fired: HashMap<String, Instant> = tokio::task::spawn_blocking(move || {
        let mut fired = HashMap::new();
        for n in 0..events {
            let event = emit_paid(&services[n % services.len()], &store, &format!("ord_{n}"))?;
            fired.insert(event.id.to_string(), Instant::now());
        }
        anyhow::Ok(fired)
    })
    .await??;
    let fire_elapsed = start.elapsed();
    let total = events * subscriptions;
    let wait: u64 = commerce_host_tests::bench::env_or("FANOUT_DEADLINE_SECS", 600);
    let deadline = Instant::now() + Duration::from_secs(wait);
    while arrivals.burst.load(std::sync::atomic::Ordering::Relaxed) < total {
        if Instant::now() >= deadline {
            let arrived = arrivals.burst.load(std::sync::atomic::Ordering::Relaxed);
            anyhow::bail!(
                "deliveries did not finish: {arrived} of {total} arrived in {wait} s; {}",
                what_is_left(hosts)?
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu = commerce_host_tests::bench::process_cpu().saturating_sub(cpu_before);
    let cpu_us = cpu.as_secs_f64() * 1e6 / (events * subscriptions) as f64;
    let commits = CommitsDuring::between(commits_before, commit_stats(), start.elapsed());
    let arrived = burst_arrivals(arrivals);
    // Until the last delivery arrived (not until this loop saw it).
    let elapsed = arrived
        .iter()
        .map(|(_, at)| *at)
        .max()
        .map_or_else(|| start.elapsed(), |last| last.duration_since(start));
    let mut latencies: Vec<Duration> = arrived
        .iter()
        .filter_map(|((event, _), at)| fired.get(event).map(|f| at.duration_since(*f)))
        .collect();
    arrivals
        .first
        .lock()
        .expect("lock")
        .retain(|(_, path), _| path == QUIET);
    println!(
        "  {events} events x {subscriptions} subscriptions = {total} signed deliveries, {} host(s); \
         events committed in {:.3} s = {:.0} events/s; all delivered after {:.3} s; \
         {cpu_us:.1} µs of CPU a delivery (the process: host, receiver, bench)",
        hosts.services.len(),
        fire_elapsed.as_secs_f64(),
        events as f64 / fire_elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
    );
    let (per_s, p50, p99) = report(
        "  engine burst (committed -> first attempt)",
        total,
        elapsed,
        &mut latencies,
    );
    if let Some(commits) = &commits {
        println!("{}", commits.line("a delivery", total));
    }
    Ok((per_s, p50, p99, cpu_us, commits))
}

/// What the bench sends: `events` × `subscriptions` deliveries at `concurrency`, and
/// `serial_count` events one at a time.
struct Sizes {
    events: usize,
    subscriptions: usize,
    concurrency: usize,
    serial_count: usize,
    /// Bursts before the measured one, not counted (`FANOUT_WARM_BURSTS`, 0).
    warm_bursts: usize,
}

/// One host on `db` (sled when `None`): events one at a time, then the burst. Sets their figures,
/// named with `suffix` at the end, and returns the burst's deliveries/s.
async fn one_host(
    db: Option<&str>,
    base: &str,
    arrivals: &Arrivals,
    sizes: &Sizes,
    figures: &mut commerce_host_tests::bench::Figures,
    suffix: &str,
) -> anyhow::Result<f64> {
    let hosts = Hosts::start(db, 1, base, sizes).await?;
    let (p50, p99) = serial(&hosts, arrivals, sizes.serial_count).await?;
    figures.set(&format!("first_attempt_p50_ms{suffix}"), p50);
    figures.set(&format!("first_attempt_p99_ms{suffix}"), p99);
    warm_up(&hosts, arrivals, sizes).await?;
    let burst = burst(&hosts, arrivals, sizes.events, sizes.subscriptions).await?;
    hosts.stop().await;
    set_burst(figures, &burst, suffix);
    Ok(burst.per_s)
}

/// The bursts not counted before the measured one (`FANOUT_WARM_BURSTS`), so that it meets a
/// host that has had a burst already: its memory grown to a burst's (as the plain loop, which runs
/// after the engine's phase, always finds it) and, on fjall, the earlier bursts' writes still to
/// flush from its memory table.
async fn warm_up(hosts: &Hosts, arrivals: &Arrivals, sizes: &Sizes) -> anyhow::Result<()> {
    for n in 1..=sizes.warm_bursts {
        println!(
            "  warm-up burst {n} of {} (not counted):",
            sizes.warm_bursts
        );
        burst_of(hosts, arrivals, sizes.events, sizes.subscriptions).await?;
    }
    Ok(())
}

/// Sets a burst's figures, named with `suffix` at the end.
fn set_burst(figures: &mut commerce_host_tests::bench::Figures, burst: &Burst, suffix: &str) {
    figures.set(&format!("engine_deliveries_per_s{suffix}"), burst.per_s);
    figures.set(&format!("engine_cpu_us_per_delivery{suffix}"), burst.cpu_us);
    figures.set(&format!("burst_first_attempt_p50_ms{suffix}"), burst.p50_ms);
    figures.set(&format!("burst_first_attempt_p99_ms{suffix}"), burst.p99_ms);
    figures.set(
        &format!("quiet_store_first_attempt_p50_ms{suffix}"),
        burst.quiet_p50_ms,
    );
    figures.set(
        &format!("quiet_store_first_attempt_p99_ms{suffix}"),
        burst.quiet_p99_ms,
    );
    figures.set(
        &format!("quiet_store_first_attempt_max_ms{suffix}"),
        burst.quiet_max_ms,
    );
    figures.set(
        &format!("quiet_store_slowest_event_write_ms{suffix}"),
        burst.quiet_max_write_ms,
    );
    figures.set(
        &format!("quiet_store_write_max_ms{suffix}"),
        burst.quiet_slowest_write_ms,
    );
    figures.set(
        &format!("quiet_store_slowest_event_to_attempt_ms{suffix}"),
        burst.quiet_max_to_attempt_ms,
    );
    for (name, value) in ["p50", "p99", "max"].iter().zip(burst.quiet_engine_ms) {
        figures.set(&format!("quiet_store_engine_{name}_ms{suffix}"), value);
    }
    if let Some(commits) = &burst.commits {
        figures.set(
            &format!("engine_store_commit_busy_percent{suffix}"),
            commits.busy_percent,
        );
        figures.set(
            &format!("engine_store_us_per_write{suffix}"),
            commits.us_per_write,
        );
        figures.set(
            &format!("engine_store_writes_per_delivery{suffix}"),
            commits.writes_per(burst.deliveries),
        );
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let events: usize = commerce_host_tests::bench::env_or("FANOUT_EVENTS", 200);
    let subscriptions: usize = commerce_host_tests::bench::env_or("FANOUT_SUBSCRIPTIONS", 50);
    let concurrency: usize = commerce_host_tests::bench::env_or("FANOUT_CONCURRENCY", 64);
    let serial_count: usize = commerce_host_tests::bench::env_or("FANOUT_SERIAL", 200);

    let arrivals = Arc::new(Arrivals::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    // `FANOUT_HOST=localhost` names the receiver by a host name (resolved by the system), as a
    // subscriber's URL would, instead of its address.
    let host = std::env::var("FANOUT_HOST").unwrap_or_else(|_| "127.0.0.1".to_owned());
    let base = format!("http://{host}:{}", listener.local_addr()?.port());
    let app = axum::Router::new()
        .fallback(receive)
        .with_state(arrivals.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut figures = commerce_host_tests::bench::Figures::default();

    // 1. The engine: a host on a temporary folder (sled, or fjall with
    // `COMMERCE_HOST_TEST_STORE=fjall`) with the wall clock.
    println!(
        "== {}, one host, concurrency {concurrency}",
        commerce_host_tests::test_store()
    );
    let sizes = Sizes {
        events,
        subscriptions,
        concurrency,
        serial_count,
        warm_bursts: commerce_host_tests::bench::env_or("FANOUT_WARM_BURSTS", 0),
    };
    let per_s = one_host(None, &base, &arrivals, &sizes, &mut figures, "").await?;

    // 2. The baseline: the same number of POSTs of the same size, same concurrency, plain reqwest.
    let total = events * subscriptions;
    let body = Bytes::from(vec![b'x'; 330]);
    let client = reqwest::Client::new();
    let semaphore = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let start = Instant::now();
    let cpu_before = commerce_host_tests::bench::process_cpu();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..total {
        let permit = semaphore.clone().acquire_owned().await?;
        let client = client.clone();
        let body = body.clone();
        let url = format!("{base}/baseline{}", i % subscriptions);
        tasks.spawn(async move {
            let sent = Instant::now();
            let ok = client
                .post(url)
                .header("x-service-event-id", format!("plain-{i}"))
                .body(body)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            drop(permit);
            (ok, sent.elapsed())
        });
    }
    let mut latencies = Vec::with_capacity(total);
    while let Some(done) = tasks.join_next().await {
        let (ok, latency) = done?;
        anyhow::ensure!(ok, "baseline request failed");
        latencies.push(latency);
    }
    let cpu = commerce_host_tests::bench::process_cpu().saturating_sub(cpu_before);
    arrivals.first.lock().expect("lock").clear();
    let (plain, _, _) = report(
        "  plain reqwest POST loop",
        total,
        start.elapsed(),
        &mut latencies,
    );
    figures.set("plain_posts_per_s", plain);
    let plain_cpu_us = cpu.as_secs_f64() * 1e6 / total as f64;
    figures.set("plain_cpu_us_per_post", plain_cpu_us);
    println!("  plain loop: {plain_cpu_us:.1} µs of CPU a POST (the process: client and receiver)");
    figures.set("engine_vs_plain_percent", 100.0 * per_s / plain);
    println!(
        "  engine deliveries/s = {:.0} % of the plain loop",
        100.0 * per_s / plain
    );

    // 3. PostgreSQL: one host, then two on one database.
    if let Some(server) = std::env::var("BENCH_DATABASE_URL")
        .ok()
        .filter(|u| !u.is_empty())
    {
        let fresh = || commerce_host::storage::postgres::fresh_database(&server);
        println!("\n== PostgreSQL, one host, concurrency {concurrency}");
        let db = fresh()?;
        let one = one_host(Some(&db), &base, &arrivals, &sizes, &mut figures, "_pg").await?;
        figures.set("engine_vs_plain_percent_pg", 100.0 * one / plain);

        println!("\n== PostgreSQL, two hosts on one database, concurrency {concurrency} each");
        let hosts = Hosts::start(Some(&fresh()?), 2, &base, &sizes).await?;
        warm_up(&hosts, &arrivals, &sizes).await?;
        let burst = burst(&hosts, &arrivals, events, subscriptions).await?;
        hosts.stop().await;
        let two = burst.per_s;
        set_burst(&mut figures, &burst, "_pg_2hosts");
        figures.set("scale_out_ratio_pg", two / one);
        println!(
            "  two hosts deliver {:.2}x one host's deliveries/s (one machine: they share its cores)",
            two / one
        );
    }
    figures.write("fanout")?;
    Ok(())
}
