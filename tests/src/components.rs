//! The example plugins, built once per test process to real `wasm32-wasip2` components.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_owned()
}

/// Where the example plugins are built: beside the workspace's target folder, in a folder of
/// their own so that their build never waits on the host's.
/// `COMMERCE_HOST_EXAMPLES_TARGET_DIR` overrides it (several checkouts sharing one
/// `CARGO_TARGET_DIR` would otherwise overwrite each other's components).
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("COMMERCE_HOST_EXAMPLES_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir).join("example-plugins"),
        None => repo_root().join("target").join("example-plugins"),
    }
}

/// Builds every example plugin (release, `wasm32-wasip2`) the first time it is called.
fn build_all() -> &'static Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = target_dir();
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--release", "--target", "wasm32-wasip2", "--manifest-path"])
            .arg(repo_root().join("example-plugins").join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target)
            .output()
            .map_err(|e| format!("could not run cargo: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "building the example plugins failed (is the target installed? `rustup target add wasm32-wasip2`):\n{}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(target.join("wasm32-wasip2").join("release"))
    })
}

/// The folder the example plugins' components are built into (building them the first time).
pub fn components_dir() -> PathBuf {
    match build_all() {
        Ok(dir) => dir.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// The `.wasm` file of the example plugin `name` (crate name, e.g. `order-thanks`).
pub fn component_file(name: &str) -> PathBuf {
    components_dir().join(format!("{}.wasm", name.replace('-', "_")))
}

/// The bytes of the example plugin `name` (crate name, e.g. `order-thanks`).
pub fn component(name: &str) -> Vec<u8> {
    let dir = match build_all() {
        Ok(dir) => dir,
        Err(e) => panic!("{e}"),
    };
    let file = dir.join(format!("{}.wasm", name.replace('-', "_")));
    std::fs::read(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

/// The folder of the example plugin `name` (its `plugin.toml` and `templates/`).
pub fn plugin_dir(name: &str) -> PathBuf {
    repo_root().join("example-plugins").join(name)
}

/// The manifest (`plugin.toml`), templates (`templates/*.toml`) and component of the example
/// plugin `name`, as the body of `POST /admin/v1/plugins`.
pub fn publish_body(name: &str) -> serde_json::Value {
    use base64::Engine as _;
    let dir = plugin_dir(name);
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(dir.join("plugin.toml")).expect("plugin.toml"))
            .expect("plugin.toml is TOML");
    let templates_dir = dir.join("templates");
    let templates = if templates_dir.is_dir() {
        commerce_host::service::notifications::templates::load_dir(&templates_dir)
            .expect("templates")
    } else {
        Default::default()
    };
    serde_json::json!({
        "manifest": manifest,
        "templates": templates,
        "component": base64::engine::general_purpose::STANDARD.encode(component(name)),
    })
}
