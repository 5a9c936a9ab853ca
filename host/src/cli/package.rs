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
    /// The `commerce:plugin` version it was built against.
    pub wit_version: String,
    /// The guest SDK that built it, when it recorded itself.
    pub sdk_version: Option<String>,
    /// Something the author should know that does not stop the build.
    pub warning: Option<String>,
}

/// Where cargo puts the component of the crate in `dir`: `<target>/wasm32-wasip2/release/<lib>.wasm`,
/// with the target folder cargo reports (a workspace's, `CARGO_TARGET_DIR`) unless `target_dir`
/// says otherwise.
pub fn component_path(dir: &Path, target_dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    Ok(crate_info(dir, target_dir)?.component)
}

/// What `cargo metadata` says of the plugin crate in `dir`.
#[derive(Debug)]
pub struct CrateInfo {
    /// Where its component is built.
    pub component: PathBuf,
    /// Whether its library is a `cdylib` (what makes cargo link a component).
    pub cdylib: bool,
    /// Whether it depends on the guest SDK.
    pub uses_sdk: bool,
}

/// Reads the crate in `dir` with `cargo metadata` (no dependencies are resolved).
pub fn crate_info(dir: &Path, target_dir: Option<&Path>) -> anyhow::Result<CrateInfo> {
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
    let cdylib = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| {
            t["crate_types"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k == "cdylib")
        });
    let uses_sdk = package["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|d| d["name"] == "commerce-guest-sdk" && d["kind"].is_null());
    Ok(CrateInfo {
        component: target
            .join(TARGET)
            .join("release")
            .join(format!("{name}.wasm")),
        cdylib,
        uses_sdk,
    })
}

/// Checks the plugin in `dir`, then builds it (`cargo build --release --target wasm32-wasip2`),
/// echoing cargo's progress to stderr when `echo`, and checks what came out: a component, with
/// the `handler` export, for a version of the contract this host runs.
pub fn build(dir: &Path, target_dir: Option<&Path>, echo: bool) -> anyhow::Result<Built> {
    check(dir)?;
    let info = crate_info(dir, target_dir)?;
    let cargo_toml = dir.join("Cargo.toml");
    if !info.uses_sdk {
        bail!(
            "{}: the crate does not depend on commerce-guest-sdk, which makes it a plugin: add \
             `commerce-guest-sdk = {{ path = \"{}\" }}` under [dependencies] and register the \
             plugin with `commerce_plugin!(YourPlugin);`",
            cargo_toml.display(),
            super::scaffold::default_sdk().display()
        );
    }
    if !info.cdylib {
        bail!(
            "{}: the library is not a cdylib, so cargo builds no component: add\n\n[lib]\ncrate-type = [\"cdylib\"]",
            cargo_toml.display()
        );
    }
    cargo_build(&cargo_toml, target_dir, echo)?;
    let path = info.component;
    let bytes = std::fs::read(&path)
        .with_context(|| format!("cargo built, but {} is not there", path.display()))?;
    let checked = check_component(&bytes).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok(Built {
        path,
        size: bytes.len() as u64,
        wit_version: checked.wit_version,
        sdk_version: checked.sdk_version,
        warning: checked.warning,
    })
}

/// What [`check_component`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentCheck {
    /// The `commerce:plugin` version of its `handler` export.
    pub wit_version: String,
    /// The guest SDK that built it, when it recorded itself.
    pub sdk_version: Option<String>,
    /// Something to tell the author that does not stop the build (an older contract).
    pub warning: Option<String>,
}

/// Checks a built `.wasm` without compiling it, naming what is wrong and what to run: a core
/// module (another target than wasm32-wasip2), no `commerce:plugin/handler` export (no
/// `commerce_plugin!`), or a contract version this host does not run (the SDK's record or the
/// export's version).
pub fn check_component(wasm: &[u8]) -> anyhow::Result<ComponentCheck> {
    use crate::plugins::runtime::{WIT_VERSIONS, built_with};
    let latest = WIT_VERSIONS[WIT_VERSIONS.len() - 1];
    let runs = WIT_VERSIONS.join(", ");
    match wasm.get(0..8) {
        Some([0, b'a', b's', b'm', 0x01, 0, 0, 0]) => bail!(
            "this is a core WebAssembly module, not a component: it was built for another target \
             than {TARGET} (wasm32-wasip1 or wasm32-unknown-unknown; look for `build.target` in \
             .cargo/config.toml). Build with `commerce-host plugin build`, or \
             `cargo build --release --target {TARGET}`"
        ),
        Some([0, b'a', b's', b'm', 0x0d, 0, 0x01, 0]) => {}
        _ => bail!("this is not WebAssembly: build with `commerce-host plugin build`"),
    }
    let built = built_with(wasm);
    let sdk = built.as_ref().map(|b| b.sdk.clone());
    let update = format!(
        "depend on the guest SDK of this commerce-host ({} {}: `commerce-guest-sdk = {{ path = \"{}\" }}`), then build again",
        env!("CARGO_PKG_NAME"),
        env!("CARGO_PKG_VERSION"),
        super::scaffold::default_sdk().display()
    );
    if let Some(b) = &built
        && !WIT_VERSIONS.contains(&b.wit.as_str())
    {
        bail!(
            "built against commerce:plugin@{} by commerce-guest-sdk {}, which this commerce-host \
             does not run (it runs commerce:plugin {runs}): {update}, or use a commerce-host \
             that knows {}",
            b.wit,
            b.sdk,
            b.wit
        );
    }
    let export = handler_export_version(wasm).ok_or_else(|| {
        anyhow!(
            "the component has no `commerce:plugin/handler` export, so the host cannot give it \
             events: register the plugin with `commerce_plugin!(YourPlugin);` at the root of \
             src/lib.rs"
        )
    })?;
    if !WIT_VERSIONS.contains(&export.as_str()) {
        bail!(
            "the component exports commerce:plugin/handler@{export}, a version this commerce-host \
             does not run (it runs {runs}): {update}"
        );
    }
    let warning = (export != latest).then(|| {
        format!(
            "built against commerce:plugin@{export}{}: this host still runs it, but \
             commerce:plugin@{latest} is the latest; to move to it, {update}",
            sdk.as_ref()
                .map(|v| format!(" (commerce-guest-sdk {v})"))
                .unwrap_or_default()
        )
    });
    Ok(ComponentCheck {
        wit_version: export,
        sdk_version: sdk,
        warning,
    })
}

/// The version of the component's `commerce:plugin/handler@<version>` export, if it has one.
fn handler_export_version(wasm: &[u8]) -> Option<String> {
    const HANDLER: &str = "commerce:plugin/handler@";
    // Only the outer component's exports: nested components and modules are skipped over.
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentExportSection(exports) if depth == 0 => {
                for export in exports {
                    if let Some(v) = export.ok()?.name.name.strip_prefix(HANDLER) {
                        return Some(v.to_owned());
                    }
                }
            }
            _ => {}
        }
    }
    None
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

    fn fixture() -> Vec<u8> {
        let file = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/review-request-wit-0.1.0.wasm");
        std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
    }

    /// `wasm` with a custom section `name` holding `data` appended.
    fn with_section(mut wasm: Vec<u8>, name: &str, data: &[u8]) -> Vec<u8> {
        let mut body = vec![u8::try_from(name.len()).expect("short name")];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(data);
        wasm.push(0);
        let mut len = body.len();
        loop {
            let byte = (len & 0x7f) as u8;
            len >>= 7;
            if len == 0 {
                wasm.push(byte);
                break;
            }
            wasm.push(byte | 0x80);
        }
        wasm.extend_from_slice(&body);
        wasm
    }

    fn refusal(wasm: &[u8]) -> String {
        format!("{:#}", check_component(wasm).expect_err("refused"))
    }

    #[test]
    fn a_core_module_is_another_target() {
        let text = refusal(&wat::parse_str("(module)").expect("wat"));
        assert!(
            text.contains("not a component") && text.contains("--target wasm32-wasip2"),
            "{text}"
        );
        assert!(refusal(b"PK\x03\x04 a zip").contains("not WebAssembly"));
    }

    #[test]
    fn a_component_without_the_handler_needs_commerce_plugin() {
        let text = refusal(&wat::parse_str("(component)").expect("wat"));
        assert!(text.contains("commerce_plugin!(YourPlugin);"), "{text}");
    }

    #[test]
    fn an_older_contract_builds_with_a_warning_and_an_unknown_one_says_what_to_do() {
        let old = check_component(&fixture()).expect("0.1.0 still runs");
        assert_eq!(old.wit_version, "0.1.0");
        assert_eq!(old.sdk_version, None);
        let warning = old.warning.expect("a warning");
        assert!(
            warning.contains("commerce:plugin@0.2.0 is the latest"),
            "{warning}"
        );

        let future = with_section(
            fixture(),
            "commerce-plugin",
            br#"{"wit":"9.9.0","sdk":"9.9.1"}"#,
        );
        let text = refusal(&future);
        for part in [
            "commerce:plugin@9.9.0",
            "commerce-guest-sdk 9.9.1",
            "0.1.0, 0.2.0",
            "commerce-guest-sdk = { path =",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }

        let mut bytes = fixture();
        let (from, to) = (
            b"commerce:plugin/handler@0.1.0",
            b"commerce:plugin/handler@0.9.0",
        );
        let mut found = 0;
        while let Some(at) = bytes.windows(from.len()).position(|w| w == from) {
            bytes[at..at + to.len()].copy_from_slice(to);
            found += 1;
        }
        assert!(found > 0, "the export is in the fixture");
        let text = refusal(&bytes);
        assert!(
            text.contains("handler@0.9.0") && text.contains("does not run"),
            "{text}"
        );
    }

    #[test]
    fn a_missing_target_says_how_to_add_it() {
        let log = "error[E0463]: can't find crate for `core`\n  = note: the `wasm32-wasip2` target may not be installed";
        let text = build_failure(log).to_string();
        assert!(text.contains("rustup target add wasm32-wasip2"), "{text}");
    }
}
