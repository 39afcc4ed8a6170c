//! Long calls as tasks (the `io.modelcontextprotocol/tasks` extension).
//!
//! The server decides per request which calls become tasks. skillbox starts
//! every call the same way and waits a little (`--task-after-ms`): a call
//! that finishes in that time answers as usual, so quick calls pay nothing;
//! one still running is handed to rmcp's [`TaskManager`], and the client
//! gets a task id at once and polls `tasks/get`. Only a client that
//! declared the extension in its capabilities gets a task.
//!
//! A task is the same call on the same path: its limits, grants and audit
//! record do not change. `tasks/cancel` stops the guest at its next epoch
//! tick. Results are kept for the TTL and then dropped.
//!
//! With a shared state store (`serve --state`) every task is mirrored into
//! it while it runs (see `shared_state::tasks`), so any replica answers
//! `tasks/get` and `tasks/cancel` for it, and a task whose replica died
//! reads as failed within the lease instead of vanishing.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ErrorData as McpError;
use rmcp::model::{CallToolResponse, CallToolResult, CreateTaskResult, DetailedTask, TaskPayload};
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::calls::{ProgressSink, with_progress};
use super::shared_state::{self, Sharing, StateStore};

/// Tasks running at once by default; past it, calls simply run to the end
/// in their request.
pub const DEFAULT_MAX_TASKS: usize = 256;

/// The defaults of `serve --task-after-ms` and `--task-ttl-secs`.
pub const DEFAULT_TASK_AFTER: Duration = Duration::from_secs(1);
/// How long a task and its result are kept by default.
pub const DEFAULT_TASK_TTL: Duration = Duration::from_secs(600);

/// How often a client is asked to poll.
const POLL_INTERVAL_MS: u64 = 500;

/// The tasks of one server, shared by every session.
pub(crate) struct Tasks {
    pub manager: TaskManager,
    /// A call still running after this long becomes a task.
    pub after: Duration,
    pub ttl: Duration,
    /// Tasks running at once.
    pub max: usize,
    /// Where tasks are shared with other replicas, if anywhere.
    store: Arc<StateStore>,
}

impl Tasks {
    pub(crate) fn new(after: Duration, ttl: Duration, max: usize, store: Arc<StateStore>) -> Self {
        Tasks {
            manager: TaskManager::new(),
            after,
            ttl,
            max,
            store,
        }
    }

    /// `tasks/get`: a task of this replica, or one another replica shares.
    pub(crate) async fn get(&self, id: &str) -> Result<DetailedTask, McpError> {
        match self.manager.get_task(id) {
            Ok(task) => Ok(task),
            Err(unknown) => match self.store.shared_task(id).await {
                Ok(Some(task)) => Ok(task),
                Ok(None) => Err(unknown),
                Err(why) => Err(store_silent(&why)),
            },
        }
    }

    /// `tasks/cancel`: cancels a task of this replica, or asks the replica
    /// that runs it to, which it does within a second.
    pub(crate) async fn cancel(&self, id: &str) -> Result<(), McpError> {
        match self.manager.cancel_task(id) {
            Ok(()) => Ok(()),
            Err(unknown) => match self.store.cancel_shared_task(id).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(unknown),
                Err(why) => Err(store_silent(&why)),
            },
        }
    }

    /// `tasks/update`: this host's tasks never ask for input, so responses
    /// are ignored, as the extension prescribes for unknown keys; an
    /// unknown task is an error.
    pub(crate) async fn update(
        &self,
        id: &str,
        responses: rmcp::model::InputResponses,
    ) -> Result<(), McpError> {
        match self.manager.update_task(id, responses) {
            Ok(()) => Ok(()),
            Err(_) => self.get(id).await.map(|_| ()),
        }
    }

    /// Runs `work`, which stops when `cancel` is cancelled. If it is still
    /// running after [`Tasks::after`] (counted from when `asking` says the
    /// call will ask its user nothing more) and the client declared the extension
    /// (`promote` holds the call's time limit then), it goes on as a task
    /// and the task's handle is returned. `request` is the request's own
    /// cancellation: it stops the call only until the call becomes a task.
    ///
    /// A task's TTL counts from its creation, so it is the call's time
    /// limit plus [`Tasks::ttl`]: a result is kept at least that long after
    /// the call ends.
    pub(crate) async fn run_or_promote<W>(
        &self,
        label: &str,
        promote: Option<Duration>,
        work: W,
        (cancel, mut asking): (CancellationToken, watch::Receiver<bool>),
        request: &CancellationToken,
        progress: Option<ProgressSink>,
    ) -> Result<CallToolResponse, McpError>
    where
        W: Future<Output = Result<CallToolResult, McpError>> + Send + 'static,
    {
        let started = Instant::now();
        let mut handle = tokio::spawn(work);
        let mut deadline = tokio::time::Instant::now() + self.after;
        let waited = with_progress(progress, label, async {
            loop {
                tokio::select! {
                    joined = &mut handle => return Some(joined),
                    () = tokio::time::sleep_until(deadline),
                        if promote.is_some() && !*asking.borrow() => return None,
                    // The clock starts once the call will ask nothing more.
                    Ok(()) = asking.changed() => {
                        if !*asking.borrow() {
                            deadline = tokio::time::Instant::now() + self.after;
                        }
                    }
                    () = request.cancelled() => {
                        cancel.cancel();
                        return Some((&mut handle).await);
                    }
                }
            }
        })
        .await;
        if let Some(joined) = waited {
            return finished(joined).map(Into::into);
        }
        if self.manager.running_task_count() >= self.max {
            return finished(handle.await).map(Into::into);
        }
        let options = TaskOptions::new()
            .with_ttl_ms(
                u64::try_from((self.ttl + promote.unwrap_or_default()).as_millis())
                    .unwrap_or(u64::MAX),
            )
            .with_poll_interval_ms(POLL_INTERVAL_MS)
            .with_status_message("running");
        let (manager, store) = (self.manager.clone(), self.store.clone());
        let task = self.manager.spawn(options, move |context| {
            Box::pin(run_task(context, (manager, store), handle, cancel, started))
        });
        if let Ok(now) = self.manager.get_task(&task.task_id) {
            // Before the client has the id, so any replica can answer it.
            self.store.share_task(&now).await;
        }
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }
}

/// A task's life after its call was promoted: reports how long it has
/// run, shares it with other replicas every second, stops the call when a
/// client cancels it (through any replica), and gives it up, stopping the
/// call, once the store has confirmed no write for [`shared_state::GIVE_UP`]:
/// by then no other replica may yet report it failed, so the two cannot
/// disagree on how it ended.
async fn run_task(
    context: TaskContext,
    (manager, store): (TaskManager, Arc<StateStore>),
    mut handle: tokio::task::JoinHandle<Result<CallToolResult, McpError>>,
    cancel: CancellationToken,
    started: Instant,
) -> Result<CallToolResult, TaskExit> {
    // A task future dropped unfinished (rmcp's TTL sweep aborts it) stops
    // its call too.
    let _stop_on_drop = cancel.clone().drop_guard();
    let id = context.task_id().to_owned();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut confirmed = Instant::now();
    // Once the call is asked to stop: how the task ends when it has.
    let mut stopping: Option<TaskExit> = None;
    let stop = |why: TaskExit, stopping: &mut Option<TaskExit>| {
        cancel.cancel();
        *stopping = Some(why);
    };
    let exit = loop {
        tokio::select! {
            joined = &mut handle => break match stopping.take() {
                Some(why) => Err(why),
                None => finished(joined).map_err(TaskExit::Error),
            },
            () = context.cancelled(), if stopping.is_none() => {
                stop(TaskExit::Cancelled, &mut stopping);
            }
            // The lease is renewed while a stopped call winds down, too.
            _ = tick.tick() => {
                context.set_status_message(format!(
                    "running for {:.0} s",
                    started.elapsed().as_secs_f64().floor()
                ));
                if !store.is_shared() {
                    continue;
                }
                let Ok(now) = manager.get_task(&id) else { continue };
                match store.share_task(&now).await {
                    Sharing::Kept => confirmed = Instant::now(),
                    Sharing::CancelRequested => {
                        confirmed = Instant::now();
                        let _ = manager.cancel_task(&id);
                    }
                    Sharing::Settled => {
                        stop(TaskExit::Error(shared_state::abandoned()), &mut stopping);
                    }
                    Sharing::Unknown => {
                        if confirmed.elapsed() >= shared_state::GIVE_UP {
                            stop(TaskExit::Error(shared_state::abandoned()), &mut stopping);
                        }
                    }
                }
            }
        }
    };
    match manager.get_task(&id) {
        Ok(now) => settle(&store, now, exit, confirmed).await,
        Err(_) => exit,
    }
}

/// Shares how the task ended, and ends it the same way here: a result
/// too large to share fails on every replica, and a task this replica
/// could not record before [`shared_state::GIVE_UP`] (since `confirmed`,
/// its last confirmed write), or that another replica settled as failed,
/// fails here too.
async fn settle(
    store: &StateStore,
    running: DetailedTask,
    exit: Result<CallToolResult, TaskExit>,
    confirmed: Instant,
) -> Result<CallToolResult, TaskExit> {
    if !store.is_shared() {
        return exit;
    }
    let payload = |exit: &Result<CallToolResult, TaskExit>| match exit {
        Ok(result) => TaskPayload::Completed {
            result: shared_state::to_object(result),
        },
        Err(TaskExit::Cancelled) => TaskPayload::Cancelled,
        Err(TaskExit::Error(error)) => TaskPayload::Failed {
            error: shared_state::to_object(error),
        },
    };
    let mut exit = exit;
    let mut ended = shared_state::settled(running.clone(), payload(&exit));
    if let Err(too_large) = store.task_fits(&ended) {
        exit = Err(TaskExit::Error(too_large));
        ended = shared_state::settled(running, payload(&exit));
    }
    loop {
        match store.share_task(&ended).await {
            Sharing::Kept | Sharing::CancelRequested => return exit,
            Sharing::Settled => return Err(TaskExit::Error(shared_state::abandoned())),
            Sharing::Unknown if confirmed.elapsed() >= shared_state::GIVE_UP => {
                return Err(TaskExit::Error(shared_state::abandoned()));
            }
            Sharing::Unknown => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The store that holds other replicas' tasks did not answer.
fn store_silent(why: &str) -> McpError {
    tracing::warn!("the state store did not answer about a task: {why}");
    McpError::internal_error(
        "this task is not on this replica, and the state store that knows the others' did not \
         answer; try again in a moment",
        None,
    )
}

fn finished(
    joined: Result<Result<CallToolResult, McpError>, tokio::task::JoinError>,
) -> Result<CallToolResult, McpError> {
    joined.unwrap_or_else(|_| {
        Err(McpError::internal_error(
            "the call stopped unexpectedly inside the host; nothing more is known. Try again.",
            None,
        ))
    })
}
