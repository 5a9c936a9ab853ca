//! Bench figures as files: each bench writes its numbers to `target/bench/<bench>.json`, a flat
//! JSON object of named numbers, so that runs can be compared by a script as well as read.

use std::collections::BTreeMap;
use std::path::PathBuf;

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
