//! The shared context every actor shell gets: the store, the event bus, the clock, the live
//! config, the terminal backend, the directory of current actor references, and the pid index
//! the daemon resolves callers with.
//!
//! Owns how actors find each other across restarts (each actor registers itself in
//! `pre_start` and removes itself in `post_stop`) and the bound on requests in flight per
//! actor. Must never hold product rules: those live in the cores.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ractor::rpc::CallResult;
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::decision::actor::DecisionMsg;
use crate::decision::state::Decision;
use crate::error::FleetError;
use crate::events::EventBus;
use crate::injector::actor::InjectorMsg;
use crate::ledger::actor::LedgerMsg;
use crate::registry::actor::RegistryMsg;
use crate::slot::actor::SlotMsg;
use crate::store::Store;
use crate::term::TermBackend;
use crate::tickets::actor::DeskMsg;
use crate::types::{DecisionId, MemberIdentity, MemberName, Millis};

/// A reference to an actor with a bound on the requests in flight to it. Every request from
/// outside the actors (MCP, REST) goes through [`Mailbox::call`], so no actor's mailbox grows
/// past `limits.mailbox` because of callers; internal traffic is bounded by construction
/// (bounded channels from terminals, one timer per actor).
pub struct Mailbox<M: ractor::Message> {
    pub actor: ActorRef<M>,
    permits: Arc<Semaphore>,
    cap: usize,
    label: String,
}

impl<M: ractor::Message> Clone for Mailbox<M> {
    fn clone(&self) -> Self {
        Mailbox {
            actor: self.actor.clone(),
            permits: self.permits.clone(),
            cap: self.cap,
            label: self.label.clone(),
        }
    }
}

impl<M: ractor::Message> Mailbox<M> {
    pub fn new(actor: ActorRef<M>, cap: usize, label: impl Into<String>) -> Self {
        Mailbox {
            actor,
            permits: Arc::new(Semaphore::new(cap.max(1))),
            cap: cap.max(1),
            label: label.into(),
        }
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Ask the actor and wait (bounded) for its answer.
    pub async fn call<R: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<R>) -> M,
        timeout: Duration,
    ) -> Result<R, FleetError> {
        let _permit = self.permits.clone().try_acquire_owned().map_err(|_| {
            FleetError::overloaded(
                format!("a request to {}", self.label),
                format!(
                    "{} requests are already in flight to it (limits.mailbox = {})",
                    self.cap, self.cap
                ),
                "the same request once the daemon has caught up",
            )
        })?;
        match self.actor.call(build, Some(timeout)).await {
            Ok(CallResult::Success(r)) => Ok(r),
            Ok(CallResult::Timeout) => Err(FleetError::timeout(
                format!("a request to {}", self.label),
                format!("no answer within {} ms", timeout.as_millis()),
                "the same request again; if it keeps timing out, see the daemon log",
            )),
            Ok(CallResult::SenderError) | Err(_) => Err(FleetError::unavailable(
                format!("a request to {}", self.label),
                "the actor stopped or is restarting",
            )),
        }
    }

    /// Send without waiting (internal traffic only).
    pub fn cast(&self, msg: M) {
        if self.actor.cast(msg).is_err() {
            tracing::debug!(actor = %self.label, "cast to a stopped actor dropped");
        }
    }
}

/// Where each actor currently lives. Entries change when an actor restarts.
pub struct Directory {
    registry: RwLock<Option<Mailbox<RegistryMsg>>>,
    tickets: RwLock<Option<Mailbox<DeskMsg>>>,
    slots: RwLock<HashMap<MemberName, Mailbox<SlotMsg>>>,
    injectors: RwLock<HashMap<MemberName, Mailbox<InjectorMsg>>>,
    ledger: RwLock<Option<Mailbox<LedgerMsg>>>,
    decisions: RwLock<HashMap<DecisionId, Mailbox<DecisionMsg>>>,
    mail: RwLock<Option<Mailbox<crate::mail::actor::MailMsg>>>,
    /// Fired on every change, so callers can wait out an actor's restart.
    changed: tokio::sync::Notify,
}

fn read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}
fn write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl Default for Directory {
    fn default() -> Self {
        Directory {
            registry: RwLock::new(None),
            tickets: RwLock::new(None),
            slots: RwLock::new(HashMap::new()),
            injectors: RwLock::new(HashMap::new()),
            ledger: RwLock::new(None),
            decisions: RwLock::new(HashMap::new()),
            mail: RwLock::new(None),
            changed: tokio::sync::Notify::new(),
        }
    }
}

impl Directory {
    pub fn registry(&self) -> Result<Mailbox<RegistryMsg>, FleetError> {
        read(&self.registry)
            .clone()
            .ok_or_else(|| FleetError::unavailable("the registry", "it is restarting"))
    }
    pub fn set_registry(&self, m: Option<Mailbox<RegistryMsg>>) {
        *write(&self.registry) = m;
        self.changed.notify_waiters();
    }
    pub fn tickets(&self) -> Result<Mailbox<DeskMsg>, FleetError> {
        read(&self.tickets)
            .clone()
            .ok_or_else(|| FleetError::unavailable("the ticket desk", "it is restarting"))
    }
    pub fn set_tickets(&self, m: Option<Mailbox<DeskMsg>>) {
        *write(&self.tickets) = m;
        self.changed.notify_waiters();
    }
    pub fn slot(&self, name: &MemberName) -> Option<Mailbox<SlotMsg>> {
        read(&self.slots).get(name).cloned()
    }
    pub fn set_slot(&self, name: &MemberName, m: Mailbox<SlotMsg>) {
        write(&self.slots).insert(name.clone(), m);
        self.changed.notify_waiters();
    }
    /// Remove `name`'s slot entry if it still points at actor `id`.
    pub fn remove_slot(&self, name: &MemberName, id: ractor::ActorId) {
        let mut g = write(&self.slots);
        if g.get(name).is_some_and(|m| m.actor.get_id() == id) {
            g.remove(name);
        }
    }
    /// Every member that has an injector now.
    pub fn injector_names(&self) -> Vec<MemberName> {
        read(&self.injectors).keys().cloned().collect()
    }
    pub fn injector(&self, name: &MemberName) -> Option<Mailbox<InjectorMsg>> {
        read(&self.injectors).get(name).cloned()
    }
    pub fn set_injector(&self, name: &MemberName, m: Mailbox<InjectorMsg>) {
        write(&self.injectors).insert(name.clone(), m);
        self.changed.notify_waiters();
    }

    pub fn ledger(&self) -> Result<Mailbox<LedgerMsg>, FleetError> {
        read(&self.ledger)
            .clone()
            .ok_or_else(|| FleetError::unavailable("the ledger writer", "it is restarting"))
    }
    pub fn set_ledger(&self, m: Option<Mailbox<LedgerMsg>>) {
        *write(&self.ledger) = m;
        self.changed.notify_waiters();
    }
    /// The post office (lead-to-lead mail), when links are configured and it is running.
    pub fn mail(&self) -> Option<Mailbox<crate::mail::actor::MailMsg>> {
        read(&self.mail).clone()
    }
    pub fn set_mail(&self, m: Option<Mailbox<crate::mail::actor::MailMsg>>) {
        *write(&self.mail) = m;
        self.changed.notify_waiters();
    }
    pub fn decision(&self, id: DecisionId) -> Option<Mailbox<DecisionMsg>> {
        read(&self.decisions).get(&id).cloned()
    }
    pub fn set_decision(&self, id: DecisionId, m: Mailbox<DecisionMsg>) {
        write(&self.decisions).insert(id, m);
        self.changed.notify_waiters();
    }
    pub fn remove_decision(&self, id: DecisionId, actor: ractor::ActorId) {
        let mut g = write(&self.decisions);
        if g.get(&id).is_some_and(|m| m.actor.get_id() == actor) {
            g.remove(&id);
        }
    }

    /// Forget the registry / desk entry if it still points at actor `id` (it died).
    pub fn remove_singleton(&self, id: ractor::ActorId) {
        {
            let mut g = write(&self.registry);
            if g.as_ref().is_some_and(|m| m.actor.get_id() == id) {
                *g = None;
            }
        }
        {
            let mut g = write(&self.tickets);
            if g.as_ref().is_some_and(|m| m.actor.get_id() == id) {
                *g = None;
            }
        }
        let mut g = write(&self.ledger);
        if g.as_ref().is_some_and(|m| m.actor.get_id() == id) {
            *g = None;
        }
    }

    /// Wait (at most `timeout`) until `get` finds what it looks for: rides out an actor's
    /// restart instead of failing the caller.
    pub async fn wait_for<X>(
        &self,
        get: impl Fn(&Self) -> Option<X>,
        timeout: Duration,
    ) -> Option<X> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(v) = get(self) {
                return Some(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return get(self);
            }
        }
    }
    pub fn remove_injector(&self, name: &MemberName, id: ractor::ActorId) {
        let mut g = write(&self.injectors);
        if g.get(name).is_some_and(|m| m.actor.get_id() == id) {
            g.remove(name);
        }
    }
}

/// The directory (kept under its old name).
pub type Dir = Directory;

/// Everything the actor shells share.
pub struct Ctx {
    pub store: Store,
    pub events: Arc<EventBus>,
    pub clock: SharedClock,
    config: RwLock<Arc<Config>>,
    pub term: Arc<dyn TermBackend>,
    pub dir: Dir,
    /// Member root pid -> identity, kept by the registry shell; the daemon walks a caller's
    /// process ancestry against it.
    pids: RwLock<HashMap<u32, MemberIdentity>>,
    /// Bumped at every change of `pids`, so a caller resolved as outside every member can be
    /// kept until a member is registered.
    pids_version: AtomicU64,
    next_msg: AtomicU64,
    pub state_dir: PathBuf,
    /// This fleetd binary, for `{fleetd}` in profile commands.
    pub fleetd_exe: PathBuf,
    pub started_at: Millis,
    /// Why the daemon escalated, once it has.
    pub escalation: Mutex<Option<String>>,
    /// The host's ed25519 key: signs ledger checkpoints and drift lines, and is the identity
    /// its peer links authenticate (their TLS certificates carry it).
    pub host_key: ed25519_dalek::SigningKey,
    /// Every decision, as replayed from the ledger and kept current by the decision actors
    /// (the read model for list, status and show).
    decisions: RwLock<std::collections::BTreeMap<DecisionId, Decision>>,
    next_decision: AtomicU64,
    /// The drift protocol's live state (reports, alerts, the KB index).
    pub drift: crate::drift::service::DriftState,
    /// The root supervisor, for actors that start siblings (the drift scheduler's pullers).
    pub supervisor: std::sync::OnceLock<ActorRef<crate::supervisor::actor::SupervisorMsg>>,
    /// Each peer link as its actor last published it.
    pub links: RwLock<std::collections::BTreeMap<String, crate::link::state::LinkView>>,
    /// Debug builds: fault hooks registered by actors this crate does not know (the binary's
    /// peer links), by fault target (`link:PEER`).
    pub fault_hooks: RwLock<HashMap<String, FaultHook>>,
    /// The post office as it last published itself.
    pub mail_view: RwLock<crate::mail::actor::MailView>,
    /// Every anchor held of identities homed on other hosts (the anchor puller publishes them;
    /// the drift pass runs the gates on them).
    pub remote_anchors: RwLock<Vec<crate::drift::remote::RemoteAnchor>>,
}

/// Makes an actor panic (debug builds; supervision tests).
pub type FaultHook = Arc<dyn Fn() + Send + Sync>;

impl Ctx {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        events: Arc<EventBus>,
        clock: SharedClock,
        config: Config,
        term: Arc<dyn TermBackend>,
        state_dir: PathBuf,
        fleetd_exe: PathBuf,
        last_msg_id: u64,
        host_key: ed25519_dalek::SigningKey,
    ) -> Self {
        let started_at = clock.now();
        Ctx {
            store,
            events,
            clock,
            config: RwLock::new(Arc::new(config)),
            term,
            dir: Dir::default(),
            pids: RwLock::new(HashMap::new()),
            pids_version: AtomicU64::new(0),
            next_msg: AtomicU64::new(last_msg_id + 1),
            state_dir,
            fleetd_exe,
            started_at,
            escalation: Mutex::new(None),
            host_key,
            decisions: RwLock::new(Default::default()),
            next_decision: AtomicU64::new(1),
            drift: Default::default(),
            supervisor: std::sync::OnceLock::new(),
            links: RwLock::new(Default::default()),
            fault_hooks: RwLock::new(HashMap::new()),
            mail_view: RwLock::new(Default::default()),
            remote_anchors: RwLock::new(vec![]),
        }
    }

    /// Every peer link's view, by peer name.
    pub fn link_views(&self) -> Vec<crate::link::state::LinkView> {
        read(&self.links).values().cloned().collect()
    }

    /// The drift knowledge base: `STATE_DIR/kb`.
    pub fn kb_dir(&self) -> PathBuf {
        self.state_dir.join("kb")
    }

    /// The signer keys this host trusts: its own, and `drift.trust`.
    pub fn trusted_keys(&self) -> Vec<ed25519_dalek::VerifyingKey> {
        let mut v = vec![self.host_key.verifying_key()];
        v.extend(
            self.config()
                .drift
                .trust
                .iter()
                .filter_map(|k| crate::keys::parse_public(k).ok()),
        );
        v
    }

    /// Replace the decision read model (at ledger recovery).
    pub fn set_decisions(&self, ds: std::collections::BTreeMap<DecisionId, Decision>) {
        let next = ds.keys().map(|d| d.0).max().unwrap_or(0) + 1;
        self.next_decision.fetch_max(next, Ordering::SeqCst);
        *write(&self.decisions) = ds;
    }

    /// Update one decision in the read model.
    pub fn put_decision(&self, d: Decision) {
        write(&self.decisions).insert(d.id, d);
    }

    pub fn decision_view(&self, id: DecisionId) -> Option<Decision> {
        read(&self.decisions).get(&id).cloned()
    }

    pub fn decision_views(&self) -> Vec<Decision> {
        read(&self.decisions).values().cloned().collect()
    }

    pub fn alloc_decision_id(&self) -> DecisionId {
        DecisionId(self.next_decision.fetch_add(1, Ordering::SeqCst))
    }

    /// The ledger's origin line: `fleetd/<host>/ledger`.
    pub fn ledger_origin(&self) -> String {
        format!("fleetd/{}/ledger", self.config().daemon.host)
    }

    /// The cosigner name of this host's ledger witness: `fleetd/<host>/witness`.
    pub fn witness_name(&self) -> String {
        crate::keys::witness_name(&self.config().daemon.host)
    }

    pub fn now(&self) -> Millis {
        self.clock.now()
    }

    /// The live config (a reload swaps it whole).
    pub fn config(&self) -> Arc<Config> {
        read(&self.config).clone()
    }

    pub fn set_config(&self, c: Config) {
        *write(&self.config) = Arc::new(c);
    }

    pub fn alloc_msg_id(&self) -> crate::types::MsgId {
        crate::types::MsgId(self.next_msg.fetch_add(1, Ordering::SeqCst))
    }

    pub fn set_pid(&self, pid: u32, who: MemberIdentity) {
        let mut g = write(&self.pids);
        g.retain(|_, m| m.name != who.name);
        g.insert(pid, who);
        self.pids_version.fetch_add(1, Ordering::SeqCst);
    }

    pub fn clear_pid(&self, name: &MemberName) {
        write(&self.pids).retain(|_, m| &m.name != name);
        self.pids_version.fetch_add(1, Ordering::SeqCst);
    }

    /// Changes whenever a member's pid is registered or cleared.
    pub fn pids_version(&self) -> u64 {
        self.pids_version.load(Ordering::SeqCst)
    }

    pub fn member_by_pid(&self, pid: u32) -> Option<MemberIdentity> {
        read(&self.pids).get(&pid).cloned()
    }

    pub fn mailbox_cap(&self) -> usize {
        self.config().limits.mailbox
    }
}

pub type SharedCtx = Arc<Ctx>;

/// One pending wake-up for an actor, re-armed to the core's next deadline after every event.
pub struct Timer {
    armed: Option<(Millis, JoinHandle<()>)>,
}

impl Default for Timer {
    fn default() -> Self {
        Timer::new()
    }
}

impl Timer {
    pub fn new() -> Self {
        Timer { armed: None }
    }

    /// Arrange for `make()` to be sent to `actor` at `at` (or never, for `None`). The actor
    /// must call [`Timer::fired`] when that message arrives, so the next `arm` always arms
    /// anew (even for the same instant: a wake-up that came a millisecond early must come again).
    pub fn arm<M: ractor::Message>(
        &mut self,
        actor: &ActorRef<M>,
        at: Option<Millis>,
        now: Millis,
        make: fn() -> M,
    ) {
        if let (Some((cur, _)), Some(at)) = (&self.armed, at)
            && *cur == at
        {
            return;
        }
        if let Some((_, h)) = self.armed.take() {
            h.abort();
        }
        if let Some(at) = at {
            let actor = actor.clone();
            // One millisecond past the instant, so the wake-up never reads a clock just short of it.
            let delay = Duration::from_millis(at.saturating_sub(now) + 1);
            let h = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = actor.cast(make());
            });
            self.armed = Some((at, h));
        }
    }

    /// The armed wake-up has been delivered.
    pub fn fired(&mut self) {
        self.armed = None;
    }

    pub fn cancel(&mut self) {
        if let Some((_, h)) = self.armed.take() {
            h.abort();
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.cancel();
    }
}
