//! Host configuration: flags and `COMMERCE_HOST_*` environment variables, with defaults that work.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rand::RngCore;

use crate::model::clock::{SharedClock, SystemClock};

/// Everything `run` needs besides the listener.
#[derive(Debug, Clone)]
pub struct Config {
    /// Folder of the embedded database and the generated admin token.
    pub data_dir: PathBuf,
    /// The operator's admin token; generated into `<data>/admin-token` when absent.
    pub admin_token: Option<String>,
    /// Time source (tests inject a manual clock).
    pub clock: SharedClock,
    /// The component runtime's engine-wide settings (instance pool, stack, epoch tick).
    pub plugin_runtime: crate::plugins::RuntimeConfig,
    /// Per-invocation limits of components: defaults and the maxima a manifest may ask for.
    pub plugin_limits: crate::service::limits::LimitPolicy,
    /// Flush storage on every write transaction (an acknowledged write survives `kill -9`).
    pub durable_writes: bool,
    /// The embedded store in the data folder, where `database_url` is not given.
    pub store: crate::storage::Embedded,
    /// The memory the embedded store keeps of its records, in MiB (see
    /// [`DEFAULT_STORE_CACHE_MIB`](crate::storage::DEFAULT_STORE_CACHE_MIB)).
    pub store_cache_mib: u64,
    /// PostgreSQL instead of the embedded store: `postgres://user@host:port/db`.
    pub database_url: Option<String>,
    /// Connections to PostgreSQL at most.
    pub database_pool_size: u32,
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
    /// How often (real time) the delivery engine looks for message retries that came due on
    /// `clock` at the latest (it polls at the shorter of this and `delivery_poll_interval`); it
    /// also wakes at once whenever a message is queued.
    pub message_poll_interval: std::time::Duration,
    /// How many failed authentications a client address may make (at once, and per second).
    pub auth_failures: crate::service::ratelimit::AuthFailureLimits,
    /// The host's address as people reach it (links in invitation mails; `Secure` cookies when
    /// it is `https://`). Default: `http://` and the address it listens on.
    pub public_url: Option<String>,
    /// Where hosts share a database: how long a host's claim on a delivery or mail holds before
    /// another host takes the work over (the claiming host died).
    pub claim_lease: Duration,
}

impl Config {
    /// Defaults: data in `dir`, wall clock, durable writes.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            admin_token: None,
            clock: Arc::new(SystemClock),
            plugin_runtime: crate::plugins::RuntimeConfig::default(),
            plugin_limits: crate::service::limits::LimitPolicy::default(),
            durable_writes: true,
            store: crate::storage::Embedded::Sled,
            store_cache_mib: crate::storage::DEFAULT_STORE_CACHE_MIB,
            database_url: None,
            database_pool_size: 16,
            maintenance_interval: std::time::Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            webhook_allow_networks: Vec::new(),
            webhook_timeout: Duration::from_secs(10),
            delivery_concurrency: 64,
            delivery_poll_interval: Duration::from_millis(500),
            smtp_url: None,
            mail_from: "commerce-host <noreply@commerce-host.invalid>".to_owned(),
            message_poll_interval: std::time::Duration::from_millis(250),
            auth_failures: crate::service::ratelimit::AuthFailureLimits::default(),
            public_url: None,
            claim_lease: crate::service::deliveries::queue::CLAIM_LEASE,
        }
    }

    /// This host's id, the same across its restarts: the one in `<data>/host-id`, created on
    /// first start. It names the host's claims on work where hosts share a database, so that
    /// the host restarted takes its own claims back at once.
    pub fn resolve_host_id(&self) -> anyhow::Result<String> {
        let path = self.data_dir.join("host-id");
        match std::fs::read_to_string(&path) {
            Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        let mut bytes = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut bytes);
        let id = format!("host_{}", hex::encode(bytes));
        write_private(&path, &id).with_context(|| format!("writing {}", path.display()))?;
        Ok(id)
    }

    /// The admin token: the configured one, or the one in `<data>/admin-token`, created (mode
    /// 0600) on first start. The file is written whole or not at all (a temporary file, synced,
    /// then moved into place), and a file that is empty or malformed (an earlier write that did
    /// not finish, an edit gone wrong) is replaced by a fresh token, with a warning in the log.
    pub fn resolve_admin_token(&self) -> anyhow::Result<String> {
        if let Some(token) = &self.admin_token {
            anyhow::ensure!(
                valid_admin_token(token),
                "the admin token must be at least {MIN_ADMIN_TOKEN_LEN} visible ASCII characters"
            );
            return Ok(token.clone());
        }
        let path = admin_token_path(&self.data_dir);
        let replace = match std::fs::read(&path) {
            Ok(contents) => match std::str::from_utf8(&contents).map(str::trim) {
                Ok(token) if valid_admin_token(token) => return Ok(token.to_owned()),
                _ => {
                    tracing::warn!(
                        path = %path.display(),
                        "the admin token file is empty or malformed; writing a new admin token"
                    );
                    true
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        std::fs::create_dir_all(&self.data_dir)
            .with_context(|| format!("creating {}", self.data_dir.display()))?;
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token = format!("cha_{}", hex::encode(bytes));
        match write_private_file(&path, &token, replace) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "generated a new admin token");
                Ok(token)
            }
            // Another process created it meanwhile: its token is the one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let token = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let token = token.trim();
                anyhow::ensure!(
                    valid_admin_token(token),
                    "{} was written meanwhile with a malformed token",
                    path.display()
                );
                Ok(token.to_owned())
            }
            Err(e) => Err(e).with_context(|| format!("writing {}", path.display())),
        }
    }
}

/// The shortest admin token accepted.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;

/// An admin token is at least 16 visible ASCII characters.
fn valid_admin_token(token: &str) -> bool {
    token.len() >= MIN_ADMIN_TOKEN_LEN && token.bytes().all(|b| b.is_ascii_graphic())
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

/// Writes `contents` to `path` readable only by its owner, replacing what is there.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    write_private_file(path, contents, true)
}

/// Writes `contents` to `path` whole or not at all: into a temporary file in the same folder
/// (mode 0600 on Unix), synced to disk, then moved into place and the folder synced. Without
/// `replace`, an existing `path` is kept and the error is `AlreadyExists`.
pub(crate) fn write_private_file(
    path: &Path,
    contents: &str,
    replace: bool,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut suffix = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut suffix);
    let temp = dir.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
    let written = (|| {
        let mut file = create_private(&temp)?;
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        drop(file);
        if replace {
            std::fs::rename(&temp, path)
        } else {
            // A hard link never replaces an existing file.
            std::fs::hard_link(&temp, path)?;
            std::fs::remove_file(&temp)
        }
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    sync_dir(dir);
    Ok(())
}

#[cfg(unix)]
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn create_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

/// Makes a rename in `dir` durable (best effort: not every platform can open a folder).
fn sync_dir(dir: &Path) {
    if let Ok(dir) = std::fs::File::open(dir) {
        let _ = dir.sync_all();
    }
}

impl From<&Config> for crate::delivery::EngineConfig {
    fn from(config: &Config) -> Self {
        Self {
            concurrency: config.delivery_concurrency.max(1),
            component_concurrency: config.plugin_runtime.max_concurrent_instances.max(1) as usize,
            poll_interval: config
                .delivery_poll_interval
                .min(config.message_poll_interval),
            webhook_timeout: config.webhook_timeout,
            smtp_url: config.smtp_url.clone(),
            mail_from: config.mail_from.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path) -> Config {
        Config::new(dir)
    }

    fn assert_fresh_token(dir: &Path, token: &str) {
        assert!(token.starts_with("cha_") && token.len() == 68, "{token}");
        let path = admin_token_path(dir);
        assert_eq!(std::fs::read_to_string(&path).expect("file"), token);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let names: Vec<_> = std::fs::read_dir(dir)
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from("admin-token")],
            "no temporary files left"
        );
    }

    #[test]
    fn a_first_start_writes_a_private_token_that_later_starts_read() {
        let dir = tempfile::tempdir().expect("dir");
        let token = config(dir.path()).resolve_admin_token().expect("token");
        assert_fresh_token(dir.path(), &token);
        assert_eq!(
            config(dir.path()).resolve_admin_token().expect("again"),
            token
        );
    }

    #[test]
    fn an_empty_or_malformed_token_file_is_replaced_with_a_fresh_token() {
        let cases: [&[u8]; 6] = [
            b"",
            b"\n",
            b"   \n",
            b"short",
            b"has a space inside it",
            b"\xff\xfe not utf-8 at all",
        ];
        for contents in cases {
            let dir = tempfile::tempdir().expect("dir");
            // What a crash between creating the file and writing it leaves behind.
            std::fs::write(admin_token_path(dir.path()), contents).expect("write");
            let token = config(dir.path()).resolve_admin_token().expect("token");
            assert_fresh_token(dir.path(), &token);
        }
    }

    #[test]
    fn a_well_formed_token_file_is_kept_as_written() {
        let dir = tempfile::tempdir().expect("dir");
        let path = admin_token_path(dir.path());
        std::fs::write(&path, "operator-chosen-token-123\n").expect("write");
        let token = config(dir.path()).resolve_admin_token().expect("token");
        assert_eq!(token, "operator-chosen-token-123");
    }

    #[test]
    fn without_replace_an_existing_file_is_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, "first").expect("write");
        let err = write_private_file(&path, "second", false).expect_err("exists");
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "first");
        write_private_file(&path, "third", true).expect("replace");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "third");
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 1);
    }
}
