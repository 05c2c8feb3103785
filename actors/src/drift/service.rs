//! The drift protocol inside the daemon: `fleet_drift`'s writes (attributed to the caller's
//! identity, signed with the host key, bootstrapped with `first_contact`), the peer reports the
//! pullers keep, and alerts (tracing, events, `GET /alerts`, `fleet_status`, and a message to the
//! lead).
//!
//! Owns the daemon's drift state and its I/O order. Must never decide a gate (see `gates`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::authz::{Action, authorize};
use crate::ctx::Ctx;
use crate::drift::gates::{self, Index, Params, Report};
use crate::drift::kb;
use crate::drift::line::{Kind, NewLine, sign};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::fleet::Fleet;
use crate::injector::actor::InjectorMsg;
use crate::injector::state::Message;
use crate::types::{Caller, Millis, Party, Role};

/// A peer's last good anchor, kept durably by its puller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedAnchor {
    pub anchor: String,
    pub ts: String,
    pub tick: u64,
    pub pulled_at: Millis,
}

pub use crate::drift::alerts::Alert;
use crate::drift::alerts::AlertLog;

/// The daemon's live drift state.
#[derive(Default)]
pub struct DriftState {
    reports: RwLock<BTreeMap<String, Report>>,
    /// The kept alerts and those already raised in this run (bounded; `drift::alerts`).
    alerts: Mutex<AlertLog>,
    /// Serializes appends to the KB.
    pub write: tokio::sync::Mutex<()>,
    /// The index of the last pass, shared by every puller of that pass.
    pub last_index: RwLock<Option<(Millis, Arc<Index>)>>,
    /// The reader of the last pass (the live primary).
    pub reader: RwLock<Option<String>>,
    /// Each peer's puller, as it registered itself when it (re)started.
    pullers: RwLock<BTreeMap<String, ractor::ActorRef<crate::drift::actor::PullerMsg>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DriftState {
    pub fn set_report(&self, r: Report) {
        self.reports
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(r.peer.clone(), r);
    }
    pub fn reports(&self) -> Vec<Report> {
        self.reports
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
    pub fn alerts(&self) -> Vec<Alert> {
        lock(&self.alerts).alerts()
    }
    /// Record that `(peer, text)` is being raised; false if it already was (in this daemon
    /// run, whatever actor restarts).
    pub fn first_raise(&self, peer: &str, text: &str) -> bool {
        lock(&self.alerts).first_raise(peer, text)
    }
    pub fn set_puller(&self, peer: &str, a: ractor::ActorRef<crate::drift::actor::PullerMsg>) {
        self.pullers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(peer.to_string(), a);
    }
    pub fn puller(&self, peer: &str) -> Option<ractor::ActorRef<crate::drift::actor::PullerMsg>> {
        self.pullers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(peer)
            .cloned()
    }
    fn push_alert(&self, a: Alert) {
        lock(&self.alerts).push(a);
    }
}

/// The rules' parameters at `now` from the live config.
pub fn params(ctx: &Ctx) -> Params {
    Params::from_config(&ctx.config().drift, ctx.now())
}

/// Read and index the whole KB (blocking; call from a blocking thread).
pub fn read_index(
    kb_dir: &std::path::Path,
    trusted: &[ed25519_dalek::VerifyingKey],
) -> std::io::Result<Index> {
    match kb::read(kb_dir) {
        Ok(s) => Ok(gates::index(&s, trusted)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Index::default()),
        Err(e) => Err(e),
    }
}

/// Append a signed line to `identity`'s log (serialized, synced before it returns).
pub async fn append(
    ctx: &Arc<Ctx>,
    identity: &str,
    mut line: NewLine,
) -> Result<String, FleetError> {
    let _g = ctx.drift.write.lock().await;
    let (kb_dir, key, id) = (ctx.kb_dir(), ctx.host_key.clone(), identity.to_string());
    let kind = line
        .kind
        .map(|k| k.as_str().to_string())
        .unwrap_or_default();
    let (signed, tick) = tokio::task::spawn_blocking(move || {
        line.tick = kb::next_tick(&kb_dir, &id);
        let signed = sign(&line, &key);
        kb::append(&kb_dir, &id, &kb::date_of(line.ts_ms), &signed).map(|_| (signed, line.tick))
    })
    .await
    .map_err(|e| FleetError::internal("a drift log append", e.to_string()))?
    .map_err(|e| FleetError::internal("a drift log append", e.to_string()))?;
    ctx.events.emit(EventKind::DriftLine {
        identity: identity.to_string(),
        kind,
        tick,
    });
    Ok(signed)
}

/// Raise an alert everywhere it belongs: tracing, the event stream, `GET /alerts`, and a
/// message to the lead.
pub async fn raise(ctx: &Arc<Ctx>, peer: &str, rule: crate::drift::gates::AlertRule, text: String) {
    tracing::warn!(%peer, %rule, alert = %text, "drift alert");
    // Kept before the event goes out, so whoever reacts to the event finds it in `/alerts`.
    ctx.drift.push_alert(Alert {
        at: ctx.now(),
        peer: peer.to_string(),
        rule: rule.to_string(),
        text: text.clone(),
    });
    ctx.events.emit(EventKind::DriftAlert {
        peer: peer.to_string(),
        rule: rule.to_string(),
        text: text.clone(),
    });
    notify_lead(ctx, &format!("[drift alert about {peer}] {text}")).await;
}

/// Queue a message (without a ticket) for the live primary, if there is one.
pub async fn notify_lead(ctx: &Arc<Ctx>, text: &str) {
    let Ok(registry) = ctx.dir.registry() else {
        return;
    };
    let Ok(Some(lead)) = registry
        .call(
            |reply| crate::registry::actor::RegistryMsg::Primary { reply },
            Duration::from_secs(5),
        )
        .await
    else {
        return;
    };
    let Some(inj) = ctx.dir.injector(&lead.name) else {
        return;
    };
    let number = match ctx.dir.tickets() {
        Ok(desk) => {
            desk.call(
                |reply| crate::tickets::actor::DeskMsg::Number { reply },
                Duration::from_secs(5),
            )
            .await
        }
        Err(e) => Err(e),
    };
    let id = match number {
        Ok(Ok(id)) => id,
        Ok(Err(e)) | Err(e) => {
            tracing::warn!(error = %e, "the lead is not told of a drift alert: no message number");
            return;
        }
    };
    let msg = Message::new(
        id,
        lead.name.clone(),
        Party::Fleetd,
        None,
        crate::types::truncate(
            text,
            ctx.config().injector.max_message_bytes.saturating_sub(64),
        ),
    );
    if let Err(e) = inj
        .call(
            |reply| InjectorMsg::Enqueue {
                msg: Box::new(msg),
                ticket: None,
                reply,
            },
            Duration::from_secs(5),
        )
        .await
    {
        tracing::warn!(error = %e, "could not queue a drift alert for the lead");
    }
}

/// What a `fleet_drift` write returns.
#[derive(Clone, Debug, Serialize)]
pub struct Written {
    pub identity: String,
    /// A `first_contact` line written first, because the identity had no log.
    pub first_contact: Option<Value>,
    pub line: Value,
}

/// What `fleet_drift peers` returns.
#[derive(Clone, Debug, Serialize)]
pub struct PeersView {
    pub reader: Option<String>,
    pub heartbeat_secs: u64,
    pub last_pass: Option<String>,
    pub peers: Vec<Report>,
    pub alerts: Vec<Alert>,
}

fn writer(caller: &Caller, what: &str) -> Result<(String, Role), FleetError> {
    crate::authz::authorize(caller, &crate::authz::Action::DriftWrite, what)?;
    match caller {
        Caller::Member(m) => Ok((m.name.to_string(), m.role)),
        _ => Err(FleetError::internal(
            what,
            "an authorized drift write has no member",
        )),
    }
}

impl Fleet {
    /// Bootstrap `identity` if it has no log: its initial anchor is the most recent recent
    /// observation of it by a peer, else the operator's default (config), else its role.
    async fn ensure_bootstrapped(
        &self,
        identity: &str,
        role: Role,
    ) -> Result<Option<Value>, FleetError> {
        let (kb_dir, id) = (self.ctx.kb_dir(), identity.to_string());
        let has = tokio::task::spawn_blocking(move || kb::has_log(&kb_dir, &id))
            .await
            .unwrap_or(false);
        if has {
            return Ok(None);
        }
        let (kb_dir, trusted) = (self.ctx.kb_dir(), self.ctx.trusted_keys());
        let ix = tokio::task::spawn_blocking(move || read_index(&kb_dir, &trusted))
            .await
            .map_err(|e| FleetError::internal("drift bootstrap", e.to_string()))?
            .map_err(|e| FleetError::internal("drift bootstrap", e.to_string()))?;
        let line = gates::first_contact(
            &ix,
            identity,
            &role.to_string(),
            &self.ctx.config().drift,
            &params(&self.ctx),
        );
        let source = line.extra["source"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let signed = append(&self.ctx, identity, line).await?;
        tracing::info!(identity, %source, "drift bootstrap: first_contact");
        Ok(serde_json::from_str(&signed).ok())
    }

    async fn drift_write(
        &self,
        caller: &Caller,
        what: &str,
        line: NewLine,
    ) -> Result<Written, FleetError> {
        let (identity, role) = writer(caller, what)?;
        let first_contact = self.ensure_bootstrapped(&identity, role).await?;
        let signed = append(&self.ctx, &identity, line).await?;
        Ok(Written {
            identity,
            first_contact,
            line: serde_json::from_str(&signed).unwrap_or(Value::Null),
        })
    }

    fn baseline_arg(what: &str, b: Option<String>) -> Result<String, FleetError> {
        match b {
            Some(s) if !s.trim().is_empty() && s.len() <= 4096 => Ok(s),
            _ => Err(FleetError::invalid(
                what,
                "`baseline` is missing, empty or over 4096 bytes",
                "a short identity statement, e.g. \"researcher for the parser team\"",
            )),
        }
    }

    /// `fleet_drift anchor`: a clean fencepost (or reanchor) in the caller's own log.
    pub async fn drift_anchor(
        &self,
        caller: &Caller,
        baseline: Option<String>,
        reanchor: bool,
    ) -> Result<Written, FleetError> {
        let what = "fleet_drift anchor";
        let baseline = Self::baseline_arg(what, baseline)?;
        let kind = if reanchor {
            Kind::Reanchor
        } else {
            Kind::Fencepost
        };
        self.drift_write(
            caller,
            what,
            NewLine {
                ts_ms: self.ctx.now(),
                kind: Some(kind),
                baseline: Some(baseline),
                ..Default::default()
            },
        )
        .await
    }

    /// `fleet_drift drift`: a drift event in the caller's own log.
    pub async fn drift_drift(
        &self,
        caller: &Caller,
        baseline: Option<String>,
        delta: Option<Value>,
    ) -> Result<Written, FleetError> {
        let what = "fleet_drift drift";
        let baseline = Self::baseline_arg(what, baseline)?;
        let delta = match delta {
            Some(d) if !d.is_null() => d,
            _ => {
                return Err(FleetError::invalid(
                    what,
                    "`delta` is missing or null",
                    "a JSON value describing the drift (null means clean: use anchor)",
                ));
            }
        };
        self.drift_write(
            caller,
            what,
            NewLine {
                ts_ms: self.ctx.now(),
                kind: Some(Kind::Drift),
                baseline: Some(baseline),
                delta: Some(delta),
                ..Default::default()
            },
        )
        .await
    }

    /// `fleet_drift observe`: the caller's report about another identity, in the caller's log.
    pub async fn drift_observe(
        &self,
        caller: &Caller,
        subject: Option<String>,
        baseline: Option<String>,
        delta: Option<Value>,
    ) -> Result<Written, FleetError> {
        let what = "fleet_drift observe";
        let subject = subject.ok_or_else(|| {
            FleetError::invalid(what, "`subject` is missing", "the identity you observed")
        })?;
        if !crate::types::is_identity_ref(&subject) {
            return Err(FleetError::invalid(
                what,
                format!("`subject` {subject:?} is not an identity"),
                "an identity name of this host, or IDENTITY@HOST for one homed on a peer",
            ));
        }
        if caller
            .party()
            .and_then(|p| p.member().map(|m| m.to_string()))
            == Some(subject.clone())
        {
            return Err(FleetError::invalid(
                what,
                "an observation is about another identity",
                "anchor or drift for yourself",
            ));
        }
        let baseline = Self::baseline_arg(what, baseline)?;
        let delta = delta.filter(|d| !d.is_null());
        let kind = if delta.is_some() {
            Kind::Drift
        } else {
            Kind::Fencepost
        };
        self.drift_write(
            caller,
            what,
            NewLine {
                ts_ms: self.ctx.now(),
                kind: Some(kind),
                baseline: Some(baseline),
                delta,
                subject: Some(subject),
                ..Default::default()
            },
        )
        .await
    }

    /// `fleet_drift peers`: what the pullers last saw of every peer, and the alerts.
    pub fn drift_peers(&self, caller: &Caller) -> Result<PeersView, FleetError> {
        authorize(caller, &Action::Read, "fleet_drift peers")?;
        let last = self
            .ctx
            .drift
            .last_index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(t, _)| crate::clock::rfc3339(*t));
        Ok(PeersView {
            reader: self.ctx.drift_reader(),
            heartbeat_secs: self.ctx.config().drift.heartbeat_secs,
            last_pass: last,
            peers: self.ctx.drift.reports(),
            alerts: self.ctx.drift.alerts(),
        })
    }

    /// Alerts (READ).
    pub fn drift_alerts(&self, caller: &Caller) -> Result<Vec<Alert>, FleetError> {
        authorize(caller, &Action::Read, "alerts")?;
        Ok(self.ctx.drift.alerts())
    }
}

impl Ctx {
    /// Whose eyes the pullers read with (G4): the live primary, as the last pass found it.
    pub fn drift_reader(&self) -> Option<String> {
        self.drift
            .reader
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
