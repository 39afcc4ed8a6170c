//! The audit log: one JSON line per tool call, appended.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::Serialize;

/// The `_meta` key under which a client sends an idempotency key for a
/// side-effecting call; it is recorded with the call.
pub const IDEMPOTENCY_META_KEY: &str = "io.skillbox/idempotencyKey";

/// One tool call, as recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// RFC 3339, UTC.
    pub time: String,
    /// The MCP client's name and version, when it said them.
    pub client: Option<String>,
    pub tool: String,
    pub skill: Option<String>,
    pub source: Option<String>,
    pub component: Option<String>,
    pub component_digest: Option<String>,
    /// An installed skill's locked resolution (`oci://…@sha256:…`,
    /// `git+…@COMMIT`) and signer (`minisign:KEYID`, or `unsigned`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skill_resolved: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skill_signer: Option<String>,
    pub grants: Option<String>,
    pub argument_bytes: usize,
    /// Code run with `run_code`: its SHA-256 (`sha256:<hex>`) and size.
    /// Like a call's arguments, the code itself is not kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code_bytes: Option<usize>,
    /// `ok`; `nonzero_exit` for a script that ran and exited with a code
    /// other than 0 (an uncaught exception is 1); or the error's code
    /// (`timeout`, `invalid_arguments`, …).
    pub outcome: String,
    /// A script's exit code (absent for a tool, and for a script the
    /// sandbox stopped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
    pub fuel: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// The W3C trace the call arrived in, and the caller's span in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_span_id: Option<String>,
    /// Outgoing HTTP requests: host, port, method, status, bytes, outcome.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub network: Vec<crate::sandbox::NetRequest>,
    /// Programs the guest asked the host to start: the path that ran (or
    /// the name refused), its arguments, outcome and exit code.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<crate::sandbox::ProgramRun>,
    /// For a write-granted call: whether its workspace changes were
    /// committed, discarded, conflicted or kept in a dry run, and how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceRecord>,
}

/// What became of a write-granted call's workspace changes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkspaceRecord {
    /// `committed`, `discarded`, `conflicted`, `dry-run` or `declined`.
    pub outcome: &'static str,
    pub files: usize,
    pub bytes: u64,
}

impl WorkspaceRecord {
    pub fn new(outcome: &'static str, changes: &crate::sandbox::stage::ChangeSet) -> Self {
        WorkspaceRecord {
            outcome,
            files: changes.files(),
            bytes: changes.bytes(),
        }
    }

    /// Refused at the commit: someone else changed a file the call used.
    pub fn conflicted() -> Self {
        WorkspaceRecord {
            outcome: "conflicted",
            ..Self::discarded()
        }
    }

    /// Dropped before anyone counted them.
    pub fn discarded() -> Self {
        WorkspaceRecord {
            outcome: "discarded",
            files: 0,
            bytes: 0,
        }
    }
}

pub(crate) struct AuditLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl AuditLog {
    pub(crate) fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        use std::os::unix::fs::OpenOptionsExt;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// `$SKILLBOX_STATE_DIR`, `$XDG_STATE_HOME/skillbox`, or
    /// `~/.local/state/skillbox`, then `audit.jsonl`.
    pub(crate) fn default_path() -> Option<PathBuf> {
        let dir = crate::dirs::state_dir()?;
        Some(dir.join("audit.jsonl"))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a record. Each record is written with one `write_all` under
    /// the lock, so concurrent calls never interleave lines. A failed write
    /// is logged, not fatal: the call already happened.
    pub(crate) fn append(&self, record: &Record) {
        let Ok(mut line) = serde_json::to_vec(record) else {
            return;
        };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(&line) {
            tracing::warn!("cannot append to the audit log: {e}");
        }
    }
}

impl AuditLog {
    /// Syncs the appended lines to disk (each is already written whole;
    /// this makes them survive a power loss too). For the HTTP drain.
    pub(crate) fn sync(&self) {
        let file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match file.sync_data() {
            // A pipe or terminal (`--audit /dev/stdout`) has nothing to sync.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {}
            Err(e) => tracing::warn!("cannot sync the audit log: {e}"),
            Ok(()) => {}
        }
    }
}

/// Now, as RFC 3339 UTC with milliseconds.
pub(crate) fn now_rfc3339() -> String {
    chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_time_is_rfc3339_utc_with_milliseconds() {
        let now = super::now_rfc3339();
        assert!(chrono::DateTime::parse_from_rfc3339(&now).is_ok(), "{now}");
        assert!(
            now.ends_with('Z') && now.len() == "2026-11-30T20:33:00.123Z".len(),
            "{now}"
        );
    }
}
