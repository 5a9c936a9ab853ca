//! Accounts and the merchant's pages over plain HTTP, as a browser without JavaScript uses them:
//! an invitation mailed through the host's mail path, choosing a password, signing in (limited
//! per address), the feed page with its banners, dismissing, CSRF on every form, another
//! store's staff kept out, signing out.

use commerce_host_tests::pages::{Browser, invitation_link, owner_signed_in};
use commerce_host_tests::{ALL_SCOPES, TestHost};
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn an_owner_is_invited_signs_in_sees_and_dismisses_banners_and_cards() {
    let host = TestHost::start().await;
    let store = host.create_store("owned.example").await;
    host.publish("shop", &ALL_SCOPES).await;
    let (_, token) = host.install(&store, "shop").await;

    // The operator invites; the mail carries a one-time link to the host's public address.
    let invited = host
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/invitations"),
            Some(json!({"email": "Ada@Owned.example"})),
        )
        .await
        .expect(201);
    assert_eq!(invited.body["email"], "ada@owned.example");
    assert_eq!(invited.body["role"], "owner");
    assert!(
        invited.body.get("token").is_none(),
        "the token is only in the mail"
    );
    let link = invitation_link(&host, "ada@owned.example").await;
    assert!(
        link.starts_with(&format!("{}/invitations/", host.base)),
        "{link}"
    );

    let mut ada = Browser::new(&host);
    let form = ada.get(&link).await;
    assert_eq!(form.status, StatusCode::OK);
    assert!(
        form.body.contains("owner of owned.example"),
        "{}",
        form.body
    );
    let form_cookie = form
        .set_cookies
        .iter()
        .find(|c| c.starts_with("commerce_form="))
        .expect("a form cookie");
    assert!(
        form_cookie.contains("HttpOnly") && form_cookie.contains("SameSite=Lax"),
        "{form_cookie}"
    );
    let csrf = form.csrf();

    // The form is checked: its token, the two passwords, the password's length.
    let forged = ada
        .post(
            &link,
            &[("password", "correct horse"), ("confirm", "correct horse")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN, "{}", forged.body);
    let differ = ada
        .post(
            &link,
            &[
                ("csrf", &csrf),
                ("password", "correct horse"),
                ("confirm", "correct house"),
            ],
        )
        .await;
    assert_eq!(differ.status, StatusCode::BAD_REQUEST);
    assert!(differ.body.contains("differ"), "{}", differ.body);
    let short = ada
        .post(
            &link,
            &[("csrf", &csrf), ("password", "short"), ("confirm", "short")],
        )
        .await;
    assert_eq!(short.status, StatusCode::BAD_REQUEST);
    assert!(
        short.body.contains("10 to 128 characters"),
        "{}",
        short.body
    );
    let accepted = ada
        .post(
            &link,
            &[
                ("csrf", &csrf),
                ("password", "correct horse"),
                ("confirm", "correct horse"),
            ],
        )
        .await;
    assert_eq!(accepted.status, StatusCode::OK, "{}", accepted.body);
    assert!(
        accepted.body.contains("Your password is set"),
        "{}",
        accepted.body
    );
    // The link worked once.
    assert_eq!(ada.get(&link).await.status, StatusCode::NOT_FOUND);
    host.admin(
        Method::POST,
        &format!("/admin/v1/stores/{store}/invitations"),
        Some(json!({"email": "ada@owned.example"})),
    )
    .await
    .assert_error(409, "account_exists");

    // Signing in: the form's token, then the password.
    let forged = ada
        .post(
            "/sign-in",
            &[
                ("email", "ada@owned.example"),
                ("password", "correct horse"),
            ],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let wrong = ada
        .post(
            "/sign-in",
            &[
                ("csrf", &csrf),
                ("email", "ada@owned.example"),
                ("password", "wrong horse!"),
            ],
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED);
    assert!(
        wrong
            .body
            .contains("the email address or the password is wrong"),
        "{}",
        wrong.body
    );
    let signed = ada
        .post(
            "/sign-in",
            &[
                ("csrf", &csrf),
                ("email", "ADA@owned.example"),
                ("password", "correct horse"),
            ],
        )
        .await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.body);
    let session = signed
        .set_cookies
        .iter()
        .find(|c| c.starts_with("commerce_session="))
        .expect("a session cookie");
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Lax"),
        "{session}"
    );
    assert!(
        !session.contains("Secure"),
        "an http host sets no Secure cookie: {session}"
    );
    let home = ada.get("/").await;
    assert_eq!(
        home.location.as_deref(),
        Some(format!("/stores/{store}").as_str())
    );

    // A banner and a feed card from the store's plugin.
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(json!({"channel": "banner", "banner": {"tone": "warn", "title": "Mug is running low",
            "body": "3 left.", "ttl_hours": 24,
            "ctas": [{"label": "Restock", "href": "/products/x"}, {"label": "Got it", "dismiss": true}]}})),
    )
    .await
    .expect(202);
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(json!({"channel": "feed", "card": {"kind": "suggestion", "title": "Bundle mugs with tea",
            "body": "Customers who buy mugs buy tea.", "primary": {"label": "Create bundle", "href": "/products/new"}}})),
    )
    .await
    .expect(202);
    let feed = ada.get(&format!("/stores/{store}")).await;
    assert_eq!(feed.status, StatusCode::OK, "{}", feed.body);
    for part in [
        "Mug is running low",
        "tone-warn",
        "Restock",
        "Got it",
        "Bundle mugs with tea",
        "Create bundle",
        "from shop",
        "owned.example",
        "ada@owned.example",
    ] {
        assert!(
            feed.body.contains(part),
            "{part:?} on the feed page:\n{}",
            feed.body
        );
    }
    let banner_id = {
        let at = feed.body.find("id=\"banner-").expect("a banner") + "id=\"banner-".len();
        feed.body[at..at + feed.body[at..].find('"').expect("quote")].to_owned()
    };
    let card_id = {
        let at = feed.body.find("id=\"card-").expect("a card") + "id=\"card-".len();
        feed.body[at..at + feed.body[at..].find('"').expect("quote")].to_owned()
    };

    // Dismissing needs the session's token.
    let csrf = feed.csrf();
    let forged = ada
        .post(
            &format!("/stores/{store}/banners/{banner_id}/dismiss"),
            &[("csrf", "not-it")],
        )
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let dismissed = ada
        .post(
            &format!("/stores/{store}/banners/{banner_id}/dismiss"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(dismissed.status, StatusCode::SEE_OTHER);
    let dismissed = ada
        .post(
            &format!("/stores/{store}/feed/{card_id}/dismiss"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(dismissed.status, StatusCode::SEE_OTHER);
    let feed = ada.get(&format!("/stores/{store}")).await;
    assert!(!feed.body.contains("Mug is running low"), "{}", feed.body);
    assert!(!feed.body.contains("Bundle mugs with tea"), "{}", feed.body);
    assert!(
        feed.body.contains("Nothing to decide right now"),
        "{}",
        feed.body
    );
    // The API sees the same: the banner is no longer active, the card is marked dismissed.
    let banners = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/banners"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(banners.body["data"], json!([]), "{}", banners.body);
    let cards = host
        .admin(Method::GET, &format!("/admin/v1/stores/{store}/feed"), None)
        .await
        .expect(200);
    assert!(
        cards.body["data"][0]["dismissed_at"].is_string(),
        "{}",
        cards.body
    );

    // Signing out ends the session.
    let out = ada.post("/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.location.as_deref(), Some("/sign-in"));
    let after = ada.get(&format!("/stores/{store}")).await;
    assert_eq!(after.location.as_deref(), Some("/sign-in"));
}

#[tokio::test]
async fn another_stores_staff_get_404_for_every_page_of_this_one() {
    let host = TestHost::start().await;
    let mine = host.create_store("mine.example").await;
    let theirs = host.create_store("theirs.example").await;
    let mut ada = owner_signed_in(&host, &mine, "ada@mine.example", "correct horse").await;
    let mut bob = owner_signed_in(&host, &theirs, "bob@theirs.example", "battery staple").await;
    assert_eq!(
        ada.get(&format!("/stores/{mine}")).await.status,
        StatusCode::OK
    );
    let bob_feed = bob.get(&format!("/stores/{theirs}")).await;
    let bob_csrf = bob_feed.csrf();

    for path in [
        format!("/stores/{mine}"),
        "/stores/store_01JAAAAAAAAAAAAAAAAAAAAAAA".to_owned(),
        "/stores/not-an-id".to_owned(),
    ] {
        bob.get(&path).await.assert_not_found(&path);
    }
    for path in [
        format!("/stores/{mine}/banners/msg_01JAAAAAAAAAAAAAAAAAAAAAAA/dismiss"),
        format!("/stores/{mine}/feed/msg_01JAAAAAAAAAAAAAAAAAAAAAAA/dismiss"),
    ] {
        let page = bob.post(&path, &[("csrf", &bob_csrf)]).await;
        assert_eq!(page.status, StatusCode::NOT_FOUND, "{path}");
    }
    // Signed out, a store page asks to sign in (and says nothing of the store).
    let mut nobody = Browser::new(&host);
    let page = nobody.get(&format!("/stores/{mine}")).await;
    assert_eq!(page.location.as_deref(), Some("/sign-in"));
}

#[tokio::test]
async fn sign_in_failures_are_limited_per_address() {
    let host = TestHost::start_configured(|config| {
        config.auth_failures = commerce_host::service::ratelimit::AuthFailureLimits {
            burst: 3,
            per_second: 1,
        };
    })
    .await;
    let store = host.create_store("limited.example").await;
    owner_signed_in(&host, &store, "ada@limited.example", "correct horse").await;
    host.admin(
        Method::POST,
        "/admin/v1/developer-invitations",
        Some(json!({"email": "dev@tools.example"})),
    )
    .await
    .expect(201);
    host.admin(
        Method::POST,
        "/admin/v1/developer-invitations",
        Some(json!({"email": "not an address"})),
    )
    .await
    .assert_error(400, "validation_failed");
    let mut ada = Browser::new(&host);
    let csrf = ada.get("/sign-in").await.csrf();
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let page = ada
            .post(
                "/sign-in",
                &[
                    ("csrf", &csrf),
                    ("email", "ada@limited.example"),
                    ("password", "guess guess"),
                ],
            )
            .await;
        statuses.push(page.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 429]);
    // While limited, even the right password waits.
    let right = ada
        .post(
            "/sign-in",
            &[
                ("csrf", &csrf),
                ("email", "ada@limited.example"),
                ("password", "correct horse"),
            ],
        )
        .await;
    assert_eq!(right.status, StatusCode::TOO_MANY_REQUESTS);

    // The limit is the address's, whatever it authenticates with: the operator API waits too.
    host.admin(Method::GET, "/admin/v1/stores", None)
        .await
        .assert_error(429, "rate_limited");
}

#[tokio::test]
async fn an_owner_installs_behind_consent_configures_reads_messages_and_invites_staff() {
    let host = TestHost::start().await;
    let store = host.create_store("catalogue.example").await;
    host.publish("shop", &ALL_SCOPES).await;
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(commerce_host_tests::components::publish_body(
            "review-request",
        )),
    )
    .await
    .expect(201);
    let mut ada = owner_signed_in(&host, &store, "ada@catalogue.example", "correct horse").await;
    let plugins = format!("/stores/{store}/plugins");

    let catalogue = ada.get(&plugins).await;
    assert_eq!(catalogue.status, StatusCode::OK);
    for part in [
        "review-request",
        "shop",
        "Install",
        "Suggests asking the customer",
    ] {
        assert!(
            catalogue.body.contains(part),
            "{part:?}:\n{}",
            catalogue.body
        );
    }
    let csrf = catalogue.csrf();

    // The consent page names what the plugin may do.
    let consent = ada.get(&format!("{plugins}/review-request/install")).await;
    assert_eq!(consent.status, StatusCode::OK);
    for part in [
        "Install review-request?",
        "See your orders",
        "See your customers and their contact details",
        "order.fulfilled",
        "dev@review-request.example",
    ] {
        assert!(consent.body.contains(part), "{part:?}:\n{}", consent.body);
    }
    let forged = ada
        .post(&format!("{plugins}/review-request/install"), &[])
        .await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    let installed = ada
        .post(
            &format!("{plugins}/review-request/install"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(installed.location.as_deref(), Some(plugins.as_str()));
    let after = ada.get(&plugins).await;
    assert!(
        after.body.contains("review-request is installed."),
        "{}",
        after.body
    );
    assert!(
        !ada.get(&plugins).await.body.contains("is installed."),
        "the notice shows once"
    );
    let list = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations"),
            None,
        )
        .await
        .expect(200);
    let review = list.body["data"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["plugin"] == "review-request")
        .cloned()
        .expect("installed");
    let inst = review["id"].as_str().expect("id").to_owned();

    // An external plugin's token is shown once, and works.
    let shop = ada
        .post(&format!("{plugins}/shop/install"), &[("csrf", &csrf)])
        .await;
    assert_eq!(shop.status, StatusCode::OK, "{}", shop.body);
    let marker = "<code class=\"token\">";
    let at = shop.body.find(marker).expect("the token") + marker.len();
    let token = shop.body[at..at + shop.body[at..].find('<').expect("end")].to_owned();
    host.call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);

    // Settings: JSON checked as over the API.
    let settings = format!("/stores/{store}/installations/{inst}/settings");
    let form = ada.get(&settings).await;
    assert!(form.body.contains("{}"), "{}", form.body);
    let bad = ada
        .post(&settings, &[("csrf", &csrf), ("settings", "{nope")])
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.body.contains("is not JSON"), "{}", bad.body);
    let array = ada
        .post(&settings, &[("csrf", &csrf), ("settings", "[1]")])
        .await;
    assert_eq!(array.status, StatusCode::BAD_REQUEST);
    let saved = ada
        .post(
            &settings,
            &[("csrf", &csrf), ("settings", r#"{"tone": "warm"}"#)],
        )
        .await;
    assert_eq!(saved.status, StatusCode::SEE_OTHER);
    let stored = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations/{inst}"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(stored.body["settings"], json!({"tone": "warm"}));

    // The store's messages.
    let empty = ada.get(&format!("/stores/{store}/messages")).await;
    assert!(empty.body.contains("no message yet"), "{}", empty.body);
    host.call(
        &token,
        Method::POST,
        "/v1/notifications",
        Some(
            json!({"channel": "banner", "banner": {"tone": "info", "title": "Welcome aboard",
            "body": "b", "ttl_hours": 1}}),
        ),
    )
    .await
    .expect(202);
    let messages = ada.get(&format!("/stores/{store}/messages")).await;
    for part in ["banner", "Welcome aboard", "shown", "shop"] {
        assert!(messages.body.contains(part), "{part:?}:\n{}", messages.body);
    }

    // Staff: invited by the owner, through the host's mail.
    let staff = format!("/stores/{store}/staff");
    let invited = ada
        .post(
            &staff,
            &[("csrf", &csrf), ("email", "bob@catalogue.example")],
        )
        .await;
    assert_eq!(invited.location.as_deref(), Some(staff.as_str()));
    let link = invitation_link(&host, "bob@catalogue.example").await;
    let mut bob = Browser::new(&host);
    let form = bob.get(&link).await;
    assert!(
        form.body.contains("staff of catalogue.example"),
        "{}",
        form.body
    );
    let bob_csrf = form.csrf();
    bob.post(
        &link,
        &[
            ("csrf", &bob_csrf),
            ("password", "battery staple"),
            ("confirm", "battery staple"),
        ],
    )
    .await;
    let signed = bob
        .post(
            "/sign-in",
            &[
                ("csrf", &bob_csrf),
                ("email", "bob@catalogue.example"),
                ("password", "battery staple"),
            ],
        )
        .await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER);
    let page = bob.get(&staff).await;
    assert!(
        page.body.contains("ada@catalogue.example") && page.body.contains("bob@catalogue.example"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("The store's owner invites staff"),
        "{}",
        page.body
    );
    let refused = bob
        .post(
            &staff,
            &[("csrf", &page.csrf()), ("email", "eve@catalogue.example")],
        )
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.body);

    // Uninstalling.
    let gone = ada
        .post(
            &format!("/stores/{store}/installations/{inst}/uninstall"),
            &[("csrf", &csrf)],
        )
        .await;
    assert_eq!(gone.location.as_deref(), Some(plugins.as_str()));
    let after = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations/{inst}"),
            None,
        )
        .await
        .expect(200);
    assert_eq!(after.body["status"], "uninstalled");
}

/// What plugins link to from banners and cards: `/products/{id}` (a low-stock banner's
/// "Restock") and `/orders/{id}` (a review card) are pages of the store, for its members only.
/// The product page shows each variant's stock and sets it (the same rules and event as
/// `POST /v1/inventory/adjust`); the order page shows the order; any other path under the store
/// is the not-found page, not the API's JSON.
#[tokio::test]
async fn a_member_follows_plugin_links_to_a_product_to_restock_and_to_an_order() {
    let host = TestHost::start().await;
    let (store, token) = host.store_with_plugin("linked.example", &ALL_SCOPES).await;
    let product = host
        .call(
            &token,
            Method::POST,
            "/v1/products",
            Some(
                json!({"title": "Tea <loose>", "variants": [{"title": "100 g",
                "sku": "TEA-100", "price": 850, "currency": "EUR",
                "inventory_quantity": 2, "low_stock_threshold": 5}]}),
            ),
        )
        .await
        .expect(201)
        .body;
    let product_id = product["id"].as_str().expect("product id");
    let variant = product["variants"][0]["id"].as_str().expect("variant id");
    let order = host.place_order(&token).await;
    let order_id = order["id"].as_str().expect("order id");
    let mut ada = owner_signed_in(&host, &store, "ada@linked.example", "correct horse").await;

    // The product: its variant's price, stock and threshold, marked low; HTML escaped.
    let path = format!("/stores/{store}/products/{product_id}");
    let page = ada.get(&path).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for part in [
        "Tea &#60;loose&#62;",
        "TEA-100",
        "8.50 EUR",
        "<td>2 <span class=\"error\">low</span></td><td>5</td>",
    ] {
        assert!(page.body.contains(part), "{part:?}:\n{}", page.body);
    }
    let csrf = page.csrf();
    let stock = format!("{path}/variants/{variant}/stock");
    let stock_in_api = || async {
        let read = host
            .call(
                &token,
                Method::GET,
                &format!("/v1/products/{product_id}"),
                None,
            )
            .await
            .expect(200);
        read.body["variants"][0]["inventory_quantity"].clone()
    };

    // Restocked to 40: the page says so, the API reads 40, and the crossing fired its event.
    let set = ada
        .post(&stock, &[("csrf", &csrf), ("quantity", "40")])
        .await;
    assert_eq!(set.status, StatusCode::SEE_OTHER);
    assert_eq!(set.location.as_deref(), Some(path.as_str()));
    let page = ada.get(&path).await;
    assert!(
        page.body.contains("Stock set to 40 (it was 2).") && page.body.contains("<td>40</td>"),
        "{}",
        page.body
    );
    assert_eq!(stock_in_api().await, 40);
    let updates = host.events(&store, "product.inventory.updated").await;
    let last = updates.last().expect("an inventory event");
    assert_eq!(last["data"]["inventory"]["inventory_quantity"], 40);
    assert_eq!(last["data"]["reason"], "restocked");

    // Refused values leave the stock as it was and say why; a form without its token is 403.
    for (quantity, says) in [
        ("-1", "The stock was not changed"),
        (
            "many",
            "The stock must be a whole number; got &#34;many&#34;.",
        ),
        ("1000000000000", "The stock was not changed"),
    ] {
        let set = ada
            .post(&stock, &[("csrf", &csrf), ("quantity", quantity)])
            .await;
        assert_eq!(set.status, StatusCode::SEE_OTHER, "{quantity}");
        let page = ada.get(&path).await;
        assert!(page.body.contains(says), "{quantity}: {}", page.body);
        assert!(
            page.body.contains("<td>40</td>"),
            "{quantity}: {}",
            page.body
        );
    }
    let forged = ada.post(&stock, &[("quantity", "0")]).await;
    assert_eq!(forged.status, StatusCode::FORBIDDEN);
    // A path that names no product, or a product and another product's variant, is not found
    // (and a path segment that is no id never reaches a redirect).
    let other = host
        .call(
            &token,
            Method::POST,
            "/v1/products",
            Some(json!({"title": "Mug", "variants": [{"price": 1200, "currency": "EUR"}]})),
        )
        .await
        .expect(201)
        .body;
    let other = other["id"].as_str().expect("the mug's id");
    for path in [
        format!("/stores/{store}/products/{other}/variants/{variant}/stock"),
        format!("/stores/{store}/products/prod%0D%0Ax/variants/{variant}/stock"),
        format!("{path}/variants/var_01JAAAAAAAAAAAAAAAAAAAAAAA/stock"),
    ] {
        let set = ada.post(&path, &[("csrf", &csrf), ("quantity", "7")]).await;
        assert_eq!(set.status, StatusCode::NOT_FOUND, "{path}: {}", set.body);
    }
    assert_eq!(stock_in_api().await, 40);

    // The order: its line, amounts and states.
    let page = ada.get(&format!("/stores/{store}/orders/{order_id}")).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    for part in [
        format!("Order {order_id}"),
        "<td>Mug</td>".to_owned(),
        "12.50 EUR".to_owned(),
        "payment: pending".to_owned(),
    ] {
        assert!(page.body.contains(&part), "{part:?}:\n{}", page.body);
    }

    // Another path, another store's member, a product or order that is not there: not found,
    // as a page.
    let theirs = host.create_store("elsewhere.example").await;
    let mut bob = owner_signed_in(&host, &theirs, "bob@elsewhere.example", "battery staple").await;
    let bob_csrf = bob.get(&format!("/stores/{theirs}")).await.csrf();
    for (bobs, path) in [
        (
            false,
            format!("/stores/{store}/customers/cus_01JAAAAAAAAAAAAAAAAAAAAAAA"),
        ),
        (
            false,
            format!("/stores/{store}/products/prod_01JAAAAAAAAAAAAAAAAAAAAAAA"),
        ),
        (false, format!("/stores/{store}/orders/not-an-id")),
        (true, format!("/stores/{store}/products/{product_id}")),
        (true, format!("/stores/{store}/orders/{order_id}")),
    ] {
        let page = if bobs {
            bob.get(&path).await
        } else {
            ada.get(&path).await
        };
        page.assert_not_found(&path);
    }
    let nowhere = format!("/stores/{store}/customers/cus_01JAAAAAAAAAAAAAAAAAAAAAAA");
    ada.post(&nowhere, &[("csrf", &csrf)])
        .await
        .assert_not_found(&format!("POST {nowhere}"));
    let theirs_set = bob
        .post(&stock, &[("csrf", &bob_csrf), ("quantity", "0")])
        .await;
    assert_eq!(theirs_set.status, StatusCode::NOT_FOUND);
    assert_eq!(stock_in_api().await, 40);
    let mut nobody = commerce_host_tests::pages::Browser::new(&host);
    let page = nobody
        .get(&format!("/stores/{store}/products/{product_id}"))
        .await;
    assert_eq!(page.location.as_deref(), Some("/sign-in"));
}
