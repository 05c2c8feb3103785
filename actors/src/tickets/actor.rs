//! The ticket desk shell: persists every ticket change before answering, holds the reply ports
//! of bounded waits (`fleet_send {wait:true}`, `fleet_ask`), and fires the TTL timer. Must never
//! decide who may reply or when a ticket expires: the core does.

use std::collections::HashMap;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::ctx::SharedCtx;
use crate::directory::{Directory, Mailbox};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::store::Batch;
use crate::tickets::state::{
    Desk, Effect, Origin, RemoteReceipt, RemoteUpdate, Ticket, TicketKind,
};
use crate::timer::Timer;
use crate::types::{Caller, MemberName, Millis, MsgId, Party, TicketId};

pub enum DeskMsg {
    /// Open a ticket. With `defer`, the new ticket is not committed here: the caller commits it
    /// with the message that carries it (one transaction per send) and then sends `Known`.
    /// Open a ticket for a message the desk numbers (`Ticket::msg`).
    Open {
        kind: TicketKind,
        from: Party,
        to: MemberName,
        body: String,
        ttl_ms: Millis,
        defer: bool,
        /// Lead-to-lead mail: where it goes (sent) or where it came from (received).
        remote: Option<Box<RemoteReceipt>>,
        origin: Option<Origin>,
        reply: RpcReplyPort<Result<Ticket, FleetError>>,
    },
    /// Number a message that has no ticket (one from `fleetd` itself, e.g. a drift alert).
    Number {
        reply: RpcReplyPort<Result<MsgId, FleetError>>,
    },
    /// The receiving host reported on tickets this host sent it (committed together).
    Remote {
        updates: Vec<(TicketId, RemoteUpdate)>,
        /// The outbox's mail to a peer up to a sequence number, which these updates say was
        /// transmitted: dropped in the same commit.
        outbox_done: Option<(String, u64)>,
        reply: RpcReplyPort<Result<(), FleetError>>,
    },
    /// The ticket opened for a message received from `origin`, if any.
    ByOrigin {
        origin: Origin,
        reply: RpcReplyPort<Option<Ticket>>,
    },
    /// A ticket committed elsewhere (see `Open { defer }`); adopted if this desk restarted and
    /// lost it in between.
    Known {
        ticket: Box<Ticket>,
    },
    Reply {
        caller: Caller,
        ticket: TicketId,
        text: String,
        reply: RpcReplyPort<Result<Ticket, FleetError>>,
    },
    TurnEnded {
        ticket: TicketId,
        tail: String,
    },
    /// Tickets whose messages cannot be delivered, each with why (many at once when a member
    /// with a long queue exits). The desk settles `UNDELIVERABLE_CHUNK` of them per commit and
    /// sends itself the rest (`requeued`), so other members' requests are served in between.
    Undeliverable {
        tickets: Vec<(TicketId, String)>,
        requeued: bool,
    },
    /// Answered once every undeliverable ticket handed over before it is settled.
    Settled {
        reply: RpcReplyPort<()>,
    },
    Wait {
        ticket: TicketId,
        deadline: Millis,
        reply: RpcReplyPort<Result<WaitOutcome, FleetError>>,
    },
    Poll {
        party: Party,
        reply: RpcReplyPort<Vec<Ticket>>,
    },
    Ack {
        party: Party,
        ticket: TicketId,
        reply: RpcReplyPort<Result<(), FleetError>>,
    },
    Get {
        ticket: TicketId,
        reply: RpcReplyPort<Option<Ticket>>,
    },
    All {
        reply: RpcReplyPort<Vec<Ticket>>,
    },
    Tick,
    Reload,
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
}

/// How a bounded wait on a ticket ended.
#[derive(Clone, Debug)]
pub enum WaitOutcome {
    Resolved(Ticket),
    TimedOut(Ticket),
}

pub struct DeskActor;

pub struct DeskState {
    ctx: SharedCtx,
    core: Desk,
    waiters: HashMap<u64, RpcReplyPort<Result<WaitOutcome, FleetError>>>,
    next_waiter: u64,
    timer: Timer,
    /// Remainders of undeliverable batches the desk sent itself and has not settled yet.
    requeued: usize,
    settled_waiters: Vec<RpcReplyPort<()>>,
}

/// Undeliverable tickets settled per commit.
const UNDELIVERABLE_CHUNK: usize = 256;

impl DeskState {
    async fn perform(&mut self, fx: Vec<Effect>) -> Result<(), FleetError> {
        self.perform_with(fx, Batch::default()).await
    }

    /// [`Self::perform`], committing `batch` (another owner's writes that must land with
    /// these tickets) in the same transaction.
    async fn perform_with(&mut self, fx: Vec<Effect>, mut batch: Batch) -> Result<(), FleetError> {
        let mut wakes = vec![];
        for e in fx {
            match e {
                Effect::Save(t) => batch.tickets.push(t),
                Effect::Delete(id) => batch.delete_tickets.push(id),
                Effect::Wake { waiter, ticket } => {
                    wakes.push((waiter, WaitOutcome::Resolved(ticket)))
                }
                Effect::WaitExpired { waiter, ticket } => {
                    wakes.push((waiter, WaitOutcome::TimedOut(ticket)))
                }
                Effect::ReserveMsgIds(n) => batch.msg_reserved = Some(n),
            }
        }
        if !batch.is_empty() {
            batch.next_ticket = Some(self.core.next_id());
            let saved = batch.tickets.clone();
            self.ctx.store.run(move |s| s.commit(&batch)).await?;
            for t in saved {
                self.ctx.events.emit(EventKind::Ticket {
                    ticket: t.id,
                    kind: t.kind,
                    from: t.from,
                    to: t.to,
                    state: t.state,
                });
            }
        }
        for (w, outcome) in wakes {
            if let Some(port) = self.waiters.remove(&w) {
                let _ = port.send(Ok(outcome));
            }
        }
        Ok(())
    }

    fn rearm(&mut self, myself: &ActorRef<DeskMsg>) {
        let now = self.ctx.now();
        self.timer
            .arm(myself, self.core.next_deadline(), now, || DeskMsg::Tick);
    }
}

impl Actor for DeskActor {
    type Msg = DeskMsg;
    type State = DeskState;
    type Arguments = SharedCtx;

    async fn pre_start(
        &self,
        myself: ActorRef<DeskMsg>,
        ctx: SharedCtx,
    ) -> Result<DeskState, ActorProcessingErr> {
        let (tickets, next) = ctx.store.run(|s| s.load_tickets()).await?;
        let msg_floor = ctx.store.run(|s| s.msg_floor()).await?;
        let core = Desk::new(tickets, next, ctx.config().tickets.retention, msg_floor);
        ctx.dir.set_tickets(Some(Mailbox::new(
            myself.clone(),
            ctx.mailbox_cap(),
            "the ticket desk",
        )));
        Ok(DeskState {
            ctx,
            core,
            waiters: HashMap::new(),
            next_waiter: 1,
            timer: Timer::new(),
            requeued: 0,
            settled_waiters: vec![],
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<DeskMsg>,
        st: &mut DeskState,
    ) -> Result<(), ActorProcessingErr> {
        // Tickets that expired while the daemon was down expire now.
        let now = st.ctx.now();
        let fx = st.core.tick(now);
        st.perform(fx).await?;
        st.rearm(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<DeskMsg>,
        st: &mut DeskState,
    ) -> Result<(), ActorProcessingErr> {
        st.timer.cancel();
        if st
            .ctx
            .dir
            .tickets()
            .is_ok_and(|m| m.actor.get_id() == myself.get_id())
        {
            st.ctx.dir.set_tickets(None);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<DeskMsg>,
        msg: DeskMsg,
        st: &mut DeskState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            DeskMsg::Number { reply } => {
                let (msg, fx) = st.core.number_message();
                let r = st.perform(fx).await.map(|_| msg);
                let _ = reply.send(r);
            }
            DeskMsg::Open {
                kind,
                from,
                to,
                body,
                ttl_ms,
                defer,
                remote,
                origin,
                reply,
            } => {
                let (msg, mut fx) = st.core.number_message();
                let (t, open_fx) = st.core.open(
                    kind,
                    from,
                    to,
                    Some(msg),
                    &body,
                    ttl_ms,
                    now,
                    remote.map(|r| *r),
                    origin,
                );
                fx.extend(open_fx);
                if defer {
                    fx.retain(|e| !matches!(e, Effect::Save(x) if x.id == t.id));
                }
                let r = st.perform(fx).await.map(|_| t);
                let _ = reply.send(r);
            }
            DeskMsg::Known { ticket } => st.core.adopt(*ticket),
            DeskMsg::Remote {
                updates,
                outbox_done,
                reply,
            } => {
                let fx = updates
                    .into_iter()
                    .flat_map(|(t, u)| st.core.remote_update(t, u, now))
                    .collect();
                let batch = Batch {
                    mail_out_done: outbox_done.into_iter().collect(),
                    ..Default::default()
                };
                let r = st.perform_with(fx, batch).await;
                let _ = reply.send(r);
            }
            DeskMsg::ByOrigin { origin, reply } => {
                let _ = reply.send(st.core.by_origin(&origin).cloned());
            }
            DeskMsg::Reply {
                caller,
                ticket,
                text,
                reply,
            } => match st.core.reply(&caller, ticket, text, now) {
                Ok((t, fx)) => {
                    let r = st.perform(fx).await.map(|_| t);
                    let _ = reply.send(r);
                }
                Err((e, fx)) => {
                    // A late reply is refused but kept: persist it before refusing.
                    let r = st.perform(fx).await;
                    let _ = reply.send(Err(r.err().unwrap_or(e)));
                }
            },
            DeskMsg::TurnEnded { ticket, tail } => {
                let fx = st.core.turn_ended(ticket, tail, now);
                st.perform(fx).await?;
            }
            DeskMsg::Undeliverable {
                mut tickets,
                requeued,
            } => {
                if requeued {
                    st.requeued = st.requeued.saturating_sub(1);
                }
                let rest = if tickets.len() > UNDELIVERABLE_CHUNK {
                    tickets.split_off(UNDELIVERABLE_CHUNK)
                } else {
                    vec![]
                };
                let mut fx = vec![];
                for (ticket, why) in tickets {
                    fx.extend(st.core.undeliverable(ticket, &why, now));
                }
                st.perform(fx).await?;
                if !rest.is_empty() {
                    st.requeued += 1;
                    let _ = myself.cast(DeskMsg::Undeliverable {
                        tickets: rest,
                        requeued: true,
                    });
                } else if st.requeued == 0 {
                    for w in std::mem::take(&mut st.settled_waiters) {
                        let _ = w.send(());
                    }
                }
            }
            DeskMsg::Settled { reply } => {
                if st.requeued == 0 {
                    let _ = reply.send(());
                } else {
                    st.settled_waiters.push(reply);
                }
            }
            DeskMsg::Wait {
                ticket,
                deadline,
                reply,
            } => {
                let w = st.next_waiter;
                st.next_waiter += 1;
                match st.core.wait(ticket, w, deadline) {
                    Ok(Some(t)) => {
                        let _ = reply.send(Ok(WaitOutcome::Resolved(t)));
                    }
                    Ok(None) => {
                        st.waiters.insert(w, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            DeskMsg::Poll { party, reply } => {
                let _ = reply.send(st.core.poll(&party));
            }
            DeskMsg::Ack {
                party,
                ticket,
                reply,
            } => match st.core.ack(&party, ticket, now) {
                Ok(fx) => {
                    let r = st.perform(fx).await;
                    let _ = reply.send(r);
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            DeskMsg::Get { ticket, reply } => {
                let _ = reply.send(st.core.get(ticket).cloned());
            }
            DeskMsg::All { reply } => {
                let _ = reply.send(st.core.all().cloned().collect());
            }
            DeskMsg::Tick => {
                st.timer.fired();
                // Drop the waits whose callers went away.
                let gone: Vec<u64> = st
                    .waiters
                    .iter()
                    .filter(|(_, p)| p.is_closed())
                    .map(|(k, _)| *k)
                    .collect();
                for w in gone {
                    st.waiters.remove(&w);
                    st.core.cancel_wait(w);
                }
                let fx = st.core.tick(now);
                st.perform(fx).await?;
            }
            DeskMsg::Reload => st.core.set_retention(st.ctx.config().tickets.retention),
            DeskMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the ticket desk");
                }
            }
        }
        st.rearm(&myself);
        Ok(())
    }
}

/// How the ticket desk is found: the directory's entry for it, registered by the actor itself.
impl Directory {
    pub fn tickets(&self) -> Result<Mailbox<DeskMsg>, FleetError> {
        self.get::<Mailbox<DeskMsg>>("")
            .ok_or_else(|| FleetError::unavailable("the ticket desk", "it is restarting"))
    }
    pub fn set_tickets(&self, m: Option<Mailbox<DeskMsg>>) {
        match m {
            Some(m) => self.set_mailbox("", m),
            None => self.remove::<Mailbox<DeskMsg>>(""),
        }
    }
}
