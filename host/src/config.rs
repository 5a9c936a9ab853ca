//! Host configuration: flags and `COMMERCE_HOST_*` environment variables, with defaults that work.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rand::RngCore;

use crate::clock::{SharedClock, SystemClock};

/// Everything `run` needs besides the listener.
#[derive(Debug, Clone)]
pub struct Config {
    /// Folder of the sled database and the generated admin token.
    pub data_dir: PathBuf,
    /// The operator's admin token; generated into `<data>/admin-token` when absent.
    pub admin_token: Option<String>,
    /// Time source (tests inject a manual clock).
    pub clock: SharedClock,
    /// The component runtime's engine-wide settings (instance pool, stack, epoch tick).
    pub plugin_runtime: crate::plugins::RuntimeConfig,
    /// Per-invocation limits of components: defaults and the maxima a manifest may ask for.
    pub plugin_limits: crate::plugins::LimitPolicy,
    /// Flush storage on every write transaction (an acknowledged write survives `kill -9`).
    pub durable_writes: bool,
    /// How often (real time) housekeeping runs: retention purges compare against `clock`.
    pub maintenance_interval: std::time::Duration,
    /// How long a shutdown waits for in-flight requests, delivery attempts and messages before it
    /// gives up on them (a delivery that was not recorded is attempted again after the restart).
    pub shutdown_grace: Duration,
    /// Networks a webhook URL may resolve into although they are not public (loopback, private,
    /// link-local, …). Empty by default: only public addresses receive webhooks.
    pub webhook_allow_networks: Vec<ipnet::IpNet>,
    /// How long a webhook receiver has to answer with a 2xx (the spec's 10 s).
    pub webhook_timeout: Duration,
    /// Deliveries in flight at once, across all targets.
    pub delivery_concurrency: usize,
    /// How often the delivery engine looks for retries that came due (new events and replays
    /// wake it at once).
    pub delivery_poll_interval: Duration,
    /// SMTP server for the host's own mail (`smtp://host:25`, `smtps://user:pass@host`,
    /// `smtp://host:587?tls=required`); without one, mail goes to the operator's outbox.
    pub smtp_url: Option<String>,
    /// The sender of the host's own mail.
    pub mail_from: String,
    /// How often (real time) the message worker looks for retries that came due on `clock`; it
    /// also wakes at once whenever a message is queued.
    pub message_poll_interval: std::time::Duration,
}

impl Config {
    /// Defaults: data in `dir`, wall clock, durable writes.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            admin_token: None,
            clock: Arc::new(SystemClock),
            plugin_runtime: crate::plugins::RuntimeConfig::default(),
            plugin_limits: crate::plugins::LimitPolicy::default(),
            durable_writes: true,
            maintenance_interval: std::time::Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            webhook_allow_networks: Vec::new(),
            webhook_timeout: Duration::from_secs(10),
            delivery_concurrency: 64,
            delivery_poll_interval: Duration::from_millis(500),
            smtp_url: None,
            mail_from: "commerce-host <noreply@commerce-host.invalid>".to_owned(),
            message_poll_interval: std::time::Duration::from_millis(250),
        }
    }

    /// The admin token: the configured one, or the one in `<data>/admin-token`, created (mode
    /// 0600) on first start.
    pub fn resolve_admin_token(&self) -> anyhow::Result<String> {
        if let Some(token) = &self.admin_token {
            anyhow::ensure!(
                token.len() >= 16,
                "the admin token must be at least 16 characters"
            );
            return Ok(token.clone());
        }
        let path = admin_token_path(&self.data_dir);
        if let Ok(token) = std::fs::read_to_string(&path) {
            return Ok(token.trim().to_owned());
        }
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating {}", self.data_dir.display()))?;
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token = format!("cha_{}", hex::encode(bytes));
        write_private(&path, &token).with_context(|| format!("writing {}", path.display()))?;
        Ok(token)
    }
}

/// Parses a comma-separated list of networks (`127.0.0.0/8, 10.1.2.3, ::1/128`); a bare address
/// is a network of one.
pub fn parse_networks(list: &str) -> anyhow::Result<Vec<ipnet::IpNet>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .with_context(|| format!("`{s}` is not a network (CIDR) or an address"))
        })
        .collect()
}

/// Where a generated admin token is kept.
pub fn admin_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin-token")
}

#[cfg(unix)]
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(contents.as_bytes())
}

#[cfg(not(unix))]
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)
}
