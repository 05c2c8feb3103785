//! The ledger writer: the one actor that appends to `<state-dir>/ledger.jsonl`.
//!
//! Group commit: every `Append` waiting in the mailbox when a `Flush` runs goes out in one write
//! and one `fdatasync`, and nobody is answered before that returns. Checkpoints (signed with the
//! host key) are written after the entries they cover are synced, never before. At start the
//! writer recovers the file: a torn final line (a crash mid-append) is reported and truncated to
//! the last whole line; the file is verified; checkpoints a crash kept from being written are
//! written; the decisions are replayed into the board. The writer owns the board (every
//! decision as the ledger holds it, published for status and list) and hands out decision ids
//! from it: each synced entry is applied to it before its caller is answered. A ledger that fails verification is
//! not appended to (decisions are refused, naming the bad line); the rest of the daemon runs.
//! Must never rewrite or reorder a line.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;

use crate::ctx::SharedCtx;
use crate::decision::state::{Board, DecisionEvent, Refused};
use crate::directory::{Directory, Mailbox};
use crate::error::FleetError;
use crate::ledger::state::{Author, Entry, LedgerCore, SyncTimes, entries, resume, verify};
use crate::publish::Publisher;
use crate::types::DecisionId;

/// Largest ledger file the daemon reads at start.
pub const MAX_LEDGER_BYTES: u64 = 1 << 30;

pub enum LedgerMsg {
    Append {
        author: Author,
        event: DecisionEvent,
        reply: RpcReplyPort<Result<Entry, FleetError>>,
    },
    Flush,
    Status {
        reply: RpcReplyPort<LedgerStatus>,
    },
    /// Append the `open` of a new decision, under the next decision id the board hands out.
    Open {
        author: Author,
        open: NewDecision,
        reply: RpcReplyPort<Result<Entry, FleetError>>,
    },
    /// The positions refused on decision `decision` (kept in the store, not in the ledger) are
    /// now `refused`: the board shows them.
    Refused {
        decision: DecisionId,
        refused: Vec<Refused>,
        reply: RpcReplyPort<()>,
    },
}

/// A decision to open, before the ledger gives it its id.
#[derive(Debug)]
pub struct NewDecision {
    pub subject: String,
    pub slots: Vec<String>,
    /// RFC 3339.
    pub deadline: String,
    pub max_rounds: u32,
}

#[derive(Clone, Debug, Serialize)]
pub struct LedgerStatus {
    pub path: String,
    pub origin: String,
    pub entries: u64,
    pub head: String,
    pub broken: Option<String>,
    /// How long each batch's write and `fdatasync` took.
    pub syncs: SyncTimes,
}

pub struct LedgerArgs {
    pub ctx: SharedCtx,
    /// The board's one writer is the ledger writer.
    pub decisions: Publisher<Board>,
}

pub struct LedgerWriter;

/// An appended entry waiting for the next sync: the entry, its line, and who to answer.
type Pending = (Entry, String, RpcReplyPort<Result<Entry, FleetError>>);

pub struct LedgerState {
    ctx: SharedCtx,
    decisions: Publisher<Board>,
    path: PathBuf,
    core: Option<LedgerCore>,
    file: Arc<Mutex<Option<std::fs::File>>>,
    broken: Option<String>,
    pending: Vec<Pending>,
    flush_queued: bool,
    /// Signed checkpoints of synced entries, to be written first in the next write.
    unwritten_checkpoints: Vec<String>,
    syncs: SyncTimes,
}

/// The outcome of opening the ledger file at start.
struct Opened {
    file: Option<std::fs::File>,
    core: Option<LedgerCore>,
    broken: Option<String>,
    text: String,
}

fn sync_dir(path: &std::path::Path) {
    if let Some(d) = path.parent()
        && let Ok(f) = std::fs::File::open(d)
    {
        let _ = f.sync_all();
    }
}

/// Is the file at `path` (if it exists and is not empty) a fleetd ledger at all? Reads at most its
/// first 64 KiB: text, and a first line that is a JSON header. A ledger that is one but fails
/// verification further on is the ledger actor's to report (decisions are refused, the daemon
/// runs); a file that is not one must stop the daemon before it starts.
pub fn check_is_ledger(path: &std::path::Path) -> Result<(), String> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("it cannot be read: {e}")),
    };
    let meta = f
        .metadata()
        .map_err(|e| format!("it cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err("it is not a regular file".into());
    }
    let mut head = vec![];
    f.take(64 << 10)
        .read_to_end(&mut head)
        .map_err(|e| format!("it cannot be read: {e}"))?;
    if head.is_empty() {
        return Ok(());
    }
    let text = match std::str::from_utf8(&head) {
        Ok(t) => t,
        // A character cut by the 64 KiB window is fine; anything else is not text.
        Err(e) if e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).unwrap_or_default()
        }
        Err(e) => {
            return Err(format!(
                "it is not text (byte {} is not UTF-8)",
                e.valid_up_to()
            ));
        }
    };
    let first = text.split('\n').next().unwrap_or_default();
    if text.contains('\n') || meta.len() == head.len() as u64 {
        serde_json::from_str::<serde_json::Value>(first)
            .ok()
            .filter(|v| v.is_object())
            .map(|_| ())
            .ok_or_else(|| "its first line is not a ledger header (a JSON object)".to_string())
    } else {
        Err("its first line is over 64 KiB, so it is not a ledger header".into())
    }
}

/// Open (or create) the ledger: recover a torn tail, verify, write overdue checkpoints.
fn open_ledger(
    path: &std::path::Path,
    origin: &str,
    every: u64,
    key: &ed25519_dalek::SigningKey,
) -> std::io::Result<Opened> {
    use std::io::Read;
    let exists = path.metadata().map(|m| m.len() > 0).unwrap_or(false);
    if !exists {
        let (core, header) = LedgerCore::create(origin, every);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)?;
        f.write_all(format!("{header}\n").as_bytes())?;
        f.sync_all()?;
        sync_dir(path);
        tracing::info!(path = %path.display(), origin, "ledger created");
        return Ok(Opened {
            file: Some(f),
            core: Some(core),
            broken: None,
            text: String::new(),
        });
    }
    let len = path.metadata()?.len();
    if len > MAX_LEDGER_BYTES {
        return Ok(Opened {
            file: None,
            core: None,
            broken: Some(format!(
                "{} is {len} bytes, over the {MAX_LEDGER_BYTES}-byte limit the daemon reads; rotate it",
                path.display()
            )),
            text: String::new(),
        });
    }
    let mut bytes = vec![];
    std::fs::File::open(path)?
        .take(MAX_LEDGER_BYTES)
        .read_to_end(&mut bytes)?;
    let mut text = match String::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            tracing::error!(path = %path.display(), at, "the ledger is not text; decisions are refused until it is repaired");
            return Ok(Opened {
                file: None,
                core: None,
                broken: Some(format!(
                    "the ledger {} is not text (byte {at} is not UTF-8); check it with `fleetd ledger verify`",
                    path.display()
                )),
                text: String::new(),
            });
        }
    };
    if !text.ends_with('\n') {
        let keep = text.rfind('\n').map_or(0, |i| i + 1);
        tracing::warn!(
            path = %path.display(),
            torn_bytes = text.len() - keep,
            "the ledger's final line is torn (a crash during an append): truncating it to the last whole line"
        );
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(keep as u64)?;
        f.sync_all()?;
        text.truncate(keep);
    }
    let report = match verify(&text, Some(&key.verifying_key())) {
        Ok(r) => r,
        Err(bad) => {
            tracing::error!(path = %path.display(), %bad, "the ledger fails verification; decisions are refused until it is repaired");
            return Ok(Opened {
                file: None,
                core: None,
                broken: Some(format!(
                    "the ledger {} fails verification at {bad}",
                    path.display()
                )),
                text,
            });
        }
    };
    let mut core = resume(&report, &text);
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    let cps = core.checkpoints(key);
    if !cps.is_empty() {
        tracing::info!(
            count = cps.len(),
            "writing the checkpoints a crash kept from being written"
        );
        f.write_all(format!("{}\n", cps.join("\n")).as_bytes())?;
        f.sync_data()?;
    }
    Ok(Opened {
        file: Some(f),
        core: Some(core),
        broken: None,
        text,
    })
}

impl LedgerState {
    /// Queue an entry for the next group commit (or refuse it: the ledger is broken).
    fn append(
        &mut self,
        myself: &ActorRef<LedgerMsg>,
        author: Author,
        event: DecisionEvent,
        reply: RpcReplyPort<Result<Entry, FleetError>>,
    ) {
        let now = self.ctx.now();
        match (&self.broken, self.core.as_mut()) {
            (None, Some(core)) => {
                let (entry, line) = core.append(author, event, now);
                self.pending.push((entry, line, reply));
                if !self.flush_queued {
                    self.flush_queued = true;
                    let _ = myself.cast(LedgerMsg::Flush);
                }
            }
            (why, _) => {
                let why = why
                    .clone()
                    .unwrap_or_else(|| "the ledger is not open".into());
                let _ = reply.send(Err(FleetError::unavailable("the decision ledger", why)));
            }
        }
    }

    /// Write and sync everything waiting: first the checkpoints of the last synced batch, then
    /// the new entries; answer the entries' callers; then sign the checkpoints of these entries,
    /// to go out with the next write (a `Flush` is queued for them, so an idle ledger still gets
    /// them promptly). Checkpoints never precede, in the file or in time, the sync of what they
    /// cover; signing never delays a caller.
    async fn flush(&mut self, myself: &ActorRef<LedgerMsg>) {
        self.flush_queued = false;
        let checkpoints = std::mem::take(&mut self.unwritten_checkpoints);
        if self.pending.is_empty() && checkpoints.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        let mut buf =
            String::with_capacity(batch.iter().map(|(_, l, _)| l.len() + 1).sum::<usize>() + 512);
        for cp in &checkpoints {
            buf.push_str(cp);
            buf.push('\n');
        }
        for (_, line, _) in &batch {
            buf.push_str(line);
            buf.push('\n');
        }
        let file = self.file.clone();
        let written = tokio::task::spawn_blocking(move || -> std::io::Result<f64> {
            let mut g = file.lock().unwrap_or_else(|p| p.into_inner());
            let f = g
                .as_mut()
                .ok_or_else(|| std::io::Error::other("the ledger file is not open"))?;
            let start = std::time::Instant::now();
            f.write_all(buf.as_bytes())?;
            f.sync_data()?;
            Ok(start.elapsed().as_secs_f64())
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        let written = written.map(|seconds| self.syncs.observe(seconds));
        if let Err(e) = written {
            let why = format!("writing {} failed: {e}", self.path.display());
            tracing::error!(%why, "ledger write failed; decisions are refused from now on");
            self.broken = Some(why.clone());
            self.core = None;
            for (_, _, reply) in batch {
                let _ = reply.send(Err(FleetError::internal("the ledger append", why.clone())));
            }
            return;
        }
        // The board shows an entry once it is synced, and before its caller hears of it.
        self.decisions.modify(|board| {
            for (entry, _, _) in &batch {
                board.apply(entry);
            }
        });
        for (entry, _, reply) in batch {
            let _ = reply.send(Ok(entry));
        }
        // The entries are synced: their checkpoints may be signed now.
        let cps = self
            .core
            .as_mut()
            .map(|c| c.checkpoints(&self.ctx.host_key))
            .unwrap_or_default();
        if !cps.is_empty() {
            self.unwritten_checkpoints = cps;
            if !self.flush_queued {
                self.flush_queued = true;
                let _ = myself.cast(LedgerMsg::Flush);
            }
        }
    }
}

impl Actor for LedgerWriter {
    type Msg = LedgerMsg;
    type State = LedgerState;
    type Arguments = LedgerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LedgerMsg>,
        args: LedgerArgs,
    ) -> Result<LedgerState, ActorProcessingErr> {
        let ctx = args.ctx;
        let path = ctx.state_dir.join("ledger.jsonl");
        let (p2, origin, every, key) = (
            path.clone(),
            ctx.ledger_origin(),
            ctx.config().ledger.checkpoint_every,
            ctx.host_key.clone(),
        );
        let opened =
            tokio::task::spawn_blocking(move || open_ledger(&p2, &origin, every, &key)).await??;
        // Replay the decisions into the board, with the refusals the store kept.
        let refused = ctx
            .store
            .run(|s| s.load_refusals())
            .await
            .unwrap_or_default();
        args.decisions
            .publish(Board::replay(&entries(&opened.text), refused));
        ctx.dir.set_ledger(Some(Mailbox::new(
            myself.clone(),
            ctx.mailbox_cap(),
            "the ledger writer",
        )));
        Ok(LedgerState {
            ctx,
            decisions: args.decisions,
            path,
            core: opened.core,
            file: Arc::new(Mutex::new(opened.file)),
            broken: opened.broken,
            pending: vec![],
            flush_queued: false,
            unwritten_checkpoints: vec![],
            syncs: SyncTimes::default(),
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<LedgerMsg>,
        st: &mut LedgerState,
    ) -> Result<(), ActorProcessingErr> {
        // The pending entries, then the checkpoint that covers them.
        st.flush(&myself).await;
        st.flush(&myself).await;
        let file = st.file.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(f) = file.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                let _ = f.sync_all();
            }
        })
        .await;
        st.ctx.dir.remove_actor(myself.get_id());
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LedgerMsg>,
        msg: LedgerMsg,
        st: &mut LedgerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LedgerMsg::Append {
                author,
                event,
                reply,
            } => st.append(&myself, author, event, reply),
            LedgerMsg::Open {
                author,
                open,
                reply,
            } => {
                let mut id = DecisionId(0);
                if st.broken.is_none() && st.core.is_some() {
                    st.decisions.modify(|b| id = b.allocate());
                }
                let event = DecisionEvent::Open {
                    decision: id,
                    subject: open.subject,
                    slots: open.slots,
                    deadline: open.deadline,
                    max_rounds: open.max_rounds,
                };
                st.append(&myself, author, event, reply);
            }
            LedgerMsg::Refused {
                decision,
                refused,
                reply,
            } => {
                st.decisions.modify(|b| b.set_refused(decision, refused));
                let _ = reply.send(());
            }
            LedgerMsg::Flush => st.flush(&myself).await,
            LedgerMsg::Status { reply } => {
                let _ = reply.send(LedgerStatus {
                    path: st.path.display().to_string(),
                    origin: st
                        .core
                        .as_ref()
                        .map(|c| c.origin.clone())
                        .unwrap_or_else(|| st.ctx.ledger_origin()),
                    entries: st.core.as_ref().map(|c| c.seq).unwrap_or(0),
                    head: st
                        .core
                        .as_ref()
                        .map(|c| crate::ledger::state::hex(&c.head))
                        .unwrap_or_default(),
                    broken: st.broken.clone(),
                    syncs: st.syncs.clone(),
                });
            }
        }
        Ok(())
    }
}

/// How the ledger writer is found: the directory's entry for it, registered by the actor itself.
impl Directory {
    pub fn ledger(&self) -> Result<Mailbox<LedgerMsg>, FleetError> {
        self.get::<Mailbox<LedgerMsg>>("")
            .ok_or_else(|| FleetError::unavailable("the ledger writer", "it is restarting"))
    }
    pub fn set_ledger(&self, m: Option<Mailbox<LedgerMsg>>) {
        match m {
            Some(m) => self.set_mailbox("", m),
            None => self.remove::<Mailbox<LedgerMsg>>(""),
        }
    }
}
