//! The optional loopback TCP listener of the REST API, bounded (issue 24): any local user can
//! connect to it, so what a connection may hold is limited before it has shown its token.
//!
//! Owns the listener ([`Listener`], what `axum::serve` accepts from) and each connection's
//! clocks ([`Conn`]): a connection is admitted only within `api.tcp_max_connections` in all and
//! `api.tcp_max_per_source` from its address (the count is `fleetd_core::admission`; an excess
//! connection gets a 503 naming the bound, if its buffer takes it, and is closed at once); one
//! that has not sent a correctly authenticated request within `api.tcp_auth_timeout_secs` is
//! closed, and so is one with nothing read or written for `api.tcp_idle_secs` while no request
//! of it is being served. The bearer token itself is checked by `rest`'s guard, which marks the
//! connection ([`ConnState::authenticated`]). Must never read or buffer anything of a refused
//! connection; the Unix socket `api.sock` is not bounded here (it is the operator's way in
//! while TCP is saturated).

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use fleetd_actors::admission::{Admission, AdmissionLimits};
use fleetd_actors::config::ApiConfig;
use fleetd_actors::error::FleetError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// How long a connection may take to authenticate, and stay idle.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    pub auth: Duration,
    pub idle: Duration,
}

/// The TCP listener with its bounds.
pub struct Listener {
    inner: TcpListener,
    admission: Arc<Mutex<Admission>>,
    timeouts: Timeouts,
    /// When a refusal was last logged (one line per second at most).
    logged: Option<Instant>,
}

impl Listener {
    pub fn new(inner: TcpListener, config: &ApiConfig) -> Self {
        Self::with(
            inner,
            config.tcp_admission(),
            Timeouts {
                auth: Duration::from_secs(config.tcp_auth_timeout_secs.max(1)),
                idle: Duration::from_secs(config.tcp_idle_secs.max(1)),
            },
        )
    }

    pub fn with(inner: TcpListener, limits: AdmissionLimits, timeouts: Timeouts) -> Self {
        Listener {
            inner,
            admission: Arc::new(Mutex::new(Admission::new(limits))),
            timeouts,
            logged: None,
        }
    }

    /// Connections held now.
    pub fn held(&self) -> usize {
        lock(&self.admission).total()
    }

    /// Tell an excess connection why, without waiting on it, and close it.
    fn refuse(&mut self, stream: TcpStream, from: SocketAddr, e: &FleetError) {
        let body = serde_json::json!({ "error": e }).to_string();
        let answer = format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        // Best effort: whatever the socket's buffer takes now; never a wait.
        let _ = stream.try_write(answer.as_bytes());
        drop(stream);
        let now = Instant::now();
        if self
            .logged
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            self.logged = Some(now);
            tracing::warn!(%from, why = %e.why, "a TCP connection refused (further refusals within a second are not logged)");
        }
    }
}

fn lock(a: &Mutex<Admission>) -> std::sync::MutexGuard<'_, Admission> {
    // The count is plain data: a panic elsewhere while holding it leaves it usable.
    a.lock().unwrap_or_else(|p| p.into_inner())
}

impl axum::serve::Listener for Listener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            // axum's accept retries errors itself (out of descriptors: a pause, then again).
            let (stream, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            let admitted = lock(&self.admission).admit(addr.ip());
            match admitted {
                Ok(()) => {
                    let conn = Conn::new(stream, addr.ip(), self.admission.clone(), self.timeouts);
                    return (conn, addr);
                }
                Err(e) => self.refuse(stream, addr, &e),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// What the REST layer tells a connection about itself.
#[derive(Debug, Default)]
pub struct ConnState {
    authenticated: AtomicBool,
    serving: AtomicUsize,
}

impl ConnState {
    /// A request on this connection carried the right token: its auth deadline is lifted.
    pub fn authenticated(&self) {
        self.authenticated.store(true, Ordering::Relaxed);
    }

    pub fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }

    /// A request is being served (a long wait, a stream): the connection is not idle until
    /// the guard is dropped.
    pub fn serving(self: &Arc<Self>) -> Serving {
        self.serving.fetch_add(1, Ordering::Relaxed);
        Serving(self.clone())
    }

    fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed) > 0
    }
}

/// See [`ConnState::serving`].
pub struct Serving(Arc<ConnState>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One admitted TCP connection: its socket, its place in the count (given back on drop) and
/// its deadlines, checked whenever it has nothing to read (a timer wakes it for that).
pub struct Conn {
    io: TcpStream,
    from: IpAddr,
    admission: Arc<Mutex<Admission>>,
    state: Arc<ConnState>,
    timeouts: Timeouts,
    opened: Instant,
    last: Instant,
    timer: Pin<Box<Sleep>>,
}

impl Conn {
    fn new(
        io: TcpStream,
        from: IpAddr,
        admission: Arc<Mutex<Admission>>,
        timeouts: Timeouts,
    ) -> Self {
        let now = Instant::now();
        Conn {
            io,
            from,
            admission,
            state: Arc::new(ConnState::default()),
            timeouts,
            opened: now,
            last: now,
            timer: Box::pin(tokio::time::sleep_until(now + timeouts.auth)),
        }
    }

    pub fn state(&self) -> Arc<ConnState> {
        self.state.clone()
    }

    /// The next deadline and what it is for; `None` while a request is served (and the
    /// connection has authenticated).
    fn deadline(&self) -> Option<(Instant, &'static str)> {
        let auth = (!self.state.is_authenticated()).then(|| {
            (
                self.opened + self.timeouts.auth,
                "no correctly authenticated request in time (api.tcp_auth_timeout_secs)",
            )
        });
        let idle = (!self.state.is_serving()).then(|| {
            (
                self.last + self.timeouts.idle,
                "idle too long (api.tcp_idle_secs)",
            )
        });
        match (auth, idle) {
            (Some(a), Some(i)) => Some(if a.0 <= i.0 { a } else { i }),
            (a, i) => a.or(i),
        }
    }

    /// Nothing to read now: the error that ends the connection if it is past a deadline;
    /// otherwise the timer is armed for the next one (and wakes this task then).
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<std::io::Error> {
        for _ in 0..4 {
            let (at, why) = self.deadline()?;
            if Instant::now() >= at {
                tracing::debug!(from = %self.from, why, "a TCP connection closed");
                return Some(std::io::Error::new(std::io::ErrorKind::TimedOut, why));
            }
            if self.timer.deadline() != at {
                self.timer.as_mut().reset(at);
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                return None;
            }
        }
        None
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        lock(&self.admission).release(self.from);
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.last = Instant::now();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.expired(cx) {
                Some(e) => Poll::Ready(Err(e)),
                None => Poll::Pending,
            },
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.last = Instant::now();
        }
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            this.last = Instant::now();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
