//! The `commerce-host` command line, as a library function so that the tests can build the very
//! same binary (`test-commerce-host`) and kill it with `kill -9`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::Config;

pub mod client;
pub mod credentials;
pub mod demo;
pub mod dev;
pub mod export;
pub mod package;
pub mod plugin;
pub mod run;
pub mod scaffold;
pub mod telemetry;

#[derive(Parser)]
#[command(
    name = "commerce-host",
    version,
    about = "A merchant-store platform that hosts plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log lines as plain text (`text`) or one JSON object per line (`json`).
    #[arg(long, global = true, env = "COMMERCE_HOST_LOG_FORMAT", value_enum, default_value_t = telemetry::LogFormat::Text)]
    log_format: telemetry::LogFormat,
    /// Export traces (requests, events, delivery attempts, component invocations) over OTLP/HTTP
    /// to this collector, e.g. `http://127.0.0.1:4318` (spans go to `/v1/traces` under it).
    #[arg(long, global = true, env = "COMMERCE_HOST_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the /v1 API and the operator API, and deliver webhooks.
    Serve(ServeArgs),
    /// Build, publish, install and follow plugins (talks to a host over HTTP), or run one
    /// locally against a throwaway store (`plugin run`).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Serve with a demo store, sample data and the example plugins built and installed.
    Demo(DemoArgs),
    /// Store a developer's API key for a host: `plugin publish` then publishes as that
    /// developer, without the admin token.
    Login(credentials::LoginArgs),
    /// Write every record of a host's storage (the data folder's sled or fjall store, or
    /// PostgreSQL with --database-url) as a dump, components included, to move it to another
    /// backend. Stop the host first.
    Export(export::ExportArgs),
    /// Load a dump made by `export` into an empty storage (a new data folder, or a new
    /// PostgreSQL database with --database-url).
    Import(export::ImportArgs),
}

#[derive(clap::Args)]
struct DemoArgs {
    /// Address to listen on.
    #[arg(long, env = "COMMERCE_HOST_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Data folder (database, admin token, the demo's shop token).
    #[arg(long, env = "COMMERCE_HOST_DATA", default_value = "./data")]
    data: PathBuf,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0: any free port, printed on start).
    #[arg(long, env = "COMMERCE_HOST_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Data folder (database, generated admin token, compiled plugins).
    #[arg(long, env = "COMMERCE_HOST_DATA", default_value = "./data")]
    data: PathBuf,
    /// PostgreSQL instead of the embedded database (`postgres://user@host:port/db`): several
    /// hosts may share it. The schema is created or migrated at start.
    #[arg(long, env = "COMMERCE_HOST_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The embedded database in the data folder, where no PostgreSQL is given: `sled`
    /// (`<data>/db`) or `fjall` (`<data>/fjall`, less CPU a write). A folder keeps the one it
    /// was made with.
    #[arg(long, env = "COMMERCE_HOST_STORE", default_value = "sled")]
    store: crate::storage::Embedded,
    /// MiB of memory the embedded database keeps of its records (sled's cache of its pages,
    /// fjall's of its tables' blocks); reads beyond it go to its files. The largest share of the
    /// store's memory, not a bound on it: fjall's memory tables (up to 64 MiB) and sled's entry
    /// for each page of its tree come on top.
    #[arg(
        long,
        env = "COMMERCE_HOST_STORE_CACHE_MIB",
        default_value_t = crate::storage::DEFAULT_STORE_CACHE_MIB,
        value_parser = clap::value_parser!(u64).range(crate::storage::STORE_CACHE_MIB)
    )]
    store_cache_mib: u64,
    /// Connections to PostgreSQL at most.
    #[arg(long, env = "COMMERCE_HOST_DATABASE_POOL_SIZE", default_value_t = 16)]
    database_pool_size: u32,
    /// Operator admin token; generated into <data>/admin-token when not set.
    #[arg(long, env = "COMMERCE_HOST_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// Non-public networks webhooks may be delivered to, comma-separated CIDRs
    /// (`127.0.0.0/8,10.0.0.0/8`). By default only public addresses are.
    #[arg(long, env = "COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS", default_value = "")]
    webhook_allow_networks: String,
    /// Milliseconds a webhook receiver has to answer (the spec's 10 s; lower it only for tests).
    #[arg(
        long,
        env = "COMMERCE_HOST_WEBHOOK_TIMEOUT_MS",
        default_value_t = 10_000
    )]
    webhook_timeout_ms: u64,
    /// Deliveries in flight at once.
    #[arg(long, env = "COMMERCE_HOST_DELIVERY_CONCURRENCY", default_value_t = 64)]
    delivery_concurrency: usize,
    /// SMTP server for the host's own mail (pause notices): `smtp://host:25`,
    /// `smtps://user:pass@host`, `smtp://host:587?tls=required`. Without it, mail is kept in
    /// the operator's outbox (`GET /admin/v1/mail`).
    #[arg(long, env = "COMMERCE_HOST_SMTP_URL", hide_env_values = true)]
    smtp_url: Option<String>,
    /// Sender of the host's own mail.
    #[arg(long, env = "COMMERCE_HOST_MAIL_FROM")]
    mail_from: Option<String>,
    /// The host's address as people reach it (`https://host.example`): links in invitation
    /// mails start with it, and sign-in cookies are `Secure` when it is `https://`. Default:
    /// `http://` and the listening address.
    #[arg(long, env = "COMMERCE_HOST_PUBLIC_URL")]
    public_url: Option<String>,
    /// Distinct plugin components kept loaded at most (plugins with identical compiled bytes
    /// share one); the least recently used are let go and loaded again on their next event.
    #[arg(
        long,
        env = "COMMERCE_HOST_MAX_LOADED_COMPONENTS",
        default_value_t = crate::plugins::RuntimeConfig::default().max_loaded_components
    )]
    max_loaded_components: usize,
    /// Requests that fail authentication a client address may make at once; past that (and
    /// until it refills at `--auth-failure-per-second`) its requests are refused with 429.
    #[arg(
        long,
        env = "COMMERCE_HOST_AUTH_FAILURE_BURST",
        default_value_t = crate::service::ratelimit::AUTH_FAILURE_BURST
    )]
    auth_failure_burst: u32,
    /// Failed authentications per second a client address may make, sustained.
    #[arg(
        long,
        env = "COMMERCE_HOST_AUTH_FAILURE_PER_SECOND",
        default_value_t = crate::service::ratelimit::AUTH_FAILURE_PER_SECOND
    )]
    auth_failure_per_second: u32,
    /// Where hosts share a database: milliseconds a host's claim on a delivery or mail holds
    /// before another host takes the work over (after the claiming host died). Longer than a
    /// webhook's timeout and a component's wall-clock limit.
    #[arg(long, env = "COMMERCE_HOST_CLAIM_LEASE_MS", default_value_t = 120_000)]
    claim_lease_ms: u64,
}

/// Parses the command line and runs the command.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let traces = telemetry::init(
        cli.log_format,
        cli.otlp_endpoint
            .as_deref()
            .filter(|e| !e.trim().is_empty()),
    )?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let result = match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::Plugin(command) => runtime.block_on(plugin::run(command)),
        Command::Demo(args) => runtime.block_on(run_demo(args)),
        Command::Login(args) => runtime.block_on(async {
            let path = credentials::login(&args).await?;
            println!("key stored in {}", path.display());
            Ok(())
        }),
        Command::Export(args) => export::export_command(&args),
        Command::Import(args) => export::import_command(&args),
    };
    // Storage is flushed by now; a component still running past the grace period (each is bounded
    // by its own deadline anyway) does not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // The spans still in the exporter's batch go out before the process ends.
    if let Some(traces) = traces {
        traces.shutdown();
    }
    result
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = Config::new(&args.data);
    config.admin_token = args.admin_token;
    config.webhook_allow_networks = crate::config::parse_networks(&args.webhook_allow_networks)
        .context("COMMERCE_HOST_WEBHOOK_ALLOW_NETWORKS")?;
    config.webhook_timeout = std::time::Duration::from_millis(args.webhook_timeout_ms.max(1));
    config.delivery_concurrency = args.delivery_concurrency.max(1);
    config.plugin_runtime.max_loaded_components = args.max_loaded_components.max(1);
    config.auth_failures = crate::service::ratelimit::AuthFailureLimits {
        burst: args.auth_failure_burst,
        per_second: args.auth_failure_per_second.max(1),
    };
    config.smtp_url = args.smtp_url.filter(|u| !u.trim().is_empty());
    if let Some(from) = args.mail_from {
        config.mail_from = from;
    }
    config.public_url = args.public_url.filter(|u| !u.trim().is_empty());
    config.database_url = args.database_url.filter(|u| !u.trim().is_empty());
    config.store = args.store;
    config.store_cache_mib = args.store_cache_mib;
    config.database_pool_size = args.database_pool_size;
    config.claim_lease = std::time::Duration::from_millis(args.claim_lease_ms.max(1));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let admin_token_from_file = config.admin_token.is_none();
    let host = crate::Host::start(config, listener)?;
    // A plain line on stdout, so that a supervisor (or a test) started on port 0 learns the port;
    // printed once the storage is open and the engine runs, so that the host it names is ready.
    println!("commerce-host listening on http://{addr}");
    if admin_token_from_file {
        eprintln!(
            "admin token: {}",
            crate::config::admin_token_path(&args.data).display()
        );
    }
    host.serve(shutdown_signal()).await
}

async fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    // The example plugins build beside the workspace's own target folder (where the tests build
    // them too), so that a second demo, or the tests, rebuild nothing.
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("example-plugins"),
        None => demo::examples_dir().join("target"),
    };
    eprintln!("building the example plugins into {} …", target.display());
    let components = tokio::task::spawn_blocking(move || demo::build_examples(&target, false))
        .await
        .context("the build task")??;
    let config = Config::new(&args.data);
    let admin_token = config.resolve_admin_token()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {} (is a host already running there?)", args.listen))?;
    let base = format!("http://{}", listener.local_addr()?);
    let mut host = tokio::spawn(crate::run(config, listener, shutdown_signal()));
    let client = client::HostClient::new(&base, &admin_token);
    let seeded = async {
        wait_ready(&base).await?;
        demo::seed(&client, &components, &args.data.join("demo-shop-token")).await
    };
    let demo = tokio::select! {
        seeded = seeded => seeded?,
        ended = &mut host => {
            return ended.context("the host task")?.and(Err(anyhow::anyhow!("the host stopped before the demo was ready")));
        }
    };
    println!("commerce-host demo listening on {base}");
    println!(
        "{}",
        demo::next_steps(
            &base,
            &crate::config::admin_token_path(&args.data),
            &std::env::current_exe().unwrap_or_else(|_| "commerce-host".into()),
            &demo
        )
    );
    host.await.context("the host task")?
}

/// Waits until the host answers `/healthz` (a few seconds at most).
async fn wait_ready(base: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    for _ in 0..200 {
        if http
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    anyhow::bail!("the host at {base} did not become ready")
}

/// Completes on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::Cli;

    /// Every `commerce-host …` command the README of `plugin new` gives, in its code block or in
    /// its text, parses as written (its placeholders filled in): a renamed flag or subcommand
    /// fails here, not in a plugin author's shell.
    #[test]
    fn the_commands_a_new_plugins_readme_gives_parse() {
        let readme = super::scaffold::readme("gift-note");
        let commands: Vec<String> = readme
            .lines()
            .flat_map(|line| line.split('`'))
            .map(|part| part.split(" # ").next().unwrap_or_default().trim())
            .filter(|part| part.starts_with("commerce-host "))
            .map(|command| {
                command
                    .replace("STORE_ID", "store_x")
                    .replace("INST_ID", "inst_x")
                    .replace("URL", "http://127.0.0.1:8080")
                    .replace("chk_…", "chk_x")
            })
            .collect();
        // The code block's four, then `login` and `plugin dev` in the text.
        assert_eq!(commands.len(), 6, "{commands:#?}");
        for command in &commands {
            let words = command.split_whitespace();
            if let Err(e) = Cli::try_parse_from(words) {
                panic!("{command}: {e}");
            }
        }
    }
}
