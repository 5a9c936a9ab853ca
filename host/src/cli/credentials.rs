//! `commerce-host login`: a developer's API key kept per host, so that `plugin publish` publishes
//! as them (`/dev/v1/plugins`) without the operator's admin token.
//!
//! The keys live in `credentials.json` (mode 0600) in `COMMERCE_HOST_CONFIG_DIR`, else
//! `$XDG_CONFIG_HOME/commerce-host`, else `~/.config/commerce-host`: `{"<host URL>": "chk_…"}`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, anyhow};
use clap::Args;
use reqwest::Method;

use super::client::HostClient;

/// Arguments of `login`.
#[derive(Args)]
pub struct LoginArgs {
    /// The host's base URL.
    #[arg(long = "host", env = "COMMERCE_HOST_URL", default_value = super::client::DEFAULT_URL)]
    pub url: String,
    /// The API key, made in the developer console (`/developer`).
    #[arg(long, env = "COMMERCE_HOST_API_KEY", hide_env_values = true)]
    pub key: String,
}

/// The credentials file.
pub fn file() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("COMMERCE_HOST_CONFIG_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("XDG_CONFIG_HOME") {
            Some(dir) => PathBuf::from(dir).join("commerce-host"),
            None => PathBuf::from(
                std::env::var_os("HOME")
                    .ok_or_else(|| anyhow!("no HOME: set COMMERCE_HOST_CONFIG_DIR"))?,
            )
            .join(".config")
            .join("commerce-host"),
        },
    };
    Ok(dir.join("credentials.json"))
}

fn read() -> BTreeMap<String, String> {
    file()
        .ok()
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn normal(url: &str) -> String {
    url.trim().trim_end_matches('/').to_owned()
}

/// The stored key for the host at `url`, if `login` stored one.
pub fn key_for(url: &str) -> Option<String> {
    read().remove(&normal(url))
}

/// Checks `key` against the host (its developer API answers), then stores it.
pub async fn login(args: &LoginArgs) -> anyhow::Result<PathBuf> {
    let client = HostClient::new(&args.url, &args.key);
    let mine = client
        .admin(Method::GET, "/dev/v1/plugins", None)
        .await
        .context("checking the key (make one in the developer console, /developer)")?;
    let mut all = read();
    all.insert(normal(&args.url), args.key.trim().to_owned());
    let path = file()?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::config::write_private(&path, &serde_json::to_string_pretty(&all)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let count = mine["data"].as_array().map_or(0, Vec::len);
    eprintln!(
        "logged in to {} as a developer with {count} plugin(s)",
        normal(&args.url)
    );
    Ok(path)
}
