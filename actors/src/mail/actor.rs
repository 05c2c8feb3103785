//! The post office shell: persists every outgoing envelope (with the ticket that carries it) and
//! every received batch before anyone is answered (outgoing ones in group commits: whatever is
//! queued while one commit runs goes into the next, together), transmits through the link transport the
//! binary provides, hands received mail to the lead's injector once there is a live primary, and
//! applies the reports that come back to this host's tickets. Reports on tickets this host
//! received (receipts, answers) are picked up from the event bus and queued back to their origin.
//!
//! Must never decide ordering, deduplication or the hand-on order (the core does), never answer a peer before its
//! batch is durable, and never hand a message on twice (the desk is asked first).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use crate::backoff::Backoff;
use crate::ctx::SharedCtx;
use crate::directory::{Directory, Mailbox};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::mail::envelope::{Envelope, Item};
use crate::mail::inbox::{Inbox, answer_of, report_of};
use crate::mail::postbox::{Effect, MAX_OUTBOX, Postbox, Unqueued};
use crate::publish::Publisher;
use crate::store::Batch;
use crate::tickets::actor::DeskMsg;
use crate::tickets::state::{Origin, RemoteUpdate, Ticket};
use crate::timer::Timer;
use crate::types::{Millis, Role, TicketId};

/// Sends one batch to a peer and returns the peer's high-water mark; provided by the binary
/// (over the QUIC link).
pub type Transport = Arc<
    dyn Fn(String, u64, Vec<Envelope>) -> Pin<Box<dyn Future<Output = Result<u64, String>> + Send>>
        + Send
        + Sync,
>;

const CALL: Duration = Duration::from_secs(10);
/// How often held mail, due retries and the links are looked at even without an event.
const SWEEP_MS: Millis = 1_000;
/// How many held messages the view previews.
const HELD_PREVIEW: usize = 100;

pub enum MailMsg {
    /// Queue a message from the primary to `host`'s lead. `ticket` is the (deferred) ticket that
    /// carries it; it is committed here with the envelope, in one transaction.
    Send {
        host: String,
        ticket: Box<Ticket>,
        body: String,
        reply: RpcReplyPort<Result<Ticket, FleetError>>,
    },
    /// A batch from `peer`; answered with the high-water mark once it is durable.
    Receive {
        peer: String,
        epoch: u64,
        envelopes: Vec<Envelope>,
        reply: RpcReplyPort<Result<u64, FleetError>>,
    },
    /// A group commit of queued envelopes ended.
    Stored {
        result: Result<(), FleetError>,
        group: Vec<Queued>,
        /// The highest sequence number the group holds, per peer.
        upto: BTreeMap<String, u64>,
    },
    /// A transmission ended.
    Sent {
        peer: String,
        result: Result<u64, String>,
    },
    Link {
        peer: String,
        up: bool,
    },
    /// A ticket this host received changed (its receipt or its state): report it to its origin.
    Report {
        ticket: TicketId,
        update: Option<RemoteUpdate>,
    },
    /// Look at held mail and due retries.
    Sweep,
    /// The events feed lagged: report every received ticket's state afresh.
    Resync,
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
}

/// Hands a received mail on to this host's lead, as a ticket `from: lead@SENDER` with its
/// origin (the fleet's `deliver_remote`, given by whoever starts the post office, so the post
/// office depends on no operation above it).
pub type HandOn =
    Arc<dyn Fn(Origin, crate::types::MemberName, String) -> HandOnFut + Send + Sync + 'static>;
pub type HandOnFut = Pin<Box<dyn Future<Output = Result<TicketId, FleetError>> + Send>>;

pub struct MailArgs {
    pub ctx: SharedCtx,
    pub hand_on: HandOn,
    pub transport: Transport,
    /// The post office is the one writer of its view.
    pub view: Publisher<MailView>,
}

pub struct MailActor;

/// An envelope queued for the next group commit, with whoever waits for it.
pub struct Queued {
    peer: String,
    env: Envelope,
    ticket: Option<Ticket>,
    reply: Option<RpcReplyPort<Result<Ticket, FleetError>>>,
}

pub struct MailState {
    ctx: SharedCtx,
    hand_on: HandOn,
    transport: Transport,
    view: Publisher<MailView>,
    core: Postbox,
    /// Queued while a commit runs: they go in the next one, together (group commit).
    group: Vec<Queued>,
    /// A commit is running; its envelopes are not transmitted before it is done.
    committing: bool,
    /// Received and not yet handed on, in arrival order.
    inbox: Inbox,
    /// The view's preview of `inbox` (its oldest `HELD_PREVIEW` mails), formatted when the
    /// inbox changes, not at each publish: a publish comes before every answer to a peer.
    held_preview: Vec<String>,
    timer: Timer,
    feed: tokio::task::JoinHandle<()>,
}

pub use crate::mail::view::MailView;

impl MailState {
    fn publish(&self) {
        let outbox = self
            .core
            .peers()
            .map(|p| (p.clone(), self.core.depth(p)))
            .collect();
        self.view.publish(MailView {
            held: self.held_preview.clone(),
            held_total: self.inbox.mails(),
            outbox,
        });
    }

    /// The inbox changed: format its preview again, if the change can show in it (mail pushed
    /// behind a full preview cannot).
    fn inbox_changed(&mut self, pushed_only: bool) {
        if pushed_only && self.held_preview.len() >= HELD_PREVIEW {
            return;
        }
        self.held_preview = self
            .inbox
            .iter()
            .filter_map(|(peer, _, e)| match &e.item {
                Item::Mail {
                    from, body, ticket, ..
                } => Some(format!(
                    "{from}@{peer} (their {ticket}): {}",
                    crate::tickets::state::subject_of(body)
                )),
                Item::Update { .. } => None,
            })
            .take(HELD_PREVIEW)
            .collect();
    }

    fn desk(&self) -> Result<Mailbox<DeskMsg>, FleetError> {
        self.ctx.dir.tickets()
    }

    async fn perform(&mut self, me: &ActorRef<MailMsg>, fx: Vec<Effect>) {
        for e in fx {
            match e {
                Effect::Transmit {
                    peer,
                    epoch,
                    envelopes,
                } => {
                    let (t, me) = (self.transport.clone(), me.clone());
                    let span = tracing::debug_span!("mail transmit", %peer, n = envelopes.len());
                    tokio::spawn(tracing::Instrument::instrument(
                        async move {
                            let result = t(peer.clone(), epoch, envelopes).await;
                            let _ = me.cast(MailMsg::Sent { peer, result });
                        },
                        span,
                    ));
                }
                Effect::Acked { peer, upto, done } => {
                    // The outbox view first, so whoever sees the tickets change (their events)
                    // sees the outbox without them.
                    self.publish();
                    // Mark the mail among them transmitted and forget them, in one commit (the
                    // desk's: it owns the tickets). Reports alone need no ticket change: the
                    // outbox forgets them in a commit of its own.
                    let updates: Vec<(TicketId, RemoteUpdate)> = done
                        .iter()
                        .filter_map(|e| match &e.item {
                            Item::Mail { ticket, .. } => Some((*ticket, RemoteUpdate::Transmitted)),
                            Item::Update { .. } => None,
                        })
                        .collect();
                    let mut forgotten = false;
                    if !updates.is_empty()
                        && let Ok(desk) = self.desk()
                    {
                        let outbox_done = Some((peer.clone(), upto));
                        forgotten = desk
                            .call(
                                |reply| DeskMsg::Remote {
                                    updates,
                                    outbox_done,
                                    reply,
                                },
                                CALL,
                            )
                            .await
                            .is_ok_and(|r| r.is_ok());
                    }
                    if !forgotten {
                        let b = Batch {
                            mail_out_done: vec![(peer.clone(), upto)],
                            ..Default::default()
                        };
                        if let Err(e) = self.ctx.store.run(move |s| s.commit(&b)).await {
                            tracing::warn!(%peer, error = %e, "could not drop delivered mail from the outbox; it will be sent again and dropped there as a duplicate");
                        }
                    }
                }
                // `rearm` after each message arms the earliest of these and the next sweep.
                Effect::Arm(_) => {}
            }
        }
        self.publish();
    }

    /// Number `item` for `peer` and queue it for the next group commit; whoever waits
    /// (`reply`) is answered once it is durable (with `ticket`, committed with it).
    fn enqueue(
        &mut self,
        me: &ActorRef<MailMsg>,
        peer: &str,
        item: Item,
        ticket: Option<Ticket>,
        reply: Option<RpcReplyPort<Result<Ticket, FleetError>>>,
    ) {
        let env = match self.core.enqueue(peer, item) {
            Ok(env) => env,
            Err(why) => {
                let e = match why {
                    // Only answers are refused as duplicates, and nobody waits on those.
                    Unqueued::Duplicate => {
                        tracing::debug!(%peer, "that answer is already waiting in the outbox");
                        return;
                    }
                    Unqueued::NotAPeer => FleetError::not_found(
                        format!("host `{peer}`"),
                        "it is not a configured peer",
                        "a host named in [peers]",
                    ),
                    Unqueued::Full => FleetError::overloaded(
                        format!("lead-to-lead mail to `lead@{peer}`"),
                        format!(
                            "{MAX_OUTBOX} messages to {peer} are already waiting in this host's outbox (the link is down, or {peer} holds all it can for its lead)"
                        ),
                        format!(
                            "a send once `fleetd peers` shows {peer}'s outbox below {MAX_OUTBOX}"
                        ),
                    ),
                };
                match reply {
                    Some(r) => {
                        let _ = r.send(Err(e));
                    }
                    None => tracing::warn!(%peer, error = %e, "could not queue a report"),
                }
                return;
            }
        };
        self.group.push(Queued {
            peer: peer.to_string(),
            env,
            ticket,
            reply,
        });
        self.commit_group(me);
    }

    /// Commit everything queued in one transaction (the envelopes, their tickets, each peer's
    /// next sequence number), unless a commit is running: then it waits for that one to end.
    fn commit_group(&mut self, me: &ActorRef<MailMsg>) {
        if self.committing || self.group.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.group);
        let mut upto: BTreeMap<String, u64> = BTreeMap::new();
        for q in &group {
            let u = upto.entry(q.peer.clone()).or_default();
            *u = (*u).max(q.env.seq);
        }
        let b = Batch {
            tickets: group.iter().filter_map(|q| q.ticket.clone()).collect(),
            mail_out: group
                .iter()
                .map(|q| (q.peer.clone(), q.env.clone()))
                .collect(),
            mail_meta: upto
                .iter()
                .map(|(p, u)| (format!("next:{p}"), u + 1))
                .collect(),
            ..Default::default()
        };
        self.committing = true;
        tracing::debug!(
            n = group.len(),
            "lead-to-lead mail: one commit for the queued sends"
        );
        let me = me.clone();
        self.ctx.store.spawn(
            move |s| s.commit(&b),
            move |result| {
                let _ = me.cast(MailMsg::Stored {
                    result,
                    group,
                    upto,
                });
            },
        );
    }

    /// A peer delivered a batch: store what is new with the new mark, then answer with the
    /// mark and hand on what arrived. A batch that changes nothing (a retry of what is held, or
    /// mail with no room left) is answered without a commit.
    async fn received(
        &mut self,
        peer: String,
        epoch: u64,
        envelopes: Vec<Envelope>,
        reply: RpcReplyPort<Result<u64, FleetError>>,
    ) {
        let r = self
            .core
            .receive(&peer, epoch, envelopes, self.inbox.room());
        if r.changes_nothing() {
            let _ = reply.send(Ok(r.upto));
            return;
        }
        if r.reset {
            tracing::warn!(%peer, epoch, "the peer's mail state is new (a new state dir?); its sequence numbers start over");
        }
        let first = self.inbox.next_arrival();
        let numbered: Vec<(String, u64, Envelope)> = (first..)
            .zip(&r.accepted)
            .map(|(arrival, e)| (peer.clone(), arrival, e.clone()))
            .collect();
        let b = Batch {
            mail_in: numbered,
            mail_meta: vec![
                (format!("mark:{peer}"), r.upto),
                (format!("mark_epoch:{peer}"), r.epoch),
            ],
            ..Default::default()
        };
        match self
            .ctx
            .store
            .run(move |s| s.commit(&b).map(|()| b.mail_in))
            .await
        {
            Ok(numbered) => {
                self.core.commit(&peer, &r);
                let n = numbered.len();
                for (peer, arrival, e) in numbered {
                    self.inbox.push(peer, arrival, e);
                }
                self.inbox_changed(true);
                // Held mail shows before the sender hears it is here.
                self.publish();
                let _ = reply.send(Ok(r.upto));
                if n > 0 && self.hand_on().await {
                    self.publish();
                }
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// A group commit ended: on success the envelopes may go out and their senders are
    /// answered; on failure everything not stored is taken back (what queued behind it too, so
    /// numbering has no gap) and its senders are told.
    async fn stored(
        &mut self,
        me: &ActorRef<MailMsg>,
        result: Result<(), FleetError>,
        group: Vec<Queued>,
        upto: BTreeMap<String, u64>,
        now: Millis,
    ) {
        self.committing = false;
        match result {
            Ok(()) => {
                for (p, u) in &upto {
                    self.core.stored(p, *u);
                }
                for q in group {
                    if let Some(r) = q.reply {
                        let _ = r.send(q.ticket.ok_or_else(|| {
                            FleetError::internal("lead-to-lead mail", "a send without its ticket")
                        }));
                    }
                }
                let mut fx = vec![];
                for p in upto.keys() {
                    fx.extend(self.core.pump(p, now));
                }
                self.perform(me, fx).await;
            }
            Err(e) => {
                let behind = std::mem::take(&mut self.group);
                let peers: std::collections::BTreeSet<String> = group
                    .iter()
                    .chain(&behind)
                    .map(|q| q.peer.clone())
                    .collect();
                for p in &peers {
                    self.core.rollback(p);
                }
                tracing::warn!(error = %e, n = group.len() + behind.len(), "lead-to-lead mail could not be stored; its senders are told");
                for q in group.into_iter().chain(behind) {
                    if let Some(r) = q.reply {
                        let _ = r.send(Err(e.clone()));
                    }
                }
            }
        }
        self.commit_group(me);
        self.publish();
    }

    /// Hand received traffic on as the inbox's round says: reports to the desk, mail to the
    /// live primary's injector. Returns whether anything was handed on.
    async fn hand_on(&mut self) -> bool {
        let mut round = self.inbox.round();
        let updates = round.reports();
        let applied = updates.is_empty()
            || match self.desk() {
                Ok(desk) => desk
                    .call(
                        |reply| DeskMsg::Remote {
                            updates,
                            outbox_done: None,
                            reply,
                        },
                        CALL,
                    )
                    .await
                    .and_then(|r| r)
                    .is_ok(),
                Err(_) => false,
            };
        round.reports_applied(applied);
        while let Some(m) = round.next_mail() {
            let origin = Origin {
                host: m.peer.clone(),
                ticket: m.ticket,
            };
            match (self.hand_on)(origin, m.from, m.body).await {
                Ok(t) => {
                    self.ctx.events.emit(EventKind::MailHanded {
                        peer: m.peer,
                        envelope: m.seq,
                        their_ticket: m.ticket,
                        ticket: t,
                    });
                    round.handed(true);
                }
                Err(e) => {
                    tracing::debug!(peer = %m.peer, seq = m.seq, error = %e, "received mail held");
                    round.handed(false);
                }
            }
        }
        let done = self.inbox.end(round);
        self.inbox_changed(false);
        if done.is_empty() {
            return false;
        }
        // A crash before this commit hands nothing on twice: mail is checked against the desk,
        // reports are idempotent.
        let b = Batch {
            mail_in_done: done,
            ..Default::default()
        };
        if let Err(e) = self.ctx.store.run(move |s| s.commit(&b)).await {
            tracing::warn!(error = %e, "could not drop handed-on mail from the inbox");
        }
        true
    }
}

impl Actor for MailActor {
    type Msg = MailMsg;
    type State = MailState;
    type Arguments = MailArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<MailMsg>,
        a: MailArgs,
    ) -> Result<MailState, ActorProcessingErr> {
        let ctx = a.ctx.clone();
        let (pending, marks, mut epoch) = ctx.store.run(|s| s.load_mail_out()).await?;
        if epoch == 0 {
            // This state dir's first outbox: a fresh epoch tells receivers to forget marks they
            // hold for an earlier state dir of this host.
            epoch = rand::random::<u64>() | 1;
            let batch = Batch {
                mail_meta: vec![("epoch".into(), epoch)],
                ..Default::default()
            };
            ctx.store.run(move |s| s.commit(&batch)).await?;
        }
        let mut inbox = Inbox::default();
        for (peer, arrival, env) in ctx.store.run(|s| s.load_mail_in()).await? {
            inbox.push(peer, arrival, env);
        }
        let c = ctx.config();
        let peers: Vec<String> = c.peers.keys().cloned().collect();
        let mut core = Postbox::new(
            epoch,
            &peers,
            pending,
            marks,
            Backoff {
                min_ms: c.link.backoff_min_ms.max(1),
                max_ms: c.link.backoff_max_ms.max(1),
            },
        );
        // The feed: link changes, and changes to tickets received from other hosts. Subscribed
        // before the links are read, so a change in between is not missed.
        let (_, mut rx) = ctx.events.subscribe(u64::MAX);
        let now = ctx.now();
        let mut fx = vec![];
        for v in ctx.link_views() {
            if v.phase == crate::link::state::Phase::Up {
                fx.extend(core.link(&v.peer, true, now));
            }
        }
        let me = myself.clone();
        let feed = tokio::spawn(async move {
            loop {
                let msg = match rx.recv().await {
                    Ok(ev) => match ev.kind {
                        EventKind::Link { peer, up, .. } => Some(MailMsg::Link { peer, up }),
                        EventKind::Receipt { .. } | EventKind::Ticket { .. } => report_of(&ev.kind)
                            .map(|(ticket, update)| MailMsg::Report { ticket, update }),
                        EventKind::Spawned {
                            role: Role::Primary,
                            ..
                        } => Some(MailMsg::Sweep),
                        EventKind::Status {
                            injectable: true, ..
                        } => Some(MailMsg::Sweep),
                        _ => None,
                    },
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        Some(MailMsg::Resync)
                    }
                    Err(_) => return,
                };
                if let Some(m) = msg
                    && me.cast(m).is_err()
                {
                    return;
                }
            }
        });
        ctx.dir.set_mail(Some(Mailbox::new(
            myself.clone(),
            ctx.mailbox_cap(),
            "the post office",
        )));
        let mut st = MailState {
            ctx,
            hand_on: a.hand_on,
            transport: a.transport,
            view: a.view,
            core,
            inbox,
            held_preview: vec![],
            group: vec![],
            committing: false,
            timer: Timer::new(),
            feed,
        };
        st.inbox_changed(false);
        st.perform(&myself, fx).await;
        let _ = myself.cast(MailMsg::Resync);
        let _ = myself.cast(MailMsg::Sweep);
        Ok(st)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<MailMsg>,
        st: &mut MailState,
    ) -> Result<(), ActorProcessingErr> {
        st.feed.abort();
        st.ctx.dir.set_mail(None);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<MailMsg>,
        msg: MailMsg,
        st: &mut MailState,
    ) -> Result<(), ActorProcessingErr> {
        let now = st.ctx.now();
        match msg {
            MailMsg::Send {
                host,
                ticket,
                body,
                reply,
            } => {
                let t = *ticket;
                match t.from.member().cloned() {
                    Some(from) => {
                        let item = Item::Mail {
                            ticket: t.id,
                            from,
                            body,
                            sent_at: now,
                        };
                        st.enqueue(&myself, &host, item, Some(t), Some(reply));
                    }
                    None => {
                        let _ = reply.send(Err(FleetError::invalid(
                            format!("lead-to-lead mail to `lead@{host}`"),
                            "it was not sent by a member",
                            "a fleet_send to lead@HOST by this host's primary",
                        )));
                    }
                }
            }
            MailMsg::Stored {
                result,
                group,
                upto,
            } => {
                st.stored(&myself, result, group, upto, now).await;
            }
            MailMsg::Receive {
                peer,
                epoch,
                envelopes,
                reply,
            } => {
                st.received(peer, epoch, envelopes, reply).await;
            }
            MailMsg::Sent { peer, result } => {
                let fx = match result {
                    Ok(upto) => st.core.acked(&peer, upto, now),
                    Err(why) => {
                        tracing::debug!(%peer, %why, "mail transmission failed; will retry");
                        st.core.failed(&peer, now)
                    }
                };
                st.perform(&myself, fx).await;
            }
            MailMsg::Link { peer, up } => {
                let fx = st.core.link(&peer, up, now);
                st.perform(&myself, fx).await;
            }
            MailMsg::Report { ticket, update } => {
                let t = match st.desk() {
                    Ok(d) => d
                        .call(|reply| DeskMsg::Get { ticket, reply }, CALL)
                        .await
                        .ok()
                        .flatten(),
                    Err(_) => None,
                };
                if let Some(t) = t
                    && let Some(o) = t.origin.clone()
                    && let Some(update) = update.or_else(|| answer_of(&t))
                {
                    let item = Item::Update {
                        ticket: o.ticket,
                        update,
                    };
                    st.enqueue(&myself, &o.host, item, None, None);
                }
            }
            MailMsg::Resync => {
                let all = match st.desk() {
                    Ok(d) => d
                        .call(|reply| DeskMsg::All { reply }, CALL)
                        .await
                        .unwrap_or_default(),
                    Err(_) => vec![],
                };
                for t in all {
                    if let Some(o) = t.origin.clone()
                        && let Some(update) = answer_of(&t)
                    {
                        let item = Item::Update {
                            ticket: o.ticket,
                            update,
                        };
                        st.enqueue(&myself, &o.host, item, None, None);
                    }
                }
            }
            MailMsg::Sweep => {
                st.timer.fired();
                if !st.inbox.is_empty() {
                    st.hand_on().await;
                }
                // The links as published (events are the fast path; this is the safety net).
                let mut fx = vec![];
                for v in st.ctx.link_views() {
                    let up = v.phase == crate::link::state::Phase::Up;
                    if st.core.is_up(&v.peer) != up {
                        fx.extend(st.core.link(&v.peer, up, now));
                    }
                }
                fx.extend(st.core.tick(now));
                st.perform(&myself, fx).await;
            }
            MailMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the post office");
                }
            }
        }
        let at = st
            .core
            .next_due()
            .map_or(now + SWEEP_MS, |d| d.min(now + SWEEP_MS));
        st.timer.arm(&myself, Some(at), now, || MailMsg::Sweep);
        Ok(())
    }
}

/// How the post office (lead-to-lead mail; only with links configured) is found: the directory's entry for it, registered by the actor itself.
impl Directory {
    pub fn mail(&self) -> Option<Mailbox<MailMsg>> {
        self.get::<Mailbox<MailMsg>>("")
    }
    pub fn set_mail(&self, m: Option<Mailbox<MailMsg>>) {
        match m {
            Some(m) => self.set_mailbox("", m),
            None => self.remove::<Mailbox<MailMsg>>(""),
        }
    }
}
