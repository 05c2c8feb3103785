//! The operator's side and the daemon's life: agent signals, terminals (attach, input,
//! resize), fault injection, config reload, quiescing and shutdown.

use super::*;

impl Fleet {
    /// A status report from inside a member's process tree: `fleetd signal STATE`, or an agent
    /// hook's payload (`fleetd signal --hook`). Records the agent's session id for resume if it
    /// is one of the member's CLI (else the answer and the log say why it was not kept).
    pub async fn signal(
        &self,
        caller: &Caller,
        req: SignalRequest,
    ) -> Result<SignalAck, FleetError> {
        let report = match (&req.status, &req.hook) {
            (Some(state), None) => crate::hooks::Report {
                event: state.clone(),
                signal: Some(crate::hooks::from_state(state)?),
                session_id: None,
                resumed: false,
            },
            (None, Some(payload)) => crate::hooks::from_payload(payload)?,
            _ => {
                return Err(FleetError::invalid(
                    "fleetd signal",
                    "give either a state or a hook payload",
                    format!("{{status: {}}} or {{hook: PAYLOAD}}", crate::hooks::STATES),
                ));
            }
        };
        authorize(caller, &Action::Signal, "fleetd signal")?;
        let Caller::Member(m) = caller else {
            return Err(FleetError::internal(
                "fleetd signal",
                "an authorized signal has no member",
            ));
        };
        // The id is member text that a resume puts on the agent's command line: kept only in
        // the format of the member's own CLI (`session::check`), else refused and logged.
        let mut session_id = None;
        let mut session_refused = None;
        if let Some(id) = &report.session_id {
            let profile = self.member(&m.name).await.ok().flatten().map(|r| r.profile);
            let profile = profile.unwrap_or_default();
            let agent = self
                .ctx
                .config()
                .profiles
                .get(&profile)
                .and_then(|p| p.agent);
            match crate::session::check(&profile, agent, id) {
                Ok(()) => {
                    if let Ok(r) = self.registry().await {
                        r.cast(RegistryMsg::Session {
                            name: m.name.clone(),
                            id: id.clone(),
                        });
                    }
                    session_id = Some(id.clone());
                }
                Err(e) => {
                    tracing::warn!(member = %m.name, refused = %e, "session id not kept");
                    session_refused = Some(e.to_string());
                }
            }
        }
        // A resumed session owes its charter to a CLI that does not replay the context it was
        // given at the start (the hook wiring decides whether to act on it); the first turn
        // after it takes it.
        let due = match (&report.signal, report.resumed) {
            (_, true) => Some(true),
            (Some(crate::slot::state::Signal::TurnStarted { .. }), false) => Some(false),
            _ => None,
        };
        let mut context_due = false;
        if let Some(due) = due
            && let Ok(r) = self.registry().await
        {
            let was = r
                .call(
                    |reply| RegistryMsg::CharterDue {
                        name: m.name.clone(),
                        due,
                        reply,
                    },
                    CALL,
                )
                .await
                .unwrap_or(false);
            context_due = was && !due;
        }
        let signal = report.signal.clone();
        if let Some(signal) = signal {
            let slot = self.slot(&m.name).await.ok_or_else(|| {
                FleetError::unavailable("fleetd signal", "the member's slot is restarting")
            })?;
            slot.call(|reply| SlotMsg::Signal { signal, reply }, CALL)
                .await??;
        }
        Ok(SignalAck {
            member: m.name.clone(),
            event: report.event,
            signal: report.signal.as_ref().map(|s| s.name().to_string()),
            session_id,
            session_refused,
            context_due,
        })
    }

    /// A member's MCP session listed the fleet tools: its first turn can use them.
    pub async fn tools_listed(&self, caller: &Caller) {
        if let Caller::Member(m) = caller
            && let Some(slot) = self.slot(&m.name).await
        {
            slot.cast(SlotMsg::ToolsListed);
        }
    }

    /// Attach: the current screen and a live stream of the terminal's output (operator only).
    pub async fn attach(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(Vec<u8>, broadcast::Receiver<Vec<u8>>), FleetError> {
        authorize(caller, &Action::Terminal, "attach")?;
        let name = member_name(name)?;
        let slot = self.slot_of(&name).await?;
        slot.call(|reply| SlotMsg::Attach { reply }, CALL).await
    }

    /// Keys from an attached operator.
    pub async fn input(
        &self,
        caller: &Caller,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), FleetError> {
        authorize(caller, &Action::Terminal, "terminal input")?;
        let name = member_name(name)?;
        let slot = self.slot_of(&name).await?;
        slot.call(|reply| SlotMsg::Input { bytes, reply }, CALL)
            .await?
    }

    /// Resizes member `name`'s terminal (operator only; sizes out of bounds are refused).
    pub async fn resize(
        &self,
        caller: &Caller,
        name: &str,
        rows: u16,
        cols: u16,
    ) -> Result<(), FleetError> {
        authorize(caller, &Action::Terminal, "terminal resize")?;
        let name = member_name(name)?;
        if let Some(why) = crate::term::size_problem(rows, cols) {
            return Err(FleetError::invalid(
                format!("resizing `{name}`'s terminal"),
                why,
                "the size of a real terminal (`fleetd attach` sends yours)",
            ));
        }
        let slot = self.slot_of(&name).await?;
        slot.cast(SlotMsg::Resize { rows, cols });
        Ok(())
    }

    pub(super) async fn slot_of(&self, name: &MemberName) -> Result<Mailbox<SlotMsg>, FleetError> {
        self.live_member(name, &format!("terminal of `{name}`"))
            .await?;
        self.slot(name).await.ok_or_else(|| {
            FleetError::unavailable(format!("terminal of `{name}`"), "its slot is restarting")
        })
    }

    /// Debug builds only: make an actor panic, to exercise supervision.
    pub async fn inject_fault(&self, caller: &Caller, target: &str) -> Result<(), FleetError> {
        authorize(caller, &Action::Admin, "fault injection")?;
        if !cfg!(debug_assertions) {
            return Err(FleetError::invalid(
                "fault injection",
                "this is a release build",
                "a debug build",
            ));
        }
        if let Some(id) = target.strip_prefix("decision:") {
            let id: DecisionId = id.parse()?;
            self.ctx
                .dir
                .decision(id)
                .ok_or_else(|| {
                    FleetError::not_found(target, "no such open decision", "decision:d-N")
                })?
                .cast(DecisionMsg::Panic);
            return Ok(());
        }
        if let Some(h) = self.ctx.fault_hook(target) {
            h();
            return Ok(());
        }
        if let Some(peer) = target.strip_prefix("drift:") {
            let a = self.ctx.dir.drift_puller(peer).ok_or_else(|| {
                FleetError::not_found(target, "no such drift puller", "drift:PEER")
            })?;
            let _ = a.cast(crate::drift::actor::PullerMsg::Panic);
            return Ok(());
        }
        match target {
            "registry" => self.registry().await?.cast(RegistryMsg::Panic),
            "tickets" => self.desk().await?.cast(DeskMsg::Panic),
            "ledger" => self
                .ctx
                .dir
                .ledger()?
                .cast(crate::ledger::actor::LedgerMsg::Panic),
            "mail" => self
                .ctx
                .dir
                .mail()
                .ok_or_else(|| {
                    FleetError::not_found(
                        target,
                        "no post office is running",
                        "mail with [link] configured",
                    )
                })?
                .cast(MailMsg::Panic),
            t => {
                let (kind, name) = t.split_once(':').unwrap_or(("slot", t));
                let name = member_name(name)?;
                match kind {
                    "slot" => self
                        .slot(&name)
                        .await
                        .ok_or_else(|| FleetError::not_found(t, "no such slot", "slot:NAME"))?
                        .cast(SlotMsg::Panic),
                    "term" => self
                        .slot(&name)
                        .await
                        .ok_or_else(|| FleetError::not_found(t, "no such slot", "term:NAME"))?
                        .cast(SlotMsg::BreakLink),
                    "injector" => self
                        .injector(&name)
                        .await
                        .ok_or_else(|| {
                            FleetError::not_found(t, "no such injector", "injector:NAME")
                        })?
                        .cast(InjectorMsg::Panic),
                    _ => {
                        return Err(FleetError::invalid(
                            t,
                            "unknown fault target",
                            "registry, tickets, mail, slot:NAME, term:NAME, injector:NAME, decision:d-N, drift:PEER or link:PEER",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Swap in a new config and tell every actor to re-read what it uses.
    pub async fn reload(&self, config: crate::config::Config) {
        self.config.publish(std::sync::Arc::new(config));
        if let Ok(r) = self.ctx.dir.registry() {
            r.cast(RegistryMsg::Reload);
        }
        if let Ok(t) = self.ctx.dir.tickets() {
            t.cast(DeskMsg::Reload);
        }
        for n in self.live_members().await.unwrap_or_default() {
            if let Some(s) = self.ctx.dir.slot(&n) {
                s.cast(SlotMsg::Reload);
            }
            if let Some(i) = self.ctx.dir.injector(&n) {
                i.cast(InjectorMsg::Reload);
            }
        }
    }

    /// Stop every child in reverse start order within `deadline`, then the supervisor.
    /// Returns the children that had to be killed.
    /// A shutdown's first step, before anything is stopped or saved: no injector starts a
    /// delivery from now, and a paste already handed to a terminal host gets until `wait` to
    /// be confirmed written. Returns the deliveries still unconfirmed: the stop is then not
    /// clean, and the next start resolves them from the host's record.
    pub async fn quiesce(&self, wait: Duration) -> Vec<String> {
        let names = self.ctx.dir.injector_names();
        let mut quiet = tokio::task::JoinSet::new();
        for i in names.iter().filter_map(|n| self.ctx.dir.injector(n)) {
            quiet.spawn(async move {
                let _ = i
                    .call(
                        |reply| InjectorMsg::Quiesce { reply },
                        Duration::from_secs(1),
                    )
                    .await;
            });
        }
        quiet.join_all().await;
        let mut settle = tokio::task::JoinSet::new();
        for (n, slot) in names
            .into_iter()
            .filter_map(|n| self.ctx.dir.slot(&n).map(|s| (n, s)))
        {
            settle.spawn(async move {
                if slot
                    .call(|reply| SlotMsg::Settled { reply }, wait)
                    .await
                    .is_ok()
                {
                    return None;
                }
                let id = slot
                    .call(|reply| SlotMsg::Unconfirmed { reply }, Duration::from_secs(1))
                    .await
                    .ok()
                    .flatten()?;
                Some(format!(
                    "the paste of {id} to `{n}` was not confirmed written within {} ms; the next start resolves it from its terminal's record",
                    wait.as_millis()
                ))
            });
        }
        settle.join_all().await.into_iter().flatten().collect()
    }

    /// Stops the whole actor tree within `deadline`, leaving the members' terminals running
    /// for the next daemon; returns the children that did not stop in time.
    pub async fn shutdown(&self, deadline: Duration) -> Vec<String> {
        let hung = match self
            .sup
            .call(
                |reply| SupervisorMsg::Shutdown { deadline, reply },
                Some(deadline + Duration::from_secs(2)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(h)) => h,
            _ => vec!["supervisor".into()],
        };
        self.sup.stop(Some("shutdown".into()));
        hung
    }
}
