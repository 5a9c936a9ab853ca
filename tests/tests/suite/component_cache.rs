//! The loaded components: loaded on a plugin's first event (a restart maps nothing), shared
//! between plugins whose compiled bytes are identical, bounded (the least recently used is let
//! go and loaded again), and never stale: new compiled files run instead of the loaded ones, and a
//! plugin whose files are gone stops running, whether the components folder is watched or every
//! load checks its file.

use commerce_host::Service;
use commerce_host::model::event::Event;
use commerce_host::model::ids::StoreId;
use commerce_host::model::plugin::Manifest;
use commerce_host::model::store::Installation;
use commerce_host::plugins::{Failure, FileChecks, Outcome, Plugins, RuntimeConfig};
use commerce_host::service::PageRequest;
use commerce_host_tests::TestHost;
use commerce_host_tests::components::component;
use reqwest::Method;
use serde_json::json;

/// A host's service and component runtime on a data folder of its own, with one store.
struct Host {
    data: tempfile::TempDir,
    service: Service,
    plugins: Plugins,
    store: StoreId,
}

fn manifest(name: &str, version: &str) -> Manifest {
    Manifest {
        name: name.to_owned(),
        version: version.to_owned(),
        description: None,
        scopes: vec!["orders.read".into()],
        contact_email: "dev@cache.example".into(),
        webhooks: Vec::new(),
        events: vec!["plugin.configured".into()],
        limits: None,
    }
}

impl Host {
    fn start(adjust: impl FnOnce(&mut RuntimeConfig)) -> Self {
        let data = tempfile::tempdir().expect("temp dir");
        let mut config = commerce_host_tests::test_config(data.path());
        config.admin_token = Some("component-cache-admin-token-0123".to_owned());
        config.durable_writes = false;
        adjust(&mut config.plugin_runtime);
        let service = commerce_host::open_service(&config).expect("a service");
        let plugins = Plugins::new(&data.path().join("components"), config.plugin_runtime)
            .expect("a runtime");
        let store = service.create_store("cache.example").expect("a store").id;
        Self {
            data,
            service,
            plugins,
            store,
        }
    }

    /// Publishes `wasm` as `name@version` (validated and compiled, as over HTTP).
    fn publish(&self, name: &str, version: &str, wasm: &[u8]) -> Manifest {
        let manifest = manifest(name, version);
        self.plugins
            .publish(
                &self.service,
                manifest.clone(),
                &Default::default(),
                Some(wasm),
            )
            .expect("published");
        manifest
    }

    /// Installs `name` and configures it with `settings`: the installation and the
    /// `plugin.configured` event that fired.
    fn install(&self, name: &str, settings: serde_json::Value) -> (Installation, Event) {
        let installed = self.service.install(&self.store, name).expect("installed");
        let installation = self
            .service
            .configure(&self.store, &installed.installation.id, settings)
            .expect("configured");
        let event = self
            .service
            .list_events(
                &self.store,
                Some("plugin.configured".parse().expect("an event type")),
                &PageRequest::first(1),
            )
            .expect("events")
            .data
            .remove(0);
        (installation, event)
    }

    /// Delivers `event` to `installation`'s component as the delivery engine does.
    fn run(
        &self,
        manifest: &Manifest,
        installation: &Installation,
        event: &Event,
    ) -> commerce_host::model::error::Result<Outcome> {
        let actor = self
            .service
            .component_actor(installation)
            .expect("an actor");
        self.plugins.invoke(&self.service, actor, manifest, event)
    }

    fn file(&self, name: &str, version: &str, ext: &str) -> std::path::PathBuf {
        self.data
            .path()
            .join("components")
            .join(format!("{name}@{version}.{ext}"))
    }
}

/// The hostile plugin's answer in mode `fail`: its handler returned an error.
fn refused(outcome: &Outcome) -> bool {
    matches!(&outcome.result, Err(Failure::Handler(m)) if m.contains("on purpose"))
}

/// Waits for the installation's first component attempt and returns it.
async fn first_attempt(host: &TestHost, store: &str, inst: &str) -> serde_json::Value {
    let path = format!("/admin/v1/stores/{store}/installations/{inst}/attempts");
    host.eventually("an attempt", || async {
        let page = host.admin(Method::GET, &path, None).await.expect(200);
        page.body["data"].as_array().and_then(|a| a.last().cloned())
    })
    .await
}

#[test]
fn a_restarted_runtime_loads_nothing_until_a_plugins_first_event() {
    let host = Host::start(|_| {});
    let m = host.publish("lazy", "1.0.0", &component("hostile"));
    let (installation, event) = host.install("lazy", json!({"mode": "ok"}));
    let compiled_at = std::fs::metadata(host.file("lazy", "1.0.0", "cwasm"))
        .and_then(|m| m.modified())
        .expect("a precompiled file");

    // The same folder under a new runtime, as after a restart.
    let restarted = Host {
        plugins: Plugins::new(
            &host.data.path().join("components"),
            RuntimeConfig::default(),
        )
        .expect("a runtime"),
        ..host
    };
    assert_eq!(restarted.plugins.cache_stats().components, 0);
    let outcome = restarted.run(&m, &installation, &event).expect("ran");
    assert_eq!(outcome.result, Ok(()));
    let stats = restarted.plugins.cache_stats();
    assert_eq!((stats.components, stats.loads), (1, 1));
    let after = std::fs::metadata(restarted.file("lazy", "1.0.0", "cwasm"))
        .and_then(|m| m.modified())
        .expect("a precompiled file");
    assert_eq!(compiled_at, after, "it was mapped, not compiled again");
}

#[test]
fn plugins_published_with_the_same_component_share_one_loaded_copy() {
    let host = Host::start(|_| {});
    let wasm = component("hostile");
    let a = host.publish("twin-a", "1.0.0", &wasm);
    let b = host.publish("twin-b", "1.0.0", &wasm);
    let (ia, ea) = host.install("twin-a", json!({"mode": "ok"}));
    let (ib, eb) = host.install("twin-b", json!({"mode": "fail"}));

    assert_eq!(host.run(&a, &ia, &ea).expect("ran").result, Ok(()));
    // The same code, each with its own installation's settings.
    assert!(refused(&host.run(&b, &ib, &eb).expect("ran")));
    let stats = host.plugins.cache_stats();
    assert_eq!(
        (stats.versions, stats.components, stats.loads, stats.shared),
        (2, 1, 1, 1),
        "{stats:?}"
    );
}

#[test]
fn plugins_loaded_from_many_threads_at_once_still_share_one_component() {
    let host = Host::start(|_| {});
    let wasm = component("hostile");
    let plugins: Vec<_> = (0..4)
        .map(|i| {
            let name = format!("crowd-{i}");
            let manifest = host.publish(&name, "1.0.0", &wasm);
            let (installation, event) = host.install(&name, json!({"mode": "ok"}));
            (manifest, installation, event)
        })
        .collect();
    // A fresh runtime on the folder, so that every thread's first event is a load.
    let host = Host {
        plugins: Plugins::new(
            &host.data.path().join("components"),
            RuntimeConfig::default(),
        )
        .expect("a runtime"),
        ..host
    };
    std::thread::scope(|scope| {
        for thread in 0..8 {
            let (host, plugins) = (&host, &plugins);
            scope.spawn(move || {
                for round in 0..3 {
                    let (m, i, e) = &plugins[(thread + round) % plugins.len()];
                    assert_eq!(host.run(m, i, e).expect("ran").result, Ok(()));
                }
            });
        }
    });
    let stats = host.plugins.cache_stats();
    assert_eq!(
        (stats.versions, stats.components, stats.loads),
        (4, 1, 1),
        "{stats:?}"
    );
}

#[test]
fn a_component_let_go_past_the_bound_is_loaded_again_on_its_next_event() {
    let host = Host::start(|config| config.max_loaded_components = 1);
    let left = host.publish("left", "1.0.0", &component("hostile"));
    let right = host.publish("right", "1.0.0", &component("order-thanks"));
    let (il, el) = host.install("left", json!({"mode": "ok"}));
    let (ir, er) = host.install("right", json!({}));

    for (m, i, e) in [(&left, &il, &el), (&right, &ir, &er), (&left, &il, &el)] {
        assert_eq!(host.run(m, i, e).expect("ran").result, Ok(()), "{}", m.name);
    }
    let stats = host.plugins.cache_stats();
    assert_eq!(
        (stats.components, stats.loads, stats.evictions),
        (1, 3, 2),
        "{stats:?}"
    );
}

/// Both ways of noticing changed files: the watch on the folder, and a check at every load.
const CHECKS: [FileChecks; 2] = [FileChecks::Watch, FileChecks::EveryLoad];

#[test]
fn new_compiled_files_run_instead_of_the_loaded_component() {
    let hostile = component("hostile");
    let thanks = component("order-thanks");
    for checks in CHECKS {
        let host = Host::start(|config| config.file_checks = checks);
        assert_eq!(
            host.plugins.watches_files(),
            checks == FileChecks::Watch && cfg!(target_os = "linux")
        );
        let swap = host.publish("swap", "1.0.0", &hostile);
        let (installation, event) = host.install("swap", json!({"mode": "fail"}));
        assert!(refused(
            &host.run(&swap, &installation, &event).expect("ran")
        ));

        // Stored again under the same name and version (as a publish does), with other code: the
        // thank-you plugin, which has nothing to do on `plugin.configured`.
        host.plugins
            .store_component(&swap, &thanks, "component")
            .expect("stored");
        let ran = host.run(&swap, &installation, &event).expect("ran");
        assert_eq!(ran.result, Ok(()), "{checks:?}");

        // Replaced on disk by another writer (a rename over it): noticed without being told.
        host.publish("other", "1.0.0", &hostile);
        let tmp = host.file("swap", "1.0.0", "cwasm.new");
        std::fs::copy(host.file("other", "1.0.0", "cwasm"), &tmp).expect("copied");
        std::fs::rename(&tmp, host.file("swap", "1.0.0", "cwasm")).expect("renamed");
        let ran = host.run(&swap, &installation, &event).expect("ran");
        assert!(refused(&ran), "{checks:?}: {:?}", ran.result);
        assert_eq!(
            host.plugins.cache_stats().components,
            1,
            "{checks:?}: the replaced components were let go"
        );
    }
}

#[test]
fn a_plugin_whose_files_are_removed_stops_running_instead_of_running_from_memory() {
    let hostile = component("hostile");
    for checks in CHECKS {
        let host = Host::start(|config| config.file_checks = checks);
        let m = host.publish("gone", "1.0.0", &hostile);
        // Another plugin with the same code keeps the component loaded.
        let twin = host.publish("twin", "1.0.0", &hostile);
        let (installation, event) = host.install("gone", json!({"mode": "ok"}));
        let (twin_installation, twin_event) = host.install("twin", json!({"mode": "ok"}));
        for (m, i, e) in [
            (&m, &installation, &event),
            (&twin, &twin_installation, &twin_event),
        ] {
            assert_eq!(host.run(m, i, e).expect("ran").result, Ok(()));
        }

        std::fs::remove_file(host.file("gone", "1.0.0", "wasm")).expect("removed");
        std::fs::remove_file(host.file("gone", "1.0.0", "cwasm")).expect("removed");
        if host.service.db.is_shared() {
            // On a database hosts share, the component lives in the database: this host's files
            // are its own cache, fetched and compiled again, as a host that never had them does.
            let ran = host.run(&m, &installation, &event).expect("ran");
            assert_eq!(ran.result, Ok(()), "{checks:?}: fetched again");
            assert!(host.file("gone", "1.0.0", "cwasm").exists());
            continue;
        }
        let error = host
            .run(&m, &installation, &event)
            .expect_err("no component to run");
        assert!(
            error.to_string().contains("gone@1.0.0"),
            "{checks:?}: {error}"
        );
        let stats = host.plugins.cache_stats();
        assert_eq!(
            (stats.versions, stats.components),
            (1, 1),
            "{checks:?}: {stats:?}"
        );
        let ran = host
            .run(&twin, &twin_installation, &twin_event)
            .expect("ran");
        assert_eq!(ran.result, Ok(()), "{checks:?}: its twin runs on");
    }
}

#[tokio::test]
async fn a_plugin_reinstalled_at_its_new_version_runs_the_new_component() {
    let host = TestHost::start().await;
    let publish = |version: &str, wasm: Vec<u8>| {
        json!({
            "manifest": {
                "name": "upgraded", "version": version, "scopes": ["orders.read"],
                "contact_email": "dev@upgraded.example", "events": ["plugin.configured"],
            },
            "component": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, wasm),
        })
    };
    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish("1.0.0", component("hostile"))),
    )
    .await
    .expect(201);
    let store = host.create_store("upgraded.example").await;
    let configure = |inst: String| {
        let host = &host;
        let store = store.clone();
        async move {
            host.admin(
                Method::PUT,
                &format!("/admin/v1/stores/{store}/installations/{inst}/settings"),
                Some(json!({"settings": {"mode": "fail"}})),
            )
            .await
            .expect(200);
            first_attempt(host, &store, &inst).await
        }
    };
    let (first, _) = host.install(&store, "upgraded").await;
    assert_eq!(configure(first.clone()).await["succeeded"], false);

    host.admin(
        Method::POST,
        "/admin/v1/plugins",
        Some(publish("1.1.0", component("order-thanks"))),
    )
    .await
    .expect(201);
    host.admin(
        Method::DELETE,
        &format!("/admin/v1/stores/{store}/installations/{first}"),
        None,
    )
    .await
    .expect(204);
    let (second, _) = host.install(&store, "upgraded").await;
    assert_eq!(configure(second).await["succeeded"], true);
}
