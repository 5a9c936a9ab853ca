//! `commerce-host plugin new`: a plugin crate that builds as it is.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};

use crate::model::plugin::Manifest;

/// The guest SDK of the repository this tool was built from.
pub fn default_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("guest-sdk"), |root| root.join("guest-sdk"))
}

/// Writes a new plugin crate named `name` into `dir` (which must not exist or be empty),
/// depending on the guest SDK at `sdk`. Returns the folder.
pub fn new_plugin(name: &str, dir: &Path, sdk: &Path) -> anyhow::Result<PathBuf> {
    let manifest = manifest_toml(name);
    let parsed: Manifest = toml::from_str(&manifest).context("the generated manifest")?;
    parsed.validate("manifest").map_err(|e| {
        anyhow!(
            "`{name}` cannot be a plugin name: {e} (use lower-case letters, digits and `-`, starting with a letter)"
        )
    })?;
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        bail!(
            "{} exists and is not empty: pick another --dir",
            dir.display()
        );
    }
    let sdk = std::fs::canonicalize(sdk).map_err(|_| {
        anyhow!(
            "no guest SDK at {}: pass --sdk with the path of commerce-host's `guest-sdk` folder",
            sdk.display()
        )
    })?;
    if !sdk.join("Cargo.toml").is_file() {
        bail!(
            "{} has no Cargo.toml: --sdk must be the `guest-sdk` folder",
            sdk.display()
        );
    }
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::create_dir_all(dir.join("tests"))?;
    std::fs::create_dir_all(dir.join("templates"))?;
    let write = |file: &str, text: String| {
        std::fs::write(dir.join(file), text).with_context(|| format!("writing {file}"))
    };
    write("Cargo.toml", cargo_toml(name, &sdk))?;
    write("plugin.toml", manifest)?;
    write(&format!("templates/{name}.toml"), TEMPLATE.to_owned())?;
    write("src/lib.rs", lib_rs(name))?;
    write("tests/plugin.rs", plugin_test(name))?;
    write("README.md", readme(name))?;
    write(".gitignore", "/target\n".to_owned())?;
    Ok(dir.to_owned())
}

fn manifest_toml(name: &str) -> String {
    format!(
        r#"# The manifest: what the plugin is, the scopes it needs, and the events its component receives.
name = "{name}"
version = "0.1.0"
description = "Thanks the customer by email when their order is paid."
scopes = ["orders.read"]
contact_email = "dev@{name}.example"
events = ["order.paid"]
"#
    )
}

fn cargo_toml(name: &str, sdk: &Path) -> String {
    // TOML basic strings take a path with backslashes only if escaped; a literal string does not.
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
commerce-guest-sdk = {{ path = '{sdk}' }}
serde_json = "1"

# A workspace of its own, so the crate builds wherever it lives.
[workspace]

[profile.release]
opt-level = "s"
lto = true
codegen-units = 1
strip = true
"#,
        sdk = sdk.display()
    )
}

const TEMPLATE: &str = r#"description = "Sent to the customer when their order is paid"
variables = ["order_id", "total", "store"]

[email]
subject = "Thank you for your order {{ order_id }}"
body = """Thank you for shopping at {{ store }}!

We have received your payment of {{ total }} for order {{ order_id }}.
"""
"#;

fn lib_rs(name: &str) -> String {
    let ty: String = name
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_ascii_uppercase().to_string() + chars.as_str()
            })
        })
        .collect();
    format!(
        r#"//! {name}: on `order.paid`, emails the customer through the `{name}` template in `templates/`.

use commerce_guest_sdk::{{Event, PaidOrder, Plugin, Result, commerce_plugin, log, notify, orders}};

#[derive(Default)]
struct {ty};

impl Plugin for {ty} {{
    fn on_order_paid(&self, event: &Event, paid: &PaidOrder) -> Result<()> {{
        // `order.paid` carries the id, total and currency; the customer is on the order
        // (reading it needs the `orders.read` scope of plugin.toml).
        let order = orders::get(&paid.id)?;
        let Some(customer) = order.customer_id else {{
            log::info(&format!("order {{}} has no customer: nothing to send", order.id));
            return Ok(());
        }};
        let data = serde_json::json!({{
            "order_id": order.id,
            "total": format_money(paid.total, &paid.currency),
            "store": event.store.domain,
        }});
        let receipt = notify::email(&format!("customer:{{customer}}"), "{name}", &data)?;
        log::info(&format!("thank-you for {{}} queued as {{}}", order.id, receipt.id));
        Ok(())
    }}
}}

/// `1250, "EUR"` → `12.50 EUR`.
fn format_money(minor: i64, currency: &str) -> String {{
    format!("{{}}.{{:02}} {{currency}}", minor / 100, (minor % 100).abs())
}}

commerce_plugin!({ty});

#[cfg(test)]
mod tests {{
    use super::*;

    #[test]
    fn money_has_two_decimals() {{
        assert_eq!(format_money(1250, "EUR"), "12.50 EUR");
        assert_eq!(format_money(5, "USD"), "0.05 USD");
    }}
}}
"#
    )
}

/// The scaffold's test of the compiled component, through the SDK's test harness.
fn plugin_test(name: &str) -> String {
    format!(
        r#"//! The plugin as the host runs it: `plugin_run!` builds the component for wasm32-wasip2 and runs
//! it on one event against a throwaway store (`commerce-host plugin run`; the `commerce-host`
//! command must be on the PATH, or named by COMMERCE_HOST_BIN).

use commerce_guest_sdk::plugin_run;

#[test]
fn a_paid_order_sends_the_customer_a_thank_you() {{
    let run = plugin_run!("order.paid").run();
    run.assert_ok();
    assert_eq!(run.calls_to("orders.get"), 1);
    assert_eq!(run.calls_to("notifications.send"), 1);
    let sent = &run.notifications()[0];
    assert_eq!(sent["channel"], "email");
    assert_eq!(sent["template"], "{name}");
}}
"#
    )
}

pub(super) fn readme(name: &str) -> String {
    format!(
        r#"# {name}

A commerce-host plugin: on `order.paid` it emails the customer a thank-you through the `{name}`
template (`templates/{name}.toml`).

```sh
cargo test                                   # the unit tests, and tests/plugin.rs: the built component on an event
commerce-host plugin build                   # checks plugin.toml and templates/, builds the component
commerce-host plugin publish                 # uploads manifest, templates and component to the host
commerce-host plugin install --store STORE_ID
commerce-host plugin logs --store STORE_ID --installation INST_ID
```

The host is `http://127.0.0.1:8080` unless `--host` or `COMMERCE_HOST_URL` says otherwise.
`plugin publish` publishes as you once you have run `commerce-host login --host URL --key chk_…`
with a key made in the developer console (`/developer`), and as the operator with an admin token.
Installing and reading logs take the operator's admin token: `--admin-token`,
`COMMERCE_HOST_ADMIN_TOKEN` or `./data/admin-token`. `commerce-host plugin dev` builds,
publishes and installs it into a local host (the demo's store by default), then rebuilds and
republishes on every save and prints its log lines.

- `plugin.toml`: the manifest (name, version, scopes, contact_email, events). Raise `version` to
  publish again.
- `templates/`: one file per message template; every variable a wording uses is listed in
  `variables`.
- `src/lib.rs`: the handler. Implement the `Plugin` method of each event of the manifest's
  `events`; `cargo doc -p commerce-guest-sdk --open` in the SDK has the guide.
"#
    )
}
