//! `commerce-host export` and `import` (issue 14): the demo's data moves from sled to the other
//! backend and back record for record, and a host on the imported storage serves it, its tokens
//! authenticate and its components run. The other backend is PostgreSQL when the suite runs on
//! it (`COMMERCE_HOST_TEST_DATABASE_URL`), else a second sled folder.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::Path;

use commerce_host::cli::client::HostClient;
use commerce_host::cli::demo;
use commerce_host::cli::export::{Moved, StorageArgs, export, import};
use commerce_host::storage::Embedded;
use commerce_host_tests::components::components_dir;
use commerce_host_tests::{ADMIN_TOKEN, TestHost, test_database};
use reqwest::Method;
use serde_json::{Value, json};

/// The dump at `path`: its header, and its records by key.
fn read_dump(path: &Path) -> (Value, BTreeMap<String, Value>) {
    let text = std::fs::read_to_string(path).expect("the dump");
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("a header")).expect("JSON");
    let mut records = BTreeMap::new();
    let mut end = None;
    for line in lines {
        let record: Value = serde_json::from_str(line).expect("a JSON line");
        if record["end"] == true {
            end = Some(record["records"].as_u64().expect("a count"));
            continue;
        }
        let key = record["key"].as_str().expect("a key").to_owned();
        assert!(
            records.insert(key, record["value"].clone()).is_none(),
            "one line per key"
        );
    }
    assert_eq!(
        end,
        Some(records.len() as u64),
        "the end line counts the records"
    );
    (header, records)
}

fn export_to(storage: &StorageArgs, path: &Path) -> Moved {
    export(
        storage,
        std::fs::File::create(path).expect("create the dump"),
    )
    .expect("export")
}

fn import_from(storage: &StorageArgs, path: &Path) -> anyhow::Result<Moved> {
    import(
        storage,
        BufReader::new(std::fs::File::open(path).expect("open the dump")),
    )
}

/// Runs `commerce-host {command} {flag} {file} --data {data}` on sled.
fn run_cli(command: &str, flag: &str, file: &Path, data: &Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_test-commerce-host"))
        .args([command, flag])
        .arg(file)
        .arg("--data")
        .arg(data)
        .env_remove("COMMERCE_HOST_DATABASE_URL")
        .env_remove("COMMERCE_HOST_STORE")
        .output()
        .expect("run commerce-host")
}

/// What the demo's shop sees through the API, and the operator's view of its installations.
async fn api_view(host: &TestHost, store: &str, token: &str) -> Vec<Value> {
    let mut view = Vec::new();
    for path in ["/v1/products", "/v1/customers", "/v1/orders"] {
        let page = host
            .call(token, Method::GET, &format!("{path}?limit=250"), None)
            .await
            .expect(200);
        view.push(page.body["data"].clone());
    }
    let installations = host
        .admin(
            Method::GET,
            &format!("/admin/v1/stores/{store}/installations"),
            None,
        )
        .await
        .expect(200);
    view.push(installations.body["data"].clone());
    view
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_data_moves_to_the_other_backend_and_back_record_for_record() {
    let work = tempfile::tempdir().expect("temp dir");
    // The demo, on sled whatever the suite runs on.
    let mut sled_host = TestHost::start_configured(|c| {
        c.database_url = None;
        c.store = Embedded::Sled;
    })
    .await;
    let cli = HostClient::new(&sled_host.base, ADMIN_TOKEN);
    let shop = demo::seed(
        &cli,
        &components_dir(),
        &sled_host.data_dir().join("demo-shop-token"),
    )
    .await
    .expect("the demo's data");
    let before = api_view(&sled_host, &shop.store, &shop.token).await;
    sled_host.stop().await;

    // sled → dump: every record, and the four example components from the data folder.
    let first = work.path().join("first.jsonl");
    let moved = export_to(&StorageArgs::new(&sled_host.data_dir(), None), &first);
    assert_eq!(moved.components, 4, "the example plugins' components");
    let (header, records) = read_dump(&first);
    assert_eq!(header["format"], "commerce-host-export");
    assert_eq!(header["version"], 1);
    assert_eq!(moved.records, records.len() as u64);
    for prefix in [
        "order/",
        "product/",
        "customer/",
        "inst/",
        "plugin/",
        "component-wasm/",
    ] {
        assert!(
            records.keys().any(|k| k.starts_with(prefix)),
            "the dump holds {prefix} records"
        );
    }

    // dump → the other backend, then back out: the same records.
    let other = tempfile::tempdir().expect("temp dir");
    let url = test_database(other.path());
    let other_storage = StorageArgs::new(other.path(), url.as_deref())
        .with_store(commerce_host_tests::test_store());
    assert_eq!(import_from(&other_storage, &first).expect("import"), moved);
    let second = work.path().join("second.jsonl");
    export_to(&other_storage, &second);
    assert_eq!(
        read_dump(&second).1,
        records,
        "the same records on the other backend"
    );

    // dump → fjall, the other embedded store (how a data folder moves to it), then back out:
    // the same records. The folder keeps its store: opened as sled's, it is refused, with the
    // flag to use.
    let fjall = tempfile::tempdir().expect("temp dir");
    let fjall_storage = StorageArgs::new(fjall.path(), None).with_store(Embedded::Fjall);
    assert_eq!(import_from(&fjall_storage, &first).expect("import"), moved);
    let from_fjall = work.path().join("from-fjall.jsonl");
    export_to(&fjall_storage, &from_fjall);
    assert_eq!(
        read_dump(&from_fjall).1,
        records,
        "the same records on fjall"
    );
    let refused = export(&StorageArgs::new(fjall.path(), None), std::io::sink())
        .expect_err("a fjall folder opened as sled's");
    assert!(
        format!("{refused:#}").contains("start with `--store fjall`"),
        "{refused:#}"
    );
    assert!(!fjall.path().join("db").exists(), "no sled store made");

    // A full storage refuses another import; so does a dump that is not one, or is cut off.
    let refused = import_from(&other_storage, &first).expect_err("not empty");
    assert!(refused.to_string().contains("not empty"), "{refused:#}");
    let fresh = tempfile::tempdir().expect("temp dir");
    let bad = work.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"format\":\"something-else\",\"version\":1}\n").expect("write");
    let refused = import_from(&StorageArgs::new(fresh.path(), None), &bad).expect_err("bad");
    assert!(
        refused.to_string().contains("not a commerce-host export"),
        "{refused:#}"
    );
    let cut = work.path().join("cut.jsonl");
    let text = std::fs::read_to_string(&first).expect("read");
    let kept: Vec<&str> = text.lines().take(10).collect();
    std::fs::write(&cut, kept.join("\n")).expect("write");
    let refused = import_from(&StorageArgs::new(fresh.path(), None), &cut).expect_err("cut");
    assert!(refused.to_string().contains("cut off"), "{refused:#}");

    // And back to sled: the same records again.
    let back = tempfile::tempdir().expect("temp dir");
    let back_storage = StorageArgs::new(back.path(), None);
    import_from(&back_storage, &second).expect("import back");
    let third = work.path().join("third.jsonl");
    export_to(&back_storage, &third);
    assert_eq!(
        read_dump(&third).1,
        records,
        "the same records back on sled"
    );

    // The same through the command line: `export` to a file, `import` from it.
    let by_cli = work.path().join("cli.jsonl");
    let exported = run_cli("export", "--output", &by_cli, back.path());
    assert!(exported.status.success(), "{exported:?}");
    let said = String::from_utf8_lossy(&exported.stderr);
    assert!(
        said.contains(&format!(
            "exported {} records (4 components)",
            moved.records
        )),
        "{said}"
    );
    let cli_target = tempfile::tempdir().expect("temp dir");
    let imported = run_cli("import", "--input", &by_cli, cli_target.path());
    assert!(imported.status.success(), "{imported:?}");
    let again = run_cli("import", "--input", &by_cli, cli_target.path());
    assert!(
        !again.status.success(),
        "a second import into a full folder is refused"
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("not empty"),
        "{again:?}"
    );
    let cli_back = work.path().join("cli-back.jsonl");
    export_to(&StorageArgs::new(cli_target.path(), None), &cli_back);
    assert_eq!(
        read_dump(&cli_back).1,
        records,
        "the same records through the command line"
    );

    // A host on the imported storage serves the same data to the same token, and the installed
    // components run: a paid order's thank-you reaches the store's outbox.
    let host = TestHost::start_in(other).await;
    assert_eq!(api_view(&host, &shop.store, &shop.token).await, before);
    host.raise_rate_limits(&shop.store).await;
    let customer = host
        .call(
            &shop.token,
            Method::POST,
            "/v1/customers",
            Some(json!({"email": "after-import@buyer.example"})),
        )
        .await
        .expect(201);
    let order = host
        .call(
            &shop.token,
            Method::POST,
            "/v1/orders",
            Some(
                json!({"currency": "EUR", "customer_id": customer.body["id"],
                "line_items": [{"title": "Mug", "unit_price": 1250, "quantity": 2}]}),
            ),
        )
        .await
        .expect(201);
    host.pay(&shop.store, &order.body).await.expect(200);
    let order_id = order.body["id"].as_str().expect("order id").to_owned();
    host.eventually("the component's thank-you for the new order", || async {
        let page = host
            .admin(
                Method::GET,
                &format!("/admin/v1/stores/{}/outbox?limit=250", shop.store),
                None,
            )
            .await
            .expect(200);
        let text = page.body["data"].to_string();
        (text.contains(&order_id) && text.contains("after-import@buyer.example")).then_some(())
    })
    .await;
}
