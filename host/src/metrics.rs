//! Operational metrics, served as `GET /metrics` in the Prometheus text format.
//!
//! Every host has its own registry: [`Metrics`] holds a `metrics-exporter-prometheus` recorder
//! that is never installed as the process-wide one. Each recording site passes it to
//! [`metrics::with_local_recorder`] around a synchronous call of the `metrics` macros (no `.await`
//! inside), so two hosts in one process (as in the tests) never see each other's series, and a
//! series counts exactly what its host did. The recorder lives in the service (`service.metrics`),
//! which every layer already holds.
//!
//! Labels carry only bounded sets of values: route templates (never a raw path with ids), status
//! codes, event types, channels, target kinds and outcomes; never a store, installation or id.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use metrics::{
    Counter, Histogram, Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge,
    histogram,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// Upper bounds of the latency buckets, in seconds (5 ms to 60 s).
const SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Histogram samples recorded between two upkeeps of the registry: the recorder keeps every
/// sample until it is drained into its buckets, which a scrape does, and so does its upkeep,
/// which a registry that is not installed process-wide must run itself (see
/// [`Metrics::sampled`]).
const UPKEEP_EVERY: u64 = 4096;

/// `commerce_host_http_requests_total{route,method,status}`.
pub const HTTP_REQUESTS: &str = "commerce_host_http_requests_total";
/// `commerce_host_http_request_duration_seconds{route,method}`.
pub const HTTP_DURATION: &str = "commerce_host_http_request_duration_seconds";
/// `commerce_host_rate_limited_requests_total{limit}`.
pub const RATE_LIMITED: &str = "commerce_host_rate_limited_requests_total";
/// `commerce_host_quota_refusals_total{channel}`.
pub const QUOTA_REFUSALS: &str = "commerce_host_quota_refusals_total";
/// `commerce_host_events_emitted_total{type}`.
pub const EVENTS_EMITTED: &str = "commerce_host_events_emitted_total";
/// `commerce_host_delivery_attempts_total{target,outcome}`.
pub const DELIVERY_ATTEMPTS: &str = "commerce_host_delivery_attempts_total";
/// `commerce_host_delivery_attempt_duration_seconds{target}`.
pub const DELIVERY_DURATION: &str = "commerce_host_delivery_attempt_duration_seconds";
/// `commerce_host_delivery_queue_due`.
pub const QUEUE_DUE: &str = "commerce_host_delivery_queue_due";
/// `commerce_host_delivery_queue_oldest_due_age_seconds`.
pub const QUEUE_OLDEST_AGE: &str = "commerce_host_delivery_queue_oldest_due_age_seconds";
/// `commerce_host_delivery_events_parked`.
pub const EVENTS_PARKED: &str = "commerce_host_delivery_events_parked";
/// `commerce_host_hosts_live`.
pub const HOSTS_LIVE: &str = "commerce_host_hosts_live";
/// `commerce_host_delivery_targets_paused_total{target}`.
pub const TARGETS_PAUSED: &str = "commerce_host_delivery_targets_paused_total";
/// `commerce_host_component_invocations_total{outcome}`.
pub const COMPONENT_INVOCATIONS: &str = "commerce_host_component_invocations_total";
/// `commerce_host_component_invocation_duration_seconds{outcome}`.
pub const COMPONENT_DURATION: &str = "commerce_host_component_invocation_duration_seconds";
/// `commerce_host_notifications_total{channel,outcome}`.
pub const NOTIFICATIONS: &str = "commerce_host_notifications_total";
/// `commerce_host_storage_commits_total`.
pub const STORAGE_COMMITS: &str = "commerce_host_storage_commits_total";
/// `commerce_host_storage_committed_transactions_total`.
pub const STORAGE_TRANSACTIONS: &str = "commerce_host_storage_committed_transactions_total";
/// `commerce_host_storage_committed_writes_total`.
pub const STORAGE_WRITES: &str = "commerce_host_storage_committed_writes_total";
/// `commerce_host_storage_commit_apply_microseconds_total`.
pub const STORAGE_APPLYING: &str = "commerce_host_storage_commit_apply_microseconds_total";

/// The queue-depth gauge counts at most this many due entries (one bounded scan per scrape).
pub const QUEUE_SCAN_LIMIT: usize = 10_000;

/// Which limit refused a request with 429 `rate_limited`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateLimit {
    /// The store's request rate limit on `/v1`.
    Store,
    /// The per-address limit on failed authentication.
    Auth,
}

impl RateLimit {
    fn label(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Auth => "auth",
        }
    }
}

/// What a delivery went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    /// A webhook subscription.
    Webhook,
    /// A component installation.
    Component,
}

impl TargetKind {
    /// Its place in [`EngineSeries`]' arrays.
    fn index(self) -> usize {
        match self {
            Self::Webhook => 0,
            Self::Component => 1,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Webhook => "webhook",
            Self::Component => "component",
        }
    }
}

/// How a notification moved: accepted at the request, then sent or finally failed by the
/// delivery engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationOutcome {
    /// Accepted (queued, put in the outbox, or shown).
    Accepted,
    /// Sent through the merchant's sender.
    Sent,
    /// Failed for good (a permanent failure, or the retries ran out).
    Failed,
}

impl NotificationOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Sent => "sent",
            Self::Failed => "failed",
        }
    }
}

/// One host's metrics registry.
#[derive(Clone)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
    /// The series of HTTP requests by route template, then method and status, registered once
    /// each: a request then costs a look-up and two atomic updates, not a registration.
    http: Arc<RwLock<HttpSeries>>,
    /// The series of the engine's attempts and invocations, each registered on its first use.
    engine: Arc<EngineSeries>,
    /// Histogram samples recorded, counting to the next upkeep ([`Metrics::sampled`]).
    samples: Arc<AtomicU64>,
}

/// The `outcome` labels of component invocations (see
/// [`invocation_outcome`](crate::plugins::runtime::invocation_outcome), whose test checks that
/// each label it gives is here).
pub(crate) const INVOCATION_OUTCOMES: [&str; 9] = [
    "ok",
    "handler_error",
    "trap",
    "fuel",
    "memory",
    "timeout",
    "limit",
    "instantiate",
    "host_error",
];

/// The engine's series, registered once each on first use: an attempt then costs two atomic
/// updates, not two look-ups of a name and its labels in the registry (about 2 % of the CPU of a
/// component backlog's drain, as the macros were).
#[derive(Default)]
struct EngineSeries {
    /// By target kind, then succeeded.
    attempts: [[OnceLock<Counter>; 2]; 2],
    /// By target kind.
    attempt_durations: [OnceLock<Histogram>; 2],
    /// By [`INVOCATION_OUTCOMES`].
    invocations: [OnceLock<(Counter, Histogram)>; INVOCATION_OUTCOMES.len()],
}

/// Route template → (method, status) → the request counter and the duration histogram.
type HttpSeries = HashMap<String, HashMap<(&'static str, u16), (Counter, Histogram)>>;

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A new, empty registry with the series described.
    pub fn new() -> Self {
        let builder = PrometheusBuilder::new();
        let recorder = match builder.set_buckets(SECONDS_BUCKETS) {
            Ok(builder) => builder.build_recorder(),
            // Only an empty bucket list is refused; fall back to summaries rather than fail.
            Err(_) => PrometheusBuilder::new().build_recorder(),
        };
        let handle = recorder.handle();
        let metrics = Self {
            recorder: Arc::new(recorder),
            handle,
            http: Arc::default(),
            engine: Arc::default(),
            samples: Arc::default(),
        };
        metrics.describe();
        metrics
    }

    fn with<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(self.recorder.as_ref(), f)
    }

    fn describe(&self) {
        self.with(|| {
            describe_counter!(HTTP_REQUESTS, "HTTP requests by route template, method and status.");
            describe_histogram!(
                HTTP_DURATION,
                Unit::Seconds,
                "Time to answer an HTTP request, by route template and method."
            );
            describe_counter!(
                RATE_LIMITED,
                "Requests refused with 429 rate_limited, by limit (store, auth)."
            );
            describe_counter!(
                QUOTA_REFUSALS,
                "Notifications refused with 429 quota_exceeded, by channel."
            );
            describe_counter!(EVENTS_EMITTED, "Committed events fanned out, by type.");
            describe_counter!(
                DELIVERY_ATTEMPTS,
                "Delivery attempts by target kind (webhook, component) and outcome (succeeded, failed)."
            );
            describe_histogram!(
                DELIVERY_DURATION,
                Unit::Seconds,
                "Duration of a delivery attempt, by target kind."
            );
            describe_gauge!(
                QUEUE_DUE,
                "Work queue entries (deliveries, messages, host mail) due now (in flight included), counted up to 10000."
            );
            describe_gauge!(
                QUEUE_OLDEST_AGE,
                Unit::Seconds,
                "How long the oldest due work queue entry has been due (0 when none is)."
            );
            describe_gauge!(
                EVENTS_PARKED,
                "Committed events whose fan-out waits, parked in memory, for their store's deliveries ahead of their attempts to fall to half of its bound (2048 by default; one host with its own database)."
            );
            describe_gauge!(
                HOSTS_LIVE,
                "Hosts sharing the database heard from within 5 s, this one included (1 on a storage of its own)."
            );
            describe_counter!(
                TARGETS_PAUSED,
                "Targets paused because their retries ran out, by target kind."
            );
            describe_counter!(
                COMPONENT_INVOCATIONS,
                "Component invocations by outcome (ok, handler_error, trap, fuel, memory, timeout, limit, instantiate, host_error)."
            );
            describe_histogram!(
                COMPONENT_DURATION,
                Unit::Seconds,
                "Wall-clock duration of a component invocation, by outcome."
            );
            describe_counter!(
                NOTIFICATIONS,
                "Notifications by channel and outcome (accepted, sent, failed)."
            );
            describe_counter!(
                STORAGE_COMMITS,
                "Batches the embedded store (sled, fjall) applied, one at a time, each the writes of one or more transactions."
            );
            describe_counter!(
                STORAGE_TRANSACTIONS,
                "Transactions whose writes the embedded store's batches held."
            );
            describe_counter!(
                STORAGE_WRITES,
                "Records written or removed by the embedded store's batches."
            );
            describe_counter!(
                STORAGE_APPLYING,
                Unit::Microseconds,
                "Time the embedded store spent applying its batches; its rate is the share of the time its one commit path was busy."
            );
        });
    }

    /// Renders the registry in the Prometheus text format.
    pub fn render(&self) -> String {
        self.handle.render()
    }

    /// Records `value` in `histogram`, and every [`UPKEEP_EVERY`] samples runs the registry's
    /// upkeep, which drains the samples kept into the histograms' buckets. The recorder keeps
    /// each sample (8 bytes and its share of a block) until then: with no upkeep, a host that
    /// nobody scrapes grew by every request and attempt it ever made (2 million samples: 34 MB).
    fn sampled(&self, histogram: &Histogram, value: f64) {
        histogram.record(value);
        if self.samples.fetch_add(1, Ordering::Relaxed) % UPKEEP_EVERY == UPKEEP_EVERY - 1 {
            self.handle.run_upkeep();
        }
    }

    /// An HTTP request was answered.
    pub fn http_request(&self, route: &str, method: &'static str, status: u16, took: Duration) {
        let known = self
            .http
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(route)
            .and_then(|by| by.get(&(method, status)))
            .map(|(c, h)| (c.clone(), h.clone()));
        let (requests, duration) = match known {
            Some(series) => series,
            None => {
                let series = self.with(|| {
                    let (route, method) = (route.to_owned(), method.to_owned());
                    (
                        counter!(HTTP_REQUESTS, "route" => route.clone(), "method" => method.clone(), "status" => status.to_string()),
                        histogram!(HTTP_DURATION, "route" => route, "method" => method),
                    )
                });
                self.http
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(route.to_owned())
                    .or_default()
                    .insert((method, status), series.clone());
                series
            }
        };
        requests.increment(1);
        self.sampled(&duration, took.as_secs_f64());
    }

    /// A request was refused with 429 `rate_limited`.
    pub fn rate_limited(&self, limit: RateLimit) {
        self.with(|| counter!(RATE_LIMITED, "limit" => limit.label()).increment(1));
    }

    /// A notification was refused with 429 `quota_exceeded`.
    pub fn quota_refused(&self, channel: &str) {
        let channel = channel.to_owned();
        self.with(|| counter!(QUOTA_REFUSALS, "channel" => channel).increment(1));
    }

    /// A committed event was fanned out.
    pub fn event_emitted(&self, kind: &str) {
        let kind = kind.to_owned();
        self.with(|| counter!(EVENTS_EMITTED, "type" => kind).increment(1));
    }

    /// A delivery attempt reached its target and was recorded.
    pub fn delivery_attempt(&self, target: TargetKind, succeeded: bool, took: Duration) {
        let kind = target.index();
        let outcome = if succeeded { "succeeded" } else { "failed" };
        let series = &self.engine;
        series.attempts[kind][usize::from(succeeded)]
            .get_or_init(|| {
                self.with(|| {
                    counter!(DELIVERY_ATTEMPTS, "target" => target.label(), "outcome" => outcome)
                })
            })
            .increment(1);
        let duration = series.attempt_durations[kind].get_or_init(|| {
            self.with(|| histogram!(DELIVERY_DURATION, "target" => target.label()))
        });
        self.sampled(duration, took.as_secs_f64());
    }

    /// A target was paused because its retries ran out.
    pub fn target_paused(&self, target: TargetKind) {
        self.with(|| counter!(TARGETS_PAUSED, "target" => target.label()).increment(1));
    }

    /// A component invocation ended with `outcome` (see
    /// [`invocation_outcome`](crate::plugins::runtime::invocation_outcome)).
    pub fn component_invocation(&self, outcome: &'static str, took: Duration) {
        let register = || {
            self.with(|| {
                (
                    counter!(COMPONENT_INVOCATIONS, "outcome" => outcome),
                    histogram!(COMPONENT_DURATION, "outcome" => outcome),
                )
            })
        };
        let looked_up;
        let (count, duration) = match INVOCATION_OUTCOMES.iter().position(|o| *o == outcome) {
            Some(i) => self.engine.invocations[i].get_or_init(register),
            None => {
                // An outcome not in the list: looked up each time.
                looked_up = register();
                &looked_up
            }
        };
        count.increment(1);
        self.sampled(duration, took.as_secs_f64());
    }

    /// A notification on `channel` moved to `outcome`.
    pub fn notification(&self, channel: &str, outcome: NotificationOutcome) {
        let channel = channel.to_owned();
        self.with(|| {
            counter!(NOTIFICATIONS, "channel" => channel, "outcome" => outcome.label())
                .increment(1);
        });
    }

    /// Sets the queue gauges (computed at scrape time): work due, how long the oldest has been
    /// due, and events parked.
    pub fn queue(&self, due: usize, oldest_age: Duration, parked: usize) {
        self.with(|| {
            gauge!(QUEUE_DUE).set(due as f64);
            gauge!(QUEUE_OLDEST_AGE).set(oldest_age.as_secs_f64());
            gauge!(EVENTS_PARKED).set(parked as f64);
        });
    }

    /// Sets the live hosts' gauge (read at scrape time).
    pub fn hosts_live(&self, live: usize) {
        self.with(|| gauge!(HOSTS_LIVE).set(live as f64));
    }

    /// Sets the embedded store's commit counters to what it has applied since it was opened
    /// (read at scrape time; not called on PostgreSQL, where each transaction commits on its
    /// own): its batches, their transactions and writes, and the time applying them took.
    pub fn storage_commits(
        &self,
        batches: u64,
        transactions: u64,
        writes: u64,
        applying: Duration,
    ) {
        let micros = u64::try_from(applying.as_micros()).unwrap_or(u64::MAX);
        self.with(|| {
            counter!(STORAGE_COMMITS).absolute(batches);
            counter!(STORAGE_TRANSACTIONS).absolute(transactions);
            counter!(STORAGE_WRITES).absolute(writes);
            counter!(STORAGE_APPLYING).absolute(micros);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_registries_do_not_share_series() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.event_emitted("order.created");
        a.event_emitted("order.created");
        b.event_emitted("order.paid");
        let (a, b) = (a.render(), b.render());
        assert!(
            a.contains(r#"commerce_host_events_emitted_total{type="order.created"} 2"#),
            "{a}"
        );
        assert!(!a.contains("order.paid"), "{a}");
        assert!(!b.contains("order.created"), "{b}");
    }

    #[test]
    fn every_duration_counts_towards_the_upkeep_and_none_is_lost_by_it() {
        let m = Metrics::new();
        let n = 5_000u64;
        for i in 0..n {
            let took = Duration::from_micros(i % 3_000);
            m.http_request("/v1/orders/{id}", "GET", 200, took);
            m.delivery_attempt(TargetKind::Component, true, took);
            m.component_invocation("ok", took);
        }
        // Every site goes through `sampled`: the registry was drained 3 times (at 4 096, 8 192
        // and 12 288 samples) without a scrape, and keeps at most UPKEEP_EVERY samples undrained.
        let recorded = m.samples.load(Ordering::Relaxed);
        assert_eq!(recorded, 3 * n);
        assert_eq!(recorded / UPKEEP_EVERY, 3);
        // The upkeep moved the samples into the buckets; the scrape still counts them all.
        let text = m.render();
        for series in [
            r#"commerce_host_http_request_duration_seconds_count{route="/v1/orders/{id}",method="GET"} 5000"#,
            r#"commerce_host_delivery_attempt_duration_seconds_count{target="component"} 5000"#,
            r#"commerce_host_component_invocation_duration_seconds_count{outcome="ok"} 5000"#,
            r#"commerce_host_delivery_attempt_duration_seconds_bucket{target="component",le="0.005"} 5000"#,
        ] {
            assert!(text.contains(series), "{series} in\n{text}");
        }
    }

    #[test]
    fn durations_render_as_histograms_with_buckets() {
        let m = Metrics::new();
        m.delivery_attempt(TargetKind::Webhook, true, Duration::from_millis(20));
        let text = m.render();
        assert!(
            text.contains("# TYPE commerce_host_delivery_attempt_duration_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains(
                r#"commerce_host_delivery_attempt_duration_seconds_bucket{target="webhook",le="0.025"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(
                r#"commerce_host_delivery_attempts_total{target="webhook",outcome="succeeded"} 1"#
            ),
            "{text}"
        );
    }

    #[test]
    fn each_attempt_and_invocation_counts_in_its_own_series_registered_once() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.delivery_attempt(TargetKind::Component, false, Duration::from_millis(1));
        }
        m.delivery_attempt(TargetKind::Component, true, Duration::from_millis(1));
        m.delivery_attempt(TargetKind::Webhook, false, Duration::from_secs(2));
        for outcome in INVOCATION_OUTCOMES {
            m.component_invocation(outcome, Duration::from_millis(1));
        }
        m.component_invocation("fuel", Duration::from_millis(1));
        m.component_invocation("another", Duration::from_millis(1));
        m.component_invocation("another", Duration::from_millis(1));
        let text = m.render();
        for line in [
            r#"commerce_host_delivery_attempts_total{target="component",outcome="failed"} 3"#,
            r#"commerce_host_delivery_attempts_total{target="component",outcome="succeeded"} 1"#,
            r#"commerce_host_delivery_attempts_total{target="webhook",outcome="failed"} 1"#,
            r#"commerce_host_delivery_attempt_duration_seconds_count{target="component"} 4"#,
            r#"commerce_host_delivery_attempt_duration_seconds_count{target="webhook"} 1"#,
            r#"commerce_host_component_invocations_total{outcome="ok"} 1"#,
            r#"commerce_host_component_invocations_total{outcome="host_error"} 1"#,
            r#"commerce_host_component_invocations_total{outcome="fuel"} 2"#,
            r#"commerce_host_component_invocation_duration_seconds_count{outcome="fuel"} 2"#,
            r#"commerce_host_component_invocations_total{outcome="another"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        assert!(
            !text.contains(
                r#"commerce_host_delivery_attempts_total{target="webhook",outcome="succeeded"}"#
            ),
            "a series is registered on its first use only: {text}"
        );
    }
}
