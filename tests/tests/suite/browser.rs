//! The pages in a real browser: headless Chromium driven over WebDriver (chromedriver). An owner
//! accepts the mailed invitation, signs in, sees the banner a plugin posted over HTTP and the feed
//! card a component posted through the WIT `post-feed-card` call, dismisses both, and installs a
//! plugin through the consent page; another store's owner meets 404. A developer finds a failed
//! webhook delivery in the console, resumes the subscription, presses replay and sees the new
//! attempt. Screenshots of the pages go to `target/screenshots/`.
//!
//! Needs `chromium` and `chromedriver` (`.ci/run` installs Debian's `chromium` and
//! `chromium-driver`). Without them the test fails, saying so; set
//! `COMMERCE_HOST_SKIP_BROWSER=1` to skip it on a machine without a browser.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use commerce_host_tests::components::{publish_body, repo_root};
use commerce_host_tests::pages::invitation_link;
use commerce_host_tests::receiver::{Behavior, Receiver};
use commerce_host_tests::{ALL_SCOPES, TestHost};
use fantoccini::{Client, ClientBuilder, Locator};
use reqwest::Method;
use serde_json::{Value, json};

/// chromedriver on a free port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |n| dir.join(n)))
        .chain(names.iter().map(|n| PathBuf::from("/usr/bin").join(n)))
        .find(|p| p.is_file())
}

async fn start_driver() -> Option<(Driver, PathBuf)> {
    if std::env::var_os("COMMERCE_HOST_SKIP_BROWSER").is_some_and(|v| v == "1") {
        eprintln!("COMMERCE_HOST_SKIP_BROWSER=1: the browser test is skipped");
        return None;
    }
    let driver = find_program(&["chromedriver"]).expect(
        "chromedriver is not installed: install Debian's chromium and chromium-driver (.ci/run does), or set COMMERCE_HOST_SKIP_BROWSER=1",
    );
    let browser = find_program(&["chromium", "chromium-browser", "google-chrome"])
        .expect("chromium is not installed (Debian's package chromium)");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    // Owned at once, so that it is stopped (and waited for) whatever happens next.
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    for _ in 0..100 {
        if reqwest::get(format!("{}/status", driver.url)).await.is_ok() {
            return Some((driver, browser));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver did not answer on {}", driver.url);
}

async fn open_browser(
    driver: &Driver,
    binary: &std::path::Path,
    profile: &std::path::Path,
) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1100,900",
                format!("--user-data-dir={}", profile.display()),
            ]
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a browser session")
}

fn screenshots_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let dir = target.join("screenshots");
    std::fs::create_dir_all(&dir).expect("the screenshots folder");
    dir
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    let file = screenshots_dir().join(format!("{name}.png"));
    std::fs::write(&file, png).expect("saved");
    eprintln!("screenshot: {}", file.display());
}

async fn fill(browser: &Client, css: &str, text: &str) {
    let field = browser.find(Locator::Css(css)).await.expect(css);
    field.clear().await.expect("cleared");
    field.send_keys(text).await.expect("typed");
}

async fn click(browser: &Client, css: &str) {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .expect("clicked");
}

/// The text of the page, once the page a click led to has loaded (a body read while the
/// previous page goes away is stale: read again).
async fn page_text(browser: &Client) -> String {
    let mut last = None;
    for _ in 0..50 {
        match browser.find(Locator::Css("body")).await {
            Ok(body) => match body.text().await {
                Ok(text) => return text,
                Err(e) => last = Some(e),
            },
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the page's text: {last:?}");
}

/// An owner of `store` through the pages: the invitation accepted, then signed in.
async fn owner_through_the_pages(
    host: &TestHost,
    browser: &Client,
    store: &str,
    email: &str,
    shots: bool,
) {
    host.admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/invitations"),
        Some(json!({"email": email})),
    )
    .await
    .expect(201);
    accept_through_the_pages(host, browser, email, shots).await;
    wait_for_path(browser, "/stores/").await;
}

/// Follows the invitation mailed to `email`: sets a password, then signs in.
async fn accept_through_the_pages(host: &TestHost, browser: &Client, email: &str, shots: bool) {
    browser
        .goto(&invitation_link(host, email).await)
        .await
        .expect("the invitation page");
    fill(browser, "#password", "correct horse battery").await;
    fill(browser, "#confirm", "correct horse battery").await;
    if shots {
        screenshot(browser, "invitation").await;
    }
    click(browser, "button[type=submit]").await;
    // The click may return before the form's answer is in: read until it is.
    until_shown_once(browser, "Your password is set").await;
    fill(browser, "#password", "correct horse battery").await;
    if shots {
        screenshot(browser, "sign-in").await;
    }
    click(browser, "button[type=submit]").await;
}

/// Reloads the page until its text contains `what`.
async fn until_shown(browser: &Client, what: &str) -> String {
    wait_for_text(browser, what, true).await
}

/// Waits, without reloading, until the page's text contains `what`: for what a page shows only
/// once (a notice after a form's redirect, a new key), which a reload would clear. A click on a
/// form's button may return before the redirected page is in, so the page is read until it is.
async fn until_shown_once(browser: &Client, what: &str) -> String {
    wait_for_text(browser, what, false).await
}

/// Reads the page's text until it contains `what` (for about 10 s), reloading between reads when
/// `reload`.
async fn wait_for_text(browser: &Client, what: &str, reload: bool) -> String {
    read_until(browser, reload, |text| text.contains(what))
        .await
        .unwrap_or_else(|text| panic!("{what:?} never showed:\n{text}"))
}

/// Reads the page's text, without reloading, until it no longer contains `what` (for about 10 s):
/// what a form's redirect removes, read once the new page is in.
async fn until_gone(browser: &Client, what: &str) -> String {
    read_until(browser, false, |text| !text.contains(what))
        .await
        .unwrap_or_else(|text| panic!("{what:?} never went away:\n{text}"))
}

/// Reads the page's text until `done` says so (about 10 s), reloading between reads when
/// `reload`; the last text read otherwise.
async fn read_until(
    browser: &Client,
    reload: bool,
    done: impl Fn(&str) -> bool,
) -> Result<String, String> {
    let mut text = String::new();
    for _ in 0..100 {
        text = page_text(browser).await;
        if done(&text) {
            return Ok(text);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        if reload {
            browser.refresh().await.expect("reloaded");
        }
    }
    Err(text)
}

/// Waits until the browser shows a page whose path starts with `prefix` (a form's redirect).
async fn wait_for_path(browser: &Client, prefix: &str) {
    for _ in 0..100 {
        if let Ok(url) = browser.current_url().await
            && url.path().starts_with(prefix)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the browser never reached {prefix}");
}

/// A paid and shipped order in `store`, so that `review-request` posts its feed card.
async fn ship_an_order(host: &TestHost, store: &str, token: &str) {
    let customer = host
        .call(
            token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "grace@shop.example", "first_name": "Grace"})),
        )
        .await
        .expect(201);
    let order: Value = host
        .call(
            token,
            Method::POST,
            "/v1/orders",
            Some(
                json!({"currency": "EUR", "customer_id": customer.body["id"],
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 1}]}),
            ),
        )
        .await
        .expect(201)
        .body;
    host.pay(store, &order).await.expect(200);
    let id = order["id"].as_str().expect("id");
    host.call(
        token,
        Method::POST,
        &format!("/v1/orders/{id}/fulfillments"),
        Some(
            json!({"line_items": [{"line_item_id": order["line_items"][0]["id"], "quantity": 1}]}),
        ),
    )
    .await
    .expect(201);
}

#[tokio::test]
async fn an_owner_signs_in_and_acts_on_the_feed_in_a_real_browser() {
    let Some((driver, binary)) = start_driver().await else {
        return;
    };
    let host = TestHost::start().await;
    let store = host.create_store("browser.example").await;
    let theirs = host.create_store("elsewhere.example").await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish_body("review-request")),
    )
    .await
    .expect(201);
    host.install(&store, "review-request").await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish_body("low-stock-banner")),
    )
    .await
    .expect(201);

    let profile = tempfile::tempdir().expect("a profile folder");
    let browser = open_browser(&driver, &binary, profile.path()).await;
    browser
        .goto(&format!("{}/", host.base))
        .await
        .expect("home");
    assert!(
        browser
            .current_url()
            .await
            .expect("url")
            .path()
            .ends_with("/sign-in"),
        "signed out, home is the sign-in page"
    );
    owner_through_the_pages(&host, &browser, &store, "ada@browser.example", true).await;
    let url = browser.current_url().await.expect("url");
    assert_eq!(url.path(), format!("/stores/{store}"));

    // A banner over HTTP, linking to a product, a card through the WIT call of a component.
    let tea = host
        .call(
            &token,
            Method::POST,
            "/v1/products",
            Some(
                json!({"title": "Tea", "variants": [{"title": "Tin", "price": 900,
                "currency": "EUR", "inventory_quantity": 2, "low_stock_threshold": 5}]}),
            ),
        )
        .await
        .expect(201)
        .body;
    let tea = tea["id"].as_str().expect("the tea's id").to_owned();
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(
            json!({"channel": "banner", "banner": {"tone": "warn", "title": "Tea is running low",
            "body": "2 tins left at the warehouse.", "ttl_hours": 24,
            "ctas": [{"label": "Restock", "href": format!("/products/{tea}")},
                {"label": "Got it", "dismiss": true}]}}),
        ),
    )
    .await
    .expect(202);
    ship_an_order(&host, &store, &token).await;
    host.eventually("review-request's card", || async {
        let feed = host
            .admin(Method::GET, &format!("/admin/v1/stores/{store}/feed"), None)
            .await
            .expect(200);
        (!feed.body["data"].as_array().is_none_or(Vec::is_empty)).then_some(())
    })
    .await;
    browser.refresh().await.expect("reloaded");
    let text = page_text(&browser).await;
    for part in [
        "Tea is running low",
        "Restock",
        "Got it",
        "Ask Grace for a review",
        "from review-request",
        "from shop",
    ] {
        assert!(text.contains(part), "{part:?} on the page:\n{text}");
    }
    screenshot(&browser, "feed").await;

    // The card's link: the order it is about.
    click(&browser, "article.card a.primary").await;
    wait_for_path(&browser, &format!("/stores/{store}/orders/")).await;
    let text = until_shown(&browser, "shipping: fulfilled").await;
    assert!(text.contains("Mug") && text.contains("12.50 EUR"), "{text}");
    screenshot(&browser, "order").await;
    browser.back().await.expect("back to the feed");

    // The banner's "Restock": the product, its stock set from its page.
    click(&browser, "section.banner a.button").await;
    wait_for_path(&browser, &format!("/stores/{store}/products/{tea}")).await;
    let text = until_shown(&browser, "Low-stock threshold").await;
    assert!(text.contains("Tin") && text.contains("9.00 EUR"), "{text}");
    fill(&browser, "input[name=quantity]", "24").await;
    click(&browser, "form[action$='/stock'] button[type=submit]").await;
    let text = until_shown_once(&browser, "Stock set to 24 (it was 2).").await;
    assert!(
        !text.contains("low"),
        "restocked above the threshold:\n{text}"
    );
    screenshot(&browser, "product-restocked").await;
    click(&browser, "nav a").await;
    wait_for_path(&browser, &format!("/stores/{store}")).await;
    until_shown(&browser, "Tea is running low").await;

    // Dismissing: the banner's "Got it", then the card's Dismiss.
    click(&browser, "section.banner form button[type=submit]").await;
    let text = until_gone(&browser, "Tea is running low").await;
    assert!(
        text.contains("Ask Grace for a review"),
        "the card stays:\n{text}"
    );
    click(&browser, "article.card form button[type=submit]").await;
    let text = until_shown_once(&browser, "Nothing to decide right now").await;
    assert!(!text.contains("Ask Grace for a review"), "{text}");
    assert!(text.contains("Nothing to decide right now"), "{text}");
    screenshot(&browser, "feed-dismissed").await;

    // Installing a plugin: the catalogue, the consent page with its scopes, then installed.
    click(&browser, "nav a[href$='/plugins']").await;
    wait_for_path(&browser, &format!("/stores/{store}/plugins")).await;
    click(&browser, "#plugin-low-stock-banner a.primary").await;
    wait_for_path(
        &browser,
        &format!("/stores/{store}/plugins/low-stock-banner/install"),
    )
    .await;
    let text = page_text(&browser).await;
    assert!(text.contains("Install low-stock-banner?"), "{text}");
    assert!(
        text.contains("See your products, prices and stock"),
        "{text}"
    );
    screenshot(&browser, "consent").await;
    click(&browser, "button.primary").await;
    let mut installed = String::new();
    for _ in 0..50 {
        installed = page_text(&browser).await;
        if installed.contains("low-stock-banner is installed.") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        installed.contains("low-stock-banner is installed."),
        "{installed}"
    );
    screenshot(&browser, "plugins").await;
    let installations = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations"),
            None,
        )
        .await
        .expect(200);
    assert!(
        installations.body["data"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|i| i["plugin"] == "low-stock-banner" && i["status"] == "active"),
        "{}",
        installations.body
    );
    browser.close().await.expect("closed");

    // The other store's owner, in a browser of their own, meets 404 here.
    let other_profile = tempfile::tempdir().expect("a profile folder");
    let other = open_browser(&driver, &binary, other_profile.path()).await;
    owner_through_the_pages(&host, &other, &theirs, "bob@elsewhere.example", false).await;
    other
        .goto(&format!("{}/stores/{store}", host.base))
        .await
        .expect("the other store's page");
    let text = page_text(&other).await;
    assert!(text.contains("There is no such page"), "{text}");
    assert!(!text.contains("browser.example"), "{text}");
    other.close().await.expect("closed");
}

#[tokio::test]
async fn a_developer_replays_a_failed_delivery_from_the_console_in_a_real_browser() {
    let Some((driver, binary)) = start_driver().await else {
        return;
    };
    let host = TestHost::start_for_webhooks(|_| {}).await;
    let receiver = Receiver::start().await;
    receiver.set("/hooks", Behavior::Status(503));
    host.admin(
        Method::POST,
        "/admin/v1/developer-invitations",
        Some(json!({"email": "dev@tools.example"})),
    )
    .await
    .expect(201);
    let profile = tempfile::tempdir().expect("a profile folder");
    let browser = open_browser(&driver, &binary, profile.path()).await;
    accept_through_the_pages(&host, &browser, "dev@tools.example", false).await;
    wait_for_path(&browser, "/developer").await;

    // A key from the console publishes the developer's plugin.
    fill(&browser, "#name", "laptop").await;
    click(&browser, "form.panel button.primary").await;
    let key = until_shown_once(&browser, "shown only this once").await;
    let key = key
        .split_whitespace()
        .find(|w| w.starts_with("chk_"))
        .expect("the new key")
        .to_owned();
    host.send(
        Method::POST,
        "/dev/v1/plugins",
        Some(key.as_str()),
        Some(json!({"manifest": {"name": "tagger", "version": "1.0.0",
            "scopes": ["customers.read"], "contact_email": "dev@tools.example"}})),
    )
    .await
    .expect(201);
    let store = host.create_store("browser.example").await;
    let (_, token) = host.install(&store, "tagger").await;
    let wh = host
        .subscribe(&token, &receiver.url("/hooks"), &["customer.created"])
        .await["id"]
        .as_str()
        .expect("webhook id")
        .to_owned();
    host.fire_customer_created(&store).await;
    let sent = receiver
        .wait_for("/hooks", 1, Duration::from_secs(10))
        .await;
    let event = sent[0].json()["id"].as_str().expect("event id").to_owned();
    host.exhaust_delivery(&token, &wh, &event).await;

    // The console: the store that installed it, the paused subscription, the failed delivery.
    browser.refresh().await.expect("reloaded");
    until_shown(&browser, "browser.example").await;
    screenshot(&browser, "console").await;
    click(&browser, "#plugin-tagger a").await;
    let text = until_shown(&browser, "Webhook subscriptions").await;
    assert!(text.contains("HTTP 503"), "{text}");
    receiver.set("/hooks", Behavior::Status(204));
    click(&browser, &format!("#webhook-{wh} button.primary")).await;
    until_shown_once(&browser, "Resumed").await;
    click(&browser, "nav.filters a[href$='status=failed']").await;
    let text = until_shown(&browser, &event).await;
    assert!(text.contains("failed"), "{text}");
    click(&browser, &format!("#delivery-{event} a")).await;
    let text = until_shown(&browser, "Attempts, newest first").await;
    assert!(text.matches("503").count() >= 7, "{text}");
    screenshot(&browser, "delivery-failed").await;

    // Replay, and the new attempt.
    click(&browser, "button.primary").await;
    until_shown_once(&browser, "Replayed: 1 delivery is queued").await;
    until_shown(&browser, "succeeded").await;
    screenshot(&browser, "delivery-replayed").await;
    assert_eq!(receiver.requests("/hooks").len(), 8);
    browser.close().await.expect("closed");
}
