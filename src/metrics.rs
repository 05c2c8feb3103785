//! `GET /metrics`: the fleet in the Prometheus/OpenMetrics text format (prometheus-client).
//!
//! Two kinds of figures. Counters and the time-to-reply histogram are kept by one task that
//! follows the daemon's event bus (receipts by state, tickets resolved, spawns, exits, drift
//! alerts); if that task falls behind the bus's ring it counts what it missed in
//! `fleetd_metrics_events_missed_total`, so an undercount is visible. Gauges (members by status
//! and role, queue depths, open tickets, ledger entries and sync times, links, mail outboxes, open drift
//! alerts) are read from the actors and read models at each scrape.
//!
//! Owns the metric names and their meaning; must never change fleet state.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use fleetd_actors::events::EventKind;
use fleetd_actors::fleet::Fleet;
use fleetd_actors::ledger::state::{SyncTimes, sync_bucket_bounds};
use fleetd_actors::link::state::Phase;
use fleetd_actors::tickets::state::TicketState;
use fleetd_actors::types::{Caller, TicketId, wire_name};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// Open tickets remembered for the time-to-reply histogram (the oldest are forgotten first).
const OPEN_REMEMBERED: usize = 100_000;

pub struct Metrics {
    registry: Registry,
    receipts: Family<Labels, Counter>,
    tickets_resolved: Family<Labels, Counter>,
    reply_seconds: Histogram,
    spawns: Counter,
    exits: Counter,
    drift_alerts: Family<Labels, Counter>,
    missed: Counter,
    members: Family<Labels, Gauge>,
    queue_depth: Family<Labels, Gauge>,
    tickets_open: Gauge,
    ledger_entries: Gauge,
    ledger_sync: SyncHistogram,
    link_up: Family<Labels, Gauge>,
    link_rtt: Family<Labels, Gauge<f64, AtomicU64>>,
    mail_outbox: Family<Labels, Gauge>,
    mail_held: Gauge,
    drift_alerts_open: Gauge,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("fleetd");
        let m = Metrics {
            receipts: Family::default(),
            tickets_resolved: Family::default(),
            // 10 ms to ~1.5 h.
            reply_seconds: Histogram::new(
                prometheus_client::metrics::histogram::exponential_buckets(0.01, 2.0, 20),
            ),
            spawns: Counter::default(),
            exits: Counter::default(),
            drift_alerts: Family::default(),
            missed: Counter::default(),
            members: Family::default(),
            queue_depth: Family::default(),
            tickets_open: Gauge::default(),
            ledger_entries: Gauge::default(),
            ledger_sync: SyncHistogram::default(),
            link_up: Family::default(),
            link_rtt: Family::default(),
            mail_outbox: Family::default(),
            mail_held: Gauge::default(),
            drift_alerts_open: Gauge::default(),
            registry: Registry::default(),
        };
        registry.register(
            "receipts",
            "Delivery receipts by the state they reached (queued, delivered, accepted, stalled, failed, transmitted)",
            m.receipts.clone(),
        );
        registry.register(
            "tickets_resolved",
            "Tickets by how they ended (replied, tail, undeliverable, expired)",
            m.tickets_resolved.clone(),
        );
        registry.register(
            "ticket_reply_seconds",
            "From a ticket's opening to its reply or transcript tail",
            m.reply_seconds.clone(),
        );
        registry.register("spawns", "Members spawned", m.spawns.clone());
        registry.register("exits", "Members that exited", m.exits.clone());
        registry.register(
            "drift_alerts",
            "Drift alerts raised, by gate",
            m.drift_alerts.clone(),
        );
        registry.register(
            "metrics_events_missed",
            "Events this exporter missed because it fell behind the event ring (counters undercount by as much)",
            m.missed.clone(),
        );
        registry.register(
            "members",
            "Members by status and role (exited ones included)",
            m.members.clone(),
        );
        registry.register(
            "queue_depth",
            "Messages waiting for a live member, and the one whose turn is still running",
            m.queue_depth.clone(),
        );
        registry.register("tickets_open", "Open tickets", m.tickets_open.clone());
        registry.register(
            "ledger_entries",
            "Entries in the decision ledger",
            m.ledger_entries.clone(),
        );
        registry.register(
            "ledger_sync_seconds",
            "How long each ledger batch's write and fdatasync took (one per group commit)",
            m.ledger_sync.clone(),
        );
        registry.register(
            "link_up",
            "Whether the link to a peer host is up (1) or not (0)",
            m.link_up.clone(),
        );
        registry.register(
            "link_rtt_seconds",
            "The last round-trip time measured on a peer link",
            m.link_rtt.clone(),
        );
        registry.register(
            "mail_outbox",
            "Lead-to-lead mail waiting for a peer to hold it",
            m.mail_outbox.clone(),
        );
        registry.register(
            "mail_held",
            "Mail received for the lead and held until a lead runs",
            m.mail_held.clone(),
        );
        registry.register(
            "drift_alerts_open",
            "Drift alerts currently standing",
            m.drift_alerts_open.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Count one event (the follower task's work).
    fn count(&self, kind: &EventKind, at: u64, opened: &mut Opened) {
        match kind {
            EventKind::Receipt { state, .. } => {
                self.receipts
                    .get_or_create(&vec![("state", wire_name(state))])
                    .inc();
            }
            EventKind::Ticket { ticket, state, .. } => {
                if *state == TicketState::Open {
                    opened.insert(*ticket, at);
                } else {
                    self.tickets_resolved
                        .get_or_create(&vec![("state", wire_name(state))])
                        .inc();
                    if let Some(t0) = opened.remove(ticket)
                        && matches!(state, TicketState::Replied | TicketState::Tail)
                    {
                        self.reply_seconds
                            .observe(at.saturating_sub(t0) as f64 / 1000.0);
                    }
                }
            }
            EventKind::Spawned { .. } => {
                self.spawns.inc();
            }
            EventKind::Exited { .. } => {
                self.exits.inc();
            }
            EventKind::DriftAlert { rule, .. } => {
                self.drift_alerts
                    .get_or_create(&vec![("rule", rule.clone())])
                    .inc();
            }
            _ => {}
        }
    }

    /// Follow the event bus until it closes or `stop` is cancelled.
    pub fn follow(
        self: Arc<Self>,
        fleet: &Fleet,
        stop: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let (_, mut rx) = fleet.ctx.events.subscribe(u64::MAX);
        tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            let mut opened = Opened::default();
            loop {
                let next = tokio::select! {
                    r = rx.recv() => r,
                    _ = stop.cancelled() => return,
                };
                match next {
                    Ok(e) => self.count(&e.kind, e.at, &mut opened),
                    Err(RecvError::Lagged(n)) => {
                        self.missed.inc_by(n);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        })
    }

    /// Read the gauges from the fleet, then the whole exposition.
    pub async fn render(&self, fleet: &Fleet) -> String {
        let op = Caller::Operator;
        self.members.clear();
        self.queue_depth.clear();
        if let Ok(list) = fleet.list(&op).await {
            let mut by: BTreeMap<(String, String), i64> = BTreeMap::new();
            for m in &list.members {
                *by.entry((m.status.to_string(), m.role.to_string()))
                    .or_default() += 1;
            }
            for ((status, role), n) in by {
                self.members
                    .get_or_create(&vec![("status", status), ("role", role)])
                    .set(n);
            }
        }
        if let Ok(depths) = fleet.queue_depths(&op).await {
            for (name, depth) in depths {
                self.queue_depth
                    .get_or_create(&vec![("member", name.to_string())])
                    .set(depth as i64);
            }
        }
        if let Ok(n) = fleet.open_tickets().await {
            self.tickets_open.set(n as i64);
        }
        if let Some(ledger) = fleet.ledger_status().await {
            self.ledger_entries.set(ledger.entries as i64);
            *self.ledger_sync.0.lock().unwrap_or_else(|p| p.into_inner()) = ledger.syncs;
        }
        let ctx = &fleet.ctx;
        self.link_up.clear();
        self.link_rtt.clear();
        for l in ctx.link_views() {
            let peer = vec![("peer", l.peer.clone())];
            self.link_up
                .get_or_create(&peer)
                .set(i64::from(l.phase == Phase::Up));
            if let Some(us) = l.rtt_us {
                self.link_rtt.get_or_create(&peer).set(us as f64 / 1e6);
            }
        }
        self.mail_outbox.clear();
        ctx.views.mail.with(|mail| {
            for (peer, n) in &mail.outbox {
                self.mail_outbox
                    .get_or_create(&vec![("peer", peer.clone())])
                    .set(*n as i64);
            }
            self.mail_held.set(mail.held_total as i64);
        });
        self.drift_alerts_open.set(ctx.drift_alerts().len() as i64);
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// A histogram kept elsewhere (the ledger writer's sync times), copied in at each scrape and
/// encoded as a Prometheus histogram.
#[derive(Clone, Debug, Default)]
struct SyncHistogram(Arc<std::sync::Mutex<SyncTimes>>);

impl EncodeMetric for SyncHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let buckets: Vec<(f64, u64)> = if t.buckets.is_empty() {
            sync_bucket_bounds().map(|b| (b, 0)).collect()
        } else {
            t.buckets.clone()
        };
        encoder.encode_histogram::<NoLabelSet>(t.sum_seconds, t.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// When each open ticket opened, bounded: the oldest are forgotten first.
#[derive(Default)]
struct Opened {
    at: BTreeMap<TicketId, u64>,
    order: VecDeque<TicketId>,
}

impl Opened {
    fn insert(&mut self, t: TicketId, at: u64) {
        if self.at.insert(t, at).is_none() {
            self.order.push_back(t);
        }
        while self.order.len() > OPEN_REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.at.remove(&old);
            }
        }
    }

    fn remove(&mut self, t: &TicketId) -> Option<u64> {
        // `order` keeps the id until it reaches the front: bounded all the same.
        self.at.remove(t)
    }
}
