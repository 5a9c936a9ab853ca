//! `commerce-host export` and `commerce-host import`: every record of a host's storage as one
//! dump, to move a host between its embedded stores (sled, fjall) and PostgreSQL (or to keep a
//! copy).
//!
//! The dump is JSON lines: a header `{"format":"commerce-host-export","version":1,…}`, one line
//! per record `{"key":"order/store_…/ord_…","value":{…}}` in key order, then a trailer
//! `{"end":true,"records":N}`, so a cut-off dump is told from a whole one. Components' bytes are
//! records too (`component-wasm/{name}/{version}`, base64), whichever backend they come from:
//! on an embedded store they are files in the data folder's `components/`, on PostgreSQL also
//! records (see `Service::keep_component_bytes`). Import writes them where the target keeps
//! them. Records that belong to running hosts (claims on work, a store's rate-limit state) are
//! left out.
//!
//! Both commands read or write the storage directly: the hosts on it are stopped first (sled and
//! fjall refuse a second process on their folder; on PostgreSQL a dump made while hosts run is not one
//! consistent moment). Import takes an empty storage only, so it never mixes two stores' data.

use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail, ensure};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::storage::{DEFAULT_STORE_CACHE_MIB, Db, Embedded};

/// The dump's `format`.
const FORMAT: &str = "commerce-host-export";
/// The dump's `version`: what this host writes and reads.
const VERSION: u64 = 1;
/// Records read or written at a time.
const BATCH: usize = 512;
/// Prefix of components' bytes kept as records.
const COMPONENT_PREFIX: &str = "component-wasm/";
/// Prefixes of records that belong to the hosts running on the storage, not to its data.
const LEFT_OUT: [&str; 2] = ["claim/", "ratelimit/"];

/// Where the storage is: the data folder, and PostgreSQL when a URL is given.
#[derive(clap::Args)]
pub struct StorageArgs {
    /// Data folder of the host: its embedded database and its components.
    #[arg(long, env = "COMMERCE_HOST_DATA", default_value = "./data")]
    data: PathBuf,
    /// PostgreSQL instead of the data folder's embedded database (`postgres://user@host:port/db`).
    #[arg(long, env = "COMMERCE_HOST_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// The data folder's embedded database: `sled` (`<data>/db`) or `fjall` (`<data>/fjall`).
    #[arg(long, env = "COMMERCE_HOST_STORE", default_value = "sled")]
    store: Embedded,
}

/// `commerce-host export`.
#[derive(clap::Args)]
pub struct ExportArgs {
    #[command(flatten)]
    storage: StorageArgs,
    /// Where to write the dump (`-`: standard output).
    #[arg(long, short, default_value = "-")]
    output: PathBuf,
}

/// `commerce-host import`.
#[derive(clap::Args)]
pub struct ImportArgs {
    #[command(flatten)]
    storage: StorageArgs,
    /// The dump to read (`-`: standard input).
    #[arg(long, short, default_value = "-")]
    input: PathBuf,
}

/// What an export or import moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Records, components' bytes included.
    pub records: u64,
    /// Components among them.
    pub components: u64,
}

impl StorageArgs {
    /// Where the storage is: `data`, and PostgreSQL at `database_url` when given.
    pub fn new(data: &Path, database_url: Option<&str>) -> Self {
        Self {
            data: data.to_owned(),
            database_url: database_url
                .filter(|u| !u.trim().is_empty())
                .map(str::to_owned),
            store: Embedded::default(),
        }
    }

    /// The same, on the embedded store `store`.
    pub fn with_store(mut self, store: Embedded) -> Self {
        self.store = store;
        self
    }

    fn open(&self) -> anyhow::Result<Db> {
        let opened = match &self.database_url {
            Some(url) => Db::open_postgres(url, 2, true),
            None => Db::open_embedded(self.store, &self.data, true, DEFAULT_STORE_CACHE_MIB),
        };
        opened.map_err(|e| match &self.database_url {
            Some(_) => anyhow!("{e:#}"),
            None => anyhow!(
                "opening {}: {e:#} (is a host running on this data folder? stop it first)",
                self.store.folder(&self.data).display()
            ),
        })
    }

    fn components_dir(&self) -> PathBuf {
        self.data.join("components")
    }
}

/// Runs `commerce-host export`.
pub fn export_command(args: &ExportArgs) -> anyhow::Result<()> {
    let moved = if args.output == Path::new("-") {
        export(&args.storage, std::io::stdout().lock())?
    } else {
        let file = std::fs::File::create(&args.output)
            .with_context(|| format!("creating {}", args.output.display()))?;
        export(&args.storage, file)?
    };
    eprintln!(
        "exported {} records ({} components)",
        moved.records, moved.components
    );
    Ok(())
}

/// Runs `commerce-host import`.
pub fn import_command(args: &ImportArgs) -> anyhow::Result<()> {
    let moved = if args.input == Path::new("-") {
        import(&args.storage, std::io::stdin().lock())?
    } else {
        let file = std::fs::File::open(&args.input)
            .with_context(|| format!("opening {}", args.input.display()))?;
        import(&args.storage, std::io::BufReader::new(file))?
    };
    eprintln!(
        "imported {} records ({} components)",
        moved.records, moved.components
    );
    Ok(())
}

/// Writes every record of `storage` to `out` as a dump (see the module's documentation).
pub fn export(storage: &StorageArgs, out: impl Write) -> anyhow::Result<Moved> {
    let db = storage.open()?;
    let mut out = BufWriter::new(out);
    let header = json!({"format": FORMAT, "version": VERSION,
        "exported_at": jiff::Timestamp::now().to_string(), "host": env!("CARGO_PKG_VERSION")});
    writeln!(out, "{header}")?;
    let mut moved = Moved {
        records: 0,
        components: 0,
    };
    let mut kept_components = std::collections::BTreeSet::new();
    let mut after: Option<String> = None;
    loop {
        let batch = db.list_raw("", after.as_deref(), BATCH)?;
        for (key, bytes) in &batch {
            if LEFT_OUT.iter().any(|p| key.starts_with(p)) {
                continue;
            }
            let value: Value = serde_json::from_slice(bytes)
                .with_context(|| format!("the record {key} is not JSON"))?;
            if let Some(stem) = key.strip_prefix(COMPONENT_PREFIX) {
                kept_components.insert(stem.to_owned());
                moved.components += 1;
            }
            writeln!(out, "{}", json!({"key": key, "value": value}))?;
            moved.records += 1;
        }
        if batch.len() < BATCH {
            break;
        }
        after = batch.last().map(|(key, _)| key.clone());
    }
    // On an embedded store the components are files of the data folder (on PostgreSQL they were
    // records).
    for (name, version, path) in component_files(&storage.components_dir())? {
        if kept_components.contains(&format!("{name}/{version}")) {
            continue;
        }
        let wasm = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let value = base64::engine::general_purpose::STANDARD.encode(wasm);
        let key = format!("{COMPONENT_PREFIX}{name}/{version}");
        writeln!(out, "{}", json!({"key": key, "value": value}))?;
        moved.records += 1;
        moved.components += 1;
    }
    writeln!(out, "{}", json!({"end": true, "records": moved.records}))?;
    out.flush()?;
    Ok(moved)
}

/// The components (`{name}@{version}.wasm`) in `dir`, with their names and versions.
fn component_files(dir: &Path) -> anyhow::Result<Vec<(String, String, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut found = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".wasm"))
        else {
            continue;
        };
        if let Some((name, version)) = stem.split_once('@') {
            found.push((name.to_owned(), version.to_owned(), path.clone()));
        }
    }
    found.sort();
    Ok(found)
}

/// Loads the dump `input` into `storage`, which must be empty (see the module's documentation).
pub fn import(storage: &StorageArgs, input: impl BufRead) -> anyhow::Result<Moved> {
    let db = storage.open()?;
    ensure!(
        db.list_raw("", None, 1)?.is_empty(),
        "the target storage is not empty: import loads a dump into an empty one only \
         (a new data folder, or a new PostgreSQL database)"
    );
    let on_sled = !db.is_shared();
    let mut lines = input.lines().enumerate();
    let header: Value = match lines.next() {
        Some((_, line)) => serde_json::from_str(&line?)
            .map_err(|e| anyhow!("line 1: not a commerce-host export ({e})"))?,
        None => bail!("the dump is empty"),
    };
    ensure!(
        header["format"] == FORMAT,
        "line 1: not a commerce-host export (format {})",
        header["format"]
    );
    ensure!(
        header["version"] == VERSION,
        "line 1: a dump of version {} (this host reads version {VERSION})",
        header["version"]
    );
    let mut moved = Moved {
        records: 0,
        components: 0,
    };
    let mut batch: Vec<(String, Value)> = Vec::with_capacity(BATCH);
    let write = |batch: &mut Vec<(String, Value)>| -> anyhow::Result<()> {
        db.tx(|tx| {
            batch
                .iter()
                .try_for_each(|(key, value)| tx.write(key, value))
        })?;
        batch.clear();
        Ok(())
    };
    let mut ended = None;
    for (i, line) in lines {
        let number = i + 1;
        let line = line?;
        ensure!(
            ended.is_none(),
            "line {number}: records after the end of the dump"
        );
        let mut record: Value = serde_json::from_str(&line)
            .map_err(|e| anyhow!("line {number}: not a JSON record ({e})"))?;
        if record["end"] == true {
            ended = Some((number, record["records"].as_u64()));
            continue;
        }
        let (Some(key), Some(value)) = (
            record["key"].as_str().map(str::to_owned),
            record.get_mut("value").map(Value::take),
        ) else {
            bail!("line {number}: a record needs a `key` and a `value`");
        };
        if let Some(stem) = key.strip_prefix(COMPONENT_PREFIX) {
            moved.components += 1;
            if on_sled {
                write_component(&storage.components_dir(), stem, &value)
                    .with_context(|| format!("line {number}: the component {stem}"))?;
                moved.records += 1;
                continue;
            }
        }
        batch.push((key, value));
        moved.records += 1;
        if batch.len() == BATCH {
            write(&mut batch)?;
        }
    }
    write(&mut batch)?;
    db.flush()?;
    match ended {
        Some((_, Some(count))) if count == moved.records => Ok(moved),
        Some((number, count)) => bail!(
            "line {number}: the dump says {} records, it held {}; the storage now holds a \
             partial import: empty it before importing again",
            count.map_or("no count of".to_owned(), |c| c.to_string()),
            moved.records
        ),
        None => bail!(
            "the dump is cut off (no end line after {} records); the storage now holds a \
             partial import: empty it before importing again",
            moved.records
        ),
    }
}

/// Writes a component's bytes (base64 `value`) as `dir/{name}@{version}.wasm`; the host compiles
/// it on its first event.
fn write_component(dir: &Path, stem: &str, value: &Value) -> anyhow::Result<()> {
    let (name, version) = stem
        .split_once('/')
        .filter(|(n, v)| !n.is_empty() && !v.is_empty() && !v.contains('/'))
        .ok_or_else(|| anyhow!("`{stem}` is not `name/version`"))?;
    let encoded = value
        .as_str()
        .ok_or_else(|| anyhow!("its bytes are not a base64 string"))?;
    let wasm = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .context("its bytes are not base64")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{name}@{version}.wasm"));
    std::fs::write(&path, wasm).with_context(|| format!("writing {}", path.display()))
}
