//! `commerce-host plugin dev`: the author's loop against a running host, like `spin watch` or
//! `shopify app dev`. It builds the plugin, publishes it and installs it into a store, then
//! watches the crate: on every saved change it builds again, publishes the build as the next patch
//! version and moves the installation to it (`POST …/installations/{id}/upgrade`, which keeps its
//! token, settings and subscriptions). Meanwhile it prints each attempt of the installation's
//! component as it happens, with the lines the plugin logged. A failed build is printed and the
//! last good version keeps running; the loop ends with Ctrl-C.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, anyhow};
use clap::Args;
use reqwest::Method;
use serde_json::{Value, json};

use super::client::HostClient;
use super::package;
use super::plugin::{DirArgs, HostArgs, attempts, format_attempts};
use crate::service::plugins::parse_version;

/// Arguments of `plugin dev`.
#[derive(Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// The store to install into: its id (`store_…`) or its domain. Default: the host's only
    /// store, else `demo.example` (the store `commerce-host demo` makes).
    #[arg(long)]
    pub store: Option<String>,
    /// How often to look for saved changes and new attempts, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub poll_ms: u64,
    #[command(flatten)]
    pub host: HostArgs,
}

/// Runs the loop until Ctrl-C.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let client = args.host.client()?;
    let dir = args.dir.dir;
    let store = find_store(&client, args.store.as_deref()).await?;
    println!(
        "plugin dev: {} into store {store} on {}",
        dir.display(),
        client.base()
    );
    let poll = Duration::from_millis(args.poll_ms.clamp(20, 10_000));
    let mut session = Session {
        client,
        dir: dir.clone(),
        store,
        installation: None,
        seen: HashSet::new(),
    };
    let mut files = Snapshot::take(&dir);
    let mut built = files.contents();
    session.deploy().await;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            () = tokio::time::sleep(poll) => {}
        }
        session.print_attempts().await;
        let now = Snapshot::take(&dir);
        if now != files {
            // An editor's save can be several writes: wait until the files hold still.
            let mut settled = now;
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let again = Snapshot::take(&dir);
                if again == settled {
                    break;
                }
                settled = again;
            }
            files = settled;
            // Times alone changed (a file touched, or saved as it was): nothing to build.
            let contents = files.contents();
            if contents == built {
                continue;
            }
            built = contents;
            println!("change saved: building");
            session.deploy().await;
        }
    }
    println!("plugin dev: stopped");
    Ok(())
}

/// The store `wanted` names (an id or a domain), or the default.
async fn find_store(client: &HostClient, wanted: Option<&str>) -> anyhow::Result<String> {
    let page = client
        .admin(Method::GET, "/admin/v1/stores?limit=250", None)
        .await?;
    let stores = page["data"].as_array().cloned().unwrap_or_default();
    let id_of = |s: &Value| s["id"].as_str().unwrap_or_default().to_owned();
    let found = match wanted {
        Some(w) => stores.iter().find(|s| s["id"] == w || s["domain"] == w),
        None if stores.len() == 1 => stores.first(),
        None => stores.iter().find(|s| s["domain"] == "demo.example"),
    };
    found.map(id_of).ok_or_else(|| {
        let known: Vec<String> = stores
            .iter()
            .map(|s| format!("{} ({})", id_of(s), s["domain"].as_str().unwrap_or("?")))
            .collect();
        anyhow!(
            "{}; pass --store with one of: {}",
            match wanted {
                Some(w) => format!("no store `{w}` on {}", client.base()),
                None => format!("which store? {} has {} stores", client.base(), stores.len()),
            },
            if known.is_empty() {
                "(none: create one with POST /admin/v1/stores, or run `commerce-host demo`)"
                    .to_owned()
            } else {
                known.join(", ")
            }
        )
    })
}

struct Session {
    client: HostClient,
    dir: PathBuf,
    store: String,
    /// The installation in the store, once there is one.
    installation: Option<String>,
    /// The attempts already printed.
    seen: HashSet<String>,
}

impl Session {
    /// Builds, publishes and installs or upgrades, printing what happened; a failure is printed
    /// and the loop goes on with the version that runs.
    async fn deploy(&mut self) {
        let started = Instant::now();
        match self.try_deploy(started).await {
            Ok(line) => println!("{line}"),
            Err(e) => println!(
                "not deployed: {e:#}\n(the last good version keeps running; save a fix to try again)"
            ),
        }
    }

    async fn try_deploy(&mut self, started: Instant) -> anyhow::Result<String> {
        let dir = self.dir.clone();
        let built = tokio::task::spawn_blocking(move || package::build(&dir, None, false))
            .await
            .context("the build task")??;
        if let Some(warning) = &built.warning {
            println!("warning: {warning}");
        }
        let build_time = started.elapsed();
        let package = package::check(&self.dir)?;
        let mut manifest = serde_json::to_value(&package.manifest)?;
        let name = package.manifest.name.clone();
        let version = self.next_version(&name, &package.manifest.version).await?;
        manifest["version"] = json!(version);
        let wasm = std::fs::read(&built.path)
            .with_context(|| format!("reading {}", built.path.display()))?;
        use base64::Engine as _;
        let body = json!({
            "manifest": manifest,
            "templates": package.templates,
            "component": base64::engine::general_purpose::STANDARD.encode(wasm),
        });
        self.client
            .admin(Method::POST, "/admin/v1/plugins", Some(&body))
            .await?;
        let how = match self.find_installation(&name).await? {
            Some(id) => {
                self.client
                    .admin(
                        Method::POST,
                        &format!("/admin/v1/stores/{}/installations/{id}/upgrade", self.store),
                        None,
                    )
                    .await?;
                self.remember(id.clone()).await;
                format!("upgraded installation {id}")
            }
            None => {
                let installed = super::plugin::install(&self.client, &self.store, &name).await?;
                let id = installed["id"].as_str().unwrap_or("?").to_owned();
                self.remember(id.clone()).await;
                format!("installed as {id}")
            }
        };
        Ok(format!(
            "{name}@{version} is live ({how}; commerce:plugin@{}): {:.1} s (build {:.1} s, publish {:.1} s); waiting for events",
            built.wit_version,
            started.elapsed().as_secs_f64(),
            build_time.as_secs_f64(),
            (started.elapsed() - build_time).as_secs_f64(),
        ))
    }

    /// The version to publish: the manifest's, unless the host has it or a higher one, then the
    /// next patch above the published one (versions only go up; plugin.toml is left as it is).
    async fn next_version(&self, name: &str, manifest_version: &str) -> anyhow::Result<String> {
        let published = self
            .client
            .admin_optional(Method::GET, &format!("/admin/v1/plugins/{name}"))
            .await?;
        let Some(published) = published else {
            return Ok(manifest_version.to_owned());
        };
        let current = published["version"].as_str().unwrap_or("0.0.0");
        match (parse_version(current), parse_version(manifest_version)) {
            (Some(current), Some(wanted)) if wanted > current => Ok(manifest_version.to_owned()),
            (Some((major, minor, patch)), _) => Ok(format!("{major}.{minor}.{}", patch + 1)),
            (None, _) => Err(anyhow!(
                "the host's version of {name}, `{current}`, does not parse"
            )),
        }
    }

    /// The store's active installation of `plugin`, if any.
    async fn find_installation(&self, plugin: &str) -> anyhow::Result<Option<String>> {
        let mut cursor: Option<String> = None;
        loop {
            let path = match &cursor {
                Some(c) => format!(
                    "/admin/v1/stores/{}/installations?limit=250&cursor={c}",
                    self.store
                ),
                None => format!("/admin/v1/stores/{}/installations?limit=250", self.store),
            };
            let page = self.client.admin(Method::GET, &path, None).await?;
            if let Some(found) = page["data"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|i| i["plugin"] == plugin && i["status"] == "active")
            {
                return Ok(found["id"].as_str().map(str::to_owned));
            }
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(None),
            }
        }
    }

    /// Follows `installation` from now on: what it did before is not printed.
    async fn remember(&mut self, installation: String) {
        if self.installation.as_ref() != Some(&installation) {
            if let Ok(old) = attempts(&self.client, &self.store, &installation, 250).await {
                self.seen.extend(old.iter().map(attempt_key));
            }
            self.installation = Some(installation);
        }
    }

    /// Prints the installation's attempts not printed yet, oldest first.
    async fn print_attempts(&mut self) {
        let Some(installation) = &self.installation else {
            return;
        };
        let Ok(recent) = attempts(&self.client, &self.store, installation, 50).await else {
            return; // The host restarting: try again at the next tick.
        };
        let fresh: Vec<Value> = recent
            .into_iter()
            .rev()
            .filter(|a| self.seen.insert(attempt_key(a)))
            .collect();
        if !fresh.is_empty() {
            print!("{}", format_attempts(&fresh));
        }
    }
}

fn attempt_key(attempt: &Value) -> String {
    match attempt["id"].as_str() {
        Some(id) => id.to_owned(),
        None => format!(
            "{}/{}/{}",
            attempt["event_id"], attempt["retry"], attempt["attempted_at"]
        ),
    }
}

/// The files of a crate that a build reads (everything but `target/`, hidden folders and
/// `Cargo.lock`, which the build itself writes: its first build would otherwise count as a
/// change), by path, with their modification time and size: two snapshots differ when a file was
/// saved, added or removed.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot(BTreeMap<PathBuf, (Option<SystemTime>, u64)>);

impl Snapshot {
    /// At most this many files are looked at (a crate is far smaller).
    const MAX_FILES: usize = 10_000;

    /// A digest of what the snapshot's files hold now, with their paths (SHA-256; a file that
    /// cannot be read counts as empty): equal digests mean nothing a build reads has changed.
    fn contents(&self) -> [u8; 32] {
        use sha2::Digest as _;
        let mut hash = sha2::Sha256::new();
        for path in self.0.keys() {
            let bytes = std::fs::read(path).unwrap_or_default();
            hash.update(path.as_os_str().as_encoded_bytes());
            hash.update(u64::try_from(bytes.len()).unwrap_or(u64::MAX).to_le_bytes());
            hash.update(&bytes);
        }
        hash.finalize().into()
    }

    fn take(dir: &Path) -> Self {
        let mut files = BTreeMap::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(folder) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&folder) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.')
                    || (folder == dir && (name == "target" || name == "Cargo.lock"))
                {
                    continue;
                }
                let Ok(meta) = entry.metadata() else { continue };
                if meta.is_dir() {
                    stack.push(entry.path());
                } else if files.len() < Self::MAX_FILES {
                    files.insert(entry.path(), (meta.modified().ok(), meta.len()));
                }
            }
        }
        Self(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_file_changes_the_snapshot_and_target_does_not() {
        let dir = tempfile::tempdir().expect("a folder");
        std::fs::create_dir_all(dir.path().join("src")).expect("src");
        std::fs::create_dir_all(dir.path().join("target/release")).expect("target");
        std::fs::write(dir.path().join("src/lib.rs"), "// one").expect("write");
        let before = Snapshot::take(dir.path());
        std::fs::write(dir.path().join("target/release/x.wasm"), "built").expect("write");
        std::fs::write(dir.path().join("Cargo.lock"), "# written by the build").expect("write");
        assert_eq!(
            Snapshot::take(dir.path()),
            before,
            "build output is not a change"
        );
        std::fs::write(dir.path().join("src/lib.rs"), "// two, longer").expect("write");
        assert_ne!(Snapshot::take(dir.path()), before);
    }

    #[test]
    fn a_file_saved_as_it_was_changes_the_snapshot_but_not_its_contents() {
        let dir = tempfile::tempdir().expect("a folder");
        let lib = dir.path().join("lib.rs");
        std::fs::write(&lib, "// one").expect("write");
        let before = Snapshot::take(dir.path());
        let built = before.contents();
        // Saved again, as it was, a moment later: its time moves, what a build reads does not.
        let file = std::fs::File::options()
            .write(true)
            .open(&lib)
            .expect("open");
        file.set_modified(SystemTime::now() + Duration::from_secs(5))
            .expect("set the time");
        let touched = Snapshot::take(dir.path());
        assert_ne!(touched, before, "the time moved");
        assert_eq!(touched.contents(), built, "the same bytes");
        std::fs::write(&lib, "// two").expect("write");
        let saved = Snapshot::take(dir.path()).contents();
        assert_ne!(saved, built, "same length, other bytes");
        // A file renamed changes them too.
        std::fs::rename(&lib, dir.path().join("main.rs")).expect("rename");
        assert_ne!(Snapshot::take(dir.path()).contents(), saved);
    }
}
