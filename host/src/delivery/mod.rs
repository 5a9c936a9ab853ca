//! The delivery engine: one background task that runs everything the host does after a commit.
//! It turns the event outbox into durable deliveries, and runs the due entries of the work queue
//! (`crate::storage::queue`) with bounded concurrency: webhook attempts and component
//! invocations (retried on the spec's schedule; the last failure pauses the target, whose notice
//! is queued with the pause), messages through the merchant's senders, and the host's own mail.
//! It also purges expired events.
//!
//! Time comes from the injected clock: the engine wakes on new work (a [`tokio::sync::Notify`]
//! rung by commits that queue work) or on a short real-time poll, and compares due times with
//! `clock.now()`, so tests run the whole 32-hour schedule in milliseconds.
//!
//! Delivery is at least once: a delivery's entry leaves the queue in the transaction that records
//! its attempt, so a host killed during an attempt makes it again after the restart (a mail
//! likewise; a message after its lease). A first attempt the fan-out handed over in memory
//! ([`first`]) has no queue entry, and its delivery is written with it: its event's outbox entry
//! stays until the attempt is recorded, and after a restart the fan-out makes the delivery again
//! from there (or queues it, written pending meanwhile). Receivers deduplicate with the
//! `X-Service-Event-Id` header, providers with `Idempotency-Key`.
//!
//! Every request goes through the one outbound client (`client.rs`), every email through the one
//! SMTP sender (`smtp.rs`).

pub mod client;
pub mod fair;
mod first;
mod invoker;
pub mod mail;
pub mod messages;
mod ready;
mod recent;
pub mod smtp;
pub mod webhook;

use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;
use tracing::Instrument as _;

use self::client::{HttpClient, Timeouts};
use self::fair::{Fair, Kind, MESSAGE_CONCURRENCY, NotStarted, Slot};
use self::mail::HostMail;
use self::ready::Entry;
use crate::metrics::TargetKind;
use crate::model::delivery::Outcome;
use crate::model::delivery::{DueEntry, RETENTION, TargetRef, millis};
use crate::model::error::{Error, Result};
use crate::model::event::Cause;
use crate::model::work::{Work, WorkKind};
use crate::service::Service;
use crate::service::deliveries::peers;
use crate::service::deliveries::queue::{self, Claimed};
use crate::service::deliveries::target::{self, Paused, Target, TargetState};
use crate::service::events::with_cause;
use crate::storage::just_before;

pub use self::fair::MAX_IN_FLIGHT_PER_TARGET;

/// How many targets whose share is full a dispatch round passes over, before it waits for a
/// running attempt to finish: a few dozen in most rounds (enough for another store's entry
/// behind one installation's busy targets to start in the next round), and a longer sweep every
/// [`SWEEP_EVERY`], which finds the entries of other stores behind a larger backlog (bounding
/// the cost of the rounds in between). A target found full is passed over with all its entries
/// at once (see [`ready`]): a round costs the targets it meets, not the entries they hold.
const SKIP_BUDGET: usize = 64;
/// See [`SKIP_BUDGET`].
const SWEEP_BUDGET: usize = 1024;
/// See [`SKIP_BUDGET`]. The sweep also reads every lane on from its cursor (finding retries that
/// came due), and from its head every [`RESCAN_EVERY`].
const SWEEP_EVERY: Duration = Duration::from_millis(50);
/// How often a busy engine reads every lane from its head (an idle one does on each poll): what
/// its cursor cannot see, entries queued behind it (by a wall clock that went back, or whose
/// claim was lost or held by another host), is found within this.
const RESCAN_EVERY: Duration = Duration::from_secs(1);

const BATCH: usize = 256;

/// How often the fan-out reads the whole outbox from its head (see [`first`]), by the service's
/// clock, however often commits wake it.
const OUTBOX_READ_WHOLE_EVERY: Duration = Duration::from_secs(10);

/// Targets whose owner the engine remembers; past this the memory starts again (it only saves
/// two reads per attempt).
const MAX_OWNERS_CACHED: usize = 100_000;

/// The installation and plugin behind a target.
#[derive(Debug, Clone)]
struct Owner {
    installation: String,
    plugin: String,
}
const PURGE_EVERY: SignedDuration = SignedDuration::from_mins(1);

/// The pool a kind of work draws from.
fn pool_of(kind: WorkKind) -> Kind {
    match kind {
        WorkKind::Webhook => Kind::Webhook,
        WorkKind::Component => Kind::Component,
        WorkKind::Message | WorkKind::Mail => Kind::Message,
    }
}

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Webhook attempts in flight at once, across all targets.
    pub concurrency: usize,
    /// Component invocations in flight at once (the runtime's instance pool).
    pub component_concurrency: usize,
    /// How often to look for retries (of deliveries, messages, mail) that came due.
    pub poll_interval: Duration,
    /// How long a webhook receiver has to answer.
    pub webhook_timeout: Duration,
    /// SMTP server for the host's own mail; `None`: the operator's outbox.
    pub smtp_url: Option<String>,
    /// Sender of the host's own mail.
    pub mail_from: String,
}

/// The running engine.
#[derive(Debug)]
pub struct Engine {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    /// The attempt recorder's task: it ends once the engine's task (and with it every sender of
    /// attempts) is gone.
    recorder: tokio::task::JoinHandle<()>,
    alive: Arc<AtomicBool>,
}

/// What a started queue entry runs: a delivery's attempt, claimed in the round that started it,
/// or the sending of a message or a mail (which claim their own work).
enum Job {
    Attempt(DueEntry, Attempting),
    Message,
    Mail,
}

/// The delivery an attempt is for.
enum Attempting {
    /// Handed over for its first attempt (see [`first`]), as made, with its event while the
    /// recent events keep it.
    Made(first::Made),
    /// Claimed from its stored record.
    Claimed(Box<crate::model::delivery::Delivery>),
}

impl Attempting {
    fn delivery(&self) -> &crate::model::delivery::Delivery {
        match self {
            Attempting::Made(made) => &made.delivery,
            Attempting::Claimed(claimed) => claimed,
        }
    }

    /// Its event, for one handed over while the recent events keep it.
    fn event(&self) -> Option<Arc<recent::RecentEvent>> {
        match self {
            Attempting::Made(made) => made.event.upgrade(),
            Attempting::Claimed(_) => None,
        }
    }

    /// The delivery as made, for one handed over.
    fn made(&self) -> Option<Arc<crate::model::delivery::Delivery>> {
        match self {
            Attempting::Made(made) => Some(made.delivery.clone()),
            Attempting::Claimed(_) => None,
        }
    }
}

/// An attempt made, waiting to be recorded with its place (see [`record_attempts`]).
struct Pending {
    attempt: Attempted,
    /// Its queue entry's place: in flight until the attempt is recorded.
    ticket: fair::Ticket,
}

/// An attempt made: what its record writes, and what the recorder notes once it is written.
struct Attempted {
    due_key: String,
    /// A first attempt from memory (see [`first`]): the delivery as made (its queue entry was
    /// never written, and the delivery perhaps not either).
    made: Option<Arc<crate::model::delivery::Delivery>>,
    /// Whether its delivery may be stored (else the record writes it without reading it, see
    /// [`first::First::written_by_record`]).
    stored: queue::Stored,
    /// What its record's transaction writes besides (see [`first::First::alongside`]).
    alongside: queue::Alongside,
    entry: DueEntry,
    outcome: Outcome,
    /// When it started: its time until recorded is counted in the metrics.
    wall: std::time::Instant,
}

/// Runs `f`, which waits for the database, without holding up the async runtime's workers where
/// hosts share a (remote) database: in `block_in_place` on a multi-threaded runtime, which hands
/// this worker's other tasks to another thread meanwhile. On sled (a local commit takes
/// microseconds) and on a single-threaded runtime it runs in place.
pub(crate) fn off_workers<R>(service: &Service, f: impl FnOnce() -> R) -> R {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_threaded && service.db.is_shared() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

/// Lets the tasks already queued on this worker run, then goes on at once. Not
/// `tokio::task::yield_now`, which hands the task back only once the worker has run out of ready
/// tasks and polled its drivers: under a burst's load there are always more (the attempts, the
/// receiver's connections), and the engine's loop waited there 20 to 96 ms at a time (a log of
/// its waits in a burst of 50 000 deliveries), while another store's work piled up unread. A
/// task that wakes itself while it runs is put at the back of its worker's queue instead.
async fn yield_behind_queued() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// How long a stopping engine waits for its recorder to write the attempts it was given.
const RECORDER_GRACE: Duration = Duration::from_secs(10);

/// Most attempts recorded in one transaction.
const RECORD_BATCH: usize = 256;

/// How long the recorder holds a batch open for attempts still running (see [`record_attempts`]).
const RECORD_LINGER: Duration = Duration::from_millis(2);

/// What the recorder needs besides the attempts: the storage it writes them to, the pools it
/// lingers on, and what it settles once they are written. These parts of [`Shared`], not
/// `Arc<Shared>`: `Shared` holds the recorder's sender, and the recorder ends only once every
/// sender is gone, so holding it would keep the recorder running after the engine stopped.
struct Recorder {
    service: Service,
    fair: Arc<Fair>,
    first: Arc<first::First>,
    /// The engine's wake when a piece of work finishes (see [`Shared::done`]).
    done: Arc<Notify>,
}

/// Records attempts in batches, one transaction each: every attempt that finished while the
/// previous batch was being written goes into the next, and while other attempts are still
/// running a batch waits for them a moment ([`RECORD_LINGER`], until all of them are in it), so
/// under load a transaction records many attempts, and alone an attempt is recorded at once.
/// (On sled every transaction writes its own buffer to the log file, a system call and a
/// disk write started: recording attempts one per transaction cost more than the attempts.)
/// A made attempt gives its place to the next one before it is recorded
/// ([`fair::Ticket::finish_attempt`]; its queue entry stays in flight until then, and the
/// entries waiting for their record are bounded), so the next attempts to a target run while
/// the last ones are written. (Until the eighth pass a webhook attempt kept its place until it
/// was recorded: a round per finished request cost more than the wait, see the README.)
/// Once a batch is written, the recorder finishes its attempts' work: it counts them in the
/// metrics, settles them ([`first::First::settle`]), ends their entries' flight and wakes the
/// engine once for the batch. (Until the thirty-fifth pass each attempt's task waited for its
/// record to do that itself: a channel and a task's wake per delivery, see PERFORMANCE.md.)
/// Ends when every sender is gone (the engine stopped), once it removed the outbox entries
/// whose deliveries are all recorded ([`first::First::remove_done`]).
async fn record_attempts(recorder: Recorder, mut pending: mpsc::UnboundedReceiver<Pending>) {
    let service = &recorder.service;
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while pending.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        linger(&recorder.fair, &mut pending, &mut batch).await;
        let items: Vec<(queue::Made<'_>, queue::Stored, &DueEntry, &Outcome)> = batch
            .iter()
            .map(|Pending { attempt: a, .. }| {
                (
                    (a.due_key.as_str(), a.made.as_deref()),
                    a.stored,
                    &a.entry,
                    &a.outcome,
                )
            })
            .collect();
        let mut alongside = queue::Alongside::default();
        for p in &batch {
            alongside.extend(&p.attempt.alongside);
        }
        match off_workers(service, || service.record_attempts(&items, &alongside)) {
            Ok(paused) => {
                let mut paused = paused.into_iter();
                for p in batch.drain(..) {
                    recorder.recorded(p, Ok(paused.next().flatten()));
                }
            }
            Err(e) => {
                // One bad record must not fail the others: record them one by one.
                tracing::warn!(error = %format!("{e:#}"), "recording a batch of attempts; one by one");
                for p in batch.drain(..) {
                    let a = &p.attempt;
                    let one = off_workers(service, || {
                        let item = (
                            (a.due_key.as_str(), a.made.as_deref()),
                            a.stored,
                            &a.entry,
                            &a.outcome,
                        );
                        let paused = service.record_attempts(&[item], &a.alongside)?;
                        Ok(paused.into_iter().next().flatten())
                    });
                    recorder.recorded(p, one);
                }
            }
        }
        recorder.done.notify_one();
    }
    // The engine stopped, and what it made is recorded: the outbox entries whose deliveries
    // were all recorded go now. Left, the next start would fan them out again (finding every
    // delivery made).
    if let Err(e) = off_workers(service, || recorder.first.remove_done(&service.db)) {
        tracing::warn!(error = %format!("{e:#}"), "delivery engine: removing outbox entries");
    }
}

impl Recorder {
    /// Finishes the work of an attempt whose record was written (`Ok`, with the pause it
    /// brought its target, if any) or failed (see [`finish`]); the engine is woken by the caller,
    /// once for the batch.
    fn recorded(&self, Pending { attempt, ticket }: Pending, recorded: Result<Option<Paused>>) {
        if let Ok(paused) = &recorded {
            let metrics = &self.service.metrics;
            let kind = target_kind(&attempt.entry.target);
            metrics.delivery_attempt(kind, attempt.outcome.succeeded, attempt.wall.elapsed());
            if paused.is_some() {
                // Its notice was queued with the pause; the mail lane sends it.
                metrics.target_paused(kind);
            }
        }
        finish(
            &self.first,
            &self.done,
            &attempt.due_key,
            recorded.map(drop),
            ticket,
        );
    }
}

/// What `target` counts as in the metrics.
fn target_kind(target: &TargetRef) -> TargetKind {
    match target {
        TargetRef::Webhook(_) => TargetKind::Webhook,
        TargetRef::Component(_) => TargetKind::Component,
    }
}

/// How long work that failed keeps its place (its entry in flight): so that work failing over
/// and over does not spin.
const FAILED_WORK_HELD: Duration = Duration::from_secs(1);

/// Finishes the work at `key` that ran (`ran`): settles it (see [`first::First::settle`]) and
/// ends its entry's flight (`ticket`). Work that failed is logged and keeps its place for
/// [`FAILED_WORK_HELD`], then wakes the engine; the engine is woken for work that succeeded by
/// the caller.
fn finish(
    first: &first::First,
    done: &Arc<Notify>,
    key: &str,
    ran: Result<()>,
    ticket: fair::Ticket,
) {
    first.settle(key, ran.is_ok());
    if let Err(e) = ran {
        tracing::error!(error = %format!("{e:#}"), due = key, "queued work");
        let done = done.clone();
        tokio::spawn(async move {
            tokio::time::sleep(FAILED_WORK_HELD).await;
            drop(ticket);
            done.notify_one();
        });
    }
}

/// Lets the attempts still running join `batch`, for [`RECORD_LINGER`] at most: returns once no
/// attempt holds a place in the pools (every one made is in the batch), the batch is full, or
/// the time is up.
async fn linger(
    fair: &Fair,
    pending: &mut mpsc::UnboundedReceiver<Pending>,
    batch: &mut Vec<Pending>,
) {
    let places = || fair.in_flight_in(Kind::Webhook) + fair.in_flight_in(Kind::Component);
    let deadline = tokio::time::Instant::now() + RECORD_LINGER;
    while batch.len() < RECORD_BATCH && places() > 0 {
        let room = RECORD_BATCH - batch.len();
        match tokio::time::timeout_at(deadline, pending.recv_many(batch, room)).await {
            Ok(0) | Err(_) => return, // Every sender gone, or the time is up.
            Ok(_) => {}
        }
    }
}

/// Sets the engine's liveness flag while its task runs, and clears it when the task ends (a
/// return, or a panic unwinding through it).
struct AliveGuard(Arc<AtomicBool>);

impl AliveGuard {
    fn new(flag: Arc<AtomicBool>) -> Self {
        flag.store(true, Ordering::SeqCst);
        Self(flag)
    }
}

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

struct Shared {
    service: Service,
    http: HttpClient,
    mail: HostMail,
    plugins: Option<Arc<crate::plugins::Plugins>>,
    fair: Arc<Fair>,
    /// When the last long sweep of the work queue ran (see [`SKIP_BUDGET`]).
    last_sweep: Mutex<std::time::Instant>,
    /// The installation and plugin behind each target seen (they never change).
    owners: Mutex<HashMap<String, Owner>>,
    /// Rung by commits that queued work.
    wake: Arc<crate::storage::queue::Signal>,
    /// Rung when a piece of work finishes (its place in the pool is free).
    done: Arc<Notify>,
    /// Events read for recent attempts and fanned out (see [`Shared::event`]).
    events: recent::Recent,
    /// Where finished attempts go to be recorded (see [`record_attempts`]).
    recorder: mpsc::UnboundedSender<Pending>,
    /// The deliveries the fan-out hands over for their first attempt (see [`first`]).
    first: Arc<first::First>,
    /// The threads component invocations run on.
    invoker: invoker::Invoker,
}

impl Shared {
    /// The engine's state over `service`, its work sent to `recorder` to be recorded.
    fn new(
        service: Service,
        timeouts: Timeouts,
        mail: HostMail,
        plugins: Option<Arc<crate::plugins::Plugins>>,
        fair: Arc<Fair>,
        recorder: mpsc::UnboundedSender<Pending>,
        invoker: invoker::Invoker,
    ) -> Result<Self> {
        let first = Arc::new(first::First::new(&service.db)?.for_pools(fair.free()));
        Ok(Self {
            http: HttpClient::new(service.network.clone(), timeouts)?,
            mail,
            plugins,
            wake: service.db.delivery_signal(),
            service,
            fair,
            last_sweep: Mutex::new(std::time::Instant::now()),
            owners: Mutex::default(),
            done: Arc::new(Notify::new()),
            events: recent::Recent::default(),
            recorder,
            first,
            invoker,
        })
    }
}

impl Engine {
    /// Starts the engine on the current runtime. Without `plugins`, deliveries to components
    /// fail (a host that runs no components).
    pub fn start(
        service: Service,
        config: EngineConfig,
        plugins: Option<Arc<crate::plugins::Plugins>>,
    ) -> Result<Self> {
        let timeouts = Timeouts::new(config.webhook_timeout);
        let (recorder, pending) = mpsc::unbounded_channel();
        let fair = Fair::new(
            config.concurrency,
            config.component_concurrency,
            MESSAGE_CONCURRENCY,
        );
        let mail = HostMail::new(config.smtp_url.as_deref(), &config.mail_from, timeouts.smtp)?;
        let invoker = invoker::Invoker::for_components(config.component_concurrency);
        let shared = Arc::new(Shared::new(
            service, timeouts, mail, plugins, fair, recorder, invoker,
        )?);
        let recording = tokio::spawn(record_attempts(
            Recorder {
                service: shared.service.clone(),
                fair: shared.fair.clone(),
                first: shared.first.clone(),
                done: shared.done.clone(),
            },
            pending,
        ));
        let (stop, stopped) = watch::channel(false);
        let alive = Arc::new(AtomicBool::new(false));
        let guard = AliveGuard::new(alive.clone());
        let task = tokio::spawn(async move {
            let _guard = guard;
            run(shared, config, stopped).await;
        });
        Ok(Self {
            stop,
            task,
            recorder: recording,
            alive,
        })
    }

    /// A cheap liveness signal: true while the engine's task runs (what `GET /readyz` reads).
    pub fn alive(&self) -> Arc<AtomicBool> {
        self.alive.clone()
    }

    /// Stops taking work, waits until `deadline` for the attempts in flight (each bounded by its
    /// own timeout), then drops what is left (an attempt not recorded runs again after a restart)
    /// and returns once nothing of the engine holds the service (and its storage) any more.
    pub async fn stop(mut self, deadline: tokio::time::Instant) {
        let _ = self.stop.send(true);
        match tokio::time::timeout_at(deadline, &mut self.task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "the delivery engine panicked"),
            Err(_) => {
                tracing::warn!("shutdown: delivery attempts still in flight were dropped");
                self.task.abort();
                let _ = (&mut self.task).await;
            }
        }
        // The recorder ends with the engine's task, once it has recorded what it was given.
        if tokio::time::timeout(RECORDER_GRACE, &mut self.recorder)
            .await
            .is_err()
        {
            tracing::warn!("shutdown: attempts still being recorded were dropped");
            self.recorder.abort();
            let _ = (&mut self.recorder).await;
        }
    }
}

async fn run(shared: Arc<Shared>, config: EngineConfig, mut stopped: watch::Receiver<bool>) {
    let mut tasks = JoinSet::new();
    let mut next_purge = Timestamp::MIN;
    let mut lanes = Lanes::default();
    // Aborted with this task (a stop past its deadline aborts it): nothing of the engine may
    // hold the storage once it has stopped.
    let mut fanning = AbortOnDrop(tokio::spawn(fan_out(
        shared.clone(),
        config.poll_interval,
        stopped.clone(),
    )));
    let beating = shared
        .service
        .db
        .is_shared()
        .then(|| AbortOnDrop(tokio::spawn(heartbeat(shared.clone(), stopped.clone()))));
    loop {
        if *stopped.borrow() {
            break;
        }
        if fanning.0.is_finished() {
            // It ends only when stopped, or when it panicked: the engine ends with it (as with a
            // panic of its own), which its liveness flag shows.
            tracing::error!("the delivery engine's fan-out ended: the engine stops");
            break;
        }
        lanes.start_at(shared.wake.take_earliest());
        let ticked = off_workers(&shared.service, || {
            shared.tick(&mut tasks, &mut next_purge, &mut lanes)
        });
        if let Err(e) = ticked {
            tracing::error!(error = %format!("{e:#}"), "delivery engine");
            lanes.rescan();
        }
        while tasks.try_join_next().is_some() {}
        tokio::select! {
            () = shared.wake.notified() => {}
            () = shared.done.notified() => {
                // A finished attempt frees a place: let the other attempts finishing now free
                // theirs for the same round.
                yield_behind_queued().await;
                yield_behind_queued().await;
            }
            () = tokio::time::sleep(config.poll_interval) => {
                lanes.rescan();
                // Nothing to do for a poll: the events kept for attempts go once none was used
                // since the last such poll (see `recent`); and those committed and not fanned
                // out by now (see `storage::fresh`), stale.
                shared.events.forget_unused();
                shared.service.db.fresh_events().forget_stale();
            }
            _ = stopped.changed() => {}
        }
    }
    if let Err(e) = (&mut fanning.0).await {
        tracing::error!(error = %e, "the delivery engine's fan-out panicked");
    }
    if let Some(mut beating) = beating {
        let _ = (&mut beating.0).await;
    }
    while tasks.join_next().await.is_some() {}
    // The recorder ends once this is gone, having recorded what it was given (see
    // `record_attempts`).
}

/// Where hosts share the database: writes this host's heartbeat and reads the others' every
/// [`peers::HEARTBEAT`] (see [`peers`]), and removes it when the engine stops.
async fn heartbeat(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let service = &shared.service;
    while !*stopped.borrow() {
        if let Err(e) = off_workers(service, || service.peers.beat(&service.db, service.now())) {
            tracing::warn!(error = %format!("{e:#}"), "delivery engine: the hosts' heartbeat");
        }
        tokio::select! {
            () = tokio::time::sleep(peers::HEARTBEAT) => {}
            _ = stopped.changed() => {}
        }
    }
    if let Err(e) = off_workers(service, || service.peers.leave(&service.db)) {
        tracing::warn!(error = %format!("{e:#}"), "delivery engine: leaving the hosts");
    }
}

/// A task aborted when this is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The engine's fan-out: turns the events committed to the outbox into deliveries
/// ([`queue::fan_out`]), woken by the commits that emit them (and on each poll), in a task of its
/// own: the engine's rounds, which start the work it queues, never wait for it (on PostgreSQL a
/// burst's fan-out takes seconds), and it never waits for them.
async fn fan_out(shared: Arc<Shared>, poll: Duration, mut stopped: watch::Receiver<bool>) {
    let every = u64::try_from(OUTBOX_READ_WHOLE_EVERY.as_millis()).unwrap_or(u64::MAX);
    let mut read_whole = millis(shared.service.now());
    loop {
        if *stopped.borrow() {
            break;
        }
        // Now and then the outbox is read from its head (past every entry held), though every
        // commit tells where it put its entries. (Done on an idle poll only, it never came while
        // commits kept waking the fan-out: an entry left behind the listing's cursor, as fjall's
        // reads of part of a batch once left one, waited as long as they did.)
        let now = millis(shared.service.now());
        if now.saturating_sub(read_whole) >= every || now < read_whole {
            read_whole = now;
            shared.first.list_from("");
        }
        if let Some(key) = shared.wake.take_outbox_earliest() {
            shared.first.list_from(&key);
        }
        let fanned = off_workers(&shared.service, || {
            let service = &shared.service;
            if let Err(e) = shared.first.write_pending(&service.db, service.now()) {
                tracing::error!(error = %format!("{e:#}"), "delivery engine: writing deliveries pending");
            }
            let first = shared.first.attempts();
            let fanned_out = |event, key: &str, handed| shared.fanned_out(event, key, handed);
            queue::fan_out(service, service.now(), BATCH, first, fanned_out)
        });
        match fanned {
            Ok(fanned) if fanned.more => {
                yield_behind_queued().await;
                continue;
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %format!("{e:#}"), "delivery engine: fan-out");
                // Not woken by the next commit: a lasting error would spin.
                tokio::select! {
                    () = tokio::time::sleep(poll) => {}
                    _ = stopped.changed() => {}
                }
                continue;
            }
        }
        tokio::select! {
            () = shared.wake.outbox_notified() => {}
            () = tokio::time::sleep(poll) => {}
            _ = stopped.changed() => {}
        }
    }
}

/// What a delivery's queue entry key (`work/{kind}/{due}/{store}/{target}/…`) names: its pool,
/// store and target. `None` for messages and mail, whose entries are each their own target.
fn delivery_of_key(key: &str) -> Option<(Kind, &str, &str)> {
    let mut parts = key.split('/');
    let kind = match (parts.next(), parts.next()) {
        (Some("work"), Some("webhook")) => Kind::Webhook,
        (Some("work"), Some("component")) => Kind::Component,
        _ => return None,
    };
    let (_due, store, target) = (parts.next()?, parts.next()?, parts.next()?);
    Some((kind, store, target))
}

/// The engine's view of the work queue: per lane, the due entries read from storage and not
/// started yet, in due order, and how far the lane was read. Starting work takes entries from
/// memory, so a round after an attempt finished does not read the lane's head again (where the
/// work in flight is); storage is read on from the cursor when the ready entries run low, from
/// where a commit queued new work (see [`queue::Signal`](crate::storage::queue::Signal)), and
/// from the head of each lane on the poll and the periodic sweep (which finds what the cursor
/// cannot see: entries queued behind it by a wall clock that went back).
#[derive(Debug, Default)]
struct Lanes {
    lanes: [Lane; 4],
    /// When every lane was last read from its head.
    rescanned: Option<std::time::Instant>,
}

#[derive(Debug, Default)]
struct Lane {
    /// Due entries not started, by target and key (the due time first), as stored.
    ready: ready::Ready,
    /// Every due entry up to this key is ready, in flight or done (`None`: read from the head).
    cursor: Option<String>,
    /// New work was queued since the lane was last read: read it even when enough is ready.
    queued: bool,
    /// The last read reached the end of the entries due then, and nothing was queued since: a
    /// round reads the lane again only once new work is queued in it, or on the next poll or
    /// sweep (which find retries that came due meanwhile), so an idle lane costs a round no read.
    drained: bool,
    /// Where new work was queued, for each group of each store (a few: see
    /// [`KEYS_NOTED`](crate::storage::queue::KEYS_NOTED)): read from each too next round, even
    /// into a full window (a store's event behind another's backlog that fills it), a few entries
    /// of the group at most ([`BEYOND_BATCH`]; one group of a store a round), of
    /// which those of a backlog's targets are not kept ([`Lane::keep_beyond`]: read again from
    /// their millisecond in a later round), so that one store's backlog does not fill the lane
    /// through these reads. A read that kept all of a full batch goes on from its last entry
    /// next round.
    beyond: Vec<String>,
    /// Where a store's work queued past the groups noted for it begins (see
    /// [`Queued::past`](crate::storage::queue::Queued::past)), as the group of that millisecond,
    /// or the first entry a read past the window did not keep ([`Lane::keep_beyond`]; not read
    /// again while its target holds what it may start); one of each store: read group by group,
    /// a millisecond at a time, up to now ([`Shared::read_past`]).
    past: Vec<String>,
}

impl Lane {
    /// Keeps the entries of a read past the window ([`Lane::beyond`]) that are not in flight
    /// (`taken`), except those of a target that holds what a subscription may start at once
    /// ([`MAX_IN_FLIGHT_PER_TARGET`]; a component may start more) ready at or behind the
    /// cursor: a backlog's target, whose
    /// next attempts the cursor's reads made ready, and whose later ones come with the cursor.
    /// A quiet store's events committed together all come in, however many: its target's ready
    /// entries, if any, came from reads past the window too. Where an entry is not kept, its
    /// store's work is read on from it in a later round ([`Lane::past`]), once its
    /// targets have room: the cursor may not come by for seconds (a full window ahead of it, or
    /// the lane read from its head again). Returns whether it kept every entry not in flight.
    fn keep_beyond(&mut self, batch: Vec<(String, Vec<u8>)>, taken: impl Fn(&str) -> bool) -> bool {
        let mut all = true;
        for (key, bytes) in batch {
            if taken(&key) {
                continue;
            }
            if !self.holds_its_share(&key) {
                self.ready.insert(key, Entry::Stored(bytes));
            } else {
                if all {
                    crate::storage::queue::keep_earliest_of_store(&mut self.past, &key);
                }
                all = false;
            }
        }
        all
    }

    /// Whether the target of `key` holds what a subscription may start at once
    /// ([`MAX_IN_FLIGHT_PER_TARGET`]) ready at or behind the cursor (never for a key that names
    /// no target, such as a group's).
    fn holds_its_share(&self, key: &str) -> bool {
        let cursor = self.cursor.as_deref();
        self.ready
            .ready_in_group_up_to(key, cursor, MAX_IN_FLIGHT_PER_TARGET)
            >= MAX_IN_FLIGHT_PER_TARGET
    }
}

/// Entries read from where a store queued new work (see [`Lane::beyond`]).
const BEYOND_BATCH: usize = 32;
/// Milliseconds a round reads of a store's work past its groups (see [`Shared::read_past`]).
const PAST_MS_PER_ROUND: usize = 64;

/// Ready entries kept per lane: more are read when fewer than [`READY_LOW`] are left.
const READY_MAX: usize = 1024;
/// Ready entries read from storage a lane holds at most, work queued past the cursor included
/// (see [`Lane::beyond`]), besides the deliveries handed over in memory (see [`first`]): those
/// are counted over every lane, so a lane holds up to [`first::MAX_GIVEN`] more. (Counted
/// with them, a backlog's deliveries handed over filled a lane past this, and another store's
/// work queued behind them waited for the cursor: up to 2.4 s behind a burst of 50 000
/// deliveries.)
const READY_HARD_MAX: usize = 4 * READY_MAX;
/// See [`READY_MAX`].
const READY_LOW: usize = 256;

impl Lanes {
    /// Reads every lane from its head next round.
    fn rescan(&mut self) {
        self.rescanned = Some(std::time::Instant::now());
        for lane in &mut self.lanes {
            lane.cursor = None;
            lane.queued = true;
            lane.drained = false;
        }
    }

    /// The periodic sweep's reads: every lane on from its cursor next round (retries that came
    /// due since are past it), and from its head every [`RESCAN_EVERY`].
    fn sweep(&mut self) {
        if self.rescanned.is_none_or(|at| at.elapsed() >= RESCAN_EVERY) {
            return self.rescan();
        }
        for lane in &mut self.lanes {
            lane.queued = true;
            lane.drained = false;
        }
    }

    /// Moves each lane's cursor back to the earliest work queued in it since the last round, and
    /// notes where each store queued its own.
    fn start_at(&mut self, earliest: crate::storage::queue::Queued) {
        use crate::storage::queue::{before_same_ms, group_of_key, keep_earliest_of_store};
        let lanes = self
            .lanes
            .iter_mut()
            .zip(earliest.groups.into_iter().zip(earliest.past));
        for (lane, (groups, past)) in lanes {
            for queued in groups.iter().chain(&past) {
                let from = before_same_ms(queued);
                if let Some(cursor) = lane.cursor.as_deref()
                    && from < cursor
                {
                    lane.cursor = Some(from.to_owned());
                }
                lane.queued = true;
                lane.drained = false;
            }
            for queued in &groups {
                // Read from just before the key itself too (a window may not reach it: past the
                // cursor, from the head, or behind the cursor in a lane too full to read on),
                // which entries of the same millisecond queued earlier (another store's backlog,
                // on a stopped clock) may precede.
                let from = just_before(queued);
                if !lane.beyond.iter().any(|b| b == from)
                    && lane.beyond.len() < crate::storage::queue::KEYS_NOTED
                {
                    lane.beyond.push(from.to_owned());
                }
            }
            // And a store's work past its groups, a millisecond at a time (see `read_past`).
            for queued in &past {
                keep_earliest_of_store(&mut lane.past, group_of_key(queued));
            }
        }
    }
}

impl Shared {
    /// One round: purge expired events now and then, start due work.
    fn tick(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        next_purge: &mut Timestamp,
        lanes: &mut Lanes,
    ) -> Result<()> {
        let db = &self.service.db;
        let now = self.service.now();
        for (kind, key, work) in self.first.take_inbox() {
            let lane = &mut lanes.lanes[crate::storage::queue::lane_index(kind)];
            lane.ready.insert(key, Entry::Made(work));
        }
        if now >= *next_purge {
            let purged = queue::purge(db, now, BATCH)?;
            if purged.events > 0 {
                tracing::info!(
                    purged = purged.events,
                    "purged events older than {RETENTION:#}"
                );
            }
            *next_purge = if purged.records == BATCH {
                now
            } else {
                now.checked_add(PURGE_EVERY).unwrap_or(now)
            };
        }
        self.dispatch(now, tasks, lanes)
    }

    /// Starts the work of every due queue entry, lane by lane in due order, while its pool has
    /// room and its shares allow (see [`fair`]).
    fn dispatch(
        self: &Arc<Self>,
        now: Timestamp,
        tasks: &mut JoinSet<()>,
        lanes: &mut Lanes,
    ) -> Result<()> {
        let budget = {
            let mut last = self.last_sweep.lock().unwrap_or_else(|e| e.into_inner());
            if last.elapsed() >= SWEEP_EVERY {
                *last = std::time::Instant::now();
                lanes.sweep();
                SWEEP_BUDGET
            } else {
                SKIP_BUDGET
            }
        };
        self.fair.begin_round();
        for kind in WorkKind::ALL {
            let lane = &mut lanes.lanes[crate::storage::queue::lane_index(kind)];
            if self.refill(kind, now, lane)? {
                self.done.notify_one(); // Groups read next round, at once.
            }
            self.dispatch_lane(kind, budget, lane, tasks)?;
        }
        Ok(())
    }

    /// Whether this host takes the queue entry `key` at `now_ms`: where hosts share the
    /// database, a delivery only to a target of its own, or any once due for
    /// [`peers::TAKEOVER`] (see [`peers`]); every other entry.
    fn takes(&self, key: &str, now_ms: u64) -> bool {
        if !self.service.db.is_shared() {
            return true;
        }
        let Some((_, _, target)) = delivery_of_key(key) else {
            return true;
        };
        let due = crate::model::work::due_ms_of(key).unwrap_or(0);
        let waited = Duration::from_millis(now_ms.saturating_sub(due));
        self.service.peers.takes(target, waited)
    }

    /// Reads the lane's due entries into memory: on from its cursor ([`Shared::refill_on`]),
    /// and a batch from where new work was queued past it, for targets with few ready
    /// ([`Lane::beyond`]). Each such read stays in the group of the key it starts from (one
    /// store's work due in one millisecond), and a round reads one group of each store: a
    /// store's other groups wait for the next round when all it read was kept, and are left for
    /// the cursor when the read met a backlog's targets. Returns whether groups wait for the next
    /// round (the caller wakes it).
    fn refill(&self, kind: WorkKind, now: Timestamp, lane: &mut Lane) -> Result<bool> {
        let beyond = std::mem::take(&mut lane.beyond);
        self.refill_on(kind, now, lane)?;
        // The stores read this round, and whether the read met a backlog.
        let mut read: Vec<(String, bool)> = Vec::new();
        let mut waiting = false;
        let most = if beyond.is_empty() {
            0
        } else {
            READY_HARD_MAX.saturating_add(self.first.given())
        };
        for from in beyond {
            if lane.cursor.as_deref().is_some_and(|c| from.as_str() < c) || lane.ready.len() >= most
            {
                continue; // The cursor's read passed it (or the lane holds all it may).
            }
            let store = crate::storage::queue::store_of_key(&from);
            match read.iter().find(|(s, _)| s == store) {
                Some((_, true)) => continue, // A backlog's: the cursor reads it.
                Some((_, false)) => {
                    if lane.beyond.len() < crate::storage::queue::KEYS_NOTED {
                        lane.beyond.push(from);
                        waiting = true;
                    }
                    continue;
                }
                None => {}
            }
            let db = &self.service.db;
            let batch = crate::storage::queue::due_in_group(db, now, &from, BEYOND_BATCH)?;
            let last = (batch.len() == BEYOND_BATCH)
                .then(|| batch.last().map(|(key, _)| key.clone()))
                .flatten();
            let now_ms = millis(now);
            let all = lane.keep_beyond(batch, |key| {
                self.fair.is_taken(key) || !self.takes(key, now_ms)
            });
            read.push((store.to_owned(), !all));
            if all
                && let Some(last) = last
                && lane.beyond.len() < crate::storage::queue::KEYS_NOTED
            {
                lane.beyond.push(last); // More may follow: read on from there next round.
            }
        }
        let past = std::mem::take(&mut lane.past);
        let most = if past.is_empty() {
            0
        } else {
            READY_HARD_MAX.saturating_add(self.first.given())
        };
        for from in past {
            let store = crate::storage::queue::store_of_key(&from);
            // (Where an entry was not kept, its target may still hold what it may start: then
            // no read.)
            if lane.holds_its_share(&from)
                || lane.ready.len() >= most
                || read.iter().any(|(s, backlog)| s == store && *backlog)
            {
                // The lane holds all it may, or the store's targets hold what they may start:
                // read on from here in a later round.
                crate::storage::queue::keep_earliest_of_store(&mut lane.past, &from);
                continue;
            }
            if self.read_past(kind, now, &from, lane)? {
                waiting = true;
            }
        }
        Ok(waiting)
    }

    /// Reads a store's work queued past the groups noted for it ([`Lane::past`]), from the
    /// group `from` on, a millisecond at a time (each millisecond's group, one seek), up to now:
    /// at most [`PAST_MS_PER_ROUND`] milliseconds and [`BEYOND_BATCH`] entries a round, the
    /// rest next round. Stops where it meets a target that holds what it may start at once, and
    /// goes on from there in a later round (see [`Lane::keep_beyond`]). Returns whether it goes
    /// on next round at once.
    fn read_past(
        &self,
        kind: WorkKind,
        now: Timestamp,
        from: &str,
        lane: &mut Lane,
    ) -> Result<bool> {
        use crate::storage::queue::{due_in_group, store_of_key};
        let now_ms = millis(now);
        let Some(mut ms) = crate::model::work::due_ms_of(from) else {
            return Ok(false);
        };
        // Every entry before the cursor was read from storage.
        if let Some(at) = lane
            .cursor
            .as_deref()
            .and_then(crate::model::work::due_ms_of)
        {
            ms = ms.max(at);
        }
        let (prefix, store) = (kind.prefix(), store_of_key(from));
        let (mut read, mut entries) = (0, 0);
        while ms <= now_ms {
            if read == PAST_MS_PER_ROUND || entries >= BEYOND_BATCH {
                lane.past.push(format!("{prefix}{ms:020}/{store}/"));
                return Ok(true);
            }
            let group = format!("{prefix}{ms:020}/{store}/");
            let batch = due_in_group(&self.service.db, now, &group, BEYOND_BATCH)?;
            read += 1;
            entries += batch.len();
            let last = (batch.len() == BEYOND_BATCH)
                .then(|| batch.last().map(|(key, _)| key.clone()))
                .flatten();
            let all = lane.keep_beyond(batch, |key| {
                self.fair.is_taken(key) || !self.takes(key, now_ms)
            });
            if !all {
                return Ok(false);
            }
            if let Some(last) = last
                && lane.beyond.len() < crate::storage::queue::KEYS_NOTED
            {
                lane.beyond.push(last); // More of this group: read on from there.
            }
            ms += 1;
        }
        Ok(false)
    }

    /// Reads the lane's due entries on from its cursor into memory, when new work was queued or
    /// few are ready (and the last read did not reach the end), up to [`READY_MAX`].
    fn refill_on(&self, kind: WorkKind, now: Timestamp, lane: &mut Lane) -> Result<()> {
        if (lane.ready.len() >= READY_LOW || lane.drained) && !std::mem::take(&mut lane.queued) {
            return Ok(());
        }
        let now_ms = millis(now);
        lane.queued = false;
        // New work is read even into a full lane, a batch past the mark at most.
        let mut room = (READY_MAX + BATCH).saturating_sub(lane.ready.len());
        if lane.ready.len() >= READY_MAX {
            room = room.min(BATCH);
        }
        while room > 0 {
            let batch = crate::storage::queue::due_raw(
                &self.service.db,
                kind,
                now,
                lane.cursor.as_deref(),
                BATCH,
            )?;
            let exhausted = batch.len() < BATCH;
            lane.drained = exhausted;
            for (key, bytes) in batch {
                lane.cursor = Some(key.clone());
                if !self.fair.is_taken(&key)
                    && self.takes(&key, now_ms)
                    && lane.ready.insert(key, Entry::Stored(bytes))
                {
                    room -= 1;
                    if room == 0 {
                        return Ok(());
                    }
                }
            }
            if exhausted {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Starts the lane's ready entries in due order, passing over at most `budget` targets
    /// whose share is full (and every entry of theirs, at no further cost: see [`ready`]).
    fn dispatch_lane(
        self: &Arc<Self>,
        kind: WorkKind,
        budget: usize,
        lane: &mut Lane,
        tasks: &mut JoinSet<()>,
    ) -> Result<()> {
        let pool = pool_of(kind);
        let mut skipped = 0;
        // Entries already in flight (taken out), and those started.
        let mut in_flight = Vec::new();
        let mut starting = Vec::new();
        let mut round = lane.ready.round();
        while let Some((key, entry, _)) = round.next() {
            if self.fair.free_in(pool) == 0 || skipped >= budget {
                break; // A finishing attempt wakes the engine.
            }
            // Most entries a round meets are its first of their target: tell the share from
            // the key (and the owners already known) without decoding them.
            let (slot, work) = match delivery_of_key(key).and_then(|d| self.slot_of_delivery(d)) {
                Some(slot) => (slot, None),
                None => {
                    let work = match entry {
                        Entry::Stored(bytes) => crate::storage::Db::decode(key, bytes)?,
                        Entry::Made(work) => work.clone(),
                    };
                    (self.slot(key, &work)?, Some(work))
                }
            };
            let ticket = match self.fair.try_start(key, slot) {
                Ok(ticket) => ticket,
                Err(NotStarted::InFlight) => {
                    in_flight.push(key.to_owned());
                    continue;
                }
                Err(NotStarted::Busy) => {
                    // Its target's other entries wait for a later round with it.
                    round.pass_over();
                    skipped += 1;
                    continue;
                }
            };
            // Stored work is decoded here, so that an entry that cannot be stays ready (no
            // entry of the round is taken out then); work made in memory is moved out below.
            let work = match (work, entry) {
                (Some(work), _) => Some(work),
                (None, Entry::Stored(bytes)) => Some(crate::storage::Db::decode(key, bytes)?),
                (None, Entry::Made(_)) => None,
            };
            starting.push((key.to_owned(), work, ticket));
        }
        for key in in_flight {
            lane.ready.remove(&key);
        }
        let mut started = Vec::with_capacity(starting.len());
        for (key, work, ticket) in starting {
            let removed = lane.ready.remove(&key);
            let work = match (work, removed) {
                (Some(work), _) | (None, Some(Entry::Made(work))) => work,
                // (Not reached: the round gave it, and nothing took it out since.)
                (None, _) => continue,
            };
            started.push((key, work, ticket));
        }
        self.start(started, tasks);
        Ok(())
    }

    /// Starts a round's work: messages and mail at once; deliveries once claimed, all together
    /// ([`Shared::claim_round`]). Where hosts share the database the claim is a transaction, a
    /// round trip or more: it runs on a blocking thread while the engine goes on with its next
    /// rounds (the started entries hold their places and are in flight meanwhile), and the
    /// round's attempts start as soon as it returns. (Claimed in the engine's loop, a fan-out
    /// run on one PostgreSQL made 4 628 claims for 9 909 deliveries, 0.9 ms each: 4.2 s of the
    /// run's 8.9 s, during which no other round started; two hosts on one database deliver
    /// faster with the claims out of the loop, see the README's sixth pass.)
    fn start(
        self: &Arc<Self>,
        starting: Vec<(String, Work, fair::Ticket)>,
        tasks: &mut JoinSet<()>,
    ) {
        let mut deliveries = Vec::new();
        for (key, work, ticket) in starting {
            let job = match work {
                Work::Delivery(entry) => {
                    deliveries.push((key, entry, ticket));
                    continue;
                }
                Work::Message { .. } => Job::Message,
                Work::Mail { .. } => Job::Mail,
            };
            tasks.spawn(self.clone().run(key, job, ticket));
        }
        if deliveries.is_empty() {
            return;
        }
        if !self.service.db.is_shared() {
            // A local read per delivery: no reason to leave the loop.
            for (key, job, ticket) in self.claim_round(deliveries) {
                tasks.spawn(self.clone().run(key, job, ticket));
            }
            return;
        }
        let shared = self.clone();
        tasks.spawn(async move {
            let claiming = shared.clone();
            let claimed =
                tokio::task::spawn_blocking(move || claiming.claim_round(deliveries)).await;
            let jobs = match claimed {
                Ok(jobs) => jobs,
                Err(e) => {
                    // Its tickets went with it: the entries stay queued for the next sweep.
                    tracing::error!(error = %e, "claiming a round's deliveries panicked");
                    return;
                }
            };
            let mut round = JoinSet::new();
            for (key, job, ticket) in jobs {
                round.spawn(shared.clone().run(key, job, ticket));
            }
            while round.join_next().await.is_some() {}
        });
    }

    /// Claims a round's deliveries together (one transaction where hosts share the database) and
    /// returns the attempts this host is to make. A leftover or another host's delivery is not
    /// started: its ticket is dropped here.
    fn claim_round(
        &self,
        starting: Vec<(String, DueEntry, fair::Ticket)>,
    ) -> Vec<(String, Job, fair::Ticket)> {
        // A delivery handed over for its first attempt is this host's, as made: not read.
        let (given, starting): (Vec<_>, Vec<_>) = starting
            .into_iter()
            .map(|(key, entry, ticket)| (self.first.handed(&key), (key, entry, ticket)))
            .partition(|(made, _)| made.is_some());
        let deliveries: Vec<(&str, &DueEntry)> = starting
            .iter()
            .map(|(_, (key, entry, _))| (key.as_str(), entry))
            .collect();
        let mut claims = self.claim(&deliveries).into_iter();
        let mut dropped_leftovers = false;
        let mut jobs = Vec::with_capacity(starting.len() + given.len());
        for (made, (key, entry, ticket)) in given {
            if let Some(made) = made {
                jobs.push((key, Job::Attempt(entry, Attempting::Made(made)), ticket));
            }
        }
        for (_, (key, entry, ticket)) in starting {
            match claims.next() {
                Some(Claimed::Mine(delivery)) => {
                    let claimed = Attempting::Claimed(delivery);
                    jobs.push((key, Job::Attempt(entry, claimed), ticket));
                }
                // A leftover, removed: its place is free again (see below).
                Some(Claimed::Gone) => {
                    self.first.settle(&key, true);
                    dropped_leftovers = true;
                }
                // Another host's, or not claimed now: it stays queued, and is found again
                // when that host records it or on the next sweep (one handed over in memory
                // is released to the fan-out, which queues it).
                Some(Claimed::Held) | None => self.first.settle(&key, false),
            }
        }
        // The round took leftovers in place of work: the next round takes the entries after
        // them. A finishing attempt wakes the engine for it; with none in flight, nothing
        // would until the next poll.
        if dropped_leftovers && self.fair.in_flight() == 0 {
            self.done.notify_one();
        }
        jobs
    }

    /// Runs one started entry's work, then frees its place and wakes the engine (see
    /// [`finish`]); an attempt made is handed to the recorder with its place, and the recorder
    /// does that once the attempt is recorded (see [`record_attempts`]).
    async fn run(self: Arc<Self>, key: String, job: Job, mut ticket: fair::Ticket) {
        let ran = match self.run_work(&key, job, &mut ticket).await {
            Ok(Some(attempt)) => match self.recorder.send(Pending { attempt, ticket }) {
                Ok(()) => return,
                Err(unsent) => {
                    ticket = unsent.0.ticket;
                    Err(Error::Internal(anyhow::anyhow!(
                        "the attempt recorder stopped"
                    )))
                }
            },
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        let succeeded = ran.is_ok();
        finish(&self.first, &self.done, &key, ran, ticket);
        if succeeded {
            self.done.notify_one();
        }
    }

    /// Claims the round's deliveries together; if that fails, one by one, so that one that cannot
    /// be claimed (it stays queued, and is found again on the next sweep) does not hold up the
    /// others.
    fn claim(&self, deliveries: &[(&str, &DueEntry)]) -> Vec<Claimed> {
        let service = &self.service;
        match queue::claim_many(service, deliveries) {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "claiming a round's deliveries; one by one");
                deliveries
                    .iter()
                    .map(|one| match queue::claim_many(service, &[*one]) {
                        Ok(mut claimed) => claimed.pop().unwrap_or(Claimed::Held),
                        Err(e) => {
                            tracing::error!(error = %format!("{e:#}"), due = one.0, "claiming a delivery");
                            Claimed::Held
                        }
                    })
                    .collect()
            }
        }
    }

    /// Runs one entry's work: returns the attempt made, for a delivery's. Each kind of work runs
    /// boxed: an attempt's future (its request, its timeout, its span) is about 3 KiB, and a task
    /// that held it inline was copied whole as it was made, spawned, moved into its cell and
    /// emptied out of it when it ended (a part of every round's cost, see PERFORMANCE.md); boxed,
    /// it is written once, into its box, when the task first runs.
    async fn run_work(
        &self,
        key: &str,
        job: Job,
        ticket: &mut fair::Ticket,
    ) -> Result<Option<Attempted>> {
        match job {
            Job::Attempt(entry, delivery) => {
                Box::pin(self.attempt(key, &entry, &delivery, ticket)).await
            }
            Job::Message => Box::pin(messages::send(&self.service, &self.http, key))
                .await
                .map(|()| None),
            Job::Mail => Box::pin(self.mail.send(&self.service, key))
                .await
                .map(|()| None),
        }
    }

    /// What a delivery counts against, told from its queue key's parts alone
    /// ([`delivery_of_key`]) when its target's owner is known.
    fn slot_of_delivery(&self, (kind, store, target): (Kind, &str, &str)) -> Option<Slot> {
        let owner = self
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(target)
            .cloned()?;
        Some(Slot {
            kind,
            target: target.to_owned(),
            installation: owner.installation,
            plugin: owner.plugin,
            store: store.to_owned(),
        })
    }

    /// What the work at `key` counts against (see [`fair`]).
    fn slot(&self, key: &str, work: &Work) -> Result<Slot> {
        let entry = match work {
            Work::Delivery(entry) => entry,
            Work::Message { .. } | Work::Mail { .. } => {
                return Ok(Slot {
                    kind: Kind::Message,
                    target: key.to_owned(),
                    installation: String::new(),
                    plugin: String::new(),
                    store: String::new(),
                });
            }
        };
        let target = entry.target.key();
        let known = self
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(target)
            .cloned();
        let owner = match known {
            Some(owner) => owner,
            None => {
                let owner = self.owner(entry)?;
                let mut owners = self.owners.lock().unwrap_or_else(|e| e.into_inner());
                if owners.len() >= MAX_OWNERS_CACHED {
                    owners.clear();
                }
                owners.insert(target.to_owned(), owner.clone());
                owner
            }
        };
        Ok(Slot {
            kind: match entry.target {
                TargetRef::Webhook(_) => Kind::Webhook,
                TargetRef::Component(_) => Kind::Component,
            },
            target: target.to_owned(),
            installation: owner.installation,
            plugin: owner.plugin,
            store: entry.store_id.to_string(),
        })
    }

    /// Reads who is behind a target. A removed one (its attempt only records that) counts on its
    /// own.
    fn owner(&self, entry: &DueEntry) -> Result<Owner> {
        let targets = self
            .service
            .targets
            .for_attempt(&self.service.db, &entry.store_id)?;
        let installation = match &entry.target {
            TargetRef::Component(id) => targets.installation(id),
            TargetRef::Webhook(id) => targets
                .subscription(id)
                .and_then(|sub| targets.installation(&sub.installation_id)),
        };
        Ok(match installation {
            Some(i) => Owner {
                installation: i.id.to_string(),
                plugin: i.plugin.clone(),
            },
            None => Owner {
                installation: entry.target.key().to_owned(),
                plugin: entry.target.key().to_owned(),
            },
        })
    }

    /// Makes the attempt of a claimed delivery (see [`queue::claim_many`]), and returns it to be
    /// recorded; `None` when it failed unsent (recorded so already).
    async fn attempt(
        &self,
        due_key: &str,
        entry: &DueEntry,
        attempting: &Attempting,
        ticket: &mut fair::Ticket,
    ) -> Result<Option<Attempted>> {
        let delivery = attempting.delivery();
        let span = tracing::info_span!(
            "delivery.attempt",
            otel.kind = if matches!(entry.target, TargetRef::Webhook(_)) { "client" } else { "internal" },
            delivery.id = %delivery.id,
            target = %entry.target.key(),
            event.id = %entry.event_id,
            event_type = delivery.event_type.as_str(),
            attempt = delivery.attempts.saturating_add(1),
            outcome = tracing::field::Empty,
            status_code = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        if let Some(parent) = &delivery.traceparent {
            crate::telemetry::set_parent(&span, parent);
        }
        self.attempt_claimed(due_key, entry, attempting, &span, ticket)
            .instrument(span.clone())
            .await
    }

    /// The rest of [`Shared::attempt`], in the attempt's span, once the delivery is known.
    async fn attempt_claimed(
        &self,
        due_key: &str,
        entry: &DueEntry,
        attempting: &Attempting,
        span: &tracing::Span,
        ticket: &mut fair::Ticket,
    ) -> Result<Option<Attempted>> {
        let service = &self.service;
        let db = &service.db;
        let delivery = attempting.delivery();
        // Fails it unsent; one made from memory for its first attempt (see `first`) perhaps
        // not written yet.
        let fail = |reason: &str| {
            let made = attempting.made();
            queue::fail_unsent(service, (due_key, made.as_deref()), entry, reason)
        };
        let loaded = off_workers(service, || {
            let stored = if delivery.test {
                db.read(&crate::model::delivery::test_event_key(
                    &entry.store_id,
                    &entry.event_id,
                ))?
                .map(|event| Arc::new(recent::RecentEvent::new(event)))
            } else if let Some(kept) = attempting.event() {
                Some(kept)
            } else {
                self.event(&entry.store_id, &entry.event_id)?
            };
            let Some(event) = stored else {
                fail("the event expired")?;
                return Ok(None);
            };
            let unsent = match target::load(service, &entry.store_id, &entry.target, &event.event)?
            {
                TargetState::Active(target, scopes) => return Ok(Some((event, target, scopes))),
                TargetState::Paused => "the target was paused",
                TargetState::Gone => "the target was removed",
            };
            fail(unsent)?;
            Ok::<_, Error>(None)
        })?;
        let Some((event, target, scopes)) = loaded else {
            return Ok(None);
        };
        // The event as the target's scopes show it: shared, unless they hide part of it.
        let event = match event.event.for_scopes(&scopes) {
            std::borrow::Cow::Borrowed(_) => event,
            std::borrow::Cow::Owned(shown) => Arc::new(recent::RecentEvent::new(shown)),
        };
        let started = service.now();
        let wall = std::time::Instant::now();
        let outcome = match target {
            Target::Webhook(sub) => {
                let signing = webhook::Signing {
                    secret: &sub.secret,
                    previous_secret: sub.previous_secret_at(started),
                    test: delivery.test,
                };
                webhook::send(&self.http, &sub.url, signing, &event, started).await
            }
            Target::Component(component) => {
                let cause = Cause {
                    installation: component.installation.id.clone(),
                    depth: delivery.cause_depth.saturating_add(1),
                };
                self.run_component(*component, event, cause, started).await
            }
        };
        let succeeded = outcome.succeeded;
        span.record("outcome", if succeeded { "succeeded" } else { "failed" });
        if let Some(status) = outcome.status_code {
            span.record("status_code", status);
        }
        span.record("duration_ms", outcome.duration_ms);
        if !succeeded {
            span.record("otel.status_code", "ERROR");
        }
        // Made: the next attempt may take its place while this one is recorded.
        ticket.finish_attempt();
        self.done.notify_one();
        Ok(Some(
            self.attempted(due_key, attempting, entry, outcome, wall),
        ))
    }

    /// A stored event, from the recent ones when one of its deliveries read it already (an
    /// event's deliveries to every target come due together; events never change).
    fn event(
        &self,
        store: &crate::model::ids::StoreId,
        id: &crate::model::ids::EventId,
    ) -> Result<Option<Arc<recent::RecentEvent>>> {
        let key = crate::model::event::event_key(store, id);
        if let Some(event) = self.events.get(&key) {
            return Ok(Some(event));
        }
        let Some((event, bytes)) = self.service.db.read_sized(&key)? else {
            return Ok(None);
        };
        Ok(Some(self.events.keep(key, event, bytes)))
    }

    /// Takes an event just fanned out: keeps it, with its stored size, among the recent ones
    /// (see [`Shared::event`]), as its attempts follow, and takes the deliveries handed over for
    /// their first attempts (see [`first`]), with the event as kept.
    fn fanned_out(&self, read: queue::ReadEvent, outbox: &str, handed: queue::Handed) {
        let kept = self.events.keep(read.key, read.event, read.size);
        if handed.is_empty() {
            return;
        }
        self.first.give(outbox, handed, Arc::downgrade(&kept));
        self.done.notify_one(); // The engine's next round takes them.
    }

    /// An attempt made, as the recorder takes it (with the delivery as made, for one handed over
    /// for its first attempt).
    fn attempted(
        &self,
        due_key: &str,
        attempting: &Attempting,
        entry: &DueEntry,
        outcome: Outcome,
        wall: std::time::Instant,
    ) -> Attempted {
        let alongside = match attempting {
            Attempting::Made(made) if made.alone => self.first.alongside(due_key),
            _ => queue::Alongside::default(),
        };
        let stored = match attempting {
            Attempting::Made(..) => self.first.written_by_record(due_key),
            Attempting::Claimed(_) => queue::Stored::Maybe,
        };
        Attempted {
            due_key: due_key.to_owned(),
            made: attempting.made(),
            stored,
            alongside,
            entry: entry.clone(),
            outcome,
            wall,
        }
    }

    /// Runs a component on the event in a fresh instance, on a thread of the engine's
    /// [`invoker`] (it may compute for up to its wall-clock limit).
    async fn run_component(
        &self,
        component: target::ComponentTarget,
        event: Arc<recent::RecentEvent>,
        cause: Cause,
        started: jiff::Timestamp,
    ) -> crate::model::delivery::Outcome {
        let Some(plugins) = self.plugins.clone() else {
            return crate::model::delivery::Outcome::unsent(
                started,
                "this host runs no components".into(),
            );
        };
        let service = self.service.clone();
        let wall = std::time::Instant::now();
        let span = tracing::Span::current();
        let ran = self
            .invoker
            .run(move || {
                let _entered = span.enter();
                let actor = service.component_actor(&component.installation)?;
                with_cause(cause, || {
                    plugins.invoke(&service, actor, &component.plugin.manifest, &event.event)
                })
            })
            .await;
        let took = wall.elapsed();
        let mut outcome = crate::model::delivery::Outcome::unsent(started, String::new());
        outcome.duration_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX);
        let result = match &ran {
            Ok(Ok(ran)) => Some(&ran.result),
            _ => None,
        };
        self.service
            .metrics
            .component_invocation(crate::plugins::runtime::invocation_outcome(result), took);
        match ran {
            Ok(Ok(ran)) => {
                outcome.succeeded = ran.result.is_ok();
                outcome.error = ran.result.err().map(|f| f.to_string());
                outcome.logs = ran.logs;
                outcome.recording = Some(Box::new(ran.recording));
            }
            Ok(Err(e)) => {
                outcome.error = Some(format!("the host could not run the component: {e}"))
            }
            Err(e) => outcome.error = Some(format!("the component's thread failed: {e}")),
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use tokio::time::Instant;

    use super::*;
    use crate::model::delivery::{Delivery, DeliveryStatus};
    use crate::model::ids::{EventId, StoreId, WebhookId};

    /// `n` webhook attempts in flight in `fair`, each of its own target, store and plugin.
    fn in_flight(fair: &Arc<Fair>, n: usize) -> Vec<fair::Ticket> {
        (0..n)
            .map(|i| {
                let slot = Slot {
                    kind: Kind::Webhook,
                    target: format!("whk{i}"),
                    installation: format!("ins{i}"),
                    plugin: format!("plugin{i}"),
                    store: format!("sto{i}"),
                };
                fair.try_start(&format!("due{i}"), slot)
                    .unwrap_or_else(|_| panic!("attempt {i} starts"))
            })
            .collect()
    }

    /// A finished attempt as sent to the recorder, with its place `ticket`.
    fn finished(ticket: fair::Ticket) -> Pending {
        let now = Timestamp::UNIX_EPOCH;
        let attempt = Attempted {
            due_key: "due".into(),
            made: None,
            stored: queue::Stored::Maybe,
            entry: DueEntry {
                store_id: StoreId::generate(now),
                target: TargetRef::Webhook(WebhookId::generate(now)),
                event_id: EventId::generate(now),
            },
            outcome: Outcome::unsent(now, String::new()),
            alongside: queue::Alongside::default(),
            wall: std::time::Instant::now(),
        };
        Pending { attempt, ticket }
    }

    /// `tickets` running attempts: the first finishes at once, the others each after its delay
    /// (microseconds; `None`: still running when the test ends), and each is sent to the
    /// recorder as the engine's attempts are, after giving its place to the next one. Returns
    /// the recorder's first batch and how long it waited for it.
    async fn batch_of(
        fair: &Arc<Fair>,
        tickets: Vec<fair::Ticket>,
        later: &[Option<u64>],
    ) -> (Vec<Pending>, Duration) {
        let (send, mut receive) = mpsc::unbounded_channel();
        let mut tickets = tickets.into_iter();
        let mut first = tickets.next().expect("a first attempt");
        // The tickets of those still running, kept until the batch is taken.
        let mut kept = Vec::new();
        for (mut ticket, &delay) in tickets.zip(later) {
            let Some(micros) = delay else {
                kept.push(ticket);
                continue;
            };
            let send = send.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(micros)).await;
                ticket.finish_attempt();
                let _ = send.send(finished(ticket));
            });
        }
        first.finish_attempt();
        let _ = send.send(finished(first));
        let started = Instant::now();
        let mut batch = Vec::new();
        receive.recv_many(&mut batch, RECORD_BATCH).await;
        linger(fair, &mut receive, &mut batch).await;
        (batch, started.elapsed())
    }

    #[test]
    fn work_queued_behind_the_cursor_of_a_full_lane_is_read_from_where_it_was_queued_too() {
        let webhook = crate::storage::queue::lane_index(WorkKind::Webhook);
        let key = |due: u64, store: &str| format!("work/webhook/{due:020}/{store}/whk_1/evt_1");
        let mut lanes = Lanes::default();
        let cursor = key(50, "sto_loud");
        lanes.lanes[webhook].cursor = Some(cursor.clone());
        let mut earliest = crate::storage::queue::Queued::default();
        earliest.groups[webhook] = vec![key(10, "sto_quiet")];
        lanes.start_at(earliest);
        let lane = &lanes.lanes[webhook];
        let cursor_now = lane.cursor.as_deref().expect("a cursor");
        assert!(cursor_now < key(10, "sto_quiet").as_str() && cursor_now < cursor.as_str());
        // A lane too full to read on from its cursor still reads from the queued entry.
        assert_eq!(lane.beyond, vec![just_before(&key(10, "sto_quiet"))]);
        assert!(lane.queued && !lane.drained);
        // Past the cursor: the cursor stays, the read from the entry is asked for.
        let mut lanes = Lanes::default();
        lanes.lanes[webhook].cursor = Some(cursor.clone());
        let mut earliest = crate::storage::queue::Queued::default();
        // Two stores' work queued since the last round: read from each.
        earliest.groups[webhook] = vec![key(90, "sto_loud"), key(90, "sto_quiet")];
        lanes.start_at(earliest);
        let lane = &lanes.lanes[webhook];
        assert_eq!(lane.cursor.as_deref(), Some(cursor.as_str()));
        assert_eq!(
            lane.beyond,
            vec![
                just_before(&key(90, "sto_loud")),
                just_before(&key(90, "sto_quiet"))
            ]
        );
    }

    /// The engine's shared state over a fresh sled database, its clock at `now`, with no
    /// engine running.
    fn shared_at(now: Timestamp) -> (Arc<Shared>, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = crate::storage::Db::open_sled(dir.path(), false).expect("db");
        let clock = crate::model::clock::ManualClock::new(now);
        let service = Service::new(db, Arc::new(clock), "admin").expect("service");
        (Arc::new(shared_on(&service, Fair::new(64, 8, 8))), dir)
    }

    /// The engine's shared state over `service`, its shares `fair`, with no engine running.
    fn shared_on(service: &Service, fair: Arc<Fair>) -> Shared {
        let timeouts = Timeouts::new(Duration::from_secs(10));
        let mail = HostMail::new(None, "host@example.com", timeouts.smtp).expect("mail");
        let (recorder, _) = mpsc::unbounded_channel();
        let invoker = invoker::Invoker::for_components(8);
        Shared::new(
            service.clone(),
            timeouts,
            mail,
            None,
            fair,
            recorder,
            invoker,
        )
        .expect("shared")
    }

    #[tokio::test]
    async fn a_task_of_the_engine_holds_its_work_boxed_not_inline() {
        let (service, _clock, store, _dir) = store_with_a_paid_hook("boxed");
        let fair = Fair::new(4, 4, 4);
        let shared = Arc::new(shared_on(&service, fair.clone()));
        let event = crate::service::deliveries::queue::tests::paid(&service, &store, 1);
        let now = service.now();
        let target = TargetRef::Webhook(WebhookId::generate(now));
        let delivery = Delivery::new(&event, &target, now);
        let entry = DueEntry {
            store_id: store.id.clone(),
            target,
            event_id: event.id.clone(),
        };
        let made = first::Made {
            delivery: Arc::new(delivery),
            alone: true,
            event: std::sync::Weak::new(),
        };
        let attempt = Job::Attempt(entry, Attempting::Made(made));
        // Each kind of work as its task is spawned, and moved: made, never polled.
        let jobs = [attempt, Job::Message, Job::Mail];
        for (job, ticket) in jobs.into_iter().zip(in_flight(&fair, 3)) {
            let task = shared.clone().run("due".into(), job, ticket);
            // Its own state and its arguments (about 0.8 KiB unoptimized); with its work
            // inline, an attempt's task was 3.3 KiB.
            let size = std::mem::size_of_val(&task);
            assert!(size <= 1024, "a task of {size} bytes");
        }
    }

    /// A service on its manual clock, with the plugin `name` (one webhook taking `order.paid`)
    /// installed in a store of its own.
    fn store_with_a_paid_hook(
        name: &str,
    ) -> (
        Service,
        crate::model::clock::ManualClock,
        crate::model::store::Store,
        tempfile::TempDir,
    ) {
        use crate::service::deliveries::queue::tests::{publish_paid_hooks, with_hooked_plugin};
        let (service, clock, dir) = with_hooked_plugin();
        publish_paid_hooks(&service, name, 1);
        let store = service
            .create_store(&format!("{name}.example"))
            .expect("store");
        service.install(&store.id, name).expect("install");
        (service, clock, store, dir)
    }

    #[test]
    fn a_delivery_handed_over_carries_its_event_while_the_recent_events_keep_it_and_no_longer() {
        use crate::service::deliveries::queue::tests::paid;
        let (service, _clock, store, _dir) = store_with_a_paid_hook("carried");
        let shared = shared_on(&service, Fair::new(64, 8, 8));
        let event = paid(&service, &store, 1);
        let first = shared.first.attempts();
        while queue::fan_out(&service, service.now(), 256, first, |event, key, given| {
            shared.fanned_out(event, key, given);
        })
        .expect("fan out")
        .more
        {}
        let (_, key, _) = shared
            .first
            .take_inbox()
            .into_iter()
            .find(|(_, _, work)| matches!(work, Work::Delivery(e) if e.event_id == event.id))
            .expect("the order.paid delivery handed over");
        let attempting = Attempting::Made(shared.first.handed(&key).expect("handed over"));
        let kept = shared
            .events
            .get(&crate::model::event::event_key(&store.id, &event.id))
            .expect("kept among the recent events");
        let carried = attempting.event().expect("carried");
        assert!(
            Arc::ptr_eq(&carried, &kept),
            "the very event kept, not a copy"
        );
        assert_eq!(carried.event.id, event.id);
        drop((carried, kept));
        // Let go by the recent events (two idle polls): what is handed over does not keep it.
        shared.events.forget_unused();
        shared.events.forget_unused();
        assert!(
            attempting.event().is_none(),
            "not held past the recent events"
        );
        let read = shared
            .event(&store.id, &event.id)
            .expect("read")
            .expect("read again from storage");
        assert_eq!(read.event.id, event.id);
    }

    #[tokio::test]
    async fn a_delivery_handed_over_whose_target_was_paused_before_its_attempt_is_written_failed() {
        use crate::service::deliveries::queue::tests::paid;
        let (service, _clock, store, _dir) = store_with_a_paid_hook("one");
        let fair = Fair::new(64, 8, 8);
        let shared = shared_on(&service, fair.clone());
        let first = shared.first.attempts();
        queue::fan_out(&service, service.now(), 256, first, |event, key, given| {
            shared.fanned_out(event, key, given);
        })
        .expect("fan out");
        paid(&service, &store, 1);
        queue::fan_out(&service, service.now(), 256, first, |event, key, given| {
            shared.fanned_out(event, key, given);
        })
        .expect("fan out");
        let handed = shared.first.take_inbox();
        let (_, key, work) = handed.last().expect("the order.paid delivery handed over");
        let Work::Delivery(entry) = work.clone() else {
            panic!("a delivery");
        };
        let made = shared.first.handed(key).expect("made");
        let delivery_key = made.delivery.key();
        assert!(
            service
                .db
                .read::<Delivery>(&delivery_key)
                .expect("read")
                .is_none()
        );
        let (now, reason) = (service.now(), "paused by a test");
        service
            .db
            .tx(|tx| target::pause(tx, &store.id, &entry.target, now, reason).map(drop))
            .expect("pause");

        let slot = shared
            .slot(key, &Work::Delivery(entry.clone()))
            .expect("slot");
        let mut ticket = fair
            .try_start(key, slot)
            .unwrap_or_else(|_| panic!("starts"));
        let attempted = shared
            .attempt(
                key,
                &entry,
                &Attempting::Made(first::Made {
                    alone: false,
                    ..made.clone()
                }),
                &mut ticket,
            )
            .await
            .expect("attempt");
        assert!(attempted.is_none(), "failed unsent: nothing left to record");
        let written: Delivery = service
            .db
            .read(&delivery_key)
            .expect("read")
            .expect("written");
        assert_eq!(written.id, made.delivery.id);
        assert_eq!(written.status, DeliveryStatus::Failed);
        assert_eq!(written.failure.as_deref(), Some("the target was paused"));
        assert_eq!(written.attempts, 0, "no attempt made");
    }

    /// The recorder of `shared`'s attempts, over `service`.
    fn recorder_of(service: &Service, shared: &Shared) -> Recorder {
        Recorder {
            service: service.clone(),
            fair: shared.fair.clone(),
            first: shared.first.clone(),
            done: shared.done.clone(),
        }
    }

    #[tokio::test]
    async fn the_recorder_settles_each_attempt_it_records_and_at_its_end_removes_the_outbox_entries_all_recorded()
     {
        use crate::model::event::{OutboxEntry, outbox_key};
        use crate::service::deliveries::queue::tests::paid;
        let (service, _clock, store, _dir) = store_with_a_paid_hook("one");
        let fair = Fair::new(64, 8, 8);
        let shared = shared_on(&service, fair.clone());
        let first = shared.first.attempts();
        let give = |event, key: &str, given| shared.fanned_out(event, key, given);
        queue::fan_out(&service, service.now(), 256, first, give).expect("fan out");
        assert!(
            shared.first.take_inbox().is_empty(),
            "plugin.installed: not taken"
        );
        // Two events fanned out together: their outbox entries go once both are recorded, not
        // with either record.
        let events = [paid(&service, &store, 1), paid(&service, &store, 2)];
        queue::fan_out(&service, service.now(), 256, first, give).expect("fan out");
        let handed = shared.first.take_inbox();
        assert_eq!(handed.len(), 2, "one delivery an event");

        let (send, pending) = mpsc::unbounded_channel();
        let recording = tokio::spawn(record_attempts(recorder_of(&service, &shared), pending));
        let mut made = Vec::new();
        for (_, key, work) in &handed {
            let Work::Delivery(entry) = work else {
                panic!("a delivery");
            };
            let slot = shared.slot(key, work).expect("slot");
            let ticket = fair
                .try_start(key, slot)
                .unwrap_or_else(|_| panic!("starts"));
            let handed = shared.first.handed(key).expect("handed over");
            assert!(!handed.alone, "fanned out with another");
            made.push(handed.delivery.clone());
            let mut outcome = Outcome::unsent(service.now(), String::new());
            (outcome.succeeded, outcome.status_code, outcome.error) = (true, Some(200), None);
            let attempting = Attempting::Made(handed);
            let wall = std::time::Instant::now();
            let attempt = shared.attempted(key, &attempting, entry, outcome, wall);
            assert!(send.send(Pending { attempt, ticket }).is_ok(), "sent");
        }
        // The attempts' tasks are gone: the recorder ends their work once it has written them.
        tokio::time::timeout(Duration::from_secs(10), async {
            while fair.in_flight() > 0 {
                shared.done.notified().await;
            }
        })
        .await
        .expect("the places freed, and the engine woken");
        assert_eq!(shared.first.given(), 0, "both settled");
        for delivery in &made {
            let stored: Delivery = service
                .db
                .read(&delivery.key())
                .expect("read")
                .expect("written with its attempt");
            assert_eq!(
                (stored.status, stored.attempts),
                (DeliveryStatus::Succeeded, 1)
            );
        }
        let entries = || {
            events
                .iter()
                .filter(|event| {
                    let key = outbox_key(&event.id);
                    service
                        .db
                        .read::<OutboxEntry>(&key)
                        .expect("read")
                        .is_some()
                })
                .count()
        };
        assert_eq!(entries(), 2, "left to the fan-out's next transaction");
        // The engine stops: the recorder's senders are gone.
        drop(send);
        tokio::time::timeout(Duration::from_secs(10), recording)
            .await
            .expect("the recorder ends")
            .expect("without a panic");
        assert_eq!(entries(), 0, "removed as the recorder ended");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_recorded_frees_its_place_at_once_and_one_whose_record_failed_a_second_later()
     {
        let (shared, _dir) = shared_at(Timestamp::UNIX_EPOCH);
        let recorder = recorder_of(&shared.service, &shared);
        let mut running = in_flight(&shared.fair, 2).into_iter();
        let (recorded, failed) = (running.next(), running.next());
        let recorded = recorded.expect("two running");
        recorder.recorded(finished(recorded), Ok(None));
        assert_eq!(shared.fair.in_flight(), 1, "recorded: its place is free");
        let failed = failed.expect("two running");
        let error = Error::Internal(anyhow::anyhow!("a record that failed"));
        recorder.recorded(finished(failed), Err(error));
        tokio::time::sleep(FAILED_WORK_HELD - Duration::from_millis(1)).await;
        assert_eq!(shared.fair.in_flight(), 1, "held, so that it does not spin");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert_eq!(shared.fair.in_flight(), 0, "freed after the second");
    }

    #[test]
    fn a_stores_events_committed_in_turn_with_anothers_burst_are_all_read_past_a_full_window() {
        // A round reads one of the quiet store's groups, and the next round the next, at once.
        let quiet = 4;
        let rounds = quiet_events_past_a_full_window(quiet, "2026-01-05T00:00:01Z");
        assert_eq!(rounds, quiet as usize, "a group of the quiet store a round");
    }

    #[test]
    fn a_stores_events_queued_in_more_groups_than_are_noted_are_all_read_past_a_full_window() {
        // More events than the groups noted for a store: those past them are read a millisecond
        // at a time from the first of them (they waited for the cursor).
        let quiet = crate::storage::queue::GROUPS_PER_STORE as i64 + 4;
        let rounds = quiet_events_past_a_full_window(quiet, "1970-01-01T00:00:00.100Z");
        assert!(rounds <= quiet as usize, "{rounds} rounds");
    }

    #[test]
    fn a_quiet_target_at_its_share_has_its_later_events_read_once_it_has_room_not_left_to_a_cursor_at_the_head()
     {
        let now: Timestamp = "1970-01-01T00:00:00.100Z".parse().expect("ts");
        let (shared, _dir) = shared_at(now);
        let db = &shared.service.db;
        let ms = |n: i64| Timestamp::from_millisecond(n).expect("ts");
        let quiet_work = |n: i64| {
            Work::Delivery(DueEntry {
                store_id: "store_quiet".parse().expect("id"),
                target: TargetRef::Webhook("wh_900".parse().expect("id")),
                event_id: format!("evt_q{n:03}").parse().expect("id"),
            })
        };
        let webhooks = crate::storage::queue::lane_index(WorkKind::Webhook);
        let mut lanes = Lanes::default();
        // A lane read from its head again (the sweep's read from the head), over-full with a
        // loud store's work read past its window: the cursor reads nothing this round.
        let lane = &mut lanes.lanes[webhooks];
        for n in 0..READY_MAX + BATCH {
            lane.ready.insert(
                format!(
                    "work/webhook/{:020}/store_loud/wh_{:03}/evt_r{n:04}",
                    0,
                    n % 50
                ),
                Entry::Stored(Vec::new()),
            );
        }
        lane.cursor = None;
        let _ = shared.wake.take_earliest();
        // A quiet store's events, one a millisecond, more than its target may start at once and
        // than the groups noted for a store.
        let quiet = 2 * MAX_IN_FLIGHT_PER_TARGET as i64;
        for n in 0..quiet {
            db.tx(|tx| tx.enqueue(&quiet_work(n), ms(2 + n)).map(drop))
                .expect("quiet");
        }
        lanes.start_at(shared.wake.take_earliest());
        let lane = &mut lanes.lanes[webhooks];
        while shared.refill(WorkKind::Webhook, now, lane).expect("refill") {}
        let quiet_key = |n: i64| quiet_work(n).key(ms(2 + n));
        assert_eq!(
            lane.ready.ready_in_group_of(&quiet_key(0)),
            MAX_IN_FLIGHT_PER_TARGET,
            "what its target may start at once"
        );
        // One key of the quiet store is kept, the earliest of its events left: its work is
        // read on from there, not before its target has room.
        let left: Vec<_> = (0..quiet)
            .map(quiet_key)
            .filter(|key| !lane.ready.contains(key))
            .collect();
        assert_eq!(left.len(), MAX_IN_FLIGHT_PER_TARGET);
        assert_eq!(lane.past, left[..1], "read on from the first left");
        // Its attempts start (and finish): the next rounds read the rest, as its target has room.
        let mut started = 0;
        for round in 0..quiet {
            for n in 0..quiet {
                if lane.ready.remove(&quiet_key(n)).is_some() {
                    started += 1;
                }
            }
            if started == quiet {
                break;
            }
            assert!(round < quiet - 1, "{started} of the {quiet} events started");
            while shared.refill(WorkKind::Webhook, now, lane).expect("refill") {}
        }
        assert_eq!(lane.cursor, None, "not from the cursor");
    }

    /// A quiet store's `quiet` events, each committed in a millisecond of its own, with a loud
    /// store's burst in each, before the engine's next round, with the webhook lane's window
    /// full of the burst's earlier work and its cursor before them: checks that the rounds at
    /// `now` read every quiet event, not from the cursor, and returns how many rounds it took.
    fn quiet_events_past_a_full_window(quiet: i64, now: &str) -> usize {
        let now: Timestamp = now.parse().expect("ts");
        let (shared, _dir) = shared_at(now);
        let db = &shared.service.db;
        let ms = |n: i64| Timestamp::from_millisecond(n).expect("ts");
        let webhook = |n: usize| TargetRef::Webhook(format!("wh_{n:03}").parse().expect("id"));
        let work = |store: &str, target: TargetRef, event: String| {
            Work::Delivery(DueEntry {
                store_id: store.parse().expect("id"),
                target,
                event_id: event.parse().expect("id"),
            })
        };
        // A loud store's backlog the window has not reached: its cursor stopped at the first
        // millisecond, with a full window of earlier work ready.
        db.tx(|tx| {
            for n in 0..300 {
                tx.enqueue(
                    &work("store_loud", webhook(n % 50), format!("evt_b{n:03}")),
                    ms(1),
                )?;
            }
            Ok(())
        })
        .expect("backlog");
        let webhooks = crate::storage::queue::lane_index(WorkKind::Webhook);
        let mut lanes = Lanes::default();
        let lane = &mut lanes.lanes[webhooks];
        for n in 0..READY_MAX {
            lane.ready.insert(
                format!(
                    "work/webhook/{:020}/store_loud/wh_{:03}/evt_r{n:04}",
                    0,
                    n % 50
                ),
                Entry::Stored(Vec::new()),
            );
        }
        lane.cursor = Some(format!("work/webhook/{:020}/", 1));
        lane.drained = false;
        let _ = shared.wake.take_earliest();
        // Then, before the engine's next round, the burst goes on (an event to 50 webhooks each
        // millisecond), and a quiet store commits an event in each of those milliseconds.
        for n in 0..quiet {
            let at = ms(2 + n);
            db.tx(|tx| {
                for w in 0..50 {
                    tx.enqueue(&work("store_loud", webhook(w), format!("evt_l{n:03}")), at)?;
                }
                Ok(())
            })
            .expect("burst");
            db.tx(|tx| {
                tx.enqueue(
                    &work("store_quiet", webhook(900), format!("evt_q{n:03}")),
                    at,
                )
                .map(drop)
            })
            .expect("quiet");
        }
        lanes.start_at(shared.wake.take_earliest());
        let mut rounds = 1;
        while shared
            .refill(WorkKind::Webhook, now, &mut lanes.lanes[webhooks])
            .expect("refill")
        {
            rounds += 1;
            assert!(rounds <= 2 * quiet as usize, "the groups waiting run out");
        }
        let lane = &lanes.lanes[webhooks];
        let quiet_key =
            |n: i64| work("store_quiet", webhook(900), format!("evt_q{n:03}")).key(ms(2 + n));
        assert_eq!(
            lane.ready.ready_in_group_of(&quiet_key(0)),
            quiet as usize,
            "each of the quiet store's events is ready"
        );
        assert!(
            lane.cursor.as_deref() < Some(quiet_key(0).as_str()),
            "the cursor has not reached them: they came from the reads past the window"
        );
        rounds
    }

    #[tokio::test]
    async fn the_fan_out_reads_the_whole_outbox_every_ten_seconds_however_often_commits_wake_it() {
        use crate::model::event::{OUTBOX_PREFIX, outbox_key};
        use crate::service::deliveries::queue::FirstAttempts as _;
        use crate::service::deliveries::queue::tests::paid;
        let (service, clock, store, _dir) = store_with_a_paid_hook("woken");
        queue::fan_out(&service, service.now(), 256, None, |_, _, _| {}).expect("fan out");
        let shared = Arc::new(shared_on(&service, Fair::new(64, 8, 8)));
        // An event the listing's cursor has passed without its wake (as a lost one would).
        let behind = outbox_key(&paid(&service, &store, 0).id);
        // The later events' ids sort well after its own (ids of one millisecond, from the one
        // generator of the process, which other tests share, may differ in their last letters
        // only, and a wake reads on from a little before the key it names).
        clock.set("2100-01-01T00:00:00Z".parse().expect("ts"));
        let _ = shared.wake.take_outbox_earliest();
        shared
            .first
            .list_next_after(Some(format!("{OUTBOX_PREFIX}~")));
        let (stop, stopped) = watch::channel(false);
        let fanning = tokio::spawn(fan_out(shared.clone(), Duration::from_secs(60), stopped));
        // Commits wake the fan-out again and again, far more often than it polls: it fans out
        // theirs, and not the one behind its cursor.
        let mut last = String::new();
        for n in 1..=10 {
            last = outbox_key(&paid(&service, &store, n).id);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let fanned_out = |key: &str| shared.first.held(key);
        for _ in 0..200 {
            if fanned_out(&last) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(fanned_out(&last), "the woken fan-out fans out what woke it");
        assert!(!fanned_out(&behind), "not what lies behind its cursor");
        // Ten seconds on by the service's clock, the next wake reads the outbox from its head.
        clock.advance(jiff::SignedDuration::from_secs(10));
        for n in 11..200 {
            if fanned_out(&behind) {
                break;
            }
            paid(&service, &store, n);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(fanned_out(&behind), "read from the head and fanned out");
        stop.send(true).expect("stop");
        fanning.await.expect("stopped");
    }

    #[tokio::test]
    async fn a_yield_behind_the_queued_tasks_comes_back_while_they_still_have_work() {
        // A task that always has more to do, as a burst's attempts do.
        let spins = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let spinner = {
            let spins = spins.clone();
            tokio::spawn(async move {
                for _ in 0..1000 {
                    spins.fetch_add(1, Ordering::Relaxed);
                    yield_behind_queued().await;
                }
            })
        };
        // Another task (the test's own future is polled apart from the runtime's queue).
        let measured = {
            let spins = spins.clone();
            tokio::spawn(async move {
                yield_behind_queued().await; // The spinner runs once first.
                yield_behind_queued().await;
                spins.load(Ordering::Relaxed)
            })
        };
        let spun = measured.await.expect("measured");
        // With `tokio::task::yield_now` instead, the two yields came back after 121 of the
        // spinner's turns: its wake is deferred until no task is ready, or the scheduler's
        // periodic look at its drivers.
        assert!(spun <= 3, "came back after {spun} of the spinner's turns");
        spinner.await.expect("spinner");
    }

    #[test]
    fn another_stores_work_is_read_past_a_window_that_deliveries_handed_over_fill() {
        use crate::service::deliveries::queue::tests::{
            paid, publish_paid_hooks, with_hooked_plugin,
        };
        let (service, _clock, _dir) = with_hooked_plugin();
        publish_paid_hooks(&service, "loud", 50);
        let shared = shared_on(&service, Fair::new(64, 8, 8));
        // Bursts of three loud stores, handed over in memory (each up to its bound,
        // `first::STORE_AHEAD`): more than a lane reads from storage.
        for s in 0..3 {
            let loud = service
                .create_store(&format!("loud{s}.example"))
                .expect("store");
            service.install(&loud.id, "loud").expect("install");
            for n in 0..50 {
                paid(&service, &loud, n);
            }
        }
        let first = shared.first.attempts();
        while queue::fan_out(&service, service.now(), 256, first, |event, key, given| {
            shared.fanned_out(event, key, given);
        })
        .expect("fan out")
        .more
        {}
        let webhooks = crate::storage::queue::lane_index(WorkKind::Webhook);
        let mut lanes = Lanes::default();
        for (kind, key, work) in shared.first.take_inbox() {
            lanes.lanes[crate::storage::queue::lane_index(kind)]
                .ready
                .insert(key, Entry::Made(work));
        }
        // Each store's events taken until their deliveries reach the bound: the rest parked.
        assert_eq!(
            shared.first.given(),
            3 * first::STORE_AHEAD.div_ceil(50) * 50
        );
        assert!(lanes.lanes[webhooks].ready.len() > READY_HARD_MAX);
        // Another store's work, queued behind them.
        let _ = shared.wake.take_earliest();
        let quiet = Work::Delivery(DueEntry {
            store_id: "store_quiet".parse().expect("id"),
            target: TargetRef::Webhook("wh_quiet".parse().expect("id")),
            event_id: "evt_quiet".parse().expect("id"),
        });
        let quiet_key = service
            .db
            .tx(|tx| tx.enqueue(&quiet, service.now()))
            .expect("queued");
        lanes.start_at(shared.wake.take_earliest());
        shared
            .refill(WorkKind::Webhook, service.now(), &mut lanes.lanes[webhooks])
            .expect("refill");
        assert_eq!(
            lanes.lanes[webhooks].ready.ready_in_group_of(&quiet_key),
            1,
            "read past the window the deliveries handed over fill"
        );
    }

    #[test]
    fn a_read_past_the_window_brings_every_event_of_a_quiet_target_and_none_of_a_backlog() {
        let key = |target: &str, n: usize| format!("work/webhook/{n:020}/sto_1/{target}/evt_{n}");
        let entry = |target: &str, n: usize| (key(target, n), Vec::new());
        let mut lane = Lane::default();
        // A backlog's target with what it may start at once ready, and a target with one fewer.
        for n in 0..MAX_IN_FLIGHT_PER_TARGET {
            lane.ready
                .insert(key("whk_loud", n), Entry::Stored(Vec::new()));
        }
        for n in 1..MAX_IN_FLIGHT_PER_TARGET {
            lane.ready
                .insert(key("whk_busy", n), Entry::Stored(Vec::new()));
        }
        let before = lane.ready.len();
        // Read from where a commit queued work: the quiet target's three events, one of them in
        // flight already (started, its attempt not recorded yet), and the others' next ones.
        let batch = vec![
            entry("whk_loud", 100),
            entry("whk_quiet", 101),
            entry("whk_busy", 102),
            entry("whk_quiet", 103),
            entry("whk_busy", 104),
            entry("whk_quiet", 105),
            entry("whk_loud", 106),
        ];
        let in_flight = key("whk_quiet", 105);
        lane.keep_beyond(batch, |k| k == in_flight);
        assert_eq!(lane.ready.ready_in_group_of(&key("whk_quiet", 0)), 2);
        assert_eq!(
            lane.ready.ready_in_group_of(&key("whk_busy", 0)),
            MAX_IN_FLIGHT_PER_TARGET,
            "topped up to what it may start at once, no further"
        );
        assert_eq!(
            lane.ready.ready_in_group_of(&key("whk_loud", 0)),
            MAX_IN_FLIGHT_PER_TARGET
        );
        assert_eq!(lane.ready.len(), before + 3);
    }

    #[test]
    fn a_read_past_the_window_brings_every_event_of_a_quiet_target_however_many() {
        let key = |target: &str, n: usize| format!("work/webhook/{n:020}/sto_1/{target}/evt_{n}");
        let mut lane = Lane::default();
        // The cursor's read made a backlog's target's next attempts ready, and stopped at 50.
        for n in 0..MAX_IN_FLIGHT_PER_TARGET {
            lane.ready
                .insert(key("whk_loud", n), Entry::Stored(Vec::new()));
        }
        lane.cursor = Some(key("whk_loud", 50));
        // A quiet target's events came in past the window, as many as it may start at once:
        // one read of its events committed together.
        let quiet: Vec<_> = (60..60 + 2 * MAX_IN_FLIGHT_PER_TARGET)
            .map(|n| (key("whk_quiet", n), Vec::new()))
            .collect();
        let (first, second) = quiet.split_at(MAX_IN_FLIGHT_PER_TARGET);
        assert!(lane.keep_beyond(first.to_vec(), |_| false));
        // The next read, of the rest, keeps them all too; the backlog's entries past the window
        // are left for the cursor.
        let mut batch = second.to_vec();
        batch.push((key("whk_loud", 100), Vec::new()));
        assert!(
            !lane.keep_beyond(batch, |_| false),
            "the backlog's entry left"
        );
        assert_eq!(
            lane.ready.ready_in_group_of(&key("whk_quiet", 0)),
            2 * MAX_IN_FLIGHT_PER_TARGET
        );
        assert_eq!(
            lane.ready.ready_in_group_of(&key("whk_loud", 0)),
            MAX_IN_FLIGHT_PER_TARGET
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_alone_is_recorded_at_once() {
        let fair = Fair::new(64, 8, 8);
        let running = in_flight(&fair, 1);
        let (batch, waited) = batch_of(&fair, running, &[]).await;
        assert_eq!(batch.len(), 1);
        assert_eq!(waited, Duration::ZERO, "nothing else running: no wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_for_the_attempts_in_flight_until_all_are_in_it() {
        let fair = Fair::new(64, 8, 8);
        let running = in_flight(&fair, 4);
        // (tokio's timers tick in milliseconds.)
        let later = [Some(0), Some(1_000), Some(1_000)];
        let (batch, waited) = batch_of(&fair, running, &later).await;
        assert_eq!(batch.len(), 4, "the three still running joined the first");
        assert_eq!(
            waited,
            Duration::from_millis(1),
            "recorded once the last was in"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_no_longer_than_the_linger_for_a_slow_attempt() {
        let fair = Fair::new(64, 8, 8);
        let running = in_flight(&fair, 3);
        // The third is still running after the linger (a slow receiver).
        let (batch, waited) = batch_of(&fair, running, &[Some(1_000), None]).await;
        assert_eq!(batch.len(), 2);
        assert_eq!(waited, RECORD_LINGER);
    }
}
