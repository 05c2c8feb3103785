//! Drift anchors across hosts: serving this host's anchors to its peers, and the supervised
//! puller that fetches every linked peer's anchors once per heartbeat (pull-only), verifies each
//! line against that peer's host key, and runs G3 across hosts on them
//! ([`Remote`](fleetd_actors::drift::remote::Remote)). An equivocation is raised here (the lead,
//! events, `/alerts`), its proof (both signed lines) is written to the state dir, and it is
//! reported to every other linked peer, whose daemons check the proof themselves before they
//! alert their own leads.
//!
//! Must never take a line from anyone but its home host as an anchor, nor raise a reported
//! equivocation whose proof does not verify.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use fleetd_actors::ctx::SharedCtx;
use fleetd_actors::drift::line::Valid;
use fleetd_actors::drift::remote::{
    Equivocation, Remote, RemoteAnchor, check_proof, verify_served,
};
use fleetd_actors::publish::Publisher;
use fleetd_actors::timer::Timer;
use fleetd_actors::types::Millis;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::endpoint::Current;
use super::endpoint::Peer;
use super::wire::{self, Request, Response};

/// Days of date files an anchor answer covers.
const SERVED_DAYS: usize = 3;
/// At most this many anchors in one answer (a frame is bounded by `wire::MAX_FRAME`).
pub const MAX_SERVED: usize = 2_000;

/// `(identity, signed line)` of each anchor this host serves.
type Served = Arc<Vec<(String, String)>>;

/// What the link handler and the puller share.
pub struct AnchorService {
    ctx: SharedCtx,
    /// This host's served anchors, as last read, and when (at most one KB read per heartbeat,
    /// however often peers ask).
    cache: Mutex<Option<(Millis, Served)>>,
    puller: RwLock<Option<ActorRef<AnchorMsg>>>,
    /// Ledger witnessing rides the same heartbeat and links.
    witness: super::witness::WitnessService,
}

impl AnchorService {
    pub fn new(ctx: SharedCtx) -> Arc<AnchorService> {
        Arc::new(AnchorService {
            ctx: ctx.clone(),
            cache: Mutex::new(None),
            puller: RwLock::new(None),
            witness: super::witness::WitnessService::new(ctx.clone()),
        })
    }

    pub fn witness(&self) -> &super::witness::WitnessService {
        &self.witness
    }

    /// Pull every linked peer's anchors now, as a heartbeat does (`fleetd bench mesh` times
    /// one); false when the puller is not running.
    pub fn pull_now(&self) -> bool {
        self.puller
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|p| p.cast(AnchorMsg::Tick).is_ok())
    }

    fn heartbeat_ms(&self) -> Millis {
        self.ctx.config().drift.heartbeat_secs.max(1) * 1000
    }

    /// This host's anchors, for a peer's pull.
    pub async fn served(&self) -> Result<Served, String> {
        let now = self.ctx.now();
        if let Some((at, v)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            && now < at + self.heartbeat_ms()
        {
            return Ok(v.clone());
        }
        let (kb, key) = (self.ctx.kb_dir(), self.ctx.host_key.verifying_key());
        let lines = tokio::task::spawn_blocking(move || {
            fleetd_actors::drift::kb::served_anchors(&kb, &key, SERVED_DAYS, MAX_SERVED)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the knowledge base cannot be read: {e}"))?;
        let v = Arc::new(lines);
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, v.clone()));
        Ok(v)
    }

    /// A peer reports an equivocation: check its proof against the home host's key, then have
    /// the puller raise it (once).
    pub fn reported(
        &self,
        from: &str,
        home: String,
        identity: String,
        lines: Vec<String>,
    ) -> Result<(), String> {
        let c = self.ctx.config();
        let key = if home == c.daemon.host {
            self.ctx.host_key.verifying_key()
        } else {
            c.peer_key(&home)
                .ok_or_else(|| format!("`{home}` is not a configured peer"))?
        };
        let e = check_proof(home, identity, lines, &key)?;
        if let Some(p) = self
            .puller
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = p.cast(AnchorMsg::Reported {
                from: from.to_string(),
                e,
            });
        }
        Ok(())
    }
}

pub enum AnchorMsg {
    /// A heartbeat: pull every linked peer.
    Tick,
    /// A peer's anchors, each verified against its key.
    Pulled {
        home: String,
        lines: Vec<(String, Valid, String)>,
    },
    /// A peer reported an equivocation (its proof verified).
    Reported { from: String, e: Equivocation },
}

pub struct AnchorArgs {
    /// The anchor puller is the one writer of the remote anchors' view.
    pub published: Publisher<Vec<RemoteAnchor>>,
    pub ctx: SharedCtx,
    pub service: Arc<AnchorService>,
    pub current: Current,
    pub peers: Vec<Peer>,
}

pub struct AnchorPuller;

pub struct PullerState {
    ctx: SharedCtx,
    published: Publisher<Vec<RemoteAnchor>>,
    service: Arc<AnchorService>,
    current: Current,
    peers: BTreeMap<String, Peer>,
    core: Remote,
    timer: Timer,
}

impl PullerState {
    fn conn(&self, peer: &str) -> Option<quinn::Connection> {
        super::endpoint::connection(&self.current, peer)
    }

    /// Raise `e` here, keep its proof, and (if this host found it) tell every other peer.
    async fn raise(&self, e: Equivocation, reported_by: Option<&str>) {
        let mut text = e.text();
        if let Some(f) = reported_by {
            text = format!("{text} (reported by {f}; the proof verified here)");
        }
        let dir = self.ctx.state_dir.join("drift-proofs");
        let name = format!("{}-{}-{}.json", e.home, e.identity, e.day);
        let body = serde_json::to_vec_pretty(&e).unwrap_or_default();
        let write = tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            fleetd_actors::files::write_private(&dir.join(name), &body)
        })
        .await;
        if !matches!(write, Ok(Ok(()))) {
            tracing::warn!(home = %e.home, identity = %e.identity, "could not keep the proof of an equivocation on disk");
        }
        fleetd_actors::drift::service::raise(
            &self.ctx,
            &format!("{}@{}", e.identity, e.home),
            fleetd_actors::drift::gates::AlertRule::G3,
            text,
        )
        .await;
        if reported_by.is_some() {
            return;
        }
        for p in self.peers.keys().filter(|p| **p != e.home) {
            let Some(conn) = self.conn(p) else { continue };
            let (p, req) = (
                p.clone(),
                Request::Equivocation {
                    home: e.home.clone(),
                    identity: e.identity.clone(),
                    lines: e.lines.to_vec(),
                },
            );
            tokio::spawn(async move {
                match wire::request(&p, &conn, &req).await {
                    Ok(Response::Noted) => {}
                    Ok(other) => {
                        tracing::warn!(peer = %p, answer = ?other, "a peer did not take an equivocation report")
                    }
                    Err(e) => {
                        tracing::warn!(peer = %p, error = %e, "could not report an equivocation")
                    }
                }
            });
        }
    }

    fn publish(&self) {
        self.published.publish(self.core.all());
    }
}

/// The equivocation proofs kept in `dir` (at most 10,000 files of at most 1 MiB each; a file
/// that does not parse is skipped).
fn kept_proofs(dir: &std::path::Path) -> Vec<Equivocation> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return vec![];
    };
    rd.flatten()
        .take(10_000)
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && m.len() <= 1 << 20)
        })
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect()
}

/// Attempts at one peer's anchors per heartbeat, and the wait before the second (doubling).
const PULL_ATTEMPTS: u32 = 3;
const PULL_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// One peer's served anchors, asked on its current connection. A link that is down, or a
/// request that fails (a connection replaced while the mesh forms, a timeout), is tried again
/// after a short wait, a few times within the heartbeat, instead of waiting for the next one;
/// a refusal is an answer and is not. None if no attempt got the anchors.
async fn pull_with_retries(current: &Current, name: &str) -> Option<Vec<(String, String)>> {
    let mut failed: Option<String> = None;
    for attempt in 0..PULL_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(PULL_RETRY * 2u32.pow(attempt - 1)).await;
        }
        let Some(conn) = super::endpoint::connection(current, name) else {
            continue;
        };
        match wire::request(name, &conn, &Request::Anchors).await {
            Ok(Response::Anchors { anchors }) => return Some(anchors),
            Ok(other) => {
                tracing::debug!(answer = ?other, "anchor pull refused");
                return None;
            }
            Err(e) => failed = Some(e.to_string()),
        }
    }
    match failed {
        Some(why) => {
            tracing::info!(peer = %name, error = %why, attempts = PULL_ATTEMPTS, "anchor pull failed; the next heartbeat tries again")
        }
        None => tracing::debug!(peer = %name, "no anchor pull: the link is down"),
    }
    None
}

impl Actor for AnchorPuller {
    type Msg = AnchorMsg;
    type State = PullerState;
    type Arguments = AnchorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<AnchorMsg>,
        a: AnchorArgs,
    ) -> Result<PullerState, ActorProcessingErr> {
        *a.service.puller.write().unwrap_or_else(|p| p.into_inner()) = Some(myself.clone());
        // The equivocations already raised (their proofs are kept) are not raised again after
        // a restart, when the pulls find them anew.
        let dir = a.ctx.state_dir.join("drift-proofs");
        let kept = tokio::task::spawn_blocking(move || kept_proofs(&dir))
            .await
            .unwrap_or_default();
        let mut core = Remote::default();
        for e in &kept {
            core.note(e);
        }
        let _ = myself.cast(AnchorMsg::Tick);
        Ok(PullerState {
            ctx: a.ctx,
            published: a.published,
            service: a.service,
            current: a.current,
            peers: a.peers.into_iter().map(|p| (p.name.clone(), p)).collect(),
            core,
            timer: Timer::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<AnchorMsg>,
        msg: AnchorMsg,
        st: &mut PullerState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            AnchorMsg::Tick => {
                st.timer.fired();
                for (name, peer) in &st.peers {
                    let (name, key, me) = (name.clone(), peer.key, myself.clone());
                    let current = st.current.clone();
                    let span = tracing::debug_span!("anchor pull", peer = %name);
                    tokio::spawn(tracing::Instrument::instrument(
                        async move {
                            let Some(lines) = pull_with_retries(&current, &name).await else {
                                return;
                            };
                            // Verified against the home host's key before anything else.
                            let verified = tokio::task::spawn_blocking(move || {
                                let (ok, dropped) = verify_served(lines, &key, MAX_SERVED);
                                for (identity, why) in dropped {
                                    tracing::warn!(%identity, error = %why, "a pulled anchor does not verify against its home host's key; dropped");
                                }
                                ok
                            })
                            .await
                            .unwrap_or_default();
                            let _ = me.cast(AnchorMsg::Pulled {
                                home: name,
                                lines: verified,
                            });
                        },
                        span,
                    ));
                }
                // Ledger witnessing: this host's checkpoints to every linked peer.
                let linked: Vec<(String, quinn::Connection)> = st
                    .peers
                    .keys()
                    .filter_map(|name| Some((name.clone(), st.conn(name)?)))
                    .collect();
                let svc = st.service.clone();
                tokio::spawn(async move { svc.witness().submit_all(linked).await });
                let hb = st.service.heartbeat_ms();
                st.timer
                    .arm(&myself, Some(now + hb), now, || AnchorMsg::Tick);
            }
            AnchorMsg::Pulled { home, lines } => {
                let n = lines.len();
                let found = st.core.absorb(&home, lines, now);
                st.publish();
                st.ctx
                    .events
                    .emit(fleetd_actors::events::EventKind::AnchorsPulled {
                        peer: home,
                        anchors: n,
                    });
                for e in found {
                    st.raise(e, None).await;
                }
            }
            AnchorMsg::Reported { from, e } => {
                if st.core.note(&e) {
                    st.raise(e, Some(&from)).await;
                }
            }
        }
        Ok(())
    }
}
