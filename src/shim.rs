//! `fleetd mcp`, the shim an agent's MCP config launches: a pipe between the agent's stdio and
//! the daemon's `mcp.sock`, where the daemon's rmcp server speaks MCP with the agent directly
//! (identity from the socket's peer: the shim, in the member's process tree). The shim moves
//! newline-delimited messages and reads only their heads (`id`, `method`, a tool's name), so
//! that when the daemon restarts it can carry the session over: reconnect, replay the session's
//! `initialize` and `notifications/initialized` (the 2025-11-25 era; the 2026-07-28 era carries
//! its metadata on every request and needs no replay), resend what may safely be resent, and
//! answer the rest with an error that says it may or may not have taken effect.
//!
//! Owns the pipe's rules, as a pure core (`ShimCore`: lines and connection events in, effects
//! out, no I/O) and a thin tokio shell (`run`). Must never alter a message it forwards, never
//! answer for the daemon except when the connection broke, and never buffer without a bound.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetd_actors::backoff::Backoff;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

/// Tools that change nothing: safe to send again after the connection broke mid-call.
pub const READ_ONLY_TOOLS: &[&str] = &["fleet_whoami", "fleet_list", "fleet_status", "fleet_poll"];

/// Requests waiting for an answer (or for a connection), at most; more are answered with an
/// error at once.
pub const MAX_PENDING: usize = 1024;

/// A message is kept (to be sent again after a reconnect) only up to this size; a bigger one
/// that was cut off by a broken connection is answered with an error instead.
pub const KEEP_BYTES: usize = 1 << 20;

/// The id the shim gives its replayed `initialize` (the agent never sees it, nor its answer).
const REPLAY_ID_PREFIX: &str = "fleetd-shim-replay-";

/// What the core asks the shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Write this line (newline included) to the daemon. `seq` names what it is, so that a
    /// write that fails can be reported as never sent.
    ToServer { seq: u64, line: Vec<u8> },
    /// Write this line (newline included) to the agent.
    ToClient(Vec<u8>),
    /// Start connecting (with backoff, bounded); report `connected` or `gave_up`.
    Connect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conn {
    /// No connection; `connecting` says whether the shell is trying.
    Down {
        connecting: bool,
    },
    /// Connected; the replayed `initialize` is out and its answer awaited.
    Replaying,
    Up,
}

/// A message from the agent not yet done with: a request until its answer, anything else until
/// it is sent.
#[derive(Debug)]
struct Item {
    /// The request's id as JSON text (its key in `by_id`); `None` for notifications and
    /// answers to the daemon's requests.
    key: Option<String>,
    id: Option<Value>,
    /// The bytes, newline included, if small enough to keep.
    line: Option<Vec<u8>>,
    /// May it be sent again after it went out and the connection broke?
    retry: bool,
    sent: bool,
    /// For messages: `tools/call fleet_send`, `initialize`.
    what: String,
}

/// The head of a JSON-RPC message: enough to route it, nothing more.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    params: Option<ParamsHead>,
}

#[derive(Deserialize)]
struct ParamsHead {
    #[serde(default)]
    name: Option<IgnoredOrString>,
}

/// A tool's name, or anything else (then ignored).
#[derive(Deserialize)]
#[serde(untagged)]
enum IgnoredOrString {
    Name(String),
    #[allow(dead_code)]
    Other(IgnoredAny),
}

/// Without `params` (for a message whose `params` is not an object).
#[derive(Deserialize)]
struct BareHead {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<String>,
    #[allow(dead_code)]
    #[serde(default)]
    params: Option<IgnoredAny>,
}

struct Parsed {
    id: Option<Value>,
    method: Option<String>,
    tool: Option<String>,
}

fn parse(line: &[u8]) -> Option<Parsed> {
    if let Ok(h) = serde_json::from_slice::<Head>(line) {
        let tool = h.params.and_then(|p| match p.name {
            Some(IgnoredOrString::Name(n)) => Some(n),
            _ => None,
        });
        return Some(Parsed {
            id: h.id.filter(|v| !v.is_null()),
            method: h.method,
            tool,
        });
    }
    serde_json::from_slice::<BareHead>(line)
        .ok()
        .map(|h| Parsed {
            id: h.id.filter(|v| !v.is_null()),
            method: h.method,
            tool: None,
        })
}

fn key_of(id: &Value) -> String {
    id.to_string()
}

/// A JSON-RPC error answer to `id`, as one line.
pub fn error_line(id: &Value, message: &str) -> Vec<u8> {
    let mut v = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32603, "message": message},
    }))
    .unwrap_or_default();
    v.push(b'\n');
    v
}

/// The pipe's state (see the module doc).
#[derive(Debug)]
pub struct ShimCore {
    conn: Conn,
    /// What the agent sent that is not done with, in the order it came.
    items: BTreeMap<u64, Item>,
    by_id: HashMap<String, u64>,
    next_seq: u64,
    /// The session's `initialize` and `notifications/initialized`, for the replay.
    initialize: Option<Vec<u8>>,
    initialize_key: Option<String>,
    initialize_answered: bool,
    initialized: Option<Vec<u8>>,
    replays: u64,
    replay_key: Option<String>,
    /// The socket, for messages.
    socket: String,
}

impl ShimCore {
    /// A pipe not yet connected; `socket` names the daemon's socket in messages.
    pub fn new(socket: impl Into<String>) -> Self {
        ShimCore {
            conn: Conn::Down { connecting: false },
            items: BTreeMap::new(),
            by_id: HashMap::new(),
            next_seq: 0,
            initialize: None,
            initialize_key: None,
            initialize_answered: false,
            initialized: None,
            replays: 0,
            replay_key: None,
            socket: socket.into(),
        }
    }

    pub fn is_up(&self) -> bool {
        self.conn == Conn::Up
    }

    /// Requests waiting for an answer or a connection.
    pub fn pending(&self) -> usize {
        self.by_id.len()
    }

    fn push(&mut self, item: Item) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(k) = &item.key {
            self.by_id.insert(k.clone(), seq);
        }
        self.items.insert(seq, item);
        seq
    }

    /// A line sent at once and not kept (a notification, an answer, a replay).
    fn send_untracked(&mut self, line: Vec<u8>) -> Effect {
        let seq = self.next_seq;
        self.next_seq += 1;
        Effect::ToServer { seq, line }
    }

    fn want_connection(&mut self, out: &mut Vec<Effect>) {
        if self.conn == (Conn::Down { connecting: false }) {
            self.conn = Conn::Down { connecting: true };
            out.push(Effect::Connect);
        }
    }

    /// One line (newline included) from the agent.
    pub fn from_client(&mut self, line: &[u8]) -> Vec<Effect> {
        let mut out = vec![];
        let p = parse(line);
        let (id, method, tool) = match p {
            Some(p) => (p.id, p.method, p.tool),
            // Not JSON: the daemon answers it (a parse error); the shim only forwards it.
            None => (None, None, None),
        };
        let keep = (line.len() <= KEEP_BYTES).then(|| line.to_vec());
        match (&id, method.as_deref()) {
            (Some(id), Some(method)) => {
                let key = key_of(id);
                if self.by_id.len() >= MAX_PENDING || self.by_id.contains_key(&key) {
                    let why = if self.by_id.contains_key(&key) {
                        format!(
                            "refused by fleetd mcp: request id {key} is already in use by a request still waiting for its answer; accepted: a new id"
                        )
                    } else {
                        format!(
                            "refused by fleetd mcp: {MAX_PENDING} requests are already waiting for the daemon; accepted: this request again once some are answered"
                        )
                    };
                    out.push(Effect::ToClient(error_line(id, &why)));
                    return out;
                }
                let what = match (method, &tool) {
                    ("tools/call", Some(t)) => format!("tools/call {t}"),
                    (m, _) => m.to_string(),
                };
                let retry = match method {
                    "tools/call" => tool
                        .as_deref()
                        .is_some_and(|t| READ_ONLY_TOOLS.contains(&t)),
                    _ => true,
                };
                if method == "initialize" {
                    self.initialize = keep.clone();
                    self.initialize_key = Some(key.clone());
                    self.initialize_answered = false;
                }
                let seq = self.push(Item {
                    key: Some(key),
                    id: Some(id.clone()),
                    line: keep,
                    retry,
                    sent: false,
                    what,
                });
                self.send_or_wait(seq, line, &mut out);
            }
            (None, Some("notifications/initialized")) => {
                self.initialized = keep;
                if self.conn == Conn::Up {
                    out.push(self.send_untracked(line.to_vec()));
                }
                // Otherwise the replay after the reconnect sends it, after `initialize`.
            }
            (Some(_), None) if self.conn != Conn::Up => {
                // An answer to one of the daemon's requests: that request died with the
                // connection it came on.
            }
            _ => {
                // Notifications, answers, and what is not JSON: sent once, in order.
                if self.conn == Conn::Up {
                    out.push(self.send_untracked(line.to_vec()));
                } else if keep.is_some() && self.items.len() < MAX_PENDING {
                    self.push(Item {
                        key: None,
                        id: None,
                        line: keep,
                        retry: false,
                        sent: false,
                        what: method.unwrap_or_default(),
                    });
                    self.want_connection(&mut out);
                }
            }
        }
        out
    }

    fn send_or_wait(&mut self, seq: u64, line: &[u8], out: &mut Vec<Effect>) {
        if self.conn == Conn::Up {
            if let Some(i) = self.items.get_mut(&seq) {
                i.sent = true;
            }
            out.push(Effect::ToServer {
                seq,
                line: line.to_vec(),
            });
        } else {
            self.want_connection(out);
        }
    }

    /// One line (newline included) from the daemon.
    pub fn from_server(&mut self, line: &[u8]) -> Vec<Effect> {
        let mut out = vec![];
        let answer_to = parse(line).and_then(|p| match (p.id, p.method) {
            (Some(id), None) => Some(key_of(&id)),
            _ => None,
        });
        if let Some(key) = answer_to {
            if self.conn == Conn::Replaying && self.replay_key.as_deref() == Some(key.as_str()) {
                // The replayed initialize's answer: the agent already has one.
                self.replay_key = None;
                self.conn = Conn::Up;
                if let Some(n) = self.initialized.clone() {
                    out.push(self.send_untracked(n));
                }
                self.flush(&mut out);
                return out;
            }
            self.answered(&key);
        }
        out.push(Effect::ToClient(line.to_vec()));
        out
    }

    fn answered(&mut self, key: &str) {
        if let Some(seq) = self.by_id.remove(key) {
            self.items.remove(&seq);
            if self.initialize_key.as_deref() == Some(key) {
                self.initialize_answered = true;
            }
        }
    }

    /// A message from the daemon too big for the shell to hold, passed on as it came: its id
    /// (`bounded::find_id` of its first bytes), if it answers one of the agent's requests.
    pub fn passed_through_from_server(&mut self, answers: Option<&Value>) {
        if let Some(id) = answers {
            self.answered(&key_of(id));
        }
    }

    /// A message from the agent too big for the shell to hold, being passed on as it comes
    /// (only while up): tracked by its id, never resent.
    pub fn passing_through_from_client(&mut self, id: Option<&Value>) {
        match id {
            Some(id) if !self.by_id.contains_key(&key_of(id)) => {
                self.push(Item {
                    key: Some(key_of(id)),
                    id: Some(id.clone()),
                    line: None,
                    retry: false,
                    sent: true,
                    what: "a large request".into(),
                });
            }
            _ => self.next_seq += 1,
        }
    }

    /// Send everything not yet sent, in the order it came.
    fn flush(&mut self, out: &mut Vec<Effect>) {
        let mut done = vec![];
        for (seq, item) in self.items.iter_mut().filter(|(_, i)| !i.sent) {
            if let Some(line) = &item.line {
                out.push(Effect::ToServer {
                    seq: *seq,
                    line: line.clone(),
                });
                item.sent = true;
                if item.key.is_none() {
                    done.push(*seq);
                }
            }
        }
        for seq in done {
            self.items.remove(&seq);
        }
    }

    /// The connection broke. `unsent`: the message whose write failed (it never reached the
    /// daemon whole, so the daemon never acted on it).
    pub fn lost(&mut self, unsent: Option<u64>) -> Vec<Effect> {
        let mut out = vec![];
        if matches!(self.conn, Conn::Down { .. }) {
            return out;
        }
        self.conn = Conn::Down { connecting: false };
        self.replay_key = None;
        let mut dropped = vec![];
        for (seq, item) in self.items.iter_mut() {
            if !item.sent {
                continue;
            }
            let resend = item.line.is_some() && (item.retry || Some(*seq) == unsent);
            if resend {
                item.sent = false;
            } else {
                dropped.push(*seq);
            }
        }
        for seq in dropped {
            if let Some(item) = self.items.remove(&seq) {
                if let Some(k) = &item.key {
                    self.by_id.remove(k);
                }
                if let Some(id) = &item.id {
                    out.push(Effect::ToClient(error_line(
                        id,
                        &format!(
                            "the connection to the fleetd daemon broke during {} ; it may or may not have taken effect. \
                             fleet_poll and fleet_list show the current state; the next call reconnects.",
                            item.what
                        ),
                    )));
                }
            }
        }
        if !self.items.is_empty() {
            self.want_connection(&mut out);
        }
        out
    }

    /// The shell connected: replay the session's handshake (if it had one), then send what
    /// waits.
    pub fn connected(&mut self) -> Vec<Effect> {
        let mut out = vec![];
        let replay = match (&self.initialize, self.initialize_answered) {
            (Some(init), true) => Some(init.clone()),
            _ => None,
        };
        match replay.and_then(|init| {
            let mut v: Value = serde_json::from_slice(&init).ok()?;
            self.replays += 1;
            let id = format!("{REPLAY_ID_PREFIX}{}", self.replays);
            v["id"] = Value::String(id.clone());
            let mut line = serde_json::to_vec(&v).ok()?;
            line.push(b'\n');
            Some((key_of(&Value::String(id)), line))
        }) {
            Some((key, line)) => {
                self.conn = Conn::Replaying;
                self.replay_key = Some(key);
                out.push(self.send_untracked(line));
            }
            None => {
                self.conn = Conn::Up;
                self.flush(&mut out);
            }
        }
        out
    }

    /// The shell could not connect within its bound: answer everything waiting.
    pub fn gave_up(&mut self, why: &str) -> Vec<Effect> {
        let mut out = vec![];
        self.conn = Conn::Down { connecting: false };
        for (_, item) in std::mem::take(&mut self.items) {
            if let Some(id) = &item.id {
                out.push(Effect::ToClient(error_line(
                    id,
                    &format!(
                        "{} was not sent: the fleetd daemon is not reachable at {} ({why}). Is `fleetd serve` running with this state dir? The next call tries again.",
                        item.what, self.socket
                    ),
                )));
            }
        }
        self.by_id.clear();
        out
    }
}

// ---- the shell ---------------------------------------------------------------------------

/// The most bytes the shell holds of one message; a longer one is passed on as it comes.
const HOLD_BYTES: usize = 4 << 20;
/// Bytes queued for one writer before the shell stops reading the side that feeds it.
const QUEUE_BYTES: usize = 8 << 20;

/// A writer task: lines in order, with a byte budget the reader side checks. A failed write is
/// reported with the link's generation and the message's seq.
struct Writer {
    tx: mpsc::UnboundedSender<(u64, Vec<u8>)>,
    queued: Arc<AtomicUsize>,
}

impl Writer {
    fn spawn<W: AsyncWrite + Unpin + Send + 'static>(
        mut w: W,
        failed: Option<(u64, mpsc::UnboundedSender<(u64, u64)>)>,
    ) -> Writer {
        let (tx, mut rx) = mpsc::unbounded_channel::<(u64, Vec<u8>)>();
        let queued = Arc::new(AtomicUsize::new(0));
        let q = queued.clone();
        tokio::spawn(async move {
            while let Some((seq, line)) = rx.recv().await {
                let n = line.len();
                let ok = w.write_all(&line).await.is_ok() && w.flush().await.is_ok();
                q.fetch_sub(n, Ordering::Relaxed);
                if !ok {
                    if let Some((generation, f)) = &failed {
                        let _ = f.send((*generation, seq));
                    }
                    return;
                }
            }
        });
        Writer { tx, queued }
    }

    fn send(&self, seq: u64, line: Vec<u8>) {
        self.queued.fetch_add(line.len(), Ordering::Relaxed);
        let _ = self.tx.send((seq, line));
    }

    fn has_room(&self) -> bool {
        self.queued.load(Ordering::Relaxed) < QUEUE_BYTES
    }
}

/// Splits a byte stream into lines of at most `HOLD_BYTES`; past that, passes bytes through.
#[derive(Default)]
struct Lines {
    buf: Vec<u8>,
    /// Inside a message too long to hold: the rest of it goes straight through.
    passing: bool,
}

enum Piece {
    Line(Vec<u8>),
    /// The start of a message too long to hold (its first bytes, for its id).
    LongStart(Vec<u8>),
    /// More of it (`true` when this piece ends it).
    LongMore(Vec<u8>, bool),
}

impl Lines {
    fn feed(&mut self, bytes: &[u8], out: &mut Vec<Piece>) {
        let mut rest = bytes;
        while !rest.is_empty() {
            let nl = rest.iter().position(|&b| b == b'\n');
            if self.passing {
                let end = nl.map_or(rest.len(), |i| i + 1);
                out.push(Piece::LongMore(rest[..end].to_vec(), nl.is_some()));
                self.passing = nl.is_none();
                rest = &rest[end..];
                continue;
            }
            let take = nl.map_or(rest.len(), |i| i + 1);
            if self.buf.len() + take <= HOLD_BYTES {
                self.buf.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
                if nl.is_some() {
                    out.push(Piece::Line(std::mem::take(&mut self.buf)));
                }
                continue;
            }
            // Too long: hand over what is held, then pass the rest through.
            let room = HOLD_BYTES - self.buf.len();
            self.buf.extend_from_slice(&rest[..room]);
            out.push(Piece::LongStart(std::mem::take(&mut self.buf)));
            self.passing = true;
            rest = &rest[room..];
        }
    }
}

type Connecting = std::pin::Pin<Box<dyn std::future::Future<Output = Result<UnixStream, String>>>>;

fn connect(socket: PathBuf, reconnect_for: Duration) -> Connecting {
    Box::pin(async move {
        let deadline = tokio::time::Instant::now() + reconnect_for;
        // Failed connects in a row: the wait doubles from 50 ms to 2 s.
        const BACKOFF: Backoff = Backoff::new(50, 2_000);
        let mut failures = 0u32;
        loop {
            match UnixStream::connect(&socket).await {
                Ok(s) => return Ok(s),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let backoff = BACKOFF.delay(failures);
                    if tokio::time::Instant::now() + backoff > deadline {
                        return Err(format!("{e}; retried for {} s", reconnect_for.as_secs()));
                    }
                    tracing::debug!(error = %e, ?backoff, "daemon not reachable; retrying");
                    tokio::time::sleep(backoff).await;
                }
            }
        }
    })
}

/// One connection to the daemon.
struct Link {
    generation: u64,
    read: tokio::net::unix::OwnedReadHalf,
    writer: Writer,
    lines: Lines,
    /// A message from the daemon too long to hold is being passed to the agent.
    server_passing: bool,
}

/// The seq of bytes that are part of a message passed through (never reported as unsent).
const PASSED: u64 = u64::MAX;

/// Run the pipe between `client_in`/`client_out` (the agent's stdio) and the daemon at
/// `socket` until the agent closes its side.
pub async fn run<R, W>(
    socket: PathBuf,
    reconnect_for: Duration,
    mut client_in: R,
    client_out: W,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let mut core = ShimCore::new(socket.display().to_string());
    let to_client = Writer::spawn(client_out, None);
    let (failed_tx, mut failed_rx) = mpsc::unbounded_channel::<(u64, u64)>();
    let mut link: Option<Link> = None;
    let mut generation = 0u64;
    // The connection is made at once, as a server would be ready; what the agent sends
    // meanwhile waits for it.
    core.conn = Conn::Down { connecting: true };
    let mut connecting: Option<Connecting> = Some(connect(socket.clone(), reconnect_for));
    let mut client_lines = Lines::default();
    // A message from the agent too long to hold is being passed to this link generation.
    let mut client_passing: Option<u64> = None;
    let mut inbuf = vec![0u8; 64 << 10];
    let mut sockbuf = vec![0u8; 64 << 10];
    let mut pieces = vec![];
    let mut effects: std::collections::VecDeque<Effect> = Default::default();
    loop {
        let server_room = link.as_ref().is_none_or(|l| l.writer.has_room());
        tokio::select! {
            n = client_in.read(&mut inbuf), if server_room => {
                let n = match n {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => n,
                };
                client_lines.feed(&inbuf[..n], &mut pieces);
                for p in pieces.drain(..) {
                    match p {
                        Piece::Line(line) => effects.extend(core.from_client(&line)),
                        Piece::LongStart(head) => {
                            let id = crate::bounded::find_id(&head);
                            match link.as_ref().filter(|_| core.is_up()) {
                                Some(l) => {
                                    core.passing_through_from_client(id.as_ref());
                                    client_passing = Some(l.generation);
                                    l.writer.send(PASSED, head);
                                }
                                None => {
                                    client_passing = None;
                                    if let Some(id) = id {
                                        effects.push_back(Effect::ToClient(error_line(&id, "refused by fleetd mcp: this request is larger than the shim holds while the daemon is not connected; accepted: a smaller request, or this one again once the daemon is back")));
                                    }
                                }
                            }
                        }
                        Piece::LongMore(bytes, end) => {
                            if let Some(l) = link.as_ref().filter(|l| client_passing == Some(l.generation)) {
                                l.writer.send(PASSED, bytes);
                            }
                            if end {
                                client_passing = None;
                            }
                        }
                    }
                }
            }
            r = async {
                match link.as_mut() {
                    Some(l) => l.read.read(&mut sockbuf).await,
                    None => std::future::pending().await,
                }
            }, if to_client.has_room() => {
                match r {
                    Ok(n) if n > 0 => {
                        if let Some(l) = link.as_mut() {
                            l.lines.feed(&sockbuf[..n], &mut pieces);
                            for p in pieces.drain(..) {
                                match p {
                                    Piece::Line(line) => effects.extend(core.from_server(&line)),
                                    Piece::LongStart(head) => {
                                        let id = crate::bounded::find_id(&head);
                                        core.passed_through_from_server(id.as_ref());
                                        l.server_passing = true;
                                        to_client.send(PASSED, head);
                                    }
                                    Piece::LongMore(bytes, end) => {
                                        l.server_passing = !end;
                                        to_client.send(PASSED, bytes);
                                    }
                                }
                            }
                        }
                    }
                    _ => {
                        tracing::info!("daemon connection lost; reconnecting");
                        effects.extend(drop_link(&mut link, &to_client, &mut core, None));
                    }
                }
            }
            Some((g, seq)) = failed_rx.recv() => {
                if link.as_ref().is_some_and(|l| l.generation == g) {
                    tracing::info!("daemon connection lost (a write failed); reconnecting");
                    effects.extend(drop_link(&mut link, &to_client, &mut core, Some(seq)));
                }
            }
            done = async {
                match connecting.as_mut() {
                    Some(c) => c.await,
                    None => std::future::pending().await,
                }
            } => {
                connecting = None;
                match done {
                    Ok(stream) => {
                        generation += 1;
                        let (read, write) = stream.into_split();
                        link = Some(Link {
                            generation,
                            read,
                            writer: Writer::spawn(write, Some((generation, failed_tx.clone()))),
                            lines: Lines::default(),
                            server_passing: false,
                        });
                        effects.extend(core.connected());
                    }
                    Err(why) => effects.extend(core.gave_up(&why)),
                }
            }
        }
        while let Some(e) = effects.pop_front() {
            match e {
                Effect::ToServer { seq, line } => match link.as_ref() {
                    Some(l) => l.writer.send(seq, line),
                    // No connection to write to: the write never happened.
                    None => effects.extend(core.lost(Some(seq))),
                },
                Effect::ToClient(line) => to_client.send(PASSED, line),
                Effect::Connect => {
                    if connecting.is_none() {
                        connecting = Some(connect(socket.clone(), reconnect_for));
                    }
                }
            }
        }
    }
}

/// Forget the connection; a message from the daemon cut off mid-way is ended (the agent reads
/// one bad line, and then the error for its request).
fn drop_link(
    link: &mut Option<Link>,
    to_client: &Writer,
    core: &mut ShimCore,
    unsent: Option<u64>,
) -> Vec<Effect> {
    if let Some(l) = link.take()
        && l.server_passing
    {
        to_client.send(PASSED, b"\n".to_vec());
    }
    core.lost(unsent)
}

/// What kind of file one end of the agent's stdio is: a pipe or a socket (what agents give their
/// MCP servers) can be read and written without a thread hop, where tokio's stdin/stdout hand
/// each operation to the blocking pool; a terminal or a file cannot.
fn dup_if_pipe_or_socket<F: std::os::fd::AsFd>(fd: F) -> Option<(std::os::fd::OwnedFd, bool)> {
    use nix::sys::stat::SFlag;
    let owned = nix::unistd::dup(fd).ok()?;
    let st = nix::sys::stat::fstat(&owned).ok()?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind == SFlag::S_IFIFO {
        Some((owned, true))
    } else if kind == SFlag::S_IFSOCK {
        Some((owned, false))
    } else {
        None
    }
}

fn socket(fd: std::os::fd::OwnedFd) -> Option<UnixStream> {
    let s = std::os::unix::net::UnixStream::from(fd);
    s.set_nonblocking(true).ok()?;
    UnixStream::from_std(s).ok()
}

/// The agent's stdin, non-blocking when it can be.
fn stdin() -> Box<dyn AsyncRead + Unpin> {
    let fast: Option<Box<dyn AsyncRead + Unpin>> = dup_if_pipe_or_socket(std::io::stdin())
        .and_then(|(fd, fifo)| {
            if fifo {
                tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
                    .ok()
                    .map(|r| Box::new(r) as _)
            } else {
                socket(fd).map(|s| Box::new(s) as _)
            }
        });
    fast.unwrap_or_else(|| Box::new(tokio::io::stdin()))
}

/// The agent's stdout, non-blocking when it can be.
fn stdout() -> Box<dyn AsyncWrite + Unpin + Send> {
    let fast: Option<Box<dyn AsyncWrite + Unpin + Send>> = dup_if_pipe_or_socket(std::io::stdout())
        .and_then(|(fd, fifo)| {
            if fifo {
                tokio::net::unix::pipe::Sender::from_owned_fd(fd)
                    .ok()
                    .map(|w| Box::new(w) as _)
            } else {
                socket(fd).map(|s| Box::new(s) as _)
            }
        });
    fast.unwrap_or_else(|| Box::new(tokio::io::stdout()))
}

/// `fleetd mcp` on this process's stdio.
pub async fn run_stdio(socket: PathBuf, reconnect_for: Duration) -> anyhow::Result<()> {
    run(socket, reconnect_for, stdin(), stdout()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn line(v: Value) -> Vec<u8> {
        let mut l = serde_json::to_vec(&v).unwrap();
        l.push(b'\n');
        l
    }

    fn init(id: u64) -> Vec<u8> {
        line(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}),
        )
    }

    fn initialized() -> Vec<u8> {
        line(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    }

    fn call(id: u64, tool: &str) -> Vec<u8> {
        line(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": {"text": "x"}}}),
        )
    }

    fn answer(id: Value) -> Vec<u8> {
        line(serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {}}))
    }

    fn to_server(e: &[Effect]) -> Vec<Vec<u8>> {
        e.iter()
            .filter_map(|e| match e {
                Effect::ToServer { line, .. } => Some(line.clone()),
                _ => None,
            })
            .collect()
    }

    fn to_client(e: &[Effect]) -> Vec<Value> {
        e.iter()
            .filter_map(|e| match e {
                Effect::ToClient(l) => Some(serde_json::from_slice(l).unwrap()),
                _ => None,
            })
            .collect()
    }

    /// A core connected and past the 2025-11-25 handshake.
    fn session() -> ShimCore {
        let mut c = ShimCore::new("/s/mcp.sock");
        assert_eq!(c.from_client(&init(0)), vec![Effect::Connect]);
        let e = c.connected();
        assert_eq!(to_server(&e), vec![init(0)]);
        let e = c.from_server(&answer(0.into()));
        assert_eq!(to_client(&e).len(), 1);
        let e = c.from_client(&initialized());
        assert_eq!(to_server(&e), vec![initialized()]);
        c
    }

    #[test]
    fn messages_pass_unchanged_both_ways() {
        let mut c = session();
        let req = call(1, "fleet_send");
        assert_eq!(to_server(&c.from_client(&req)), vec![req]);
        assert_eq!(c.pending(), 1);
        let a = answer(1.into());
        let e = c.from_server(&a);
        assert_eq!(e, vec![Effect::ToClient(a)]);
        assert_eq!(c.pending(), 0);
        // What is not JSON goes through too; the daemon answers it.
        assert_eq!(
            to_server(&c.from_client(b"not json\n")),
            vec![b"not json\n".to_vec()]
        );
        let n = line(
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}),
        );
        assert_eq!(c.from_server(&n), vec![Effect::ToClient(n)]);
    }

    #[test]
    fn after_a_restart_the_handshake_is_replayed_and_reads_are_resent_but_writes_are_not() {
        let mut c = session();
        c.from_client(&call(1, "fleet_list"));
        c.from_client(&call(2, "fleet_send"));
        let e = c.lost(None);
        // The write may have happened: its caller is told so, at once.
        let told = to_client(&e);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0]["id"], 2);
        assert!(
            told[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("may or may not have taken effect")
        );
        assert!(e.contains(&Effect::Connect));
        let e = c.connected();
        // First the replayed initialize, under the shim's own id; nothing else yet.
        let sent = to_server(&e);
        assert_eq!(sent.len(), 1);
        let replay: Value = serde_json::from_slice(&sent[0]).unwrap();
        assert_eq!(replay["method"], "initialize");
        assert_eq!(replay["id"], "fleetd-shim-replay-1");
        assert_eq!(replay["params"]["clientInfo"]["name"], "t");
        // Its answer is the shim's, not the agent's; then initialized and the read go out.
        let e = c.from_server(&answer("fleetd-shim-replay-1".into()));
        assert!(to_client(&e).is_empty());
        assert_eq!(to_server(&e), vec![initialized(), call(1, "fleet_list")]);
        assert_eq!(
            c.from_server(&answer(1.into())),
            vec![Effect::ToClient(answer(1.into()))]
        );
        assert_eq!(c.pending(), 0);
    }

    #[test]
    fn a_write_that_never_left_is_resent() {
        let mut c = session();
        let e = c.from_client(&call(5, "fleet_send"));
        let Effect::ToServer { seq, .. } = e[0] else {
            panic!("{e:?}")
        };
        assert!(to_client(&c.lost(Some(seq))).is_empty());
        c.connected();
        let e = c.from_server(&answer("fleetd-shim-replay-1".into()));
        assert_eq!(to_server(&e), vec![initialized(), call(5, "fleet_send")]);
    }

    #[test]
    fn what_comes_while_down_waits_in_order_and_a_failed_reconnect_answers_it() {
        let mut c = session();
        c.lost(None);
        assert_eq!(c.from_client(&call(7, "fleet_send")), vec![Effect::Connect]);
        let n = line(
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}),
        );
        assert!(c.from_client(&n).is_empty());
        let e = c.gave_up("connection refused; retried for 30 s");
        let told = to_client(&e);
        assert_eq!(told.len(), 1, "the notification gets no answer");
        assert_eq!(told[0]["id"], 7);
        let msg = told[0]["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("/s/mcp.sock") && msg.contains("connection refused"),
            "{msg}"
        );
        // The next request tries again.
        assert_eq!(c.from_client(&call(8, "fleet_list")), vec![Effect::Connect]);
    }

    #[test]
    fn the_2026_era_needs_no_replay() {
        let mut c = ShimCore::new("/s");
        let discover = line(
            serde_json::json!({"jsonrpc": "2.0", "id": "a", "method": "server/discover", "params": {"_meta": {}}}),
        );
        c.from_client(&discover);
        c.connected();
        c.from_server(&answer("a".into()));
        c.from_client(&call(1, "fleet_whoami"));
        c.lost(None);
        let e = c.connected();
        assert_eq!(to_server(&e), vec![call(1, "fleet_whoami")]);
    }

    #[test]
    fn a_request_id_in_use_and_too_many_waiting_are_refused_without_sending() {
        let mut c = session();
        c.from_client(&call(1, "fleet_send"));
        let e = c.from_client(&call(1, "fleet_list"));
        assert!(to_server(&e).is_empty());
        assert!(
            to_client(&e)[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("already in use")
        );
        for i in 2..=MAX_PENDING as u64 {
            c.from_client(&call(i, "fleet_list"));
        }
        let e = c.from_client(&call(100_000, "fleet_list"));
        assert!(to_server(&e).is_empty());
        assert!(
            to_client(&e)[0]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("waiting")
        );
    }

    #[test]
    fn the_daemons_requests_and_their_answers_are_not_confused_with_the_agents() {
        let mut c = session();
        c.from_client(&call(1, "fleet_send"));
        // The daemon asks the agent something with the same id: it is not an answer.
        let ping = line(serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
        assert_eq!(c.from_server(&ping), vec![Effect::ToClient(ping)]);
        assert_eq!(c.pending(), 1);
        // The agent's answer to it goes to the daemon and is not tracked.
        let pong = answer(1.into());
        assert_eq!(to_server(&c.from_client(&pong)), vec![pong]);
        assert_eq!(c.pending(), 1);
    }

    #[test]
    fn lines_split_at_newlines_and_pass_long_messages_through() {
        let mut l = Lines::default();
        let mut out = vec![];
        l.feed(b"{\"a\":1}\n{\"b\"", &mut out);
        l.feed(b":2}\n", &mut out);
        let lines: Vec<Vec<u8>> = out
            .drain(..)
            .map(|p| match p {
                Piece::Line(l) => l,
                _ => panic!(),
            })
            .collect();
        assert_eq!(
            lines,
            vec![b"{\"a\":1}\n".to_vec(), b"{\"b\":2}\n".to_vec()]
        );
        let mut big = b"{\"id\":9,\"x\":\"".to_vec();
        big.resize(HOLD_BYTES + 10, b'a');
        big.extend_from_slice(b"\"}\nnext\n");
        l.feed(&big, &mut out);
        let mut total = 0;
        let mut saw_next = false;
        for p in out {
            match p {
                Piece::LongStart(h) => {
                    assert_eq!(h.len(), HOLD_BYTES);
                    assert_eq!(crate::bounded::find_id(&h), Some(9.into()));
                    total += h.len();
                }
                Piece::LongMore(b, end) => {
                    total += b.len();
                    assert!(end);
                }
                Piece::Line(l) => {
                    assert_eq!(l, b"next\n");
                    saw_next = true;
                }
            }
        }
        assert_eq!(total, big.len() - 5);
        assert!(saw_next);
    }

    proptest! {
        /// Whatever the order of events, every request the agent sent gets exactly one answer
        /// (the daemon's or the shim's), and nothing is sent on a connection that is down.
        #[test]
        fn every_request_is_answered_once(ops in proptest::collection::vec(0u8..7, 1..80)) {
            let mut c = ShimCore::new("/s");
            let mut up = false;
            let mut next_id = 0u64;
            // Sent to the daemon on the live connection and not yet answered by it.
            let mut on_wire: Vec<Value> = vec![];
            let mut answered: std::collections::BTreeMap<String, u32> = Default::default();
            let mut asked = 0u64;
            let mut replay: Option<Value> = None;
            let apply = |e: Vec<Effect>, up: bool, on_wire: &mut Vec<Value>, replay: &mut Option<Value>, answered: &mut std::collections::BTreeMap<String, u32>| {
                for e in e {
                    match e {
                        Effect::ToServer { line, .. } => {
                            assert!(up, "sent while down");
                            let v: Value = serde_json::from_slice(&line).unwrap();
                            if v.get("method").is_some() && v.get("id").is_some() {
                                if v["id"].as_str().is_some_and(|s| s.starts_with(REPLAY_ID_PREFIX)) {
                                    *replay = Some(v["id"].clone());
                                } else {
                                    on_wire.push(v["id"].clone());
                                }
                            }
                        }
                        Effect::ToClient(line) => {
                            let v: Value = serde_json::from_slice(&line).unwrap();
                            *answered.entry(v["id"].to_string()).or_default() += 1;
                        }
                        Effect::Connect => {}
                    }
                }
            };
            for op in ops {
                match op {
                    0 | 1 => {
                        let tool = if op == 0 { "fleet_list" } else { "fleet_send" };
                        let e = c.from_client(&call(next_id, tool));
                        next_id += 1;
                        asked += 1;
                        apply(e, up, &mut on_wire, &mut replay, &mut answered);
                    }
                    2 => {
                        if let Some(r) = replay.take() {
                            let e = c.from_server(&answer(r));
                            apply(e, up, &mut on_wire, &mut replay, &mut answered);
                        } else if !on_wire.is_empty() {
                            let id = on_wire.remove(0);
                            let e = c.from_server(&answer(id));
                            apply(e, up, &mut on_wire, &mut replay, &mut answered);
                        }
                    }
                    3 => {
                        if up {
                            up = false;
                            on_wire.clear();
                            replay = None;
                            let e = c.lost(None);
                            apply(e, up, &mut on_wire, &mut replay, &mut answered);
                        }
                    }
                    4 => {
                        if !up {
                            up = true;
                            let e = c.connected();
                            apply(e, up, &mut on_wire, &mut replay, &mut answered);
                        }
                    }
                    5 => {
                        if !up {
                            let e = c.gave_up("no");
                            apply(e, up, &mut on_wire, &mut replay, &mut answered);
                        }
                    }
                    _ => {
                        let e = c.from_client(&init(1_000_000 + next_id));
                        next_id += 1;
                        asked += 1;
                        apply(e, up, &mut on_wire, &mut replay, &mut answered);
                    }
                }
            }
            // Drain: connect, answer everything.
            if !up {
                let e = c.connected();
                up = true;
                apply(e, up, &mut on_wire, &mut replay, &mut answered);
            }
            for _ in 0..10_000 {
                if let Some(r) = replay.take() {
                    let e = c.from_server(&answer(r));
                    apply(e, up, &mut on_wire, &mut replay, &mut answered);
                } else if !on_wire.is_empty() {
                    let id = on_wire.remove(0);
                    let e = c.from_server(&answer(id));
                    apply(e, up, &mut on_wire, &mut replay, &mut answered);
                } else {
                    break;
                }
            }
            prop_assert_eq!(c.pending(), 0);
            prop_assert_eq!(answered.len() as u64, asked);
            for (id, n) in answered {
                prop_assert_eq!(n, 1, "{} answered {} times", id, n);
            }
        }
    }
}
