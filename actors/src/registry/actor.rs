//! The registry shell: feeds the registry core, persists the member table, holds the reply
//! ports of spawns queued behind a busy slot, and keeps the pid index callers are resolved with.
//! Must never decide who may spawn or where: that is the core's and Authz's job.

use std::collections::HashMap;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::ctx::SharedCtx;
use crate::directory::{Directory, Mailbox};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::publish::Publisher;
use crate::registry::state::{
    ExitInfo, MemberRecord, PidIndex, Registry, RegistryLimits, Reservation, ReserveOutcome,
    ReserveRequest, SlotState, WaiterOutcome,
};
use crate::timer::Timer;
use crate::types::{MemberName, Status};

pub enum RegistryMsg {
    Reserve {
        req: ReserveRequest,
        reply: RpcReplyPort<Result<Reservation, FleetError>>,
    },
    Bind {
        reservation: u64,
        record: Box<MemberRecord>,
        reply: RpcReplyPort<Result<(), FleetError>>,
    },
    Release {
        reservation: u64,
    },
    Released {
        name: MemberName,
        exit: ExitInfo,
        reply: Option<RpcReplyPort<()>>,
    },
    Status {
        name: MemberName,
        status: Status,
        /// For `blocked`: why, and the screen's last lines.
        blocked: Option<crate::registry::state::Blocked>,
    },
    Pids {
        name: MemberName,
        pid: Option<u32>,
        host_pid: Option<u32>,
    },
    /// The agent reported its session id (durable, for resume).
    Session {
        name: MemberName,
        id: String,
    },
    /// Its charter is owed at its next turn (due), or was given (not due); answers whether it
    /// was due before.
    CharterDue {
        name: MemberName,
        due: bool,
        reply: RpcReplyPort<bool>,
    },
    Members {
        reply: RpcReplyPort<Vec<MemberRecord>>,
    },
    Member {
        name: MemberName,
        reply: RpcReplyPort<Option<MemberRecord>>,
    },
    /// The live primary (the lead), if there is one.
    Primary {
        reply: RpcReplyPort<Option<MemberRecord>>,
    },
    Slots {
        reply: RpcReplyPort<Vec<SlotView>>,
    },
    Reload,
    Tick,
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
}

/// One architect slot as listings show it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SlotView {
    pub slot: String,
    pub state: &'static str,
    pub member: Option<MemberName>,
    pub waiting: usize,
}

pub struct RegistryActor;

/// What the registry starts with: the services, and the publisher of the pid index (the
/// registry is its one writer).
pub struct RegistryArgs {
    pub ctx: SharedCtx,
    pub pids: Publisher<PidIndex>,
}

pub struct RegistryState {
    ctx: SharedCtx,
    pids: Publisher<PidIndex>,
    core: Registry,
    waiters: HashMap<u64, RpcReplyPort<Result<Reservation, FleetError>>>,
    next_waiter: u64,
    timer: Timer,
}

fn limits(ctx: &SharedCtx) -> RegistryLimits {
    let c = ctx.config();
    RegistryLimits {
        queue_max: c.lifecycle.spawn_queue_max,
        wait_ms: c.lifecycle.spawn_wait_seconds.saturating_mul(1000),
        max_members: c.lifecycle.max_members,
    }
}

impl RegistryState {
    /// Answer queued spawns; a grant whose caller has gone away is released at once (which may
    /// grant the next waiter in turn).
    fn answer(&mut self, outcomes: Vec<WaiterOutcome>) {
        let mut queue: std::collections::VecDeque<WaiterOutcome> = outcomes.into();
        while let Some(o) = queue.pop_front() {
            let unclaimed = match self.waiters.remove(&o.waiter) {
                Some(port) => match port.send(o.result) {
                    Err(ractor::MessagingErr::SendErr(Ok(r))) => Some(r),
                    _ => None,
                },
                None => o.result.ok(),
            };
            if let Some(r) = unclaimed {
                let now = self.ctx.now();
                queue.extend(self.core.release(r.id, now));
            }
        }
    }

    fn rearm(&mut self, myself: &ActorRef<RegistryMsg>) {
        let now = self.ctx.now();
        self.timer
            .arm(myself, self.core.next_deadline(), now, || RegistryMsg::Tick);
    }
}

impl Actor for RegistryActor {
    type Msg = RegistryMsg;
    type State = RegistryState;
    type Arguments = RegistryArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<RegistryMsg>,
        RegistryArgs { ctx, pids }: RegistryArgs,
    ) -> Result<RegistryState, ActorProcessingErr> {
        let members = ctx.store.run(|s| s.load_members()).await?;
        let config = ctx.config();
        pids.modify(|ix| {
            for m in members.iter().filter(|m| m.is_live()) {
                if let Some(pid) = m.pid {
                    ix.set(pid, m.identity());
                }
            }
        });
        let core = Registry::new(config.architects.keys().cloned(), members, limits(&ctx));
        ctx.dir.set_registry(Some(Mailbox::new(
            myself.clone(),
            ctx.mailbox_cap(),
            "the registry",
        )));
        Ok(RegistryState {
            ctx,
            pids,
            core,
            waiters: HashMap::new(),
            next_waiter: 1,
            timer: Timer::new(),
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<RegistryMsg>,
        st: &mut RegistryState,
    ) -> Result<(), ActorProcessingErr> {
        st.timer.cancel();
        if st
            .ctx
            .dir
            .registry()
            .is_ok_and(|m| m.actor.get_id() == myself.get_id())
        {
            st.ctx.dir.set_registry(None);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<RegistryMsg>,
        msg: RegistryMsg,
        st: &mut RegistryState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            RegistryMsg::Reserve { req, reply } => {
                let waiter = st.next_waiter;
                st.next_waiter += 1;
                match st.core.reserve(req, waiter, now) {
                    Ok(ReserveOutcome::Granted(r)) => {
                        if let Err(ractor::MessagingErr::SendErr(Ok(r))) = reply.send(Ok(r)) {
                            let out = st.core.release(r.id, now);
                            st.answer(out);
                        }
                    }
                    Ok(ReserveOutcome::Queued { position, deadline }) => {
                        tracing::info!(
                            position,
                            deadline,
                            "spawn queued behind a busy architect slot"
                        );
                        st.waiters.insert(waiter, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            RegistryMsg::Bind {
                reservation,
                record,
                reply,
            } => {
                let record = *record;
                match st.core.bind(reservation, record.clone()) {
                    Ok(()) => {
                        let r2 = record.clone();
                        let res = st.ctx.store.run(move |s| s.save_member(&r2)).await;
                        if res.is_ok()
                            && let Some(pid) = record.pid
                        {
                            st.pids.modify(|ix| ix.set(pid, record.identity()));
                        }
                        let _ = reply.send(res);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            RegistryMsg::Release { reservation } => {
                let out = st.core.release(reservation, now);
                st.answer(out);
            }
            RegistryMsg::Released { name, exit, reply } => {
                let was_live = st.core.member(&name).is_some_and(|m| m.is_live());
                let out = st.core.released(&name, exit.clone(), now);
                st.pids.modify(|ix| ix.clear(&name));
                if was_live && let Some(rec) = st.core.member(&name).cloned() {
                    if let Err(e) = st.ctx.store.run(move |s| s.save_member(&rec)).await {
                        tracing::error!(member = %name, error = %e, "could not persist a member's exit");
                    }
                    tracing::info!(member = %name, code = ?exit.code, reason = %exit.reason, "member exited");
                    st.ctx.events.emit(EventKind::Exited {
                        member: name.clone(),
                        code: exit.code,
                        reason: exit.reason.clone(),
                    });
                }
                st.answer(out);
                if let Some(r) = reply {
                    let _ = r.send(());
                }
            }
            RegistryMsg::Status {
                name,
                status,
                blocked,
            } => {
                st.core.set_status(&name, status, blocked, now);
            }
            RegistryMsg::CharterDue { name, due, reply } => {
                let was = st.core.member(&name).is_some_and(|m| m.charter_due);
                if st.core.set_charter_due(&name, due)
                    && let Some(rec) = st.core.member(&name).cloned()
                    && let Err(e) = st.ctx.store.run(move |s| s.save_member(&rec)).await
                {
                    tracing::error!(error = %e, "could not persist the member's charter debt");
                }
                let _ = reply.send(was);
            }
            RegistryMsg::Session { name, id } => {
                if st.core.set_session(&name, &id)
                    && let Some(rec) = st.core.member(&name).cloned()
                {
                    tracing::info!(member = %name, session = %id, "agent session recorded");
                    if let Err(e) = st.ctx.store.run(move |s| s.save_member(&rec)).await {
                        tracing::error!(error = %e, "could not persist the member's session id");
                    }
                }
            }
            RegistryMsg::Pids {
                name,
                pid,
                host_pid,
            } => {
                st.core.set_pids(&name, pid, host_pid);
                if let Some(rec) = st.core.member(&name).cloned() {
                    if let Some(pid) = pid {
                        st.pids.modify(|ix| ix.set(pid, rec.identity()));
                    }
                    if let Err(e) = st.ctx.store.run(move |s| s.save_member(&rec)).await {
                        tracing::error!(error = %e, "could not persist member pids");
                    }
                }
            }
            RegistryMsg::Members { reply } => {
                let _ = reply.send(st.core.members().cloned().collect());
            }
            RegistryMsg::Member { name, reply } => {
                let _ = reply.send(st.core.member(&name).cloned());
            }
            RegistryMsg::Primary { reply } => {
                let _ = reply.send(st.core.primary().cloned());
            }
            RegistryMsg::Slots { reply } => {
                let v = st
                    .core
                    .slots()
                    .iter()
                    .map(|(slot, s)| SlotView {
                        slot: slot.clone(),
                        state: match s {
                            SlotState::Free => "free",
                            SlotState::Reserved { .. } => "reserved",
                            SlotState::Live { .. } => "live",
                        },
                        member: match s {
                            SlotState::Free => None,
                            SlotState::Reserved { member, .. } | SlotState::Live { member } => {
                                Some(member.clone())
                            }
                        },
                        waiting: st.core.waiting(slot),
                    })
                    .collect();
                let _ = reply.send(v);
            }
            RegistryMsg::Reload => {
                let c = st.ctx.config();
                st.core.set_slots(c.architects.keys().cloned());
                st.core.set_limits(limits(&st.ctx));
            }
            RegistryMsg::Tick => {
                st.timer.fired();
                let out = st.core.tick(now);
                st.answer(out);
            }
            RegistryMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the registry");
                }
            }
        }
        st.rearm(&myself);
        Ok(())
    }
}

/// How the registry is found: the directory's entry for it, registered by the actor itself.
impl Directory {
    pub fn registry(&self) -> Result<Mailbox<RegistryMsg>, FleetError> {
        self.get::<Mailbox<RegistryMsg>>("")
            .ok_or_else(|| FleetError::unavailable("the registry", "it is restarting"))
    }
    pub fn set_registry(&self, m: Option<Mailbox<RegistryMsg>>) {
        match m {
            Some(m) => self.set_mailbox("", m),
            None => self.remove::<Mailbox<RegistryMsg>>(""),
        }
    }
}
