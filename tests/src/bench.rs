//! Bench figures as files: each bench writes its numbers to `target/bench/<bench>.json`, a flat
//! JSON object of named numbers, so that runs can be compared by a script as well as read.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing_subscriber::layer::SubscriberExt as _;

/// The named figures of one bench run, written on [`Figures::write`].
#[derive(Debug, Default)]
pub struct Figures {
    values: BTreeMap<String, f64>,
}

impl Figures {
    /// Records `value` under `name` (a later value of the same name replaces it).
    pub fn set(&mut self, name: &str, value: f64) {
        self.values.insert(name.to_owned(), value);
    }

    /// Writes the figures to `<target>/bench/<bench>.json` (the target folder is
    /// `CARGO_TARGET_DIR` when set, else the workspace's `target`) and returns the path.
    pub fn write(&self, bench: &str) -> anyhow::Result<PathBuf> {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
        let dir = target.join("bench");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{bench}.json"));
        let rounded: BTreeMap<&str, serde_json::Value> = self
            .values
            .iter()
            .map(|(k, v)| {
                let v = (v * 1000.0).round() / 1000.0;
                (k.as_str(), serde_json::json!(v))
            })
            .collect();
        std::fs::write(&path, serde_json::to_vec_pretty(&rounded)?)?;
        println!("figures written to {}", path.display());
        Ok(path)
    }
}

/// The number in the environment variable `name`, or `default` when it is unset or not a number
/// of that type: the benches' size and duration knobs.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The CPU time this process has used so far, user and system, all its threads (those ended
/// included): `/proc/self/stat`, in clock ticks of 10 ms. Beside a rate, a figure per event from
/// it tells a change that did less work from one that waited less (on this shared machine it
/// moves with the other load too). Zero where `/proc` is not there.
pub fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // `utime` and `stime` are the 14th and 15th fields: the 12th and 13th after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// What an embedded store's commits did over a phase of a bench: the difference of its
/// [`CommitStats`](commerce_host::storage::CommitStats) after and before, against the phase's
/// length. Every write of the host goes through that one commit path, one batch at a time, so
/// how busy it was tells how near the store is to holding the phase back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommitsDuring {
    /// Batches applied.
    pub batches: u64,
    /// Transactions whose writes they held (more than the batches: transactions that committed
    /// at the same moment shared one).
    pub transactions: u64,
    /// Records written or removed by them.
    pub writes: u64,
    /// The time applying them took, in percent of the phase's.
    pub busy_percent: f64,
    /// The time applying them took, per record written or removed, in µs.
    pub us_per_write: f64,
}

impl CommitsDuring {
    /// From the stats `before` and `after` a phase that lasted `elapsed` (`None` where the
    /// store does not count its commits: PostgreSQL).
    pub fn between(
        before: Option<commerce_host::storage::CommitStats>,
        after: Option<commerce_host::storage::CommitStats>,
        elapsed: Duration,
    ) -> Option<Self> {
        let (before, after) = (before?, after?);
        let writes = after.writes.saturating_sub(before.writes);
        let applying = after.applying.saturating_sub(before.applying).as_secs_f64();
        Some(Self {
            batches: after.batches.saturating_sub(before.batches),
            transactions: after.transactions.saturating_sub(before.transactions),
            writes,
            busy_percent: 100.0 * applying / elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
            us_per_write: 1e6 * applying / (writes.max(1) as f64),
        })
    }

    /// The records written or removed for each of `n` (deliveries, events: all the store's
    /// writes over the phase, whoever made them).
    pub fn writes_per(&self, n: usize) -> f64 {
        self.writes as f64 / n.max(1) as f64
    }

    /// A line of a bench's table: `per` the unit with its article (`a delivery`, `an event`),
    /// of which there were `n`.
    pub fn line(&self, per: &str, n: usize) -> String {
        format!(
            "  the store's commits meanwhile: {} batches of {} transactions, {} writes ({:.2} {per}), \
             applying them {:.1} % of the time ({:.1} µs a write)",
            self.batches,
            self.transactions,
            self.writes,
            self.writes_per(n),
            self.busy_percent,
            self.us_per_write
        )
    }
}

/// The engine's attempts as they are recorded, seen without polling storage: a tracing layer
/// that counts the `delivery.attempt` spans as they close (the engine closes an attempt's span
/// once the attempt is recorded) and wakes whoever waits. A bench that polled storage in a loop
/// would take one of a small machine's cores from the engine it measures.
#[derive(Debug, Clone, Default)]
pub struct Attempts {
    seen: Arc<Seen>,
}

#[derive(Debug)]
struct Seen {
    count: AtomicU64,
    /// When the latest attempt's span closed.
    last: Mutex<Option<Instant>>,
    /// The count the waiter waits for (`u64::MAX` while none waits): only the attempt that
    /// reaches it wakes the waiter. Woken by every attempt, the waiter took a wake-up and a
    /// task's poll from the engine for each of them (about 5 % of a backlog's samples).
    target: AtomicU64,
    wake: tokio::sync::Notify,
}

impl Default for Seen {
    fn default() -> Self {
        Self {
            count: AtomicU64::new(0),
            last: Mutex::new(None),
            target: AtomicU64::new(u64::MAX),
            wake: tokio::sync::Notify::new(),
        }
    }
}

/// The layer behind [`Attempts`].
struct Closing(Arc<Seen>);

impl<S> tracing_subscriber::Layer<S> for Closing
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        if ctx
            .span(&id)
            .is_some_and(|span| span.name() == "delivery.attempt")
        {
            let now = Instant::now();
            *self.0.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
            let count = self.0.count.fetch_add(1, Ordering::SeqCst) + 1;
            if count >= self.0.target.load(Ordering::SeqCst) {
                self.0.wake.notify_waiters();
            }
        }
    }
}

impl Attempts {
    /// Installs the layer as the process's tracing subscriber (only the engine's attempt spans
    /// are enabled, so nothing else pays for it). Call once, before the engine starts.
    pub fn install() -> anyhow::Result<Self> {
        use tracing_subscriber::Layer as _;
        let attempts = Self::default();
        let layer = Closing(attempts.seen.clone()).with_filter(
            tracing_subscriber::filter::filter_fn(|meta| meta.name() == "delivery.attempt"),
        );
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))?;
        Ok(attempts)
    }

    /// Attempts recorded so far.
    pub fn count(&self) -> u64 {
        self.seen.count.load(Ordering::SeqCst)
    }

    /// Waits until at least `count` attempts were recorded, for at most `timeout`; returns when
    /// the latest of them was. One waiter at a time.
    pub async fn wait_for(&self, count: u64, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Set before the count is read below: an attempt counted after that read sees it.
        self.seen.target.store(count, Ordering::SeqCst);
        let _clear = Clear(&self.seen.target);
        loop {
            let woken = self.seen.wake.notified();
            if self.count() >= count {
                let last = *self.seen.last.lock().unwrap_or_else(|e| e.into_inner());
                return last.ok_or_else(|| anyhow::anyhow!("no attempt was recorded"));
            }
            anyhow::ensure!(
                tokio::time::timeout_at(deadline, woken).await.is_ok(),
                "{count} attempts were not recorded within {timeout:?} ({} were)",
                self.count()
            );
        }
    }
}

/// Sets the awaited count back to none when the wait ends (however it ends).
struct Clear<'a>(&'a AtomicU64);

impl Drop for Clear<'_> {
    fn drop(&mut self) {
        self.0.store(u64::MAX, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commerce_host::storage::CommitStats;

    #[test]
    fn commits_during_a_phase_are_the_difference_against_its_length() {
        let before = CommitStats {
            batches: 10,
            transactions: 12,
            writes: 100,
            applying: Duration::from_millis(5),
        };
        let after = CommitStats {
            batches: 30,
            transactions: 52,
            writes: 1_100,
            applying: Duration::from_millis(55),
        };
        let during = CommitsDuring::between(Some(before), Some(after), Duration::from_millis(200))
            .expect("both counted");
        assert_eq!(
            (during.batches, during.transactions, during.writes),
            (20, 40, 1_000)
        );
        assert!((during.busy_percent - 25.0).abs() < 1e-9, "{during:?}");
        assert!((during.us_per_write - 50.0).abs() < 1e-9, "{during:?}");
        let line = during.line("a delivery", 500);
        assert!(
            line.contains("20 batches of 40 transactions, 1000 writes (2.00 a delivery)"),
            "{line}"
        );
        assert_eq!(
            CommitsDuring::between(None, Some(after), Duration::ZERO),
            None
        );
        // Nothing written: no division by zero.
        let idle = CommitsDuring::between(Some(after), Some(after), Duration::ZERO).expect("idle");
        assert_eq!((idle.writes, idle.us_per_write), (0, 0.0));
        assert_eq!(idle.busy_percent, 0.0);
    }
}
