//! The member slot shell: owns one member's terminal connection, feeds its output to the slot
//! core, performs the core's effects (status fan-out, reaping), writes pastes and keys, and
//! serves attach. Must never decide a status itself: the core does. A link to a terminal host
//! that broke while the host lives is made again by failing this actor, so that its supervisor
//! restarts it and the new slot reconnects as every restarted slot does (the core's `relink`
//! decides).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast, mpsc};

use crate::config::{CompiledProfile, Profile};
use crate::ctx::SharedCtx;
use crate::directory::{Directory, Mailbox};
use crate::error::{ErrorKind, FleetError};
use crate::events::EventKind;
use crate::injector::msg::InjectorMsg;
use crate::injector::state::{Message, TargetView, delivery_text};
use crate::registry::actor::RegistryMsg;
use crate::registry::state::{ExitInfo, MemberRecord};
use crate::slot::state::{Cause, Effect, LinkDown, Relink, Signal, SlotCore, SlotSettings, relink};
use crate::term::{TermEvent, TermHandle, TermInput};
use crate::timer::Timer;
use crate::types::{MemberName, Millis, MsgId, Role, Status, Written};

/// Output chunks in flight from a terminal to its slot; the reader waits past this.
const TERM_EVENTS_IN_FLIGHT: usize = 64;

pub enum SlotMsg {
    Term(TermEvent, Option<OwnedSemaphorePermit>),
    Tick,
    /// Paste a message (from the injector); the result goes back as `InjectorMsg::PasteResult`.
    Paste {
        msg: Box<Message>,
    },
    Signal {
        signal: Signal,
        reply: RpcReplyPort<Result<(), FleetError>>,
    },
    View {
        reply: RpcReplyPort<SlotView>,
    },
    Tail {
        reply: RpcReplyPort<String>,
    },
    Input {
        bytes: Vec<u8>,
        reply: RpcReplyPort<Result<(), FleetError>>,
    },
    Attach {
        reply: AttachReply,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    /// Terminate the program; the reply comes once it has exited.
    Stop {
        reason: String,
        reply: RpcReplyPort<()>,
    },
    Reload,
    /// The member's `fleetd mcp` listed the fleet tools.
    ToolsListed,
    /// After a restart: was this message, recorded as delivered, written to the terminal? If
    /// so its turn is watched for from now.
    Resolve {
        msg: Box<Message>,
        reply: RpcReplyPort<Written>,
    },
    /// The paste handed to the terminal host and not yet confirmed written, if any.
    Unconfirmed {
        reply: RpcReplyPort<Option<MsgId>>,
    },
    /// Answered once no paste waits for the terminal host's confirmation (shutdown waits on
    /// it, bounded).
    Settled {
        reply: RpcReplyPort<()>,
    },
    /// Tell the injector the current status (it just started). Sent through the same path as
    /// every status change, so a stale view can never overtake a newer one.
    Announce,
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
    /// Debug builds only: have the terminal host drop this slot's connection (a broken link).
    BreakLink,
}

/// The answer to an attach: the screen, then a live stream of the terminal's output.
pub type AttachReply = RpcReplyPort<(Vec<u8>, broadcast::Receiver<Vec<u8>>)>;

/// What status and screen views show of a slot.
#[derive(Clone, Debug, Serialize)]
pub struct SlotView {
    pub status: Status,
    pub injectable: bool,
    pub status_since: Millis,
    pub pinned_by_signal: bool,
    pub rows: u16,
    pub cols: u16,
    pub screen: String,
    /// The screen model is dropped here (the member sat still; its terminal host keeps it).
    pub screen_dormant: bool,
}

pub struct SlotArgs {
    pub ctx: SharedCtx,
    pub name: MemberName,
    /// A fresh launch's terminal; `None` means reconnect (a restart or a re-adoption).
    pub handle: Arc<Mutex<Option<TermHandle>>>,
}

pub struct SlotActor;

pub struct SlotActorState {
    ctx: SharedCtx,
    name: MemberName,
    role: Role,
    generation: u64,
    core: SlotCore,
    profile_name: String,
    input: Option<mpsc::Sender<TermInput>>,
    /// The output stream to attached viewers, made at the first attach and dropped once
    /// nobody watches (an idle member does not keep a stream buffer).
    out: Option<broadcast::Sender<Vec<u8>>>,
    /// Whether the terminal host hands its screen back when asked (so a still member's screen
    /// can be dropped here).
    screen_on_request: bool,
    /// Attaches waiting for a dropped screen to come back from the terminal host.
    attach_waiters: Vec<AttachReply>,
    timer: Timer,
    exit_reason: Option<String>,
    stop_waiters: Vec<RpcReplyPort<()>>,
    forward: Option<tokio::task::JoinHandle<()>>,
    done: bool,
    /// The member's own git worktree, removed at its exit unless it holds work.
    worktree: Option<crate::registry::state::Worktree>,
    /// Who waits for the paste in flight to be confirmed written.
    settle_waiters: Vec<RpcReplyPort<()>>,
}

/// The viewers' stream buffer: output chunks a slow viewer may lag behind by.
const VIEWER_BUFFER: usize = 256;

fn settings(ctx: &SharedCtx, role: Role, screen_on_request: bool) -> SlotSettings {
    let c = ctx.config();
    let exempt = c.lifecycle.idle_ttl_exempt.contains(&role);
    SlotSettings {
        rows: c.lifecycle.rows,
        cols: c.lifecycle.cols,
        idle_ttl_ms: if exempt {
            0
        } else {
            c.lifecycle.idle_ttl_seconds.saturating_mul(1000)
        },
        tail_lines: c.tickets.tail_lines,
        accept_timeout_ms: c.injector.accept_timeout_ms,
        dormant_ms: if screen_on_request {
            c.lifecycle.screen_dormant_seconds.saturating_mul(1000)
        } else {
            0
        },
    }
}

fn profile(ctx: &SharedCtx, name: &str) -> CompiledProfile {
    let c = ctx.config();
    match c.compiled_profile(name) {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(profile = name, error = %e, "profile unavailable; reading the screen with generic rules");
            // The generic profile has no regex to fail.
            CompiledProfile::compile("generic", &Profile::default())
                .unwrap_or_else(|_| unreachable!())
        }
    }
}

fn describe_exit(code: Option<i32>, signal: &Option<String>) -> String {
    match (code, signal) {
        (_, Some(sig)) => format!("killed by {sig}"),
        (Some(c), None) => format!("exited with code {c}"),
        (None, None) => "exited".into(),
    }
}

impl SlotActorState {
    async fn apply(&mut self, fx: Vec<Effect>) {
        let mut announce = false;
        for e in fx {
            match e {
                Effect::Status {
                    from,
                    to,
                    injectable,
                    cause,
                    blocked,
                } => {
                    let reason = blocked.as_ref().map(|(r, _)| *r);
                    tracing::debug!(member = %self.name, %from, %to, injectable, ?cause, ?reason, "status");
                    if reason == Some(crate::slot::state::UNRECOGNISED) {
                        tracing::warn!(member = %self.name, "blocked: an unrecognised screen has been still for the profile's window");
                    }
                    if let Ok(r) = self.ctx.dir.registry() {
                        r.cast(RegistryMsg::Status {
                            name: self.name.clone(),
                            status: to,
                            blocked: blocked.as_ref().map(|(r, s)| {
                                crate::registry::state::Blocked {
                                    reason: r.to_string(),
                                    screen: s.clone(),
                                }
                            }),
                        });
                    }
                    if let Some(i) = self.ctx.dir.injector(&self.name) {
                        i.cast(InjectorMsg::Target(TargetView {
                            status: to,
                            injectable,
                        }));
                    }
                    self.ctx.events.emit(EventKind::Status {
                        member: self.name.clone(),
                        from,
                        to,
                        injectable,
                        cause: match cause {
                            Cause::Screen => "screen",
                            Cause::Signal => "signal",
                            Cause::Exit => "exit",
                        }
                        .into(),
                        reason: reason.map(str::to_string),
                        screen: blocked.map(|(_, s)| s),
                    });
                }
                Effect::Paste {
                    msg,
                    bytes,
                    enter_delay_ms,
                } => {
                    let sent = match &self.input {
                        Some(i) => i
                            .send(TermInput::Paste {
                                id: msg.0,
                                bytes,
                                enter_delay_ms,
                            })
                            .await
                            .map_err(|_| "the terminal is closed"),
                        None => Err("the terminal is closed"),
                    };
                    if let Err(why) = sent
                        && let Some(i) = self.ctx.dir.injector(&self.name)
                    {
                        i.cast(InjectorMsg::PasteResult {
                            id: msg,
                            result: Err(why.to_string()),
                        });
                    }
                }
                Effect::Write(bytes) => {
                    if let Some(i) = &self.input {
                        let _ = i.send(TermInput::Bytes(bytes)).await;
                    }
                }
                Effect::TurnStarted { msg, by } => {
                    tracing::debug!(member = %self.name, %msg, ?by, "turn started on the paste");
                    if let Some(i) = self.ctx.dir.injector(&self.name) {
                        i.cast(InjectorMsg::TurnStarted { id: msg });
                    }
                    // Then the status after this start, even if it did not change (a quick
                    // turn may already be over).
                    announce = true;
                }
                Effect::NotStarted {
                    msg,
                    waited_ms,
                    screen,
                } => {
                    // The screen's lines go apart from the reason: they are screen text, shown
                    // by the Screen rule (the member and the operator), the reason to all.
                    let why = format!(
                        "`{}` did not start a turn on it within {waited_ms} ms of the Enter \
                         (no turn-start hook, no busy marker); what its screen showed is in the \
                         receipt's `screen`, for the operator and `{}` itself",
                        self.name, self.name
                    );
                    tracing::info!(member = %self.name, %msg, "paste not taken");
                    if let Some(i) = self.ctx.dir.injector(&self.name) {
                        i.cast(InjectorMsg::NotStarted {
                            id: msg,
                            why,
                            screen: Some(screen),
                        });
                    }
                }
                Effect::ScreenDropped => {
                    tracing::debug!(member = %self.name, "still screen dropped; the host keeps it");
                    crate::memory::release_soon();
                }
                Effect::WantScreen => {
                    if let Some(i) = &self.input {
                        let _ = i.send(TermInput::Screen).await;
                    }
                }
                Effect::Reap { idle_ms } => {
                    let ttl = self.ctx.config().lifecycle.idle_ttl_seconds;
                    let reason = format!(
                        "reaped: idle for {} s (lifecycle.idle_ttl_seconds = {ttl})",
                        idle_ms / 1000
                    );
                    tracing::info!(member = %self.name, %reason, "reaping an idle member");
                    self.ctx.events.emit(EventKind::Reaped {
                        member: self.name.clone(),
                        idle_ms,
                    });
                    self.terminate(reason);
                }
            }
        }
        if announce && let Some(i) = self.ctx.dir.injector(&self.name) {
            i.cast(InjectorMsg::Target(TargetView {
                status: self.core.status(),
                injectable: self.core.injectable(),
            }));
        }
    }

    fn terminate(&mut self, reason: String) {
        if self.exit_reason.is_none() {
            self.exit_reason = Some(reason);
        }
        let grace_ms = self.ctx.config().lifecycle.stop_grace_ms;
        if let Some(i) = &self.input
            && i.try_send(TermInput::Terminate { grace_ms }).is_err()
        {
            tracing::warn!(member = %self.name, "terminal input is full or closed; terminate not sent");
        }
    }

    /// The program is gone: record it, tell everyone, and stop this actor (normally).
    async fn finish(
        &mut self,
        myself: &ActorRef<SlotMsg>,
        code: Option<i32>,
        signal: Option<String>,
        fallback: String,
    ) {
        if self.done {
            return;
        }
        self.done = true;
        let now = self.ctx.now();
        let fx = self.core.exited(now);
        self.apply(fx).await;
        let reason = match self.exit_reason.take() {
            Some(r) => r,
            None if code.is_some() || signal.is_some() => describe_exit(code, &signal),
            None => fallback,
        };
        let exit = ExitInfo {
            at: now,
            code,
            reason,
        };
        if let Ok(r) = self.ctx.dir.registry() {
            // Wait until the exit is durable, so a restart never re-adopts a finished member.
            let _ = r
                .call(
                    |reply| RegistryMsg::Released {
                        name: self.name.clone(),
                        exit,
                        reply: Some(reply),
                    },
                    Duration::from_secs(10),
                )
                .await;
        }
        if let Some(w) = self.worktree.take() {
            let name = self.name.clone();
            match tokio::task::spawn_blocking(move || crate::worktree::cleanup(&w).map(|c| (c, w)))
                .await
            {
                Ok(Ok((crate::worktree::Cleanup::Removed, w))) => {
                    tracing::info!(member = %name, path = %w.path, "worktree removed: it held no work")
                }
                Ok(Ok((crate::worktree::Cleanup::Kept(why), w))) => {
                    tracing::info!(member = %name, path = %w.path, %why, "worktree kept")
                }
                Ok(Err(e)) => tracing::warn!(member = %name, error = %e, "worktree cleanup failed"),
                Err(e) => tracing::warn!(member = %name, error = %e, "worktree cleanup failed"),
            }
        }
        for w in self.stop_waiters.drain(..) {
            let _ = w.send(());
        }
        myself.stop(Some("member exited".into()));
    }

    fn view(&self) -> SlotView {
        let (rows, cols) = self.core.size();
        SlotView {
            status: self.core.status(),
            injectable: self.core.injectable(),
            status_since: self.core.status_since(),
            pinned_by_signal: self.core.is_pinned(),
            rows,
            cols,
            screen: self.core.screen_text(),
            screen_dormant: self.core.is_dormant(),
        }
    }

    /// A receiver of the output stream to viewers (made at the first).
    fn viewers(&mut self) -> broadcast::Receiver<Vec<u8>> {
        match &self.out {
            Some(out) => out.subscribe(),
            None => {
                let (out, rx) = broadcast::channel(VIEWER_BUFFER);
                self.out = Some(out);
                rx
            }
        }
    }

    fn rearm(&mut self, myself: &ActorRef<SlotMsg>) {
        let now = self.ctx.now();
        self.timer
            .arm(myself, self.core.next_deadline(), now, || SlotMsg::Tick);
    }
}

/// Connect to a running member's terminal host (a restarted slot, a re-adoption at start, a
/// lost link made again), trying again as the core's [`relink`] says.
async fn reconnect(
    ctx: &SharedCtx,
    name: &MemberName,
    generation: u64,
) -> Result<TermHandle, FleetError> {
    let mut attempt = 0u32;
    loop {
        let e = match ctx.term.connect(name, generation).await {
            Ok(h) => return Ok(h),
            Err(e) => e,
        };
        let down = if e.kind == ErrorKind::NotFound {
            LinkDown::NoHost
        } else {
            LinkDown::Failed
        };
        let recorded = ctx.term.recorded_exit(name, generation).is_some();
        match relink(down, recorded, attempt) {
            Relink::Reconnect { after_ms } => {
                tracing::info!(member = %name, error = %e, attempt, "its terminal host did not take the connection; trying again");
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                attempt = attempt.saturating_add(1);
            }
            Relink::Exited | Relink::Gone => return Err(e),
        }
    }
}

/// Forward terminal events to the slot, at most `TERM_EVENTS_IN_FLIGHT` unprocessed at a time.
fn forward(
    myself: ActorRef<SlotMsg>,
    mut events: mpsc::Receiver<TermEvent>,
) -> tokio::task::JoinHandle<()> {
    let permits = Arc::new(Semaphore::new(TERM_EVENTS_IN_FLIGHT));
    tokio::spawn(async move {
        while let Some(ev) = events.recv().await {
            let Ok(permit) = permits.clone().acquire_owned().await else {
                break;
            };
            let last = matches!(ev, TermEvent::Exited { .. } | TermEvent::Lost(_));
            if myself.cast(SlotMsg::Term(ev, Some(permit))).is_err() || last {
                break;
            }
        }
    })
}

impl Actor for SlotActor {
    type Msg = SlotMsg;
    type State = SlotActorState;
    type Arguments = SlotArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SlotMsg>,
        args: SlotArgs,
    ) -> Result<SlotActorState, ActorProcessingErr> {
        let ctx = args.ctx;
        let name = args.name;
        let n2 = name.clone();
        let record: MemberRecord = ctx
            .store
            .run(move |s| s.load_member(&n2))
            .await?
            .ok_or_else(|| {
                FleetError::internal(format!("slot of `{name}`"), "no member record in the store")
            })?;
        let prof = profile(&ctx, &record.profile);
        let now = ctx.now();
        let fresh = args.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        let adopted = fresh.is_none();
        let handle = match fresh {
            Some(h) => Ok(h),
            None => reconnect(&ctx, &name, record.generation).await,
        };
        let screen_on_request = handle.as_ref().is_ok_and(|h| h.screen_on_request);
        let mut core = SlotCore::new(prof, settings(&ctx, record.role, screen_on_request), now);
        let mut adopted_pid = None;
        let (input, fwd, exit_reason) = match handle {
            Ok(h) => {
                if !screen_on_request {
                    tracing::info!(member = %name, "its terminal host cannot hand its screen back (an older host): the screen stays in the daemon");
                }
                if adopted && !h.snapshot.is_empty() {
                    core.restore(&h.snapshot, record.status, record.status_since);
                } else if !adopted {
                    // A fresh launch: what it drew before this connection is output like any
                    // other (its start waits still hold).
                    let _ = core.output(&h.snapshot, now);
                }
                core.host_pastes(&h.pasted);
                if adopted {
                    tracing::info!(member = %name, pid = h.pid, "terminal re-adopted");
                    adopted_pid = Some(h.pid);
                }
                if (record.pid != Some(h.pid) || record.host_pid != h.host_pid)
                    && let Ok(r) = ctx.dir.registry()
                {
                    r.cast(RegistryMsg::Pids {
                        name: name.clone(),
                        pid: Some(h.pid),
                        host_pid: h.host_pid,
                    });
                }
                (Some(h.input), Some(forward(myself.clone(), h.events)), None)
            }
            Err(e) => {
                // The terminal did not survive: record the member as exited and stop.
                let (code, signal) = ctx
                    .term
                    .recorded_exit(&name, record.generation)
                    .unwrap_or((None, None));
                let reason = if code.is_some() || signal.is_some() {
                    format!("{} while the daemon was down", describe_exit(code, &signal))
                } else {
                    format!("its terminal is gone ({})", e.why)
                };
                let _ = myself.cast(SlotMsg::Term(TermEvent::Exited { code, signal }, None));
                (None, None, Some(reason))
            }
        };
        let st = SlotActorState {
            ctx: ctx.clone(),
            name: name.clone(),
            role: record.role,
            generation: record.generation,
            core,
            profile_name: record.profile.clone(),
            input,
            out: None,
            screen_on_request,
            attach_waiters: vec![],
            timer: Timer::new(),
            exit_reason,
            stop_waiters: vec![],
            forward: fwd,
            done: false,
            worktree: record.worktree.clone(),
            settle_waiters: vec![],
        };
        ctx.dir.set_slot(
            &name,
            Mailbox::new(
                myself.clone(),
                ctx.mailbox_cap(),
                format!("the slot of `{name}`"),
            ),
        );
        // Announced once the slot can take calls.
        if let Some(pid) = adopted_pid {
            ctx.events.emit(EventKind::Adopted {
                member: name.clone(),
                pid: Some(pid),
            });
        }
        Ok(st)
    }

    async fn post_start(
        &self,
        myself: ActorRef<SlotMsg>,
        st: &mut SlotActorState,
    ) -> Result<(), ActorProcessingErr> {
        // Tell the injector where we stand (it may have restarted before us, or we after it).
        if let Some(i) = st.ctx.dir.injector(&st.name) {
            i.cast(InjectorMsg::Target(TargetView {
                status: st.core.status(),
                injectable: st.core.injectable(),
            }));
        }
        st.rearm(&myself);
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<SlotMsg>,
        st: &mut SlotActorState,
    ) -> Result<(), ActorProcessingErr> {
        st.timer.cancel();
        if let Some(f) = st.forward.take() {
            f.abort();
        }
        if !st.done
            && let Some(i) = st.input.take()
        {
            // Daemon shutdown or restart: leave the program running for re-adoption.
            let _ = i.try_send(TermInput::Detach);
        }
        st.ctx.dir.remove_slot(&st.name, myself.get_id());
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SlotMsg>,
        msg: SlotMsg,
        st: &mut SlotActorState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            SlotMsg::Term(ev, _permit) => match ev {
                TermEvent::Output(bytes) => {
                    // Viewers first: their copy does not wait for the screen's parse and the
                    // status read from it (nothing else runs in between, so an attach still
                    // sees a screen and then exactly the bytes after it).
                    if let Some(out) = &st.out {
                        if out.receiver_count() == 0 {
                            st.out = None;
                        } else {
                            let _ = out.send(bytes.clone());
                        }
                    }
                    let fx = st.core.output(&bytes, now);
                    st.apply(fx).await;
                }
                TermEvent::Screen(screen) => {
                    let fx = st.core.screen_returned(&screen, now);
                    st.apply(fx).await;
                    if let Some(formatted) = st.core.screen_formatted() {
                        for w in std::mem::take(&mut st.attach_waiters) {
                            let rx = st.viewers();
                            let _ = w.send((formatted.clone(), rx));
                        }
                    }
                }
                TermEvent::Exited { code, signal } => {
                    st.finish(&myself, code, signal, "exited".into()).await;
                    return Ok(());
                }
                TermEvent::Pasted { id } => {
                    let fx = st.core.pasted(MsgId(id), now);
                    st.apply(fx).await;
                    if st.core.paste_unconfirmed().is_none() {
                        for w in st.settle_waiters.drain(..) {
                            let _ = w.send(());
                        }
                    }
                }
                TermEvent::PasteRefused { id, why } => {
                    if let Some(i) = st.ctx.dir.injector(&st.name) {
                        i.cast(InjectorMsg::PasteResult {
                            id: MsgId(id),
                            result: Err(why),
                        });
                    }
                }
                TermEvent::Lost(why) => {
                    let recorded = st.ctx.term.recorded_exit(&st.name, st.generation);
                    if let Relink::Reconnect { .. } = relink(LinkDown::Lost, recorded.is_some(), 0)
                    {
                        // The host recorded no exit: it is most likely still there. Fail, so
                        // the supervisor restarts this slot (with its backoff and limits) and
                        // the new one reconnects and re-adopts the member; a host that is gone
                        // is found so then.
                        tracing::warn!(member = %st.name, %why, "terminal link lost; reconnecting");
                        st.timer.cancel();
                        return Err(FleetError::unavailable(
                            format!("the terminal link of `{}`", st.name),
                            format!("it was lost ({why}); the slot restarts to reconnect"),
                        )
                        .into());
                    }
                    let (code, signal) = recorded.unwrap_or((None, None));
                    st.finish(
                        &myself,
                        code,
                        signal,
                        format!("terminal connection lost: {why}"),
                    )
                    .await;
                    return Ok(());
                }
            },
            SlotMsg::Tick => {
                st.timer.fired();
                let fx = st.core.tick(now);
                st.apply(fx).await;
            }
            SlotMsg::Paste { msg } => {
                let fx = st.core.paste(msg.id, &delivery_text(&msg));
                st.apply(fx).await;
            }
            SlotMsg::Signal { signal, reply } => {
                tracing::debug!(member = %st.name, signal = signal.name(), "signal");
                let fx = st.core.signal(signal, now);
                st.apply(fx).await;
                let _ = reply.send(Ok(()));
            }
            SlotMsg::View { reply } => {
                let _ = reply.send(st.view());
            }
            SlotMsg::Tail { reply } => {
                let _ = reply.send(st.core.tail());
            }
            SlotMsg::Input { bytes, reply } => {
                let r = match &st.input {
                    Some(i) => i.send(TermInput::Bytes(bytes)).await.map_err(|_| {
                        FleetError::conflict(
                            format!("input to `{}`", st.name),
                            "its terminal is closed",
                            "input to a live member",
                        )
                    }),
                    None => Err(FleetError::conflict(
                        format!("input to `{}`", st.name),
                        "it has exited",
                        "input to a live member",
                    )),
                };
                let _ = reply.send(r);
            }
            SlotMsg::Attach { reply } => match st.core.screen_formatted() {
                Some(screen) => {
                    let rx = st.viewers();
                    let _ = reply.send((screen, rx));
                }
                None => {
                    // Dropped while the member sat still: the host's screen comes first.
                    st.attach_waiters.push(reply);
                    let fx = st.core.wake();
                    st.apply(fx).await;
                }
            },
            SlotMsg::Resize { rows, cols } => {
                st.core.resize(rows, cols);
                if let Some(i) = &st.input {
                    let _ = i.send(TermInput::Resize { rows, cols }).await;
                }
            }
            SlotMsg::Stop { reason, reply } => {
                st.stop_waiters.push(reply);
                st.terminate(reason);
            }
            SlotMsg::Reload => {
                st.core.set_profile(profile(&st.ctx, &st.profile_name));
                st.core
                    .set_settings(settings(&st.ctx, st.role, st.screen_on_request));
            }
            SlotMsg::Resolve { msg, reply } => {
                let (written, fx) = st.core.resolve(msg.id, &delivery_text(&msg), now);
                let _ = reply.send(written);
                // After the answer: the injector applies it before any evidence.
                st.apply(fx).await;
            }
            SlotMsg::Unconfirmed { reply } => {
                let _ = reply.send(st.core.paste_unconfirmed());
            }
            SlotMsg::Settled { reply } => {
                if st.core.paste_unconfirmed().is_none() {
                    let _ = reply.send(());
                } else {
                    st.settle_waiters.push(reply);
                }
            }
            SlotMsg::ToolsListed => {
                let fx = st.core.tools_listed(now);
                st.apply(fx).await;
            }
            SlotMsg::Announce => {
                if let Some(i) = st.ctx.dir.injector(&st.name) {
                    i.cast(InjectorMsg::Target(TargetView {
                        status: st.core.status(),
                        injectable: st.core.injectable(),
                    }));
                }
            }
            SlotMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the slot of `{}`", st.name);
                }
            }
            SlotMsg::BreakLink => {
                if cfg!(debug_assertions)
                    && let Some(i) = &st.input
                {
                    // The host drops this connection; the link's reader sees it closed.
                    let _ = i.send(TermInput::Detach).await;
                }
            }
        }
        st.rearm(&myself);
        Ok(())
    }
}

/// How a member's slot is found: the directory's entry under its member name, registered by the actor itself.
impl Directory {
    pub fn slot(&self, key: &MemberName) -> Option<Mailbox<SlotMsg>> {
        self.get(&key.to_string())
    }
    pub fn set_slot(&self, key: &MemberName, m: Mailbox<SlotMsg>) {
        self.set_mailbox(&key.to_string(), m);
    }
    /// Remove `key`'s entry if it still points at actor `id`.
    pub fn remove_slot(&self, key: &MemberName, id: ractor::ActorId) {
        self.remove_if::<Mailbox<SlotMsg>>(&key.to_string(), id);
    }
}
