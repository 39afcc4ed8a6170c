//! Limits: the ceilings a manifest's requests are clamped to, the user's
//! overrides, and the limits of one call.

use std::time::Duration;

use crate::sandbox::{Limits, MIB};
use crate::skill::manifest::ManifestLimits;
use crate::skill::model::Skill;

/// The largest limits a skill's manifest may request. Requests above are
/// clamped to these; only the user raises them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[deny(missing_docs)]
pub struct Ceilings {
    /// The longest wall-clock limit.
    pub timeout: Duration,
    /// The largest CPU budget, in fuel units (about one per instruction).
    pub fuel: u64,
    /// The largest memory cap, in bytes.
    pub memory_bytes: usize,
    /// The largest output cap (stdout, stderr and the result, each), in bytes.
    pub output_bytes: usize,
}

pub(super) const DEFAULT_CEILING_TIMEOUT: Duration = Duration::from_secs(60);
/// About a minute of work at the rate a tool spends fuel.
pub(super) const DEFAULT_CEILING_FUEL: u64 = 60_000_000_000;
pub(super) const DEFAULT_CEILING_MEMORY_BYTES: usize = 256 * MIB;
pub(super) const DEFAULT_CEILING_OUTPUT_BYTES: usize = 8 * MIB;

impl Ceilings {
    /// No ceiling: for what the user gives, which is never clamped.
    fn unbounded() -> Self {
        Ceilings {
            timeout: Duration::MAX,
            fuel: u64::MAX,
            memory_bytes: usize::MAX,
            output_bytes: usize::MAX,
        }
    }
}

impl Default for Ceilings {
    fn default() -> Self {
        Ceilings {
            timeout: DEFAULT_CEILING_TIMEOUT,
            fuel: DEFAULT_CEILING_FUEL,
            memory_bytes: DEFAULT_CEILING_MEMORY_BYTES,
            output_bytes: DEFAULT_CEILING_OUTPUT_BYTES,
        }
    }
}

/// Limits the user set explicitly; they override the skill's own and are
/// not clamped (they are the user's word).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
#[deny(missing_docs)]
pub struct LimitOverrides {
    /// Wall-clock limit.
    pub timeout: Option<Duration>,
    /// CPU budget, in fuel units.
    pub fuel: Option<u64>,
    /// Memory cap, in bytes.
    pub memory_bytes: Option<usize>,
    /// Cap on stdout, stderr and the result, each, in bytes.
    pub output_bytes: Option<usize>,
    /// Bytes a call may write into its `/tmp`.
    pub scratch_bytes: Option<u64>,
    /// Files, folders and links a call may create in its `/tmp`.
    pub scratch_entries: Option<u64>,
    /// Bytes a call may write into a writable workspace.
    pub workspace_bytes: Option<u64>,
    /// Files, folders and links a call may create in a writable workspace.
    pub workspace_entries: Option<u64>,
    /// Outgoing HTTP requests one call may send.
    pub net_requests: Option<u32>,
    /// Response bytes one call may receive over HTTP.
    pub net_response_bytes: Option<u64>,
}

/// Limits for a call: `defaults` (its class's, [`Limits::for_class`], or
/// what its runtime needs), then the skill's manifest clamped to the
/// user's ceilings, then what the user granted the skill (not clamped),
/// then the user's overrides. Returns a note for every request that was
/// clamped. A component file the user named has no skill, and no manifest
/// to ask with.
pub fn limits(
    skill: Option<&Skill>,
    defaults: Limits,
    ceilings: &Ceilings,
    granted: Option<&ManifestLimits>,
    overrides: &LimitOverrides,
) -> (Limits, Vec<String>) {
    let mut limits = defaults;
    let mut notes = Vec::new();
    if let Some(skill) = skill
        && let Some(m) = skill.manifest.as_ref().map(|m| &m.limits)
    {
        // A limit the user granted replaces the manifest's, so its clamp
        // is no news.
        let asked = granted.map_or_else(|| m.clone(), |g| m.without(g));
        notes = apply_requests(&mut limits, &asked, ceilings)
            .into_iter()
            .map(|c| format!("skill `{}` {c}", skill.name()))
            .collect();
    }
    if let Some(granted) = granted {
        apply_requests(&mut limits, granted, &Ceilings::unbounded());
    }
    overrides.apply(&mut limits);
    (limits, notes)
}

/// Applies a manifest's limit requests, clamped; returns what was clamped.
pub fn apply_requests(limits: &mut Limits, m: &ManifestLimits, ceilings: &Ceilings) -> Vec<String> {
    let mut clamped = Vec::new();
    let mut clamp = |name: &str, asked: u128, ceiling: u128, unit: &str| -> u128 {
        if asked > ceiling {
            clamped.push(format!(
                "asks for {name} {asked}{unit}; clamped to the ceiling {ceiling}{unit} (the user can raise it with --ceiling-{name})"
            ));
            ceiling
        } else {
            asked
        }
    };
    if let Some(ms) = m.timeout_ms {
        let ms = clamp("timeout-ms", ms.into(), ceilings.timeout.as_millis(), " ms");
        limits.timeout = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    }
    if let Some(fuel) = m.fuel {
        limits.fuel = clamp("fuel", fuel.into(), ceilings.fuel.into(), "") as u64;
    }
    if let Some(mib) = m.memory_mib {
        let ceiling_mib = (ceilings.memory_bytes / MIB) as u128;
        let mib = clamp("memory-mib", mib.into(), ceiling_mib, " MiB");
        limits.memory_bytes = usize::try_from(mib)
            .ok()
            .and_then(|m| m.checked_mul(MIB))
            .unwrap_or(ceilings.memory_bytes);
    }
    if let Some(bytes) = m.output_bytes {
        let bytes = clamp(
            "output-bytes",
            bytes as u128,
            ceilings.output_bytes as u128,
            " bytes",
        );
        limits.output_bytes = usize::try_from(bytes).unwrap_or(ceilings.output_bytes);
        limits.result_bytes = limits.output_bytes;
    }
    clamped
}

impl LimitOverrides {
    pub fn apply(&self, limits: &mut Limits) {
        if let Some(t) = self.timeout {
            limits.timeout = t;
        }
        if let Some(f) = self.fuel {
            limits.fuel = f;
        }
        if let Some(m) = self.memory_bytes {
            limits.memory_bytes = m;
        }
        if let Some(o) = self.output_bytes {
            limits.output_bytes = o;
            limits.result_bytes = o;
        }
        if let Some(b) = self.scratch_bytes {
            limits.scratch_bytes = b;
        }
        if let Some(e) = self.scratch_entries {
            limits.scratch_entries = e;
        }
        if let Some(b) = self.workspace_bytes {
            limits.workspace_bytes = b;
        }
        if let Some(e) = self.workspace_entries {
            limits.workspace_entries = e;
        }
        if let Some(n) = self.net_requests {
            limits.net_requests = n;
        }
        if let Some(b) = self.net_response_bytes {
            limits.net_response_bytes = b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_above_ceilings_are_clamped_and_reported() {
        let mut limits = Limits::default();
        let asked = ManifestLimits {
            timeout_ms: Some(3_600_000),
            fuel: Some(u64::MAX),
            memory_mib: Some(17_592_186_044_416),
            output_bytes: Some(100_000_000_000),
        };
        let ceilings = Ceilings::default();
        let notes = apply_requests(&mut limits, &asked, &ceilings);
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert_eq!(limits.timeout, ceilings.timeout);
        assert_eq!(limits.fuel, ceilings.fuel);
        assert_eq!(limits.memory_bytes, ceilings.memory_bytes);
        assert_eq!(limits.output_bytes, ceilings.output_bytes);
        assert!(notes[0].contains("--ceiling-timeout-ms"), "{}", notes[0]);
    }
}
