//! `commerce-host plugin run`: runs a built component on one event against a throwaway store, with
//! no host running (like `shopify app function run`), and prints what it did.
//!
//! A temporary data folder holds a fresh service: a store seeded through the service layer (the
//! same functions as the API: products with variants and stock, two customers, an order in the
//! state the event implies), the plugin published and installed with its manifest and templates,
//! the merchant's settings applied. One event is then delivered straight to the component through
//! the plugin runtime (not the delivery engine), with every host call recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use serde_json::{Value, json};

use super::package;
use crate::Config;
use crate::model::customer::CustomerFilter;
use crate::model::event::{Cause, Event, EventData};
use crate::model::message::Message;
use crate::model::order::{Order, OrderFilter};
use crate::model::plugin::Manifest;
use crate::model::product::ProductFilter;
use crate::model::scopes::{EventType, Scope};
use crate::model::store::Installation;
use crate::model::store::RateLimits;
use crate::plugins::bindings::commerce::plugin::types::HostError;
use crate::plugins::{HostCall, Outcome, Plugins};
use crate::service::Service;
use crate::service::auth::Actor;
use crate::service::events::with_cause;
use crate::service::notifications::dashboard::MessageFilter;
use crate::service::notifications::templates::TemplateSource;
use crate::service::pagination::{Page, PageRequest};

/// Arguments of `plugin run`.
#[derive(Args)]
pub struct RunArgs {
    /// The built component to run (`target/wasm32-wasip2/release/<crate>.wasm`).
    pub component: PathBuf,
    /// The event to deliver, e.g. `order.paid` (`order.created`, `customer.updated`,
    /// `product.inventory.updated`, `plugin.configured`, …); with `--replay`, the invocation's.
    #[arg(long, required_unless_present = "replay")]
    pub event: Option<String>,
    /// A JSON file whose content replaces the event's `data` (default: built from the seeded
    /// store's records).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// A JSON file with the merchant's settings for the plugin (default: none, `{}`).
    #[arg(long)]
    pub settings: Option<PathBuf>,
    /// The plugin's manifest (default: the `plugin.toml` of the crate whose target folder holds
    /// the component, else one that receives the event and holds every scope). Templates are
    /// read from the `templates/` folder beside it.
    #[arg(long)]
    pub manifest: Option<PathBuf>,
    /// Print the report as one JSON object (what the guest SDK's `testing` module reads) instead
    /// of text: `plugin`, `event`, `host_calls` (`function`, `args`, `error`), `logs` (`level`,
    /// `message`), `notifications`, `events` (the events the run fired), `changes` (`created` or
    /// `updated` record keys with their values), and `outcome` (`ok`, `verdict`, `fuel_used`,
    /// `duration_ms`).
    #[arg(long)]
    pub json: bool,
    /// Runs this build on what a real invocation saw instead of fixtures: the invocation's id
    /// (`att_…`, shown in the developer console and by `plugin logs`) is fetched from the host
    /// (`GET /dev/v1/invocations/{id}`, the developer's own plugins only): its event, the records
    /// it read and its settings.
    #[arg(long, value_name = "INVOCATION", conflicts_with_all = ["data", "settings"])]
    pub replay: Option<String>,
    /// The host to fetch `--replay` from.
    #[arg(long = "host", env = "COMMERCE_HOST_URL", default_value = super::client::DEFAULT_URL)]
    pub url: String,
    /// The developer's API key for `--replay` (default: the one `commerce-host login` stored for
    /// the host).
    #[arg(long, env = "COMMERCE_HOST_API_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// The fetched invocation (`--replay`), filled in before the run.
    #[arg(skip)]
    pub replayed: Option<Box<crate::service::developer::InvocationReplay>>,
}

/// Fetches the invocation `--replay` names, with the developer's key.
pub async fn fetch_replay(
    args: &RunArgs,
) -> anyhow::Result<Option<Box<crate::service::developer::InvocationReplay>>> {
    let Some(id) = &args.replay else {
        return Ok(None);
    };
    let key = args
        .key
        .clone()
        .or_else(|| super::credentials::key_for(&args.url))
        .ok_or_else(|| {
            anyhow!(
                "--replay needs your developer key for {}: run `commerce-host login --host {} --key chk_…` (make a key in the developer console), or pass --key",
                args.url,
                args.url
            )
        })?;
    let client = super::client::HostClient::new(&args.url, &key);
    let found = client
        .admin(
            reqwest::Method::GET,
            &format!("/dev/v1/invocations/{}", urlencoding(id)),
            None,
        )
        .await
        .with_context(|| format!("fetching invocation {id} from {}", args.url))?;
    let replay = serde_json::from_value(found)
        .map_err(|e| anyhow!("the host's answer for invocation {id}: {e}"))?;
    Ok(Some(Box::new(replay)))
}

/// `id` made safe for a path segment (ids are `[a-z0-9_]`; anything else is escaped).
fn urlencoding(id: &str) -> String {
    form_urlencoded::byte_serialize(id.as_bytes()).collect()
}

/// Name of the fixtures' own installation, which seeds the store (every scope, no component).
const FIXTURES: &str = "plugin-run-fixtures";

/// Runs the component as `args` say; prints the report to stdout. An error when the run could
/// not happen, or when the plugin failed (a trap, a limit, a handler error, a refused host call).
pub fn run(args: &RunArgs) -> anyhow::Result<()> {
    let (report, ok) = run_report(args)?;
    if args.json {
        println!("{}", report.json);
    } else {
        print!("{}", report.text);
    }
    if ok {
        Ok(())
    } else {
        Err(anyhow!(report.verdict))
    }
}

/// What a run printed, and its verdict line.
pub struct Report {
    /// The whole report.
    pub text: String,
    /// Why the run failed, or `ok`.
    pub verdict: String,
    /// The same report as one JSON object (`plugin run --json`).
    pub json: Value,
}

/// Runs the component; returns the report and whether the plugin succeeded.
pub fn run_report(args: &RunArgs) -> anyhow::Result<(Report, bool)> {
    let replayed = args.replayed.as_deref();
    let recorded: Option<Event> = replayed
        .map(|r| serde_json::from_value(r.event.clone()))
        .transpose()
        .map_err(|e| anyhow!("the replayed invocation's event: {e}"))?;
    let named = match (&args.event, &recorded) {
        (Some(named), _) => named.clone(),
        (None, Some(event)) => event.kind().as_str().to_owned(),
        (None, None) => bail!("--event: name the event to deliver, e.g. --event order.paid"),
    };
    let kind: EventType = named.parse().map_err(|_| {
        let known: Vec<&str> = EventType::ALL.iter().map(|e| e.as_str()).collect();
        anyhow!(
            "--event: unknown event `{named}`; the events are: {}",
            known.join(", ")
        )
    })?;
    if let Some(event) = &recorded
        && event.kind() != kind
    {
        bail!(
            "--event {kind}: the replayed invocation handled `{}`; leave --event out",
            event.kind()
        );
    }
    let wasm = std::fs::read(&args.component).map_err(|e| {
        anyhow!(
            "{}: {e}; build the plugin first with `commerce-host plugin build`",
            args.component.display()
        )
    })?;
    let data = args
        .data
        .as_deref()
        .map(|path| read_json(path, "--data"))
        .transpose()?
        .map(|value| {
            let shown = cut(&value.to_string(), 400);
            EventData::from_json(kind, value).map_err(|e| {
                anyhow!(
                    "the event's data does not fit `{kind}` (check --data): {e}\nthe data was: {shown}"
                )
            })
        })
        .transpose()?;
    let settings = match replayed {
        Some(r) => r.recording.settings.clone(),
        None => args
            .settings
            .as_deref()
            .map(|path| read_json(path, "--settings"))
            .transpose()?,
    };
    if settings.as_ref().is_some_and(|s| !s.is_object()) {
        bail!("--settings: the settings must be a JSON object");
    }
    let (manifest, templates, from) =
        manifest_for(args.manifest.as_deref(), &args.component, kind)?;
    let subscribed = crate::service::plugins::parse_events("manifest.events", &manifest.events)
        .map_err(|e| anyhow!("{from}: {e}"))?;
    if !subscribed.contains(&kind) {
        bail!(
            "{from} does not list `{kind}` in `events` ({}): the host would never deliver it to this plugin; add it to `events`, or run another event",
            manifest.events.join(", ")
        );
    }

    let temp = tempfile::tempdir().context("creating a temporary folder")?;
    let mut config = Config::new(temp.path());
    config.admin_token = Some(crate::service::auth::new_token());
    config.durable_writes = false;
    config.plugin_runtime.max_concurrent_instances = 2;
    let service = crate::open_service(&config)?;
    let plugins = Plugins::new(
        &temp.path().join("components"),
        config.plugin_runtime.clone(),
    )?;
    let fail = |what: &str| {
        let what = what.to_owned();
        move |e: crate::Error| anyhow!("{what}: {e}")
    };

    let store = service
        .create_store("plugin-run.example")
        .map_err(fail("creating the store"))?;
    // One event's host calls never come near a store's rate limit over HTTP; a throwaway store
    // does not limit them at all, so what the run shows is the plugin's own doing.
    service
        .set_rate_limits(
            &store.id,
            RateLimits {
                requests_per_second: 1_000_000,
                burst: 1_000_000,
                requests_per_minute: 4_000_000_000,
            },
        )
        .map_err(fail("setting the store's limits"))?;
    let fixtures = fixtures_actor(&service, &plugins, &store.id)?;
    match replayed {
        Some(r) => restore(&service, &store.id, &r.recording)
            .map_err(fail("restoring the records the invocation read"))?,
        None => seed(&service, &fixtures, kind).map_err(fail("seeding the store"))?,
    }

    plugins
        .publish(&service, manifest.clone(), &templates, Some(&wasm))
        .map_err(|e| anyhow!("publishing {}: {e}", args.component.display()))?;
    let installed = service
        .install(&store.id, &manifest.name)
        .map_err(fail("installing the plugin"))?;
    let mut installation = installed.installation;
    if let Some(settings) = settings {
        installation = service
            .configure(&store.id, &installation.id, settings)
            .map_err(fail("--settings"))?;
    }
    if kind == EventType::PluginUninstalled {
        installation = service
            .uninstall(&store.id, &installation.id)
            .map_err(fail("uninstalling the plugin"))?;
    }
    let mut event = match recorded {
        // The invocation's own event (its id, time and data) in the throwaway store.
        Some(mut event) => {
            event.store = store.reference();
            event
        }
        None => pick_event(&service, &store, &installation, kind)?,
    };
    if let Some(data) = data {
        event.data = data;
    }

    let before_events: BTreeSet<String> = all(|p| service.list_events(&store.id, None, p))
        .map_err(fail("reading the events"))?
        .into_iter()
        .map(|e| e.id.to_string())
        .collect();
    let before = snapshot(&service, &fixtures).map_err(fail("reading the store"))?;

    let actor = service
        .component_actor(&installation)
        .map_err(fail("the plugin's identity"))?;
    let scopes: BTreeSet<Scope> = installation.scopes.iter().copied().collect();
    let delivered = event.for_scopes(&scopes).into_owned();
    let cause = Cause {
        installation: installation.id.clone(),
        depth: 1,
    };
    let outcome = with_cause(cause, || {
        plugins.invoke_with(&service, actor, &manifest, &delivered, true)
    })
    .map_err(|e| anyhow!("running the component: {e}"))?;

    let after = snapshot(&service, &fixtures).map_err(fail("reading the store"))?;
    let fired: Vec<Event> = all(|p| service.list_events(&store.id, None, p))
        .map_err(fail("reading the events"))?
        .into_iter()
        .filter(|e| !before_events.contains(&e.id.to_string()))
        .collect();
    let messages: Vec<Message> = all(|p| service.messages(&store.id, &MessageFilter::default(), p))
        .map_err(fail("reading the notifications"))?
        .into_iter()
        .filter(|m| m.installation_id == installation.id)
        .collect();

    let limits = service
        .component_limits(&manifest)
        .map_err(fail("the manifest's limits"))?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "plugin {}@{} ({from})",
        manifest.name, manifest.version
    );
    if let Some(r) = replayed {
        let _ = writeln!(
            text,
            "replaying invocation {} of {}@{}: its event, the {} record(s) it read{}{}",
            r.id,
            r.plugin,
            r.version,
            r.recording.records.len(),
            if r.recording.settings.is_some() {
                " and its settings"
            } else {
                ""
            },
            if r.recording.truncated {
                " (more reads than the host keeps: the rest are missing here)"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        text,
        "store {} ({}), installation {}",
        store.domain, store.id, installation.id
    );
    write_event(&mut text, &delivered);
    write_calls(&mut text, &outcome.host_calls);
    write_logs(&mut text, &outcome);
    write_messages(&mut text, &messages);
    write_changes(&mut text, &before, &after, &fired);

    let refused: Vec<String> = outcome
        .host_calls
        .iter()
        .filter_map(|call| {
            call.error
                .as_ref()
                .map(|e| format!("{} ({})", call.function, describe_error(e)))
        })
        .collect();
    let usage = format!(
        "fuel {} of {}, {} ms (limit {} ms), {} host calls of {}",
        outcome.fuel_used,
        limits.fuel,
        outcome.elapsed.as_millis(),
        limits.wall_clock.as_millis(),
        outcome.host_calls.len(),
        limits.host_calls
    );
    let (ok, verdict) = match (&outcome.result, refused.is_empty()) {
        (Ok(()), true) => (true, "ok".to_owned()),
        (Ok(()), false) => (
            false,
            format!(
                "the handler returned ok, but the host refused {} call(s): {}",
                refused.len(),
                refused.join("; ")
            ),
        ),
        (Err(failure), true) => (false, failure.to_string()),
        (Err(failure), false) => (
            false,
            format!(
                "{failure}; the host refused {} call(s): {}",
                refused.len(),
                refused.join("; ")
            ),
        ),
    };
    let _ = writeln!(text, "outcome: {verdict}");
    let _ = writeln!(text, "  {usage}");
    let json = json!({
        "plugin": {"name": manifest.name, "version": manifest.version},
        "replay": replayed.map(|r| r.id.to_string()),
        "event": serde_json::to_value(&delivered).unwrap_or_default(),
        "host_calls": outcome.host_calls.iter().map(|call| json!({
            "function": call.function,
            "args": call.args,
            "error": call.error.as_ref().map(describe_error),
        })).collect::<Vec<_>>(),
        "logs": outcome.logs.iter().map(|line| json!({
            "level": line.level.to_string(),
            "message": line.message,
        })).collect::<Vec<_>>(),
        "notifications": messages.iter().map(|m| serde_json::to_value(&m.notification).unwrap_or_default()).collect::<Vec<_>>(),
        "events": fired.iter().map(|e| serde_json::to_value(e).unwrap_or_default()).collect::<Vec<_>>(),
        "changes": changes_json(&before, &after),
        "outcome": {
            "ok": ok,
            "verdict": verdict,
            "fuel_used": outcome.fuel_used,
            "duration_ms": u64::try_from(outcome.elapsed.as_millis()).unwrap_or(u64::MAX),
        },
    });
    Ok((
        Report {
            text,
            verdict,
            json,
        },
        ok,
    ))
}

fn read_json(path: &Path, flag: &str) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("{flag}: reading {}: {e}", path.display()))?;
    serde_json::from_str(&text)
        .map_err(|e| anyhow!("{flag}: {} is not valid JSON: {e}", path.display()))
}

type Templates = BTreeMap<String, TemplateSource>;

/// The manifest and templates to publish the component with, and where they came from.
fn manifest_for(
    given: Option<&Path>,
    component: &Path,
    kind: EventType,
) -> anyhow::Result<(Manifest, Templates, String)> {
    let from_file = |path: &Path| -> anyhow::Result<(Manifest, Templates, String)> {
        let package = package::check_manifest(path)?;
        Ok((
            package.manifest,
            package.templates,
            path.display().to_string(),
        ))
    };
    if let Some(path) = given {
        if path.is_dir() {
            return from_file(&path.join("plugin.toml"));
        }
        return from_file(path);
    }
    if let Some(path) = crate_manifest(component) {
        return from_file(&path);
    }
    let stem = component
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    let mut name: String = stem
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c == '_' { '-' } else { c })
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')
        .collect();
    name = name.trim_matches('-').to_owned();
    if name.is_empty() || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name = "local-plugin".to_owned();
    }
    let manifest = Manifest {
        name,
        version: "0.0.0".into(),
        description: Some("run by `commerce-host plugin run`".into()),
        scopes: Scope::ALL.iter().map(|s| s.as_str().to_owned()).collect(),
        contact_email: "dev@plugin-run.example".into(),
        webhooks: Vec::new(),
        events: vec![kind.as_str().to_owned()],
        limits: None,
    };
    manifest
        .validate("manifest")
        .map_err(|e| anyhow!("the default manifest for {stem}: {e}; pass --manifest"))?;
    Ok((
        manifest,
        Templates::new(),
        "default manifest: the event and every scope, no templates; pass --manifest for the plugin's own".into(),
    ))
}

/// The `plugin.toml` of the crate that built `component`: beside the `target` folder it is in, or
/// in the workspace member named like the component.
fn crate_manifest(component: &Path) -> Option<PathBuf> {
    let component = std::fs::canonicalize(component).ok()?;
    let stem = component.file_stem()?.to_str()?.to_owned();
    for dir in component.ancestors().skip(1) {
        if dir.file_name().and_then(|n| n.to_str()) != Some("target") {
            continue;
        }
        let root = dir.parent()?;
        let own = root.join("plugin.toml");
        if own.is_file() {
            return Some(own);
        }
        let member = root.join(stem.replace('_', "-")).join("plugin.toml");
        if member.is_file() {
            return Some(member);
        }
    }
    None
}

/// Publishes and installs the fixtures' plugin (no component, every scope): the actor that seeds
/// the store through the service, as a shop's own token would over HTTP.
fn fixtures_actor(
    service: &Service,
    plugins: &Plugins,
    store: &crate::model::ids::StoreId,
) -> anyhow::Result<Actor> {
    let manifest = Manifest {
        name: FIXTURES.into(),
        version: "1.0.0".into(),
        description: Some("seeds the throwaway store of `plugin run`".into()),
        scopes: Scope::ALL.iter().map(|s| s.as_str().to_owned()).collect(),
        contact_email: "dev@plugin-run.example".into(),
        webhooks: Vec::new(),
        events: Vec::new(),
        limits: None,
    };
    plugins
        .publish(service, manifest, &Templates::new(), None)
        .map_err(|e| anyhow!("publishing the fixtures: {e}"))?;
    let installed = service
        .install(store, FIXTURES)
        .map_err(|e| anyhow!("installing the fixtures: {e}"))?;
    service
        .component_actor(&installed.installation)
        .map_err(|e| anyhow!("the fixtures' identity: {e}"))
}

fn input<T: serde::de::DeserializeOwned>(value: Value) -> crate::model::error::Result<T> {
    Ok(serde_json::from_value(value)?)
}

/// Seeds the store: two products with variants and stock, two customers, and an order in the
/// state `kind` implies (paid unless the event is about an order in another state), through the
/// service functions, which fire the events the run then picks from.
fn seed(service: &Service, actor: &Actor, kind: EventType) -> crate::model::error::Result<()> {
    let mug = service.create_product(
        actor,
        input(json!({
            "title": "Enamel mug", "vendor": "Acme", "tags": ["kitchen"],
            "variants": [
                {"title": "Blue", "sku": "MUG-BLUE", "price": 1250, "currency": "EUR",
                 "inventory_quantity": 12, "low_stock_threshold": 5},
                {"title": "Red", "sku": "MUG-RED", "price": 1250, "currency": "EUR",
                 "inventory_quantity": 6, "low_stock_threshold": 5},
            ],
        }))?,
    )?;
    let shirt = service.create_product(
        actor,
        input(json!({
            "title": "T-shirt", "vendor": "Acme", "tags": ["apparel"],
            "variants": [
                {"title": "M", "sku": "TEE-M", "price": 2500, "currency": "EUR", "inventory_quantity": 20},
                {"title": "L", "sku": "TEE-L", "price": 2500, "currency": "EUR", "inventory_quantity": 8},
            ],
        }))?,
    )?;
    let ada = service.create_customer(
        actor,
        input(json!({
            "email": "ada@example.com", "first_name": "Ada", "last_name": "Lovelace",
            "accepts_marketing": true, "tags": ["vip"],
        }))?,
    )?;
    service.create_customer(
        actor,
        input(json!({
            "email": "grace@example.com", "phone": "+15555550123", "first_name": "Grace",
            "last_name": "Hopper",
        }))?,
    )?;
    let variant = |p: &crate::model::product::Product, i: usize| {
        p.variants
            .get(i)
            .map(|v| v.id.to_string())
            .unwrap_or_default()
    };
    let order = service.create_order(
        actor,
        input(json!({
            "currency": "EUR", "customer_id": ada.id, "email": "ada@example.com",
            "line_items": [
                {"variant_id": variant(&mug, 0), "quantity": 2},
                {"variant_id": variant(&shirt, 0), "quantity": 1},
            ],
        }))?,
    )?;
    let pay = |order: &Order| {
        service.confirm_payment(
            &actor.store,
            &order.id,
            &input(json!({"amount": order.total, "currency": order.currency}))?,
        )
    };
    match kind {
        EventType::OrderCreated => {}
        EventType::OrderCancelled => {
            service.cancel_order(
                actor,
                &order.id,
                input(json!({"reason": "the customer changed their mind"}))?,
            )?;
        }
        EventType::OrderFulfilled => {
            let paid = pay(&order)?;
            service.fulfill_order(
                actor,
                &paid.id,
                input(json!({"tracking_number": "1Z999AA10123456784", "carrier": "UPS"}))?,
            )?;
        }
        EventType::OrderRefunded => {
            let paid = pay(&order)?;
            service.refund_order(
                actor,
                &paid.id,
                input(json!({"amount": 1250, "reason": "a chipped mug"}))?,
            )?;
        }
        _ => {
            pay(&order)?;
        }
    }
    match kind {
        EventType::CustomerUpdated => {
            service.update_customer(
                actor,
                &ada.id,
                input(json!({"note": "prefers email", "tags": ["vip", "newsletter"]}))?,
            )?;
        }
        EventType::CustomerDeleted => {
            let gone = service.create_customer(
                actor,
                input(json!({"email": "temp@example.com", "first_name": "Temp"}))?,
            )?;
            service.delete_customer(actor, &gone.id)?;
        }
        EventType::ProductUpdated => {
            service.update_product(
                actor,
                &mug.id,
                input(json!({"title": "Enamel mug, 350 ml"}))?,
            )?;
        }
        EventType::ProductInventoryUpdated => {
            // 6 → 4 crosses the Red mug's low-stock threshold of 5.
            service.adjust_inventory(
                actor,
                input(json!({"variant_id": variant(&mug, 1), "delta": -2, "reason": "sold in the shop"}))?,
            )?;
        }
        _ => {}
    }
    Ok(())
}

/// The newest event of `kind` the seeding fired; for the plugin's lifecycle events, its own.
/// `plugin.configured` without settings (nothing changed, so nothing fired) is built from the
/// installation as the host would have.
/// Writes the records a replayed invocation read into the throwaway store, as they were (with
/// the indexes the service keeps beside them: a product's variants, a customer's email).
fn restore(
    service: &Service,
    store: &crate::model::ids::StoreId,
    recording: &crate::model::log::Recording,
) -> crate::model::error::Result<()> {
    use crate::model::customer::Customer;
    use crate::model::log::RecordKind;
    use crate::model::product::Product;
    let bad = |e: serde_json::Error| crate::Error::Internal(anyhow!("a recorded record: {e}"));
    service.db.tx(|tx| {
        for seen in &recording.records {
            let value = seen.record.clone();
            match seen.kind {
                RecordKind::Order => {
                    let order: Order = serde_json::from_value(value).map_err(bad)?;
                    tx.write(&Order::key(store, &order.id), &order)?;
                }
                RecordKind::Product => {
                    let product: Product = serde_json::from_value(value).map_err(bad)?;
                    for v in &product.variants {
                        tx.write(&Product::variant_index_key(store, &v.id), &product.id)?;
                    }
                    tx.write(&Product::key(store, &product.id), &product)?;
                }
                RecordKind::Customer => {
                    let customer: Customer = serde_json::from_value(value).map_err(bad)?;
                    if let Some(email) = &customer.email {
                        tx.write(&Customer::email_key(store, email), &customer.id)?;
                    }
                    tx.write(&Customer::key(store, &customer.id), &customer)?;
                }
            }
        }
        Ok(())
    })
}

fn pick_event(
    service: &Service,
    store: &crate::model::store::Store,
    installation: &Installation,
    kind: EventType,
) -> anyhow::Result<Event> {
    let events = all(|p| service.list_events(&store.id, Some(kind), p))
        .map_err(|e| anyhow!("reading the events: {e}"))?;
    let lifecycle = kind.as_str().starts_with("plugin.");
    let own = |e: &Event| {
        !lifecycle
            || e.data
                .installation()
                .is_some_and(|about| about.id == installation.id)
    };
    if let Some(event) = events.into_iter().find(own) {
        return Ok(event);
    }
    if let Some(data) = EventData::plugin_lifecycle(kind, installation.clone()) {
        return Ok(Event::new(&store.reference(), data, service.now()));
    }
    bail!("the seeded store has no `{kind}` event to deliver; pass --data with the event's data")
}

/// Every item of a paged listing (at most 40 pages of 250).
fn all<T>(
    mut page: impl FnMut(&PageRequest) -> crate::model::error::Result<Page<T>>,
) -> crate::model::error::Result<Vec<T>> {
    let mut items = Vec::new();
    let mut request = PageRequest::first(250);
    for _ in 0..40 {
        let got = page(&request)?;
        items.extend(got.data);
        match got.page.next_cursor {
            Some(cursor) => request = PageRequest::after(250, cursor),
            None => break,
        }
    }
    Ok(items)
}

/// The store's orders, customers and products by `kind id`, as JSON.
fn snapshot(
    service: &Service,
    actor: &Actor,
) -> crate::model::error::Result<BTreeMap<String, Value>> {
    let mut records = BTreeMap::new();
    for order in all(|p| service.list_orders(actor, &OrderFilter::default(), p))? {
        records.insert(format!("order {}", order.id), serde_json::to_value(&order)?);
    }
    for customer in all(|p| service.list_customers(actor, &CustomerFilter::default(), p))? {
        records.insert(
            format!("customer {}", customer.id),
            serde_json::to_value(&customer)?,
        );
    }
    for product in all(|p| service.list_products(actor, &ProductFilter::default(), p))? {
        records.insert(
            format!("product {}", product.id),
            serde_json::to_value(&product)?,
        );
    }
    Ok(records)
}

/// `text` cut to `max` bytes (on a character boundary), with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// An event's data as one line of JSON, its keys in alphabetical order (as `--data` shows it).
fn data_json(data: &EventData) -> String {
    serde_json::to_value(data)
        .map(|value| value.to_string())
        .unwrap_or_default()
}

fn write_event(out: &mut String, event: &Event) {
    let _ = writeln!(out, "event {} {}", event.kind(), event.id);
    let _ = writeln!(out, "  data: {}", cut(&data_json(&event.data), 2000));
}

/// A host error as the plugin got it.
pub fn describe_error(error: &HostError) -> String {
    match error {
        HostError::Forbidden(what) => format!("forbidden: {what}"),
        HostError::QuotaExceeded(secs) => format!("quota-exceeded: retry after {secs} s"),
        HostError::Invalid(e) => format!("invalid: `{}`: {}", e.field, e.message),
        HostError::NotFound => "not-found".to_owned(),
        HostError::RateLimited(secs) => format!("rate-limited: retry after {secs} s"),
        HostError::Conflict(e) => format!("conflict: {}: {}", e.code, e.message),
        HostError::Internal(m) => format!("internal: {m}"),
    }
}

fn write_calls(out: &mut String, calls: &[HostCall]) {
    let _ = writeln!(out, "host calls: {}", calls.len());
    let line = |call: &HostCall| {
        let result = match &call.error {
            None => "ok".to_owned(),
            Some(e) => format!("refused: {}", describe_error(e)),
        };
        format!(
            "{}({}) -> {result}",
            call.function,
            call.args.as_deref().unwrap_or("")
        )
    };
    // A flood of the same call (a loop) prints once, with how many times it repeated.
    let mut i = 0;
    while i < calls.len() {
        let first = line(&calls[i]);
        let mut same = 1;
        while i + same < calls.len() && line(&calls[i + same]) == first {
            same += 1;
        }
        let _ = writeln!(out, "  {first}");
        if same > 1 {
            let _ = writeln!(out, "  … the same {} more times", same - 1);
        }
        i += same;
    }
}

fn write_logs(out: &mut String, outcome: &Outcome) {
    let _ = writeln!(out, "logs: {}", outcome.logs.len());
    let shown = 50;
    for line in outcome.logs.iter().take(shown) {
        let _ = writeln!(out, "  [{}] {}", line.level, cut(&line.message, 500));
    }
    if outcome.logs.len() > shown {
        let _ = writeln!(out, "  … {} more lines", outcome.logs.len() - shown);
    }
}

fn write_messages(out: &mut String, messages: &[Message]) {
    let _ = writeln!(
        out,
        "notifications: {} (kept in the store's outbox: no sender is connected)",
        messages.len()
    );
    for message in messages {
        let n = &message.notification;
        let status = serde_json::to_value(n.status).unwrap_or_default();
        let channel = serde_json::to_value(n.channel).unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} {} to {}{} [{}]{}",
            channel.as_str().unwrap_or("?"),
            n.id,
            n.to.as_deref().unwrap_or("the merchant"),
            message
                .address
                .as_deref()
                .map(|a| format!(" ({a})"))
                .unwrap_or_default(),
            status.as_str().unwrap_or("?"),
            n.template
                .as_deref()
                .map(|t| format!(" template {t}"))
                .unwrap_or_default(),
        );
        if let Some(content) = &message.content {
            if let Some(subject) = &content.subject {
                let _ = writeln!(out, "    subject: {subject}");
            }
            if let Some(title) = &content.title {
                let _ = writeln!(out, "    title: {title}");
            }
            for line in cut(&content.body, 2000).lines() {
                let _ = writeln!(out, "    | {line}");
            }
        }
        if let Some(banner) = &n.banner {
            let _ = writeln!(
                out,
                "    {}",
                cut(&serde_json::to_string(banner).unwrap_or_default(), 500)
            );
        }
        if let Some(card) = &n.card {
            let _ = writeln!(
                out,
                "    {}",
                cut(&serde_json::to_string(card).unwrap_or_default(), 500)
            );
        }
    }
}

/// The records the plugin created, changed or deleted (field by field), and the events it fired.
/// The records the run created or changed, by key, with their values after the run.
fn changes_json(before: &BTreeMap<String, Value>, after: &BTreeMap<String, Value>) -> Value {
    let mut changes = Vec::new();
    for (key, new) in after {
        match before.get(key) {
            None => changes.push(json!({"change": "created", "record": key, "value": new})),
            Some(old) if old != new => {
                changes.push(json!({"change": "updated", "record": key, "value": new}));
            }
            Some(_) => {}
        }
    }
    Value::Array(changes)
}

fn write_changes(
    out: &mut String,
    before: &BTreeMap<String, Value>,
    after: &BTreeMap<String, Value>,
    fired: &[Event],
) {
    let mut lines = Vec::new();
    for (key, new) in after {
        match before.get(key) {
            None => lines.push(format!("created {key}: {}", cut(&new.to_string(), 300))),
            Some(old) if old != new => {
                let (Some(old), Some(new)) = (old.as_object(), new.as_object()) else {
                    continue;
                };
                let fields: Vec<String> = new
                    .iter()
                    .filter(|(field, value)| {
                        field.as_str() != "updated_at" && old.get(*field) != Some(*value)
                    })
                    .map(|(field, value)| {
                        format!(
                            "{field}: {} -> {}",
                            cut(
                                &old.get(field).cloned().unwrap_or(Value::Null).to_string(),
                                120
                            ),
                            cut(&value.to_string(), 120)
                        )
                    })
                    .collect();
                lines.push(format!("changed {key}: {}", fields.join("; ")));
            }
            Some(_) => {}
        }
    }
    for key in before.keys().filter(|k| !after.contains_key(*k)) {
        lines.push(format!("deleted {key}"));
    }
    let _ = writeln!(out, "records written: {}", lines.len());
    for line in lines {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "events fired: {}", fired.len());
    for event in fired {
        let _ = writeln!(out, "  {} {}", event.kind(), event.id);
    }
}
