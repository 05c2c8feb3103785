//! `fleet_drift`: the writes (attributed to the caller's identity, bootstrapped with
//! `first_contact`, signed and appended by `drift::service`) and the views (the pullers' reports,
//! the alerts).

use serde_json::Value;

use super::*;
use crate::drift::gates;
use crate::drift::kb;
use crate::drift::line::{Kind, NewLine};
use crate::drift::service::{Alert, PeersView, Written, append, params, read_index};

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
            .views
            .drift_pass
            .with(|p| p.as_ref().map(|p| crate::clock::rfc3339(p.at)));
        Ok(PeersView {
            reader: self.ctx.drift_reader(),
            heartbeat_secs: self.ctx.config().drift.heartbeat_secs,
            last_pass: last,
            peers: self.ctx.drift_reports(),
            alerts: self.ctx.drift_alerts(),
        })
    }

    /// Alerts (READ).
    pub fn drift_alerts(&self, caller: &Caller) -> Result<Vec<Alert>, FleetError> {
        authorize(caller, &Action::Read, "alerts")?;
        Ok(self.ctx.drift_alerts())
    }
}
