//! The `/v1` conventions and the operator API: auth, store header, error format, rate limits,
//! pagination, restart.

use commerce_host_tests::pages::{developer_signed_in, make_key};
use commerce_host_tests::{ADMIN_TOKEN, ALL_SCOPES, Reply, TestHost};
use jiff::SignedDuration;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn missing_malformed_unknown_and_revoked_tokens_are_401() {
    let host = TestHost::start().await;
    let reply = host.send(Method::GET, "/v1/installation", None, None).await;
    reply.assert_error(401, "unauthorized");

    let reply = TestHost::read(
        host.request(Method::GET, "/v1/installation")
            .header("authorization", "Basic abc"),
    )
    .await;
    reply.assert_error(401, "unauthorized");

    let reply = host
        .call("not-a-token", Method::GET, "/v1/installation", None)
        .await;
    reply.assert_error(401, "unauthorized");

    let unknown = format!("chp_{}", "0".repeat(64));
    let reply = host
        .call(&unknown, Method::GET, "/v1/installation", None)
        .await;
    reply.assert_error(401, "unauthorized");

    let store = host.create_store("acme.example").await;
    host.publish("tagger", &["orders.read"]).await;
    let (inst, token) = host.install(&store, "tagger").await;
    host.call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{inst}"),
        None,
    )
    .await
    .expect(204);
    let reply = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await;
    reply.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn install_issues_a_256_bit_token_with_exactly_the_manifest_scopes_shown_once() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("tagger", &["orders.read", "orders.write"])
        .await;
    let reply = host
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/installations"),
            Some(json!({"plugin": "tagger"})),
        )
        .await
        .expect(201);
    let token = reply.body["token"].as_str().expect("token");
    let secret = token.strip_prefix("chp_").expect("prefix");
    assert_eq!(secret.len(), 64, "256 bits in hex");
    assert!(secret.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(reply.body["scopes"], json!(["orders.read", "orders.write"]));
    assert_eq!(reply.body["store_id"], store.as_str());

    let inst = reply.body["id"].as_str().expect("id");
    let shown = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations/{inst}"),
            None,
        )
        .await
        .expect(200);
    assert!(
        shown.body.get("token").is_none(),
        "the token is shown only once"
    );

    let me = host
        .call(token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    assert_eq!(me.body["id"], inst);
    assert_eq!(me.body["store"]["id"], store.as_str());
    assert_eq!(me.body["store"]["domain"], "acme.example");
    assert_eq!(me.body["scopes"], json!(["orders.read", "orders.write"]));

    // Installing the same plugin twice in one store is refused.
    let again = host
        .admin(
            Method::POST,
            &format!("/admin/v1/stores/{store}/installations"),
            Some(json!({"plugin": "tagger"})),
        )
        .await;
    again.assert_error(409, "already_installed");
}

#[tokio::test]
async fn the_store_header_must_name_the_tokens_store() {
    let host = TestHost::start().await;
    let (store, token) = host.store_with_plugin("acme.example", &[]).await;
    let (other, _) = host.store_with_plugin("other.example", &[]).await;

    let ok = TestHost::read(
        host.request(Method::GET, "/v1/installation")
            .bearer_auth(&token)
            .header("x-service-store", &store),
    )
    .await;
    assert_eq!(ok.status, 200);

    let mismatch = TestHost::read(
        host.request(Method::GET, "/v1/installation")
            .bearer_auth(&token)
            .header("x-service-store", &other),
    )
    .await;
    mismatch.assert_error(403, "store_mismatch");
    assert_eq!(mismatch.field(), "X-Service-Store");

    let malformed = TestHost::read(
        host.request(Method::GET, "/v1/installation")
            .bearer_auth(&token)
            .header("x-service-store", "acme"),
    )
    .await;
    malformed.assert_error(400, "validation_failed");
    assert_eq!(malformed.field(), "X-Service-Store");
}

#[tokio::test]
async fn every_rejection_uses_the_error_object() {
    let host = TestHost::start().await;
    let admin = |m, p: &str| host.request(m, p).bearer_auth(ADMIN_TOKEN);

    let reply = TestHost::read(
        admin(Method::POST, "/admin/v1/stores")
            .header("content-type", "application/json")
            .body("{\"domain\": "),
    )
    .await;
    reply.assert_error(400, "malformed_json");

    let reply = TestHost::read(
        admin(Method::POST, "/admin/v1/stores")
            .header("content-type", "text/plain")
            .body("domain=x"),
    )
    .await;
    reply.assert_error(415, "unsupported_media_type");

    let reply = host.admin(Method::GET, "/admin/v1/nowhere", None).await;
    reply.assert_error(404, "not_found");
    let reply = host.send(Method::GET, "/v1/nowhere", None, None).await;
    reply.assert_error(404, "not_found");

    let reply = host
        .admin(Method::PUT, "/admin/v1/stores", Some(json!({})))
        .await;
    reply.assert_error(405, "method_not_allowed");

    // A body over the limit (16 MiB) is refused from its announced length, before it is read:
    // the client sends the head and the body's first bytes, and reads the reply.
    let reply = host
        .send_head(
            &format!(
                "POST /admin/v1/stores HTTP/1.1\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
                 Content-Type: application/json"
            ),
            17 * 1024 * 1024,
            b"{\"domain\": \"aaaa",
        )
        .await;
    reply.assert_error(413, "payload_too_large");

    let reply = host
        .admin(Method::POST, "/admin/v1/stores", Some(json!({})))
        .await;
    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "domain");

    let reply = host
        .admin(Method::POST, "/admin/v1/stores", Some(json!({"domain": 7})))
        .await;
    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "domain");

    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/stores",
            Some(json!({"domain": "Not A Domain"})),
        )
        .await;
    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "domain");

    let reply = host
        .admin(Method::GET, "/admin/v1/stores/store_doesnotexist", None)
        .await;
    reply.assert_error(404, "not_found");

    let reply = host
        .send(
            Method::GET,
            "/admin/v1/stores",
            Some("wrong-admin-token"),
            None,
        )
        .await;
    reply.assert_error(401, "unauthorized");
}

#[tokio::test]
async fn manifests_are_validated_field_by_field() {
    let host = TestHost::start().await;
    let manifest = json!({"name": "tagger", "version": "1.0.0", "scopes": ["orders.read"], "contact_email": "dev@x.example"});
    let cases = [
        (
            json!({"scopes": ["orders.read", "orders.delete"]}),
            "manifest.scopes[1]",
        ),
        (json!({"name": "Bad Name"}), "manifest.name"),
        (json!({"version": "1.0"}), "manifest.version"),
        (json!({"contact_email": "nobody"}), "manifest.contact_email"),
        (json!({"colour": "blue"}), "manifest.colour"),
        (
            json!({"events": ["order.paid", "order.teleported"]}),
            "manifest.events[1]",
        ),
        (
            json!({"webhooks": [{"url": "https://x.example/h", "events": ["nope"], "secret": "s3cret-s3cret-s3cret"}]}),
            "manifest.webhooks[0].events[0]",
        ),
    ];
    for (change, field) in cases {
        let mut bad = manifest.clone();
        for (k, v) in change.as_object().expect("object") {
            bad[k] = v.clone();
        }
        let reply = host
            .admin(
                Method::POST,
                "/admin/v1/plugins",
                Some(json!({ "manifest": bad })),
            )
            .await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.field(), field, "body: {}", reply.body);
    }
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(json!({ "manifest": manifest })),
    )
    .await
    .expect(201);
    // Versions only go up.
    let reply = host
        .admin(
            Method::POST,
            "/admin/v1/plugins",
            Some(json!({ "manifest": manifest })),
        )
        .await;
    reply.assert_error(409, "version_not_newer");
}

async fn hit(host: &TestHost, token: &str) -> Reply {
    host.call(token, Method::GET, "/v1/installation", None)
        .await
}

#[tokio::test]
async fn rate_limit_allows_a_burst_of_120_then_refills_at_60_per_second() {
    let host = TestHost::start().await;
    let (_, token) = host.store_with_plugin("acme.example", &[]).await;
    for i in 0..120u64 {
        let reply = hit(&host, &token).await.expect(200);
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some((119 - i).to_string().as_str())
        );
        assert_eq!(reply.header("x-ratelimit-reset"), Some("60"));
    }
    let refused = hit(&host, &token).await;
    refused.assert_error(429, "rate_limited");
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));

    // One second later, 60 more (sustained rate), then refused again.
    host.clock.advance(SignedDuration::from_secs(1));
    for _ in 0..60 {
        hit(&host, &token).await.expect(200);
    }
    assert_eq!(hit(&host, &token).await.status, 429);
    host.clock.advance(SignedDuration::from_millis(17));
    hit(&host, &token).await.expect(200);
}

#[tokio::test]
async fn rate_limit_caps_a_minute_at_600_and_is_shared_by_the_stores_installations() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("one", &[]).await;
    host.publish("two", &[]).await;
    let (_, one) = host.install(&store, "one").await;
    let (_, two) = host.install(&store, "two").await;
    let (_, other_store) = host.store_with_plugin("other.example", &[]).await;

    // 10 s into the minute, 60 per second for 10 s: 600 requests, alternating installations.
    host.clock.advance(SignedDuration::from_secs(10));
    for second in 0..10 {
        for i in 0..60 {
            let token = if i % 2 == 0 { &one } else { &two };
            hit(&host, token).await.expect(200);
        }
        if second < 9 {
            host.clock.advance(SignedDuration::from_secs(1));
        }
    }
    // 19 s into the minute: the bucket has refilled but the minute is used up.
    host.clock.advance(SignedDuration::from_secs(1));
    let refused = hit(&host, &one).await;
    refused.assert_error(429, "rate_limited");
    assert_eq!(refused.header("retry-after"), Some("40"));
    assert_eq!(refused.header("x-ratelimit-reset"), Some("40"));
    assert_eq!(
        hit(&host, &two).await.status,
        429,
        "shared by the store's installations"
    );
    hit(&host, &other_store).await.expect(200);

    // The next minute starts afresh.
    host.clock.advance(SignedDuration::from_secs(40));
    let reply = hit(&host, &one).await.expect(200);
    assert_eq!(reply.header("x-ratelimit-reset"), Some("60"));
}

#[tokio::test]
async fn the_operator_can_change_a_stores_limits() {
    let host = TestHost::start().await;
    let (store, token) = host.store_with_plugin("acme.example", &[]).await;
    let reply = host
        .admin(Method::PATCH, &format!("/admin/v1/stores/{store}"), Some(json!({"rate_limits": {"requests_per_second": 2, "burst": 3, "requests_per_minute": 1000}})))
        .await
        .expect(200);
    assert_eq!(reply.body["rate_limits"]["burst"], 3);
    for _ in 0..3 {
        hit(&host, &token).await.expect(200);
    }
    assert_eq!(hit(&host, &token).await.status, 429);

    let bad = host
        .admin(
            Method::PATCH,
            &format!("/admin/v1/stores/{store}"),
            Some(json!({"rate_limits": {"requests_per_second": 0}})),
        )
        .await;
    bad.assert_error(400, "validation_failed");
    assert_eq!(bad.field(), "rate_limits.requests_per_second");
}

#[tokio::test]
async fn pages_cover_every_item_once_and_cursors_cannot_be_forged() {
    let host = TestHost::start().await;
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(host.create_store(&format!("s{i}.example")).await);
        host.clock.advance(SignedDuration::from_millis(1));
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/admin/v1/stores?limit=3&cursor={c}"),
            None => "/admin/v1/stores?limit=3".to_owned(),
        };
        let page = host.admin(Method::GET, &path, None).await.expect(200);
        for item in page.body["data"].as_array().expect("data") {
            seen.push(item["id"].as_str().expect("id").to_owned());
        }
        if !page.body["page"]["has_more"].as_bool().expect("has_more") {
            assert!(page.body["page"]["next_cursor"].is_null());
            break;
        }
        cursor = Some(
            page.body["page"]["next_cursor"]
                .as_str()
                .expect("cursor")
                .to_owned(),
        );
    }
    assert_eq!(seen, created, "every store once, oldest first");

    let first = host
        .admin(Method::GET, "/admin/v1/stores?limit=3", None)
        .await
        .expect(200);
    let cursor = first.body["page"]["next_cursor"]
        .as_str()
        .expect("cursor")
        .to_owned();
    let mut tampered = cursor.clone().into_bytes();
    tampered[2] = if tampered[2] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).expect("utf8");
    let reply = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores?cursor={tampered}"),
            None,
        )
        .await;
    reply.assert_error(400, "validation_failed");
    assert_eq!(reply.field(), "cursor");

    // A cursor of one list is refused by another.
    let reply = host
        .admin(
            Method::GET,
            &format!("/admin/v1/plugins?cursor={cursor}"),
            None,
        )
        .await;
    assert_eq!(reply.field(), "cursor");

    for bad in ["0", "251", "ten", "-1"] {
        let reply = host
            .admin(Method::GET, &format!("/admin/v1/stores?limit={bad}"), None)
            .await;
        reply.assert_error(400, "validation_failed");
        assert_eq!(reply.field(), "limit");
    }
    let all = host
        .admin(Method::GET, "/admin/v1/stores", None)
        .await
        .expect(200);
    assert_eq!(
        all.body["data"].as_array().expect("data").len(),
        7,
        "default limit 50"
    );
}

#[tokio::test]
async fn a_restart_keeps_stores_installations_and_tokens() {
    let host = TestHost::start().await;
    let (store, token) = host
        .store_with_plugin("acme.example", &["orders.read"])
        .await;
    let host = host.restart().await;
    host.admin(Method::GET, &format!("/admin/v1/stores/{store}"), None)
        .await
        .expect(200);
    let me = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    assert_eq!(me.body["store"]["id"], store.as_str());
}

#[tokio::test]
async fn the_openapi_document_describes_every_operation() {
    let host = TestHost::start().await;
    let doc = host
        .send(Method::GET, "/v1/openapi.json", None, None)
        .await
        .expect(200);
    assert_eq!(doc.body["openapi"], "3.1.0");
    let paths = doc.body["paths"].as_object().expect("paths");
    assert!(paths.contains_key("/v1/installation"));
    assert!(paths.contains_key("/healthz"));
    assert!(
        paths.keys().all(|p| !p.starts_with("/admin/")),
        "the operator API has a document of its own"
    );
    assert!(doc.body["components"]["schemas"]["ErrorResponse"].is_object());

    // The operator API's document, public like the other.
    let operator = host
        .send(Method::GET, "/admin/v1/openapi.json", None, None)
        .await
        .expect(200);
    let paths = operator.body["paths"].as_object().expect("paths");
    for path in [
        "/admin/v1/stores",
        "/admin/v1/stores/{store_id}/installations/{id}",
        "/admin/v1/plugins",
    ] {
        assert!(paths.contains_key(path), "missing {path}");
    }
    assert!(paths.keys().all(|p| p.starts_with("/admin/v1/")));
    assert!(operator.body["components"]["schemas"]["ErrorResponse"].is_object());

    // The developer API's document, public too.
    let developer = host
        .send(Method::GET, "/dev/v1/openapi.json", None, None)
        .await
        .expect(200);
    let paths = developer.body["paths"].as_object().expect("paths");
    assert!(paths.contains_key("/dev/v1/plugins"));
    assert!(paths.contains_key("/dev/v1/invocations/{id}"));
    assert!(paths.keys().all(|p| p.starts_with("/dev/v1/")));
}

/// A path of the document with every `{param}` replaced by a well-formed id of no record.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|part| match part {
            "{store_id}" => "store_01jd4z7k8m3n5p6q7r8s9t0v1w".to_owned(),
            "{channel}" => "sms".to_owned(),
            p if p.starts_with('{') => "x_01jd4z7k8m3n5p6q7r8s9t0v1w".to_owned(),
            p => p.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[tokio::test]
async fn every_documented_operation_exists_and_documents_the_errors_it_answers() {
    let host = TestHost::start().await;
    let (_, token) = host.store_with_plugin("doc.example", &ALL_SCOPES).await;
    let mut dev = developer_signed_in(&host, "dev@doc.example", "correct horse").await;
    let key = make_key(&mut dev, "doc").await;
    for (document, credential) in [
        ("/v1/openapi.json", token.as_str()),
        ("/admin/v1/openapi.json", ADMIN_TOKEN),
        ("/dev/v1/openapi.json", key.as_str()),
    ] {
        let doc = host
            .send(Method::GET, document, None, None)
            .await
            .expect(200);
        let mut operations = 0;
        for (path, item) in doc.body["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("path item") {
                let Ok(method) = method.to_uppercase().parse::<Method>() else {
                    continue;
                };
                operations += 1;
                let responses = operation["responses"].as_object().expect("responses");
                let authenticated = path.starts_with("/v1/") || path.starts_with("/admin/v1/");
                if authenticated {
                    for status in ["401", "429"] {
                        assert!(
                            responses.contains_key(status),
                            "{method} {path} lacks {status}"
                        );
                    }
                }
                // Every operation is routed: a call is answered by the route, never `no_route` or 405.
                let body_text = "not json";
                let request = host
                    .request(method.clone(), &concrete(path))
                    .bearer_auth(credential)
                    .header("content-type", "text/plain")
                    .body(body_text);
                let reply = TestHost::read(request).await;
                assert_ne!(reply.code(), "no_route", "{method} {path}: {}", reply.body);
                assert_ne!(reply.status, 405, "{method} {path}: {}", reply.body);
                if operation.get("requestBody").is_some() {
                    // A body that is not JSON is 415, and the document says so.
                    assert!(responses.contains_key("415"), "{method} {path} lacks 415");
                    assert!(responses.contains_key("413"), "{method} {path} lacks 413");
                    assert_eq!(reply.status, 415, "{method} {path}: {}", reply.body);
                }
                if path.contains('{') {
                    assert!(responses.contains_key("404"), "{method} {path} lacks 404");
                }
                for (status, response) in responses {
                    if status.starts_with('4') {
                        assert_eq!(
                            response["content"]["application/json"]["schema"]["$ref"],
                            "#/components/schemas/ErrorResponse",
                            "{method} {path} {status}"
                        );
                    }
                }
            }
        }
        let least = if document.starts_with("/dev/") { 3 } else { 25 };
        assert!(
            operations >= least,
            "{document} documents {operations} operations"
        );
    }
}

#[tokio::test]
async fn the_merchant_configures_a_plugin_and_plugin_configured_fires() {
    let host = TestHost::start().await;
    let store = host.create_store("acme.example").await;
    host.publish("tagger", &[]).await;
    let (inst, token) = host.install(&store, "tagger").await;
    let path = format!("/admin/v1/stores/{store}/installations/{inst}/settings");
    let me = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    assert_eq!(me.body["settings"], json!({}));

    let reply = host
        .admin(
            Method::PUT,
            &path,
            Some(json!({"settings": {"tag": "vip", "threshold": 3}})),
        )
        .await
        .expect(200);
    assert_eq!(reply.body["settings"]["tag"], "vip");
    host.admin(
        Method::PUT,
        &path,
        Some(json!({"settings": {"tag": "vip", "threshold": 3}})),
    )
    .await
    .expect(200);
    let events = host.events(&store, "plugin.configured").await;
    assert_eq!(events.len(), 1, "an unchanged configuration fires nothing");
    assert_eq!(
        events[0]["data"]["installation"]["settings"]["threshold"],
        3
    );
    let me = host
        .call(&token, Method::GET, "/v1/installation", None)
        .await
        .expect(200);
    assert_eq!(me.body["settings"]["tag"], "vip");

    let bad = host
        .admin(Method::PUT, &path, Some(json!({"settings": [1, 2]})))
        .await;
    bad.assert_error(400, "validation_failed");
    assert_eq!(bad.field(), "settings");
    assert_eq!(host.events(&store, "plugin.installed").await.len(), 1);
}
