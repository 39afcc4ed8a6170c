//! Workspace commits that take turns across replicas, in Redis
//! (`stage::SharedCommits`): a turn is a key with a lease, and the journal
//! a turn records is a hash beside it, with the bytes of every file.
//!
//! ```text
//! skillbox:commit:<workspace>:turn     the holder's random token, 10 s lease
//! skillbox:commit:<workspace>:journal  journal → the JSON; file:N → bytes
//! ```
//!
//! Every write checks the token in the same script, so a replica that lost
//! its turn (frozen past its lease) changes nothing in the store. A
//! thread renews the lease every 2 s for as long as the turn is held, so
//! a long step (a large file copied to NFS) keeps it; a process that is
//! frozen freezes that thread too, and the turn passes on.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use tokio::runtime::Handle;

use super::{PREFIX, hex, random_key};
use crate::sandbox::stage::{CommitTurn, SharedCommits};

/// How long a turn lasts without being renewed.
const LEASE: Duration = Duration::from_secs(10);
/// How long after its last confirmed renewal a holder stops writing: well
/// inside [`LEASE`], so it stops before another replica may take the turn.
const GIVE_UP: Duration = Duration::from_secs(7);
/// How often the holder's thread renews its turn.
const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long a commit waits for the turn before it gives up.
const WAIT: Duration = Duration::from_secs(30);
/// How often a waiting commit asks for the turn.
const POLL: Duration = Duration::from_millis(20);
/// How long one request may take; a file's bytes get more (below).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest file a commit is given time to fetch for: the default
/// workspace quota (a larger file gets no more time).
const LARGEST_FILE: usize = 256 << 20;

/// A script that runs `body` if the caller's token (ARGV[1]) still holds
/// the workspace's turn (KEYS[1]): 1, or 0.
fn guarded_script(body: &str) -> String {
    format!("if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end {body} return 1")
}

pub(crate) struct RedisCommits {
    pub(super) connection: ConnectionManager,
    pub(super) at: String,
    pub(super) runtime: Handle,
}

impl SharedCommits for RedisCommits {
    fn turn(&self, workspace: &str) -> io::Result<Box<dyn CommitTurn>> {
        let token = hex(&random_key()?);
        let key = format!("{PREFIX}commit:{workspace}");
        let mut turn = RedisTurn {
            store: Store {
                connection: self.connection.clone(),
                at: self.at.clone(),
                runtime: self.runtime.clone(),
                turn_key: format!("{key}:turn"),
                journal_key: format!("{key}:journal"),
                token,
            },
            held: Arc::new(Held {
                confirmed: Mutex::new(Instant::now()),
                lost: AtomicBool::new(false),
            }),
            renewing: None,
        };
        let deadline = Instant::now() + WAIT;
        loop {
            let asked = Instant::now();
            let mut take = redis::cmd("SET");
            take.arg(&turn.store.turn_key)
                .arg(&turn.store.token)
                .arg("NX")
                .arg("PX")
                .arg(LEASE.as_millis() as u64);
            let taken: Option<String> = turn.store.run(take, REQUEST_TIMEOUT)?;
            if taken.is_some() {
                *turn
                    .held
                    .confirmed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = asked;
                turn.renewing = Some(renew(turn.store.clone(), turn.held.clone())?);
                return Ok(Box::new(turn));
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "waited {} s for this workspace's turn to commit, which another replica \
                     holds; run the call again",
                    WAIT.as_secs()
                )));
            }
            std::thread::sleep(POLL);
        }
    }
}

struct RedisTurn {
    store: Store,
    held: Arc<Held>,
    /// Dropped to stop the thread that renews the turn.
    renewing: Option<mpsc::Sender<()>>,
}

/// What the holder and its renewing thread know of the turn.
struct Held {
    /// When the last request that confirmed the turn was sent.
    confirmed: Mutex<Instant>,
    /// Set once the store said the turn is another's (or no one's).
    lost: AtomicBool,
}

/// The store, as one turn uses it.
#[derive(Clone)]
struct Store {
    connection: ConnectionManager,
    at: String,
    runtime: Handle,
    turn_key: String,
    journal_key: String,
    token: String,
}

/// Starts the thread that renews the turn of `store` every
/// [`RENEW_EVERY`], recording what it learns in `held`, until the returned
/// sender is dropped or the turn is lost.
fn renew(store: Store, held: Arc<Held>) -> io::Result<mpsc::Sender<()>> {
    let (stop, stopped) = mpsc::channel::<()>();
    let lease = (LEASE.as_millis() as u64).to_string();
    let renewing = move || {
        while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(RENEW_EVERY) {
            let sent = Instant::now();
            let renewed = store.guarded(
                "redis.call('PEXPIRE', KEYS[1], ARGV[2])",
                &[lease.as_bytes()],
                REQUEST_TIMEOUT,
            );
            match renewed {
                Ok(()) => *held.confirmed.lock().unwrap_or_else(|e| e.into_inner()) = sent,
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    held.lost.store(true, Ordering::SeqCst);
                    return;
                }
                // The store may answer the next time; the holder stops
                // writing if it has not by GIVE_UP.
                Err(_) => {}
            }
        }
    };
    std::thread::Builder::new()
        .name("skillbox-commit-turn".into())
        .spawn(renewing)?;
    Ok(stop)
}

impl Store {
    /// Sends `request` and waits up to `timeout` for its answer, from the
    /// blocking thread a commit runs on.
    fn run<T: redis::FromRedisValue>(
        &self,
        request: redis::Cmd,
        timeout: Duration,
    ) -> io::Result<T> {
        let mut connection = self.connection.clone();
        let answer = self.runtime.block_on(async move {
            tokio::time::timeout(timeout, request.query_async::<T>(&mut connection)).await
        });
        let reached = match &answer {
            Ok(Err(error)) => {
                !(error.is_io_error()
                    || error.is_timeout()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal())
            }
            _ => true,
        };
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(self.failed(reached, &error.to_string())),
            Err(_) => Err(self.failed(false, &format!("no answer within {} s", timeout.as_secs()))),
        }
    }

    /// The log says where the store failed and how, in its own words; the
    /// client (and its model) learns what to do, and no address, user or
    /// command of the store.
    fn failed(&self, reached: bool, why: &str) -> io::Error {
        tracing::warn!(
            "the state store at {} failed a workspace commit's request: {why}",
            self.at
        );
        io::Error::other(if reached {
            "the shared state store refused a request of the commit (it may be out of memory, \
             or its user may not run the commands skillbox needs; the server's log says which)"
        } else {
            "the shared state store cannot be reached; run the call again once it is back"
        })
    }

    /// Runs `body` (Lua, with the journal's key as KEYS[2] and `args` from
    /// ARGV[2]) if the turn is still this replica's.
    fn guarded(&self, body: &str, args: &[&[u8]], timeout: Duration) -> io::Result<()> {
        let mut script = redis::cmd("EVAL");
        script
            .arg(guarded_script(body))
            .arg(2)
            .arg(&self.turn_key)
            .arg(&self.journal_key)
            .arg(&self.token);
        for arg in args {
            script.arg(*arg);
        }
        match self.run::<i64>(script, timeout)? {
            1 => Ok(()),
            _ => Err(lost()),
        }
    }
}

/// The turn passed on, or may have: an error of kind `PermissionDenied`.
fn lost() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "this replica's turn to commit ran out (it was paused or cut off from the state store), \
         and another replica may be committing",
    )
}

/// Time for a request that carries `bytes`: the usual, plus a second per
/// 16 MiB, for a store across a network.
fn carrying(bytes: usize) -> Duration {
    REQUEST_TIMEOUT + Duration::from_secs((bytes / (16 << 20)) as u64)
}

impl CommitTurn for RedisTurn {
    fn pending(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut get = redis::cmd("HGET");
        get.arg(&self.store.journal_key).arg("journal");
        let journal: Option<Vec<u8>> = self.store.run(get, REQUEST_TIMEOUT)?;
        if journal.is_none() {
            // Files stored by a turn that never recorded its journal.
            self.clear()?;
        }
        Ok(journal)
    }

    fn pending_file(&mut self, n: usize) -> io::Result<Option<Vec<u8>>> {
        let mut get = redis::cmd("HGET");
        get.arg(&self.store.journal_key).arg(format!("file:{n}"));
        self.store.run(get, carrying(LARGEST_FILE))
    }

    fn put_file(&mut self, n: usize, bytes: &[u8]) -> io::Result<()> {
        let field = format!("file:{n}");
        self.store.guarded(
            "redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])",
            &[field.as_bytes(), bytes],
            carrying(bytes.len()),
        )
    }

    fn record(&mut self, journal: &[u8]) -> io::Result<()> {
        self.store.guarded(
            "redis.call('HSET', KEYS[2], 'journal', ARGV[2])",
            &[journal],
            carrying(journal.len()),
        )
    }

    fn clear(&mut self) -> io::Result<()> {
        self.store
            .guarded("redis.call('DEL', KEYS[2])", &[], REQUEST_TIMEOUT)
    }

    fn keep(&mut self) -> io::Result<()> {
        let confirmed = *self
            .held
            .confirmed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if self.held.lost.load(Ordering::SeqCst) || confirmed.elapsed() >= GIVE_UP {
            return Err(lost());
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        self.store.guarded(
            "redis.call('DEL', KEYS[2]) redis.call('DEL', KEYS[1])",
            &[],
            REQUEST_TIMEOUT,
        )?;
        self.renewing = None;
        Ok(())
    }
}

impl Drop for RedisTurn {
    /// Gives the turn up, leaving any journal for the next turn; if the
    /// store cannot be told, the lease runs out instead.
    fn drop(&mut self) {
        // Unwinding (a runtime shutting down under a commit) asks nothing
        // of the store: the lease runs out instead.
        if self.renewing.take().is_some() && !std::thread::panicking() {
            let _ = self
                .store
                .guarded("redis.call('DEL', KEYS[1])", &[], REQUEST_TIMEOUT);
        }
    }
}
