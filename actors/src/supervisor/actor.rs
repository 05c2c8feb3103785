//! The supervisor shell: starts children linked to itself, restarts them under their policy
//! (the pure [`RestartTracker`]), escalates past the restart intensity, and stops children in
//! reverse start order on shutdown (ractor kills descendants without `post_stop` when a parent
//! exits, so children are stopped explicitly first).
//!
//! Why not ractor-supervisor: it requires every supervised actor to be globally named, and
//! ractor's registry is process-global, which collides when several daemons share a process
//! (the demo, tests). A restart policy is small enough to own as a tested pure core.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde::Serialize;

use crate::ctx::SharedCtx;
use crate::error::FleetError;
use crate::events::EventKind;
use crate::publish::Publisher;
use crate::supervisor::policy::{Decision, ExitKind, RestartTracker};
use crate::term::BoxFut;

/// Starts (or restarts) one child, linked to the given supervisor cell.
pub type StartFn =
    Arc<dyn Fn(ActorCell) -> BoxFut<'static, Result<ActorCell, FleetError>> + Send + Sync>;

/// Called with a child's actor id when it has ended, before any restart (ractor runs no
/// `post_stop` after a panic, so this is where its directory entry is cleared).
pub type DownFn = Arc<dyn Fn(ractor::ActorId) + Send + Sync>;

/// A child: its id (`registry`, `slot:w1`, ...), its kind (for the policy) and how to start it.
#[derive(Clone)]
pub struct ChildSpec {
    pub id: String,
    pub kind: &'static str,
    pub start: StartFn,
    pub on_down: Option<DownFn>,
}

impl ChildSpec {
    /// A child that is an actor, started (and restarted) linked to its supervisor with what
    /// `make` gives each time: the actor and its arguments.
    pub fn actor<A: Actor>(
        id: impl Into<String>,
        kind: &'static str,
        make: impl Fn() -> (A, A::Arguments) + Send + Sync + 'static,
    ) -> ChildSpec {
        let id = id.into();
        let what = format!("start of {id}");
        ChildSpec {
            id,
            kind,
            on_down: None,
            start: Arc::new(move |sup| {
                let ((actor, args), what) = (make(), what.clone());
                Box::pin(async move {
                    let (r, _) = Actor::spawn_linked(None, actor, args, sup)
                        .await
                        .map_err(|e| FleetError::internal(what, e.to_string()))?;
                    Ok(r.get_cell())
                })
            }),
        }
    }

    /// A child that is a long-running task (an accept loop, a sweep): `make` gives the task's
    /// future each time it is started. The task ending for any reason (an error, a panic, or
    /// returning at all while the child is not being stopped) fails the child, so its policy
    /// restarts it or escalates; stopping the child aborts the task. A task that ends only
    /// when the daemon stops never fails its owner silently.
    pub fn task(
        id: impl Into<String>,
        kind: &'static str,
        make: impl Fn() -> BoxFut<'static, Result<(), String>> + Send + Sync + 'static,
    ) -> ChildSpec {
        let id = id.into();
        let label = id.clone();
        ChildSpec::actor(id, kind, move || (TaskActor, (label.clone(), make())))
    }

    /// Call `f` with the child's actor id when it ends (to clear its directory entry).
    pub fn on_down(mut self, f: impl Fn(ractor::ActorId) + Send + Sync + 'static) -> ChildSpec {
        self.on_down = Some(Arc::new(f));
        self
    }
}

/// Why a long-running task ended, from its join result: an error, a panic, or returning at
/// all; `None` if it was aborted (its owner is stopping it).
pub fn why_ended(r: Result<Result<(), String>, tokio::task::JoinError>) -> Option<String> {
    match r {
        Ok(Ok(())) => Some("it returned".to_string()),
        Ok(Err(e)) => Some(e),
        Err(e) if e.is_panic() => Some("it panicked".to_string()),
        Err(_) => None,
    }
}

/// The actor behind [`ChildSpec::task`]: it owns one task and fails when the task ends.
pub struct TaskActor;

pub enum TaskMsg {
    /// The task ended, and why.
    Ended(String),
}

pub struct TaskState {
    id: String,
    task: tokio::task::AbortHandle,
}

impl Actor for TaskActor {
    type Msg = TaskMsg;
    type State = TaskState;
    type Arguments = (String, BoxFut<'static, Result<(), String>>);

    async fn pre_start(
        &self,
        myself: ActorRef<TaskMsg>,
        (id, fut): (String, BoxFut<'static, Result<(), String>>),
    ) -> Result<TaskState, ActorProcessingErr> {
        let inner = tokio::spawn(fut);
        let task = inner.abort_handle();
        tokio::spawn(async move {
            // None: aborted, the child is being stopped.
            if let Some(why) = why_ended(inner.await) {
                let _ = myself.cast(TaskMsg::Ended(why));
            }
        });
        Ok(TaskState { id, task })
    }

    async fn handle(
        &self,
        _myself: ActorRef<TaskMsg>,
        msg: TaskMsg,
        st: &mut TaskState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TaskMsg::Ended(why) => Err(format!("{} stopped: {why}", st.id).into()),
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<TaskMsg>,
        st: &mut TaskState,
    ) -> Result<(), ActorProcessingErr> {
        st.task.abort();
        Ok(())
    }
}

/// Start `spec` under `sup` and wait (bounded) until it runs.
pub async fn start_child(sup: &ActorRef<SupervisorMsg>, spec: ChildSpec) -> Result<(), FleetError> {
    let id = spec.id.clone();
    match sup
        .call(
            |reply| SupervisorMsg::Start { spec, reply },
            Some(Duration::from_secs(10)),
        )
        .await
    {
        Ok(ractor::rpc::CallResult::Success(r)) => r,
        _ => Err(FleetError::unavailable(
            format!("start of {id}"),
            "the supervisor did not answer",
        )),
    }
}

pub enum SupervisorMsg {
    /// Start a new child and keep it supervised.
    Start {
        spec: ChildSpec,
        reply: RpcReplyPort<Result<(), FleetError>>,
    },
    /// Restart a child after its backoff.
    Restart {
        id: String,
    },
    /// Stop every child in reverse start order, each within its share of the deadline; the
    /// reply names the children that had to be killed.
    Shutdown {
        deadline: Duration,
        reply: RpcReplyPort<Vec<String>>,
    },
    Children {
        reply: RpcReplyPort<Vec<ChildView>>,
    },
    /// A child's restart limit was exceeded: stop every child as `Shutdown` does (within the
    /// configured shutdown deadline), then stop the supervisor with `reason`.
    GiveUp {
        reason: String,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct ChildView {
    pub id: String,
    pub kind: String,
    pub running: bool,
    pub restarts_in_window: usize,
    pub restarts_total: u64,
}

struct Child {
    spec: ChildSpec,
    cell: Option<ActorCell>,
    tracker: RestartTracker,
    restarts_total: u64,
}

pub struct Supervisor;

pub struct SupervisorState {
    ctx: SharedCtx,
    /// Why the daemon escalated: this supervisor is the one writer of it.
    escalation: Publisher<Option<String>>,
    children: Vec<Child>,
    shutting_down: bool,
    /// Restarts of all children together, against the supervisor's own intensity (OTP's).
    overall: RestartTracker,
}

impl SupervisorState {
    fn find_by_cell(&self, cell: &ActorCell) -> Option<usize> {
        let id = cell.get_id();
        self.children
            .iter()
            .position(|c| c.cell.as_ref().is_some_and(|x| x.get_id() == id))
    }

    /// Stop every child in reverse start order (the listeners first), each within its share of
    /// what is left of `deadline`; the ids of the children that had to be killed.
    async fn stop_children(&mut self, deadline: Duration) -> Vec<String> {
        self.shutting_down = true;
        // Each child gets the time left divided by the children left, so what a fast
        // child does not use passes to the next (a thousand drift pullers must not
        // squeeze the ledger's flush into a thousandth of the deadline).
        let end = std::time::Instant::now() + deadline;
        let mut left = self.children.iter().filter(|c| c.cell.is_some()).count();
        let mut hung = vec![];
        // The listeners first (stop accepting), then everything else in reverse start
        // order: children started after the API (members, decisions, pullers) must not
        // outlive it with requests still arriving.
        let mut order: Vec<usize> = (0..self.children.len()).rev().collect();
        order.sort_by_key(|&i| self.children[i].spec.kind != "api");
        for i in order {
            let child = &mut self.children[i];
            if let Some(cell) = child.cell.take() {
                tracing::debug!(child = %child.spec.id, "stopping");
                let share = end
                    .saturating_duration_since(std::time::Instant::now())
                    .checked_div(left.max(1) as u32)
                    .unwrap_or_default()
                    .max(Duration::from_millis(1));
                left = left.saturating_sub(1);
                match cell
                    .stop_and_wait(Some("shutdown".into()), Some(share))
                    .await
                {
                    Ok(()) => {}
                    Err(ractor::RactorErr::Timeout) => {
                        tracing::error!(child = %child.spec.id, "did not stop within its share of the deadline; killed");
                        cell.kill();
                        hung.push(child.spec.id.clone());
                    }
                    // It had already stopped (a member that exited just before).
                    Err(_) => tracing::debug!(child = %child.spec.id, "already stopped"),
                }
            }
        }
        hung
    }

    /// A child ended: consult its policy.
    fn on_exit(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        idx: usize,
        exit: ExitKind,
        detail: String,
    ) {
        let now = self.ctx.now();
        let child = &mut self.children[idx];
        if let (Some(cell), Some(down)) = (child.cell.take(), &child.spec.on_down) {
            down(cell.get_id());
        }
        let id = child.spec.id.clone();
        let mut decision = child.tracker.on_exit(&id, exit, now);
        if let Decision::Restart { .. } = decision {
            // The child's own limit allows it; the supervisor's, over all children, may not.
            let overall = format!("the children together (last: {id})");
            if let Decision::Escalate { reason } =
                self.overall.on_exit(&overall, ExitKind::Failed, now)
            {
                decision = Decision::Escalate { reason };
            }
        }
        let child = &mut self.children[idx];
        match decision {
            Decision::Restart { delay_ms, attempt } => {
                child.restarts_total += 1;
                tracing::warn!(child = %id, attempt, delay_ms, detail = %detail, "child ended; restarting");
                self.ctx.events.emit(EventKind::Restarted {
                    child: id.clone(),
                    attempt,
                    reason: detail,
                });
                myself.send_after(Duration::from_millis(delay_ms), move || {
                    SupervisorMsg::Restart { id }
                });
            }
            Decision::Escalate { reason } => {
                let reason = format!("{reason}; last failure: {detail}");
                tracing::error!(child = %id, %reason, "restart limit exceeded; the daemon escalates and exits");
                self.escalation.publish(Some(reason.clone()));
                self.ctx.events.emit(EventKind::Escalated {
                    reason: reason.clone(),
                });
                // Give up the way a shutdown does (listeners first, so the event streams end
                // after the escalation is sent; then the rest in reverse start order), not by
                // dropping the children: ractor would kill them without their `post_stop`.
                self.shutting_down = true;
                let _ = myself.send_message(SupervisorMsg::GiveUp { reason });
            }
            Decision::Done => {
                tracing::debug!(child = %id, detail = %detail, "child ended and stays stopped");
                self.children.remove(idx);
            }
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = (SharedCtx, Publisher<Option<String>>);

    async fn pre_start(
        &self,
        _myself: ActorRef<SupervisorMsg>,
        (ctx, escalation): (SharedCtx, Publisher<Option<String>>),
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let overall = RestartTracker::new(ctx.config().supervisor_intensity());
        Ok(SupervisorState {
            ctx,
            escalation,
            children: vec![],
            shutting_down: false,
            overall,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Start { spec, reply } => {
                if st.shutting_down {
                    let _ = reply.send(Err(FleetError::unavailable(
                        format!("start of {}", spec.id),
                        "the daemon is shutting down",
                    )));
                    return Ok(());
                }
                if st.children.iter().any(|c| c.spec.id == spec.id) {
                    let _ = reply.send(Err(FleetError::conflict(
                        format!("start of {}", spec.id),
                        "a child with that id is already supervised",
                        "a unique child id",
                    )));
                    return Ok(());
                }
                let policy = st.ctx.config().restart_policy(spec.kind);
                let r = (spec.start)(myself.get_cell()).await;
                match r {
                    Ok(cell) => {
                        st.children.push(Child {
                            spec,
                            cell: Some(cell),
                            tracker: RestartTracker::new(policy),
                            restarts_total: 0,
                        });
                        let _ = reply.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            SupervisorMsg::Restart { id } => {
                if st.shutting_down {
                    return Ok(());
                }
                let Some(idx) = st.children.iter().position(|c| c.spec.id == id) else {
                    return Ok(());
                };
                let start = st.children[idx].spec.start.clone();
                match start(myself.get_cell()).await {
                    Ok(cell) => {
                        tracing::info!(child = %id, "child restarted");
                        st.children[idx].cell = Some(cell);
                    }
                    Err(e) => {
                        let detail = format!("restart failed: {e}");
                        st.on_exit(&myself, idx, ExitKind::Failed, detail);
                    }
                }
            }
            SupervisorMsg::Shutdown { deadline, reply } => {
                let hung = st.stop_children(deadline).await;
                let _ = reply.send(hung);
            }
            SupervisorMsg::GiveUp { reason } => {
                let deadline = st.ctx.config().daemon.shutdown_deadline();
                let hung = st.stop_children(deadline).await;
                if !hung.is_empty() {
                    tracing::error!(
                        ?hung,
                        "giving up: these children did not stop in time and were killed"
                    );
                }
                myself.stop(Some(reason));
            }
            SupervisorMsg::Children { reply } => {
                let now = st.ctx.now();
                let v = st
                    .children
                    .iter()
                    .map(|c| ChildView {
                        id: c.spec.id.clone(),
                        kind: c.spec.kind.to_string(),
                        running: c.cell.is_some(),
                        restarts_in_window: c.tracker.recent(now),
                        restarts_total: c.restarts_total,
                    })
                    .collect();
                let _ = reply.send(v);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        evt: SupervisionEvent,
        st: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        if st.shutting_down {
            return Ok(());
        }
        match evt {
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(idx) = st.find_by_cell(&cell) {
                    st.on_exit(&myself, idx, ExitKind::Failed, format!("failed: {err}"));
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(idx) = st.find_by_cell(&cell) {
                    let detail = format!(
                        "stopped: {}",
                        reason.unwrap_or_else(|| "normal exit".into())
                    );
                    st.on_exit(&myself, idx, ExitKind::Normal, detail);
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// How the root supervisor is found (by actors that start siblings: the drift scheduler's
/// pullers, the peer links).
impl crate::directory::Directory {
    pub fn supervisor(&self) -> Option<ActorRef<SupervisorMsg>> {
        self.get("")
    }
}
