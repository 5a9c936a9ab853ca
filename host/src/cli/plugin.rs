//! `commerce-host plugin …`: new, build, publish, install, logs, run. Everything but `new`,
//! `build` and `run` talks to a host over HTTP, so it works against a remote one as well.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::HostClient;
use super::package;

/// The plugin author's commands.
#[derive(Subcommand)]
pub enum PluginCommand {
    /// Create a plugin crate that builds as it is (manifest, a template, a handler, a test).
    New(NewArgs),
    /// Check plugin.toml and templates/, then build the component for wasm32-wasip2.
    Build(DirArgs),
    /// Upload the manifest, templates and component to the host.
    Publish(PublishArgs),
    /// Install a published plugin into a store; prints the installation id.
    Install(InstallArgs),
    /// The plugin's delivery attempts in a store, with the lines it logged.
    Logs(LogsArgs),
    /// Build, publish and install into a local host, then rebuild and republish on every saved
    /// change, printing the plugin's attempts and log lines as events arrive (Ctrl-C ends it).
    Dev(super::dev::DevArgs),
    /// Run a built component on one event against a throwaway store (no host needed): prints
    /// the event, every host call and its result, the logs, the notifications it would send, the
    /// records it wrote and the outcome. Exits non-zero when the plugin failed.
    Run(super::run::RunArgs),
}

/// Arguments of `plugin new`.
#[derive(Args)]
pub struct NewArgs {
    /// The plugin's name: lower-case letters, digits and `-`.
    pub name: String,
    /// Where to create it (default: ./NAME).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The guest SDK folder to depend on (default: this tool's repository's guest-sdk).
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// The plugin folder.
#[derive(Args)]
pub struct DirArgs {
    /// The plugin's folder (with Cargo.toml and plugin.toml).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
}

/// Which host to talk to.
#[derive(Args)]
pub struct HostArgs {
    /// The host's base URL.
    #[arg(long = "host", env = "COMMERCE_HOST_URL", default_value = super::client::DEFAULT_URL)]
    pub url: String,
    /// The operator's admin token (default: ./data/admin-token, as a local host writes it).
    #[arg(long, env = "COMMERCE_HOST_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

impl HostArgs {
    pub(super) fn client(&self) -> anyhow::Result<HostClient> {
        HostClient::from_args(Some(&self.url), self.admin_token.as_deref())
    }
}

/// Arguments of `plugin publish`.
#[derive(Args)]
pub struct PublishArgs {
    #[command(flatten)]
    dir: DirArgs,
    /// The component to upload (default: the one `plugin build` made; none for an external
    /// plugin, whose manifest names no `events`).
    #[arg(long)]
    component: Option<PathBuf>,
    #[command(flatten)]
    host: HostArgs,
}

/// Arguments of `plugin install`.
#[derive(Args)]
pub struct InstallArgs {
    /// The store (`store_…`).
    #[arg(long)]
    store: String,
    /// The published plugin's name (default: the name in ./plugin.toml).
    #[arg(long)]
    plugin: Option<String>,
    /// Print the installation's project token (shown by the host only this once).
    #[arg(long)]
    show_token: bool,
    #[command(flatten)]
    host: HostArgs,
}

/// Arguments of `plugin logs`.
#[derive(Args)]
pub struct LogsArgs {
    /// The store (`store_…`).
    #[arg(long)]
    store: String,
    /// The installation (`inst_…`).
    #[arg(long)]
    installation: String,
    /// How many attempts, newest first (1 to 250).
    #[arg(long, default_value_t = 20)]
    limit: u32,
    #[command(flatten)]
    host: HostArgs,
}

/// Runs a plugin command.
pub async fn run(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::New(args) => {
            let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
            let sdk = args.sdk.unwrap_or_else(super::scaffold::default_sdk);
            let dir = super::scaffold::new_plugin(&args.name, &dir, &sdk)?;
            println!("created {} in {}", args.name, dir.display());
            println!(
                "next: cd {} && cargo test (runs tests/plugin.rs through `commerce-host plugin run`), then commerce-host plugin build && commerce-host plugin publish",
                dir.display()
            );
        }
        PluginCommand::Build(args) => {
            let dir = args.dir;
            let built = tokio::task::spawn_blocking(move || package::build(&dir, None, true))
                .await
                .context("the build task")??;
            println!(
                "built {} ({} bytes; commerce:plugin@{}{})",
                built.path.display(),
                built.size,
                built.wit_version,
                built
                    .sdk_version
                    .map(|v| format!(", commerce-guest-sdk {v}"))
                    .unwrap_or_default()
            );
            if let Some(warning) = built.warning {
                eprintln!("warning: {warning}");
            }
        }
        PluginCommand::Dev(args) => super::dev::run(args).await?,
        PluginCommand::Publish(args) => {
            // A developer who logged in to this host publishes as themselves; the admin token,
            // when given, publishes as the operator.
            let key = match args.host.admin_token {
                Some(_) => None,
                None => super::credentials::key_for(&args.host.url),
            };
            let (client, path) = match key {
                Some(key) => (HostClient::new(&args.host.url, &key), "/dev/v1/plugins"),
                None => (args.host.client()?, "/admin/v1/plugins"),
            };
            // An external (HTTP-only) plugin receives no events as a component: it has none.
            let external = package::check(&args.dir.dir)?.manifest.events.is_empty();
            let component = match args.component {
                Some(path) => Some(path),
                None if external => None,
                None => Some(package::component_path(&args.dir.dir, None)?),
            };
            let published = publish_to(&client, path, &args.dir.dir, component.as_deref()).await?;
            println!(
                "published {}@{}",
                published["name"].as_str().unwrap_or("?"),
                published["version"].as_str().unwrap_or("?")
            );
        }
        PluginCommand::Install(args) => {
            let client = args.host.client()?;
            let plugin = match args.plugin {
                Some(name) => name,
                None => package::check(Path::new("."))?.manifest.name,
            };
            let installed = install(&client, &args.store, &plugin).await?;
            println!("{}", installed["id"].as_str().unwrap_or("?"));
            if args.show_token {
                println!("token: {}", installed["token"].as_str().unwrap_or("?"));
            } else {
                eprintln!(
                    "installed {plugin} into {}; its project token is not shown (pass --show-token; the host shows it only once)",
                    args.store
                );
            }
        }
        PluginCommand::Logs(args) => {
            let client = args.host.client()?;
            let attempts = attempts(&client, &args.store, &args.installation, args.limit).await?;
            print!("{}", format_attempts(&attempts));
        }
        PluginCommand::Run(mut args) => {
            args.replayed = super::run::fetch_replay(&args).await?;
            tokio::task::spawn_blocking(move || super::run::run(&args))
                .await
                .context("the run task")??;
        }
    }
    Ok(())
}

/// Checks the plugin in `dir` and uploads its manifest, templates and `component` (none for an
/// external HTTP plugin) to `POST /admin/v1/plugins`. Returns the published plugin.
pub async fn publish(
    client: &HostClient,
    dir: &Path,
    component: Option<&Path>,
) -> anyhow::Result<Value> {
    publish_to(client, "/admin/v1/plugins", dir, component).await
}

/// [`publish`] to `path`: the operator's `/admin/v1/plugins` or a developer's `/dev/v1/plugins`.
pub async fn publish_to(
    client: &HostClient,
    path: &str,
    dir: &Path,
    component: Option<&Path>,
) -> anyhow::Result<Value> {
    let package = package::check(dir)?;
    let mut body = json!({
        "manifest": package.manifest,
        "templates": package.templates,
    });
    if let Some(path) = component {
        let bytes = std::fs::read(path).map_err(|_| {
            anyhow!(
                "no component at {}: build it first with `commerce-host plugin build`",
                path.display()
            )
        })?;
        body["component"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    client.admin(Method::POST, path, Some(&body)).await
}

/// Installs the published `plugin` into `store`. The answer holds the id and the project token.
pub async fn install(client: &HostClient, store: &str, plugin: &str) -> anyhow::Result<Value> {
    client
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/installations"),
            Some(&json!({ "plugin": plugin })),
        )
        .await
}

/// The installation's component attempts, newest first.
pub async fn attempts(
    client: &HostClient,
    store: &str,
    installation: &str,
    limit: u32,
) -> anyhow::Result<Vec<Value>> {
    let page = client
        .admin(
            Method::GET,
            &format!(
                "/admin/v1/stores/{store}/installations/{installation}/attempts?limit={}",
                limit.clamp(1, 250)
            ),
            None,
        )
        .await?;
    Ok(page["data"].as_array().cloned().unwrap_or_default())
}

/// Attempts as text: one line per attempt (time, event, outcome), then its log lines.
pub fn format_attempts(attempts: &[Value]) -> String {
    use std::fmt::Write as _;
    if attempts.is_empty() {
        return "no attempts yet: the plugin has not received an event of its `events`\n"
            .to_owned();
    }
    let mut out = String::new();
    for attempt in attempts {
        let outcome = if attempt["succeeded"].as_bool() == Some(true) {
            "ok".to_owned()
        } else {
            format!(
                "failed: {}",
                attempt["error"].as_str().unwrap_or("(no reason given)")
            )
        };
        let _ = writeln!(
            out,
            "{}  {}  {}  {}  retry {}  {} ms  {}",
            attempt["attempted_at"].as_str().unwrap_or("?"),
            attempt["event_type"].as_str().unwrap_or("?"),
            attempt["event_id"].as_str().unwrap_or("?"),
            attempt["id"].as_str().unwrap_or("?"),
            attempt["retry"].as_u64().unwrap_or(0),
            attempt["duration_ms"].as_u64().unwrap_or(0),
            outcome
        );
        for line in attempt["logs"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "    [{}] {}",
                line["level"].as_str().unwrap_or("?"),
                line["message"].as_str().unwrap_or("")
            );
        }
    }
    out
}
