//! The ledger writer: the one actor that owns `<state-dir>/ledger.jsonl`.
//!
//! Pipelined group commit, with the appends off this actor's mailbox: callers chain their entry
//! through the [`Appender`] it publishes in the directory, whose lock queues each line for the
//! disk thread (`writer.rs`), which writes and `fdatasync`s everything queued while the previous
//! write was in flight, as soon as that write returns: one write in flight at a time, so lines
//! reach the file in the order they were chained. Nobody is answered before the sync of the
//! write holding their entry returned (the thread answers them then). Checkpoints (signed with
//! the host key) are signed after the entries they cover are synced and written first in the
//! next write, never before. A failed write breaks the ledger: its callers, and every entry
//! chained after it, are refused, and nothing more is written. At start the writer recovers the
//! file: a torn final line (a crash mid-append) is reported and truncated to the last whole
//! line; the file is verified; checkpoints a crash kept from being written are written; the
//! decisions are replayed into the board. The ledger owns the board (every decision as the
//! ledger holds it, published for status and list) and hands out decision ids from it: each
//! synced entry is applied to it before its caller is answered. A ledger that fails
//! verification is not appended to (decisions are refused, naming the bad line); the rest of the
//! daemon runs. At stop the actor withdraws the append path, then writes and syncs everything
//! queued. Must never rewrite or reorder a line.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;

use crate::ctx::SharedCtx;
use crate::decision::state::{Board, Refused};
use crate::directory::{Directory, Mailbox};
use crate::error::FleetError;
use crate::ledger::appender::Appender;
use crate::ledger::state::{LedgerCore, SyncTimes, entries, resume, verify};
use crate::ledger::writer::Writer;
use crate::publish::Publisher;
use crate::types::DecisionId;

/// Largest ledger file the daemon reads at start.
pub const MAX_LEDGER_BYTES: u64 = 1 << 30;

pub enum LedgerMsg {
    Status {
        reply: RpcReplyPort<LedgerStatus>,
    },
    /// The positions refused on decision `decision` (kept in the store, not in the ledger) are
    /// now `refused`: the board shows them.
    Refused {
        decision: DecisionId,
        refused: Vec<Refused>,
        reply: RpcReplyPort<()>,
    },
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
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

pub struct LedgerState {
    ctx: SharedCtx,
    decisions: Publisher<Board>,
    path: PathBuf,
    /// The append path this run publishes (the chain's tip, the callers waiting for a sync).
    appender: Arc<Appender>,
    /// The disk thread (none if the ledger could not be opened).
    writer: Option<Writer>,
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
        // Where the disk thread starts: the last entry on disk, and the ledger's origin.
        let start = opened.core.as_ref().map(|c| (c.seq, c.origin.clone()));
        let appender = Arc::new(Appender::new(
            opened.core,
            opened.broken,
            args.decisions.clone(),
            ctx.clock.clone(),
            ctx.mailbox_cap(),
            path.display().to_string(),
        ));
        let writer = match (opened.file, start) {
            (Some(file), Some((entries, origin))) => {
                // The thread answers the callers itself; it holds the appender weakly, so a
                // writer that ends (or is dropped) is not kept alive by its own thread.
                let me = Arc::downgrade(&appender);
                let w = Writer::start(file, entries, origin, ctx.host_key.clone(), move |r| {
                    if let Some(a) = me.upgrade() {
                        a.report(r);
                    }
                })?;
                appender.started(w.pusher());
                Some(w)
            }
            _ => None,
        };
        let id = myself.get_id();
        ctx.dir.set_ledger(Some(Mailbox::new(
            myself.clone(),
            ctx.mailbox_cap(),
            "the ledger writer",
        )));
        ctx.dir.set("", Some(id), appender.clone());
        Ok(LedgerState {
            ctx,
            decisions: args.decisions,
            path,
            appender,
            writer,
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<LedgerMsg>,
        st: &mut LedgerState,
    ) -> Result<(), ActorProcessingErr> {
        // New appends wait for the next run; everything queued is written, then the checkpoints
        // that cover it, then the file is synced (the thread answers each caller as before).
        st.ctx.dir.remove_actor(myself.get_id());
        if let Some(w) = st.writer.take() {
            let end = tokio::task::spawn_blocking(move || w.finish())
                .await
                .unwrap_or_else(|e| Err((0, e.to_string())));
            if let Err((_, why)) = end {
                st.appender.failed(&why);
            }
        }
        st.appender.stopped();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<LedgerMsg>,
        msg: LedgerMsg,
        st: &mut LedgerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LedgerMsg::Refused {
                decision,
                refused,
                reply,
            } => {
                st.decisions.modify(|b| b.set_refused(decision, refused));
                let _ = reply.send(());
            }
            LedgerMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the ledger writer");
                }
            }
            LedgerMsg::Status { reply } => {
                let tip = st.appender.tip();
                let _ = reply.send(LedgerStatus {
                    path: st.path.display().to_string(),
                    origin: tip.origin.unwrap_or_else(|| st.ctx.ledger_origin()),
                    entries: tip.entries,
                    head: tip.head,
                    broken: tip.broken,
                    syncs: tip.syncs,
                });
            }
        }
        Ok(())
    }
}

/// How the ledger writer is found: the directory's entry for it, registered by the actor itself.
impl Directory {
    /// The ledger's append path, while its writer runs.
    pub fn appender(&self) -> Result<Arc<Appender>, FleetError> {
        self.get::<Arc<Appender>>("")
            .ok_or_else(|| FleetError::unavailable("the ledger writer", "it is restarting"))
    }
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
