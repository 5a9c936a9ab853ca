//! The `commerce-host` command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use commerce_host::Config;

#[derive(Parser)]
#[command(
    name = "commerce-host",
    version,
    about = "A merchant-store platform that hosts plugins"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the /v1 API and the operator API.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "COMMERCE_HOST_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Data folder (database, generated admin token, compiled plugins).
    #[arg(long, env = "COMMERCE_HOST_DATA", default_value = "./data")]
    data: PathBuf,
    /// Operator admin token; generated into <data>/admin-token when not set.
    #[arg(long, env = "COMMERCE_HOST_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("COMMERCE_HOST_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut config = Config::new(&args.data);
    config.admin_token = args.admin_token;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    if config.admin_token.is_none() {
        eprintln!(
            "admin token: {}",
            commerce_host::config::admin_token_path(&args.data).display()
        );
    }
    commerce_host::run(config, listener, shutdown_signal()).await
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
