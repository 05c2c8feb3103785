//! The injector shell: one per target. Persists every receipt before anyone hears of it, hands
//! deliveries to the target's slot, and turns "turn ended" into a transcript tail for the
//! ticket. Must never decide when to deliver: the core does.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::ctx::SharedCtx;
use crate::directory::{Directory, Mailbox};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::injector::state::{Effect, Injector, InjectorLimits, ReceiptState};
use crate::slot::actor::SlotMsg;
use crate::store::Batch;
use crate::tickets::actor::DeskMsg;
use crate::tickets::state::Ticket;
use crate::timer::Timer;
use crate::types::{MemberName, Status, TicketId, Written};

pub use crate::injector::msg::{InjectorMsg, QueueView};

pub struct InjectorArgs {
    pub ctx: SharedCtx,
    pub target: MemberName,
}

pub struct InjectorActor;

pub struct InjectorActorState {
    ctx: SharedCtx,
    core: Injector,
    timer: Timer,
    closed: bool,
    /// A ticket to commit with the next batch (see `InjectorMsg::Enqueue`).
    ride_along: Option<Ticket>,
}

fn limits(ctx: &SharedCtx) -> InjectorLimits {
    let c = ctx.config();
    InjectorLimits {
        max_queue: c.injector.max_queue,
        accept_timeout_ms: c.injector.accept_timeout_ms,
    }
}

impl InjectorActorState {
    /// A message recorded as delivered before a restart: ask the target's slot (which has the
    /// terminal host's record) whether it was written, and act on the answer.
    async fn resolve(&mut self) -> Result<(), FleetError> {
        let Some(msg) = self.core.unresolved().cloned() else {
            return Ok(());
        };
        let Some(slot) = self.ctx.dir.slot(self.core.target()) else {
            // The slot will announce itself (a Target message), and this runs again then.
            return Ok(());
        };
        let id = msg.id;
        let written = slot
            .call(
                |reply| SlotMsg::Resolve {
                    msg: Box::new(msg),
                    reply,
                },
                Duration::from_secs(5),
            )
            .await
            .unwrap_or_else(|e| Written::Unknown(format!("its slot did not answer ({})", e.why)));
        tracing::info!(target = %self.core.target(), msg = %id, ?written, "a delivery from before the restart resolved");
        let now = self.ctx.now();
        let fx = self.core.resolve(id, written, now);
        self.perform(fx).await
    }

    /// Perform effects in order; consecutive saves are committed together, and always before
    /// the effect that follows them.
    async fn perform(&mut self, fx: Vec<Effect>) -> Result<(), FleetError> {
        let mut batch = Batch::default();
        for e in fx {
            match e {
                Effect::Save(m) => batch.messages.push(m),
                other => {
                    self.flush(std::mem::take(&mut batch)).await?;
                    match other {
                        Effect::Deliver(m) => {
                            let target = self.core.target().clone();
                            match self.ctx.dir.slot(&target) {
                                Some(s) => s.cast(SlotMsg::Paste { msg: Box::new(m) }),
                                None => {
                                    let now = self.ctx.now();
                                    let more = self.core.delivery_failed(
                                        m.id,
                                        "the target has no terminal",
                                        now,
                                    );
                                    Box::pin(self.perform(more)).await?;
                                }
                            }
                        }
                        Effect::TurnEnded {
                            msg,
                            ticket: Some(ticket),
                        } => {
                            let ctx = self.ctx.clone();
                            let target = self.core.target().clone();
                            tokio::spawn(async move {
                                let Some(slot) = ctx.dir.slot(&target) else {
                                    return;
                                };
                                let tail = slot
                                    .call(|reply| SlotMsg::Tail { reply }, Duration::from_secs(5))
                                    .await
                                    .unwrap_or_default();
                                if let Ok(desk) = ctx.dir.tickets() {
                                    desk.cast(DeskMsg::TurnEnded { ticket, tail });
                                }
                                tracing::debug!(%msg, %ticket, "turn ended");
                            });
                        }
                        Effect::TurnEnded { ticket: None, .. } | Effect::Save(_) => {}
                    }
                }
            }
        }
        self.flush(batch).await
    }

    async fn flush(&mut self, mut batch: Batch) -> Result<(), FleetError> {
        if batch.is_empty() {
            return Ok(());
        }
        let ticket = self.ride_along.take();
        if let Some(t) = &ticket {
            batch.tickets.push(t.clone());
            batch.next_ticket = Some(t.id.0 + 1);
        }
        let saved = batch.messages.clone();
        self.ctx.store.run(move |s| s.commit(&batch)).await?;
        if let Some(t) = ticket {
            self.ctx.events.emit(EventKind::Ticket {
                ticket: t.id,
                kind: t.kind,
                from: t.from,
                to: t.to,
                state: t.state,
            });
        }
        let failed: Vec<(TicketId, String)> = saved
            .iter()
            .filter(|m| m.state == ReceiptState::Failed)
            .filter_map(|m| {
                let why = m.note.clone().unwrap_or_else(|| "undeliverable".into());
                m.ticket.map(|t| (t, why))
            })
            .collect();
        if !failed.is_empty()
            && let Ok(desk) = self.ctx.dir.tickets()
        {
            // All at once: the desk settles them a chunk at a time, serving other members'
            // requests between chunks.
            desk.cast(DeskMsg::Undeliverable {
                tickets: failed,
                requeued: false,
            });
        }
        for m in saved {
            self.ctx.events.emit(EventKind::Receipt {
                msg: m.id,
                target: m.target,
                from: m.from,
                ticket: m.ticket,
                state: m.state,
                note: m.note,
                screen: m.screen,
            });
        }
        Ok(())
    }

    fn rearm(&mut self, myself: &ActorRef<InjectorMsg>) {
        let now = self.ctx.now();
        self.timer
            .arm(myself, self.core.next_deadline(), now, || InjectorMsg::Tick);
    }
}

impl Actor for InjectorActor {
    type Msg = InjectorMsg;
    type State = InjectorActorState;
    type Arguments = InjectorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<InjectorMsg>,
        args: InjectorArgs,
    ) -> Result<InjectorActorState, ActorProcessingErr> {
        let ctx = args.ctx;
        let t2 = args.target.clone();
        let (pending, unfinished) = ctx
            .store
            .run(move |s| Ok((s.pending_for(&t2)?, s.unfinished_turn(&t2)?)))
            .await?;
        let core = Injector::new(args.target.clone(), pending, unfinished, limits(&ctx));
        ctx.dir.set_injector(
            &args.target,
            Mailbox::new(
                myself.clone(),
                ctx.mailbox_cap(),
                format!("the injector of `{}`", args.target),
            ),
        );
        Ok(InjectorActorState {
            ctx,
            core,
            timer: Timer::new(),
            closed: false,
            ride_along: None,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<InjectorMsg>,
        st: &mut InjectorActorState,
    ) -> Result<(), ActorProcessingErr> {
        // Ask the slot for its status; it answers through the same path as its status changes,
        // so the answer cannot overtake (and undo) a newer change.
        if let Some(slot) = st.ctx.dir.slot(st.core.target()) {
            slot.cast(SlotMsg::Announce);
        }
        st.resolve().await?;
        st.rearm(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<InjectorMsg>,
        st: &mut InjectorActorState,
    ) -> Result<(), ActorProcessingErr> {
        st.timer.cancel();
        st.ctx
            .dir
            .remove_injector(st.core.target(), myself.get_id());
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<InjectorMsg>,
        msg: InjectorMsg,
        st: &mut InjectorActorState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            InjectorMsg::Enqueue { msg, ticket, reply } => {
                let id = msg.id;
                st.ride_along = ticket.map(|t| *t);
                match st.core.enqueue(*msg, now) {
                    Ok(mut fx) => {
                        // The message as committed: its last state in this batch (queued, or
                        // already delivered when the target could take it), so the sender's
                        // receipt needs no second read of the store.
                        let saved = fx.iter().rev().find_map(|e| match e {
                            Effect::Save(m) if m.id == id => Some(m.clone()),
                            _ => None,
                        });
                        // The sender hears as soon as the commit is done; the paste that may
                        // follow it (the effects after the last save) goes out after that, so
                        // the acknowledgement does not wait behind the delivery's work.
                        let after = fx
                            .iter()
                            .rposition(|e| matches!(e, Effect::Save(_)))
                            .map_or(0, |i| i + 1);
                        let then = fx.split_off(after);
                        let r = st.perform(fx).await;
                        let committed = r.is_ok();
                        let _ = reply.send(r.and_then(|_| {
                            saved.ok_or_else(|| FleetError::internal("enqueue", "no receipt"))
                        }));
                        if committed {
                            st.perform(then).await?;
                        }
                    }
                    Err(e) => {
                        st.ride_along = None;
                        let _ = reply.send(Err(e));
                    }
                }
            }
            InjectorMsg::Target(view) => {
                st.resolve().await?;
                let fx = st.core.target_status(view, now);
                st.perform(fx).await?;
                if view.status == Status::Exited && !st.closed {
                    st.closed = true;
                    myself.stop(Some("target exited".into()));
                    return Ok(());
                }
            }
            InjectorMsg::TurnStarted { id } => {
                let fx = st.core.turn_started(id, now);
                st.perform(fx).await?;
            }
            InjectorMsg::NotStarted { id, why, screen } => {
                let fx = st.core.not_started(id, &why, screen, now);
                st.perform(fx).await?;
            }
            InjectorMsg::Tick => {
                st.timer.fired();
                let fx = st.core.tick(now);
                st.perform(fx).await?;
            }
            InjectorMsg::PasteResult { id, result } => {
                if let Err(why) = result {
                    let fx = st.core.delivery_failed(id, &why, now);
                    st.perform(fx).await?;
                }
            }
            InjectorMsg::Queue { reply } => {
                let _ = reply.send(QueueView {
                    in_flight: st.core.in_flight().cloned(),
                    queued: st.core.queued().cloned().collect(),
                    stalled: st.core.is_stalled(),
                });
            }
            InjectorMsg::Depth { reply } => {
                let _ = reply.send(st.core.depth());
            }
            InjectorMsg::Reload => st.core.set_limits(limits(&st.ctx)),
            InjectorMsg::Quiesce { reply } => {
                st.core.quiesce();
                let _ = reply.send(());
            }
            InjectorMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the injector of `{}`", st.core.target());
                }
            }
        }
        st.rearm(&myself);
        Ok(())
    }
}

/// How a member's injector is found: the directory's entry under its member name, registered by the actor itself.
impl Directory {
    pub fn injector(&self, key: &MemberName) -> Option<Mailbox<InjectorMsg>> {
        self.get(&key.to_string())
    }
    pub fn set_injector(&self, key: &MemberName, m: Mailbox<InjectorMsg>) {
        self.set_mailbox(&key.to_string(), m);
    }
    /// Remove `key`'s entry if it still points at actor `id`.
    pub fn remove_injector(&self, key: &MemberName, id: ractor::ActorId) {
        self.remove_if::<Mailbox<InjectorMsg>>(&key.to_string(), id);
    }
    /// Every member that has an injector now.
    pub fn injector_names(&self) -> Vec<MemberName> {
        self.keys::<Mailbox<InjectorMsg>>()
            .into_iter()
            .filter_map(|k| MemberName::new(&k).ok())
            .collect()
    }
}
