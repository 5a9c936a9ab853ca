//! Per-invocation limits of components: the operator's policy (the defaults, and the most a
//! manifest may ask for) and what one manifest's `limits` resolve to.
//!
//! A manifest's `limits` are checked against the policy when it is published (whether or not a
//! component is uploaded with it through the runtime) and resolved again before each invocation;
//! the runtime only translates the resolved [`Limits`] into wasmtime's fuel, epoch deadline,
//! memory limiter and meters.

use std::time::Duration;

use super::Service;
use crate::model::error::{Error, Result};
use crate::model::plugin::{Manifest, ManifestLimits};

/// The field of a manifest's limits in the publish body.
const FIELD: &str = "manifest.limits";

/// Limits of one invocation (one event delivered to one fresh instance).
///
/// The stack limit is not here: `Config::max_wasm_stack` is engine-wide, so it is the
/// operator maximum for every plugin (see `RuntimeConfig::max_wasm_stack`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Wasm fuel (roughly one unit per wasm operator): the CPU budget.
    pub fuel: u64,
    /// Wall-clock bound, enforced through epoch interruption (host calls included).
    pub wall_clock: Duration,
    /// Bytes of linear memory of the whole instance, all its memories together (the guest's
    /// heap, stack and data).
    pub memory_bytes: usize,
    /// Host calls (store capabilities, notifications, settings, log) per invocation.
    pub host_calls: u32,
    /// Bytes of log messages per invocation.
    pub log_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            fuel: 1_000_000_000,
            wall_clock: Duration::from_secs(10),
            memory_bytes: 32 << 20,
            host_calls: 1_000,
            log_bytes: 64 << 10,
        }
    }
}

/// The operator's bounds on what a manifest may ask for, and the defaults.
#[derive(Debug, Clone)]
pub struct LimitPolicy {
    /// Limits of a plugin whose manifest asks for none.
    pub defaults: Limits,
    /// The most any manifest may ask for.
    pub maxima: Limits,
}

impl Default for LimitPolicy {
    fn default() -> Self {
        Self {
            defaults: Limits::default(),
            maxima: Limits {
                fuel: 10_000_000_000,
                wall_clock: Duration::from_secs(10),
                memory_bytes: 64 << 20,
                host_calls: 10_000,
                log_bytes: 1 << 20,
            },
        }
    }
}

impl LimitPolicy {
    /// The limits of a plugin: its manifest's, where given, within the maxima. A value beyond
    /// its maximum (or a zero memory, fuel or timeout) is refused on `{field}.<name>`.
    pub fn resolve(&self, asked: Option<&ManifestLimits>, field: &str) -> Result<Limits> {
        let mut limits = self.defaults.clone();
        let Some(asked) = asked else {
            return Ok(limits);
        };
        let too_much = |name: &str, max: String| {
            Error::invalid(
                format!("{field}.{name}"),
                format!("at most {max} on this host"),
            )
        };
        if let Some(mib) = asked.memory_mib {
            let bytes = usize::try_from(mib)
                .unwrap_or(usize::MAX)
                .saturating_mul(1 << 20);
            if bytes > self.maxima.memory_bytes || mib == 0 {
                return Err(too_much(
                    "memory_mib",
                    format!("{} (and at least 1)", self.maxima.memory_bytes >> 20),
                ));
            }
            limits.memory_bytes = bytes;
        }
        if let Some(fuel) = asked.fuel {
            if fuel > self.maxima.fuel || fuel == 0 {
                return Err(too_much("fuel", self.maxima.fuel.to_string()));
            }
            limits.fuel = fuel;
        }
        if let Some(ms) = asked.timeout_ms {
            let wall = Duration::from_millis(u64::from(ms));
            if wall > self.maxima.wall_clock || ms == 0 {
                return Err(too_much(
                    "timeout_ms",
                    self.maxima.wall_clock.as_millis().to_string(),
                ));
            }
            limits.wall_clock = wall;
        }
        if let Some(calls) = asked.host_calls {
            if calls > self.maxima.host_calls {
                return Err(too_much("host_calls", self.maxima.host_calls.to_string()));
            }
            limits.host_calls = calls;
        }
        if let Some(bytes) = asked.log_bytes {
            let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
            if bytes > self.maxima.log_bytes {
                return Err(too_much("log_bytes", self.maxima.log_bytes.to_string()));
            }
            limits.log_bytes = bytes;
        }
        Ok(limits)
    }
}

impl Service {
    /// The per-invocation limits of `manifest`'s component under this host's policy; refused on
    /// `manifest.limits.<name>` when it asks for more than the operator allows (also after the
    /// operator lowered a maximum below what a published plugin asks for).
    pub fn component_limits(&self, manifest: &Manifest) -> Result<Limits> {
        self.limit_policy.resolve(manifest.limits.as_ref(), FIELD)
    }

    /// Checks a manifest's `limits` at publish: they apply only to a component, and must be
    /// within the operator's maxima.
    pub(crate) fn check_manifest_limits(
        &self,
        manifest: &Manifest,
        has_component: bool,
    ) -> Result<()> {
        if manifest.limits.is_some() && !has_component {
            return Err(Error::invalid(
                FIELD,
                "limits bound a component's invocations, and this plugin publishes no component \
                 (an external plugin runs on its own servers): remove `limits`, or publish a component",
            ));
        }
        self.component_limits(manifest).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_gets_what_it_asks_for_within_the_maxima_and_the_defaults_otherwise() {
        let policy = LimitPolicy::default();
        assert_eq!(
            policy.resolve(None, FIELD).expect("defaults"),
            Limits::default()
        );
        let asked = ManifestLimits {
            memory_mib: Some(48),
            timeout_ms: Some(2_000),
            ..ManifestLimits::default()
        };
        let limits = policy.resolve(Some(&asked), FIELD).expect("within");
        assert_eq!(limits.memory_bytes, 48 << 20);
        assert_eq!(limits.wall_clock, Duration::from_secs(2));
        assert_eq!(limits.fuel, Limits::default().fuel);
        for (asked, field) in [
            (
                ManifestLimits {
                    memory_mib: Some(4096),
                    ..ManifestLimits::default()
                },
                "manifest.limits.memory_mib",
            ),
            (
                ManifestLimits {
                    fuel: Some(0),
                    ..ManifestLimits::default()
                },
                "manifest.limits.fuel",
            ),
            (
                ManifestLimits {
                    log_bytes: Some(u32::MAX),
                    ..ManifestLimits::default()
                },
                "manifest.limits.log_bytes",
            ),
        ] {
            let err = policy.resolve(Some(&asked), FIELD).expect_err("too much");
            assert_eq!(err.field(), Some(field));
        }
    }
}
