//! `GET /metrics` as the tests and benches read it.

use std::collections::BTreeMap;

use commerce_host::metrics;
use reqwest::Method;

use crate::TestHost;

/// A scrape: each sample's name and labels, with its value.
pub struct Scrape {
    /// The text as served.
    pub text: String,
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    /// Parses the Prometheus text format (`name{labels} value` lines, comments left out).
    pub fn parse(text: String) -> Self {
        let mut samples = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("`series value`");
            let value: f64 = value.parse().expect("a number");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.strip_suffix('}').expect("closing brace")),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once("=\"").expect("label=\"value\"");
                    (k.to_owned(), v.trim_end_matches('"').to_owned())
                })
                .collect();
            samples.push((name.to_owned(), labels, value));
        }
        Self { text, samples }
    }

    /// The value of the sample `name` with exactly `labels`, if it was rendered.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let wanted: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.samples
            .iter()
            .find(|(n, l, _)| n == name && *l == wanted)
            .map(|(_, _, v)| *v)
    }

    /// Like [`Scrape::get`], 0 when the series was never recorded.
    pub fn count(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels).unwrap_or(0.0)
    }

    /// The embedded store's commit counters (`None` where they are not served: PostgreSQL).
    pub fn commit_stats(&self) -> Option<commerce_host::storage::CommitStats> {
        // Counters of whole numbers, rendered as such.
        let value = |name: &str| self.get(name, &[]).map(|v| v as u64);
        Some(commerce_host::storage::CommitStats {
            batches: value(metrics::STORAGE_COMMITS)?,
            transactions: value(metrics::STORAGE_TRANSACTIONS)?,
            writes: value(metrics::STORAGE_WRITES)?,
            applying: std::time::Duration::from_micros(value(metrics::STORAGE_APPLYING)?),
        })
    }
}

/// Scrapes `host`'s `/metrics` (a 200 in the Prometheus text format).
pub async fn scrape(host: &TestHost) -> Scrape {
    let response = host
        .request(Method::GET, "/metrics")
        .send()
        .await
        .expect("scraped");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    Scrape::parse(response.text().await.expect("body"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_counters_are_read_from_a_scrape_and_none_without_them() {
        let text = "# TYPE commerce_host_storage_commits_total counter\n\
                    commerce_host_storage_commits_total 12\n\
                    commerce_host_storage_committed_transactions_total 30\n\
                    commerce_host_storage_committed_writes_total 95\n\
                    commerce_host_storage_commit_apply_microseconds_total 1500\n\
                    commerce_host_hosts_live 1\n";
        let stats = Scrape::parse(text.to_owned()).commit_stats();
        assert_eq!(
            stats,
            Some(commerce_host::storage::CommitStats {
                batches: 12,
                transactions: 30,
                writes: 95,
                applying: std::time::Duration::from_micros(1_500),
            })
        );
        let without = Scrape::parse("commerce_host_hosts_live 2\n".to_owned());
        assert_eq!(without.commit_stats(), None);
    }
}
