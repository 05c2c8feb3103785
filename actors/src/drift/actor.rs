//! The drift shells: one scheduler that reads the KB at most once per heartbeat (pull-only), and
//! one supervised puller per peer that evaluates its peer against that pass, keeps the last good
//! anchor durably (and keeps using it while the peer's logs cannot be read), and raises each new
//! alert once. Must never decide a gate: `gates` does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::ctx::SharedCtx;
use crate::directory::Directory;
use crate::drift::alerter::AlerterMsg;
use crate::drift::cache::{CachedAnchor, refreshed};
use crate::drift::gates::{self, Index, Pass, Report};
use crate::drift::line::NewLine;
use crate::drift::service::{append, params, raise, read_index};
use crate::error::FleetError;
use crate::publish::{EntryPublisher, Publisher};
use crate::supervisor::actor::ChildSpec;

pub enum SchedulerMsg {
    /// A heartbeat: read the KB once, and have every peer's puller evaluate it.
    Pass,
}

pub enum PullerMsg {
    Pull {
        index: Arc<Index>,
        reader: Option<String>,
        /// Told once this pull is evaluated (so the scheduler can report the pass as done).
        done: Option<tokio::sync::oneshot::Sender<()>>,
    },
    /// Debug builds only: panic inside the actor, to exercise supervision.
    Panic,
}

pub struct DriftScheduler;

/// The scheduler publishes each pass, and hands each puller its entry of the reports.
pub struct SchedulerArgs {
    pub ctx: SharedCtx,
    pub pass: Publisher<Option<Pass>>,
    pub reports: Publisher<BTreeMap<String, Report>>,
}

pub struct SchedulerState {
    ctx: SharedCtx,
    pass: Publisher<Option<Pass>>,
    reports: Publisher<BTreeMap<String, Report>>,
}

/// The live primary's name: the reader the pullers read as.
async fn live_primary(ctx: &SharedCtx) -> Option<String> {
    let r = ctx.dir.registry().ok()?;
    let primary = r
        .call(
            |reply| crate::registry::actor::RegistryMsg::Primary { reply },
            Duration::from_secs(5),
        )
        .await
        .ok()?;
    primary.map(|m| m.name.to_string())
}

impl Actor for DriftScheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SchedulerMsg>,
        a: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        let _ = myself.cast(SchedulerMsg::Pass);
        Ok(SchedulerState {
            ctx: a.ctx,
            pass: a.pass,
            reports: a.reports,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SchedulerMsg>,
        msg: SchedulerMsg,
        st: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        let SchedulerMsg::Pass = msg;
        let started = std::time::Instant::now();
        let heartbeat = Duration::from_secs(st.ctx.config().drift.heartbeat_secs.max(1));
        myself.send_after(heartbeat, || SchedulerMsg::Pass);
        let (kb_dir, trusted) = (st.ctx.kb_dir(), st.ctx.trusted_keys());
        let index = match tokio::task::spawn_blocking(move || read_index(&kb_dir, &trusted)).await?
        {
            Ok(mut ix) => {
                // Identities homed on other hosts, as the anchor puller last pulled them.
                st.ctx
                    .views
                    .remote_anchors
                    .with(|remote| gates::with_remote(&mut ix, remote));
                Arc::new(ix)
            }
            Err(e) => {
                // The whole KB is unreadable: pullers keep their cached anchors until next time.
                tracing::warn!(error = %e, "the drift KB could not be read; keeping cached anchors, retrying next heartbeat");
                let reports = st.ctx.drift_reports();
                st.ctx.events.emit(crate::events::EventKind::DriftPass {
                    peers: reports.len(),
                    untrusted: reports
                        .iter()
                        .filter(|r| r.verdict == crate::drift::gates::Verdict::Untrusted)
                        .count(),
                    late: 0,
                    took_us: started.elapsed().as_micros() as u64,
                    kb_error: Some(e.to_string()),
                });
                return Ok(());
            }
        };
        let now = st.ctx.now();
        let reader = live_primary(&st.ctx).await;
        st.pass.publish(Some(Pass {
            at: now,
            index: index.clone(),
            reader: reader.clone(),
        }));
        let p = params(&st.ctx);
        let peers: BTreeSet<String> = gates::peers(&index, &p, reader.as_deref())
            .into_iter()
            .collect();
        let mut waits = Vec::with_capacity(peers.len());
        for peer in &peers {
            let a = match st.ctx.dir.drift_puller(peer) {
                Some(a) => a,
                None => match start_puller(&st.ctx, st.reports.entry(peer.clone())).await {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "could not start a drift puller");
                        continue;
                    }
                },
            };
            // A puller between a crash and its restart misses this pass; once restarted it
            // evaluates the last pass by itself (post_start).
            if !matches!(
                a.get_status(),
                ractor::ActorStatus::Running | ractor::ActorStatus::Starting
            ) {
                continue;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            if a.cast(PullerMsg::Pull {
                index: index.clone(),
                reader: reader.clone(),
                done: Some(tx),
            })
            .is_ok()
            {
                waits.push(rx);
            }
        }
        // The pass is over when every puller has evaluated it, or after one heartbeat; either
        // way it is reported (an event), without holding up the next heartbeat.
        let (ctx, n) = (st.ctx.clone(), peers.len());
        tokio::spawn(async move {
            let mut late = n - waits.len();
            let deadline = tokio::time::Instant::now() + heartbeat;
            for w in waits {
                if tokio::time::timeout_at(deadline, w).await.is_err() {
                    late += 1;
                }
            }
            let untrusted = ctx
                .drift_reports()
                .iter()
                .filter(|r| {
                    peers.contains(&r.peer) && r.verdict == crate::drift::gates::Verdict::Untrusted
                })
                .count();
            ctx.events.emit(crate::events::EventKind::DriftPass {
                peers: n,
                untrusted,
                late,
                took_us: started.elapsed().as_micros() as u64,
                kb_error: None,
            });
        });
        Ok(())
    }
}

/// Start `drift:PEER` (the peer is `report`'s key) under the root supervisor; returns its ref
/// once it runs.
async fn start_puller(
    ctx: &SharedCtx,
    report: EntryPublisher<String, Report>,
) -> Result<ActorRef<PullerMsg>, FleetError> {
    let sup = ctx
        .dir
        .supervisor()
        .ok_or_else(|| FleetError::unavailable("a drift puller", "the supervisor is not up"))?;
    let peer = report.key().clone();
    let c = ctx.clone();
    let spec = ChildSpec::actor(format!("drift:{peer}"), "drift", move || {
        let args = PullerArgs {
            ctx: c.clone(),
            report: report.clone(),
        };
        (DriftPuller, args)
    });
    crate::supervisor::actor::start_child(&sup, spec).await?;
    // The puller registered itself in pre_start.
    ctx.dir
        .drift_puller(&peer)
        .ok_or_else(|| FleetError::internal("a drift puller", "it did not register"))
}

/// A puller writes its own peer's report and no other.
pub struct PullerArgs {
    pub ctx: SharedCtx,
    pub report: EntryPublisher<String, Report>,
}

/// How a peer's drift puller is found: the directory's entry under the peer's name, registered
/// by the puller itself.
impl Directory {
    pub fn drift_puller(&self, peer: &str) -> Option<ActorRef<PullerMsg>> {
        self.get(peer)
    }
}

pub struct DriftPuller;

pub struct PullerState {
    ctx: SharedCtx,
    peer: String,
    report: EntryPublisher<String, Report>,
    cached: Option<CachedAnchor>,
}

impl Actor for DriftPuller {
    type Msg = PullerMsg;
    type State = PullerState;
    type Arguments = PullerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PullerMsg>,
        a: PullerArgs,
    ) -> Result<PullerState, ActorProcessingErr> {
        let peer = a.report.key().clone();
        a.ctx.dir.set(&peer, Some(myself.get_id()), myself.clone());
        let cached = a
            .ctx
            .store
            .run(|s| s.load_drift_cache())
            .await?
            .into_iter()
            .find(|(p, _)| *p == peer)
            .map(|(_, c)| c);
        // After a restart the last pass is re-read from the shared index right away.
        Ok(PullerState {
            ctx: a.ctx,
            peer,
            report: a.report,
            cached,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<PullerMsg>,
        st: &mut PullerState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(pass) = st.ctx.views.drift_pass.get() {
            let _ = myself.cast(PullerMsg::Pull {
                index: pass.index,
                reader: pass.reader,
                done: None,
            });
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<PullerMsg>,
        msg: PullerMsg,
        st: &mut PullerState,
    ) -> Result<(), ActorProcessingErr> {
        let (index, reader, done) = match msg {
            PullerMsg::Pull {
                index,
                reader,
                done,
            } => (index, reader, done),
            PullerMsg::Panic => {
                if cfg!(debug_assertions) {
                    panic!("injected fault in the drift puller of {}", st.peer);
                }
                return Ok(());
            }
        };
        let p = params(&st.ctx);
        let cached = st
            .cached
            .as_ref()
            .map(|c| (c.anchor.as_str(), c.ts.as_str(), c.tick));
        let report = gates::evaluate(&index, &st.peer, reader.as_deref(), &p, cached);
        let readable = index
            .owners
            .get(&st.peer)
            .is_none_or(|o| o.unreadable.is_none());
        // Keep the last good anchor durably (only from a real read, never from the cache itself).
        let found = match (&report.anchor, &report.anchor_ts, report.anchor_tick) {
            (Some(a), Some(ts), Some(tick)) => Some((a.as_str(), ts.as_str(), tick)),
            _ => None,
        };
        if let Some(c) = refreshed(found, readable, st.cached.as_ref(), p.now) {
            let (peer, c2) = (st.peer.clone(), c.clone());
            if let Err(e) = st
                .ctx
                .store
                .run(move |s| s.save_drift_cache(&peer, &c2))
                .await
            {
                tracing::warn!(peer = %st.peer, error = %e, "could not persist the drift cache");
            }
            st.cached = Some(c);
        }
        // The report is visible (status, /drift) before its alerts are raised, so whoever
        // reacts to an alert sees the verdict that caused it.
        // A conflict is raised once, not at every heartbeat (nor again after a restart).
        let fresh = fresh_alerts(&st.ctx, &st.peer, &report.raise).await;
        st.report.publish(report);
        for (rule, a) in &fresh {
            let rule = *rule;
            raise(&st.ctx, &st.peer, rule, a.clone()).await;
            if rule == crate::drift::gates::AlertRule::G4
                && let Some(r) = &reader
            {
                // Into the reader's own log, as the seed's mechanism says.
                let line = NewLine::peer_consistency_alert(p.now, &st.peer, a);
                if let Err(e) = append(&st.ctx, r, line).await {
                    tracing::warn!(error = %e, "could not log a peer_consistency_alert");
                }
            }
        }
        if let Some(d) = done {
            let _ = d.send(());
        }
        Ok(())
    }
}

/// Which of `raise` the alerter has not seen raised about `peer` in this run (none, if the
/// alerter cannot be asked: an alert is never raised twice for want of an answer).
async fn fresh_alerts(
    ctx: &SharedCtx,
    peer: &str,
    raise: &[(gates::AlertRule, String)],
) -> Vec<(gates::AlertRule, String)> {
    if raise.is_empty() {
        return vec![];
    }
    let texts = raise.iter().map(|(_, t)| t.clone()).collect();
    let asked = match crate::drift::alerter::alerter(ctx).await {
        Ok(a) => {
            a.call(
                |reply| AlerterMsg::Fresh {
                    peer: peer.to_string(),
                    texts,
                    reply,
                },
                Duration::from_secs(5),
            )
            .await
        }
        Err(e) => Err(e),
    };
    match asked {
        Ok(fresh) => raise
            .iter()
            .zip(fresh)
            .filter(|(_, f)| *f)
            .map(|(r, _)| r.clone())
            .collect(),
        Err(e) => {
            tracing::warn!(%peer, error = %e, "drift alerts not raised this pass: the alerter did not answer");
            vec![]
        }
    }
}
