//! Spawn planning: what a `fleet_spawn` decides before anything is reserved, written or
//! launched. Who is spawned (name, role, architect slot, directory; a resume takes the exited
//! member's), which profile (the one named; the slot's; `generic` for a bare command, with a
//! note saying so), the command (the request's, the slot's or the profile's; a resume's from
//! the profile's `resume`, the resumed session id checked again for that CLI by `session.rs`,
//! the wiring put before a `--` that precedes the id), `{fleetd}` / `{charter_file}` /
//! `{session_id}` expanded, the environment and what is unset from the daemon's, the charter
//! to write (a resumed member keeps its own), the worktree asked for, the terminal size, and
//! what the answer's notes say.
//!
//! Owns these decisions and their refusals; the shell (`fleet/members.rs`) performs the plan's
//! steps in order: reserve, write the charter, make the worktree, write the wiring, launch,
//! bind. Must never do I/O: whether a directory exists, the charter a resumed member kept, the
//! daemon's environment and the agent's wiring reach it as values.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{AgentKind, Config, Profile};
use crate::error::FleetError;
use crate::registry::state::{MemberRecord, ReserveRequest, Worktree};
use crate::types::{MemberName, Party, Role, truncate};

/// What `fleet_spawn` asks for.
#[derive(Clone, Debug, Default)]
pub struct SpawnRequest {
    pub role: String,
    pub name: String,
    pub slot: Option<String>,
    pub profile: Option<String>,
    pub command: Option<Vec<String>>,
    pub cwd: Option<String>,
    /// Restart this exited member with its conversation (same name, role, slot, charter).
    pub resume: Option<String>,
    /// Give the member its own git worktree and branch under the state dir.
    pub worktree: bool,
}

/// Where this daemon keeps its state and what its own binary is (for the `{fleetd}` and
/// `{charter_file}` placeholders and the member's environment).
#[derive(Clone, Copy, Debug)]
pub struct Host<'a> {
    pub state_dir: &'a Path,
    pub fleetd: &'a Path,
}

impl Host<'_> {
    /// The file a member's charter is written to.
    pub fn charter_file(&self, name: &MemberName) -> PathBuf {
        self.state_dir.join("charters").join(format!("{name}.md"))
    }
}

/// Whether `rec`, the record remembered under `name` (asked for as `asked`), is an exited
/// member that can be resumed: it exists, is not running, and its hooks reported a session id.
pub fn resumable(
    asked: &str,
    name: &MemberName,
    rec: Option<MemberRecord>,
) -> Result<MemberRecord, FleetError> {
    let what = format!("fleet_spawn {{resume: {}}}", truncate(asked, 40));
    let rec = rec.ok_or_else(|| {
        FleetError::not_found(
            what.clone(),
            format!("no member `{name}` is remembered"),
            "the name of an exited member (fleet_list shows them)",
        )
    })?;
    if rec.is_live() {
        return Err(FleetError::conflict(
            what,
            format!("`{name}` is still running"),
            "resume of an exited member (stop it first)",
        ));
    }
    if rec.session_id.is_none() {
        return Err(FleetError::conflict(
            what,
            format!(
                "`{name}` never reported a session id (profile `{}`: its agent's hooks sent none, or none in its CLI's format, which the daemon's log says)",
                rec.profile
            ),
            "resume of a member whose agent reported its session (claude, codex, gemini, opencode profiles)",
        ));
    }
    Ok(rec)
}

/// Who is spawned: the first half of the plan. The shell checks `cwd` on disk before
/// `plan` goes on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: MemberName,
    pub role: Role,
    pub slot: Option<String>,
    /// The profile the request (or the resumed member's record) names.
    pub profile: Option<String>,
    pub cwd: Option<String>,
}

/// The name, role, slot, profile asked for and directory of a spawn: a resumed member's
/// (`prior`, from `resumable`), or the request's, checked. An architect named after a slot
/// takes that slot unless the request gives another.
pub fn member(
    req: &SpawnRequest,
    config: &Config,
    prior: Option<&MemberRecord>,
) -> Result<Member, FleetError> {
    if let Some(p) = prior {
        return Ok(Member {
            name: p.name.clone(),
            role: p.role,
            slot: p.slot.clone(),
            profile: Some(p.profile.clone()),
            cwd: p.cwd.clone(),
        });
    }
    for (field, v) in [("role", &req.role), ("name", &req.name)] {
        if v.is_empty() {
            return Err(FleetError::invalid(
                "fleet_spawn",
                format!("it gives no {field}"),
                "role, name and a profile or a command (or resume: NAME of an exited member)",
            ));
        }
    }
    let name = MemberName::new(&req.name)?;
    let role: Role = req.role.parse()?;
    let slot = match (role, req.slot.clone()) {
        (Role::Architect, None) if config.architects.contains_key(name.as_str()) => {
            Some(name.to_string())
        }
        (_, s) => s,
    };
    Ok(Member {
        name,
        role,
        slot,
        profile: req.profile.clone(),
        cwd: req.cwd.clone(),
    })
}

/// What the charter file gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Charter {
    /// Composed from the live config for the member's role.
    pub composed: String,
    /// A resumed member keeps the charter it has (if its file is still readable); `composed`
    /// otherwise.
    pub keep_existing: bool,
}

impl Charter {
    /// The text to write, given what the charter file holds now (read only when
    /// `keep_existing`).
    pub fn text(&self, existing: Option<String>) -> String {
        match existing {
            Some(t) if self.keep_existing => t,
            _ => self.composed.clone(),
        }
    }
}

/// A member's own git worktree, asked for by the request or kept by a resumed member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorktreeAsk {
    /// The worktree the resumed member had (made again at the same place and branch).
    pub prior: Option<Worktree>,
}

/// Everything a spawn decided, for the shell to perform in order.
#[derive(Clone, Debug)]
pub struct SpawnPlan {
    /// The registry's reservation: name, role, slot, parent.
    pub reserve: ReserveRequest,
    /// How long the reservation may wait for a slot (FIFO admission), and then some.
    pub reserve_wait: Duration,
    pub profile_name: String,
    pub profile: Profile,
    /// The command, expanded; the agent's wiring arguments go after it (`argv`), or, for a
    /// resume whose template puts the id after `--`, before that `--`.
    pub command: Vec<String>,
    /// Where the wiring's arguments go in `command` (None: at its end).
    wiring_at: Option<usize>,
    pub charter: Charter,
    pub charter_file: PathBuf,
    pub worktree: Option<WorktreeAsk>,
    /// The directory asked for (a worktree replaces it).
    pub cwd: Option<String>,
    /// The agent CLI whose wiring is written before launch (`agents::wire`), if any.
    pub agent: Option<AgentKind>,
    pub rows: u16,
    pub cols: u16,
    /// The session a resumed member continues.
    pub session_id: Option<String>,
    /// fleetd's own variables, before the wiring's and the profile's.
    env: Vec<(String, String)>,
    /// The profile's variables, `{fleetd}` expanded; they come last.
    profile_env: Vec<(String, String)>,
    /// The answer's notes so far: the profile chosen, the session resumed.
    notes: Vec<String>,
}

/// The rest of the plan, once `member` is known (and its directory checked): the profile, the
/// command, the charter, the worktree, the environment, the answer's notes. `prior` is the
/// resumed member's record; `parent` the caller as a party.
pub fn plan(
    member: Member,
    req: &SpawnRequest,
    config: &Config,
    prior: Option<&MemberRecord>,
    parent: Party,
    host: Host<'_>,
) -> Result<SpawnPlan, FleetError> {
    let Member {
        name,
        role,
        slot,
        profile: requested_profile,
        cwd,
    } = member;
    let mut notes = vec![];
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
    let mut wiring_at = None;
    let argv: Vec<String> = match (prior, &req.command) {
        (Some(p), _) => {
            let session = p.session_id.clone().unwrap_or_default();
            if profile.resume.is_empty() {
                return Err(FleetError::conflict(
                    format!("fleet_spawn {{resume: {name}}}"),
                    format!("profile `{profile_name}` has no resume command"),
                    "resume of a member whose profile sets `resume` (claude, codex, gemini, opencode)",
                ));
            }
            // Checked again here: an id kept by an older fleetd, or under another profile, is
            // never put on a command line unless it is one of this CLI's.
            crate::session::check(&profile_name, profile.agent, &session).map_err(|e| {
                FleetError::invalid(
                    format!("fleet_spawn {{resume: {name}}}"),
                    format!(
                        "the session id `{name}` reported is refused: {}: {}",
                        e.refused, e.why
                    ),
                    format!(
                        "{} (a new spawn of `{name}` starts a new session)",
                        e.accepted
                    ),
                )
            })?;
            notes.push(format!("resumed session {session}"));
            wiring_at = resume_wiring_at(&profile.resume);
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
    let fleetd = host.fleetd.display().to_string();
    let charter_file = host.charter_file(&name);
    let charter_path = charter_file.display().to_string();
    let command = argv
        .iter()
        .map(|a| {
            a.replace("{fleetd}", &fleetd)
                .replace("{charter_file}", &charter_path)
        })
        .collect();
    let env = vec![
        (
            "FLEETD_STATE_DIR".into(),
            host.state_dir.display().to_string(),
        ),
        ("FLEETD_MEMBER".into(), name.to_string()),
        ("FLEETD_ROLE".into(), role.to_string()),
        ("FLEETD_CHARTER_FILE".into(), charter_path),
        ("TERM".into(), "xterm-256color".into()),
    ];
    let profile_env = profile
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.replace("{fleetd}", &fleetd)))
        .collect();
    let worktree =
        (req.worktree || prior.is_some_and(|p| p.worktree.is_some())).then(|| WorktreeAsk {
            prior: prior.and_then(|p| p.worktree.clone()),
        });
    Ok(SpawnPlan {
        reserve: ReserveRequest {
            name,
            role,
            slot,
            parent,
        },
        reserve_wait: Duration::from_secs(config.lifecycle.spawn_wait_seconds + 5),
        profile_name,
        agent: profile.agent,
        profile: profile.clone(),
        command,
        wiring_at,
        charter: Charter {
            composed: config.charters.compose(role),
            keep_existing: prior.is_some(),
        },
        charter_file,
        worktree,
        cwd,
        rows: config.lifecycle.rows,
        cols: config.lifecycle.cols,
        session_id: prior.and_then(|p| p.session_id.clone()),
        env,
        profile_env,
        notes,
    })
}

/// Where a resume template takes the wiring's arguments: before the `--` that precedes the
/// session id (`["codex", "resume", "--", "{session_id}"]`), so they stay options; None when the
/// id is not passed after `--` (they go at the end).
fn resume_wiring_at(template: &[String]) -> Option<usize> {
    template
        .windows(2)
        .position(|w| w[0] == "--" && w[1] == "{session_id}")
}

impl SpawnPlan {
    pub fn name(&self) -> &MemberName {
        &self.reserve.name
    }

    pub fn role(&self) -> Role {
        self.reserve.role
    }

    /// The full command: the expanded command, then the agent wiring's arguments (for a resume
    /// that passes the id after `--`, the wiring's options go before the `--`, where the CLI
    /// still reads them as options: `codex resume -c ... -- ID`).
    pub fn argv(&self, wiring_args: Vec<String>) -> Vec<String> {
        let mut argv = self.command.clone();
        let at = self.wiring_at.unwrap_or(argv.len()).min(argv.len());
        argv.splice(at..at, wiring_args);
        argv
    }

    /// The member's environment: fleetd's variables, then the wiring's, then the profile's
    /// (a later one wins).
    pub fn env(&self, wiring_env: &[(String, String)]) -> Vec<(String, String)> {
        let mut env = self.env.clone();
        env.extend(wiring_env.iter().cloned());
        env.extend(self.profile_env.iter().cloned());
        env
    }

    /// The names among the daemon's environment variables (`vars`) the member must not inherit.
    pub fn unset<'a>(&self, vars: impl Iterator<Item = &'a str>) -> Vec<String> {
        self.profile.unset_in(vars)
    }

    /// What the answer's notes say: the profile chosen and the session resumed, what the
    /// wiring did, the worktree made.
    pub fn notes(&self, wired: Vec<String>, worktree: Option<&Worktree>) -> Vec<String> {
        let mut notes = self.notes.clone();
        notes.extend(wired);
        if let Some(w) = worktree {
            notes.push(format!("worktree {} on branch {}", w.path, w.branch));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ArchitectSlot;
    use crate::registry::state::ExitInfo;
    use crate::types::Status;

    fn host() -> Host<'static> {
        Host {
            state_dir: Path::new("/state"),
            fleetd: Path::new("/bin/fleetd"),
        }
    }

    fn req(role: &str, name: &str) -> SpawnRequest {
        SpawnRequest {
            role: role.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    fn op() -> Party {
        Party::Operator
    }

    /// Both halves of the plan, with no directory check between them.
    fn planned(
        r: &SpawnRequest,
        config: &Config,
        prior: Option<&MemberRecord>,
    ) -> Result<SpawnPlan, FleetError> {
        let m = member(r, config, prior)?;
        plan(m, r, config, prior, op(), host())
    }

    fn exited(name: &str, profile: &str, session: Option<&str>) -> MemberRecord {
        MemberRecord {
            name: MemberName::new(name).unwrap(),
            role: Role::Worker,
            slot: None,
            profile: profile.into(),
            parent: op(),
            command: vec!["old".into()],
            spawned_at: 1,
            pid: None,
            host_pid: None,
            status: Status::Exited,
            status_since: 2,
            exit: Some(ExitInfo {
                at: 2,
                code: Some(0),
                reason: "stopped".into(),
            }),
            charter_sha256: "ab".into(),
            generation: 1,
            session_id: session.map(str::to_string),
            worktree: None,
            cwd: Some("/work/x".into()),
            sandbox: None,
            blocked: None,
            charter_due: false,
        }
    }

    fn cmd(argv: &[&str]) -> Option<Vec<String>> {
        Some(argv.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn the_profile_is_the_named_one_else_the_slots_else_generic_for_a_bare_command() {
        let config = Config::default();
        // (role, name, profile asked, command, profile chosen, a note about `generic`)
        type Row = (
            &'static str,
            &'static str,
            Option<&'static str>,
            Option<Vec<String>>,
            &'static str,
            bool,
        );
        let table: &[Row] = &[
            ("worker", "w1", Some("shell"), None, "shell", false),
            (
                "worker",
                "w1",
                Some("shell"),
                cmd(&["bash"]),
                "shell",
                false,
            ),
            // An architect named after a slot takes it, and its profile.
            ("architect", "opus", None, None, "sim", false),
            ("architect", "opus", Some("shell"), None, "shell", false),
            ("worker", "w1", None, cmd(&["bash", "-i"]), "generic", true),
            // A bare command of a CLI that has a profile: still generic, with a hint.
            (
                "worker",
                "w1",
                None,
                cmd(&["/usr/bin/claude"]),
                "generic",
                true,
            ),
        ];
        for (role, name, profile, command, want, generic_note) in table {
            let mut r = req(role, name);
            r.profile = profile.map(str::to_string);
            r.command = command.clone();
            let p = planned(&r, &config, None).unwrap();
            assert_eq!(&p.profile_name, want, "{r:?}");
            let notes = p.notes(vec![], None);
            assert_eq!(
                notes.iter().any(|n| n.contains("the `generic` profile")),
                *generic_note,
                "{r:?}: {notes:?}"
            );
        }
        let mut r = req("worker", "w1");
        r.command = cmd(&["/usr/bin/claude"]);
        let notes = planned(&r, &config, None).unwrap().notes(vec![], None);
        assert!(notes[0].contains("--profile claude"), "{notes:?}");
    }

    #[test]
    fn refusals_say_what_was_refused_and_what_would_be_accepted() {
        let config = Config::default();
        let refused = |r: SpawnRequest| planned(&r, &config, None).unwrap_err();
        let e = refused(req("", "w1"));
        assert_eq!(
            (e.refused.as_str(), e.why.as_str()),
            ("fleet_spawn", "it gives no role")
        );
        let e = refused(req("worker", ""));
        assert_eq!(e.why, "it gives no name");
        assert!(
            refused(req("worker", "bad name!"))
                .refused
                .contains("member name")
        );
        let e = refused(req("boss", "w1"));
        assert_eq!(e.accepted, "primary, architect or worker");
        let e = refused(req("worker", "w1"));
        assert_eq!(e.why, "it names neither a profile nor a command");
        let mut r = req("worker", "w1");
        r.profile = Some("nope".into());
        let e = refused(r);
        assert_eq!(
            (e.refused.as_str(), e.why.as_str()),
            ("fleet_spawn of `w1`", "profile `nope` is not configured")
        );
        assert!(e.accepted.starts_with("one of: ") && e.accepted.contains("claude"));
        let mut r = req("worker", "w1");
        r.profile = Some("shell".into());
        r.command = Some(vec![]);
        assert_eq!(refused(r).why, "command is an empty list");
        // `generic` has no command of its own.
        let mut r = req("worker", "w1");
        r.profile = Some("generic".into());
        let e = refused(r);
        assert_eq!(e.why, "profile `generic` has no command");
        assert_eq!(e.accepted, "a command in the request or in the profile");
    }

    #[test]
    fn the_command_is_the_requests_else_the_slots_else_the_profiles_with_placeholders_expanded() {
        let mut config = Config::default();
        let mut r = req("worker", "w1");
        r.profile = Some("sim".into());
        let p = planned(&r, &config, None).unwrap();
        assert_eq!(p.command, vec!["/bin/fleetd", "sim-agent"]);
        r.command = cmd(&["{fleetd}", "x", "--charter={charter_file}"]);
        let p = planned(&r, &config, None).unwrap();
        assert_eq!(
            p.argv(vec!["--wired".into()]),
            vec![
                "/bin/fleetd",
                "x",
                "--charter=/state/charters/w1.md",
                "--wired"
            ]
        );
        assert_eq!(p.charter_file, PathBuf::from("/state/charters/w1.md"));
        // A slot's own command comes before the profile's (and picks `generic` without one).
        config.architects.insert(
            "ada".into(),
            ArchitectSlot {
                profile: None,
                command: cmd(&["ada-cli", "{charter_file}"]),
                description: None,
            },
        );
        let p = planned(&req("architect", "ada"), &config, None).unwrap();
        assert_eq!(p.reserve.slot.as_deref(), Some("ada"));
        assert_eq!(p.profile_name, "generic");
        assert_eq!(p.command, vec!["ada-cli", "/state/charters/ada.md"]);
    }

    #[test]
    fn the_environment_is_fleetds_then_the_wirings_then_the_profiles_and_unset_follows_the_profile()
    {
        let config = Config::default();
        let mut r = req("architect", "g1");
        r.profile = Some("gemini".into());
        let p = planned(&r, &config, None).unwrap();
        let env = p.env(&[("WIRED".into(), "1".into())]);
        let keys: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            vec![
                "FLEETD_STATE_DIR",
                "FLEETD_MEMBER",
                "FLEETD_ROLE",
                "FLEETD_CHARTER_FILE",
                "TERM",
                "WIRED",
                "GEMINI_CLI_NO_RELAUNCH"
            ]
        );
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("FLEETD_STATE_DIR"), Some("/state"));
        assert_eq!(get("FLEETD_MEMBER"), Some("g1"));
        assert_eq!(get("FLEETD_ROLE"), Some("architect"));
        assert_eq!(get("FLEETD_CHARTER_FILE"), Some("/state/charters/g1.md"));
        assert_eq!(p.agent, Some(AgentKind::Gemini));
        let vars = ["CI", "CI_JOB", "HOME", "CONTINUOUS_INTEGRATION", "CIX"];
        assert_eq!(
            p.unset(vars.into_iter()),
            vec!["CI", "CI_JOB", "CONTINUOUS_INTEGRATION"]
        );
        let mut r = req("worker", "s1");
        r.profile = Some("shell".into());
        assert!(
            planned(&r, &config, None)
                .unwrap()
                .unset(vars.into_iter())
                .is_empty()
        );
        // `{fleetd}` in a profile's variable is this binary.
        let mut config = Config::default();
        config
            .profiles
            .get_mut("shell")
            .unwrap()
            .env
            .insert("HOOK".into(), "{fleetd} signal".into());
        let p = planned(&r, &config, None).unwrap();
        assert_eq!(
            p.env(&[]).last(),
            Some(&("HOOK".to_string(), "/bin/fleetd signal".to_string()))
        );
    }

    #[test]
    fn a_resume_takes_the_exited_members_identity_its_profiles_resume_command_and_its_charter() {
        let config = Config::default();
        let sid = "0b1c2d3e-1111-4222-8333-444455556666";
        let mut prior = exited("c1", "claude", Some(sid));
        prior.worktree = Some(Worktree {
            path: "/state/worktrees/c1".into(),
            branch: "fleet/c1".into(),
            repo: "/work".into(),
            base: "abc".into(),
        });
        let mut r = SpawnRequest {
            resume: Some("c1".into()),
            ..Default::default()
        };
        // The request's own fields do not count on a resume.
        r.profile = Some("shell".into());
        r.command = cmd(&["other"]);
        let m = member(&r, &config, Some(&prior)).unwrap();
        assert_eq!(m.cwd.as_deref(), Some("/work/x"));
        let p = plan(m, &r, &config, Some(&prior), op(), host()).unwrap();
        assert_eq!(p.profile_name, "claude");
        assert_eq!(
            p.command,
            vec!["claude".to_string(), format!("--resume={sid}")]
        );
        assert_eq!(p.session_id.as_deref(), Some(sid));
        assert_eq!(
            p.notes(vec![], None),
            vec![format!("resumed session {sid}")]
        );
        assert_eq!(
            p.worktree,
            Some(WorktreeAsk {
                prior: prior.worktree.clone()
            })
        );
        // A resumed member keeps its charter while the file is there.
        assert!(p.charter.keep_existing);
        assert_eq!(p.charter.text(Some("mine".into())), "mine");
        assert_eq!(p.charter.text(None), config.charters.compose(Role::Worker));
        // A profile without `resume` is refused.
        let prior = exited("s1", "shell", Some("x"));
        let e = planned(&r, &config, Some(&prior)).unwrap_err();
        assert_eq!(
            (e.refused.as_str(), e.why.as_str()),
            (
                "fleet_spawn {resume: s1}",
                "profile `shell` has no resume command"
            )
        );
    }

    /// Door 5 of issue 24: a resume puts the id on the command line only if it is the CLI's
    /// own format, and then glued to its option or after `--` (the wiring before the `--`).
    #[test]
    fn a_resume_id_is_checked_for_its_cli_and_never_passed_as_a_bare_argument() {
        let config = Config::default();
        let uuid = "0b1c2d3e-1111-4222-8333-444455556666";
        let ses = "ses_1f2e3d4c5b6aAbCdEfGhIjKlMn";
        let r = SpawnRequest {
            resume: Some("m1".into()),
            ..Default::default()
        };
        let wiring = || vec!["-c".to_string(), "k=v".to_string()];
        for (profile, id, argv) in [
            (
                "claude",
                uuid,
                vec![
                    "claude".to_string(),
                    format!("--resume={uuid}"),
                    "-c".into(),
                    "k=v".into(),
                ],
            ),
            (
                "codex",
                uuid,
                ["codex", "resume", "-c", "k=v", "--", uuid]
                    .map(String::from)
                    .to_vec(),
            ),
            (
                "gemini",
                uuid,
                vec![
                    "gemini".to_string(),
                    format!("--resume={uuid}"),
                    "-c".into(),
                    "k=v".into(),
                ],
            ),
            (
                "opencode",
                ses,
                vec![
                    "opencode".to_string(),
                    format!("--session={ses}"),
                    "-c".into(),
                    "k=v".into(),
                ],
            ),
        ] {
            let prior = exited("m1", profile, Some(id));
            let p = planned(&r, &config, Some(&prior)).unwrap();
            assert_eq!(p.argv(wiring()), argv, "{profile}");
            // No id the hooks could have sent becomes an argument of its own that is an option.
            for bad in [
                "--dangerously-skip-permissions",
                "--yolo",
                "-c",
                "--",
                "latest",
                "x y",
                "",
            ] {
                let prior = exited("m1", profile, Some(bad));
                let e = planned(&r, &config, Some(&prior)).unwrap_err();
                assert_eq!(e.refused, "fleet_spawn {resume: m1}", "{profile} {bad}");
                assert!(e.why.contains("session id"), "{profile} {bad}: {e}");
                assert!(
                    e.accepted.contains(crate::session::accepted(p.agent)),
                    "{profile} {bad}: {e}"
                );
            }
        }
        // Another CLI's id is not this one's.
        let prior = exited("m1", "opencode", Some(uuid));
        assert!(planned(&r, &config, Some(&prior)).is_err());
        // A new spawn's command takes the wiring at its end, `--` or not.
        let mut n = req("worker", "w1");
        n.profile = Some("codex".into());
        n.command = cmd(&["codex", "--", "x"]);
        let p = planned(&n, &config, None).unwrap();
        assert_eq!(p.argv(wiring()), ["codex", "--", "x", "-c", "k=v"]);
    }

    #[test]
    fn only_an_exited_member_with_a_session_is_resumable() {
        let n = MemberName::new("c1").unwrap();
        let e = resumable("c1", &n, None).unwrap_err();
        assert_eq!(e.why, "no member `c1` is remembered");
        assert_eq!(e.refused, "fleet_spawn {resume: c1}");
        let mut live = exited("c1", "claude", Some("s"));
        live.status = Status::Idle;
        assert_eq!(
            resumable("c1", &n, Some(live)).unwrap_err().why,
            "`c1` is still running"
        );
        let e = resumable("c1", &n, Some(exited("c1", "aider", None))).unwrap_err();
        assert!(
            e.why
                .contains("never reported a session id (profile `aider`")
        );
        let ok = exited("c1", "claude", Some("s"));
        assert_eq!(resumable("c1", &n, Some(ok.clone())), Ok(ok));
    }

    #[test]
    fn a_new_member_gets_a_fresh_charter_its_worktree_if_asked_and_the_configured_size() {
        let mut config = Config::default();
        config.lifecycle.rows = 50;
        config.lifecycle.cols = 200;
        config.lifecycle.spawn_wait_seconds = 7;
        let mut r = req("worker", "w1");
        r.profile = Some("shell".into());
        r.cwd = Some("/tmp/here".into());
        let p = planned(&r, &config, None).unwrap();
        assert!(!p.charter.keep_existing);
        assert_eq!(
            p.charter.text(Some("stale".into())),
            config.charters.compose(Role::Worker)
        );
        assert_eq!(p.worktree, None);
        assert_eq!(p.cwd.as_deref(), Some("/tmp/here"));
        assert_eq!((p.rows, p.cols), (50, 200));
        assert_eq!(p.reserve_wait, Duration::from_secs(12));
        assert_eq!(p.reserve.parent, op());
        assert_eq!(p.session_id, None);
        r.worktree = true;
        let p = planned(&r, &config, None).unwrap();
        assert_eq!(p.worktree, Some(WorktreeAsk { prior: None }));
        let w = Worktree {
            path: "/state/worktrees/w1".into(),
            branch: "fleet/w1".into(),
            repo: "/r".into(),
            base: "b".into(),
        };
        assert_eq!(
            p.notes(vec!["wired".into()], Some(&w)),
            vec!["wired", "worktree /state/worktrees/w1 on branch fleet/w1"]
        );
    }

    #[test]
    fn no_profile_puts_the_charter_on_a_command_line_or_in_the_environment() {
        // /proc/PID/cmdline is readable by every local user; the charter file is 0600. Every
        // built-in profile, with its agent wiring, must give the charter by file only.
        let marker = "CHARTER-MARKER-7f3a";
        let mut config = Config::default();
        config.charters.worker = format!("You are a worker. {marker}");
        let mut names: Vec<&String> = config.profiles.keys().collect();
        names.sort();
        for want in ["claude", "codex", "gemini", "generic", "opencode", "sim"] {
            assert!(names.iter().any(|n| *n == want), "no profile {want}");
        }
        for name in names {
            let mut r = req("worker", "w1");
            r.profile = Some(name.clone());
            if config.profiles[name].command.is_empty() {
                r.command = Some(vec!["my-agent".into(), "--flag".into()]);
            }
            r.cwd = Some("/src/proj".into());
            let p = planned(&r, &config, None).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(p.charter.text(None).contains(marker), "{name}");
            let dir = Path::new("/state/agents/w1");
            let wiring = match p.agent {
                Some(kind) => crate::agents::wire(
                    kind,
                    &crate::agents::Member {
                        name: "w1",
                        fleetd: Path::new("/bin/fleetd"),
                        state_dir: Path::new("/state"),
                        charter: &p.charter_file,
                        dir,
                        cwd: Some(Path::new("/src/proj")),
                    },
                    &crate::agents::UserConfig::default(),
                ),
                None => crate::agents::Wiring::default(),
            };
            let argv = p.argv(wiring.args.clone());
            let env = p.env(&wiring.env);
            for a in &argv {
                assert!(!a.contains(marker), "{name}: the charter is on argv: {a}");
            }
            for (k, v) in &env {
                assert!(!v.contains(marker), "{name}: the charter is in ${k}");
            }
            // The wiring's files go to the member's wiring directory (written 0600) and hold
            // no charter text either: an agent CLI reads the charter file itself.
            for (f, text) in &wiring.files {
                assert!(f.starts_with(dir), "{name}: {}", f.display());
                assert!(!text.contains(marker), "{name}: {}", f.display());
            }
            if p.agent.is_some() {
                let charter = p.charter_file.display().to_string();
                let named = argv.iter().any(|a| a.contains(&charter))
                    || wiring.files.iter().any(|(_, t)| t.contains(&charter));
                assert!(named, "{name}: the wiring never names the charter file");
            }
        }
    }
}
