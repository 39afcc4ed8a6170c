//! Running one call in a fresh store, and naming what stopped it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::Store;
use wasmtime::component::Val;
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p2::bindings::CommandPre;

use super::component::{LoadedComponent, root_message};
use super::egress::{NetLog, NetRequest, NetTrace};
use super::engine::{EPOCH_TICK, SandboxEngine};
use super::error::SandboxError;
use super::grants::Grants;
use super::limits::Limits;
use super::mount::QuotaExceeded;
use super::output::OutputOverflow;
use super::program::ProgramRun;
use super::stage::{ChangeSet, CommitError, Stage};
use super::store::{CallIo, CallState, MemoryLimitHit, new_store};
use crate::schema::{WitType, args_from_json, to_json};

/// How a guest is entered.
#[derive(Debug, Clone)]
pub enum Entry {
    /// An exported function, with its arguments as a JSON object.
    Function { name: String, args: Value },
    /// A command component's `wasi:cli/run`, with `argv` (`argv[0]` is
    /// the program's name) and `stdin`.
    Command { argv: Vec<String>, stdin: Vec<u8> },
}

/// One call into a component: which one, how it is entered, and what it
/// may do.
pub struct GuestCall<'a> {
    pub component: &'a LoadedComponent,
    pub entry: Entry,
    pub grants: &'a Grants,
    pub limits: &'a Limits,
    /// Where the guest's HTTP requests are logged. A caller that keeps a
    /// clone knows what the guest sent whatever ends the call (a trap, a
    /// timeout, a dropped future).
    pub net: NetTrace,
    /// A dry run's changes so far, which this call starts from.
    pub from: Option<&'a Stage>,
}

impl<'a> GuestCall<'a> {
    /// A call of `entry` with nothing logged outside the outcome and no
    /// dry run to start from.
    pub fn new(
        component: &'a LoadedComponent,
        entry: Entry,
        grants: &'a Grants,
        limits: &'a Limits,
    ) -> Self {
        GuestCall {
            component,
            entry,
            grants,
            limits,
            net: NetTrace::default(),
            from: None,
        }
    }
}

/// A finished call: a function's value, or a command's exit code (a
/// non-zero exit is an outcome, not an error), and what it printed, used
/// and changed.
#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// A function's result as JSON; `null` for a function without one and
    /// for a command.
    pub value: Value,
    /// A command's exit code; 0 for a function.
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub usage: Usage,
    /// Outgoing HTTP requests, for the audit record.
    pub network: Vec<NetRequest>,
    /// Programs the guest asked the host to start, for the audit record.
    pub programs: Vec<ProgramRun>,
    /// Requests the egress policy refused although the call went on.
    pub refusals: Vec<String>,
    /// The workspace changes the call staged, not yet written. A command
    /// that exits non-zero failed, like a function returning `err`: its
    /// changes are discarded and this is empty.
    pub staged: PendingChanges,
    /// What the call changed in the workspace, once committed.
    pub changes: ChangeSet,
}

/// A call's staged workspace changes, until someone commits them (take
/// the [`Stage`] and call [`Stage::commit`]). When the last clone of the
/// outcome is dropped with the stage still here, the changes are
/// discarded.
#[derive(Clone, Default)]
pub struct PendingChanges(Arc<Mutex<Option<Stage>>>);

impl PendingChanges {
    fn new(stage: Option<Stage>) -> Self {
        PendingChanges(Arc::new(Mutex::new(stage)))
    }

    /// Holds `stage` for [`commit`].
    pub fn holding(stage: Stage) -> Self {
        Self::new(Some(stage))
    }

    /// The stage, once: later calls get `None`.
    pub fn take(&self) -> Option<Stage> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl std::fmt::Debug for PendingChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.0.lock().map(|s| s.is_some()).unwrap_or(false);
        f.debug_tuple("PendingChanges").field(&held).finish()
    }
}

/// The stage a call with a writable workspace writes into: a fresh one, or
/// a copy of `from` (a dry run's changes so far).
fn begin_stage(grants: &Grants, from: Option<&Stage>) -> Result<Option<Stage>, SandboxError> {
    let Some(ws) = grants.workspace.as_ref().filter(|ws| ws.writable) else {
        return Ok(None);
    };
    let stage = match from {
        Some(base) => base.fork(&ws.host_dir),
        None => Stage::begin(&ws.host_dir),
    };
    stage.map(Some).map_err(|e| {
        let why = match e.kind() {
            // The two refusals of `txn_folder` say what to do themselves.
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::NotFound
                if e.get_ref().is_some() =>
            {
                e.to_string()
            }
            _ => format!(
                "{}; check that the state folder (SKILLBOX_STATE_DIR or XDG_STATE_HOME) is \
                 writable",
                super::io_reason(&e)
            ),
        };
        SandboxError::Host(format!("cannot stage the call's workspace changes: {why}"))
    })
}

/// What a call consumed, for audit records and benchmarks.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
#[non_exhaustive]
pub struct Usage {
    pub fuel: u64,
    #[serde(serialize_with = "as_millis")]
    pub duration: Duration,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Runs `call` in a fresh store.
pub(crate) async fn run(
    engine: &SandboxEngine,
    call: GuestCall<'_>,
) -> Result<CallOutcome, SandboxError> {
    let GuestCall {
        component,
        entry,
        grants,
        limits,
        net,
        from,
    } = call;
    match entry {
        Entry::Function { name, args } => {
            call_function(engine, component, &name, &args, (grants, limits, net, from)).await
        }
        Entry::Command { argv, stdin } => {
            run_command(engine, component, argv, stdin, (grants, limits, net, from)).await
        }
    }
}

/// What every call runs with: its grants and limits, its network log, and
/// the dry run it starts from.
type Setting<'a> = (&'a Grants, &'a Limits, NetTrace, Option<&'a Stage>);

async fn call_function(
    engine: &SandboxEngine,
    component: &LoadedComponent,
    function: &str,
    args: &Value,
    (grants, limits, net, from): Setting<'_>,
) -> Result<CallOutcome, SandboxError> {
    let func =
        component
            .exports
            .function(function)
            .ok_or_else(|| SandboxError::NoSuchFunction {
                name: function.to_string(),
                available: component.exports.names().join(", "),
            })?;
    // Validation happens here, before any guest code runs.
    let params = args_from_json(&func.params, args)?;

    let io = CallIo::new(limits, net);
    let stage = begin_stage(grants, from)?;
    let code = component.code();
    let mut store = new_store(
        code.pre.engine(),
        &engine.scratch,
        grants,
        limits,
        &io,
        stage,
    )?;
    let started = Instant::now();
    let result_ty = func.result.clone();
    let index = code
        .index_of(&func.name)
        .ok_or_else(|| SandboxError::NoSuchFunction {
            name: function.to_string(),
            available: component.exports.names().join(", "),
        })?;
    let run = async {
        crate::component::build_memory_images(&code);
        let instance = code.pre.instantiate_async(&mut store).await?;
        let f = instance
            .get_func(&mut store, index)
            .ok_or_else(|| wasmtime::format_err!("export vanished after instantiation"))?;
        let mut results = vec![Val::Bool(false); usize::from(result_ty.is_some())];
        f.call_async(&mut store, &params, &mut results).await?;
        wasmtime::Result::Ok(results.pop())
    };
    let raw = with_deadline(limits, run).await;
    let usage = usage(&store, limits, started);
    let net = store.data().net_log();
    let refusals = store.data().refusals();
    let result =
        raw.map_err(|e| refusal_cause(classify(e, limits, &io), &net, &refusals, limits))?;
    check_streams(&io)?;
    check_network(&net, limits)?;

    let value = match (&result_ty, result) {
        (Some(ty), Some(val)) => {
            unwrap_result(ty, &val).map_err(|e| refusal_cause(e, &net, &refusals, limits))?
        }
        _ => Value::Null,
    };
    let size = serde_json::to_vec(&value).map(|v| v.len()).unwrap_or(0);
    if size > limits.result_bytes {
        return Err(SandboxError::OutputLimit {
            stream: "result",
            limit: limits.result_bytes,
        });
    }
    Ok(CallOutcome {
        value,
        exit_code: 0,
        stdout: io.stdout.text(),
        stderr: io.stderr.text(),
        usage,
        network: net.requests,
        programs: store.data().program_runs(),
        refusals,
        staged: PendingChanges::new(store.data_mut().fs.take_stage()),
        changes: ChangeSet::default(),
    })
}

async fn run_command(
    engine: &SandboxEngine,
    component: &LoadedComponent,
    argv: Vec<String>,
    stdin: Vec<u8>,
    (grants, limits, net, from): Setting<'_>,
) -> Result<CallOutcome, SandboxError> {
    if !component.exports.is_command {
        return Err(SandboxError::Load(
            "it is not a command component (it does not export wasi:cli/run); call its \
             functions as tools instead"
                .into(),
        ));
    }
    let code = component.code();
    let command =
        CommandPre::new(code.pre.clone()).map_err(|e| SandboxError::Load(root_message(&e)))?;
    let mut io = CallIo::new(limits, net);
    io.args = argv;
    io.stdin = stdin;
    let stage = begin_stage(grants, from)?;
    let mut store = new_store(
        code.pre.engine(),
        &engine.scratch,
        grants,
        limits,
        &io,
        stage,
    )?;
    let started = Instant::now();
    crate::component::build_memory_images(&code);
    let run = async {
        let instance = command.instantiate_async(&mut store).await?;
        instance.wasi_cli_run().call_run(&mut store).await
    };
    let raw = with_deadline(limits, run).await;
    let usage = usage(&store, limits, started);
    let net = store.data().net_log();
    let refusals = store.data().refusals();
    let exit_code = match raw {
        Ok(Ok(())) => 0,
        Ok(Err(())) => 1,
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => exit.0,
            None => {
                let error = classify(e, limits, &io);
                let error = refusal_cause(error, &net, &refusals, limits);
                return Err(error.with_printed(io.stdout.text(), io.stderr.text()));
            }
        },
    };
    check_streams(&io)?;
    check_network(&net, limits)?;
    let stage = store.data_mut().fs.take_stage();
    Ok(CallOutcome {
        value: Value::Null,
        exit_code,
        stdout: io.stdout.text(),
        stderr: io.stderr.text(),
        usage,
        network: net.requests,
        programs: store.data().program_runs(),
        refusals,
        staged: PendingChanges::new(stage.filter(|_| exit_code == 0)),
        changes: ChangeSet::default(),
    })
}

/// Runs `fut` under the wall-clock limit. The epoch callback normally stops
/// the guest first with a precise error; this outer deadline also covers
/// time spent waiting in host calls, where no epoch check runs (an open on
/// the blocking pool, the network, a program's door).
async fn with_deadline<T>(
    limits: &Limits,
    fut: impl Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    let grace = EPOCH_TICK * 5;
    match tokio::time::timeout(limits.timeout + grace, fut).await {
        Ok(result) => result,
        Err(_) => Err(wasmtime::Error::new(SandboxError::Timeout {
            limit: limits.timeout,
        })),
    }
}

fn usage(store: &Store<CallState>, limits: &Limits, started: Instant) -> Usage {
    Usage {
        fuel: limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0)),
        duration: started.elapsed(),
    }
}

/// A guest that failed after a request or a change of its was refused
/// failed because of the refusal: say so, as the typed error it is.
fn refusal_cause(
    error: SandboxError,
    net: &NetLog,
    refusals: &[String],
    limits: &Limits,
) -> SandboxError {
    if net.overflowed {
        return SandboxError::ResponseLimit {
            limit_bytes: limits.net_response_bytes,
        };
    }
    match (&error, refusals.first()) {
        (SandboxError::ToolError { .. } | SandboxError::Trap { .. }, Some(why)) => {
            SandboxError::Denied { what: why.clone() }
        }
        _ => error,
    }
}

/// A guest may swallow a failed read of a response; the cap still counts.
fn check_network(net: &NetLog, limits: &Limits) -> Result<(), SandboxError> {
    if net.overflowed {
        return Err(SandboxError::ResponseLimit {
            limit_bytes: limits.net_response_bytes,
        });
    }
    Ok(())
}

/// A guest may swallow a failed write; the cap still counts as hit.
fn check_streams(io: &CallIo) -> Result<(), SandboxError> {
    for pipe in [&io.stdout, &io.stderr] {
        if pipe.overflowed() {
            let overflow = pipe.overflow_error();
            return Err(SandboxError::OutputLimit {
                stream: overflow.stream,
                limit: overflow.limit,
            });
        }
    }
    Ok(())
}

/// Turns whatever stopped the guest into the limit or fault it stands for.
fn classify(error: wasmtime::Error, limits: &Limits, io: &CallIo) -> SandboxError {
    let error = match error.downcast::<SandboxError>() {
        Ok(known) => return known,
        Err(other) => other,
    };
    if error.downcast_ref::<MemoryLimitHit>().is_some() {
        return SandboxError::MemoryLimit {
            limit_bytes: limits.memory_bytes,
        };
    }
    if let Some(hit) = error.downcast_ref::<QuotaExceeded>() {
        return SandboxError::Quota {
            mount: hit.mount,
            what: hit.what,
            limit: hit.limit,
        };
    }
    if let Some(overflow) = error.downcast_ref::<OutputOverflow>() {
        return SandboxError::OutputLimit {
            stream: overflow.stream,
            limit: overflow.limit,
        };
    }
    if let Err(limit) = check_streams(io) {
        return limit;
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::OutOfFuel) => {
            return SandboxError::OutOfFuel { fuel: limits.fuel };
        }
        Some(wasmtime::Trap::StackOverflow) => return SandboxError::StackOverflow,
        // Rust and C guests keep large frames on a stack inside linear
        // memory; running off its end looks like this trap.
        Some(wasmtime::Trap::MemoryOutOfBounds) => {
            return SandboxError::Trap {
                message: "it accessed memory out of bounds (deep recursion in the tool can cause this too)".into(),
                stderr: stderr_tail(io),
            };
        }
        Some(wasmtime::Trap::Interrupt) => {
            return SandboxError::Timeout {
                limit: limits.timeout,
            };
        }
        _ => {}
    }
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return SandboxError::Trap {
            message: format!("it exited with code {} instead of returning", exit.0),
            stderr: stderr_tail(io),
        };
    }
    // An operating-system error with no trap around it is the host's own
    // failure (mapping memory, a file the host itself opens), not the
    // tool's: said so, and kept in the log with its whole chain.
    if error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some())
    {
        tracing::warn!(
            error = format!("{error:#}"),
            "the host failed during a call"
        );
        return SandboxError::Host(format!(
            "the host could not finish running the call ({}); nothing in the request caused \
             it, and the same call may succeed if retried",
            root_message(&error)
        ));
    }
    SandboxError::Trap {
        message: root_message(&error),
        stderr: stderr_tail(io),
    }
}

/// The last lines the guest printed to stderr (a panic message, usually),
/// bounded, to put after a crash report.
fn stderr_tail(io: &CallIo) -> String {
    const MAX: usize = 600;
    let text = io.stderr.text();
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    let start = text.char_indices().rev().nth(MAX).map_or(0, |(i, _)| i);
    format!(" The tool's last words on stderr: {}", &text[start..])
}

/// A top-level `result<T, E>` is the tool's own success or failure; any
/// other type is the success value.
fn unwrap_result(ty: &WitType, val: &Val) -> Result<Value, SandboxError> {
    match (ty, val) {
        (WitType::Result { ok, .. }, Val::Result(Ok(v))) => Ok(match (ok, v) {
            (Some(t), Some(v)) => to_json(t, v),
            _ => Value::Null,
        }),
        (WitType::Result { err, .. }, Val::Result(Err(v))) => {
            let value = match (err, v) {
                (Some(t), Some(v)) => to_json(t, v),
                _ => Value::Null,
            };
            let message = match &value {
                Value::String(s) => s.clone(),
                Value::Null => "it failed without a message".to_string(),
                other => other.to_string(),
            };
            Err(SandboxError::ToolError { message, value })
        }
        (ty, val) => Ok(to_json(ty, val)),
    }
}

/// Commits what `staged` holds, off the async threads: the workspace's
/// changes as written, or why nothing was.
pub async fn commit(staged: &PendingChanges) -> Result<ChangeSet, SandboxError> {
    let Some(stage) = staged.take() else {
        return Ok(ChangeSet::default());
    };
    if stage.is_empty() {
        // A call that changed nothing has nothing to write.
        return Ok(ChangeSet::default());
    }
    tokio::task::spawn_blocking(move || stage.commit())
        .await
        .map_err(|_| SandboxError::Host("the workspace commit was interrupted".into()))?
        .map_err(|e| match e {
            CommitError::Conflict { .. }
            | CommitError::Replaced { .. }
            | CommitError::Refused(_) => SandboxError::Conflict(e.to_string()),
            CommitError::Io(_) | CommitError::Interrupted(_) => SandboxError::Host(e.to_string()),
        })
}
