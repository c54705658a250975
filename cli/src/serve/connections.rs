//! What both of the server's listeners (the REST API and the executor gateway) do with connections,
//! so that clients that connect and send nothing, or trickle, cannot take the server's descriptors:
//!
//! - at most [`ConnectionLimits::max_open`] connections at once, and at most
//!   [`ConnectionLimits::max_per_address`] from one address. A connection past either ceiling is still
//!   accepted, and the least recently active connection (of that address, or of all) is closed to
//!   make room: the server keeps accepting, and a flood from one address churns only its own
//!   connections (a health probe from the same address still gets in);
//! - a connection with no traffic either way for [`ConnectionLimits::idle`] is closed;
//! - the REST listener gives a client [`ConnectionLimits::header_read`] to send a request's headers
//!   (hyper's own timeout; see `http.rs`), which ends a slow trickle of header lines.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The limits on one listener's connections; one typed struct, defaulted from the process's
/// descriptor limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_open: usize,
    pub max_per_address: usize,
    pub idle: Duration,
    pub header_read: Duration,
}

impl ConnectionLimits {
    /// For a listener of this process: of the descriptors the process may open (`RLIMIT_NOFILE`),
    /// a third to each of the two listeners, the rest for the database pool, files and logs; a
    /// quarter of that from one address.
    pub fn for_this_process() -> Self {
        let descriptors =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .map_or(1024, |(soft, _)| soft)
                .min(1 << 20);
        let max_open = usize::try_from(descriptors / 3).unwrap_or(1 << 18).max(32);
        ConnectionLimits {
            max_open,
            max_per_address: (max_open / 4).max(8),
            idle: Duration::from_secs(300),
            header_read: Duration::from_secs(10),
        }
    }
}

/// Counts a listener's open connections and closes the least recently active one when a new one
/// would pass a ceiling.
#[derive(Debug, Clone)]
pub struct Gate {
    limits: ConnectionLimits,
    started: Instant,
    open: Arc<Mutex<Open>>,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    connections: HashMap<u64, Entry>,
    per_address: HashMap<IpAddr, usize>,
    /// Connections closed to make room, for a log line now and then.
    evicted: u64,
}

#[derive(Debug)]
struct Entry {
    address: IpAddr,
    last_active_ms: Arc<AtomicU64>,
    close: CancellationToken,
}

impl Gate {
    pub fn new(limits: ConnectionLimits) -> Self {
        Gate {
            limits,
            started: Instant::now(),
            open: Arc::default(),
        }
    }

    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// Admits a connection from `address`: `stream` wrapped so that it closes when idle, when the
    /// gate makes room, and frees its place when dropped.
    pub fn admit<S>(&self, stream: S, address: IpAddr) -> Guarded<S> {
        let last_active_ms = Arc::new(AtomicU64::new(self.now_ms()));
        let close = CancellationToken::new();
        let id = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let from_address = open.per_address.get(&address).copied().unwrap_or(0);
            if from_address >= self.limits.max_per_address {
                open.evict(Some(address));
            } else if open.connections.len() >= self.limits.max_open {
                open.evict(None);
            }
            let id = open.next_id;
            open.next_id += 1;
            open.connections.insert(
                id,
                Entry {
                    address,
                    last_active_ms: last_active_ms.clone(),
                    close: close.clone(),
                },
            );
            *open.per_address.entry(address).or_insert(0) += 1;
            if open.evicted > 0 && open.evicted.is_power_of_two() {
                tracing::warn!(
                    evicted = open.evicted,
                    open = open.connections.len(),
                    max_open = self.limits.max_open,
                    max_per_address = self.limits.max_per_address,
                    "connections at their ceiling: closing the least recently active ones"
                );
            }
            id
        };
        Guarded {
            inner: stream,
            idle: self.limits.idle,
            idle_timer: Box::pin(tokio::time::sleep(self.limits.idle)),
            closed: Box::pin(close.cancelled_owned()),
            last_active_ms,
            started: self.started,
            place: Place {
                gate: self.clone(),
                id,
            },
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    #[cfg(test)]
    fn open(&self) -> (usize, usize) {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        (open.connections.len(), open.per_address.len())
    }
}

impl Open {
    /// Closes the least recently active connection (of `address`, if given) and forgets it.
    fn evict(&mut self, address: Option<IpAddr>) {
        let oldest = self
            .connections
            .iter()
            .filter(|(_, entry)| address.is_none_or(|a| entry.address == a))
            .min_by_key(|(id, entry)| (entry.last_active_ms.load(Ordering::Relaxed), **id))
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.forget(id);
            self.evicted += 1;
        }
    }

    fn forget(&mut self, id: u64) {
        if let Some(entry) = self.connections.remove(&id) {
            entry.close.cancel();
            if let Some(count) = self.per_address.get_mut(&entry.address) {
                *count -= 1;
                if *count == 0 {
                    self.per_address.remove(&entry.address);
                }
            }
        }
    }
}

/// A connection's place at its gate, given back when the connection is dropped.
#[derive(Debug)]
struct Place {
    gate: Gate,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut open = self.gate.open.lock().unwrap_or_else(|e| e.into_inner());
        open.forget(self.id);
    }
}

/// A connection that fails (`TimedOut`) after its idle time without traffic either way, and
/// (`ConnectionAborted`) when its gate closes it to make room.
pub struct Guarded<S> {
    inner: S,
    idle: Duration,
    idle_timer: Pin<Box<tokio::time::Sleep>>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    last_active_ms: Arc<AtomicU64>,
    started: Instant,
    place: Place,
}

impl<S> std::fmt::Debug for Guarded<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("id", &self.place.id)
            .finish_non_exhaustive()
    }
}

impl<S> Guarded<S> {
    fn active(&mut self) {
        let now = tokio::time::Instant::now();
        self.idle_timer.as_mut().reset(now + self.idle);
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active_ms.store(ms, Ordering::Relaxed);
    }

    /// Whether the connection must end now: made room for, or idle too long.
    fn ended(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        if self.closed.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for another connection",
            ));
        }
        if self.idle_timer.as_mut().poll(cx).is_ready() {
            return Some(io::Error::new(
                io::ErrorKind::TimedOut,
                "no traffic for the idle timeout",
            ));
        }
        None
    }
}

use std::future::Future;

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.active();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => match self.ended(cx) {
                Some(err) => Poll::Ready(Err(err)),
                None => Poll::Pending,
            },
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(err) = self.ended(cx) {
            return Poll::Ready(Err(err));
        }
        let written = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(written, Poll::Ready(Ok(n)) if n > 0) {
            self.active();
        }
        written
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Guarded<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// The gate's connections from a listener, as a stream tonic serves: accept errors (out of
/// descriptors) are logged and retried after a pause rather than ending the listener.
pub fn gated(
    listener: tokio::net::TcpListener,
    gate: Gate,
) -> impl futures::Stream<Item = io::Result<Guarded<tokio::net::TcpStream>>> {
    futures::stream::unfold((listener, gate), |(listener, gate)| async move {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    // Commands and reports go out when written, not held for an acknowledgement.
                    let _ = stream.set_nodelay(true);
                    let guarded = gate.admit(stream, peer.ip());
                    return Some((Ok(guarded), (listener, gate)));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot accept a connection; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    fn limits(max_open: usize, max_per_address: usize, idle_ms: u64) -> ConnectionLimits {
        ConnectionLimits {
            max_open,
            max_per_address,
            idle: Duration::from_millis(idle_ms),
            header_read: Duration::from_secs(10),
        }
    }

    fn address(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[tokio::test]
    async fn past_the_ceiling_the_least_recently_active_connection_makes_room() {
        let gate = Gate::new(limits(2, 8, 60_000));
        let (a, mut a_peer) = duplex(64);
        let (b, _b_peer) = duplex(64);
        let (c, _c_peer) = duplex(64);
        let mut first = gate.admit(a, address(1));
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _second = gate.admit(b, address(2));
        tokio::time::sleep(Duration::from_millis(5)).await;
        // The first one talks, so the second is now the least recently active.
        a_peer.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        first.read_exact(&mut byte).await.unwrap();
        let mut second = _second;
        let _third = gate.admit(c, address(3));
        assert_eq!(gate.open(), (2, 2));
        let err = second.read(&mut byte).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
        // The first one still works.
        a_peer.write_all(b"y").await.unwrap();
        first.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
    }

    #[tokio::test]
    async fn one_address_churns_only_its_own_connections() {
        let gate = Gate::new(limits(100, 2, 60_000));
        let mut peers = Vec::new();
        let mut flood = Vec::new();
        for _ in 0..2 {
            let (stream, peer) = duplex(64);
            peers.push(peer);
            flood.push(gate.admit(stream, address(9)));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let (other, _other_peer) = duplex(64);
        let mut other = gate.admit(other, address(1));
        let (probe, _probe_peer) = duplex(64);
        let _probe = gate.admit(probe, address(9));
        assert_eq!(gate.open(), (3, 2));
        let mut byte = [0u8; 1];
        let err = flood[0].read(&mut byte).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
        // Another address's connection was not touched.
        let pending = tokio::time::timeout(Duration::from_millis(20), other.read(&mut byte)).await;
        assert!(pending.is_err(), "still open, waiting for data");
    }

    #[tokio::test]
    async fn a_connection_without_traffic_closes_after_its_idle_time_and_frees_its_place() {
        let gate = Gate::new(limits(10, 10, 50));
        let (stream, _peer) = duplex(64);
        let mut idle = gate.admit(stream, address(1));
        let mut byte = [0u8; 1];
        let err = idle.read(&mut byte).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(idle);
        assert_eq!(gate.open(), (0, 0));
    }

    #[test]
    fn the_defaults_leave_descriptors_for_the_rest_of_the_process() {
        let limits = ConnectionLimits::for_this_process();
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert!(
            (limits.max_open as u64) * 2 < soft.max(96),
            "{limits:?} under {soft}"
        );
        assert!(limits.max_per_address < limits.max_open);
    }
}
