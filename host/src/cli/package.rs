//! A plugin's folder on disk: its manifest and templates checked exactly as the host checks them
//! at publish, and its component built with cargo.

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, anyhow, bail};

use crate::model::plugin::Manifest;
use crate::service::notifications::templates::{self, TemplateSource};

/// The target plugins are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// A plugin folder whose manifest and templates passed the host's checks.
#[derive(Debug)]
pub struct Package {
    /// The folder (with `Cargo.toml`, `plugin.toml`, `templates/`).
    pub dir: PathBuf,
    /// `plugin.toml`.
    pub manifest: Manifest,
    /// `templates/*.toml` by key.
    pub templates: BTreeMap<String, TemplateSource>,
}

/// Reads and checks `plugin.toml` and `templates/` of the plugin in `dir`, with the host's own
/// validation, so that a mistake shows before a build or an upload.
pub fn check(dir: &Path) -> anyhow::Result<Package> {
    let manifest_path = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest_path).map_err(|_| {
        anyhow!(
            "no plugin.toml in {}: run this in a plugin's folder (or pass --dir), or create a plugin with `commerce-host plugin new NAME`",
            dir.display()
        )
    })?;
    check_text(&manifest_path, &text)
}

/// Reads and checks the manifest at `manifest_path` (any file name) and the `templates/` folder
/// beside it, as [`check`] does for a plugin folder.
pub fn check_manifest(manifest_path: &Path) -> anyhow::Result<Package> {
    let text = std::fs::read_to_string(manifest_path)
        .map_err(|e| anyhow!("{}: {e}", manifest_path.display()))?;
    check_text(manifest_path, &text)
}

fn check_text(manifest_path: &Path, text: &str) -> anyhow::Result<Package> {
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let manifest: Manifest = toml::from_str(text).map_err(|e| {
        anyhow!(
            "{}: {}\nhint: the manifest's fields are name, version, description, scopes, contact_email, events, webhooks, limits",
            manifest_path.display(),
            e.to_string().trim_end()
        )
    })?;
    manifest.validate("manifest").map_err(|e| {
        let field = e.field().unwrap_or("manifest");
        let field = field.strip_prefix("manifest.").unwrap_or(field);
        anyhow!("{}: `{field}`: {e}", manifest_path.display())
    })?;
    let templates_dir = dir.join("templates");
    let templates = if templates_dir.is_dir() {
        templates::load_dir(&templates_dir)
            .map_err(|e| anyhow!("{}: {e:#}", templates_dir.display()))?
    } else {
        BTreeMap::new()
    };
    templates::validate_templates(&templates).map_err(|e| {
        let field = e.field().unwrap_or("templates");
        // `templates.<key>.email.body` → templates/<key>.toml, `email.body`.
        let rest = field.strip_prefix("templates.").unwrap_or(field);
        let (key, part) = rest.split_once('.').unwrap_or((rest, ""));
        let hint = if e.to_string().contains("variable") {
            "\nhint: every variable a wording uses must be listed in the template's `variables = [...]`"
        } else {
            ""
        };
        anyhow!(
            "{}: `{part}`: {e}{hint}",
            templates_dir.join(format!("{key}.toml")).display()
        )
    })?;
    Ok(Package {
        dir: dir.to_owned(),
        manifest,
        templates,
    })
}

/// A built component.
#[derive(Debug)]
pub struct Built {
    /// The `.wasm` file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

/// Where cargo puts the component of the crate in `dir`: `<target>/wasm32-wasip2/release/<lib>.wasm`,
/// with the target folder cargo reports (a workspace's, `CARGO_TARGET_DIR`) unless `target_dir`
/// says otherwise.
pub fn component_path(dir: &Path, target_dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    let output = cargo()
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(dir.join("Cargo.toml"))
        .output()
        .context("running `cargo metadata` (is cargo installed?)")?;
    if !output.status.success() {
        bail!(
            "{}: {}",
            dir.join("Cargo.toml").display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("reading `cargo metadata`")?;
    let manifest = std::fs::canonicalize(dir.join("Cargo.toml"))?;
    let package = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| {
            p["manifest_path"]
                .as_str()
                .and_then(|m| std::fs::canonicalize(m).ok())
                .is_some_and(|m| m == manifest)
        })
        .ok_or_else(|| anyhow!("{} is not a package", dir.join("Cargo.toml").display()))?;
    let name = package["name"]
        .as_str()
        .unwrap_or_default()
        .replace('-', "_");
    let target = match target_dir {
        Some(dir) => dir.to_owned(),
        None => PathBuf::from(meta["target_directory"].as_str().unwrap_or("target")),
    };
    Ok(target
        .join(TARGET)
        .join("release")
        .join(format!("{name}.wasm")))
}

/// Checks the plugin in `dir`, then builds it (`cargo build --release --target wasm32-wasip2`),
/// echoing cargo's progress to stderr when `echo`.
pub fn build(dir: &Path, target_dir: Option<&Path>, echo: bool) -> anyhow::Result<Built> {
    check(dir)?;
    cargo_build(&dir.join("Cargo.toml"), target_dir, echo)?;
    let path = component_path(dir, target_dir)?;
    let size = std::fs::metadata(&path)
        .with_context(|| format!("cargo built, but {} is not there", path.display()))?
        .len();
    Ok(Built { path, size })
}

/// Runs `cargo build --release --target wasm32-wasip2` on `manifest` (a package or a
/// workspace), turning the failures a first-time author meets into what to do.
pub fn cargo_build(manifest: &Path, target_dir: Option<&Path>, echo: bool) -> anyhow::Result<()> {
    let mut command = cargo();
    command
        .args(["build", "--release", "--target", TARGET, "--manifest-path"])
        .arg(manifest)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(target) = target_dir {
        command.arg("--target-dir").arg(target);
    }
    let mut child = command
        .spawn()
        .context("running cargo (is Rust installed?)")?;
    let mut log = String::new();
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let line = line.unwrap_or_default();
            if echo {
                eprintln!("{line}");
            }
            log.push_str(&line);
            log.push('\n');
        }
    }
    let status = child.wait().context("waiting for cargo")?;
    if status.success() {
        Ok(())
    } else {
        Err(build_failure(&log))
    }
}

/// What a failed build means for the author.
fn build_failure(log: &str) -> anyhow::Error {
    if log.contains("target may not be installed")
        || log.contains("can't find crate for `core`")
        || log.contains("can't find crate for `std`")
    {
        return anyhow!(
            "the {TARGET} target is not installed: run `rustup target add {TARGET}`, then build again"
        );
    }
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    anyhow!("cargo build failed:\n{}", tail.join("\n"))
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_target_says_how_to_add_it() {
        let log = "error[E0463]: can't find crate for `core`\n  = note: the `wasm32-wasip2` target may not be installed";
        let text = build_failure(log).to_string();
        assert!(text.contains("rustup target add wasm32-wasip2"), "{text}");
    }
}
