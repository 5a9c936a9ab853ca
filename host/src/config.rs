//! Host configuration: flags and `COMMERCE_HOST_*` environment variables, with defaults that work.

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
    /// Flush storage on every write transaction (an acknowledged write survives `kill -9`).
    pub durable_writes: bool,
    /// How often (real time) housekeeping runs: retention purges compare against `clock`.
    pub maintenance_interval: std::time::Duration,
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
            durable_writes: true,
            maintenance_interval: std::time::Duration::from_secs(60),
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

/// Where a generated admin token is kept.
pub fn admin_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin-token")
}

#[cfg(unix)]
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
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
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    std::fs::write(path, contents)
}
