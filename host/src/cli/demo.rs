//! `commerce-host demo`: the host with a demo store, products, customers, orders and the example
//! plugins built, published and installed. Seeding looks before it writes, so a second run on the
//! same data folder adds nothing.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use reqwest::Method;
use serde_json::{Value, json};

use super::client::HostClient;
use super::{package, plugin};

/// The demo store's domain.
pub const DOMAIN: &str = "demo.example";
/// The example plugins the demo installs (folders of `example-plugins/`).
pub const EXAMPLES: [&str; 4] = [
    "order-thanks",
    "low-stock-banner",
    "review-request",
    "customer-tagger",
];
/// The external "shop" plugin whose token the demo prints.
pub const SHOP: &str = "shop";
const ALL_SCOPES: [&str; 6] = [
    "orders.read",
    "orders.write",
    "products.read",
    "products.write",
    "customers.read",
    "customers.write",
];

/// The repository's `example-plugins/` folder, as known when this tool was built.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(
        || PathBuf::from("example-plugins"),
        |r| r.join("example-plugins"),
    )
}

/// Builds the example plugins (release, wasm32-wasip2) into `target_dir` and returns the folder
/// of the components.
pub fn build_examples(target_dir: &Path, echo: bool) -> anyhow::Result<PathBuf> {
    package::cargo_build(&examples_dir().join("Cargo.toml"), Some(target_dir), echo)?;
    Ok(target_dir.join(package::TARGET).join("release"))
}

/// What the demo made (or found).
#[derive(Debug, Clone)]
pub struct Demo {
    /// The demo store's id.
    pub store: String,
    /// The `shop` plugin's project token (all scopes).
    pub token: String,
    /// Installation ids by plugin name.
    pub installations: Vec<(String, String)>,
    /// The people who sign in to the pages.
    pub accounts: Vec<DemoAccount>,
}

/// A demo account and its password (kept in `<data>/demo-accounts`).
#[derive(Debug, Clone)]
pub struct DemoAccount {
    /// `owner` or `developer`.
    pub role: String,
    /// The sign-in address.
    pub email: String,
    /// The password.
    pub password: String,
}

/// Seeds the host behind `client`: the demo store, the example plugins (components from
/// `components`) and the `shop` plugin, published and installed, then products, customers and
/// orders through the `/v1` API. The shop token is kept in `token_file` (mode 0600) because the
/// host shows it only once.
pub async fn seed(
    client: &HostClient,
    components: &Path,
    token_file: &Path,
) -> anyhow::Result<Demo> {
    let store = ensure_store(client).await?;
    let accounts_file = token_file.with_file_name("demo-accounts");
    let accounts = ensure_accounts(client, &store, &accounts_file).await?;
    let published = all(client, "/admin/v1/plugins").await?;
    let version_of = |name: &str| {
        published
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["version"].as_str().map(str::to_owned))
    };
    // The example plugins are the demo developer's: a plugin new to the host is published with
    // a key made in their console, so that the console shows it, its installation and its
    // deliveries. A newer version of one already there goes through the operator, which keeps
    // its developer.
    let mut developer: Option<HostClient> = None;
    for name in EXAMPLES {
        let dir = examples_dir().join(name);
        let manifest = package::check(&dir)?.manifest;
        let known = version_of(name);
        if known.as_deref() == Some(manifest.version.as_str()) {
            continue;
        }
        let component = components.join(format!("{}.wasm", name.replace('-', "_")));
        if known.is_some() {
            plugin::publish(client, &dir, Some(&component)).await?;
            continue;
        }
        if developer.is_none() {
            let account = accounts
                .iter()
                .find(|a| a.role == "developer")
                .ok_or_else(|| anyhow!("the demo has no developer account"))?;
            let key = developer_key(client.base(), account).await?;
            developer = Some(HostClient::new(client.base(), &key));
        }
        if let Some(developer) = &developer {
            plugin::publish_to(developer, "/dev/v1/plugins", &dir, Some(&component)).await?;
        }
    }
    if version_of(SHOP).is_none() {
        let manifest = json!({"name": SHOP, "version": "1.0.0", "scopes": ALL_SCOPES,
            "description": "The demo's external plugin: call the /v1 API with its token.",
            "contact_email": "dev@shop.example"});
        client
            .admin(
                Method::POST,
                "/admin/v1/plugins",
                Some(&json!({ "manifest": manifest })),
            )
            .await?;
    }
    let existing = all(client, &format!("/admin/v1/stores/{store}/installations")).await?;
    let mut installations = Vec::new();
    for name in EXAMPLES.into_iter().chain([SHOP]) {
        let active = existing
            .iter()
            .find(|i| i["plugin"] == name && i["uninstalled_at"].is_null());
        let id = match active {
            Some(inst) => inst["id"].as_str().unwrap_or_default().to_owned(),
            None => {
                let inst = plugin::install(client, &store, name).await?;
                if name == SHOP {
                    let token = inst["token"].as_str().unwrap_or_default();
                    crate::config::write_private(token_file, token)
                        .with_context(|| format!("writing {}", token_file.display()))?;
                }
                inst["id"].as_str().unwrap_or_default().to_owned()
            }
        };
        installations.push((name.to_owned(), id));
    }
    let token = std::fs::read_to_string(token_file)
        .map(|t| t.trim().to_owned())
        .map_err(|_| {
            anyhow!(
                "the shop plugin is installed but {} is gone: uninstall it and run the demo again",
                token_file.display()
            )
        })?;
    seed_catalogue(client, &store, &token).await?;
    Ok(Demo {
        store,
        token,
        installations,
        accounts,
    })
}

/// The demo's people: the store's owner and a plugin developer.
const DEMO_ACCOUNTS: [(&str, &str); 2] = [
    ("owner", "owner@demo.example"),
    ("developer", "dev@demo.example"),
];

/// The demo's accounts with their passwords: read from `file` after the first demo, else
/// invited through the operator API and accepted through their mailed links as a browser would
/// (the links are in the operator's outbox), then written to `file` (mode 0600).
async fn ensure_accounts(
    client: &HostClient,
    store: &str,
    file: &Path,
) -> anyhow::Result<Vec<DemoAccount>> {
    if let Ok(text) = std::fs::read_to_string(file) {
        let accounts: Vec<DemoAccount> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_whitespace();
                Some(DemoAccount {
                    role: parts.next()?.to_owned(),
                    email: parts.next()?.to_owned(),
                    password: parts.next()?.to_owned(),
                })
            })
            .collect();
        if accounts.len() == DEMO_ACCOUNTS.len() {
            return Ok(accounts);
        }
    }
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let mut accounts = Vec::new();
    for (role, email) in DEMO_ACCOUNTS {
        let path = match role {
            "owner" => format!("/admin/v1/stores/{store}/invitations"),
            _ => "/admin/v1/developer-invitations".to_owned(),
        };
        client
            .admin(Method::POST, &path, Some(&json!({ "email": email })))
            .await
            .with_context(|| {
                format!(
                    "inviting {email} (if the demo's accounts exist but {} is gone, start over with a new data folder)",
                    file.display()
                )
            })?;
        let mail = all(client, "/admin/v1/mail").await?;
        let body = mail
            .iter()
            .rev()
            .find(|m| m["to"] == email)
            .and_then(|m| m["body"].as_str())
            .ok_or_else(|| anyhow!("the invitation of {email} is not in the outbox"))?;
        let link = body
            .split_whitespace()
            .find(|w| w.contains("/invitations/"))
            .ok_or_else(|| anyhow!("no link in the invitation of {email}"))?;
        let password = crate::service::auth::new_token()
            .chars()
            .rev()
            .take(16)
            .collect::<String>();
        accept(&browser, link, &password).await?;
        accounts.push(DemoAccount {
            role: role.to_owned(),
            email: email.to_owned(),
            password,
        });
    }
    let text: String = accounts
        .iter()
        .map(|a| format!("{} {} {}\n", a.role, a.email, a.password))
        .collect();
    crate::config::write_private(file, &text)
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(accounts)
}

/// The `name=value` pair of the cookie `name` that `response` sets, if it sets one.
fn cookie_set(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| {
            c.split(';')
                .next()
                .filter(|p| p.strip_prefix(name).is_some_and(|v| v.starts_with('=')))
        })
        .map(str::to_owned)
}

/// The value of the `csrf` field of the first form in `page`.
fn form_token(page: &str) -> Option<&str> {
    let marker = r#"name="csrf" value=""#;
    page.split_once(marker)
        .and_then(|(_, rest)| rest.split('"').next())
}

/// An API key of the demo's developer, made in the console as a browser does: signs in, then
/// makes a key named `demo` and reads it off the page that shows it once.
async fn developer_key(base: &str, account: &DemoAccount) -> anyhow::Result<String> {
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let form = browser.get(format!("{base}/sign-in")).send().await?;
    let form_cookie = cookie_set(&form, crate::http::pages::FORM_COOKIE)
        .ok_or_else(|| anyhow!("the sign-in page set no form cookie"))?;
    let page = form.text().await?;
    let csrf = form_token(&page).ok_or_else(|| anyhow!("the sign-in page has no form token"))?;
    let signed = browser
        .post(format!("{base}/sign-in"))
        .header(reqwest::header::COOKIE, form_cookie)
        .form(&[
            ("csrf", csrf),
            ("email", account.email.as_str()),
            ("password", account.password.as_str()),
        ])
        .send()
        .await?;
    let session = cookie_set(&signed, crate::http::pages::SESSION_COOKIE).ok_or_else(|| {
        anyhow!(
            "signing in as {} answered {}",
            account.email,
            signed.status()
        )
    })?;
    let console = browser
        .get(format!("{base}/developer"))
        .header(reqwest::header::COOKIE, &session)
        .send()
        .await?
        .text()
        .await?;
    let csrf = form_token(&console).ok_or_else(|| anyhow!("the console has no form token"))?;
    let made = browser
        .post(format!("{base}/developer/keys"))
        .header(reqwest::header::COOKIE, &session)
        .form(&[("csrf", csrf), ("name", "demo")])
        .send()
        .await?
        .text()
        .await?;
    made.split_once(r#"<code class="token">"#)
        .and_then(|(_, rest)| rest.split('<').next())
        .filter(|key| key.starts_with("chk_"))
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("the console showed no new key"))
}

/// Opens an invitation `link` and sets `password`, as a browser does.
async fn accept(browser: &reqwest::Client, link: &str, password: &str) -> anyhow::Result<()> {
    let form = browser.get(link).send().await?;
    let cookie = cookie_set(&form, crate::http::pages::FORM_COOKIE)
        .ok_or_else(|| anyhow!("the invitation page set no form cookie"))?;
    let page = form.text().await?;
    let csrf = form_token(&page).ok_or_else(|| anyhow!("the invitation page has no form token"))?;
    let answer = browser
        .post(link)
        .header(reqwest::header::COOKIE, cookie)
        .form(&[
            ("csrf", csrf),
            ("password", password),
            ("confirm", password),
        ])
        .send()
        .await?;
    if !answer.status().is_success() {
        bail!(
            "setting the password at {link} answered {}",
            answer.status()
        );
    }
    Ok(())
}

async fn ensure_store(client: &HostClient) -> anyhow::Result<String> {
    let stores = all(client, "/admin/v1/stores").await?;
    if let Some(store) = stores.iter().find(|s| s["domain"] == DOMAIN) {
        return Ok(store["id"].as_str().unwrap_or_default().to_owned());
    }
    let store = client
        .admin(
            Method::POST,
            "/admin/v1/stores",
            Some(&json!({ "domain": DOMAIN })),
        )
        .await?;
    Ok(store["id"].as_str().unwrap_or_default().to_owned())
}

/// Every item of a listing (250 per page).
async fn all(client: &HostClient, path: &str) -> anyhow::Result<Vec<Value>> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}?limit=250&cursor={c}"),
            None => format!("{path}?limit=250"),
        };
        let page = client.admin(Method::GET, &url, None).await?;
        items.extend(page["data"].as_array().cloned().unwrap_or_default());
        match page["next_cursor"].as_str() {
            Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
            _ => return Ok(items),
        }
    }
}

/// Products, customers and orders, each only when the store has none yet.
async fn seed_catalogue(client: &HostClient, store: &str, token: &str) -> anyhow::Result<()> {
    let call = |method: Method, path: String, body: Option<Value>| async move {
        client.send(method, &path, token, body.as_ref()).await
    };
    let empty = |page: Value| page["data"].as_array().is_none_or(Vec::is_empty);
    let mut variants = Vec::new();
    if empty(call(Method::GET, "/v1/products?limit=1".into(), None).await?) {
        for (title, price, stock, low) in [
            ("Stoneware mug", 1250, 12, 3),
            ("Loose-leaf tea, 100 g", 800, 6, 5),
            ("Linen tea towel", 1500, 30, 5),
        ] {
            let product = call(
                Method::POST,
                "/v1/products".into(),
                Some(
                    json!({"title": title, "variants": [{"price": price, "currency": "EUR",
                    "inventory_quantity": stock, "low_stock_threshold": low}]}),
                ),
            )
            .await?;
            variants.push(
                product["variants"][0]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    let mut customers = Vec::new();
    if empty(call(Method::GET, "/v1/customers?limit=1".into(), None).await?) {
        for (first, email) in [("Ada", "ada@demo.example"), ("Grace", "grace@demo.example")] {
            let customer = call(
                Method::POST,
                "/v1/customers".into(),
                Some(json!({"email": email, "first_name": first})),
            )
            .await?;
            customers.push(customer["id"].as_str().unwrap_or_default().to_owned());
        }
    }
    if variants.len() == 3
        && customers.len() == 2
        && empty(call(Method::GET, "/v1/orders?limit=1".into(), None).await?)
    {
        // Ada's paid order (a thank-you email, a `first-order` tag), Grace's paid order, and an
        // open one of Ada's left for the visitor to pay.
        for (customer, variant, quantity, pay) in [
            (&customers[0], &variants[0], 2, true),
            (&customers[1], &variants[1], 1, true),
            (&customers[0], &variants[2], 1, false),
        ] {
            let order = call(
                Method::POST,
                "/v1/orders".into(),
                Some(json!({"currency": "EUR", "customer_id": customer,
                    "line_items": [{"variant_id": variant, "quantity": quantity}]})),
            )
            .await?;
            if pay {
                let id = order["id"].as_str().unwrap_or_default();
                client
                    .admin(
                        Method::POST,
                        &format!("/admin/v1/stores/{store}/orders/{id}/payments"),
                        Some(&json!({"amount": order["total"], "currency": order["currency"]})),
                    )
                    .await?;
            }
        }
    }
    Ok(())
}

/// What to try next, for the demo's banner on stdout. `program` is how to run this binary
/// again (its path, so that the `plugin logs` line runs where `commerce-host` is not on the
/// `PATH`, as under `cargo run`).
pub fn next_steps(base: &str, admin_token_path: &Path, program: &Path, demo: &Demo) -> String {
    let store = &demo.store;
    let token = &demo.token;
    let admin = shell_quoted(&admin_token_path.display().to_string());
    let program = shell_quoted(&program.display().to_string());
    format!(
        r#"
The demo store {DOMAIN} is {store}, with products, customers, orders and the example plugins
{examples} installed.

Open {base}/sign-in and sign in (the passwords are also in the data folder, demo-accounts):
{accounts}

Project token of the demo's "shop" plugin (all scopes): {token}

Try:
  ADMIN="Authorization: Bearer $(cat {admin})"
  SHOP="Authorization: Bearer {token}"
  # an order (pick a variant id from the first call)
  curl -s -H "$SHOP" {base}/v1/products
  curl -s -H "$SHOP" -H 'content-type: application/json' {base}/v1/orders \
    -d '{{"currency":"EUR","customer_id":"<cus_… from /v1/customers>","line_items":[{{"variant_id":"<var_…>","quantity":1}}]}}'
  # pay it as the gateway would: order-thanks emails, customer-tagger tags it
  curl -s -H "$ADMIN" -H 'content-type: application/json' {base}/admin/v1/stores/{store}/orders/<ord_…>/payments \
    -d '{{"amount":<total>,"currency":"EUR"}}'
  curl -s -H "$ADMIN" {base}/admin/v1/stores/{store}/outbox        # the thank-you emails
  curl -s -H "$SHOP" {base}/v1/orders/<ord_…>                       # tags: first-order / repeat-customer
  # sell the tea down to its low-stock threshold: low-stock-banner warns
  curl -s -H "$SHOP" -H 'content-type: application/json' {base}/v1/inventory/adjust -d '{{"variant_id":"<var_… of the tea>","set":2}}'
  curl -s -H "$ADMIN" {base}/admin/v1/stores/{store}/banners
  # ship an order: review-request posts a feed card
  curl -s -H "$SHOP" -H 'content-type: application/json' {base}/v1/orders/<ord_…>/fulfillments -d '{{}}'   # every line item
  curl -s -H "$ADMIN" {base}/admin/v1/stores/{store}/feed
  # what a plugin did, with its log lines
  COMMERCE_HOST_ADMIN_TOKEN="$(cat {admin})" {program} plugin logs --host {base} --store {store} --installation <inst_… below>
{installations}"#,
        examples = EXAMPLES.join(", "),
        accounts = demo
            .accounts
            .iter()
            .map(|a| format!("    {:<9}  {}  {}", a.role, a.email, a.password))
            .collect::<Vec<_>>()
            .join("\n"),
        installations = demo
            .installations
            .iter()
            .map(|(name, id)| format!("    {name}: {id}"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// `text` as one word for a POSIX shell: in single quotes, each single quote in it closed,
/// escaped and reopened.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
