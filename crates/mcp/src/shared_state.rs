//! What replicas share so that any of them can answer any request: the key
//! that seals confirmation `requestState`s, and the approvals already
//! spent. Without a store one process keeps both, as one replica (or
//! replicas behind a sticky balancer) needs. With `serve --state
//! redis://…` they live in Redis or Valkey: every replica seals with one
//! key, so an approval answered through another replica counts, and
//! spends it with one atomic `SET NX`, so it counts once across them all.
//!
//! A store that cannot be reached fails closed: an approval that cannot
//! be spent is not taken (the user is asked again), and `/readyz` says
//! the replica is not ready.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, IntoConnectionInfo};

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
    #[cfg(feature = "http")]
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

    /// Whether other processes share this store.
    #[cfg(feature = "http")]
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

    /// Records the approval `nonce` as spent until `expires` (Unix
    /// seconds). True when this call spent it; false when it was spent
    /// before, or the store could not say (fail closed).
    pub(crate) async fn spend(&self, nonce: &str, expires: u64) -> bool {
        match &self.backend {
            Backend::Local(spent) => spent.spend(nonce, expires),
            Backend::Redis { connection, at } => {
                let mut connection = connection.clone();
                let mut command = redis::cmd("SET");
                command
                    .arg(format!("{PREFIX}confirm:spent:{nonce}"))
                    .arg(1)
                    .arg("NX")
                    .arg("EXAT")
                    .arg(expires.saturating_add(1));
                let set = command.query_async::<Option<String>>(&mut connection);
                match tokio::time::timeout(REQUEST_TIMEOUT, set).await {
                    Ok(Ok(reply)) => reply.is_some(),
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
    }
}

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

/// Approvals spent in this process, each kept until its state expires.
#[derive(Default)]
pub(crate) struct SpentNonces(Mutex<HashMap<String, u64>>);

impl SpentNonces {
    /// True the first time `nonce` is spent.
    pub(crate) fn spend(&self, nonce: &str, expires: u64) -> bool {
        let now = super::confirm::unix_now();
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
    let _: Option<String> = redis::cmd("SET")
        .arg(&name)
        .arg(hex(proposed))
        .arg("NX")
        .query_async(connection)
        .await
        .map_err(|e| e.to_string())?;
    let stored: String = redis::cmd("GET")
        .arg(&name)
        .query_async(connection)
        .await
        .map_err(|e| e.to_string())?;
    unhex(&stored).ok_or_else(|| {
        format!("{name} does not hold a key this host wrote; delete it and restart the replicas")
    })
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

/// `address` with any `user:password@` removed, safe to print.
fn without_credentials(address: &str) -> String {
    let Some((scheme, rest)) = address.split_once("://") else {
        return "(not a URL)".into();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{host}{path}")
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
        let later = super::super::confirm::unix_now() + 60;
        assert!(spent.spend("n1", later));
        assert!(!spent.spend("n1", later));
        assert!(spent.spend("n2", later));
    }
}
