//! Decisions: open, position, close, show and list (`fleet_decision`).

use super::*;

impl Fleet {
    pub(super) fn open_decisions(&self) -> Vec<DecisionSummary> {
        let now = self.ctx.now();
        self.ctx
            .decision_views()
            .iter()
            .filter(|d| d.is_open())
            .map(|d| DecisionSummary::of(d, now))
            .collect()
    }

    /// `fleet_decision open` (primary only): convene slots on a subject, with a deadline fixed
    /// by the daemon's clock and a round cap. Durable in the ledger before it returns.
    pub async fn decision_open(
        &self,
        caller: &Caller,
        req: OpenRequest,
    ) -> Result<Decision, FleetError> {
        let author = authorize_decide(caller, "fleet_decision open")?;
        let now = self.ctx.now();
        let deadline_ms = match (&req.deadline, req.deadline_secs) {
            (Some(t), None) => chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.timestamp_millis().max(0) as Millis)
                .map_err(|e| {
                    FleetError::invalid(
                        "fleet_decision open",
                        format!("deadline {t:?} is not RFC 3339: {e}"),
                        "e.g. 2026-12-02T18:00:00Z, or deadline_secs",
                    )
                })?,
            (None, Some(secs)) => now + secs.saturating_mul(1000),
            _ => {
                return Err(FleetError::invalid(
                    "fleet_decision open",
                    "it needs exactly one of deadline and deadline_secs",
                    "deadline (RFC 3339) or deadline_secs (seconds from now)",
                ));
            }
        };
        let max_rounds = req.max_rounds.unwrap_or(2);
        let configured: Vec<String> = self.ctx.config().architects.keys().cloned().collect();
        validate_open(
            &req.subject,
            &req.slots,
            &configured,
            deadline_ms,
            max_rounds,
            now,
        )?;
        let open = NewDecision {
            subject: req.subject,
            slots: req.slots,
            deadline: crate::clock::rfc3339(deadline_ms),
            max_rounds,
        };
        let entry = crate::decision::actor::open(&self.ctx, author, open).await?;
        let d = Decision::opened(&entry).ok_or_else(|| {
            FleetError::internal("fleet_decision open", "the entry is not an open")
        })?;
        let id = d.id;
        self.ctx.events.emit(crate::events::EventKind::Decision {
            decision: id,
            action: "open".into(),
            slot: None,
            outcome: None,
            ledger_seq: Some(entry.seq),
        });
        tracing::info!(decision = %id, slots = ?d.slots, deadline = %d.deadline, "decision opened");
        self.start_decision(id).await?;
        Ok(d)
    }

    pub(super) fn decision_id(id: &str) -> Result<DecisionId, FleetError> {
        id.parse()
    }

    pub(super) async fn decision_actor(
        &self,
        id: DecisionId,
        what: &str,
    ) -> Result<Mailbox<DecisionMsg>, FleetError> {
        match self.ctx.decision_view(id) {
            None => Err(FleetError::not_found(
                what,
                format!("there is no decision {id}"),
                "a decision id from fleet_decision open or fleetd decision list",
            )),
            Some(d) if !d.is_open() => Err(FleetError::conflict(
                what,
                format!(
                    "{id} is closed ({})",
                    d.closed
                        .map(|c| format!("{:?}", c.outcome).to_lowercase())
                        .unwrap_or_default()
                ),
                "a call on an open decision",
            )),
            Some(_) => self
                .ctx
                .dir
                .wait_for(|d| d.decision(id), RIDE_OUT)
                .await
                .ok_or_else(|| FleetError::unavailable(what, "its record is restarting")),
        }
    }

    /// `fleet_decision position` (architect only): the slot, round and time come from the
    /// connection and the daemon's clock.
    pub async fn decision_record(
        &self,
        caller: &Caller,
        id: &str,
        round: u32,
        kind: &str,
        content: String,
    ) -> Result<Entry, FleetError> {
        let what = "fleet_decision position";
        crate::decision::state::authorize_position(caller, what)?;
        let abstain = match kind {
            "position" => false,
            "abstain" => true,
            other => {
                return Err(FleetError::invalid(
                    what,
                    format!("kind {other:?} is not a kind"),
                    "position or abstain",
                ));
            }
        };
        let id = Self::decision_id(id)?;
        let a = self.decision_actor(id, what).await?;
        let c = caller.clone();
        a.call(
            |reply| DecisionMsg::Record {
                caller: c,
                round,
                abstain,
                content,
                reply,
            },
            Duration::from_secs(40),
        )
        .await?
    }

    /// `fleet_decision close` (primary only): refused unless every convened slot has a terminal
    /// outcome. The daemon never reads the verdict for meaning.
    pub async fn decision_close(
        &self,
        caller: &Caller,
        id: &str,
        verdict: String,
        rationale: String,
    ) -> Result<Decision, FleetError> {
        let what = "fleet_decision close";
        authorize_decide(caller, what)?;
        let id = Self::decision_id(id)?;
        let a = self.decision_actor(id, what).await?;
        let c = caller.clone();
        a.call(
            |reply| DecisionMsg::Close {
                caller: c,
                verdict,
                rationale,
                reply,
            },
            Duration::from_secs(40),
        )
        .await??;
        self.ctx
            .decision_view(id)
            .ok_or_else(|| FleetError::internal(what, "closed decision vanished"))
    }

    /// One decision, whole (READ).
    pub fn decision_show(&self, caller: &Caller, id: &str) -> Result<Decision, FleetError> {
        authorize(caller, &Action::Read, "decision show")?;
        let id = Self::decision_id(id)?;
        self.ctx.decision_view(id).ok_or_else(|| {
            FleetError::not_found(
                format!("decision {id}"),
                "no such decision",
                "a decision id from fleetd decision list",
            )
        })
    }

    /// Every decision, newest first (READ).
    pub fn decision_list(&self, caller: &Caller) -> Result<Vec<DecisionSummary>, FleetError> {
        authorize(caller, &Action::Read, "decision list")?;
        let now = self.ctx.now();
        let mut v: Vec<DecisionSummary> = self
            .ctx
            .decision_views()
            .iter()
            .map(|d| DecisionSummary::of(d, now))
            .collect();
        v.reverse();
        Ok(v)
    }
}
