//! Misbehaves on every event, the way its settings say (`{"mode": "…"}`), so the tests can show
//! that each limit stops it while the host and other plugins carry on:
//! `loop` (CPU), `alloc` (memory), `stack` (recursion), `log` (log flood), `calls` (host-call
//! flood), `forbidden` (a write outside its scopes), `peek` (reads the order `order`, which may
//! belong to another store), `fail` (returns an error), `sleep` (blocks 60 s inside WASI),
//! `echo` (updates the customer of a customer event, re-triggering itself), `banner` (posts a
//! banner), `remember` (logs what an earlier invocation left in its memory: a counter in its
//! data and the contents of freshly grown heap, then leaves its own marks in both), anything
//! else (behaves).

use commerce_guest_sdk::{
    Error, Event, EventData, Plugin, Result, commerce_plugin, customers, log, notify, orders,
    settings,
};

#[derive(Default)]
struct Hostile;

#[derive(serde::Deserialize, Default)]
struct Settings {
    #[serde(default)]
    mode: String,
    #[serde(default)]
    order: String,
    /// Written into the notes `echo` leaves, so that two echoing plugins write different values.
    #[serde(default)]
    tag: String,
}

/// What `remember` counts its visits with: in the component's data, so each fresh instance
/// starts from the image's value (1000), whatever an earlier instance wrote.
static VISITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);

#[inline(never)]
fn recurse(n: u64) -> u64 {
    if n == u64::MAX {
        return 0;
    }
    recurse(std::hint::black_box(n + 1))
        .wrapping_mul(n | 1)
        .rotate_left(3)
        ^ n
}

impl Plugin for Hostile {
    fn on_event(&self, event: &Event) -> Result<()> {
        let Settings { mode, order, tag } = settings()?;
        match mode.as_str() {
            "loop" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut keep: Vec<Vec<u8>> = Vec::new();
                loop {
                    keep.push(std::hint::black_box(vec![1u8; 1 << 20]));
                }
            }
            "stack" => {
                std::hint::black_box(recurse(std::hint::black_box(0)));
                Ok(())
            }
            "log" => {
                let line = "x".repeat(4096);
                loop {
                    log::info(&line);
                }
            }
            "calls" => loop {
                let _ = std::hint::black_box(settings::<Settings>());
            },
            "forbidden" => {
                // The plugin has no `customers.write`: the host refuses, and nothing is created.
                let customer = customers::NewCustomer {
                    email: Some("intruder@example.com".to_owned()),
                    phone: None,
                    first_name: None,
                    last_name: None,
                    accepts_marketing: false,
                    tags: Vec::new(),
                    note: None,
                    addresses: Vec::new(),
                };
                customers::create(&customer).map(drop)
            }
            "peek" => {
                // Reads an order by id: another store's order is not found.
                orders::get(&order).map(drop)
            }
            "fail" => Err(Error::new(format!("failing {} on purpose", event.id))),
            "sleep" => {
                // Blocks inside WASI (a clock pollable), where fuel and epochs do not reach.
                std::thread::sleep(std::time::Duration::from_secs(60));
                Ok(())
            }
            "echo" => {
                // Writes the customer it was told about: each write fires `customer.updated`,
                // which would re-trigger this plugin (and its twin) without the host's loop
                // protection.
                let customer = match &event.data {
                    EventData::CustomerCreated(c) | EventData::CustomerUpdated(c) => c,
                    _ => return Ok(()),
                };
                let note = format!("{tag} saw {}", event.id);
                customers::update(
                    &customer.id,
                    &customers::CustomerPatch {
                        email: None,
                        phone: None,
                        first_name: None,
                        last_name: None,
                        accepts_marketing: None,
                        tags: None,
                        note: Some(note),
                        addresses: None,
                    },
                )
                .map(drop)
            }
            "remember" => {
                let earlier = VISITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) - 1000;
                // Half a MiB more than the instance starts with: memory grown for this call,
                // which must read as zeros (the allocator relies on it), then marked.
                let mut block = vec![0u8; 512 << 10];
                let clean = std::hint::black_box(&block).iter().all(|b| *b == 0);
                block.fill(0xAB);
                std::hint::black_box(&block);
                log::info(&format!(
                    "remembered {earlier} earlier visits; fresh memory {}",
                    if clean { "clean" } else { "dirty" }
                ));
                Ok(())
            }
            "banner" => {
                // Needs no scope; refused once the plugin is uninstalled.
                notify::Banner::new(notify::Tone::Warn, "Still here", "after the uninstall")
                    .ttl_hours(1)
                    .show()
                    .map(drop)
            }
            _ => {
                log::info(&format!("handled {} ({})", event.id, event.type_));
                Ok(())
            }
        }
    }
}

commerce_plugin!(Hostile);
