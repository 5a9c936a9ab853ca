//! The threads component invocations run on: a pool of the engine's own that keeps about as
//! many threads awake as the machine has cores while invocations are queued, each taking the
//! next one as it finishes, where a thread of tokio's blocking pool per invocation was woken
//! for it and went back to sleep after it (two context switches and a futex call or two an
//! event: without them the twenty-second pass measured the component backlog 17–24 % faster,
//! medians of alternated runs, see PERFORMANCE.md).
//!
//! An invocation may hold its thread until its wall-clock limit (a guest computing, or waiting
//! in a host call); the ones queued behind must not wait for it. A thread counts as awake only
//! for the pool's stall into its invocation ([`COMPONENT_STALL`] for the engine's): whoever
//! waits longer than that for an invocation still queued asks the pool to look again
//! ([`Invoker::run`]; once a thread has taken it, only its result is waited for), and the
//! pool wakes (or starts) another thread for the work queued, up to its bound of threads (the
//! engine's component concurrency). So a stuck invocation holds up the others by about one
//! stall at most, while the pool has threads left.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long an idle thread waits for work before it ends.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A job for a thread of the pool.
type Job = Box<dyn FnOnce() + Send>;

/// The pool (see the module's doc). Dropped, its idle threads end, and the others once nothing
/// is queued.
#[derive(Debug)]
pub struct Invoker {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Idle threads wait here for work (or for the pool to stop).
    work: Condvar,
    /// Most threads at once.
    max_threads: usize,
    /// Threads kept awake while work is queued.
    awake: usize,
    /// How far into its job a thread still counts as awake.
    stall: Duration,
    /// The runtime the pool's threads enter (as tokio's blocking threads do), when made in one:
    /// a guest's WASI waits run on it.
    runtime: Option<tokio::runtime::Handle>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Threads alive.
    threads: usize,
    /// Threads started that have not yet taken their first look at the queue.
    starting: usize,
    /// Threads waiting for work.
    idle: usize,
    /// Idle threads told to wake that have not yet.
    woken: usize,
    /// When each thread's running job started, by the thread's slot (`None`: not running).
    started: Vec<Option<Instant>>,
    /// Slots of threads that ended, for the next ones.
    free_slots: Vec<usize>,
    stopping: bool,
    /// Looks again asked by callers still waiting (for tests).
    #[cfg(test)]
    looks: usize,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("queued", &self.queue.len())
            .field("threads", &self.threads)
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

/// The job panicked (or the pool could not start a thread for it): no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the invocation's thread ended without a result")]
pub struct NoResult;

impl Invoker {
    /// A pool of at most `max_threads` threads (at least one), keeping `awake` of them (at least
    /// one, at most `max_threads`) running while work is queued; a thread `stall` into a job no
    /// longer counts as awake.
    pub fn new(max_threads: usize, awake: usize, stall: Duration) -> Self {
        let max_threads = max_threads.max(1);
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                max_threads,
                awake: awake.clamp(1, max_threads),
                stall,
                runtime: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    /// The engine's pool for component invocations: at most `max_threads` (its component
    /// concurrency), as many awake as the machine has cores, and a thread [`COMPONENT_STALL`]
    /// into an invocation not counted.
    pub fn for_components(max_threads: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        Self::new(max_threads, cores, COMPONENT_STALL)
    }

    /// Runs `f` on a thread of the pool and waits for its result, asking the pool to look again
    /// at each [`Invoker::new`]'s `stall` it waits while `f` is still queued (see the module's
    /// doc). A panic in `f` is
    /// caught on its thread and returns [`NoResult`].
    pub async fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, NoResult> {
        let (send, mut result) = tokio::sync::oneshot::channel();
        // Set by the thread that takes the job: from then on its result is all there is to
        // wait for (a job held up for seconds must not have its caller look every `stall`).
        let taken = Arc::new(AtomicBool::new(false));
        {
            let taken = taken.clone();
            let mut state = self.shared.lock();
            state.queue.push_back(Box::new(move || {
                taken.store(true, Ordering::Release);
                let _ = send.send(f());
            }));
            self.shared.wake_for_queue(&mut state);
        }
        loop {
            match tokio::time::timeout(self.shared.stall, &mut result).await {
                Ok(got) => return got.map_err(|_| NoResult),
                Err(_) if taken.load(Ordering::Acquire) => {
                    return result.await.map_err(|_| NoResult);
                }
                Err(_) => {
                    let mut state = self.shared.lock();
                    #[cfg(test)]
                    {
                        state.looks += 1;
                    }
                    self.shared.wake_for_queue(&mut state);
                }
            }
        }
    }

    /// Threads alive.
    #[cfg(test)]
    fn threads(&self) -> usize {
        self.shared.lock().threads
    }
}

/// See [`Invoker::for_components`]: a component's invocation takes tens of microseconds, so a
/// thread this far into one is computing long (up to its wall-clock limit) or waiting.
pub const COMPONENT_STALL: Duration = Duration::from_millis(2);

impl Drop for Invoker {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.work.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Jobs run outside the lock, so a panic never poisons it; and nothing in it is left
        // half-changed by one.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Wakes (or starts) threads for the queued work while fewer than `awake` are: running a
    /// job begun less than `stall` ago, starting, or told to wake. (A thread stuck in its job
    /// stops counting after `stall`, and the next look wakes another.)
    fn wake_for_queue(self: &Arc<Self>, state: &mut State) {
        let now = Instant::now();
        let running = state
            .started
            .iter()
            .flatten()
            .filter(|at| now.saturating_duration_since(**at) < self.stall)
            .count();
        let coming = state.woken + state.starting;
        let mut awake = running + coming;
        let mut waiting = state.queue.len().saturating_sub(coming);
        while waiting > 0 && awake < self.awake {
            if state.idle > state.woken {
                state.woken += 1;
                self.work.notify_one();
            } else if state.threads < self.max_threads {
                self.start(state);
            } else {
                return;
            }
            awake += 1;
            waiting -= 1;
        }
    }

    /// Starts a thread, which takes the next job at once.
    fn start(self: &Arc<Self>, state: &mut State) {
        let slot = state.free_slots.pop().unwrap_or_else(|| {
            state.started.push(None);
            state.started.len() - 1
        });
        let shared = self.clone();
        let spawned = std::thread::Builder::new()
            .name("component".into())
            .spawn(move || shared.work_loop(slot));
        match spawned {
            Ok(_) => {
                state.threads += 1;
                state.starting += 1;
            }
            Err(e) => {
                // The jobs queued wait for a running thread (or the next look).
                tracing::warn!(error = %e, "starting a thread for component invocations");
                state.free_slots.push(slot);
            }
        }
    }

    /// A thread's life: take a job, run it, and again; wait while none is queued; end after
    /// [`KEEP_ALIVE`] idle, or once the pool is dropped and nothing is queued.
    fn work_loop(self: Arc<Self>, slot: usize) {
        let _runtime = self.runtime.as_ref().map(tokio::runtime::Handle::enter);
        let mut state = self.lock();
        state.starting -= 1;
        loop {
            if let Some(job) = state.queue.pop_front() {
                state.started[slot] = Some(Instant::now());
                drop(state);
                // A panic drops the job's sender: its caller gets `NoResult`.
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                state = self.lock();
                state.started[slot] = None;
                continue;
            }
            if state.stopping {
                break;
            }
            state.idle += 1;
            let (next, waited) = self
                .work
                .wait_timeout(state, KEEP_ALIVE)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state = next;
            state.idle -= 1;
            state.woken = state.woken.saturating_sub(1);
            if waited.timed_out() && state.queue.is_empty() {
                break;
            }
        }
        state.threads -= 1;
        state.free_slots.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::mpsc;

    use super::*;

    /// A job running on `pool` until released, once it has started; it returns its thread.
    async fn held(
        pool: &Arc<Invoker>,
    ) -> (
        mpsc::Sender<()>,
        tokio::task::JoinHandle<Result<std::thread::ThreadId, NoResult>>,
    ) {
        let (release, gate) = mpsc::channel::<()>();
        let job = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(move || {
                    gate.recv().expect("released");
                    std::thread::current().id()
                })
                .await
            })
        };
        while pool.shared.lock().started.iter().flatten().count() == 0 {
            tokio::task::yield_now().await;
        }
        (release, job)
    }

    #[tokio::test]
    async fn a_job_runs_on_a_thread_of_the_pool_and_returns_its_result() {
        let pool = Invoker::new(4, 1, Duration::from_secs(60));
        let name = pool
            .run(|| std::thread::current().name().map(str::to_owned))
            .await;
        assert_eq!(name, Ok(Some("component".to_owned())));
        assert_eq!(pool.threads(), 1);
    }

    #[tokio::test]
    async fn a_job_that_panics_returns_no_result_and_the_pool_goes_on() {
        let pool = Invoker::new(1, 1, Duration::from_secs(60));
        let panicked = pool.run(|| -> u32 { panic!("a job that panics") }).await;
        assert_eq!(panicked, Err(NoResult));
        assert_eq!(pool.run(|| 7).await, Ok(7));
        assert_eq!(
            pool.threads(),
            1,
            "the thread that caught the panic runs the next job"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_jobs_are_taken_by_the_threads_awake_and_wake_no_more() {
        // One thread awake, and no job long enough to stall: the jobs queued while one runs
        // are taken by that thread in turn, however many wait (tokio's blocking pool woke a
        // thread for each).
        let pool = Arc::new(Invoker::new(64, 1, Duration::from_secs(60)));
        let (release, first) = held(&pool).await;
        let queued: Vec<_> = (0..32)
            .map(|_| {
                let pool = pool.clone();
                tokio::spawn(async move { pool.run(|| std::thread::current().id()).await })
            })
            .collect();
        // Every job queued (a pool that woke a thread for each would have taken them).
        let deadline = Instant::now() + Duration::from_secs(2);
        while pool.shared.lock().queue.len() < 32 && Instant::now() < deadline {
            tokio::task::yield_now().await;
        }
        assert_eq!(
            pool.shared.lock().queue.len(),
            32,
            "the jobs wait in the queue"
        );
        assert_eq!(pool.threads(), 1, "no thread woken for the queued jobs");
        release.send(()).expect("release");
        let mut threads = HashSet::new();
        threads.insert(first.await.expect("task").expect("ran"));
        for job in queued {
            threads.insert(job.await.expect("task").expect("ran"));
        }
        assert_eq!(threads.len(), 1, "one thread took every job");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_stuck_past_the_stall_does_not_hold_the_ones_queued_behind_it() {
        let pool = Arc::new(Invoker::new(4, 1, Duration::from_millis(5)));
        let (release, stuck) = held(&pool).await;
        // Queued behind the stuck one, with one thread awake: it runs on a second thread,
        // woken once the first has been in its job for the stall.
        let next = tokio::time::timeout(Duration::from_secs(10), pool.run(|| 2)).await;
        assert_eq!(next.expect("not held by the stuck job"), Ok(2));
        assert_eq!(pool.threads(), 2);
        release.send(()).expect("release");
        assert!(stuck.await.expect("task").is_ok());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_whose_job_is_running_waits_for_its_result_without_looking_again() {
        // A job held for 100 stalls: its caller looks again only until it sees the job taken
        // (once, or a few times where a loaded machine is slow to wake the job's thread: CI
        // once saw 2), where one that looked each stall would have looked about 100 times.
        let pool = Arc::new(Invoker::new(4, 1, Duration::from_millis(1)));
        let (release, job) = held(&pool).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        release.send(()).expect("release");
        assert!(job.await.expect("task").is_ok());
        let looks = pool.shared.lock().looks;
        assert!(looks <= 5, "looked again {looks} times while its job ran");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_more_threads_than_the_bound_however_many_jobs_are_stuck() {
        let pool = Arc::new(Invoker::new(2, 1, Duration::from_millis(1)));
        let (release, gate) = mpsc::channel::<()>();
        let gate = Arc::new(Mutex::new(gate));
        let jobs: Vec<_> = (0..6)
            .map(|_| {
                let (pool, gate) = (pool.clone(), gate.clone());
                tokio::spawn(async move {
                    pool.run(move || {
                        let _ = gate.lock().expect("gate").recv();
                    })
                    .await
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(pool.threads(), 2);
        for _ in 0..6 {
            release.send(()).expect("release");
        }
        for job in jobs {
            assert_eq!(job.await.expect("task"), Ok(()));
        }
    }

    #[tokio::test]
    async fn the_pools_threads_end_once_it_is_dropped() {
        let pool = Invoker::new(4, 2, Duration::from_secs(60));
        assert_eq!(pool.run(|| 1).await, Ok(1));
        let shared = pool.shared.clone();
        drop(pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        while shared.lock().threads > 0 {
            assert!(Instant::now() < deadline, "the threads ended");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
