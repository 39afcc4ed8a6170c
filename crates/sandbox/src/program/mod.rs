//! Programs a guest asks the host to start, and the door it asks through.
//!
//! WebAssembly has no processes, so the Python runtimes' `subprocess`
//! (`runtimes/python/skillbox_process.py`) asks the host. It asks through
//! the one channel both runtimes share, the file system: a folder of the
//! host's mounted at `/run/skillbox` (the door). The guest writes
//! `N.request` (JSON: argv, working folder, environment, stdin) and opens
//! `N.reply`; the guard (`fsguard/door.rs`) sees that open and, before it
//! lets it through, has the request answered here and the reply written.
//! Python children never come here: the runtime runs them itself, in the
//! same interpreter, so they share every limit of the call.
//!
//! What a child may be is the host's decision, not the guest's: a program
//! the user granted the skill by name ([`HostProgram`]), which runs in the
//! OS sandbox (`jail.rs`) with the call's workspace, scratch folder and
//! limits, its writes staged like the guest's own; anything else is
//! refused with words that say how a user could grant it. Every request
//! is recorded ([`ProgramRun`]) for the audit.
//!
//! The same door carries the HTTP a script's libraries write
//! (`runtimes/python/skillbox_http.py`): such a request names no program
//! but a host, and is sent by the call's egress (`egress/relay.rs`) under
//! the call's network grants, as a `wasi:http` request would be.

mod cgroup;
mod jail;

use std::path::{Path, PathBuf};
use std::time::Instant;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};

use crate::egress::{Relay, RelayError, RelayedRequest};
use crate::grants::{DOOR_MOUNT, Grants, HostProgram, SCRATCH_MOUNT, SKILL_MOUNT, WORKSPACE_MOUNT};
use crate::mount::{QuotaExceeded, QuotaKind};
use crate::stage::{Stage, TakeInError};
use jail::{Jail, JailError, WorkspaceView};

/// The largest request read: arguments, environment and stdin together.
const MAX_REQUEST_BYTES: u64 = 64 * 1024 * 1024;
/// Requests refused or unreadable that one call's audit record lists;
/// past them, the last such entry counts the rest, so a script that keeps
/// asking cannot grow the record. A program that ran is always listed (a
/// run costs a sandboxed process, so time bounds them), so a flood of
/// refusals cannot push a real run out of the record.
const AUDIT_REFUSALS: usize = 256;
/// Arguments kept in the audit record, and the length of each.
const AUDIT_ARGS: usize = 32;
const AUDIT_ARG_CHARS: usize = 256;

/// What stops the call that asked for a program.
#[derive(Debug)]
pub(crate) enum DoorFailure {
    Quota(QuotaExceeded),
    Host(String),
}

/// One program a call asked for, for the audit record.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ProgramRun {
    /// The absolute path that ran, or the name asked for when refused.
    pub program: String,
    pub args: Vec<String>,
    /// `ok` (it ran; see `exit_code`), `refused`, `timeout`, `conflict`
    /// (its changes met another's), `error`, or `invalid` (a request the
    /// door could not read; its program is `?`).
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// Refused or unreadable requests after this one that were not
    /// recorded, past the record's bound.
    #[serde(skip_serializing_if = "is_zero")]
    pub unrecorded_after: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What the guest sends: a program to run, or (`http`) a request its
/// HTTP libraries wrote.
#[derive(Deserialize)]
struct Request {
    #[serde(default)]
    argv: Vec<String>,
    #[serde(default)]
    http: Option<HttpAsk>,
    #[serde(default)]
    cwd: Option<String>,
    /// The child's whole environment, when the guest gave one. Variables
    /// that load code into the program (`LD_PRELOAD`, `LD_LIBRARY_PATH`,
    /// every `LD_*`) are dropped: a grant is for the program, not for a
    /// library the script wrote.
    #[serde(default)]
    env: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    stdin: String,
    /// Seconds the script waits for the program (`subprocess`'s
    /// `timeout=`); it is killed then. Never past the call's own end.
    #[serde(default)]
    timeout: Option<f64>,
}

/// An HTTP request a script's library wrote on the socket the door gave
/// it (`runtimes/python/skillbox_http.py`), sent by the call's egress.
#[derive(Deserialize)]
struct HttpAsk {
    /// `http` or `https`: what the library connected with. TLS is the
    /// host's; the guest has none.
    scheme: String,
    host: String,
    port: u16,
    /// The bytes the library wrote, base64.
    request: String,
    /// The library's own timeout in seconds, if it set one.
    #[serde(default)]
    timeout: Option<f64>,
}

/// What the guest gets back: how the program ended, or why it did not run.
#[derive(Serialize, Default)]
struct Reply {
    #[serde(skip_serializing_if = "Option::is_none")]
    returncode: Option<i32>,
    stdout: String,
    stderr: String,
    truncated: bool,
    /// Whether the program was killed at the script's own `timeout`.
    timed_out: bool,
    /// Why nothing ran, in words for the script's author.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// `refused` (not granted), `unavailable` (no OS sandbox here),
    /// `invalid` (a malformed request) or `failed`.
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    /// Changes to the workspace that were not taken in.
    refusals: Vec<String>,
}

impl Reply {
    fn error(kind: &'static str, why: String) -> Reply {
        Reply {
            error: Some(why),
            kind: Some(kind),
            ..Reply::default()
        }
    }
}

/// Everything a program the call starts runs with, taken from the call's
/// grants and limits when its store is made.
pub(crate) struct DoorSetting {
    pub programs: Vec<HostProgram>,
    pub skill_name: Option<String>,
    pub skill_dir: Option<PathBuf>,
    pub scratch: PathBuf,
    pub workspace: Option<(PathBuf, bool)>,
    pub env: Vec<(String, String)>,
    pub deadline: Instant,
    pub pipe_bytes: usize,
    pub file_bytes: u64,
    /// The call's egress, for HTTP its libraries send.
    pub relay: Option<Relay>,
}

impl DoorSetting {
    pub(crate) fn new(grants: &Grants, scratch: &Path, deadline: Instant) -> Self {
        DoorSetting {
            programs: grants.programs.clone().unwrap_or_default(),
            skill_name: grants.skill_name.clone(),
            skill_dir: grants
                .skill_dir
                .as_ref()
                .map(|d| d.opened_at().to_path_buf()),
            scratch: scratch.to_path_buf(),
            workspace: grants
                .workspace
                .as_ref()
                .map(|ws| (ws.host_dir.clone(), ws.writable)),
            env: grants.env.clone(),
            deadline,
            pipe_bytes: 0,
            file_bytes: 0,
            relay: None,
        }
    }
}

/// The door of one call: its folder, and what it was asked.
pub(crate) struct Door {
    folder: tempfile::TempDir,
    dir: Dir,
    setting: DoorSetting,
    runs: Vec<ProgramRun>,
    refusals_recorded: usize,
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("runs", &self.runs)
            .finish_non_exhaustive()
    }
}

impl Door {
    /// Makes the call's door, with `programs.json` in it when any program
    /// is granted: their names and paths, for the guest's `shutil.which`
    /// (no file means none, and saves a write on every Python call).
    pub(crate) fn open(setting: DoorSetting) -> std::io::Result<Door> {
        let folder = tempfile::Builder::new()
            .prefix("skillbox-door-")
            .tempdir()?;
        let dir = Dir::open_ambient_dir(folder.path(), cap_std::ambient_authority())?;
        let listing: std::collections::BTreeMap<&str, String> = setting
            .programs
            .iter()
            .map(|p| (p.name.as_str(), p.path.to_string_lossy().into_owned()))
            .collect();
        if !listing.is_empty() {
            let about = serde_json::json!({ "programs": listing });
            dir.write("programs.json", about.to_string())?;
        }
        Ok(Door {
            folder,
            dir,
            setting,
            runs: Vec::new(),
            refusals_recorded: 0,
        })
    }

    /// The folder preopened at [`DOOR_MOUNT`].
    pub(crate) fn path(&self) -> &Path {
        self.folder.path()
    }

    pub(crate) fn runs(&self) -> &[ProgramRun] {
        &self.runs
    }

    /// Answers request `number` (the guest wrote `number.request` and is
    /// opening `number.reply`): runs what it asks for, if granted, and
    /// writes the reply. Only what stops the call is an error (a quota the
    /// program's changes overran, changes that could not be staged);
    /// everything else is an answer.
    pub(crate) async fn answer(
        &mut self,
        number: &str,
        stage: Option<&mut Stage>,
        spend: &mut (dyn FnMut(QuotaKind, u64) -> Result<(), QuotaExceeded> + Send),
    ) -> Result<(), DoorFailure> {
        let json = |reply: &Reply| serde_json::to_vec(reply).unwrap_or_default();
        let text = match self.read_request(number) {
            // A response is written as it came (it starts `HTTP/`, which no
            // JSON reply does), for the library to read as off a socket.
            Ok(Request {
                http: Some(ask), ..
            }) => match self.relay(ask).await {
                Ok(response) => response,
                Err(reply) => json(&reply),
            },
            Ok(request) => json(&self.run(request, stage, spend).await?),
            Err(why) => {
                self.record("?", &[], "invalid", None, 0);
                json(&Reply::error("invalid", why))
            }
        };
        // The guest's open of the reply then fails, and says so.
        let _ = self.dir.write(format!("{number}.reply"), text);
        let _ = self.dir.remove_file(format!("{number}.request"));
        Ok(())
    }

    fn read_request(&self, number: &str) -> Result<Request, String> {
        use std::io::Read;
        let file = self
            .dir
            .open(format!("{number}.request"))
            .map_err(|_| format!("no request {number} was written to {DOOR_MOUNT}"))?;
        let mut bytes = Vec::new();
        file.take(MAX_REQUEST_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("the request could not be read: {}", crate::io_reason(&e)))?;
        if bytes.len() as u64 > MAX_REQUEST_BYTES {
            return Err("the request is larger than 64 MiB (its input, most likely)".into());
        }
        let request: Request = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the request is not valid JSON for the door: {e}"))?;
        if request.http.is_none() && request.argv.first().is_none_or(String::is_empty) {
            return Err("the request names no program".into());
        }
        Ok(request)
    }

    /// Sends an HTTP request through the call's egress: the response's
    /// bytes, or the reply that says why there are none.
    async fn relay(&self, ask: HttpAsk) -> Result<Vec<u8>, Reply> {
        let Some(relay) = &self.setting.relay else {
            return Err(Reply::error(
                "refused",
                "this call has no network: code run without a skill reaches no host".into(),
            ));
        };
        let raw = BASE64.decode(ask.request.as_bytes()).map_err(|_| {
            relay.note_invalid(&ask.host, ask.port, b"");
            Reply::error("invalid", "the HTTP request is not base64".into())
        })?;
        let tls = match ask.scheme.as_str() {
            "http" => false,
            "https" => true,
            other => {
                relay.note_invalid(&ask.host, ask.port, &raw);
                return Err(Reply::error(
                    "invalid",
                    format!("`{other}` is not a scheme the host sends (http or https)"),
                ));
            }
        };
        let asked = RelayedRequest {
            tls,
            host: &ask.host,
            port: ask.port,
            raw: &raw,
            timeout: ask.timeout,
        };
        relay.send(asked).await.map_err(|e| match e {
            RelayError::Refused(why) => Reply::error("refused", why),
            RelayError::Invalid(why) => Reply::error("invalid", why),
            RelayError::Failed(why) => Reply::error("failed", why),
            RelayError::TimedOut(why) => Reply::error("timeout", why),
        })
    }

    async fn run(
        &mut self,
        request: Request,
        stage: Option<&mut Stage>,
        spend: &mut (dyn FnMut(QuotaKind, u64) -> Result<(), QuotaExceeded> + Send),
    ) -> Result<Reply, DoorFailure> {
        let asked = request.argv[0].clone();
        let args: Vec<String> = request.argv[1..].to_vec();
        let name = asked.rsplit('/').next().unwrap_or(&asked).to_string();
        let granted = self
            .setting
            .programs
            .iter()
            .find(|p| p.name == name && (!asked.contains('/') || Path::new(&asked) == p.path))
            .cloned();
        let Some(program) = granted else {
            self.record(&asked, &args, "refused", None, 0);
            return Ok(Reply::error("refused", self.not_granted(&name)));
        };
        let stdin = match BASE64.decode(request.stdin.as_bytes()) {
            Ok(bytes) => bytes,
            Err(_) => {
                self.record(&asked, &args, "invalid", None, 0);
                return Ok(Reply::error("invalid", "stdin is not base64".into()));
            }
        };
        let env: Vec<(String, String)> = match &request.env {
            Some(env) => env
                .iter()
                .filter(|(k, _)| !k.is_empty() && !k.contains('=') && !k.starts_with("LD_"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            None => self.setting.env.clone(),
        };
        let cwd = guest_cwd(request.cwd.as_deref(), self.setting.workspace.is_some());
        let mut stage = stage;
        let workspace = match (&self.setting.workspace, stage.as_deref_mut()) {
            (None, _) => None,
            (Some((dir, true)), Some(stage)) => match staged_view(stage, dir) {
                Ok(view) => Some(view),
                Err(e) => {
                    return Ok(Reply::error(
                        "failed",
                        format!(
                            "the workspace could not be staged for the program: {}",
                            crate::io_reason(&e)
                        ),
                    ));
                }
            },
            (Some((dir, _)), _) => Some(WorkspaceView::ReadOnly(dir.clone())),
        };
        let upper = match &workspace {
            Some(WorkspaceView::Staged { upper, .. }) => Some(upper.clone()),
            _ => None,
        };
        let own_deadline = request
            .timeout
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(|t| Instant::now() + std::time::Duration::from_secs_f64(t.min(1e6)))
            .filter(|own| *own < self.setting.deadline);
        let jail = Jail {
            program: &program.path,
            args: &args,
            cwd: &cwd,
            env: &env,
            stdin,
            skill_dir: self.setting.skill_dir.as_deref(),
            scratch: &self.setting.scratch,
            workspace,
            deadline: own_deadline.unwrap_or(self.setting.deadline),
            pipe_bytes: self.setting.pipe_bytes,
            file_bytes: self.setting.file_bytes,
        };
        let shown = program.path.to_string_lossy().into_owned();
        let started = std::time::SystemTime::now();
        let finished = match jail.run().await {
            Ok(finished) => finished,
            Err(e) => {
                let kind = match e {
                    JailError::NoBubblewrap | JailError::Unavailable(_) => "unavailable",
                    JailError::Spawn(_) => "failed",
                };
                self.record(&shown, &args, "error", None, 0);
                return Ok(Reply::error(kind, e.to_string()));
            }
        };
        let millis = finished.duration.as_millis() as u64;
        if finished.timed_out && own_deadline.is_some() {
            // The script's own timeout: it hears of it as subprocess does
            // (TimeoutExpired), with what was printed so far; what the
            // program wrote is not taken in.
            self.record(&shown, &args, "timeout", None, millis);
            return Ok(Reply {
                stdout: BASE64.encode(&finished.stdout),
                stderr: BASE64.encode(&finished.stderr),
                timed_out: true,
                ..Reply::default()
            });
        }
        if finished.timed_out {
            self.record(&shown, &args, "timeout", None, millis);
            return Ok(Reply::error(
                "failed",
                format!("`{name}` was still running when the call's time ran out; it was killed"),
            ));
        }
        let mut refusals = Vec::new();
        if let (Some(upper), Some(stage)) = (upper, stage) {
            let root = self
                .setting
                .workspace
                .as_ref()
                .and_then(|(dir, _)| std::fs::canonicalize(dir).ok());
            let taken = stage.take_in(&upper, root.as_deref(), started, spend);
            if let Some(folder) = upper.parent() {
                let _ = std::fs::remove_dir_all(folder);
            }
            match taken {
                Ok(left_out) => refusals = left_out,
                Err(TakeInError::Changed(path)) => {
                    self.record(&shown, &args, "conflict", Some(finished.returncode), millis);
                    return Ok(Reply::error(
                        "failed",
                        format!(
                            "`{name}` ran, but `{path}`, which it changed, was changed in the \
                             workspace by someone else meanwhile; none of its changes were \
                             kept. Run it again on the workspace as it is now"
                        ),
                    ));
                }
                Err(TakeInError::Quota(over)) => return Err(DoorFailure::Quota(over)),
                // Some of its changes may be staged already: the call stops,
                // and its stage is discarded with it.
                Err(TakeInError::Io(e)) => {
                    self.record(&shown, &args, "error", Some(finished.returncode), millis);
                    return Err(DoorFailure::Host(format!(
                        "`{name}` ran, but its changes to the workspace could not be staged \
                         ({}); the call was stopped and nothing was written. Check that the \
                         state folder (SKILLBOX_STATE_DIR or XDG_STATE_HOME) has room",
                        crate::io_reason(&e)
                    )));
                }
            }
        }
        self.record(&shown, &args, "ok", Some(finished.returncode), millis);
        Ok(Reply {
            returncode: Some(finished.returncode),
            stdout: BASE64.encode(&finished.stdout),
            stderr: BASE64.encode(&finished.stderr),
            truncated: finished.truncated,
            refusals,
            ..Reply::default()
        })
    }

    fn not_granted(&self, name: &str) -> String {
        let Some(skill) = &self.setting.skill_name else {
            return format!(
                "`{name}` is a program, and code run without a skill may not start programs. \
                 Run it as the code of a skill the user granted `{name}` (give run_code its \
                 `skill`), or do the step in Python"
            );
        };
        let shell = matches!(name, "sh" | "bash" | "dash" | "zsh");
        format!(
            "`{name}` is a program of the host's, and skill `{skill}` may not start it: \
             nothing is granted by default. The user can grant it with `skillbox grant \
             {skill} --program {name}` (or `--allow-program {skill}:{name}` for one run); it \
             then runs in an OS sandbox with this call's workspace and limits{}",
            if shell {
                ". A shell command line runs only through a granted shell"
            } else {
                ""
            }
        )
    }

    fn record(
        &mut self,
        program: &str,
        args: &[String],
        outcome: &str,
        exit_code: Option<i32>,
        duration_ms: u64,
    ) {
        let ran = !matches!(outcome, "refused" | "invalid");
        if !ran && self.refusals_recorded >= AUDIT_REFUSALS {
            let last_refusal = self
                .runs
                .iter_mut()
                .rev()
                .find(|r| matches!(r.outcome.as_str(), "refused" | "invalid"));
            if let Some(last) = last_refusal {
                last.unrecorded_after += 1;
            }
            return;
        }
        if !ran {
            self.refusals_recorded += 1;
        }
        self.runs.push(ProgramRun {
            program: program.to_string(),
            args: args
                .iter()
                .take(AUDIT_ARGS)
                .map(|a| crate::text::clip(a, AUDIT_ARG_CHARS))
                .collect(),
            outcome: outcome.into(),
            exit_code,
            duration_ms,
            unrecorded_after: 0,
        });
    }
}

impl DoorSetting {
    pub(crate) fn with_relay(mut self, relay: Relay) -> Self {
        self.relay = Some(relay);
        self
    }

    pub(crate) fn with_limits(mut self, limits: &crate::Limits) -> Self {
        // What a program prints goes to the script, not to the call's
        // output: it is bounded like the files a script may make in /tmp
        // (a page rendered to stdout is megabytes), and at least the call's
        // output cap.
        self.pipe_bytes = limits
            .output_bytes
            .max(usize::try_from(limits.scratch_bytes).unwrap_or(usize::MAX));
        self.file_bytes = limits.workspace_bytes.max(limits.scratch_bytes);
        self
    }
}

/// The folder the program starts in: the guest's, when it is one the
/// program sees the same way, else the workspace (or `/tmp`).
fn guest_cwd(asked: Option<&str>, has_workspace: bool) -> String {
    let home = if has_workspace {
        WORKSPACE_MOUNT
    } else {
        SCRATCH_MOUNT
    };
    let Some(asked) = asked else {
        return home.into();
    };
    let shown = [SCRATCH_MOUNT, SKILL_MOUNT]
        .into_iter()
        .chain(has_workspace.then_some(WORKSPACE_MOUNT));
    let inside = shown
        .into_iter()
        .any(|m| asked == m || asked.starts_with(&format!("{m}/")));
    if inside && !asked.split('/').any(|part| part == "..") {
        asked.into()
    } else {
        home.into()
    }
}

/// Lays out the program's overlay in the stage's folder.
fn staged_view(stage: &mut Stage, lower: &Path) -> std::io::Result<WorkspaceView> {
    let folder = stage.program_folder("program")?;
    let [layer, upper, work, merged] = ["layer", "upper", "work", "merged"].map(|n| folder.join(n));
    for dir in [&layer, &upper, &work, &merged] {
        std::fs::create_dir(dir)?;
    }
    let layer_dir = Dir::open_ambient_dir(&layer, cap_std::ambient_authority())?;
    stage.write_layer(&layer_dir)?;
    Ok(WorkspaceView::Staged {
        lower: std::fs::canonicalize(lower)?,
        layer,
        upper,
        work,
        merged,
    })
}
