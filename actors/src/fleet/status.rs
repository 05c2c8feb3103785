//! What the fleet looks like: the member list with the coordinator row, the daemon's status,
//! queue depths, open tickets and the ledger's status.

use super::*;

impl Fleet {
    /// The members with their status, role, lineage and slots; the coordinator row only for
    /// the callers the coordinator gate shows it to.
    pub async fn list(&self, caller: &Caller) -> Result<ListView, FleetError> {
        authorize(caller, &Action::Read, "fleet_list")?;
        let members = self.registry_members().await?;
        let architect_slots = self
            .registry()
            .await?
            .call(|reply| RegistryMsg::Slots { reply }, CALL)
            .await?;
        let host = self.ctx.config().daemon.host.clone();
        // The gate runs before the row is built: other callers never cause it to be assembled.
        let coordinator = if coordinator_row_visible(caller) {
            Some(self.coordinator_row(&members, &host).await)
        } else {
            None
        };
        let mut members: Vec<MemberView> = members
            .iter()
            .map(|m| MemberView::from(m).seen_by(caller))
            .collect();
        members.sort_by_key(|m| (m.status == Status::Exited, m.spawned_at));
        let open_decisions = coordinator_row_visible(caller).then(|| self.open_decisions());
        Ok(ListView {
            host,
            members,
            architect_slots,
            coordinator,
            open_decisions,
        })
    }

    pub(super) async fn coordinator_row(
        &self,
        members: &[MemberRecord],
        host: &str,
    ) -> CoordinatorRow {
        let primary = crate::registry::state::live_primary(members);
        let queue = match primary.and_then(|p| self.ctx.dir.injector(&p.name)) {
            Some(i) => i
                .call(|reply| InjectorMsg::Queue { reply }, CALL)
                .await
                .ok(),
            None => None,
        };
        let held: Vec<&Message> = queue
            .as_ref()
            .map(|q| q.queued.iter().collect())
            .unwrap_or_default();
        // Mail from other hosts' leads that is not in the queue yet (no live primary to take it).
        let (remote, remote_total) = {
            self.ctx.views.mail.with(|v| {
                (
                    v.held.iter().take(3).cloned().collect::<Vec<_>>(),
                    v.held_total,
                )
            })
        };
        let n = held.len() + remote_total;
        CoordinatorRow {
            coord_id: format!("{host}/{}", std::process::id()),
            mailbox: MailboxRow {
                state: match (primary.is_some(), n == 0) {
                    (false, _) => "no-primary",
                    (true, true) => "empty",
                    (true, false) => "holding",
                },
                held: n,
                preview: held
                    .iter()
                    .map(|m| {
                        format!(
                            "{} from {}: {}",
                            m.id,
                            m.from,
                            crate::tickets::state::subject_of(&m.body)
                        )
                    })
                    .chain(remote.iter().map(|r| format!("held from {r}")))
                    .take(3)
                    .collect(),
            },
            // Reachability of every peer host (up/down since, last RTT).
            peers: self
                .ctx
                .link_views()
                .into_iter()
                .filter_map(|v| serde_json::to_value(v).ok())
                .collect(),
        }
    }

    /// The daemon's health: members by status, open tickets, the supervisor's children and
    /// their restarts, the ledger, links and drift.
    pub async fn daemon_status(&self, caller: &Caller) -> Result<DaemonStatus, FleetError> {
        authorize(caller, &Action::Read, "fleet_status")?;
        let members = self.registry_members().await?;
        let mut by_status = BTreeMap::new();
        for m in &members {
            *by_status.entry(m.status.to_string()).or_insert(0) += 1;
        }
        let open_tickets = self.open_tickets().await?;
        let children = match self
            .sup
            .call(|reply| SupervisorMsg::Children { reply }, Some(CALL))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(c)) => c,
            _ => vec![],
        };
        let now = self.ctx.now();
        let escalation = self.ctx.escalation();
        let mode = self.ctx.config().sandbox.clone();
        let sandbox = self.ctx.sandbox.clone();
        let probe = tokio::task::spawn_blocking(move || sandbox.probe(&mode))
            .await
            .map_err(|e| FleetError::internal("fleet_status", format!("the sandbox probe: {e}")))?;
        Ok(DaemonStatus {
            sandbox: crate::sandbox::status(self.ctx.config().sandbox.mode, &probe),
            host: self.ctx.config().daemon.host.clone(),
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            state_dir: self.ctx.state_dir.display().to_string(),
            started_at: self.ctx.started_at,
            uptime_ms: now.saturating_sub(self.ctx.started_at),
            members: by_status,
            open_tickets,
            children,
            escalation,
            public_key: crate::keys::public_text(&self.ctx.host_key.verifying_key()),
            ledger_vkey: crate::keys::vkey(
                &self.ctx.ledger_origin(),
                &self.ctx.host_key.verifying_key(),
            ),
            witness_vkey: crate::keys::cosigner_vkey(
                &self.ctx.witness_name(),
                &self.ctx.host_key.verifying_key(),
            ),
            ledger: match self.ctx.dir.ledger() {
                Ok(l) => l.call(|reply| LedgerMsg::Status { reply }, CALL).await.ok(),
                Err(_) => None,
            },
            open_decisions: self.open_decisions(),
            drift_alerts: {
                let a = self.ctx.drift_alerts();
                a[a.len().saturating_sub(10)..].to_vec()
            },
            untrusted_peers: self
                .ctx
                .drift_reports()
                .into_iter()
                .filter(|r| r.verdict == crate::drift::gates::Verdict::Untrusted)
                .map(|r| r.peer)
                .collect(),
        })
    }

    /// How many messages wait for `name` (the one being delivered included); `None` when it
    /// has no injector (exited). For metrics: no authorization, no member text.
    pub async fn queue_depth(&self, name: &MemberName) -> Option<usize> {
        let i = self.ctx.dir.injector(name)?;
        i.call(|reply| InjectorMsg::Depth { reply }, CALL)
            .await
            .ok()
    }

    /// Every live member's queue depth (as `queue_depth`), for the dashboard and metrics (READ).
    pub async fn queue_depths(
        &self,
        caller: &Caller,
    ) -> Result<BTreeMap<MemberName, usize>, FleetError> {
        authorize(caller, &Action::Read, "queue depths")?;
        let mut out = BTreeMap::new();
        for m in self
            .registry_members()
            .await?
            .iter()
            .filter(|m| m.is_live())
        {
            if let Some(depth) = self.queue_depth(&m.name).await {
                out.insert(m.name.clone(), depth);
            }
        }
        Ok(out)
    }

    /// How many tickets are open (counted at the desk).
    pub async fn open_tickets(&self) -> Result<usize, FleetError> {
        Ok(self
            .desk()
            .await?
            .call(|reply| DeskMsg::All { reply }, CALL)
            .await?
            .iter()
            .filter(|t| t.state == TicketState::Open)
            .count())
    }

    /// The decision ledger's writer's status (entries, sync times), if it answers. For metrics.
    pub async fn ledger_status(&self) -> Option<LedgerStatus> {
        let l = self.ctx.dir.ledger().ok()?;
        l.call(|reply| LedgerMsg::Status { reply }, CALL).await.ok()
    }
}
