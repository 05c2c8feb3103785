//! The PeerLink actors: one per configured peer, supervised, each wrapping a
//! [`LinkCore`](fleetd_actors::link::state::LinkCore); and the acceptor that hands incoming links
//! to them.
//!
//! Owns moving the core's effects onto quinn: dialling in a task, keeping the connection the core
//! chose and closing the other, watching the connection for its end, sampling its RTT, and
//! publishing the link's view (`fleetd peers`, status, events). Must never decide when to dial or
//! which duplicate wins: the core does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fleetd_actors::ctx::{FaultHook, SharedCtx};
use fleetd_actors::drift::remote::RemoteAnchor;
use fleetd_actors::error::FleetError;
use fleetd_actors::events::EventKind;
use fleetd_actors::link::state::{Backoff, Effect, LinkCore, LinkView, Phase};
use fleetd_actors::publish::{EntryPublisher, Publisher};
use fleetd_actors::supervisor::actor::{ChildSpec, start_child};
use fleetd_actors::timer::Timer;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use fleetd_actors::mail::actor::MailMsg;
use fleetd_actors::mail::mark::check_received;

use super::anchors::{AnchorArgs, AnchorPuller, AnchorService};
use super::endpoint::{Endpoint, Link, Peer, close};
use super::wire::{Request, Response};

pub enum LinkMsg {
    Tick,
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
    Dialled(Result<Link, String>),
    Incoming(Link),
    /// A connection ended; `duplicate` when the peer closed it as the losing half of a
    /// simultaneous dial.
    Lost {
        id: u64,
        why: String,
        duplicate: bool,
    },
}

/// The links of this host: the endpoint, and the acceptor that routes incoming links to the
/// peers' actors (which live under the root supervisor).
pub struct Links {
    pub endpoint: Arc<Endpoint>,
    /// Cancelled when the links are shut down on purpose (the acceptor then ends quietly).
    closing: tokio_util::sync::CancellationToken,
    current: Current,
    pub anchors: Arc<AnchorService>,
}

/// Serves a peer's requests: pings, lead-to-lead traffic for the post office, drift anchors and
/// equivocation reports.
pub struct Serve {
    ctx: SharedCtx,
    anchors: Arc<AnchorService>,
}

impl Serve {
    fn witness(&self) -> &super::witness::WitnessService {
        self.anchors.witness()
    }
}

impl super::wire::Handler for Serve {
    async fn handle(&self, peer: &str, req: Request) -> Response {
        match req {
            Request::Ping { payload } => Response::Pong { payload },
            Request::Witness {
                note,
                old_size,
                lines,
            } => self.witness().witness(peer, note, old_size, lines).await,
            Request::Anchors => match self.anchors.served().await {
                Ok(v) => Response::Anchors {
                    anchors: v.as_ref().clone(),
                },
                Err(why) => Response::Refused {
                    refused: "an anchor pull".into(),
                    why,
                    accepted: "the same pull at the next heartbeat".into(),
                },
            },
            Request::Equivocation {
                home,
                identity,
                lines,
            } => match self.anchors.reported(peer, home, identity, lines) {
                Ok(()) => Response::Noted,
                Err(why) => {
                    tracing::warn!(%peer, %why, "an equivocation report was refused");
                    Response::Refused {
                        refused: format!("an equivocation report from {peer}"),
                        why,
                        accepted: "two anchors of one identity, signed by the named home host's key, on one UTC day, with different roles".into(),
                    }
                }
            },
            Request::Deliver { epoch, envelopes } => {
                let refuse = |why: String, accepted: String| Response::Refused {
                    refused: format!("lead-to-lead mail from {peer}"),
                    why,
                    accepted,
                };
                let max = self.ctx.config().injector.max_message_bytes;
                if let Err(b) = check_received(&envelopes, max) {
                    return refuse(b.why, b.accepted);
                }
                let Some(mail) = self.ctx.dir.mail() else {
                    return refuse(
                        "the post office is not running (starting or restarting)".into(),
                        "the same request again shortly".into(),
                    );
                };
                let peer = peer.to_string();
                match mail
                    .call(
                        |reply| MailMsg::Receive {
                            peer,
                            epoch,
                            envelopes,
                            reply,
                        },
                        Duration::from_secs(5),
                    )
                    .await
                    .and_then(|r| r)
                {
                    Ok(upto) => Response::Delivered { upto },
                    Err(e) => refuse(e.to_string(), "the same request again shortly".into()),
                }
            }
        }
    }
}

impl Links {
    /// Start a PeerLink actor per configured peer under the root supervisor, and the acceptor.
    /// Each link publishes its own entry of `links`; the anchor puller publishes
    /// `remote_anchors`.
    pub async fn start(
        ctx: SharedCtx,
        endpoint: Endpoint,
        links: Publisher<BTreeMap<String, LinkView>>,
        remote_anchors: Publisher<Vec<RemoteAnchor>>,
    ) -> Result<Links, FleetError> {
        let endpoint = Arc::new(endpoint);
        let (connections, current) = fleetd_actors::publish::channel(BTreeMap::new());
        let anchors = AnchorService::new(ctx.clone());
        let sup = ctx
            .dir
            .supervisor()
            .ok_or_else(|| FleetError::unavailable("peer links", "the supervisor is not up"))?;
        for peer in endpoint.peers().to_vec() {
            let (c, e, p) = (ctx.clone(), endpoint.clone(), peer.clone());
            let conns = Conns::default();
            let cur = connections.entry(peer.name.clone());
            let an = anchors.clone();
            let view = links.entry(peer.name.clone());
            let spec = ChildSpec::actor(format!("link:{}", peer.name), "link", move || {
                let args = LinkArgs {
                    view: view.clone(),
                    conns: conns.clone(),
                    current: cur.clone(),
                    anchors: an.clone(),
                    ctx: c.clone(),
                    endpoint: e.clone(),
                    peer: p.clone(),
                };
                (PeerLink, args)
            });
            start_child(&sup, spec).await?;
        }
        // The acceptor routes incoming links to the peers' actors. It is a supervised task: if
        // the endpoint stops accepting while the links are not being shut down, it fails, and
        // its policy restarts it or escalates.
        let closing = tokio_util::sync::CancellationToken::new();
        let (e0, c0, k0) = (endpoint.clone(), ctx.clone(), closing.clone());
        let acceptor = ChildSpec::task("link-acceptor", "link", move || {
            let (e, c, k) = (e0.clone(), c0.clone(), k0.clone());
            Box::pin(async move {
                while let Some(r) = e.accept().await {
                    match r {
                        Ok(link) => {
                            let actor = c.dir.link(&link.peer);
                            match actor {
                                Some(actor) => {
                                    if let Err(ractor::MessagingErr::SendErr(LinkMsg::Incoming(
                                        l,
                                    ))) = actor.cast(LinkMsg::Incoming(link))
                                    {
                                        l.conn.close(close::REFUSED.into(), b"restarting");
                                    }
                                }
                                None => link.conn.close(close::REFUSED.into(), b"no link actor"),
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "incoming link refused");
                            c.events.emit(EventKind::LinkRefused {
                                detail: e.to_string(),
                            });
                        }
                    }
                }
                if k.is_cancelled() {
                    // Shut down on purpose: stay until the supervisor stops this child.
                    std::future::pending::<()>().await;
                }
                Err("the QUIC endpoint stopped accepting links".to_string())
            })
        });
        start_child(&sup, acceptor).await?;
        // The anchor puller: every linked peer's drift anchors, once per heartbeat.
        let (c, cur, an, peers) = (
            ctx.clone(),
            current.clone(),
            anchors.clone(),
            endpoint.peers().to_vec(),
        );
        let spec = ChildSpec::actor("anchors", "anchors", move || {
            let args = AnchorArgs {
                published: remote_anchors.clone(),
                ctx: c.clone(),
                service: an.clone(),
                current: cur.clone(),
                peers: peers.clone(),
            };
            (AnchorPuller, args)
        });
        start_child(&sup, spec).await?;
        Ok(Links {
            endpoint,
            closing,
            current,
            anchors,
        })
    }

    /// What the post office sends through: one `Deliver` request on the peer's current link.
    pub fn transport(&self) -> fleetd_actors::mail::actor::Transport {
        let current = self.current.clone();
        Arc::new(move |peer, epoch, envelopes| {
            let conn = super::endpoint::connection(&current, &peer);
            Box::pin(async move {
                let conn = conn.ok_or_else(|| format!("the link to {peer} is down"))?;
                let req = Request::Deliver { epoch, envelopes };
                match super::wire::request(&peer, &conn, &req).await {
                    Ok(Response::Delivered { upto }) => Ok(upto),
                    Ok(Response::Refused { refused, why, .. }) => {
                        Err(format!("{peer} refused {refused}: {why}"))
                    }
                    Ok(other) => Err(format!("{peer} answered {other:?} to Deliver")),
                    Err(e) => Err(e.to_string()),
                }
            })
        })
    }

    /// Close every link and stop accepting.
    pub async fn shutdown(&self) {
        self.closing.cancel();
        self.endpoint.shutdown().await;
    }
}

/// One peer's open connections, kept outside the actor so that a restarted actor can close what
/// its crashed predecessor left open (an orphan would otherwise stay alive on keep-alives and win
/// every duplicate tie against the new actor's dials).
#[derive(Clone, Default)]
pub struct Conns(Arc<std::sync::Mutex<HashMap<u64, quinn::Connection>>>);

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, quinn::Connection>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn get(&self, id: &u64) -> Option<quinn::Connection> {
        self.lock().get(id).cloned()
    }
    fn insert(&self, id: u64, c: quinn::Connection) {
        self.lock().insert(id, c);
    }
    fn remove(&self, id: &u64) -> Option<quinn::Connection> {
        self.lock().remove(id)
    }
    /// Close and forget every connection.
    fn close_all(&self, code: u32, why: &[u8]) {
        for (_, c) in self.lock().drain() {
            c.close(code.into(), why);
        }
    }
}

pub use super::endpoint::Current;

pub struct LinkArgs {
    /// This link's entry of the links view (it writes no other).
    view: EntryPublisher<String, LinkView>,
    conns: Conns,
    /// This link's entry of the connections in use (it writes no other).
    current: EntryPublisher<String, quinn::Connection>,
    anchors: Arc<AnchorService>,
    ctx: SharedCtx,
    endpoint: Arc<Endpoint>,
    peer: Peer,
}

pub struct PeerLink;

pub struct LinkState {
    ctx: SharedCtx,
    view: EntryPublisher<String, LinkView>,
    endpoint: Arc<Endpoint>,
    peer: Peer,
    core: LinkCore,
    conns: Conns,
    current: EntryPublisher<String, quinn::Connection>,
    anchors: Arc<AnchorService>,
    timer: Timer,
    keep_alive: u64,
    /// What was last announced: up, down, or nothing yet.
    announced: Option<bool>,
}

impl LinkState {
    /// Publish the view; announce each change between up and down once (the first failure
    /// after start counts as going down, so an outage from the start is announced too).
    fn publish(&mut self) {
        let v = self.core.view().clone();
        let announce = match v.phase {
            Phase::Up if self.announced != Some(true) => Some(true),
            Phase::Down if v.attempts > 0 && self.announced != Some(false) => Some(false),
            _ => None,
        };
        // The connection requests go on, then the view, then the event: whoever reacts to the
        // event finds both already in place.
        match self.core.current().and_then(|id| self.conns.get(&id)) {
            Some(c) if v.phase == Phase::Up => self.current.publish(c),
            _ => self.current.clear(),
        }
        self.view.publish(v.clone());
        if let Some(up) = announce {
            self.announced = Some(up);
            let detail = if up {
                if v.dialled == Some(true) {
                    "dialled".to_string()
                } else {
                    "accepted".to_string()
                }
            } else {
                v.reason.clone().unwrap_or_default()
            };
            if up {
                tracing::info!(peer = %v.peer, %detail, "peer link up");
            } else {
                tracing::warn!(peer = %v.peer, %detail, "peer link down");
            }
            self.ctx.events.emit(EventKind::Link {
                peer: v.peer,
                up,
                detail,
            });
        }
    }

    fn watch(&self, me: &ActorRef<LinkMsg>, conn: &quinn::Connection) {
        let (me, conn) = (me.clone(), conn.clone());
        tokio::spawn(async move {
            let why = conn.closed().await;
            let duplicate = matches!(&why, quinn::ConnectionError::ApplicationClosed(c)
                if c.error_code == quinn::VarInt::from_u32(close::DUPLICATE));
            let _ = me.cast(LinkMsg::Lost {
                id: conn.stable_id() as u64,
                why: why.to_string(),
                duplicate,
            });
        });
    }

    fn perform(&mut self, me: &ActorRef<LinkMsg>, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Dial => {
                    let (ep, peer, me) = (self.endpoint.clone(), self.peer.clone(), me.clone());
                    tokio::spawn(async move {
                        let r = ep.dial(&peer).await.map_err(|e| e.to_string());
                        if let Err(ractor::MessagingErr::SendErr(LinkMsg::Dialled(Ok(l)))) =
                            me.cast(LinkMsg::Dialled(r))
                        {
                            l.conn.close(close::SHUTDOWN.into(), b"link actor gone");
                        }
                    });
                }
                Effect::Arm(_) => {}
                Effect::UseNew { id, close: old } => {
                    if let Some(c) = self.conns.get(&id) {
                        self.watch(me, &c);
                        tokio::spawn(super::wire::serve(
                            self.peer.name.clone(),
                            c,
                            Arc::new(Serve {
                                ctx: self.ctx.clone(),
                                anchors: self.anchors.clone(),
                            }),
                        ));
                    }
                    if let Some(old) = old
                        && let Some(c) = self.conns.remove(&old)
                    {
                        c.close(close::DUPLICATE.into(), b"duplicate link");
                    }
                }
                Effect::DropNew { id } => {
                    if let Some(c) = self.conns.remove(&id) {
                        c.close(close::DUPLICATE.into(), b"duplicate link");
                    }
                }
            }
        }
    }

    fn rearm(&mut self, me: &ActorRef<LinkMsg>, now: u64) {
        let at = match self.core.view().phase {
            Phase::Up => Some(now + self.keep_alive),
            _ => self.core.wake_at(),
        };
        self.timer.arm(me, at, now, || LinkMsg::Tick);
    }
}

impl Actor for PeerLink {
    type Msg = LinkMsg;
    type State = LinkState;
    type Arguments = LinkArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LinkMsg>,
        a: LinkArgs,
    ) -> Result<LinkState, ActorProcessingErr> {
        // A predecessor that crashed (no post_stop) may have left connections open.
        a.conns.close_all(close::REFUSED, b"link actor restarted");
        a.ctx
            .dir
            .set(&a.peer.name, Some(myself.get_id()), myself.clone());
        if cfg!(debug_assertions) {
            let me = myself.clone();
            let hook: FaultHook = Arc::new(move || {
                let _ = me.cast(LinkMsg::Panic);
            });
            a.ctx.dir.set(
                &format!("link:{}", a.peer.name),
                Some(myself.get_id()),
                hook,
            );
        }
        let c = a.ctx.config();
        let core = LinkCore::new(
            &a.peer.name,
            &a.peer.addr.to_string(),
            a.ctx.host_key.verifying_key().as_bytes(),
            a.peer.key.as_bytes(),
            Backoff {
                min_ms: c.link.backoff_min_ms,
                max_ms: c.link.backoff_max_ms,
            },
            a.ctx.now(),
        );
        let _ = myself.cast(LinkMsg::Tick);
        Ok(LinkState {
            keep_alive: c.link.keep_alive_secs.max(1) * 1000,
            ctx: a.ctx,
            view: a.view,
            endpoint: a.endpoint,
            peer: a.peer,
            core,
            conns: a.conns,
            current: a.current,
            anchors: a.anchors,
            timer: Timer::new(),
            announced: None,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<LinkMsg>,
        st: &mut LinkState,
    ) -> Result<(), ActorProcessingErr> {
        st.conns.close_all(close::SHUTDOWN, b"shutdown");
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LinkMsg>,
        msg: LinkMsg,
        st: &mut LinkState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        let effects = match msg {
            LinkMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the link to {}", st.peer.name);
                }
                vec![]
            }
            LinkMsg::Tick => {
                st.timer.fired();
                if let Some(id) = st.core.current()
                    && let Some(c) = st.conns.get(&id)
                {
                    st.core.rtt(id, c.rtt().as_micros() as u64);
                }
                st.core.tick(now)
            }
            LinkMsg::Dialled(Ok(link)) => {
                let id = link.conn.stable_id() as u64;
                st.conns.insert(id, link.conn);
                let e = st.core.dial_ok(now, id);
                if let Some(c) = st.conns.get(&id) {
                    st.core.rtt(id, c.rtt().as_micros() as u64);
                }
                e
            }
            LinkMsg::Dialled(Err(why)) => {
                tracing::debug!(peer = %st.peer.name, %why, "dial failed");
                st.core.dial_failed(now, why)
            }
            LinkMsg::Incoming(link) => {
                let id = link.conn.stable_id() as u64;
                st.conns.insert(id, link.conn);
                let e = st.core.incoming(now, id);
                if let Some(c) = st.conns.get(&id) {
                    st.core.rtt(id, c.rtt().as_micros() as u64);
                }
                e
            }
            LinkMsg::Lost { id, why, duplicate } => {
                st.conns.remove(&id);
                if duplicate {
                    st.core.lost_as_duplicate(now, id)
                } else {
                    st.core.lost(now, id, why)
                }
            }
        };
        st.perform(&myself, effects);
        st.rearm(&myself, now);
        st.publish();
        Ok(())
    }
}

/// How a peer's link actor is found (by the acceptor, which routes the peer's incoming links to
/// it): the directory's entry under the peer's name, registered by the actor itself.
trait LinkLookup {
    fn link(&self, peer: &str) -> Option<ActorRef<LinkMsg>>;
}

impl LinkLookup for fleetd_actors::directory::Directory {
    fn link(&self, peer: &str) -> Option<ActorRef<LinkMsg>> {
        self.get(peer)
    }
}
