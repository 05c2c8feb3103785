//! A decision record: one supervised actor per open decision. It checks each record and the
//! close against the decision core, has the ledger writer append (and sync) the accepted ones
//! before answering (the writer applies each synced entry to its board, which status and list
//! read), and records refused late positions where they stay visible (the store, then the
//! board). A restart rebuilds it from the board, which the ledger writer replays from the file.
//! Must never append without the core's consent, and never close a decision by itself.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::ctx::SharedCtx;
use crate::decision::state::{
    Decision, DecisionEvent, Refused, authorize_decide, authorize_position,
};
use crate::directory::{Directory, Mailbox};
use crate::error::{ErrorKind, FleetError};
use crate::events::EventKind;
use crate::ledger::actor::LedgerMsg;
use crate::ledger::appender::{Answer, Appender, NewDecision};
use crate::ledger::state::{Author, Entry, Prepared};
use crate::types::{Caller, DecisionId};

pub enum DecisionMsg {
    Record {
        caller: Caller,
        round: u32,
        abstain: bool,
        content: String,
        reply: RpcReplyPort<Result<Entry, FleetError>>,
    },
    Close {
        caller: Caller,
        verdict: String,
        rationale: String,
        reply: RpcReplyPort<Result<Entry, FleetError>>,
    },
    /// The deadline has passed (by the daemon's clock): say so, and which slots timed out.
    Deadline,
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
}

pub struct DecisionArgs {
    pub ctx: SharedCtx,
    pub id: DecisionId,
}

pub struct DecisionActor;

pub struct DecisionState {
    ctx: SharedCtx,
    d: Decision,
}

/// What `get` finds in the directory, waiting out the restart of the actor behind it.
async fn waited<X>(
    ctx: &SharedCtx,
    get: impl Fn(&Directory) -> Result<X, FleetError>,
) -> Result<X, FleetError> {
    match ctx
        .dir
        .wait_for(|d| get(d).ok(), Duration::from_secs(5))
        .await
    {
        Some(x) => Ok(x),
        None => get(&ctx.dir),
    }
}

/// The ledger writer, waiting out its restart.
async fn ledger(ctx: &SharedCtx) -> Result<Mailbox<LedgerMsg>, FleetError> {
    waited(ctx, Directory::ledger).await
}

/// The ledger's append path, waiting out its writer's restart.
async fn appender(ctx: &SharedCtx) -> Result<Arc<Appender>, FleetError> {
    waited(ctx, Directory::appender).await
}

/// How long an append may wait for its sync.
const APPEND_TIMEOUT: Duration = Duration::from_secs(30);

/// An append's answer, once its entry is synced (bounded by [`APPEND_TIMEOUT`]).
async fn synced(answer: Answer) -> Result<Entry, FleetError> {
    match tokio::time::timeout(APPEND_TIMEOUT, answer).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(FleetError::unavailable(
            "the decision ledger",
            "the ledger writer stopped before the append was synced",
        )),
        Err(_) => Err(FleetError::timeout(
            "an append to the decision ledger",
            format!("no sync within {} ms", APPEND_TIMEOUT.as_millis()),
            "the same request again; if it keeps timing out, see the daemon log",
        )),
    }
}

/// Append to the ledger and wait until the entry is synced.
pub async fn append(
    ctx: &SharedCtx,
    author: Author,
    event: DecisionEvent,
) -> Result<Entry, FleetError> {
    // Encoded and mostly hashed here, on the caller's task; the chain adds the rest.
    let entry = Prepared::new(author, event);
    let answer = appender(ctx).await?.append(entry);
    synced(answer).await
}

/// Open a decision: the ledger gives it the next id, appends and syncs its `open`.
pub async fn open(ctx: &SharedCtx, author: Author, open: NewDecision) -> Result<Entry, FleetError> {
    let answer = appender(ctx).await?.open(author, open);
    synced(answer).await
}

impl DecisionState {
    fn publish(&self, e: &Entry) {
        let (kind, slot, outcome) = match &e.event {
            DecisionEvent::Open { .. } => ("open", None, None),
            DecisionEvent::Position { slot, .. } => ("position", Some(slot.clone()), None),
            DecisionEvent::Abstain { slot, .. } => ("abstain", Some(slot.clone()), None),
            DecisionEvent::Close { outcome, .. } => ("close", None, Some(*outcome)),
        };
        self.ctx.events.emit(EventKind::Decision {
            decision: self.d.id,
            action: kind.into(),
            slot,
            outcome,
            ledger_seq: Some(e.seq),
        });
    }
}

impl Actor for DecisionActor {
    type Msg = DecisionMsg;
    type State = DecisionState;
    type Arguments = DecisionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<DecisionMsg>,
        args: DecisionArgs,
    ) -> Result<DecisionState, ActorProcessingErr> {
        let ctx = args.ctx;
        let id = args.id;
        // Rebuild from the ledger writer's board (the file's entries and the refusals the
        // store kept, as the writer replayed and has applied them since).
        let d = ctx
            .decision_view(id)
            .ok_or_else(|| FleetError::internal(format!("decision {id}"), "not in the ledger"))?;
        ctx.dir.set_decision(
            id,
            Mailbox::new(myself.clone(), ctx.mailbox_cap(), format!("decision {id}")),
        );
        Ok(DecisionState { ctx, d })
    }

    async fn post_start(
        &self,
        myself: ActorRef<DecisionMsg>,
        st: &mut DecisionState,
    ) -> Result<(), ActorProcessingErr> {
        // Wake at the deadline to say it has passed (and which slots timed out).
        let wait = st.d.deadline_ms.saturating_sub(st.ctx.now()) + 1;
        myself.send_after(Duration::from_millis(wait), || DecisionMsg::Deadline);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<DecisionMsg>,
        st: &mut DecisionState,
    ) -> Result<(), ActorProcessingErr> {
        st.ctx.dir.remove_decision(st.d.id, myself.get_id());
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<DecisionMsg>,
        msg: DecisionMsg,
        st: &mut DecisionState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            DecisionMsg::Record {
                caller,
                round,
                abstain,
                content,
                reply,
            } => {
                let what = format!("fleet_decision position on {}", st.d.id);
                let (author, slot) = match authorize_position(&caller, &what) {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                if let Err(e) = st.d.check_record(&slot, round, &content, now) {
                    if e.kind == ErrorKind::Late {
                        // Refused and kept visible: in the record, the store, the log and the events.
                        tracing::warn!(decision = %st.d.id, %slot, member = %author.member, round, why = %e.why, "late position refused");
                        st.d.refused.push(Refused {
                            slot: Some(slot.clone()),
                            member: author.member.clone(),
                            round,
                            at: now,
                            why: e.why.clone(),
                        });
                        let (id, refused) = (st.d.id, st.d.refused.clone());
                        if let Err(se) = st
                            .ctx
                            .store
                            .run(move |s| s.save_refusals(id, &refused))
                            .await
                        {
                            tracing::error!(error = %se, "could not persist a refused position");
                        }
                        let refused = st.d.refused.clone();
                        if let Ok(l) = ledger(&st.ctx).await {
                            let _ = l
                                .call(
                                    |reply| LedgerMsg::Refused {
                                        decision: id,
                                        refused,
                                        reply,
                                    },
                                    Duration::from_secs(5),
                                )
                                .await;
                        }
                        st.ctx.events.emit(EventKind::Decision {
                            decision: st.d.id,
                            action: "refused".into(),
                            slot: Some(slot),
                            outcome: None,
                            ledger_seq: None,
                        });
                    }
                    let _ = reply.send(Err(e));
                    return Ok(());
                }
                let event = if abstain {
                    DecisionEvent::Abstain {
                        decision: st.d.id,
                        slot,
                        round,
                        content,
                    }
                } else {
                    DecisionEvent::Position {
                        decision: st.d.id,
                        slot,
                        round,
                        content,
                    }
                };
                match append(&st.ctx, author, event).await {
                    Ok(e) => {
                        st.d.apply(&e);
                        st.publish(&e);
                        let _ = reply.send(Ok(e));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            DecisionMsg::Close {
                caller,
                verdict,
                rationale,
                reply,
            } => {
                let what = format!("fleet_decision close of {}", st.d.id);
                let author = match authorize_decide(&caller, &what) {
                    Ok(a) => a,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let (outcome, slots) = match st.d.check_close(now) {
                    Ok(x) => x,
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return Ok(());
                    }
                };
                let event = DecisionEvent::Close {
                    decision: st.d.id,
                    outcome,
                    slots,
                    verdict,
                    rationale,
                };
                match append(&st.ctx, author, event).await {
                    Ok(e) => {
                        st.d.apply(&e);
                        st.publish(&e);
                        tracing::info!(decision = %st.d.id, ?outcome, "decision closed");
                        let _ = reply.send(Ok(e));
                        myself.stop(Some("decision closed".into()));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            DecisionMsg::Deadline => {
                if now <= st.d.deadline_ms {
                    // Woken early (clock skew): look again at the deadline.
                    myself.send_after(Duration::from_millis(st.d.deadline_ms - now + 1), || {
                        DecisionMsg::Deadline
                    });
                } else if st.d.is_open() {
                    let missing = st.d.missing();
                    tracing::info!(decision = %st.d.id, timed_out = ?missing, "decision deadline passed");
                    st.ctx.events.emit(EventKind::Decision {
                        decision: st.d.id,
                        action: if missing.is_empty() {
                            "deadline".into()
                        } else {
                            format!("deadline: timed out {}", missing.join(", "))
                        },
                        slot: None,
                        outcome: None,
                        ledger_seq: None,
                    });
                }
            }
            DecisionMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in decision {}", st.d.id);
                }
            }
        }
        Ok(())
    }
}

/// How an open decision's record is found: the directory's entry under its id, registered by the actor itself.
impl Directory {
    pub fn decision(&self, key: DecisionId) -> Option<Mailbox<DecisionMsg>> {
        self.get(&key.to_string())
    }
    pub fn set_decision(&self, key: DecisionId, m: Mailbox<DecisionMsg>) {
        self.set_mailbox(&key.to_string(), m);
    }
    /// Remove `key`'s entry if it still points at actor `id`.
    pub fn remove_decision(&self, key: DecisionId, id: ractor::ActorId) {
        self.remove_if::<Mailbox<DecisionMsg>>(&key.to_string(), id);
    }
}
