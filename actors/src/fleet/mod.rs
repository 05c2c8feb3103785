//! The fleet's operations, as the MCP tools and the REST API call them: spawn, send, reply,
//! ask, poll, ack, list, status, stop, signal, attach; plus boot, reload and shutdown.
//!
//! Owns the order of steps across actors (Authz first, then the ticket, then the queue, ...).
//! Every operation takes the resolved [`Caller`]; nothing defaults it. Must never hold a rule of
//! its own: who may do what is [`crate::authz`], everything stateful is in an actor's core.
//!
//! This file holds the handle, boot and the lookups every operation shares; the operations are
//! in one file per concern: `members` (whoami, spawn, status, stop, drain), `messages` (send,
//! mail from other hosts, reply, ask, poll, ack, ticket and receipt lookups), `status` (list,
//! daemon status, queues), `decisions` (`fleet_decision`), `admin` (signals, terminals, faults,
//! reload, quiesce, shutdown); `views` holds what they return.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::authz::{Action, authorize, coordinator_row_visible};
use crate::config::Config;
use crate::ctx::{DriftPublishers, LinkPublishers, Publishers, SharedCtx};
use crate::decision::actor::{DecisionActor, DecisionArgs, DecisionMsg};
use crate::decision::state::{Decision, authorize_decide, validate_open};
use crate::directory::Mailbox;
use crate::drift::actor::SchedulerArgs;
use crate::drift::alerter::{Alerter, AlerterArgs};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::injector::actor::{InjectorActor, InjectorArgs, InjectorMsg, QueueView};
use crate::injector::state::{Message, ReceiptState};
use crate::ledger::actor::{LedgerArgs, LedgerMsg, LedgerStatus, LedgerWriter};
use crate::ledger::appender::NewDecision;
use crate::ledger::state::Entry;
use crate::mail::actor::MailMsg;
use crate::publish::Publisher;
use crate::registry::actor::{
    RegistryActor, RegistryArgs, RegistryMsg, SlotView as ArchitectSlotView,
};
use crate::registry::state::{ExitInfo, MemberRecord};
use crate::slot::actor::{SlotActor, SlotArgs, SlotMsg, SlotView};
use crate::supervisor::actor::{ChildSpec, ChildView, Supervisor, SupervisorMsg};
use crate::term::{LaunchSpec, TermHandle};
use crate::tickets::actor::{DeskActor, DeskMsg, WaitOutcome};
use crate::tickets::state::{Origin, RemoteReceipt, Ticket, TicketKind, TicketState};
use crate::types::{Caller, DecisionId, MemberName, Millis, MsgId, Party, Role, Status, TicketId};

mod admin;
mod decisions;
mod drift;
mod members;
mod messages;
mod status;
mod views;

pub use views::*;

const CALL: Duration = Duration::from_secs(10);
/// How long a call waits for an actor that is being restarted to come back.
const RIDE_OUT: Duration = Duration::from_secs(5);

/// The handle every front end (MCP, REST, the demo) uses.
#[derive(Clone)]
pub struct Fleet {
    pub ctx: SharedCtx,
    sup: ActorRef<SupervisorMsg>,
    /// The live config's one writer: a reload.
    config: Publisher<Arc<Config>>,
}

fn sha256_hex(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn member_name(s: &str) -> Result<MemberName, FleetError> {
    MemberName::new(s)
}

impl Fleet {
    /// Boot the actor tree: supervisor, registry, ticket desk, ledger writer, then re-adopt
    /// every member the store remembers as live. Each read model's publisher goes to its owner
    /// here, once; what the peer-host side publishes is returned for the daemon to hand on.
    /// Returns the fleet and the supervisor's join handle (it ends when the daemon escalates or
    /// shuts down).
    pub async fn boot(
        ctx: SharedCtx,
        publishers: Publishers,
    ) -> Result<(Fleet, tokio::task::JoinHandle<()>, LinkPublishers), FleetError> {
        let Publishers {
            config,
            pids,
            decisions,
            escalation,
            drift,
            hosts,
        } = publishers;
        let (sup, join) = Actor::spawn(None, Supervisor, (ctx.clone(), escalation))
            .await
            .map_err(|e| FleetError::internal("daemon start", format!("supervisor: {e}")))?;
        ctx.dir.set("", Some(sup.get_id()), sup.clone());
        let fleet = Fleet {
            ctx: ctx.clone(),
            sup,
            config,
        };
        // The singletons: their directory entry is cleared when they end.
        for spec in [
            {
                let c = ctx.clone();
                ChildSpec::actor("registry", "registry", move || {
                    let args = RegistryArgs {
                        ctx: c.clone(),
                        pids: pids.clone(),
                    };
                    (RegistryActor, args)
                })
            },
            {
                let c = ctx.clone();
                ChildSpec::actor("tickets", "tickets", move || (DeskActor, c.clone()))
            },
            {
                let c = ctx.clone();
                ChildSpec::actor("ledger", "ledger", move || {
                    let args = LedgerArgs {
                        ctx: c.clone(),
                        decisions: decisions.clone(),
                    };
                    (LedgerWriter, args)
                })
            },
        ] {
            let c = ctx.clone();
            fleet
                .start_child(spec.on_down(move |id| c.dir.remove_actor(id)))
                .await?;
        }
        let DriftPublishers {
            pass,
            reports,
            alerts,
        } = drift;
        let (c, c2) = (ctx.clone(), ctx.clone());
        fleet
            .start_child(
                ChildSpec::actor("alerts", "alerts", move || {
                    let args = AlerterArgs {
                        ctx: c.clone(),
                        log: alerts.clone(),
                    };
                    (Alerter, args)
                })
                .on_down(move |id| c2.dir.remove_actor(id)),
            )
            .await?;
        let c = ctx.clone();
        fleet
            .start_child(ChildSpec::actor("drift", "drift", move || {
                let args = SchedulerArgs {
                    ctx: c.clone(),
                    pass: pass.clone(),
                    reports: reports.clone(),
                };
                (crate::drift::actor::DriftScheduler, args)
            }))
            .await?;
        for d in ctx.decision_views().into_iter().filter(|d| d.is_open()) {
            if let Err(e) = fleet.start_decision(d.id).await {
                tracing::error!(decision = %d.id, error = %e, "could not start the decision record");
            }
        }
        let members = fleet.registry_members().await?;
        let live: Vec<MemberRecord> = members.into_iter().filter(|m| m.is_live()).collect();
        ctx.term.sweep(
            &live
                .iter()
                .map(|m| (m.name.clone(), m.generation))
                .collect::<Vec<_>>(),
        );
        for m in live {
            tracing::info!(member = %m.name, "re-adopting member");
            if let Err(e) = fleet.start_member(&m.name, None).await {
                tracing::error!(member = %m.name, error = %e, "could not re-adopt member");
            }
        }
        Ok((fleet, join, hosts))
    }

    /// Start a supervised child.
    pub async fn start_child(&self, spec: ChildSpec) -> Result<(), FleetError> {
        crate::supervisor::actor::start_child(&self.sup, spec).await
    }

    /// Start the supervised record of an open decision (it rebuilds itself from the ledger).
    async fn start_decision(&self, id: DecisionId) -> Result<(), FleetError> {
        let (c, c2) = (self.ctx.clone(), self.ctx.clone());
        self.start_child(
            ChildSpec::actor(format!("decision:{id}"), "decision", move || {
                (
                    DecisionActor,
                    DecisionArgs {
                        ctx: c2.clone(),
                        id,
                    },
                )
            })
            .on_down(move |actor| c.dir.remove_decision(id, actor)),
        )
        .await
    }

    /// Start (or re-adopt, with `handle: None`) a member's slot and injector.
    async fn start_member(
        &self,
        name: &MemberName,
        handle: Option<TermHandle>,
    ) -> Result<(), FleetError> {
        let h = Arc::new(Mutex::new(handle));
        let (ctx, n) = (self.ctx.clone(), name.clone());
        let (c, nm) = (self.ctx.clone(), name.clone());
        self.start_child(
            ChildSpec::actor(format!("slot:{name}"), "slot", move || {
                let args = SlotArgs {
                    ctx: ctx.clone(),
                    name: n.clone(),
                    handle: h.clone(),
                };
                (SlotActor, args)
            })
            .on_down(move |id| c.dir.remove_slot(&nm, id)),
        )
        .await?;
        let (ctx, n) = (self.ctx.clone(), name.clone());
        let (c, nm) = (self.ctx.clone(), name.clone());
        self.start_child(
            ChildSpec::actor(format!("injector:{name}"), "injector", move || {
                let args = InjectorArgs {
                    ctx: ctx.clone(),
                    target: n.clone(),
                };
                (InjectorActor, args)
            })
            .on_down(move |id| c.dir.remove_injector(&nm, id)),
        )
        .await
    }

    /// The registry, waiting out a restart.
    async fn registry(&self) -> Result<Mailbox<RegistryMsg>, FleetError> {
        match self.ctx.dir.wait_for(|d| d.registry().ok(), RIDE_OUT).await {
            Some(m) => Ok(m),
            None => self.ctx.dir.registry(),
        }
    }

    /// The ticket desk, waiting out a restart.
    async fn desk(&self) -> Result<Mailbox<DeskMsg>, FleetError> {
        match self.ctx.dir.wait_for(|d| d.tickets().ok(), RIDE_OUT).await {
            Some(m) => Ok(m),
            None => self.ctx.dir.tickets(),
        }
    }

    /// A live member's slot, waiting out a restart.
    async fn slot(&self, name: &MemberName) -> Option<Mailbox<SlotMsg>> {
        self.ctx.dir.wait_for(|d| d.slot(name), RIDE_OUT).await
    }

    /// A live member's injector, waiting out a restart.
    async fn injector(&self, name: &MemberName) -> Option<Mailbox<InjectorMsg>> {
        self.ctx.dir.wait_for(|d| d.injector(name), RIDE_OUT).await
    }

    async fn registry_members(&self) -> Result<Vec<MemberRecord>, FleetError> {
        self.registry()
            .await?
            .call(|reply| RegistryMsg::Members { reply }, CALL)
            .await
    }

    /// The live primary (the lead), as the registry's core decides it.
    pub async fn live_primary(&self) -> Result<Option<MemberRecord>, FleetError> {
        self.registry()
            .await?
            .call(|reply| RegistryMsg::Primary { reply }, CALL)
            .await
    }

    async fn member(&self, name: &MemberName) -> Result<Option<MemberRecord>, FleetError> {
        let n = name.clone();
        self.registry()
            .await?
            .call(|reply| RegistryMsg::Member { name: n, reply }, CALL)
            .await
    }

    async fn live_member(&self, name: &MemberName, what: &str) -> Result<MemberRecord, FleetError> {
        match self.member(name).await? {
            Some(m) if m.is_live() => Ok(m),
            Some(m) => Err(FleetError::conflict(
                what,
                format!(
                    "`{name}` has exited ({})",
                    m.exit
                        .map(|e| e.reason)
                        .unwrap_or_else(|| "no reason recorded".into())
                ),
                "a live member (see fleet_list)",
            )),
            None => Err(FleetError::not_found(
                what,
                format!("there is no member `{name}`"),
                "a member name from fleet_list",
            )),
        }
    }

    async fn receipt(&self, id: Option<MsgId>, caller: &Caller) -> Option<Receipt> {
        let id = id?;
        self.ctx
            .store
            .run(move |s| s.message(id))
            .await
            .ok()
            .flatten()
            .map(|m| Receipt::of(&m, caller))
    }

    /// Ticket `t` with its receipt, as `caller` sees it (the receipt's screen text by the
    /// Screen rule). A remote receipt carries no screen text: the other host keeps it.
    async fn view(&self, t: Ticket, caller: &Caller) -> TicketView {
        if let Some(r) = &t.remote {
            let receipt = Some(Receipt {
                msg: t.msg.unwrap_or(MsgId(0)),
                target: t.to.clone(),
                state: r.state,
                queued_at: r.queued_at,
                delivered_at: r.delivered_at,
                settled_at: r.settled_at,
                note: r.note.clone(),
                screen: None,
                altered: r.altered.clone(),
            });
            return TicketView { ticket: t, receipt };
        }
        let receipt = self.receipt(t.msg, caller).await;
        TicketView { ticket: t, receipt }
    }
}

/// A ticket whose message is durably queued, with the message's receipt as committed (for a
/// message to a member here; a message for another host's lead has its receipt in the ticket).
pub(super) struct Queued {
    ticket: Ticket,
    receipt: Option<Receipt>,
}

/// Where a ticketed message is queued, in the same commit as its ticket.
enum Via {
    /// The target member's injector, on this host.
    Injector,
    /// This host's outbox to another host's lead (`receipt.host`).
    Mail {
        mail: Mailbox<MailMsg>,
        receipt: RemoteReceipt,
    },
}

/// What a spawn reads of the user's own configuration for an agent CLI whose wiring builds on
/// it (bounded: a settings file over 1 MiB is left out, as are more than 1,000 entries).
fn read_user_config(kind: crate::config::AgentKind) -> crate::agents::UserConfig {
    let Some(home) = std::env::var_os("HOME") else {
        return Default::default();
    };
    let Some(dir) = crate::agents::user_config_dir(kind, std::path::Path::new(&home)) else {
        return Default::default();
    };
    let settings = std::fs::metadata(dir.join("settings.json"))
        .ok()
        .filter(|m| m.len() <= 1 << 20)
        .and_then(|_| std::fs::read_to_string(dir.join("settings.json")).ok());
    let entries = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .take(1_000)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    crate::agents::UserConfig {
        dir: Some(dir),
        settings,
        entries,
    }
}

/// A member's working directory must be an absolute path to a directory that exists (the
/// agent would otherwise start somewhere else, e.g. `$HOME`, and work there).
fn check_cwd(name: &MemberName, dir: &str) -> Result<(), FleetError> {
    let what = format!("the spawn of `{name}`");
    let accepted =
        "the absolute path of an existing directory (fleetd spawn sends the directory it runs in)";
    let path = std::path::Path::new(dir);
    if !path.is_absolute() {
        return Err(FleetError::invalid(
            what,
            format!("the working directory {dir:?} is not an absolute path"),
            accepted,
        ));
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(FleetError::invalid(
            what,
            format!("the working directory {dir:?} is not a directory"),
            accepted,
        )),
        Err(e) => Err(FleetError::invalid(
            what,
            format!("the working directory {dir:?} cannot be used: {e}"),
            accepted,
        )),
    }
}

pub use crate::files::write_private;
