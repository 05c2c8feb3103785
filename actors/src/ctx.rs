//! The shared services every actor shell gets, and nothing else: the store, the event bus, the
//! clock, the terminal backend, the host key, the state dir; the [`Directory`] of where each
//! actor lives; and [`Views`], the read-only halves of the read models.
//!
//! Owns none of the state it reaches. Each read model is written by one owner through its
//! [`Publisher`] (the registry: the pid index; the ledger writer: the decisions and their ids;
//! the supervisor: why it escalated; the drift scheduler, pullers and alerter: passes, reports
//! and alerts; the post office, the peer links and the anchor puller: their views; a config
//! reload: the live config), handed out once at boot in [`Publishers`];
//! ids are allocated in their owners' cores. Must never hold a rule, a lock over state, or an
//! id counter; and must never name an actor's messages (the directory is keyed by type).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::decision::state::{Board, Decision};
use crate::drift::alerts::{Alert, AlertLog};
use crate::drift::gates::{Pass, Report};
use crate::drift::remote::RemoteAnchor;
use crate::events::EventBus;
use crate::link::state::LinkView;
use crate::mail::view::MailView;
use crate::publish::{Publisher, View, channel};
use crate::registry::state::PidIndex;
use crate::store::Store;
use crate::term::TermBackend;
use crate::types::{DecisionId, MemberIdentity, Millis};

pub use crate::directory::{Directory, Mailbox};

/// The directory (kept under its old name).
pub type Dir = Directory;

/// The read-only halves of every read model. Each is written by one owner (see [`Publishers`]).
pub struct Views {
    /// The live config (a reload swaps it whole).
    pub config: View<Arc<Config>>,
    /// Member root pid -> identity (the registry); the daemon walks a caller's process ancestry
    /// against it.
    pub pids: View<PidIndex>,
    /// Every decision as the ledger records them (the ledger writer).
    pub decisions: View<Board>,
    /// Why the daemon escalated, once it has (the supervisor).
    pub escalation: View<Option<String>>,
    /// Each peer link as its actor last published it, by peer (each `link:PEER` its own entry).
    pub links: View<BTreeMap<String, LinkView>>,
    /// The post office as it last published itself.
    pub mail: View<MailView>,
    /// Every anchor held of identities homed on other hosts (the anchor puller; the drift pass
    /// runs the gates on them).
    pub remote_anchors: View<Vec<RemoteAnchor>>,
    /// The last drift pass (the drift scheduler).
    pub drift_pass: View<Option<Pass>>,
    /// What each peer's drift puller last reported, by peer (each puller its own entry).
    pub drift_reports: View<BTreeMap<String, Report>>,
    /// The kept drift alerts and those raised in this run (the alerter).
    pub alerts: View<AlertLog>,
}

/// The writing halves, handed once at boot to each read model's owner: `Fleet::boot` gives them
/// to the config reload, the registry, the ledger writer, the supervisor, the drift scheduler
/// and the alerter, and returns [`LinkPublishers`] for the daemon to give to what it starts for
/// peer hosts.
pub struct Publishers {
    pub config: Publisher<Arc<Config>>,
    pub pids: Publisher<PidIndex>,
    pub decisions: Publisher<Board>,
    pub escalation: Publisher<Option<String>>,
    pub drift: DriftPublishers,
    pub hosts: LinkPublishers,
}

/// The writing halves of the drift protocol's read models.
pub struct DriftPublishers {
    /// The scheduler.
    pub pass: Publisher<Option<Pass>>,
    /// The scheduler, which hands each puller its entry.
    pub reports: Publisher<BTreeMap<String, Report>>,
    /// The alerter.
    pub alerts: Publisher<AlertLog>,
}

/// The writing halves of what the peer-host side publishes.
pub struct LinkPublishers {
    /// One entry per peer, each written by its `link:PEER` actor ([`Publisher::entry`]).
    pub links: Publisher<BTreeMap<String, LinkView>>,
    /// The post office.
    pub mail: Publisher<MailView>,
    /// The anchor puller.
    pub remote_anchors: Publisher<Vec<RemoteAnchor>>,
}

/// Everything the actor shells share.
pub struct Ctx {
    pub store: Store,
    pub events: Arc<EventBus>,
    pub clock: SharedClock,
    pub term: Arc<dyn TermBackend>,
    pub dir: Dir,
    pub views: Views,
    pub state_dir: PathBuf,
    /// This fleetd binary, for `{fleetd}` in profile commands.
    pub fleetd_exe: PathBuf,
    pub started_at: Millis,
    /// The host's ed25519 key: signs ledger checkpoints and drift lines, and is the identity
    /// its peer links authenticate (their TLS certificates carry it).
    pub host_key: ed25519_dalek::SigningKey,
    /// One append to the drift KB at a time (a lock over files, not over state).
    pub kb_append: tokio::sync::Mutex<()>,
    /// Whether members can be confined here (bubblewrap probed once), for spawns and status.
    pub sandbox: Arc<crate::sandbox::Sandbox>,
}

/// Makes an actor panic (debug builds; supervision tests). Registered in the directory under its
/// fault target (`link:PEER`) by actors this crate does not know (the binary's peer links).
pub type FaultHook = Arc<dyn Fn() + Send + Sync>;

impl Ctx {
    /// The services, and the publishers of their read models (for `Fleet::boot` to hand to
    /// each owner).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        events: Arc<EventBus>,
        clock: SharedClock,
        config: Config,
        term: Arc<dyn TermBackend>,
        state_dir: PathBuf,
        fleetd_exe: PathBuf,
        host_key: ed25519_dalek::SigningKey,
    ) -> (Self, Publishers) {
        let started_at = clock.now();
        let (config_p, config) = channel(Arc::new(config));
        let (pids_p, pids) = channel(PidIndex::default());
        let (decisions_p, decisions) = channel(Board::default());
        let (escalation_p, escalation) = channel(None);
        let (links_p, links) = channel(BTreeMap::new());
        let (mail_p, mail) = channel(MailView::default());
        let (anchors_p, remote_anchors) = channel(vec![]);
        let (pass_p, drift_pass) = channel(None);
        let (reports_p, drift_reports) = channel(BTreeMap::new());
        let (alerts_p, alerts) = channel(AlertLog::default());
        let ctx = Ctx {
            store,
            events,
            clock,
            term,
            dir: Dir::default(),
            views: Views {
                config,
                pids,
                decisions,
                escalation,
                links,
                mail,
                remote_anchors,
                drift_pass,
                drift_reports,
                alerts,
            },
            state_dir,
            fleetd_exe,
            started_at,
            host_key,
            kb_append: tokio::sync::Mutex::new(()),
            sandbox: Arc::default(),
        };
        let publishers = Publishers {
            config: config_p,
            pids: pids_p,
            decisions: decisions_p,
            escalation: escalation_p,
            drift: DriftPublishers {
                pass: pass_p,
                reports: reports_p,
                alerts: alerts_p,
            },
            hosts: LinkPublishers {
                links: links_p,
                mail: mail_p,
                remote_anchors: anchors_p,
            },
        };
        (ctx, publishers)
    }

    /// Every peer link's view, by peer name.
    pub fn link_views(&self) -> Vec<LinkView> {
        self.views.links.with(|l| l.values().cloned().collect())
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

    pub fn decision_view(&self, id: DecisionId) -> Option<Decision> {
        self.views.decisions.with(|b| b.get(id).cloned())
    }

    pub fn decision_views(&self) -> Vec<Decision> {
        self.views.decisions.with(|b| b.all().cloned().collect())
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
        self.views.config.get()
    }

    /// Changes whenever a member's pid is registered or cleared.
    pub fn pids_version(&self) -> u64 {
        self.views.pids.with(|p| p.version)
    }

    pub fn member_by_pid(&self, pid: u32) -> Option<MemberIdentity> {
        self.views.pids.with(|p| p.member(pid).cloned())
    }

    /// Why the daemon escalated, once it has.
    pub fn escalation(&self) -> Option<String> {
        self.views.escalation.get()
    }

    /// Whose eyes the pullers read with (G4): the live primary, as the last pass found it.
    pub fn drift_reader(&self) -> Option<String> {
        self.views
            .drift_pass
            .with(|p| p.as_ref().and_then(|p| p.reader.clone()))
    }

    /// What each peer's puller last reported.
    pub fn drift_reports(&self) -> Vec<Report> {
        self.views
            .drift_reports
            .with(|r| r.values().cloned().collect())
    }

    /// The kept drift alerts, oldest first.
    pub fn drift_alerts(&self) -> Vec<Alert> {
        self.views.alerts.with(|a| a.alerts())
    }

    pub fn mailbox_cap(&self) -> usize {
        self.config().limits.mailbox
    }

    /// The fault hook registered for `target` (debug builds).
    pub fn fault_hook(&self, target: &str) -> Option<FaultHook> {
        self.dir.get(target)
    }
}

pub type SharedCtx = Arc<Ctx>;
