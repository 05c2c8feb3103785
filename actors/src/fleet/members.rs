//! Members: who a caller is, spawning (planning the name, slot, profile, directory and
//! worktree, then starting the slot and injector), a member in detail, stopping and draining.

use super::*;

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
    /// reported.
    pub(super) async fn resumable(&self, name: &str) -> Result<MemberRecord, FleetError> {
        let what = format!(
            "fleet_spawn {{resume: {}}}",
            crate::types::truncate(name, 40)
        );
        let n = member_name(name)?;
        let rec = self.member(&n).await?.ok_or_else(|| {
            FleetError::not_found(
                what.clone(),
                format!("no member `{n}` is remembered"),
                "the name of an exited member (fleet_list shows them)",
            )
        })?;
        if rec.is_live() {
            return Err(FleetError::conflict(
                what,
                format!("`{n}` is still running"),
                "resume of an exited member (stop it first)",
            ));
        }
        if rec.session_id.is_none() {
            return Err(FleetError::conflict(
                what,
                format!(
                    "`{n}` never reported a session id (profile `{}`: its agent's hooks did not send one)",
                    rec.profile
                ),
                "resume of a member whose agent reported its session (claude, codex, gemini, opencode profiles)",
            ));
        }
        Ok(rec)
    }

    /// Starts a member (or resumes an exited one, `req.resume`) in a terminal of its own, under
    /// `caller` as its parent. Authz: the operator and the primary may spawn; the rest are
    /// refused. Plans the name, role, architect slot, profile, working directory and worktree,
    /// reserves them in the registry (FIFO when the slots are full), starts the slot and its
    /// injector, and returns once the terminal runs; `notes` in the view say what was chosen.
    pub async fn spawn(&self, caller: &Caller, req: SpawnRequest) -> Result<SpawnView, FleetError> {
        authorize(caller, &Action::Spawn, "fleet_spawn")?;
        let parent = caller.party().ok_or_else(|| {
            FleetError::internal("fleet_spawn", "an authorized caller has no party")
        })?;
        let config = self.ctx.config();
        let mut notes = vec![];
        // A resume takes the exited member's name, role, slot, profile, cwd and worktree.
        let prior = match &req.resume {
            Some(n) => Some(self.resumable(n).await?),
            None => None,
        };
        let (name, role, slot, requested_profile, cwd) = match &prior {
            Some(p) => (
                p.name.clone(),
                p.role,
                p.slot.clone(),
                Some(p.profile.clone()),
                p.cwd.clone(),
            ),
            None => {
                for (field, v) in [("role", &req.role), ("name", &req.name)] {
                    if v.is_empty() {
                        return Err(FleetError::invalid(
                            "fleet_spawn",
                            format!("it gives no {field}"),
                            "role, name and a profile or a command (or resume: NAME of an exited member)",
                        ));
                    }
                }
                let name = member_name(&req.name)?;
                let role: Role = req.role.parse()?;
                let slot = match (role, req.slot.clone()) {
                    (Role::Architect, None) if config.architects.contains_key(name.as_str()) => {
                        Some(name.to_string())
                    }
                    (_, s) => s,
                };
                (name, role, slot, req.profile.clone(), req.cwd.clone())
            }
        };
        if let Some(dir) = &cwd {
            check_cwd(&name, dir)?;
        }
        let slot_command = slot
            .as_deref()
            .and_then(|s| config.architects.get(s))
            .and_then(|a| a.command.clone());
        let (profile_name, note) = config.profile_for(
            role,
            slot.as_deref(),
            requested_profile.as_deref(),
            req.command.as_deref().or(slot_command.as_deref()),
        )?;
        notes.extend(note);
        let profile = config.profiles.get(&profile_name).ok_or_else(|| {
            FleetError::invalid(
                format!("fleet_spawn of `{name}`"),
                format!("profile `{profile_name}` is not configured"),
                format!(
                    "one of: {}",
                    config
                        .profiles
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let argv = match (&prior, &req.command) {
            (Some(p), _) => {
                let session = p.session_id.clone().unwrap_or_default();
                if profile.resume.is_empty() {
                    return Err(FleetError::conflict(
                        format!("fleet_spawn {{resume: {name}}}"),
                        format!("profile `{profile_name}` has no resume command"),
                        "resume of a member whose profile sets `resume` (claude, codex, gemini, opencode)",
                    ));
                }
                notes.push(format!("resumed session {session}"));
                profile
                    .resume
                    .iter()
                    .map(|a| a.replace("{session_id}", &session))
                    .collect()
            }
            (None, Some(c)) if !c.is_empty() => c.clone(),
            (None, Some(_)) => {
                return Err(FleetError::invalid(
                    format!("fleet_spawn of `{name}`"),
                    "command is an empty list",
                    "a non-empty argv, or no command to use the profile's",
                ));
            }
            (None, None) => slot_command.unwrap_or_else(|| profile.command.clone()),
        };
        if argv.is_empty() {
            return Err(FleetError::invalid(
                format!("fleet_spawn of `{name}`"),
                format!("profile `{profile_name}` has no command"),
                "a command in the request or in the profile",
            ));
        }
        // Reserve first: the slot (or name) is held before any process exists.
        let rreq = ReserveRequest {
            name: name.clone(),
            role,
            slot: slot.clone(),
            parent: parent.clone(),
        };
        let wait = Duration::from_secs(config.lifecycle.spawn_wait_seconds + 5);
        let reservation = self
            .registry()
            .await?
            .call(|reply| RegistryMsg::Reserve { req: rreq, reply }, wait)
            .await??;
        let prepared = self
            .prepare(&name, role, profile, prior.as_ref(), &req, cwd)
            .await;
        let (argv, env, cwd, worktree, charter_sha256, wired) = match prepared {
            Ok(p) => {
                let (extra, env, cwd, worktree, sha, wired) = p;
                let mut full = self.expand(&argv, &name);
                full.extend(extra);
                (full, env, cwd, worktree, sha, wired)
            }
            Err(e) => {
                self.release(reservation.id);
                return Err(e);
            }
        };
        notes.extend(wired);
        if let Some(w) = &worktree {
            notes.push(format!("worktree {} on branch {}", w.path, w.branch));
        }
        let now = self.ctx.now();
        let generation = now;
        let vars: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        let unset = profile.unset_in(vars.iter().map(String::as_str));
        let spec = LaunchSpec {
            name: name.clone(),
            generation,
            argv: argv.clone(),
            env,
            unset,
            cwd: cwd.clone(),
            rows: config.lifecycle.rows,
            cols: config.lifecycle.cols,
        };
        let handle = match self.ctx.term.launch(spec).await {
            Ok(h) => h,
            Err(e) => {
                self.release(reservation.id);
                return Err(e);
            }
        };
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
            session_id: prior.as_ref().and_then(|p| p.session_id.clone()),
            worktree,
            cwd,
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

    /// `{fleetd}` and `{charter_file}` in a profile's argv.
    pub(super) fn expand(&self, argv: &[String], name: &MemberName) -> Vec<String> {
        let fleetd = self.ctx.fleetd_exe.display().to_string();
        let charter = self.charter_file(name).display().to_string();
        argv.iter()
            .map(|a| {
                a.replace("{fleetd}", &fleetd)
                    .replace("{charter_file}", &charter)
            })
            .collect()
    }

    pub(super) fn charter_file(&self, name: &MemberName) -> std::path::PathBuf {
        self.ctx
            .state_dir
            .join("charters")
            .join(format!("{name}.md"))
    }

    /// Everything a launch needs besides its command, written to disk before it: the charter
    /// (a resumed member keeps its own), the agent's wiring (files and arguments), the
    /// environment, the worktree. Returns (extra args, env, cwd, worktree, charter sha256,
    /// wiring summary).
    #[allow(clippy::type_complexity)]
    pub(super) async fn prepare(
        &self,
        name: &MemberName,
        role: Role,
        profile: &crate::config::Profile,
        prior: Option<&MemberRecord>,
        req: &SpawnRequest,
        cwd: Option<String>,
    ) -> Result<
        (
            Vec<String>,
            Vec<(String, String)>,
            Option<String>,
            Option<crate::registry::state::Worktree>,
            String,
            Vec<String>,
        ),
        FleetError,
    > {
        let config = self.ctx.config();
        let charter_file = self.charter_file(name);
        let state_dir = self.ctx.state_dir.clone();
        let fleetd = self.ctx.fleetd_exe.clone();
        let kept = match prior {
            Some(_) => std::fs::read_to_string(&charter_file).ok(),
            None => None,
        };
        let charter = kept.unwrap_or_else(|| config.charters.compose(role));
        let charter_sha256 = sha256_hex(&charter);
        let want_worktree = req.worktree || prior.is_some_and(|p| p.worktree.is_some());
        let prior_wt = prior.and_then(|p| p.worktree.clone());
        let agent = profile.agent;
        let n = name.to_string();
        let work = tokio::task::spawn_blocking(move || {
            let fail = |what: &str, e: std::io::Error| {
                FleetError::internal(format!("the spawn of `{n}`"), format!("{what}: {e}"))
            };
            write_private(&charter_file, charter.as_bytes())
                .map_err(|e| fail("charter file", e))?;
            let worktree = if want_worktree {
                let from = cwd
                    .as_deref()
                    .map(std::path::PathBuf::from)
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_else(|| state_dir.clone());
                Some(crate::worktree::create(
                    &state_dir,
                    &n,
                    &from,
                    prior_wt.as_ref(),
                )?)
            } else {
                None
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
                        &charter,
                        &user,
                    );
                    for (path, text) in &w.files {
                        write_private(path, text.as_bytes())
                            .map_err(|e| fail(&path.display().to_string(), e))?;
                    }
                    for (target, link) in &w.links {
                        let _ = std::fs::remove_file(link);
                        std::os::unix::fs::symlink(target, link)
                            .map_err(|e| fail(&link.display().to_string(), e))?;
                    }
                    w
                }
                None => crate::agents::Wiring::default(),
            };
            Ok::<_, FleetError>((wiring, worktree, cwd))
        });
        let (wiring, worktree, cwd) = work.await.map_err(|e| {
            FleetError::internal("fleet_spawn", format!("the preparation failed: {e}"))
        })??;
        let fleetd = self.ctx.fleetd_exe.display().to_string();
        let mut env: Vec<(String, String)> = vec![
            (
                "FLEETD_STATE_DIR".into(),
                self.ctx.state_dir.display().to_string(),
            ),
            ("FLEETD_MEMBER".into(), name.to_string()),
            ("FLEETD_ROLE".into(), role.to_string()),
            (
                "FLEETD_CHARTER_FILE".into(),
                self.charter_file(name).display().to_string(),
            ),
            ("TERM".into(), "xterm-256color".into()),
        ];
        env.extend(wiring.env.clone());
        env.extend(
            profile
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace("{fleetd}", &fleetd))),
        );
        Ok((
            wiring.args,
            env,
            cwd,
            worktree,
            charter_sha256,
            wiring.summary,
        ))
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
        let queue = match self.ctx.dir.injector(&name) {
            Some(i) => i
                .call(|reply| InjectorMsg::Queue { reply }, CALL)
                .await
                .ok(),
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
        let mut member = MemberView::from(&rec);
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
        if let Some(i) = self.ctx.dir.injector(&name) {
            let _ = i.call(|reply| InjectorMsg::Queue { reply }, CALL).await;
            if let Ok(desk) = self.desk().await {
                let _ = desk
                    .call(|reply| DeskMsg::Settled { reply }, Duration::from_secs(60))
                    .await;
            }
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
