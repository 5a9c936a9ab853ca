//! commerce-host: a merchant-store platform that hosts plugins.
//!
//! The library is the whole host; the `commerce-host` binary is a thin command line over
//! [`Host`]. Tests call [`run`] with a listener on port 0 and their own [`Config`] (a manual clock,
//! a temporary data folder).

/// The allocator the `commerce-host` binary runs with (`#[global_allocator]` in its `main`, and
/// in the benches): jemalloc rather than the system's. The engine and the API allocate many
/// small, short-lived buffers from several threads, where glibc's malloc took a tenth of a busy
/// host's time (the fan-out bench: 8,900–9,800 → 12,300–13,200 deliveries/s; `GET
/// /v1/orders/{id}` 65 → 40–47 µs of CPU per request), at about the same memory (84–87 MiB with
/// 1,000 plugins; mimalloc, as fast, kept 180 MiB).
pub use tikv_jemallocator::Jemalloc as Allocator;

pub mod cli;
pub mod config;
pub mod delivery;
pub mod http;
pub mod metrics;
pub mod model;
pub mod plugins;
pub mod service;
pub mod storage;
pub mod telemetry;

use std::future::Future;

use anyhow::Context as _;
use tokio::net::TcpListener;

pub use config::Config;
pub use model::error::Error;
pub use service::Service;

/// Opens the data folder and builds the service layer.
pub fn open_service(config: &Config) -> anyhow::Result<Service> {
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating {}", config.data_dir.display()))?;
    let admin_token = config.resolve_admin_token()?;
    let db = match &config.database_url {
        Some(url) => {
            storage::Db::open_postgres(url, config.database_pool_size, config.durable_writes)
        }
        None => storage::Db::open_embedded(
            config.store,
            &config.data_dir,
            config.durable_writes,
            config.store_cache_mib,
        ),
    }
    .map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let options = service::Options {
        allow_networks: config.webhook_allow_networks.clone(),
        plugin_limits: config.plugin_limits.clone(),
        mail_route: if config.smtp_url.is_some() {
            service::mail::MailRoute::Smtp
        } else {
            service::mail::MailRoute::Outbox
        },
        auth_failures: config.auth_failures,
        public_url: config.public_url.clone().unwrap_or_default(),
        host_id: config.resolve_host_id()?,
        claim_lease: config.claim_lease,
    };
    service::Service::with_options(db, config.clock.clone(), &admin_token, options)
        .map_err(|e| anyhow::anyhow!("{e:#}"))
}

/// Serves the host on `listener` and runs the delivery engine until `shutdown` completes, then
/// finishes in-flight requests and delivery attempts, flushes storage and returns:
/// [`Host::start`], then [`Host::serve`].
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    Host::start(config, listener)?.serve(shutdown).await
}

/// A host whose storage is open, whose plugins are loaded and whose delivery engine runs, about
/// to serve HTTP on its listener. `commerce-host serve` prints its listening line between
/// [`Host::start`] and [`Host::serve`], so a supervisor that waits for the line finds the host
/// ready, and a host that cannot open its storage (another process holds the data folder) fails
/// without having announced itself. (The socket is bound before: connections that come meanwhile
/// wait in its backlog.) Started, it is meant to be served: its engine and housekeeping run from
/// [`Host::start`] on, and only [`Host::serve`] stops them.
pub struct Host {
    config: Config,
    listener: TcpListener,
    service: Service,
    engine: delivery::Engine,
    maintenance: tokio::task::JoinHandle<()>,
    stop_maintenance: tokio::sync::watch::Sender<bool>,
    app: axum::Router,
}

impl Host {
    /// Opens the storage and the plugins' runtime, and starts the delivery engine and the
    /// housekeeping. Runs on a Tokio runtime (the engine's tasks are spawned on it).
    pub fn start(config: Config, listener: TcpListener) -> anyhow::Result<Host> {
        let mut config = config;
        if config.public_url.is_none() {
            config.public_url = Some(format!("http://{}", listener.local_addr()?));
        }
        let service = open_service(&config)?;
        let plugins = std::sync::Arc::new(plugins::Plugins::new(
            &config.data_dir.join("components"),
            config.plugin_runtime.clone(),
        )?);
        let engine = delivery::Engine::start(
            service.clone(),
            delivery::EngineConfig::from(&config),
            Some(plugins.clone()),
        )
        .map_err(|e| anyhow::anyhow!("{e:#}"))?;
        // Spawned once nothing can fail any more: a failed start leaves no housekeeping behind.
        let (stop_maintenance, stop_rx) = tokio::sync::watch::channel(false);
        let maintenance = tokio::spawn(maintenance_loop(
            service.clone(),
            config.maintenance_interval,
            stop_rx,
        ));
        let app = http::router(http::AppState::new(http::AppParts {
            service: service.clone(),
            plugins,
            engine_alive: engine.alive(),
        }));
        Ok(Host {
            config,
            listener,
            service,
            engine,
            maintenance,
            stop_maintenance,
            app,
        })
    }

    /// Serves until `shutdown` completes, then finishes in-flight requests and delivery attempts
    /// (within the configured grace), flushes storage and returns.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Host {
            config,
            listener,
            service,
            engine,
            mut maintenance,
            stop_maintenance,
            app,
        } = self;
        tracing::info!(addr = %listener.local_addr()?, data = %config.data_dir.display(), "commerce-host listening");
        // Shutdown is bounded: from the signal on, everything in flight gets `shutdown_grace` in
        // all.
        let (signalled_tx, mut signalled) = tokio::sync::watch::channel(false);
        let shutdown = async move {
            shutdown.await;
            let _ = signalled_tx.send(true);
        };
        let served = tokio::select! {
            served = http::serve::serve(listener, app, shutdown) => served.context("serving HTTP"),
            () = async {
                let _ = signalled.wait_for(|s| *s).await;
                tokio::time::sleep(config.shutdown_grace).await;
            } => {
                tracing::warn!("shutdown: requests still in flight after the grace period were dropped");
                Ok(())
            }
        };
        let deadline = tokio::time::Instant::now() + config.shutdown_grace;
        let _ = stop_maintenance.send(true);
        engine.stop(deadline).await;
        if tokio::time::timeout_at(deadline, &mut maintenance)
            .await
            .is_err()
        {
            tracing::warn!(
                "shutdown: housekeeping still running after the grace period was dropped"
            );
            maintenance.abort();
        }
        served?;
        service.db.flush().map_err(|e| anyhow::anyhow!("{e:#}"))?;
        tracing::info!("commerce-host stopped");
        Ok(())
    }
}

/// Runs housekeeping every `interval` until told to stop.
async fn maintenance_loop(
    service: Service,
    interval: std::time::Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(interval) => {}
        }
        let svc = service.clone();
        let now = service.now();
        match tokio::task::spawn_blocking(move || svc.purge_expired(now)).await {
            Ok(Ok(purged)) if purged != service::maintenance::Purged::default() => {
                tracing::info!(?purged, "purged expired records");
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "housekeeping failed"),
            Err(e) => tracing::error!(error = %e, "housekeeping panicked"),
        }
    }
}
