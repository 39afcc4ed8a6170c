//! Tasks shared across replicas.
//!
//! The replica that runs a task owns it. It writes the task, as
//! `tasks/get` shows it, to the store when the task starts, every second
//! while it runs, and when it ends, and each write renews the task's lease.
//! Any other replica answers `tasks/get` from that record and `tasks/cancel`
//! by leaving a request the owner picks up on its next write.
//!
//! A record whose lease ran out (its replica was killed, or lost the store
//! for [`LEASE`]) is settled as failed by the first replica that reads it,
//! in one atomic step, so every replica reports the same; if the owner
//! comes back it finds the record settled and stops the call. A settled
//! record is never written again.

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{DetailedTask, JsonObject, TaskPayload};

use super::{PREFIX, StateStore, within};

/// How long a running task counts as alive without its owner writing it
/// (which it does every second).
pub(crate) const LEASE: Duration = Duration::from_secs(10);

/// How long the owner goes on without a write the store confirmed before
/// it gives the task up itself: well inside [`LEASE`], so it has stopped
/// the call before any other replica may report the task failed.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(7);

/// The largest task record shared. A result is bounded by the output
/// budget, far below this; the cap is for the store, not for results.
const MAX_RECORD_BYTES: usize = 4 << 20;

/// How long the record of a task without a TTL is kept after its last
/// write. The host gives every task one; this is for the store's sake.
const UNLIMITED_RECORD_SECS: u64 = 24 * 3600;

/// What the owner learns when it writes its task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sharing {
    /// Written (or there is no shared store).
    Kept,
    /// Written, and a client asked another replica to cancel the task.
    CancelRequested,
    /// Not written: the record is settled already, because another
    /// replica gave the task up while this one did not renew its lease.
    Settled,
    /// The store did not answer: whether it was written is unknown.
    Unknown,
}

/// What a conditional write did.
enum Put {
    Written {
        cancel_requested: bool,
    },
    /// The record is terminal and stays as it is.
    Settled,
    /// The lease is alive, so a reader may not settle the task.
    Alive,
    /// The record expired, so there is nothing to settle.
    Gone,
}

/// Writes a task record unless it is settled (writing the same settled
/// record again, as an owner retrying a write that timed out does, is
/// fine). KEYS: the record, its lease, its cancel request. ARGV: the
/// task's JSON, `1` when terminal, the record's lifetime, the lease, `1`
/// when a reader settles a record whose lease is gone. Returns -1 settled,
/// -2 alive, -3 gone, else whether a cancel was requested.
const PUT_SCRIPT: &str = "\
if redis.call('HGET', KEYS[1], 'terminal') == '1' then \
  if redis.call('HGET', KEYS[1], 'task') == ARGV[1] then return 0 end return -1 end \
if ARGV[5] == '1' then \
  if redis.call('EXISTS', KEYS[1]) == 0 then return -3 end \
  if redis.call('EXISTS', KEYS[2]) == 1 then return -2 end end \
redis.call('HSET', KEYS[1], 'terminal', ARGV[2], 'task', ARGV[1]) \
redis.call('EXPIRE', KEYS[1], ARGV[3]) \
if ARGV[2] == '1' then redis.call('DEL', KEYS[2], KEYS[3]) return 0 end \
redis.call('SET', KEYS[2], '1', 'EX', ARGV[4]) \
return redis.call('EXISTS', KEYS[3])";

/// Leaves a cancel request for a running task's owner, kept as long as the
/// record. KEYS: the record, the request. Returns 0 when there is no such
/// task, 1 otherwise.
const CANCEL_SCRIPT: &str = "\
local ttl = redis.call('TTL', KEYS[1]) \
if ttl < 1 then return 0 end \
if redis.call('HGET', KEYS[1], 'terminal') ~= '1' then \
  redis.call('SET', KEYS[2], '1', 'EX', ttl) end \
return 1";

fn record_key(id: &str) -> String {
    format!("{PREFIX}task:{id}")
}

/// Whether `id` could be one this host handed out (a UUID): anything else
/// is unknown without asking the store, so no client names keys at will.
fn plausible(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The error a task ends with when its replica stopped renewing it.
pub(crate) fn abandoned() -> McpError {
    McpError::internal_error(
        format!(
            "the replica running this task stopped, or lost the state store, for about {} s \
             before the task's end was recorded, so its result is lost. The call may or may not \
             have taken effect: check (for example the workspace) before running it again.",
            LEASE.as_secs()
        ),
        None,
    )
}

/// `value` as a JSON object, as a task carries results and errors.
pub(crate) fn to_object(value: &impl serde::Serialize) -> JsonObject {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => JsonObject::new(),
    }
}

/// `task` ended with `payload`, as of now.
pub(crate) fn settled(mut task: DetailedTask, payload: TaskPayload) -> DetailedTask {
    task.task.last_updated_at = rmcp::task_manager::current_timestamp();
    DetailedTask::new(task.task, payload)
}

impl StateStore {
    /// Writes `task`, its owner's view, for the other replicas (nothing
    /// without a shared store). A store that does not answer is logged
    /// and the task goes on; its lease runs out if that lasts.
    pub(crate) async fn share_task(&self, task: &DetailedTask) -> Sharing {
        match self.put_task(task, false).await {
            Ok(Put::Written {
                cancel_requested: true,
            }) => Sharing::CancelRequested,
            Ok(Put::Written { .. } | Put::Alive | Put::Gone) => Sharing::Kept,
            Ok(Put::Settled) => Sharing::Settled,
            Err(why) => {
                // No id: it is the capability to read the result.
                tracing::warn!("could not write a task to the state store: {why}");
                Sharing::Unknown
            }
        }
    }

    /// Whether `task` fits in the store.
    pub(crate) fn task_fits(&self, task: &DetailedTask) -> Result<(), McpError> {
        let size = serde_json::to_vec(task).map_or(0, |json| json.len());
        if !self.is_shared() || size <= MAX_RECORD_BYTES {
            return Ok(());
        }
        Err(McpError::internal_error(
            format!(
                "the call's result is {size} bytes, more than the {} MiB replicas share a task's \
                 result through; ask the tool for less output",
                MAX_RECORD_BYTES >> 20
            ),
            None,
        ))
    }

    async fn put_task(&self, task: &DetailedTask, only_if_dead: bool) -> Result<Put, String> {
        let Some((mut connection, _)) = self.connection() else {
            return Ok(Put::Written {
                cancel_requested: false,
            });
        };
        let json = serde_json::to_string(task).map_err(|e| e.to_string())?;
        let key = record_key(&task.task.task_id);
        let terminal = task.status().is_terminal();
        let mut lifetime = task
            .task
            .ttl_ms
            .map_or(UNLIMITED_RECORD_SECS, |ms| ms.div_ceil(1000))
            .max(1);
        if !terminal {
            // A running record outlives its lease, so a stalled owner's
            // task is reported failed, not unknown.
            lifetime = lifetime.max(3 * LEASE.as_secs());
        }
        let mut put = redis::cmd("EVAL");
        put.arg(PUT_SCRIPT)
            .arg(3)
            .arg(&key)
            .arg(format!("{key}:alive"))
            .arg(format!("{key}:cancel"))
            .arg(json)
            .arg(if task.status().is_terminal() {
                "1"
            } else {
                "0"
            })
            .arg(lifetime)
            .arg(LEASE.as_secs())
            .arg(if only_if_dead { "1" } else { "0" });
        Ok(
            match within(put.query_async::<i64>(&mut connection)).await? {
                -1 => Put::Settled,
                -2 => Put::Alive,
                -3 => Put::Gone,
                cancel => Put::Written {
                    cancel_requested: cancel == 1,
                },
            },
        )
    }

    /// Task `id` as another replica shared it; `None` when no replica did
    /// (or there is no shared store). A running task whose lease ran out
    /// is settled as failed here, for every replica.
    pub(crate) async fn shared_task(&self, id: &str) -> Result<Option<DetailedTask>, String> {
        let Some(task) = self.read_task(id).await? else {
            return Ok(None);
        };
        let (task, alive) = task;
        if alive || task.status().is_terminal() {
            return Ok(Some(task));
        }
        let failed = settled(
            task,
            TaskPayload::Failed {
                error: to_object(&abandoned()),
            },
        );
        match self.put_task(&failed, true).await? {
            Put::Written { .. } => Ok(Some(failed)),
            Put::Gone => Ok(None),
            // The owner wrote (or settled) it in between: read what it wrote.
            Put::Settled | Put::Alive => Ok(self.read_task(id).await?.map(|(task, _)| task)),
        }
    }

    /// The record of task `id`, and whether its lease is alive.
    async fn read_task(&self, id: &str) -> Result<Option<(DetailedTask, bool)>, String> {
        let Some((mut connection, _)) = self.connection() else {
            return Ok(None);
        };
        if !plausible(id) {
            return Ok(None);
        }
        let key = record_key(id);
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&key).arg("task");
        pipe.cmd("EXISTS").arg(format!("{key}:alive"));
        let (json, alive): (Option<String>, bool) =
            within(pipe.query_async(&mut connection)).await?;
        let Some(json) = json else {
            return Ok(None);
        };
        let task = serde_json::from_str(&json).map_err(|e| {
            format!("the store's record of task {id} is not one this host wrote: {e}")
        })?;
        Ok(Some((task, alive)))
    }

    /// Asks the replica running task `id` to cancel it; false when no
    /// replica shared such a task.
    pub(crate) async fn cancel_shared_task(&self, id: &str) -> Result<bool, String> {
        let Some((mut connection, _)) = self.connection() else {
            return Ok(false);
        };
        if !plausible(id) {
            return Ok(false);
        }
        let key = record_key(id);
        let mut cancel = redis::cmd("EVAL");
        cancel
            .arg(CANCEL_SCRIPT)
            .arg(2)
            .arg(&key)
            .arg(format!("{key}:cancel"));
        Ok(within(cancel.query_async::<i64>(&mut connection)).await? == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ids_like_the_hosts_reach_the_store() {
        assert!(plausible("0b6c8f1e-5d1a-4f0e-9a51-3f1c9f0b7e21"));
        assert!(!plausible(""));
        assert!(!plausible("x".repeat(65).as_str()));
        assert!(!plausible("a:b"));
        assert!(!plausible("skillbox:confirm:key"));
        assert!(!plausible("a b"));
    }
}
