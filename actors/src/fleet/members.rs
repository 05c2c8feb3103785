//! Members: who a caller is, spawning (performing the plan `spawn` makes: reserve, charter,
//! worktree, wiring, launch, bind, then starting the slot and injector), a member in detail,
//! stopping and draining.

use super::*;
use crate::spawn;

/// What `prepare` wrote for a launch: the agent's wiring (its extra arguments, environment and
/// summary), the worktree made, the member's directory, the charter's sha256, and how it is
/// confined (the sandbox's decision and what it would see).
struct Prepared {
    wiring: crate::agents::Wiring,
    worktree: Option<crate::registry::state::Worktree>,
    cwd: Option<String>,
    charter_sha256: String,
    sandbox: (crate::sandbox::Decision, crate::sandbox::Layout),
}

impl Fleet {
    /// Who `caller` is to this fleet: its name, role, slot, parent and charter digest, or, for
    /// the operator and for callers outside every member, why it is not a member. Open to every
    /// caller (the one call an unresolved caller may make).
    pub async fn whoami(&self, caller: &Caller) -> WhoAmI {
        let host = self.ctx.config().daemon.host.clone();
        match caller {
            Caller::Member(m) => {
                let rec = self.member(&m.name).await.ok().flatten();
                WhoAmI {
                    member: true,
                    name: Some(m.name.clone()),
                    role: Some(m.role),
                    slot: m.slot.clone(),
                    parent: rec.as_ref().map(|r| r.parent.clone()),
                    charter_sha256: rec.map(|r| r.charter_sha256),
                    host,
                    note: format!(
                        "you are {}, resolved from your connection's process tree",
                        caller.describe()
                    ),
                }
            }
            Caller::Operator => WhoAmI::outside(
                host,
                "you are the operator (a process outside every member, on the REST socket)".into(),
            ),
            Caller::NotMember { .. } => WhoAmI::outside(
                host,
                format!(
                    "not a member: {} does not run inside any member's terminal, so every mutating tool refuses it",
                    caller.describe()
                ),
            ),
            Caller::Unresolved { .. } => WhoAmI::outside(
                host,
                format!(
                    "unresolved: {} so every tool but fleet_whoami refuses it",
                    caller.describe()
                ),
            ),
        }
    }

    /// An exited member that can be resumed: its record, with the session id its hooks
    /// reported (the rule is `spawn::resumable`; this looks the record up).
    pub(super) async fn resumable(&self, name: &str) -> Result<MemberRecord, FleetError> {
        let n = member_name(name)?;
        let rec = self.member(&n).await?;
        spawn::resumable(name, &n, rec)
    }

    /// Starts a member (or resumes an exited one, `req.resume`) in a terminal of its own, under
    /// `caller` as its parent. Authz: the operator and the primary may spawn; the rest are
    /// refused. The plan (`spawn`: the name, role, architect slot, profile, command,
    /// environment, charter and worktree) is made first; then this performs it in order:
    /// reserve in the registry (FIFO when the slots are full), write the charter, make the
    /// worktree, write the agent's wiring, launch the terminal, bind, start the slot and its
    /// injector. Returns once the terminal runs; `notes` in the view say what was chosen.
    pub async fn spawn(&self, caller: &Caller, req: SpawnRequest) -> Result<SpawnView, FleetError> {
        authorize(caller, &Action::Spawn, "fleet_spawn")?;
        let parent = caller.party().ok_or_else(|| {
            FleetError::internal("fleet_spawn", "an authorized caller has no party")
        })?;
        let config = self.ctx.config();
        // A resume takes the exited member's name, role, slot, profile, cwd and worktree.
        let prior = match &req.resume {
            Some(n) => Some(self.resumable(n).await?),
            None => None,
        };
        let member = spawn::member(&req, &config, prior.as_ref())?;
        if let Some(dir) = &member.cwd {
            check_cwd(&member.name, dir)?;
        }
        let host = spawn::Host {
            state_dir: &self.ctx.state_dir,
            fleetd: &self.ctx.fleetd_exe,
        };
        let plan = spawn::plan(member, &req, &config, prior.as_ref(), parent, host)?;
        let name = plan.name().clone();
        let role = plan.role();
        // Reserve first: the slot (or name) is held before any process exists.
        let rreq = plan.reserve.clone();
        let reservation = self
            .registry()
            .await?
            .call(
                |reply| RegistryMsg::Reserve { req: rreq, reply },
                plan.reserve_wait,
            )
            .await??;
        let Prepared {
            wiring,
            worktree,
            cwd,
            charter_sha256,
            sandbox: (confinement, layout),
        } = match self.prepare(&plan).await {
            Ok(p) => p,
            Err(e) => {
                self.release(reservation.id);
                return Err(e);
            }
        };
        let env = plan.env(&wiring.env);
        let mut notes = plan.notes(wiring.summary, worktree.as_ref());
        let argv = plan.argv(wiring.args);
        let first = matches!(confinement, crate::sandbox::Decision::Unconfined { .. })
            && self.ctx.sandbox.first_unconfined();
        notes.push(crate::sandbox::note(&confinement, first));
        // The record keeps the agent's own command (a resume plans from it); the terminal runs
        // it confined.
        let launch_argv = match &confinement {
            crate::sandbox::Decision::Confined { program } => {
                let path = env
                    .iter()
                    .find(|(k, _)| k == "PATH")
                    .map(|(_, v)| v.clone())
                    .or_else(|| std::env::var("PATH").ok())
                    .unwrap_or_default();
                let first = argv.first().map(String::as_str).unwrap_or("");
                if let Err(why) = crate::sandbox::find_program(first, &path, layout.cwd.as_deref())
                {
                    self.release(reservation.id);
                    return Err(FleetError::invalid(
                        format!("terminal for `{name}`"),
                        format!("the command {argv:?} did not start: {why}"),
                        "a command that exists and can run (check PATH and the profile's command)",
                    ));
                }
                crate::sandbox::command(program, &layout, &argv)
            }
            crate::sandbox::Decision::Unconfined { .. } => argv.clone(),
        };
        let now = self.ctx.now();
        let generation = now;
        let vars: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        let unset = plan.unset(vars.iter().map(String::as_str));
        let spec = LaunchSpec {
            name: name.clone(),
            generation,
            argv: launch_argv,
            env,
            unset,
            cwd: cwd.clone(),
            rows: plan.rows,
            cols: plan.cols,
        };
        let handle = match self.ctx.term.launch(spec).await {
            Ok(h) => h,
            Err(e) => {
                self.release(reservation.id);
                return Err(e);
            }
        };
        let slot = plan.reserve.slot.clone();
        let parent = plan.reserve.parent.clone();
        let profile_name = plan.profile_name.clone();
        let record = MemberRecord {
            name: name.clone(),
            role,
            slot: slot.clone(),
            profile: profile_name.clone(),
            parent: parent.clone(),
            command: argv,
            spawned_at: now,
            pid: Some(handle.pid),
            host_pid: handle.host_pid,
            status: Status::Starting,
            status_since: now,
            exit: None,
            charter_sha256,
            generation,
            session_id: plan.session_id.clone(),
            worktree,
            cwd,
            sandbox: match confinement {
                crate::sandbox::Decision::Confined { .. } => Some("bwrap".into()),
                crate::sandbox::Decision::Unconfined { .. } => None,
            },
            blocked: None,
            charter_due: false,
        };
        let pid = handle.pid;
        let rec2 = record.clone();
        let bound = self
            .registry()
            .await?
            .call(
                |reply| RegistryMsg::Bind {
                    reservation: reservation.id,
                    record: Box::new(rec2),
                    reply,
                },
                CALL,
            )
            .await
            .and_then(|r| r);
        if let Err(e) = bound {
            let _ = handle
                .input
                .try_send(crate::term::TermInput::Terminate { grace_ms: 0 });
            self.release(reservation.id);
            return Err(e);
        }
        self.start_member(&name, Some(handle)).await?;
        tracing::info!(member = %name, %role, pid, parent = %parent, profile = %profile_name, "spawned");
        self.ctx.events.emit(EventKind::Spawned {
            member: name.clone(),
            role,
            slot,
            parent,
            pid: Some(pid),
            profile: profile_name,
        });
        Ok(SpawnView {
            member: MemberView::from(&record),
            notes,
        })
    }

    pub(super) fn release(&self, reservation: u64) {
        if let Ok(r) = self.ctx.dir.registry() {
            r.cast(RegistryMsg::Release { reservation });
        }
    }

    /// The plan's writes before the launch, in order: the charter (a resumed member keeps its
    /// own), the worktree, the agent's wiring (files and links, built by `agents::wire` over
    /// the user's own config for that CLI).
    async fn prepare(&self, plan: &spawn::SpawnPlan) -> Result<Prepared, FleetError> {
        let charter_file = plan.charter_file.clone();
        let kept = match plan.charter.keep_existing {
            true => std::fs::read_to_string(&charter_file).ok(),
            false => None,
        };
        let charter = plan.charter.text(kept);
        let charter_sha256 = sha256_hex(&charter);
        let state_dir = self.ctx.state_dir.clone();
        let fleetd = self.ctx.fleetd_exe.clone();
        let worktree_ask = plan.worktree.clone();
        let cwd = plan.cwd.clone();
        let agent = plan.agent;
        let n = plan.name().to_string();
        let config = self.ctx.config();
        let sandbox = self.ctx.sandbox.clone();
        let work = tokio::task::spawn_blocking(move || {
            let fail = |what: &str, e: std::io::Error| {
                FleetError::internal(format!("the spawn of `{n}`"), format!("{what}: {e}"))
            };
            // Whether the sandbox can be built, before anything is written: a spawn that must
            // be confined and cannot be leaves nothing behind.
            let probe = sandbox.probe(&config.sandbox);
            if config.sandbox.mode == crate::sandbox::Mode::Bwrap {
                crate::sandbox::decide(config.sandbox.mode, &probe, &state_dir, None, &[])?;
            }
            write_private(&charter_file, charter.as_bytes())
                .map_err(|e| fail("charter file", e))?;
            let worktree = match worktree_ask {
                Some(ask) => {
                    let from = cwd
                        .as_deref()
                        .map(std::path::PathBuf::from)
                        .or_else(|| std::env::current_dir().ok())
                        .unwrap_or_else(|| state_dir.clone());
                    Some(crate::worktree::create(
                        &state_dir,
                        &n,
                        &from,
                        ask.prior.as_ref(),
                    )?)
                }
                None => None,
            };
            let cwd = worktree.as_ref().map(|w| w.path.clone()).or(cwd);
            let wiring = match agent {
                Some(kind) => {
                    let dir = state_dir.join("agents").join(&n);
                    let user = read_user_config(kind);
                    let w = crate::agents::wire(
                        kind,
                        &crate::agents::Member {
                            name: &n,
                            fleetd: &fleetd,
                            state_dir: &state_dir,
                            charter: &charter_file,
                            dir: &dir,
                            cwd: cwd.as_deref().map(std::path::Path::new),
                        },
                        &user,
                    );
                    // The wiring dir is the member's own (a confined member writes in it): no
                    // symlink it planted there may lead these writes anywhere else.
                    let inside = crate::files::Confined::new(&dir)
                        .map_err(|e| fail(&dir.display().to_string(), e))?;
                    for (path, text) in &w.files {
                        inside
                            .check(path)
                            .and_then(|()| write_private(path, text.as_bytes()))
                            .map_err(|e| fail(&path.display().to_string(), e))?;
                    }
                    for (target, link) in &w.links {
                        inside
                            .check(link)
                            .map_err(|e| fail(&link.display().to_string(), e))?;
                        let _ = std::fs::remove_file(link);
                        std::os::unix::fs::symlink(target, link)
                            .map_err(|e| fail(&link.display().to_string(), e))?;
                    }
                    w
                }
                None => crate::agents::Wiring::default(),
            };
            let own_rw: Vec<std::path::PathBuf> = agent
                .map(|_| state_dir.join("agents").join(&n))
                .into_iter()
                .chain(worktree.as_ref().map(|w| std::path::PathBuf::from(&w.path)))
                .collect();
            let layout = crate::sandbox::layout(
                &config,
                &state_dir,
                &own_rw,
                std::slice::from_ref(&charter_file),
                cwd.as_deref().map(std::path::Path::new),
            );
            let decision = crate::sandbox::decide(
                config.sandbox.mode,
                &probe,
                &layout.state_dir,
                layout.cwd.as_deref(),
                &layout.own_rw,
            )?;
            Ok::<_, FleetError>(Prepared {
                wiring,
                worktree,
                cwd,
                charter_sha256,
                sandbox: (decision, layout),
            })
        });
        work.await.map_err(|e| {
            FleetError::internal("fleet_spawn", format!("the preparation failed: {e}"))
        })?
    }

    /// One member in detail: its record, status and why, queue and receipts.
    pub async fn member_status(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<MemberDetail, FleetError> {
        authorize(caller, &Action::Read, "fleet_status")?;
        let name = member_name(name)?;
        let rec = self.member(&name).await?.ok_or_else(|| {
            FleetError::not_found(
                format!("status of `{name}`"),
                "no such member",
                "a name from fleet_list",
            )
        })?;
        let slot_view = match self.ctx.dir.slot(&name) {
            Some(s) => s.call(|reply| SlotMsg::View { reply }, CALL).await.ok(),
            None => None,
        };
        // A screen's text is shown to its member and the operator only.
        let shown = authorize(caller, &Action::Screen { member: &name }, "screen").is_ok();
        let slot_view = slot_view.map(|mut v| {
            if !shown {
                v.screen = String::new();
            }
            v
        });
        // The queue's bodies by READ (each message's parties and the operator), what the
        // screen showed by the Screen rule: everyone else sees the queue's shape.
        let queue = match self.ctx.dir.injector(&name) {
            Some(i) => i
                .call(|reply| InjectorMsg::Queue { reply }, CALL)
                .await
                .ok()
                .map(|q| q.seen_by(caller)),
            None => None,
        };
        let n2 = name.clone();
        let owes = self
            .desk()
            .await?
            .call(|reply| DeskMsg::All { reply }, CALL)
            .await?
            .into_iter()
            .filter(|t| t.to == n2 && t.state == TicketState::Open)
            .map(|t| t.id)
            .collect();
        let mut member = MemberView::from(&rec).seen_by(caller);
        if let Some(v) = &slot_view {
            member.status = v.status;
            member.status_since = v.status_since;
        }
        Ok(MemberDetail {
            member,
            slot_view,
            queue,
            owes,
        })
    }

    /// Stops member `name`: at once (its queued messages are settled as undeliverable), or
    /// with `drain` after its queue has been delivered. Its terminal is hung up and, past the
    /// grace period, killed; its record stays (`spawn` with `resume` continues its agent's
    /// session, if the agent reported one).
    pub async fn stop(
        &self,
        caller: &Caller,
        name: &str,
        drain: bool,
    ) -> Result<MemberView, FleetError> {
        authorize(
            caller,
            &if drain { Action::Drain } else { Action::Stop },
            "fleet_stop",
        )?;
        let name = member_name(name)?;
        let what = format!("fleet_stop of `{name}`");
        self.live_member(&name, &what).await?;
        if drain {
            self.drain(&name).await?;
        }
        let slot = self
            .slot(&name)
            .await
            .ok_or_else(|| FleetError::unavailable(what.clone(), "its slot is restarting"))?;
        let who = caller.describe();
        let grace = self.ctx.config().lifecycle.stop_grace_ms;
        let reason = format!(
            "stopped by {who}{}",
            if drain { " after draining" } else { "" }
        );
        slot.call(
            |reply| SlotMsg::Stop { reason, reply },
            Duration::from_millis(grace + 5_000),
        )
        .await?;
        // The slot told the injector of the exit before it answered. A call queued behind that
        // returns once the injector has failed every queued message and handed their tickets
        // to the desk (or has stopped); the desk's `Settled` then waits until it has settled
        // them (a chunk at a time, serving others in between), so when a stop returns, a
        // listing shows them settled.
        // An injector that has already stopped handed its tickets on before it stopped, so
        // the desk is asked in either case (asking only when the injector was still there let
        // a stop under load return with tickets still open).
        if let Some(i) = self.ctx.dir.injector(&name) {
            let _ = i.call(|reply| InjectorMsg::Queue { reply }, CALL).await;
        }
        if let Ok(desk) = self.desk().await {
            let _ = desk
                .call(|reply| DeskMsg::Settled { reply }, Duration::from_secs(60))
                .await;
        }
        let rec = self
            .member(&name)
            .await?
            .ok_or_else(|| FleetError::internal(what, "member vanished"))?;
        Ok(MemberView::from(&rec))
    }

    /// Wait until `name` has nothing queued or in flight and is idle (bounded by the ticket TTL).
    pub(super) async fn drain(&self, name: &MemberName) -> Result<(), FleetError> {
        let (_, mut rx) = self.ctx.events.subscribe(u64::MAX);
        let deadline = tokio::time::Instant::now()
            + Duration::from_secs(self.ctx.config().tickets.ttl_seconds);
        loop {
            let depth = self.queue_depth(name).await;
            let v = match self.ctx.dir.slot(name) {
                Some(s) => s.call(|reply| SlotMsg::View { reply }, CALL).await.ok(),
                None => None,
            };
            let empty = depth.is_none_or(|d| d == 0);
            let idle = v.is_none_or(|v| matches!(v.status, Status::Idle | Status::Exited));
            if empty && idle {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) => return Ok(()),
                Err(_) => {
                    return Err(FleetError::timeout(
                        format!("drain of `{name}`"),
                        "its queue did not empty within the ticket TTL",
                        "fleet_stop without drain",
                    ));
                }
            }
        }
    }

    /// Live members (for shutdown with `on_shutdown = "stop"`).
    pub async fn live_members(&self) -> Result<Vec<MemberName>, FleetError> {
        Ok(self
            .registry_members()
            .await?
            .into_iter()
            .filter(|m| m.is_live())
            .map(|m| m.name)
            .collect())
    }
}
