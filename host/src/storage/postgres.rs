//! The PostgreSQL backend of [`Storage`]: one table of keys and JSON values, serializable
//! transactions (the engine's at `REPEATABLE READ`, see [`Storage::transact_optimistic`])
//! retried on conflict, a pool of connections, and the schema created and migrated
//! at start by versioned migrations (refinery; `host/migrations/`).
//!
//! Records stay readable with plain SQL: `SELECT key, value FROM records WHERE key LIKE
//! 'order/store_…/%'` shows a store's orders as `jsonb`. Keys sort byte-wise (`COLLATE "C"`),
//! as sled's do, so that scans come back in the same order on both backends.
//!
//! Each connection lives on a thread of its own (the blocking `postgres` client drives its own
//! small runtime, which must not run inside the host's); a caller hands it a statement and waits
//! for the answer on a channel, so a call works from any thread, and a transaction keeps one
//! connection (one thread) from `BEGIN` to `COMMIT`. The service layer runs on the blocking pool,
//! so these waits never hold the async runtime's workers.
//!
//! A connection keeps every statement it has run prepared ([`Session`]): the client would
//! otherwise prepare a statement in a round trip of its own before each run of it. Each run is
//! still planned for its parameters (`plan_cache_mode = force_custom_plan`): with generic plans
//! the engine's lanes (range scans of the work queue) made a quiet store wait longer in a burst.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement};

use super::{Entry, Storage, Txn};
use crate::model::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// How often a transaction that lost a serialization conflict is run again before the conflict
/// is answered as an error.
const MAX_ATTEMPTS: u32 = 32;

/// How long a caller waits for a free connection before the call fails.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(30);

/// The channel of the announcements hosts sharing a database make at each commit.
const CHANNEL: &str = "commerce_host_changes";

/// The PostgreSQL backend.
pub struct PgStorage {
    pool: Pool,
    /// Tells the listening thread to end when the storage is dropped.
    stop: Arc<std::sync::atomic::AtomicBool>,
    /// Statements that PostgreSQL ended as one side of a deadlock (the transaction ran again).
    /// Transactions writing, or removing, some of the same records meet none, their writes going
    /// in key order ([`PgTxn::write_pending`]); two that each write a record the other removes
    /// still can.
    deadlocks: std::sync::atomic::AtomicU64,
}

impl Drop for PgStorage {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }
}

impl std::fmt::Debug for PgStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStorage").finish_non_exhaustive()
    }
}

fn internal(context: &str, e: impl std::fmt::Display) -> Error {
    Error::Internal(anyhow::anyhow!("{context}: {e}"))
}

/// Whether `e` is a conflict that running the transaction again may not meet, or a prepared
/// statement gone stale (see [`stale`]), which running it again prepares afresh.
fn retryable(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(&SqlState::T_R_SERIALIZATION_FAILURE) | Some(&SqlState::T_R_DEADLOCK_DETECTED)
    ) || stale(e)
}

/// Whether `e` says that a statement prepared on the connection ([`Session`]) can no longer
/// run as prepared: the server does not know it (deallocated), or a change of the schema made
/// its plan's result type differ. The statement did not run.
fn stale(e: &postgres::Error) -> bool {
    match e.code() {
        Some(&SqlState::INVALID_SQL_STATEMENT_NAME) => true,
        Some(&SqlState::FEATURE_NOT_SUPPORTED) => e
            .as_db_error()
            .is_some_and(|db| db.message().starts_with("cached plan must not change")),
        _ => false,
    }
}

/// The exclusive upper bound of the keys that start with `prefix` (byte order): every such key
/// sorts below `prefix` followed by U+10FFFF, whose UTF-8 bytes no key of ours contains.
fn prefix_end(prefix: &str) -> String {
    let mut end = prefix.to_owned();
    end.push(char::MAX);
    end
}

fn text(bytes: &[u8], what: &str) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|e| internal(what, e))
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

type PgResult<T> = std::result::Result<T, postgres::Error>;

/// A statement's parameters.
type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connection's client, with the statements prepared on it. Each statement is prepared the
/// first time the connection runs it and kept: the client sends an unprepared statement's text
/// to be parsed and described in a round trip of its own before every run of it, so a cached one
/// saves a round trip each time (and the server's parsing). Every statement of ours is a
/// constant text, the key of the cache. The other methods of [`Client`] (`batch_execute`) are
/// reached through it as they are.
struct Session {
    client: Client,
    prepared: HashMap<&'static str, Statement>,
}

impl Session {
    /// `sql`, prepared on this connection the first time.
    fn statement(&mut self, sql: &'static str) -> PgResult<Statement> {
        if let Some(statement) = self.prepared.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql)?;
        self.prepared.insert(sql, statement.clone());
        Ok(statement)
    }

    /// What `ran` (a run of a prepared statement) answered. When the statement was [`stale`],
    /// so are the connection's others (what drops one, a `DEALLOCATE` or a change of the
    /// table's schema, drops them all): each is prepared again next time (a transaction that
    /// met one runs again: [`retryable`]).
    fn forget_if_stale<T>(&mut self, ran: PgResult<T>) -> PgResult<T> {
        if let Err(e) = &ran
            && stale(e)
        {
            self.prepared.clear();
        }
        ran
    }

    /// Runs the prepared `sql` through `run` (one of [`Client`]'s methods).
    fn run<T>(
        &mut self,
        sql: &'static str,
        run: impl FnOnce(&mut Client, &Statement) -> PgResult<T>,
    ) -> PgResult<T> {
        let statement = self.statement(sql)?;
        let ran = run(&mut self.client, &statement);
        self.forget_if_stale(ran)
    }

    /// [`Client::query`], prepared.
    fn query(&mut self, sql: &'static str, params: Params<'_>) -> PgResult<Vec<Row>> {
        self.run(sql, |client, statement| client.query(statement, params))
    }

    /// [`Client::query_opt`], prepared.
    fn query_opt(&mut self, sql: &'static str, params: Params<'_>) -> PgResult<Option<Row>> {
        self.run(sql, |client, statement| client.query_opt(statement, params))
    }

    /// [`Client::query_one`], prepared.
    fn query_one(&mut self, sql: &'static str, params: Params<'_>) -> PgResult<Row> {
        self.run(sql, |client, statement| client.query_one(statement, params))
    }

    /// [`Client::execute`], prepared.
    fn execute(&mut self, sql: &'static str, params: Params<'_>) -> PgResult<u64> {
        self.run(sql, |client, statement| client.execute(statement, params))
    }
}

/// Runs `statement` (a statement outside a transaction, or a transaction's start) once more if
/// it met a [`stale`] prepared statement, which is then prepared afresh.
fn once_more_if_stale<T>(mut statement: impl FnMut() -> PgResult<T>) -> PgResult<T> {
    match statement() {
        Err(e) if stale(&e) => statement(),
        ran => ran,
    }
}

impl std::ops::Deref for Session {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// One connection, on its own thread.
struct Connection {
    jobs: mpsc::Sender<Job>,
}

impl Connection {
    fn open(config: postgres::Config, what: String) -> Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (ready, opened) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("postgres".into())
            .spawn(move || {
                // A prepared statement is planned for each run's parameters, as an unprepared one
                // is: a generic plan of a range scan (the work queue's lanes) would not know how
                // few keys the range holds.
                let connected = config.connect(NoTls).and_then(|mut client| {
                    client
                        .batch_execute("SET plan_cache_mode = force_custom_plan")
                        .map(|()| client)
                });
                let mut client = match connected {
                    Ok(client) => {
                        let _ = ready.send(Ok(()));
                        Session {
                            client,
                            prepared: HashMap::new(),
                        }
                    }
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                for job in queue {
                    job(&mut client);
                    if client.is_closed() {
                        return;
                    }
                }
            })
            .map_err(|e| internal("starting a database connection's thread", e))?;
        opened
            .recv()
            .map_err(|e| internal(&what, e))?
            .map_err(|e| internal(&what, e))?;
        Ok(Self { jobs })
    }

    /// Runs `f` on the connection's thread and returns what it returns.
    fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
    ) -> Result<R> {
        let (reply, answer) = mpsc::sync_channel(1);
        self.jobs
            .send(Box::new(move |client| {
                let _ = reply.send(f(client));
            }))
            .map_err(|_| internal("the database", "the connection was lost"))?;
        answer
            .recv()
            .map_err(|_| internal("the database", "the connection was lost"))
    }
}

/// At most `size` connections, opened when first needed and kept.
struct Pool {
    config: postgres::Config,
    what: String,
    size: usize,
    state: Mutex<PoolState>,
    returned: Condvar,
}

struct PoolState {
    idle: Vec<Connection>,
    open: usize,
}

/// A connection taken from the pool, given back when dropped (unless it broke).
struct Lease<'a> {
    pool: &'a Pool,
    connection: Option<Connection>,
    broken: bool,
}

impl Lease<'_> {
    fn call<R: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
    ) -> Result<R> {
        let Some(connection) = &self.connection else {
            return Err(internal("the database", "no connection"));
        };
        let answer = connection.call(f);
        if answer.is_err() {
            self.broken = true;
        }
        answer
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut state = self.pool.lock();
        match self.connection.take() {
            Some(connection) if !self.broken => state.idle.push(connection),
            _ => state.open -= 1,
        }
        drop(state);
        self.pool.returned.notify_one();
    }
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self) -> Result<Lease<'_>> {
        let deadline = std::time::Instant::now() + CHECKOUT_TIMEOUT;
        let mut state = self.lock();
        loop {
            if let Some(connection) = state.idle.pop() {
                return Ok(Lease {
                    pool: self,
                    connection: Some(connection),
                    broken: false,
                });
            }
            if state.open < self.size {
                state.open += 1;
                drop(state);
                return match Connection::open(self.config.clone(), self.what.clone()) {
                    Ok(connection) => Ok(Lease {
                        pool: self,
                        connection: Some(connection),
                        broken: false,
                    }),
                    Err(e) => {
                        self.lock().open -= 1;
                        Err(e)
                    }
                };
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(internal(
                    "the database",
                    format!(
                        "no free connection within {} s (--database-pool-size {})",
                        CHECKOUT_TIMEOUT.as_secs(),
                        self.size
                    ),
                ));
            }
            state = self
                .returned
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl PgStorage {
    /// Connects to `url` (`postgres://user@host:port/db`) with a pool of at most `pool_size`
    /// connections, then creates or migrates the schema. A database whose schema is newer than
    /// this build knows is refused, saying so.
    pub fn connect(url: &str, pool_size: u32) -> Result<Self> {
        let config: postgres::Config = url
            .parse()
            .map_err(|e| internal("the database URL (--database-url)", e))?;
        let pool = Pool {
            config,
            what: format!("connecting to {}", redact(url)),
            size: usize::try_from(pool_size.max(1)).unwrap_or(1),
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
        };
        pool.get()?.call(migrate)??;
        Ok(Self {
            pool,
            stop: Arc::default(),
            deadlocks: std::sync::atomic::AtomicU64::new(0),
        })
    }
}

/// `url` without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let user = &url[scheme + 3..at];
            let user = user.split(':').next().unwrap_or_default();
            format!("{}{user}@{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Applies the migrations this build has and the database lacks; refuses a database that has
/// migrations this build does not know (a newer host migrated it).
fn migrate(session: &mut Session) -> Result<()> {
    let client = &mut session.client;
    // One host migrates at a time; the others wait, then find the schema current.
    client
        .execute("SELECT pg_advisory_lock(7212026)", &[])
        .map_err(|e| internal("locking the schema for migration", e))?;
    let migrated = migrate_locked(client);
    let _ = client.execute("SELECT pg_advisory_unlock(7212026)", &[]);
    migrated
}

fn migrate_locked(client: &mut postgres::Client) -> Result<()> {
    let runner = embedded::migrations::runner();
    let known = runner.get_migrations().iter().map(|m| m.version()).max();
    let history: Option<String> = client
        .query_one("SELECT to_regclass('refinery_schema_history')::text", &[])
        .map_err(|e| internal("reading the schema's version", e))?
        .get(0);
    if history.is_some()
        && let Some(applied) = runner
            .get_last_applied_migration(client)
            .map_err(|e| internal("reading the schema's version", e))?
        && Some(applied.version()) > known
    {
        return Err(Error::Internal(anyhow::anyhow!(
            "the database's schema is at version {} ({}), newer than this host knows (up to {}): run the newer commerce-host, or restore a database of this version",
            applied.version(),
            applied.name(),
            known.unwrap_or(0)
        )));
    }
    runner
        .set_abort_divergent(true)
        .set_abort_missing(true)
        .run(client)
        .map_err(|e| internal("migrating the database's schema", e))?;
    Ok(())
}

impl Storage for PgStorage {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let key = text(key, "a key")?;
        self.pool
            .get()?
            .call(move |client| {
                once_more_if_stale(|| {
                    client.query_opt("SELECT value::text FROM records WHERE key = $1", &[&key])
                })
            })?
            .map(|row| row.map(|r| r.get::<_, String>(0).into_bytes()))
            .map_err(|e| internal("reading a record", e))
    }

    fn scan(
        &self,
        prefix: &[u8],
        after: Option<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>> {
        let prefix = text(prefix, "a key prefix")?;
        let end = prefix_end(&prefix);
        let after = after.map(|a| text(a, "a key")).transpose()?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .pool
            .get()?
            .call(move |client| once_more_if_stale(|| match (&after, reverse) {
                (Some(after), false) => client.query(
                    "SELECT key, value::text FROM records WHERE key >= $1 AND key < $2 AND key > $3 ORDER BY key LIMIT $4",
                    &[&prefix, &end, &after, &limit],
                ),
                (Some(after), true) => client.query(
                    "SELECT key, value::text FROM records WHERE key >= $1 AND key < $2 AND key < $3 ORDER BY key DESC LIMIT $4",
                    &[&prefix, &end, &after, &limit],
                ),
                (None, false) => client.query(
                    "SELECT key, value::text FROM records WHERE key >= $1 AND key < $2 ORDER BY key LIMIT $3",
                    &[&prefix, &end, &limit],
                ),
                (None, true) => client.query(
                    "SELECT key, value::text FROM records WHERE key >= $1 AND key < $2 ORDER BY key DESC LIMIT $3",
                    &[&prefix, &end, &limit],
                ),
            }))?
            .map_err(|e| internal("scanning records", e))?;
        Ok(rows
            .into_iter()
            .map(|r| {
                (
                    r.get::<_, String>(0).into_bytes(),
                    r.get::<_, String>(1).into_bytes(),
                )
            })
            .collect())
    }

    fn transact(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        self.run(f, "BEGIN ISOLATION LEVEL SERIALIZABLE")
    }

    /// At `REPEATABLE READ`: PostgreSQL's snapshot isolation, where a row this transaction
    /// writes that another committed since its snapshot is a serialization failure (run again),
    /// and its reads take no predicate locks. At `SERIALIZABLE`, the engine's transactions of a
    /// burst lost conflicts to each other by the hundred: a btree index takes a serializable
    /// read's predicate lock on the whole leaf page, and the claims' and the recorder's reads of
    /// deliveries share pages with the fan-out's inserts of the next ones.
    fn transact_optimistic(&self, f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>) -> Result<()> {
        self.run(f, "BEGIN ISOLATION LEVEL REPEATABLE READ")
    }

    fn update(&self, key: &[u8], f: &mut super::Update<'_>) -> Result<()> {
        let key = text(key, "a key")?;
        let mut lease = self.pool.get()?;
        // Once more, from `BEGIN`, if a prepared statement was stale (it aborted the transaction
        // before it ran).
        match update_once(&mut lease, &key, f)? {
            Err((_, e)) if stale(&e) => update_once(&mut lease, &key, f)?,
            done => done,
        }
        .map_err(|(what, e)| internal(what, e))
    }

    fn flush(&self) -> Result<()> {
        // A committed transaction is on disk already (synchronous commit), except a relaxed one
        // (`Txn::relax`): PostgreSQL's WAL writer flushes those within `wal_writer_delay` (200 ms
        // by default), and the next synchronous commit flushes them with it; a crash before that
        // loses only them and what was committed after them, as `Txn::relax` promises.
        Ok(())
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn listen(&self, heard: super::Listener) {
        let config = self.pool.config.clone();
        let stop = self.stop.clone();
        let started = std::thread::Builder::new()
            .name("postgres-listen".into())
            .spawn(move || listen(config, &stop, heard.as_ref()));
        if let Err(e) = started {
            tracing::error!(error = %e, "the database's announcements will not be heard");
        }
    }
}

/// One run of [`PgStorage::update`]'s transaction. Under READ COMMITTED, `FOR UPDATE` makes
/// concurrent updates of the row wait for each other (no serialization conflict to retry); a
/// missing row is first made, as JSON `null`, by whichever update gets there first. The commit
/// does not wait for the disk (an update is not flushed, as `Db::update` says): the row lock is
/// held for the round trips only. A database error comes back rolled back, with what failed.
fn update_once(
    lease: &mut Lease<'_>,
    key: &str,
    f: &mut super::Update<'_>,
) -> Result<std::result::Result<(), (&'static str, postgres::Error)>> {
    const LOCK: &str = "SELECT value::text FROM records WHERE key = $1 FOR UPDATE";
    let locked_key = key.to_owned();
    let current = lease.call(move |client| {
        let locked = (|| {
            client.batch_execute("BEGIN ISOLATION LEVEL READ COMMITTED")?;
            if let Some(row) = client.query_opt(LOCK, &[&locked_key])? {
                return Ok(row.get::<_, String>(0));
            }
            client.execute(
                "INSERT INTO records (key, value) VALUES ($1, 'null') ON CONFLICT (key) DO NOTHING",
                &[&locked_key],
            )?;
            client
                .query_one(LOCK, &[&locked_key])
                .map(|row| row.get::<_, String>(0))
        })();
        if locked.is_err() {
            let _ = client.batch_execute("ROLLBACK");
        }
        locked
    })?;
    let current = match current {
        Ok(current) => current,
        Err(e) => return Ok(Err(("locking a record", e))),
    };
    let next = match f((current != "null").then_some(current.as_bytes())) {
        Ok(next) => text(&next, "a record"),
        Err(e) => Err(e),
    };
    let next = match next {
        Ok(next) => next,
        Err(e) => {
            lease
                .call(|client| client.batch_execute("ROLLBACK"))?
                .map_err(|e| internal("rolling an update back", e))?;
            return Err(e);
        }
    };
    let key = key.to_owned();
    let written = lease.call(move |client| {
        let written = client
            .execute(
                "UPDATE records SET value = $2::text::jsonb WHERE key = $1",
                &[&key, &next],
            )
            .and_then(|_| client.batch_execute("SET LOCAL synchronous_commit TO OFF; COMMIT"));
        if written.is_err() {
            let _ = client.batch_execute("ROLLBACK");
        }
        written
    })?;
    Ok(written.map_err(|e| ("updating a record", e)))
}

/// Hears the announcements of the hosts sharing the database (`LISTEN`) until `stop`; after a
/// lost connection it connects again and tells `heard` that some may have been missed.
fn listen(
    config: postgres::Config,
    stop: &std::sync::atomic::AtomicBool,
    heard: &dyn Fn(Option<&str>),
) {
    use postgres::fallible_iterator::FallibleIterator as _;
    use std::sync::atomic::Ordering;
    let mut first = true;
    while !stop.load(Ordering::Acquire) {
        let mut client = match config.connect(NoTls) {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!(error = %e, "listening to the database: connecting again in 1 s");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
        };
        if let Err(e) = client.batch_execute(&format!("LISTEN {CHANNEL}")) {
            tracing::warn!(error = %e, "listening to the database");
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        if !first {
            heard(None);
        }
        first = false;
        loop {
            if stop.load(Ordering::Acquire) {
                return;
            }
            let mut notifications = client.notifications();
            let mut waiting = notifications.timeout_iter(Duration::from_millis(250));
            match waiting.next() {
                Ok(Some(notification)) => heard(Some(notification.payload())),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "listening to the database: the connection was lost");
                    break;
                }
            }
        }
    }
}

impl PgStorage {
    /// Runs `f` in a transaction begun with `begin` (its isolation level), again after each
    /// serialization conflict it loses, up to [`MAX_ATTEMPTS`] times.
    fn run(
        &self,
        f: &mut dyn FnMut(&mut dyn Txn) -> Result<()>,
        begin: &'static str,
    ) -> Result<()> {
        let mut lease = self.pool.get()?;
        for attempt in 1..=MAX_ATTEMPTS {
            lease
                .call(move |client| client.batch_execute(begin))?
                .map_err(|e| internal("starting a transaction", e))?;
            let mut txn = PgTxn {
                lease: &mut lease,
                deadlocks: &self.deadlocks,
                conflict: false,
                relaxed: false,
                pending: HashMap::new(),
                read: HashMap::new(),
            };
            let ran = f(&mut txn).and_then(|()| txn.write_pending());
            let conflict = txn.conflict;
            let commit = if txn.relaxed {
                "SET LOCAL synchronous_commit TO OFF; COMMIT"
            } else {
                "COMMIT"
            };
            let retry = match ran {
                Ok(()) => match lease.call(move |client| client.batch_execute(commit))? {
                    Ok(()) => return Ok(()),
                    Err(e) if retryable(&e) && attempt < MAX_ATTEMPTS => true,
                    Err(e) => {
                        let _ = lease.call(|client| client.batch_execute("ROLLBACK"));
                        return Err(internal("committing a transaction", e));
                    }
                },
                Err(_) if conflict && attempt < MAX_ATTEMPTS => true,
                Err(e) => {
                    lease
                        .call(|client| client.batch_execute("ROLLBACK"))?
                        .map_err(|e| internal("rolling a transaction back", e))?;
                    return Err(e);
                }
            };
            if retry {
                // The transaction lost a conflict: roll back, wait a little (longer after each
                // conflict, so that the winners finish), and run it again.
                lease
                    .call(|client| client.batch_execute("ROLLBACK"))?
                    .map_err(|e| internal("rolling a transaction back", e))?;
                std::thread::sleep(Duration::from_micros(200 * u64::from(attempt)));
            }
        }
        Err(internal(
            "a transaction",
            format!("it lost {MAX_ATTEMPTS} serialization conflicts in a row"),
        ))
    }
}

/// A transaction in progress on one leased connection.
struct PgTxn<'a, 'p> {
    lease: &'a mut Lease<'p>,
    /// The storage's count of deadlocks met ([`PgStorage::deadlocks`]).
    deadlocks: &'a std::sync::atomic::AtomicU64,
    /// Whether a statement lost a serialization conflict (the transaction is then run again).
    conflict: bool,
    /// Whether the commit may return before it is on disk ([`Txn::relax`]).
    relaxed: bool,
    /// Writes not yet sent, by key (`None`: removed): sent together in one statement before the
    /// commit, so that a transaction writing many records (a fan-out, a batch of attempts) makes
    /// one round trip for them instead of one each. A read of a key written here is answered
    /// from it; a read of any other key cannot see these writes anyway.
    pending: HashMap<String, Option<String>>,
    /// Records read so far (`None`: no record), by key: read again, a key is answered from here
    /// (the transaction's snapshot would give the same answer). Filled by [`Txn::prefetch`] too.
    read: HashMap<String, Option<String>>,
}

impl PgTxn<'_, '_> {
    /// Sends the pending writes: the removals and the upserts, in one statement (their keys
    /// are distinct, each key being pending once).
    fn write_pending(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        // In key order: the statement locks the rows it writes in the order given, then those it
        // removes in the order it finds them (the same for every transaction), so two
        // transactions writing (or removing) some of the same records wait for each other
        // instead of each holding a row the other waits for, a deadlock that PostgreSQL breaks
        // only after `deadlock_timeout` (1 s by default). Two that each write a record the
        // other removes can still deadlock: a deadlock is counted and logged.
        let mut pending: Vec<_> = self.pending.drain().collect();
        pending.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut removed = Vec::new();
        let (mut keys, mut values) = (Vec::new(), Vec::new());
        for (key, value) in pending {
            match value {
                Some(value) => {
                    keys.push(key);
                    values.push(value);
                }
                None => removed.push(key),
            }
        }
        let answer = self.lease.call(move |client| {
            client.execute(
                "WITH removed AS (DELETE FROM records WHERE key = ANY($1::text[])) \
                 INSERT INTO records (key, value) \
                 SELECT k, v::jsonb FROM unnest($2::text[], $3::text[]) AS w(k, v) \
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&removed, &keys, &values],
            )
        })?;
        self.answer("writing records", answer).map(|_| ())
    }

    fn answer<T>(
        &mut self,
        what: &str,
        answer: std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        answer.map_err(|e| {
            if retryable(&e) {
                self.conflict = true;
            }
            if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) {
                self.deadlocks
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(error = %e, "PostgreSQL broke a deadlock; the transaction runs again");
            }
            internal(what, e)
        })
    }
}

impl Txn for PgTxn<'_, '_> {
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let key = text(key, "a key")?;
        if let Some(known) = self.pending.get(&key).or_else(|| self.read.get(&key)) {
            return Ok(known.clone().map(String::into_bytes));
        }
        let asked = key.clone();
        let answer = self.lease.call(move |client| {
            client.query_opt("SELECT value::text FROM records WHERE key = $1", &[&asked])
        })?;
        let value = self
            .answer("reading a record", answer)?
            .map(|r| r.get::<_, String>(0));
        self.read.insert(key, value.clone());
        Ok(value.map(String::into_bytes))
    }

    fn prefetches(&self) -> bool {
        true
    }

    fn prefetch(&mut self, keys: &[&[u8]]) -> Result<()> {
        let mut wanted = Vec::with_capacity(keys.len());
        for key in keys {
            let key = text(key, "a key")?;
            if !self.pending.contains_key(&key) && !self.read.contains_key(&key) {
                wanted.push(key);
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let asked = wanted.clone();
        let answer = self.lease.call(move |client| {
            client.query(
                "SELECT key, value::text FROM records WHERE key = ANY($1::text[])",
                &[&asked],
            )
        })?;
        let rows = self.answer("reading records", answer)?;
        for key in wanted {
            self.read.insert(key, None);
        }
        for row in rows {
            self.read
                .insert(row.get::<_, String>(0), Some(row.get::<_, String>(1)));
        }
        Ok(())
    }

    fn put(&mut self, key: &[u8], value: Vec<u8>) -> Result<()> {
        let key = text(key, "a key")?;
        let value = text(&value, "a record")?;
        self.pending.insert(key, Some(value));
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        let key = text(key, "a key")?;
        self.pending.insert(key, None);
        Ok(())
    }

    fn relax(&mut self) {
        self.relaxed = true;
    }

    fn announce(&mut self, message: &str) -> Result<()> {
        let message = message.to_owned();
        let answer = self.lease.call(move |client| {
            client.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &message])
        })?;
        self.answer("announcing a change", answer).map(|_| ())
    }
}

/// Creates a new, empty database on the server of `url` (which names any database the user may
/// connect to) and returns the URL of the new one: each test host gets a database of its own.
#[doc(hidden)]
pub fn fresh_database(url: &str) -> Result<String> {
    let name = format!(
        "ch_test_{}",
        crate::model::ids::new_id_body(jiff::Timestamp::now()).to_ascii_lowercase()
    );
    let config: postgres::Config = url
        .parse()
        .map_err(|e| internal("the test database URL", e))?;
    let create = format!("CREATE DATABASE \"{name}\"");
    Connection::open(config, format!("connecting to {}", redact(url)))?
        .call(move |client| client.batch_execute(&create))?
        .map_err(|e| internal("creating a test database", e))?;
    Ok(with_database(url, &name))
}

/// `url` naming the database `name` instead of its own.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let root = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of one connection on a fresh database of the server that
    /// `COMMERCE_HOST_TEST_DATABASE_URL` names, if it names one.
    fn one_connection() -> Option<PgStorage> {
        crate::storage::contract::fresh_postgres_pool(1)
    }

    /// A read outside a transaction and a transaction that reads and writes.
    fn read_and_write(pg: &PgStorage, n: u32) {
        assert_eq!(pg.get(b"none").expect("get"), None);
        pg.transact(&mut |tx| {
            tx.get(b"count")?;
            tx.put(b"count", n.to_string().into_bytes())
        })
        .expect("transact");
        assert_eq!(
            pg.get(b"count").expect("get"),
            Some(n.to_string().into_bytes())
        );
    }

    /// How many statements the one connection has prepared (this question aside: the client
    /// prepares every statement it runs), and its plan cache mode.
    fn prepared_and_mode(pg: &PgStorage) -> (i64, String) {
        pg.pool
            .get()
            .expect("lease")
            .call(|session| {
                let count = session
                    .client
                    .query_one(
                        "SELECT count(*) FROM pg_prepared_statements \
                         WHERE statement NOT LIKE '%pg_prepared_statements%'",
                        &[],
                    )?
                    .get::<_, i64>(0);
                let mode = session
                    .client
                    .query_one("SHOW plan_cache_mode", &[])?
                    .get::<_, String>(0);
                Ok::<_, postgres::Error>((count, mode))
            })
            .expect("call")
            .expect("asked")
    }

    #[test]
    fn a_connection_prepares_each_statement_once_and_plans_each_run_for_its_parameters() {
        let Some(pg) = one_connection() else {
            return;
        };
        read_and_write(&pg, 1);
        let (after_one, mode) = prepared_and_mode(&pg);
        assert_eq!(mode, "force_custom_plan");
        // The point read and the writes' upsert.
        assert_eq!(after_one, 2);
        read_and_write(&pg, 2);
        read_and_write(&pg, 3);
        assert_eq!(prepared_and_mode(&pg).0, after_one);
    }

    #[test]
    fn a_transactions_announcements_are_heard_when_it_commits_and_never_when_it_does_not() {
        let Some(pg) = crate::storage::contract::fresh_postgres_pool(2) else {
            return;
        };
        let (sender, heard) = std::sync::mpsc::channel::<String>();
        let sender = Mutex::new(sender);
        pg.listen(std::sync::Arc::new(move |message: Option<&str>| {
            if let Some(message) = message {
                let _ = sender
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .send(message.to_owned());
            }
        }));
        let announce = |message: &str, relaxed: bool, commit: bool| {
            pg.transact(&mut |tx| {
                if relaxed {
                    tx.relax();
                }
                tx.put(b"k", b"1".to_vec())?;
                tx.announce(message)?;
                if commit {
                    Ok(())
                } else {
                    Err(crate::Error::invalid("x", "not committed, on purpose"))
                }
            })
        };
        // The listener's connection is made on a thread of its own: announce until it hears.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            announce("ping", false, true).expect("ping");
            if heard.recv_timeout(Duration::from_millis(100)).is_ok() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the listener never heard"
            );
        }
        while heard.recv_timeout(Duration::from_millis(200)).is_ok() {}
        let odd = "it's a \\ 'quoted' \"line\" ü\nq work/webhook/1";
        announce(odd, false, true).expect("committed");
        announce("never", false, false).expect_err("rolled back");
        announce("relaxed", true, true).expect("committed, relaxed");
        let mut got = Vec::new();
        while let Ok(message) = heard.recv_timeout(Duration::from_millis(500)) {
            got.push(message);
        }
        assert_eq!(got, [odd, "relaxed"]);
    }

    #[test]
    fn transactions_writing_the_same_records_at_once_wait_for_each_other_without_deadlocks() {
        let Some(pg) = crate::storage::contract::fresh_postgres_pool(6) else {
            return;
        };
        let pg = Arc::new(pg);
        let threads: Vec<_> = (0..6)
            .map(|t| {
                let pg = pg.clone();
                std::thread::spawn(move || {
                    for round in 0..8 {
                        pg.transact_optimistic(&mut |tx| {
                            for k in 0..40 {
                                let value = format!("\"{t}-{round}\"").into_bytes();
                                tx.put(format!("hot/{k:02}").as_bytes(), value)?;
                            }
                            for k in 0..10 {
                                tx.delete(format!("gone/{k}").as_bytes())?;
                            }
                            Ok(())
                        })
                        .expect("transact");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        let deadlocks = pg.deadlocks.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            deadlocks, 0,
            "each of them waited 1 s for PostgreSQL to break it"
        );
    }

    /// Drops every statement the one connection has prepared, on the server's side only.
    fn deallocate_all(pg: &PgStorage) {
        pg.pool
            .get()
            .expect("lease")
            .call(|session| session.client.batch_execute("DEALLOCATE ALL"))
            .expect("call")
            .expect("deallocated");
    }

    #[test]
    fn a_statement_the_server_dropped_is_prepared_again_in_and_out_of_transactions() {
        let Some(pg) = one_connection() else {
            return;
        };
        read_and_write(&pg, 1);
        deallocate_all(&pg);
        assert_eq!(prepared_and_mode(&pg).0, 0);
        read_and_write(&pg, 2);
        // The transaction's write was prepared again too.
        deallocate_all(&pg);
        pg.transact(&mut |tx| tx.put(b"count", b"3".to_vec()))
            .expect("transact");
        assert_eq!(pg.get(b"count").expect("get"), Some(b"3".to_vec()));
        // And an update under its row lock (a store's rate limit).
        pg.update(b"count", &mut |_| Ok(b"4".to_vec()))
            .expect("update");
        deallocate_all(&pg);
        pg.update(b"count", &mut |_| Ok(b"5".to_vec()))
            .expect("update");
        assert_eq!(pg.get(b"count").expect("get"), Some(b"5".to_vec()));
    }

    #[test]
    fn a_prefix_bound_is_above_every_key_under_the_prefix_and_below_the_next() {
        let end = prefix_end("order/store_1/");
        assert!("order/store_1/ord_zzzz".as_bytes() < end.as_bytes());
        assert!("order/store_10/".as_bytes() > end.as_bytes());
        assert!("order/store_1/".as_bytes() < end.as_bytes());
        assert!(end.as_bytes() < "order/store_2/".as_bytes());
    }

    #[test]
    fn a_database_url_is_shown_without_its_password() {
        assert_eq!(
            redact("postgres://app:s3cret@db.internal:5432/commerce"),
            "postgres://app@db.internal:5432/commerce"
        );
        assert_eq!(
            redact("postgres://app@db:5432/c"),
            "postgres://app@db:5432/c"
        );
    }

    #[test]
    fn a_url_names_another_database() {
        assert_eq!(
            with_database("postgres://u@127.0.0.1:5433/postgres", "t1"),
            "postgres://u@127.0.0.1:5433/t1"
        );
        assert_eq!(
            with_database("postgres://u@h:5432?sslmode=disable", "t1"),
            "postgres://u@h:5432/t1?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h/a/b", "t1"),
            "postgres://u@h/t1"
        );
    }
}
