//! The plugin command line and the demo, against the real host: each example plugin published
//! and installed through the CLI's own functions, its event fired over the API, its effect seen.

use commerce_host::cli::client::HostClient;
use commerce_host::cli::{demo, package, plugin, scaffold};
use commerce_host_tests::components::{component_file, components_dir, plugin_dir};
use commerce_host_tests::{ADMIN_TOKEN, ALL_SCOPES, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::{Value, json};

fn client(host: &TestHost) -> HostClient {
    HostClient::new(&host.base, ADMIN_TOKEN)
}

/// A store with the example plugin `name` published and installed through the CLI, and a
/// project token with every scope to drive the store. Returns (store, installation, token).
async fn store_with_example(host: &TestHost, domain: &str, name: &str) -> (String, String, String) {
    let cli = client(host);
    let published = plugin::publish(&cli, &plugin_dir(name), Some(&component_file(name)))
        .await
        .expect("published through the CLI");
    assert_eq!(published["name"], name);
    let store = host.create_store(domain).await;
    let installed = plugin::install(&cli, &store, name)
        .await
        .expect("installed through the CLI");
    let inst = installed["id"]
        .as_str()
        .expect("installation id")
        .to_owned();
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;
    (store, inst, token)
}

async fn customer(host: &TestHost, token: &str, first_name: &str) -> String {
    let reply = host
        .call(
            token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": format!("{}@shop.example", first_name.to_lowercase()), "first_name": first_name})),
        )
        .await
        .expect(201);
    reply.body["id"].as_str().expect("customer id").to_owned()
}

async fn order(host: &TestHost, token: &str, customer: &str) -> Value {
    host.call(
        token,
        Method::POST,
        "/v1/orders",
        Some(json!({"currency": "EUR", "customer_id": customer,
            "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 1}]})),
    )
    .await
    .expect(201)
    .body
}

/// Waits until the installation's newest attempt succeeded, and returns the attempts as the
/// `plugin logs` command prints them.
async fn logs_after_success(host: &TestHost, store: &str, inst: &str) -> String {
    let cli = client(host);
    host.eventually("a successful attempt", || async {
        let attempts = plugin::attempts(&cli, store, inst, 10).await.ok()?;
        let newest = attempts.first()?;
        assert_ne!(newest["succeeded"], false, "the attempt failed: {newest}");
        Some(plugin::format_attempts(&attempts))
    })
    .await
}

#[tokio::test]
async fn order_thanks_through_the_cli_emails_the_customer_when_an_order_is_paid() {
    let host = TestHost::start().await;
    let (store, inst, token) = store_with_example(&host, "thanks.example", "order-thanks").await;
    let ada = customer(&host, &token, "Ada").await;
    let placed = order(&host, &token, &ada).await;
    host.pay(&store, &placed).await.expect(200);
    let id = placed["id"].as_str().expect("order id");
    let outbox = host
        .eventually("the thank-you email", || async {
            let page = host
                .admin(
                    Method::GET,
                    &format!("/admin/v1/stores/{store}/outbox"),
                    None,
                )
                .await
                .expect(200);
            page.body
                .to_string()
                .contains(&format!("Thank you for your order {id}"))
                .then_some(page.body)
        })
        .await;
    assert!(outbox.to_string().contains("ada@shop.example"), "{outbox}");
    let logs = logs_after_success(&host, &store, &inst).await;
    assert!(
        logs.contains("order.paid") && logs.contains("ok") && logs.contains("thank-you for"),
        "{logs}"
    );
}

#[tokio::test]
async fn low_stock_banner_through_the_cli_warns_when_stock_falls_to_the_threshold() {
    let host = TestHost::start().await;
    let (store, inst, token) = store_with_example(&host, "stock.example", "low-stock-banner").await;
    let product = host
        .call(
            &token,
            Method::POST,
            "/v1/products",
            Some(json!({"title": "Mug", "variants": [{"price": 1250, "currency": "EUR", "inventory_quantity": 10, "low_stock_threshold": 3}]})),
        )
        .await
        .expect(201)
        .body;
    let (product_id, variant) = (
        product["id"].as_str().expect("id"),
        &product["variants"][0]["id"],
    );
    host.call(
        &token,
        Method::POST,
        "/v1/inventory/adjust",
        Some(json!({"variant_id": variant, "set": 2})),
    )
    .await
    .expect(200);
    let banner = host
        .eventually("a banner", || async {
            let page = host
                .admin(
                    Method::GET,
                    &format!("/admin/v1/stores/{store}/banners"),
                    None,
                )
                .await
                .expect(200);
            page.body["data"]
                .as_array()
                .and_then(|b| b.first().cloned())
        })
        .await;
    assert_eq!(banner["tone"], "warn", "{banner}");
    assert_eq!(banner["title"], "Mug is running low", "{banner}");
    let text = banner.to_string();
    assert!(
        text.contains(&format!("/products/{product_id}")) && text.contains("Dismiss"),
        "{text}"
    );
    logs_after_success(&host, &store, &inst).await;
}

#[tokio::test]
async fn review_request_through_the_cli_posts_a_feed_card_when_an_order_ships() {
    let host = TestHost::start().await;
    let (store, inst, token) = store_with_example(&host, "review.example", "review-request").await;
    let ada = customer(&host, &token, "Ada").await;
    let placed = order(&host, &token, &ada).await;
    host.pay(&store, &placed).await.expect(200);
    let id = placed["id"].as_str().expect("order id");
    let line = placed["line_items"][0]["id"].clone();
    host.call(
        &token,
        Method::POST,
        &format!("/v1/orders/{id}/fulfillments"),
        Some(json!({"line_items": [{"line_item_id": line, "quantity": 1}]})),
    )
    .await
    .expect(201);
    let card = host
        .eventually("a feed card", || async {
            let page = host
                .admin(Method::GET, &format!("/admin/v1/stores/{store}/feed"), None)
                .await
                .expect(200);
            page.body["data"]
                .as_array()
                .and_then(|c| c.first().cloned())
        })
        .await;
    assert_eq!(card["title"], "Ask Ada for a review", "{card}");
    assert!(
        card.to_string().contains(&format!("/orders/{id}")),
        "{card}"
    );
    logs_after_success(&host, &store, &inst).await;
}

#[tokio::test]
async fn customer_tagger_through_the_cli_tags_first_and_repeat_orders() {
    let host = TestHost::start().await;
    let (store, inst, token) = store_with_example(&host, "tags.example", "customer-tagger").await;
    let ada = customer(&host, &token, "Ada").await;
    let tags_of = |id: String| {
        let (host, token) = (&host, &token);
        async move {
            host.eventually("a tag", || async {
                let order = host
                    .call(token, Method::GET, &format!("/v1/orders/{id}"), None)
                    .await
                    .expect(200);
                let tags = order.body["tags"].as_array().cloned().unwrap_or_default();
                (!tags.is_empty()).then_some(tags)
            })
            .await
        }
    };
    let first = order(&host, &token, &ada).await;
    host.pay(&store, &first).await.expect(200);
    assert_eq!(
        tags_of(first["id"].as_str().expect("id").to_owned()).await,
        vec![json!("first-order")]
    );
    host.clock.advance(SignedDuration::from_secs(60));
    let second = order(&host, &token, &ada).await;
    host.pay(&store, &second).await.expect(200);
    assert_eq!(
        tags_of(second["id"].as_str().expect("id").to_owned()).await,
        vec![json!("repeat-customer")]
    );
    logs_after_success(&host, &store, &inst).await;
}

#[tokio::test]
async fn a_new_plugin_builds_and_its_component_publishes_and_installs() {
    let host = TestHost::start().await;
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("my-thanks");
    scaffold::new_plugin("my-thanks", &dir, &scaffold::default_sdk()).expect("plugin new");
    for file in [
        "Cargo.toml",
        "plugin.toml",
        "templates/my-thanks.toml",
        "src/lib.rs",
        "README.md",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    // Beside the example plugins' build, so that a rerun rebuilds only the new crate.
    let target = components_dir().join("../../../plugin-new");
    let build_dir = dir.clone();
    let built =
        tokio::task::spawn_blocking(move || package::build(&build_dir, Some(&target), false))
            .await
            .expect("build task")
            .expect("plugin build");
    assert!(built.size > 1000, "{built:?}");
    let cli = client(&host);
    let published = plugin::publish(&cli, &dir, Some(&built.path))
        .await
        .expect("plugin publish");
    assert_eq!(
        (published["name"].as_str(), published["version"].as_str()),
        (Some("my-thanks"), Some("0.1.0"))
    );
    let store = host.create_store("new.example").await;
    let installed = plugin::install(&cli, &store, "my-thanks")
        .await
        .expect("plugin install");
    assert!(
        installed["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("inst_")),
        "{installed}"
    );
}

fn plugin_folder(manifest: &str, template: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("plugin.toml"), manifest).expect("write");
    if let Some(template) = template {
        std::fs::create_dir(dir.path().join("templates")).expect("mkdir");
        std::fs::write(dir.path().join("templates/thanks.toml"), template).expect("write");
    }
    dir
}

const MANIFEST: &str = "name = \"typo\"\nversion = \"1.0.0\"\nscopes = [\"orders.read\"]\ncontact_email = \"d@typo.example\"\n";

#[test]
fn a_manifest_typo_names_the_field() {
    let unknown = plugin_folder(&MANIFEST.replace("scopes", "scoeps"), None);
    let text = package::check(unknown.path())
        .expect_err("refused")
        .to_string();
    assert!(
        text.contains("plugin.toml") && text.contains("unknown field `scoeps`"),
        "{text}"
    );

    let invalid = plugin_folder(&format!("{MANIFEST}events = [\"order.payed\"]\n"), None);
    let text = package::check(invalid.path())
        .expect_err("refused")
        .to_string();
    assert!(text.contains("order.payed"), "{text}");

    let bad_email = plugin_folder(&MANIFEST.replace("d@typo.example", "nobody"), None);
    let text = package::check(bad_email.path())
        .expect_err("refused")
        .to_string();
    assert!(text.contains("`contact_email`"), "{text}");
}

#[test]
fn a_template_variable_not_declared_is_named_with_its_file() {
    let dir = plugin_folder(
        MANIFEST,
        Some(
            "variables = [\"order_id\"]\n[email]\nsubject = \"Order {{ order_id }}\"\nbody = \"Total {{ total }}\"\n",
        ),
    );
    let text = package::check(dir.path()).expect_err("refused").to_string();
    assert!(
        text.contains("thanks.toml") && text.contains("total") && text.contains("variables"),
        "{text}"
    );
}

#[tokio::test]
async fn an_unreachable_host_is_named_with_how_to_start_one() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let cli = HostClient::new(&base, ADMIN_TOKEN);
    let text = plugin::install(&cli, "store_x", "order-thanks")
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        text.contains(&base) && text.contains("commerce-host serve"),
        "{text}"
    );
}

#[tokio::test]
async fn host_errors_read_as_code_message_and_field() {
    let host = TestHost::start().await;
    let error = plugin::install(&client(&host), "store_nope", "order-thanks")
        .await
        .expect_err("refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("not_found") || text.contains("invalid"),
        "{text}"
    );
}

#[tokio::test]
async fn the_demo_seeded_twice_adds_nothing() {
    let host = TestHost::start().await;
    let cli = client(&host);
    let token_file = host.data_dir().join("demo-shop-token");
    let first = demo::seed(&cli, &components_dir(), &token_file)
        .await
        .expect("first seeding");
    let count = |path: String, token: Option<String>| {
        let host = &host;
        async move {
            let reply = host
                .send(
                    Method::GET,
                    &format!("{path}?limit=250"),
                    Some(token.as_deref().unwrap_or(ADMIN_TOKEN)),
                    None,
                )
                .await
                .expect(200);
            reply.body["data"].as_array().map_or(0, Vec::len)
        }
    };
    let snapshot = || async {
        (
            count("/admin/v1/stores".into(), None).await,
            count("/admin/v1/plugins".into(), None).await,
            count(
                format!("/admin/v1/stores/{}/installations", first.store),
                None,
            )
            .await,
            count("/v1/products".into(), Some(first.token.clone())).await,
            count("/v1/customers".into(), Some(first.token.clone())).await,
            count("/v1/orders".into(), Some(first.token.clone())).await,
        )
    };
    let before = snapshot().await;
    assert_eq!(before, (1, 5, 5, 3, 2, 3));
    let second = demo::seed(&cli, &components_dir(), &token_file)
        .await
        .expect("second seeding");
    assert_eq!(second.store, first.store);
    assert_eq!(second.token, first.token);
    assert_eq!(second.installations, first.installations);
    assert_eq!(snapshot().await, before);
    // Its owner and developer, with the same passwords the second time; the owner signs in.
    let roles: Vec<&str> = first.accounts.iter().map(|a| a.role.as_str()).collect();
    assert_eq!(roles, ["owner", "developer"]);
    let passwords = |d: &demo::Demo| {
        d.accounts
            .iter()
            .map(|a| a.password.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(passwords(&second), passwords(&first));
    // The example plugins are the developer's, published once with a key from their console;
    // the external shop is the operator's. Their console lists them with the demo store.
    let mut owners = Vec::new();
    for name in demo::EXAMPLES.iter().chain([&demo::SHOP]) {
        let plugin = host
            .admin(Method::GET, &format!("/admin/v1/plugins/{name}"), None)
            .await
            .expect(200);
        owners.push(plugin.body["owner"].clone());
    }
    assert!(
        owners[0].as_str().is_some_and(|o| o.starts_with("acct_")),
        "{owners:?}"
    );
    assert!(owners[..4].iter().all(|o| *o == owners[0]), "{owners:?}");
    assert_eq!(owners[4], Value::Null, "{owners:?}");
    let developer = &first.accounts[1];
    let mut console = commerce_host_tests::pages::Browser::new(&host);
    let form = console.get("/sign-in").await;
    let signed_in = console
        .post(
            "/sign-in",
            &[
                ("csrf", &form.csrf()),
                ("email", &developer.email),
                ("password", &developer.password),
            ],
        )
        .await;
    assert_eq!(signed_in.status.as_u16(), 303, "{}", signed_in.body);
    let page = console.get("/developer").await;
    for part in demo::EXAMPLES.iter().chain([&demo::DOMAIN]) {
        assert!(page.body.contains(part), "{part:?}:\n{}", page.body);
    }
    let owner = &first.accounts[0];
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let form = browser
        .get(format!("{}/sign-in", host.base))
        .send()
        .await
        .expect("the sign-in page");
    let cookie = form
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .expect("a form cookie")
        .to_owned();
    let csrf = cookie.trim_start_matches("commerce_form=").to_owned();
    let signed = browser
        .post(format!("{}/sign-in", host.base))
        .header("cookie", &cookie)
        .form(&[
            ("csrf", csrf.as_str()),
            ("email", &owner.email),
            ("password", &owner.password),
        ])
        .send()
        .await
        .expect("signed in");
    assert_eq!(signed.status(), 303);
    let text = demo::next_steps(
        &host.base,
        &host.data_dir().join("admin-token"),
        std::path::Path::new("commerce-host"),
        &first,
    );
    assert!(
        text.contains(&owner.password) && text.contains("/sign-in"),
        "{text}"
    );
    // The demo's paid orders went through the plugins.
    host.eventually("the demo's thank-you emails", || async {
        let page = host
            .admin(
                Method::GET,
                &format!("/admin/v1/stores/{}/outbox", first.store),
                None,
            )
            .await
            .expect(200);
        (page.body["data"].as_array().map_or(0, Vec::len) >= 2).then_some(())
    })
    .await;
}

/// The walkthrough `demo` prints ("Try:"), run as printed: each `curl` line, its placeholders
/// filled in as a reader would (a customer, a variant, the order the walkthrough placed and its
/// total, the tea), answers with a success, and the plugins do what its comments say. Each
/// placeholder the text uses must be one this test knows, so a new step is run here too.
#[tokio::test]
async fn the_demos_walkthrough_runs_as_printed() {
    let host = TestHost::start().await;
    let demo = demo::seed(
        &client(&host),
        &components_dir(),
        &host.data_dir().join("demo-shop-token"),
    )
    .await
    .expect("seeding");
    // The host under test takes its admin token from its configuration; a host started by
    // `demo` writes it to this file, which the walkthrough reads.
    let admin_token = host.data_dir().join("admin-token");
    std::fs::write(&admin_token, ADMIN_TOKEN).expect("write the admin token");
    let program = std::path::Path::new(env!("CARGO_BIN_EXE_test-commerce-host"));
    let text = demo::next_steps(&host.base, &admin_token, program, &demo);
    let mut commands = Vec::new();
    let mut command = String::new();
    for line in text.lines().map(str::trim) {
        if command.is_empty() && !line.starts_with("curl ") {
            continue;
        }
        let (part, continued) = line
            .strip_suffix('\\')
            .map_or((line, false), |part| (part, true));
        command.push_str(part);
        command.push(' ');
        if !continued {
            commands.push(std::mem::take(&mut command));
        }
    }
    assert_eq!(commands.len(), 9, "{text}");

    let shop = demo.token.as_str();
    let products = host
        .call(shop, Method::GET, "/v1/products?limit=250", None)
        .await
        .expect(200);
    let products = products.body["data"].as_array().expect("products").clone();
    let variant_of = |tea: bool| {
        products
            .iter()
            .find(|p| p["title"].as_str().is_some_and(|t| t.contains("tea,")) == tea)
            .and_then(|p| p["variants"][0]["id"].as_str())
            .expect("a variant")
            .to_owned()
    };
    let customers = host
        .call(shop, Method::GET, "/v1/customers", None)
        .await
        .expect(200);
    let customer = customers.body["data"][0]["id"]
        .as_str()
        .expect("a customer")
        .to_owned();
    let mut order: Option<(String, i64)> = None;
    for command in &commands {
        let (order_id, total) = order
            .clone()
            .map_or((None, None), |(id, total)| (Some(id), Some(total)));
        let mut filled = command
            .replace("<cus_… from /v1/customers>", &customer)
            .replace("<var_… of the tea>", &variant_of(true))
            .replace("<var_…>", &variant_of(false));
        if let (Some(id), Some(total)) = (order_id, total) {
            filled = filled
                .replace("<ord_…>", &id)
                .replace("<total>", &total.to_string());
        }
        assert!(!filled.contains('<'), "a placeholder left: {filled}");
        let token = if filled.contains(r#"-H "$SHOP""#) {
            shop
        } else {
            assert!(filled.contains(r#"-H "$ADMIN""#), "{filled}");
            ADMIN_TOKEN
        };
        let url = filled
            .split_whitespace()
            .find(|word| word.starts_with(&host.base))
            .expect("a URL");
        let path = &url[host.base.len()..];
        let body = filled.split_once("-d '").map(|(_, rest)| {
            let json = rest.split_once('\'').expect("a closing quote").0;
            serde_json::from_str::<Value>(json).expect("the body is JSON")
        });
        let method = if body.is_some() {
            Method::POST
        } else {
            Method::GET
        };
        let reply = host.send(method, path, Some(token), body).await;
        assert!(
            (200..300).contains(&reply.status),
            "{filled}\n→ {} {}",
            reply.status,
            reply.body
        );
        if path == "/v1/orders" {
            let id = reply.body["id"]
                .as_str()
                .expect("the order's id")
                .to_owned();
            order = Some((id, reply.body["total"].as_i64().expect("its total")));
        }
    }

    // What the comments promise: the thank-you email, the tag, the tea's banner, the feed card.
    let (order, _) = order.expect("the walkthrough placed an order");
    let store = &demo.store;
    let listed = |what: &str| {
        let path = format!("/admin/v1/stores/{store}/{what}");
        let host = &host;
        async move { host.admin(Method::GET, &path, None).await.expect(200).body }
    };
    host.eventually("the order's thank-you email", || async {
        listed("outbox")
            .await
            .to_string()
            .contains(&order)
            .then_some(())
    })
    .await;
    host.eventually("the order's tag", || async {
        let read = host
            .call(shop, Method::GET, &format!("/v1/orders/{order}"), None)
            .await
            .expect(200);
        (read.body["tags"].as_array().map_or(0, Vec::len) > 0).then_some(())
    })
    .await;
    let banners = listed("banners").await;
    assert!(banners.to_string().contains("Loose-leaf tea"), "{banners}");
    host.eventually("the shipped order's feed card", || async {
        listed("feed")
            .await
            .to_string()
            .contains(&order)
            .then_some(())
    })
    .await;

    // Its last line, run by a shell as printed: the order-thanks plugin's log shows the order.
    let logs = text
        .lines()
        .find(|line| line.contains(" plugin logs "))
        .expect("the plugin logs line");
    let (_, thanks) = demo
        .installations
        .iter()
        .find(|(plugin, _)| plugin == "order-thanks")
        .expect("order-thanks is installed");
    let logs = logs.replace("<inst_… below>", thanks);
    let shell = tokio::process::Command::new("sh")
        .args(["-c", &logs])
        .env_remove("COMMERCE_HOST_ADMIN_TOKEN")
        .output()
        .await
        .expect("run sh");
    let printed = String::from_utf8_lossy(&shell.stdout);
    assert!(
        shell.status.success() && printed.contains(&format!("thank-you for {order}")),
        "{logs}\n→ {}: {printed}{}",
        shell.status,
        String::from_utf8_lossy(&shell.stderr)
    );
}

/// `serve` announces itself only once its storage is open and its engine runs: on a data folder
/// another host holds, it fails with the reason and never prints its listening line (before, it
/// printed the line, then failed, and a supervisor that waited for the line sent its requests to
/// a host that was already gone). PostgreSQL is shared by design, so there the test is moot.
#[tokio::test]
async fn serve_on_a_folder_another_host_holds_fails_without_announcing_itself() {
    let data = tempfile::tempdir().expect("tempdir");
    if commerce_host_tests::test_database(data.path()).is_some() {
        return;
    }
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_test-commerce-host"));
    let (mut first, base) = commerce_host_tests::spawn_binary(binary, data.path(), &[]).await;
    let folder = data.path().to_owned();
    let second = tokio::task::spawn_blocking(move || {
        std::process::Command::new(binary)
            .env(
                "COMMERCE_HOST_STORE",
                commerce_host_tests::test_store().to_string(),
            )
            .env("COMMERCE_HOST_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("COMMERCE_HOST_LOG", "warn")
            .args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(&folder)
            .output()
    })
    .await;
    // The first host still serves its folder (asked before it is stopped, checked after, so
    // that nothing between its start and its stop can fail and leave it running).
    let health = reqwest::get(format!("{base}/healthz"))
        .await
        .map(|r| r.status().as_u16());
    first.kill().expect("kill the first host");
    first.wait().expect("wait for the first host");
    assert_eq!(health.ok(), Some(200), "the first host served meanwhile");
    let second = second
        .expect("the second host's task")
        .expect("run a second commerce-host");

    let stdout = String::from_utf8_lossy(&second.stdout);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success(),
        "the second host exited with {}",
        second.status
    );
    assert!(
        !stdout.contains("listening"),
        "the second host announced itself: {stdout}"
    );
    assert!(
        stderr.contains("could not acquire lock"),
        "the reason is named: {stderr}"
    );
}

/// `--store-cache-mib` (`COMMERCE_HOST_STORE_CACHE_MIB`) sizes the embedded store's cache: a
/// host started with the smallest one serves and writes, and a size under 8 MiB is refused at
/// the command line, naming the flag and the sizes it takes.
#[tokio::test]
async fn the_store_cache_is_sized_at_the_command_line_and_a_size_too_small_is_refused() {
    let data = tempfile::tempdir().expect("tempdir");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_test-commerce-host"));
    let mut refused = std::process::Command::new(binary)
        .env("COMMERCE_HOST_ADMIN_TOKEN", ADMIN_TOKEN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store-cache-mib",
            "4",
            "--data",
        ])
        .arg(data.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run commerce-host");
    let mut stderr = refused.stderr.take().expect("stderr");
    // A host that took the size would serve until killed: it has 30 s to exit.
    let status = commerce_host_tests::exit_within(refused, std::time::Duration::from_secs(30))
        .await
        .expect("a cache of 4 MiB was refused: the host exited");
    let stderr = {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).expect("read stderr");
        text
    };
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("--store-cache-mib") && stderr.contains("8..=1048576"),
        "the flag and its range are named: {stderr}"
    );
    assert!(
        !data.path().join("db").exists(),
        "nothing was opened: {stderr}"
    );

    let (mut host, base) = commerce_host_tests::spawn_binary(
        binary,
        data.path(),
        &[("COMMERCE_HOST_STORE_CACHE_MIB", "8")],
    )
    .await;
    let created = reqwest::Client::new()
        .post(format!("{base}/admin/v1/stores"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({ "domain": "cache.example" }))
        .send()
        .await
        .map(|r| r.status().as_u16());
    host.kill().expect("kill the host");
    host.wait().expect("wait for the host");
    assert_eq!(created.ok(), Some(201), "a store is created");
}
