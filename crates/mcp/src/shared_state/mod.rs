//! What replicas share so that any of them can answer any request: the key
//! that seals confirmation `requestState`s, the approvals already spent,
//! and 2025-11-25 sessions (their handshake, for rmcp to restore the
//! session on a replica that never saw it, and the skills loaded and
//! invoked in it). Without a store one process keeps both, as one replica (or
//! replicas behind a sticky balancer) needs. With `serve --state
//! redis://…` they live in Redis or Valkey: every replica seals with one
//! key, so an approval answered through another replica counts, and
//! spends it with one atomic `SET NX`, so it counts once across them all.
//!
//! Commits to a workspace shared across machines take turns in it (see
//! [`commits`]), and tasks are
//! shared too (see [`tasks`]): the replica that runs one
//! mirrors it into the store, and any other answers `tasks/get` and
//! `tasks/cancel` from there.
//!
//! A store that cannot be reached fails closed: an approval that cannot
//! be spent is not taken (the user is asked again), and `/readyz` says
//! the replica is not ready.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, IntoConnectionInfo};

mod commits;
mod tasks;
#[cfg(feature = "http")]
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
pub(crate) use tasks::{GIVE_UP, Sharing, abandoned, settled, to_object};

/// Keys in the store start with this, so one Redis can serve other uses.
const PREFIX: &str = "skillbox:";
/// How long one request to the store may take before it counts as down.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the store cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    #[error(
        "--state {0}: not a Redis address; use redis://HOST[:PORT][/DB] (Redis or Valkey), with the password in --state-password-file or SKILLBOX_STATE_PASSWORD"
    )]
    Address(String),
    #[error(
        "--state: the address carries a password, which would show in the process list and the logs; put it in --state-password-file or SKILLBOX_STATE_PASSWORD instead"
    )]
    PasswordInAddress,
    #[error("the state store at {at} cannot be used: {why}")]
    Unreachable { at: String, why: String },
    #[error(
        "the state store at {at} evicts keys under memory pressure (maxmemory-policy {policy}): it would forget spent approvals (written once, never read) before the key (read every second), so an approval could count twice; set maxmemory-policy to noeviction"
    )]
    Evicts { at: String, policy: String },
}

/// Where replicas keep what they share.
pub struct StateStore {
    /// The key that seals `requestState`s (HMAC-SHA256). A shared store's
    /// can change: see [`StateStore::refresh`].
    seal_key: RwLock<[u8; 32]>,
    backend: Backend,
}

enum Backend {
    /// This process alone.
    Local(SpentNonces),
    Redis {
        connection: ConnectionManager,
        /// The address without credentials, for messages.
        at: String,
    },
}

impl StateStore {
    /// A store this process keeps, with a fresh random key.
    pub fn local() -> std::io::Result<Self> {
        Ok(StateStore {
            seal_key: RwLock::new(random_key()?),
            backend: Backend::Local(SpentNonces::default()),
        })
    }

    /// Connects to Redis at `address`, with `password` (read by the caller
    /// from a file or the environment), and agrees on the sealing key with
    /// the other replicas: the first to start stores one, the rest read it.
    pub async fn redis(address: &str, password: Option<&str>) -> Result<Self, StateError> {
        let at = without_credentials(address);
        let mut info = address
            .into_connection_info()
            .map_err(|_| StateError::Address(at.clone()))?;
        if info.redis_settings().password().is_some() {
            return Err(StateError::PasswordInAddress);
        }
        if let Some(password) = password {
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let unreachable = |why: String| StateError::Unreachable {
            at: at.clone(),
            why,
        };
        let client = Client::open(info).map_err(|e| unreachable(e.to_string()))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(REQUEST_TIMEOUT))
            .set_response_timeout(Some(REQUEST_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let mut connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        // Only noeviction is safe. A store that refuses CONFIG (managed
        // services may) is taken at its word; docs/deploy.md says what to
        // set.
        let mut policy = redis::cmd("CONFIG");
        policy.arg("GET").arg("maxmemory-policy");
        if let Ok(reply) = policy.query_async::<Vec<String>>(&mut connection).await
            && let Some(policy) = reply.get(1)
            && policy != "noeviction"
        {
            return Err(StateError::Evicts {
                at,
                policy: policy.clone(),
            });
        }
        let fresh = random_key().map_err(|e| unreachable(e.to_string()))?;
        let seal_key = agree_on_key(&mut connection, &fresh)
            .await
            .map_err(unreachable)?;
        Ok(StateStore {
            seal_key: RwLock::new(seal_key),
            backend: Backend::Redis { connection, at },
        })
    }

    pub(crate) fn seal_key(&self) -> [u8; 32] {
        *self.seal_key.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the store answers now. A shared store is also asked for
    /// the sealing key, which every replica adopts. If the store lost it
    /// (a Redis restarted without persistence, which forgot the spent
    /// approvals too) the first replica to ask stores a fresh one, so no
    /// state sealed before can be spent again; the replicas agree again
    /// within a round of checks, and a state sealed under a key given up
    /// is asked again, never taken.
    pub(crate) async fn refresh(&self) -> bool {
        let Backend::Redis { connection, at } = &self.backend else {
            return true;
        };
        let Ok(fresh) = random_key() else {
            return false;
        };
        let mut connection = connection.clone();
        let current = self.seal_key();
        let agreed = tokio::time::timeout(REQUEST_TIMEOUT, agree_on_key(&mut connection, &fresh));
        match agreed.await {
            Ok(Ok(key)) => {
                if key != current {
                    tracing::warn!(
                        "the confirmation key in the state store at {at} changed (was the store emptied?); \
                         answers sealed before are asked again"
                    );
                    *self.seal_key.write().unwrap_or_else(|e| e.into_inner()) = key;
                }
                true
            }
            Ok(Err(_)) | Err(_) => false,
        }
    }

    /// Makes this process's commits to the workspace at `workspace` take
    /// turns, under `name`, with those of replicas on other machines that
    /// write it on a shared volume (see `commits.rs`). Needs the runtime
    /// the store's connection runs on.
    pub(crate) fn share_commits(
        &self,
        workspace: &std::path::Path,
        name: &str,
    ) -> std::io::Result<()> {
        let Backend::Redis { connection, at } = &self.backend else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a workspace shared with other machines needs a shared state store \
                 (--state redis://…) for its commits to take turns in",
            ));
        };
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !name_ok {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "--shared-workspace {name:?}: name the workspace with letters, digits, '.', '_' \
                     and '-' (at most 64), the same on every replica that writes it"
                ),
            ));
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(std::io::Error::other)?;
        let commits = commits::RedisCommits {
            connection: connection.clone(),
            at: at.clone(),
            runtime,
        };
        crate::sandbox::stage::share_commits(workspace, name, std::sync::Arc::new(commits))
    }

    /// Whether other processes share this store.
    pub(crate) fn is_shared(&self) -> bool {
        !matches!(self.backend, Backend::Local(_))
    }

    /// `"local"` or `"redis"`, for `/readyz`.
    #[cfg(feature = "http")]
    pub(crate) fn kind(&self) -> &'static str {
        match self.backend {
            Backend::Local(_) => "local",
            Backend::Redis { .. } => "redis",
        }
    }

    /// Records the approval `nonce` as spent until well past `expires`
    /// (Unix seconds), if `key` (the key its state was verified with) is
    /// still the store's. True when this call spent it; false when it was
    /// spent before, the key changed (the store was emptied: its record of
    /// spent approvals is gone too), or the store could not say.
    pub(crate) async fn spend(&self, nonce: &str, expires: u64, key: &[u8; 32]) -> bool {
        let connection = match &self.backend {
            Backend::Local(spent) => return spent.spend(nonce, expires),
            Backend::Redis { connection, at } => (connection.clone(), at),
        };
        let (mut connection, at) = connection;
        // Relative, and longer than the state lives, so no replica whose
        // clock is behind the store's (or the sealer's) outlives it.
        let lifetime = expires.saturating_sub(unix_now()) + CLOCK_SKEW_SECS;
        let mut spend = redis::cmd("EVAL");
        spend
            .arg(SPEND_SCRIPT)
            .arg(2)
            .arg(format!("{PREFIX}confirm:key"))
            .arg(format!("{PREFIX}confirm:spent:{nonce}"))
            .arg(hex(key))
            .arg(lifetime);
        match tokio::time::timeout(REQUEST_TIMEOUT, spend.query_async::<i64>(&mut connection)).await
        {
            Ok(Ok(1)) => true,
            Ok(Ok(0)) => false,
            Ok(Ok(_)) => {
                tracing::warn!(
                    "the confirmation key in the state store at {at} is not this replica's; \
                     the answer is asked again"
                );
                self.refresh().await;
                false
            }
            Ok(Err(error)) => {
                tracing::warn!(
                    "the state store at {at} could not spend an approval: {error}; the user is asked again"
                );
                false
            }
            Err(_) => {
                tracing::warn!(
                    "the state store at {at} did not answer in time; the user is asked again"
                );
                false
            }
        }
    }
}

/// Spends an approval only under the key its state was sealed with: 1
/// spent now, 0 spent before, -1 the store's key is another (or gone).
const SPEND_SCRIPT: &str = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end \
    if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[2]) then return 1 end return 0";

/// Stores a proposed sealing key unless there is one, and returns the one
/// there is, in one step.
const AGREE_SCRIPT: &str = "local key = redis.call('GET', KEYS[1]) if key then return key end \
    redis.call('SET', KEYS[1], ARGV[1]) return ARGV[1]";

/// How far apart the replicas' and the store's clocks may be without an
/// approval outliving its record of being spent.
const CLOCK_SKEW_SECS: u64 = 300;

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = match &self.backend {
            Backend::Local(_) => "this process",
            Backend::Redis { at, .. } => at,
        };
        f.debug_struct("StateStore")
            .field("at", &at)
            .finish_non_exhaustive()
    }
}

/// How long a 2025-11-25 session is kept in the store after its last use;
/// one used later is gone, and its client starts a new one (HTTP 404, as
/// the specification prescribes).
#[cfg(feature = "http")]
const SESSION_TTL_SECS: u64 = 3600;

/// The largest session handshake kept in the store. A client's
/// `initialize` is a few hundred bytes; this is for its capabilities and
/// name, not for whatever a request body may carry.
#[cfg(feature = "http")]
const MAX_SESSION_STATE_BYTES: usize = 16 * 1024;

#[cfg(feature = "http")]
fn session_key(id: &str) -> String {
    format!("{PREFIX}session:{id}")
}

/// `request`, given [`REQUEST_TIMEOUT`] to answer.
async fn within<T>(request: impl Future<Output = redis::RedisResult<T>>) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())),
    }
}

impl StateStore {
    /// The shared connection, and the address for messages.
    fn connection(&self) -> Option<(ConnectionManager, &str)> {
        match &self.backend {
            Backend::Redis { connection, at } => Some((connection.clone(), at)),
            Backend::Local(_) => None,
        }
    }
}

#[cfg(feature = "http")]
impl StateStore {
    /// The skills loaded and invoked in session `id` on any replica (and
    /// the session's lease renewed); `None` without a shared store or an
    /// answer from it.
    pub(crate) async fn session_skills(&self, id: &str) -> Option<(Vec<String>, Vec<String>)> {
        let (mut connection, at) = self.connection()?;
        let key = session_key(id);
        let mut pipe = redis::pipe();
        pipe.cmd("SMEMBERS").arg(format!("{key}:activated"));
        pipe.cmd("SMEMBERS").arg(format!("{key}:invoked"));
        for name in [
            key.clone(),
            format!("{key}:activated"),
            format!("{key}:invoked"),
        ] {
            pipe.cmd("EXPIRE").arg(name).arg(SESSION_TTL_SECS).ignore();
        }
        match within(pipe.query_async(&mut connection)).await {
            Ok(sets) => Some(sets),
            Err(why) => {
                tracing::warn!("the state store at {at} did not give a session's skills: {why}");
                None
            }
        }
    }

    /// Records `skill` in session `id`'s `list` (`activated` or
    /// `invoked`) for the other replicas.
    pub(crate) async fn add_session_skill(&self, id: &str, list: &str, skill: &str) {
        let Some((mut connection, at)) = self.connection() else {
            return;
        };
        let key = format!("{}:{list}", session_key(id));
        let mut pipe = redis::pipe();
        pipe.cmd("SADD").arg(&key).arg(skill).ignore();
        pipe.cmd("EXPIRE").arg(&key).arg(SESSION_TTL_SECS).ignore();
        if let Err(why) = within(pipe.query_async::<()>(&mut connection)).await {
            tracing::warn!("the state store at {at} did not record a session's skill: {why}");
        }
    }
}

/// 2025-11-25 sessions kept in a shared store, for rmcp: it stores a
/// session's handshake after `initialize`, and a replica that gets a
/// request for a session it does not hold loads it and replays the
/// handshake, so no balancer stickiness is needed.
#[cfg(feature = "http")]
pub(crate) struct SharedSessions(pub(crate) std::sync::Arc<StateStore>);

#[cfg(feature = "http")]
#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some((mut connection, _)) = self.0.connection() else {
            return Ok(None);
        };
        let mut get = redis::cmd("GETEX");
        get.arg(session_key(session_id))
            .arg("EX")
            .arg(SESSION_TTL_SECS);
        let stored: Option<String> = within(get.query_async(&mut connection)).await?;
        Ok(stored.map(|json| serde_json::from_str(&json)).transpose()?)
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let Some((mut connection, _)) = self.0.connection() else {
            return Ok(());
        };
        let json = serde_json::to_string(state)?;
        if json.len() > MAX_SESSION_STATE_BYTES {
            // Such a session lives on its replica alone (the balancer's
            // stickiness, if any, keeps it there), so no client fills the
            // store with handshakes.
            return Err(format!(
                "the session's handshake is {} bytes, over the {MAX_SESSION_STATE_BYTES} the shared store keeps",
                json.len()
            )
            .into());
        }
        let mut set = redis::cmd("SET");
        set.arg(session_key(session_id))
            .arg(json)
            .arg("EX")
            .arg(SESSION_TTL_SECS);
        within(set.query_async::<()>(&mut connection)).await?;
        Ok(())
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        let Some((mut connection, _)) = self.0.connection() else {
            return Ok(());
        };
        let key = session_key(session_id);
        let mut delete = redis::cmd("DEL");
        delete
            .arg(&key)
            .arg(format!("{key}:activated"))
            .arg(format!("{key}:invoked"));
        within(delete.query_async::<()>(&mut connection)).await?;
        Ok(())
    }
}

/// Approvals spent in this process, each kept until its state expires.
#[derive(Default)]
pub(crate) struct SpentNonces(Mutex<HashMap<String, u64>>);

impl SpentNonces {
    /// True the first time `nonce` is spent.
    pub(crate) fn spend(&self, nonce: &str, expires: u64) -> bool {
        let now = unix_now();
        let mut spent = self.0.lock().unwrap_or_else(|e| e.into_inner());
        spent.retain(|_, until| *until >= now);
        spent.insert(nonce.to_string(), expires).is_none()
    }
}

/// Stores `proposed` as the sealing key unless the store holds one, and
/// returns the one it holds.
async fn agree_on_key(
    connection: &mut ConnectionManager,
    proposed: &[u8; 32],
) -> Result<[u8; 32], String> {
    let name = format!("{PREFIX}confirm:key");
    let mut agree = redis::cmd("EVAL");
    agree.arg(AGREE_SCRIPT).arg(1).arg(&name).arg(hex(proposed));
    let stored: String = agree
        .query_async(connection)
        .await
        .map_err(|e| e.to_string())?;
    unhex(&stored).ok_or_else(|| {
        format!("{name} does not hold a key this host wrote; delete it and restart the replicas")
    })
}

/// Seconds since the Unix epoch, by this machine's clock.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn random_key() -> std::io::Result<[u8; 32]> {
    let mut key = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
    Ok(key)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<[u8; 32]> {
    let mut key = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, byte) in key.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(key)
}

/// `address` with anything that could hold a secret removed (`user:password@`,
/// however many `/` or `@` the password has, and any query), safe to print.
fn without_credentials(address: &str) -> String {
    let Some((scheme, rest)) = address.split_once("://") else {
        return "(not a URL)".into();
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_shown_without_credentials() {
        assert_eq!(
            without_credentials("redis://u:secret@db:6380/2"),
            "redis://db:6380/2"
        );
        assert_eq!(without_credentials("redis://db"), "redis://db");
        assert_eq!(without_credentials("redis://:pa/ss@db/1"), "redis://db/1");
        assert_eq!(
            without_credentials("redis+unix:///run/redis.sock?pass=secret&db=x"),
            "redis+unix:///run/redis.sock"
        );
        assert_eq!(without_credentials("secret"), "(not a URL)");
    }

    #[test]
    fn a_stored_key_reads_back_and_a_foreign_value_does_not() {
        let key = random_key().unwrap();
        assert_eq!(unhex(&hex(&key)), Some(key));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(&"g".repeat(64)), None);
    }

    #[test]
    fn a_local_nonce_is_spent_once() {
        let spent = SpentNonces::default();
        let later = unix_now() + 60;
        assert!(spent.spend("n1", later));
        assert!(!spent.spend("n1", later));
        assert!(spent.spend("n2", later));
    }
}
