//! The connections the HTTP endpoint holds, and who holds them.
//!
//! At most `max` connections are served in full, and no one address holds
//! more than its share of them, so one client (or one attacker) keeping
//! connections open cannot shut everyone else out. Past either cap a
//! connection is still taken, on a small lane of its own that answers the
//! probes (`/healthz`, `/readyz`) at once: a load balancer checking a busy
//! replica sees it alive, not dead. Any other request there waits up to
//! [`LANE_WAIT`] for a full place to free up, then is served in full, or
//! told why not. That lane is bounded too, per address and in all. Every
//! connection must send its first bytes within [`FIRST_BYTE_TIMEOUT`].

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Connections served at once by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// How long a new connection may take to send its first bytes.
pub(crate) const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections beyond the caps that are still answered (probes only).
const PROBE_LANE: usize = 16;
/// Of those, how many one address may hold.
const PROBE_LANE_PER_ADDRESS: usize = 2;
/// How long a request on the probe lane waits for a full place.
pub(crate) const LANE_WAIT: Duration = Duration::from_secs(30);

/// The address a connection came from, in each request's extensions as
/// `ConnectInfo<ClientAddr>`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub SocketAddr);

/// How a connection is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Everything.
    Full,
    /// The probes only, one request, then closed: the listener is full.
    ProbesOnlyListenerFull,
    /// The probes only, one request, then closed: this address holds its
    /// share.
    ProbesOnlyShareUsed,
}

/// The caps, from [`super::HttpOptions`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionCaps {
    pub max: usize,
    pub per_address: usize,
}

#[derive(Debug, Default)]
struct Counts {
    full: usize,
    probes: usize,
    full_by_address: HashMap<IpAddr, usize>,
    probes_by_address: HashMap<IpAddr, usize>,
}

/// What is open, shared by the listener and every connection it handed out.
#[derive(Debug)]
struct Ledger {
    caps: ConnectionCaps,
    counts: Mutex<Counts>,
    /// Bumped whenever a place frees up, for whoever waits for room.
    freed: tokio::sync::watch::Sender<u64>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn new(caps: ConnectionCaps) -> Self {
        Ledger {
            caps,
            counts: Mutex::new(Counts::default()),
            freed: tokio::sync::watch::channel(0).0,
        }
    }

    /// Which full-lane cap `ip` is at, if any.
    fn full_lane_for(&self, counts: &Counts, ip: IpAddr) -> Option<Lane> {
        let held = counts.full_by_address.get(&ip).copied().unwrap_or(0);
        if held >= self.caps.per_address {
            Some(Lane::ProbesOnlyShareUsed)
        } else if counts.full >= self.caps.max {
            Some(Lane::ProbesOnlyListenerFull)
        } else {
            None
        }
    }

    /// The lane a new connection from `ip` gets, counted; `None` to drop it.
    fn admit(&self, ip: IpAddr) -> Option<Lane> {
        let mut counts = self.lock();
        let Some(lane) = self.full_lane_for(&counts, ip) else {
            counts.full += 1;
            *counts.full_by_address.entry(ip).or_default() += 1;
            return Some(Lane::Full);
        };
        let on_probe_lane = counts.probes_by_address.get(&ip).copied().unwrap_or(0);
        if counts.probes >= PROBE_LANE || on_probe_lane >= PROBE_LANE_PER_ADDRESS {
            return None;
        }
        counts.probes += 1;
        *counts.probes_by_address.entry(ip).or_default() += 1;
        Some(lane)
    }

    fn release(&self, ip: IpAddr, lane: Lane) {
        let mut counts = self.lock();
        let (total, by_address) = match lane {
            Lane::Full => {
                let c = &mut *counts;
                (&mut c.full, &mut c.full_by_address)
            }
            _ => {
                let c = &mut *counts;
                (&mut c.probes, &mut c.probes_by_address)
            }
        };
        *total = total.saturating_sub(1);
        if let Some(n) = by_address.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                by_address.remove(&ip);
            }
        }
        drop(counts);
        self.freed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Moves a probe-lane connection from `ip` to the full lane if there
    /// is room; the lane that stops it otherwise.
    fn try_promote(&self, ip: IpAddr) -> Result<(), Lane> {
        let mut counts = self.lock();
        if let Some(lane) = self.full_lane_for(&counts, ip) {
            return Err(lane);
        }
        counts.probes = counts.probes.saturating_sub(1);
        if let Some(n) = counts.probes_by_address.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                counts.probes_by_address.remove(&ip);
            }
        }
        counts.full += 1;
        *counts.full_by_address.entry(ip).or_default() += 1;
        drop(counts);
        self.freed.send_modify(|n| *n = n.wrapping_add(1));
        Ok(())
    }

    /// Whether every slot of both lanes is taken.
    fn saturated(&self) -> bool {
        let counts = self.lock();
        counts.full >= self.caps.max && counts.probes >= PROBE_LANE
    }
}

/// A listener that serves connections within the caps and sorts the rest
/// onto the probe lane.
pub(crate) struct CappedListener {
    inner: TcpListener,
    ledger: Arc<Ledger>,
}

impl CappedListener {
    pub(crate) fn new(inner: TcpListener, caps: ConnectionCaps) -> Self {
        let caps = ConnectionCaps {
            max: caps.max.max(1),
            per_address: caps.per_address.clamp(1, caps.max.max(1)),
        };
        CappedListener {
            inner,
            ledger: Arc::new(Ledger::new(caps)),
        }
    }
}

impl axum::serve::Listener for CappedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedStream, SocketAddr) {
        loop {
            // With both lanes full, leave new connections in the kernel's
            // queue until one closes.
            let mut freed = self.ledger.freed.subscribe();
            while self.ledger.saturated() {
                let _ = freed.changed().await;
            }
            let (stream, addr) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                // Out of file descriptors and the like: wait, then retry.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Some(lane) = self.ledger.admit(addr.ip()) else {
                tracing::debug!(
                    "dropped a connection from {addr}: it holds its share of both lanes"
                );
                continue;
            };
            let _ = stream.set_nodelay(true);
            let place = Arc::new(Place {
                ledger: self.ledger.clone(),
                ip: addr.ip(),
                lane: Mutex::new(lane),
            });
            return (GuardedStream::new(stream, place), addr);
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection's place in the ledger, given back when it closes. It is
/// in each of the connection's requests' extensions.
#[derive(Debug)]
pub(crate) struct Place {
    ledger: Arc<Ledger>,
    ip: IpAddr,
    lane: Mutex<Lane>,
}

impl Place {
    pub(crate) fn lane(&self) -> Lane {
        *self.lane.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits up to `within` for a full-lane place for this connection;
    /// the lane that kept it out otherwise.
    pub(crate) async fn promote(&self, within: Duration) -> Result<(), Lane> {
        let mut freed = self.ledger.freed.subscribe();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match self.ledger.try_promote(self.ip) {
                Ok(()) => {
                    *self.lane.lock().unwrap_or_else(|e| e.into_inner()) = Lane::Full;
                    return Ok(());
                }
                Err(lane) => {
                    let waited = tokio::time::timeout_at(deadline, freed.changed()).await;
                    if waited.is_err() {
                        return Err(lane);
                    }
                }
            }
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.ledger.release(self.ip, self.lane());
    }
}

/// A connection that holds its place until it closes, and is dropped if it
/// sends nothing within [`FIRST_BYTE_TIMEOUT`].
pub(crate) struct GuardedStream {
    stream: TcpStream,
    place: Arc<Place>,
    first_byte: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl GuardedStream {
    fn new(stream: TcpStream, place: Arc<Place>) -> Self {
        GuardedStream {
            stream,
            place,
            first_byte: Some(Box::pin(tokio::time::sleep(FIRST_BYTE_TIMEOUT))),
        }
    }

    pub(crate) fn place(&self) -> Arc<Place> {
        self.place.clone()
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => self.first_byte = None,
            Poll::Pending => {
                if let Some(deadline) = self.first_byte.as_mut()
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client sent nothing in time",
                    )));
                }
            }
            _ => {}
        }
        polled
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// What a probe-lane connection answers to anything but a probe.
pub(crate) fn turned_away(lane: Lane, caps_hint: &str) -> (http::StatusCode, String) {
    let why = match lane {
        Lane::ProbesOnlyShareUsed => format!(
            "your address holds its share of this server's connections ({caps_hint}); close idle \
             connections or streams, or retry when one ends"
        ),
        _ => format!(
            "this server holds as many connections as it serves ({caps_hint}); retry shortly"
        ),
    };
    let status = match lane {
        Lane::ProbesOnlyShareUsed => http::StatusCode::TOO_MANY_REQUESTS,
        _ => http::StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, serde_json::json!({ "error": why }).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_holds_its_share_and_the_probe_lane_stays_open() {
        let ledger = Ledger::new(ConnectionCaps {
            max: 4,
            per_address: 2,
        });
        let greedy: IpAddr = "127.0.0.1".parse().unwrap();
        let other: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(ledger.admit(greedy), Some(Lane::Full));
        assert_eq!(ledger.admit(greedy), Some(Lane::Full));
        assert_eq!(ledger.admit(greedy), Some(Lane::ProbesOnlyShareUsed));
        assert_eq!(ledger.admit(greedy), Some(Lane::ProbesOnlyShareUsed));
        assert_eq!(ledger.admit(greedy), None, "its probe-lane share is used");
        assert_eq!(ledger.admit(other), Some(Lane::Full));
        assert_eq!(ledger.admit(other), Some(Lane::Full));
        let third: IpAddr = "127.0.0.3".parse().unwrap();
        assert_eq!(ledger.admit(third), Some(Lane::ProbesOnlyListenerFull));
        assert_eq!(ledger.try_promote(third), Err(Lane::ProbesOnlyListenerFull));
        ledger.release(greedy, Lane::Full);
        assert_eq!(ledger.try_promote(third), Ok(()));
        assert_eq!(ledger.admit(third), Some(Lane::ProbesOnlyListenerFull));
    }
}
