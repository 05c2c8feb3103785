//! The registry core: the member table, architect slots, and FIFO admission to busy slots.
//!
//! Owns reserve -> bind -> release/released: one terminal per slot, one slot per terminal, one
//! live primary per host, unique live names, lineage (who spawned whom), and the bounded FIFO
//! queue of spawns waiting for a busy slot. Pure: callers pass the time; it returns outcomes.
//! Must never spawn a process or write the store.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::error::{ErrorKind, FleetError};
use crate::types::{MemberIdentity, MemberName, Millis, Party, Role, Status};

/// Why and when a member ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    pub at: Millis,
    pub code: Option<i32>,
    pub reason: String,
}

/// One member, as the table (and the store) holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRecord {
    pub name: MemberName,
    pub role: Role,
    pub slot: Option<String>,
    pub profile: String,
    /// Who spawned it: the operator or a member (lineage).
    pub parent: Party,
    pub command: Vec<String>,
    pub spawned_at: Millis,
    /// The member's root process (the command in the PTY).
    pub pid: Option<u32>,
    /// The process that holds the PTY master for this member.
    pub host_pid: Option<u32>,
    pub status: Status,
    pub status_since: Millis,
    pub exit: Option<ExitInfo>,
    /// sha256 of the charter text this member received.
    pub charter_sha256: String,
    /// Bumped at every spawn under this name, so a stale terminal is never mistaken for a new one.
    pub generation: u64,
    /// The agent's own session id, as its hooks reported it (`fleetd spawn --resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The member's own git worktree (`--worktree`), removed at its exit unless it holds
    /// commits not merged elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Worktree>,
    /// The directory it was started in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// How it is confined (`bwrap`), or `None` when it runs unconfined (`[sandbox]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// While `blocked`: why, and the screen's last lines then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<Blocked>,
    /// Its session was resumed and its charter is owed at its next turn (a CLI that does not
    /// replay the context its resumed session start was given: Gemini CLI).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub charter_due: bool,
}

/// Why a member is blocked, as its slot read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocked {
    /// `unrecognised screen`, `dialog on screen`, `permission asked (hook)`, `question`.
    pub reason: String,
    /// The screen's last lines (screen text: `authz::blocked_screen_visible`).
    pub screen: String,
}

/// A member's git worktree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worktree {
    /// The worktree's directory (under the state dir) and the member's cwd.
    pub path: String,
    /// Its branch.
    pub branch: String,
    /// The repository it was made from, and the commit it started at.
    pub repo: String,
    pub base: String,
}

/// Which member each live root pid is, as the daemon resolves callers by it (a caller's
/// process ancestry is walked against it). The registry publishes it; `version` changes with
/// every change, so a caller resolved as outside every member is kept only until a member is
/// registered.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PidIndex {
    pub version: u64,
    by_pid: std::collections::HashMap<u32, MemberIdentity>,
}

impl PidIndex {
    /// `who` now runs as `pid` (any pid it had before is forgotten).
    pub fn set(&mut self, pid: u32, who: MemberIdentity) {
        self.by_pid.retain(|_, m| m.name != who.name);
        self.by_pid.insert(pid, who);
        self.version += 1;
    }

    /// `name` runs as no pid any more.
    pub fn clear(&mut self, name: &MemberName) {
        self.by_pid.retain(|_, m| &m.name != name);
        self.version += 1;
    }

    pub fn member(&self, pid: u32) -> Option<&MemberIdentity> {
        self.by_pid.get(&pid)
    }
}

impl MemberRecord {
    /// Who this member is to Authz.
    pub fn identity(&self) -> MemberIdentity {
        MemberIdentity {
            name: self.name.clone(),
            role: self.role,
            slot: self.slot.clone(),
        }
    }

    pub fn is_live(&self) -> bool {
        self.status != Status::Exited
    }
}

/// A reservation: a slot (or a name) held before the process exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    pub id: u64,
    pub name: MemberName,
    pub role: Role,
    pub slot: Option<String>,
    pub parent: Party,
    pub at: Millis,
}

/// What the spawner asks to reserve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReserveRequest {
    pub name: MemberName,
    pub role: Role,
    pub slot: Option<String>,
    pub parent: Party,
}

/// The state of one architect slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    Free,
    Reserved {
        reservation: u64,
        member: MemberName,
    },
    Live {
        member: MemberName,
    },
}

#[derive(Clone, Debug)]
struct Waiter {
    id: u64,
    req: ReserveRequest,
    deadline: Millis,
}

/// The answer to a reserve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReserveOutcome {
    Granted(Reservation),
    /// Queued behind a busy slot; the answer comes later as a [`WaiterOutcome`].
    Queued {
        position: usize,
        deadline: Millis,
    },
}

/// The later answer to a queued reserve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaiterOutcome {
    pub waiter: u64,
    pub result: Result<Reservation, FleetError>,
}

/// Registry limits from config.
#[derive(Clone, Debug)]
pub struct RegistryLimits {
    pub queue_max: usize,
    pub wait_ms: Millis,
    pub max_members: usize,
}

/// The member table and the slots.
#[derive(Clone, Debug)]
pub struct Registry {
    members: BTreeMap<MemberName, MemberRecord>,
    slots: BTreeMap<String, SlotState>,
    pending: BTreeMap<u64, Reservation>,
    waiters: BTreeMap<String, VecDeque<Waiter>>,
    next_reservation: u64,
    limits: RegistryLimits,
}

impl Registry {
    /// Build from configured slot names and the members the store remembers. Live architects
    /// re-occupy their slots.
    pub fn new(
        slot_names: impl IntoIterator<Item = String>,
        members: impl IntoIterator<Item = MemberRecord>,
        limits: RegistryLimits,
    ) -> Self {
        let mut slots: BTreeMap<String, SlotState> = slot_names
            .into_iter()
            .map(|s| (s, SlotState::Free))
            .collect();
        let members: BTreeMap<_, _> = members.into_iter().map(|m| (m.name.clone(), m)).collect();
        for m in members.values() {
            if let (true, Some(slot)) = (m.is_live(), &m.slot) {
                slots.insert(
                    slot.clone(),
                    SlotState::Live {
                        member: m.name.clone(),
                    },
                );
            }
        }
        Registry {
            members,
            slots,
            pending: BTreeMap::new(),
            waiters: BTreeMap::new(),
            next_reservation: 1,
            limits,
        }
    }

    /// Replace the configured slot names (config reload). Slots in use stay until released.
    pub fn set_slots(&mut self, names: impl IntoIterator<Item = String>) {
        let names: Vec<String> = names.into_iter().collect();
        self.slots
            .retain(|k, v| names.contains(k) || !matches!(v, SlotState::Free));
        for n in names {
            self.slots.entry(n).or_insert(SlotState::Free);
        }
    }

    pub fn set_limits(&mut self, limits: RegistryLimits) {
        self.limits = limits;
    }

    pub fn members(&self) -> impl Iterator<Item = &MemberRecord> {
        self.members.values()
    }

    pub fn member(&self, name: &MemberName) -> Option<&MemberRecord> {
        self.members.get(name)
    }

    pub fn slots(&self) -> &BTreeMap<String, SlotState> {
        &self.slots
    }

    /// The live primary, if any.
    pub fn primary(&self) -> Option<&MemberRecord> {
        live_primary(self.members.values())
    }

    /// How many spawns wait for `slot`.
    pub fn waiting(&self, slot: &str) -> usize {
        self.waiters.get(slot).map_or(0, |q| q.len())
    }

    fn name_taken(&self, name: &MemberName) -> bool {
        self.members.get(name).is_some_and(|m| m.is_live())
            || self.pending.values().any(|r| &r.name == name)
    }

    fn check_request(&self, req: &ReserveRequest) -> Result<(), FleetError> {
        let what = format!("spawn of `{}`", req.name);
        if self.name_taken(&req.name) {
            return Err(FleetError::conflict(
                what,
                format!("a live member is already called `{}`", req.name),
                "a name no live member uses (see fleet_list), or stop that member first",
            ));
        }
        match req.role {
            Role::Primary => {
                let pending_primary = self.pending.values().any(|r| r.role == Role::Primary);
                if let Some(p) = self.primary() {
                    return Err(FleetError::conflict(
                        what,
                        format!(
                            "`{}` is already this host's primary; there is one primary per host",
                            p.name
                        ),
                        "role worker or architect, or stop the current primary first",
                    ));
                }
                if pending_primary {
                    return Err(FleetError::conflict(
                        what,
                        "another primary is being spawned; there is one primary per host",
                        "role worker or architect",
                    ));
                }
                if req.slot.is_some() {
                    return Err(FleetError::invalid(
                        what,
                        "only architects bind a slot",
                        "no slot for role primary",
                    ));
                }
            }
            Role::Worker => {
                if req.slot.is_some() {
                    return Err(FleetError::invalid(
                        what,
                        "only architects bind a slot",
                        "no slot for role worker",
                    ));
                }
            }
            Role::Architect => {
                let configured = || self.slots.keys().cloned().collect::<Vec<_>>().join(", ");
                match &req.slot {
                    None => {
                        return Err(FleetError::invalid(
                            what,
                            "an architect needs a slot",
                            format!(
                                "slot set to one of the configured architect slots: {}",
                                configured()
                            ),
                        ));
                    }
                    Some(s) if !self.slots.contains_key(s) => {
                        return Err(FleetError::invalid(
                            what,
                            format!("`{s}` is not a configured architect slot"),
                            format!("one of: {}", configured()),
                        ));
                    }
                    Some(_) => {}
                }
            }
        }
        let live = self.members.values().filter(|m| m.is_live()).count() + self.pending.len();
        if live >= self.limits.max_members {
            return Err(FleetError::overloaded(
                what,
                format!(
                    "{live} members are live; the limit is lifecycle.max_members = {}",
                    self.limits.max_members
                ),
                "stop a member first, or raise lifecycle.max_members",
            ));
        }
        Ok(())
    }

    fn grant(&mut self, req: ReserveRequest, now: Millis) -> Reservation {
        let id = self.next_reservation;
        self.next_reservation += 1;
        let r = Reservation {
            id,
            name: req.name,
            role: req.role,
            slot: req.slot,
            parent: req.parent,
            at: now,
        };
        if let Some(slot) = &r.slot {
            self.slots.insert(
                slot.clone(),
                SlotState::Reserved {
                    reservation: id,
                    member: r.name.clone(),
                },
            );
        }
        self.pending.insert(id, r.clone());
        r
    }

    /// Reserve a name (and a slot for an architect). A busy slot queues the request FIFO with a
    /// bounded wait; `waiter` is the caller's handle for the later [`WaiterOutcome`].
    pub fn reserve(
        &mut self,
        req: ReserveRequest,
        waiter: u64,
        now: Millis,
    ) -> Result<ReserveOutcome, FleetError> {
        self.check_request(&req)?;
        if let Some(slot) = req.slot.clone() {
            let busy = !matches!(self.slots.get(&slot), Some(SlotState::Free));
            let queued_ahead = self.waiting(&slot);
            if busy || queued_ahead > 0 {
                if queued_ahead >= self.limits.queue_max {
                    return Err(FleetError::overloaded(
                        format!("spawn of `{}`", req.name),
                        format!(
                            "slot `{slot}` is busy and {queued_ahead} spawns already wait for it (lifecycle.spawn_queue_max = {})",
                            self.limits.queue_max
                        ),
                        "a spawn into another slot, or this one once it frees",
                    ));
                }
                let deadline = now + self.limits.wait_ms;
                self.waiters.entry(slot).or_default().push_back(Waiter {
                    id: waiter,
                    req,
                    deadline,
                });
                return Ok(ReserveOutcome::Queued {
                    position: queued_ahead + 1,
                    deadline,
                });
            }
        }
        Ok(ReserveOutcome::Granted(self.grant(req, now)))
    }

    /// The process exists: the reservation becomes a live member.
    pub fn bind(&mut self, reservation: u64, record: MemberRecord) -> Result<(), FleetError> {
        let Some(r) = self.pending.remove(&reservation) else {
            return Err(FleetError::new(
                ErrorKind::Conflict,
                format!("bind of `{}`", record.name),
                "the reservation is unknown or was already bound or released",
                "bind once per reservation",
            ));
        };
        debug_assert_eq!(r.name, record.name);
        if let Some(slot) = &r.slot {
            self.slots.insert(
                slot.clone(),
                SlotState::Live {
                    member: r.name.clone(),
                },
            );
        }
        self.members.insert(r.name.clone(), record);
        self.trim_exited();
        Ok(())
    }

    /// The launch failed: give the slot back and serve whoever waits for it.
    pub fn release(&mut self, reservation: u64, now: Millis) -> Vec<WaiterOutcome> {
        let Some(r) = self.pending.remove(&reservation) else {
            return vec![];
        };
        match r.slot {
            Some(slot) => {
                self.slots.insert(slot.clone(), SlotState::Free);
                self.promote(&slot, now)
            }
            None => vec![],
        }
    }

    /// The member's process is gone: record why, free its slot, serve the queue.
    pub fn released(
        &mut self,
        name: &MemberName,
        exit: ExitInfo,
        now: Millis,
    ) -> Vec<WaiterOutcome> {
        let Some(m) = self.members.get_mut(name) else {
            return vec![];
        };
        if !m.is_live() {
            return vec![];
        }
        m.status = Status::Exited;
        m.status_since = exit.at;
        m.exit = Some(exit);
        match m.slot.clone() {
            Some(slot) if matches!(self.slots.get(&slot), Some(SlotState::Live { member }) if member == name) =>
            {
                self.slots.insert(slot.clone(), SlotState::Free);
                self.promote(&slot, now)
            }
            _ => vec![],
        }
    }

    /// Record a status change of a live member. Exits go through [`Registry::released`].
    pub fn set_status(
        &mut self,
        name: &MemberName,
        status: Status,
        blocked: Option<Blocked>,
        now: Millis,
    ) -> bool {
        match self.members.get_mut(name) {
            Some(m) if m.is_live() && status != Status::Exited => {
                let blocked = blocked.filter(|_| status == Status::Blocked);
                let changed = m.status != status;
                if changed {
                    m.status = status;
                    m.status_since = now;
                }
                let noted = m.blocked != blocked;
                m.blocked = blocked;
                changed || noted
            }
            _ => false,
        }
    }

    /// Fill in the pids once the terminal reports them.
    pub fn set_pids(&mut self, name: &MemberName, pid: Option<u32>, host_pid: Option<u32>) {
        if let Some(m) = self.members.get_mut(name) {
            m.pid = pid;
            m.host_pid = host_pid;
        }
    }

    /// The agent reported its own session id (for resume); true if it changed.
    pub fn set_session(&mut self, name: &MemberName, id: &str) -> bool {
        match self.members.get_mut(name) {
            Some(m) if m.session_id.as_deref() != Some(id) => {
                m.session_id = Some(id.to_string());
                true
            }
            _ => false,
        }
    }

    /// Whether `name`'s charter is owed at its next turn (see [`MemberRecord::charter_due`]);
    /// true when this changed it.
    pub fn set_charter_due(&mut self, name: &MemberName, due: bool) -> bool {
        match self.members.get_mut(name) {
            Some(m) if m.is_live() && m.charter_due != due => {
                m.charter_due = due;
                true
            }
            _ => false,
        }
    }

    /// Withdraw a queued spawn (its caller went away).
    pub fn cancel_waiter(&mut self, waiter: u64) {
        for q in self.waiters.values_mut() {
            q.retain(|w| w.id != waiter);
        }
    }

    /// Expire queued spawns whose wait ran out.
    pub fn tick(&mut self, now: Millis) -> Vec<WaiterOutcome> {
        let mut out = vec![];
        for (slot, q) in self.waiters.iter_mut() {
            q.retain(|w| {
                if now >= w.deadline {
                    out.push(WaiterOutcome {
                        waiter: w.id,
                        result: Err(FleetError::timeout(
                            format!("spawn of `{}`", w.req.name),
                            format!("architect slot `{slot}` stayed busy for the whole bounded wait"),
                            "a spawn once the slot is free (fleet_list shows who holds it), or another slot",
                        )),
                    });
                    false
                } else {
                    true
                }
            });
        }
        out
    }

    /// The earliest deadline of any queued spawn, for the shell's timer.
    pub fn next_deadline(&self) -> Option<Millis> {
        self.waiters.values().flatten().map(|w| w.deadline).min()
    }

    fn promote(&mut self, slot: &str, now: Millis) -> Vec<WaiterOutcome> {
        let mut out = vec![];
        while matches!(self.slots.get(slot), Some(SlotState::Free)) {
            let Some(w) = self.waiters.get_mut(slot).and_then(|q| q.pop_front()) else {
                break;
            };
            if now >= w.deadline {
                out.push(WaiterOutcome {
                    waiter: w.id,
                    result: Err(FleetError::timeout(
                        format!("spawn of `{}`", w.req.name),
                        format!(
                            "architect slot `{slot}` freed only after the bounded wait ran out"
                        ),
                        "the same spawn again",
                    )),
                });
                continue;
            }
            let result = self.check_request(&w.req).map(|_| self.grant(w.req, now));
            out.push(WaiterOutcome {
                waiter: w.id,
                result,
            });
        }
        out
    }

    fn trim_exited(&mut self) {
        let max = self.limits.max_members;
        let exited = self.members.values().filter(|m| !m.is_live()).count();
        if exited <= max {
            return;
        }
        let mut old: Vec<(Millis, MemberName)> = self
            .members
            .values()
            .filter(|m| !m.is_live())
            .map(|m| (m.status_since, m.name.clone()))
            .collect();
        old.sort();
        for (_, n) in old.into_iter().take(exited - max) {
            self.members.remove(&n);
        }
    }

    /// Check the structural invariants; used by tests and debug assertions.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen_members = std::collections::BTreeSet::new();
        for (slot, st) in &self.slots {
            match st {
                SlotState::Free => {}
                SlotState::Reserved {
                    reservation,
                    member,
                } => {
                    let r = self
                        .pending
                        .get(reservation)
                        .ok_or(format!("slot {slot} reserved by unknown reservation"))?;
                    if &r.name != member || r.slot.as_deref() != Some(slot) {
                        return Err(format!("slot {slot} reservation mismatch"));
                    }
                    if !seen_members.insert(member.clone()) {
                        return Err(format!("{member} holds two slots"));
                    }
                }
                SlotState::Live { member } => {
                    let m = self
                        .members
                        .get(member)
                        .ok_or(format!("slot {slot} held by unknown {member}"))?;
                    if !m.is_live() || m.slot.as_deref() != Some(slot) {
                        return Err(format!(
                            "slot {slot} held by {member} which is not live there"
                        ));
                    }
                    if !seen_members.insert(member.clone()) {
                        return Err(format!("{member} holds two slots"));
                    }
                }
            }
        }
        for m in self.members.values().filter(|m| m.is_live()) {
            if let Some(s) = &m.slot
                && !matches!(self.slots.get(s), Some(SlotState::Live { member }) if member == &m.name)
            {
                return Err(format!("live architect {} does not hold slot {s}", m.name));
            }
        }
        let primaries = self
            .members
            .values()
            .filter(|m| m.is_live() && m.role == Role::Primary)
            .count()
            + self
                .pending
                .values()
                .filter(|r| r.role == Role::Primary)
                .count();
        if primaries > 1 {
            return Err(format!("{primaries} primaries"));
        }
        let mut names: Vec<&MemberName> = self
            .members
            .values()
            .filter(|m| m.is_live())
            .map(|m| &m.name)
            .collect();
        names.extend(self.pending.values().map(|r| &r.name));
        let n = names.len();
        names.sort();
        names.dedup();
        if names.len() != n {
            return Err("two live members share a name".into());
        }
        Ok(())
    }
}

/// The live primary among `members`: the one rule for "the lead", wherever a list of members
/// is already at hand (the registry answers `Primary` with it).
pub fn live_primary<'a>(
    members: impl IntoIterator<Item = &'a MemberRecord>,
) -> Option<&'a MemberRecord> {
    members
        .into_iter()
        .find(|m| m.role == Role::Primary && m.is_live())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pid_index_keeps_one_pid_per_member_and_counts_changes() {
        let who = |n: &str| MemberIdentity {
            name: MemberName::new(n).unwrap(),
            role: Role::Worker,
            slot: None,
        };
        let mut ix = PidIndex::default();
        ix.set(10, who("w1"));
        ix.set(20, who("w2"));
        ix.set(11, who("w1"));
        assert_eq!(ix.member(10), None, "w1's old pid is forgotten");
        assert_eq!(ix.member(11), Some(&who("w1")));
        assert_eq!(ix.version, 3);
        ix.clear(&MemberName::new("w2").unwrap());
        assert_eq!((ix.member(20), ix.version), (None, 4));
    }
    use proptest::prelude::*;

    fn n(s: &str) -> MemberName {
        MemberName::new(s).unwrap()
    }

    fn limits() -> RegistryLimits {
        RegistryLimits {
            queue_max: 2,
            wait_ms: 1_000,
            max_members: 16,
        }
    }

    fn reg() -> Registry {
        Registry::new(["opus".to_string(), "sol".to_string()], vec![], limits())
    }

    fn req(name: &str, role: Role, slot: Option<&str>) -> ReserveRequest {
        ReserveRequest {
            name: n(name),
            role,
            slot: slot.map(String::from),
            parent: Party::Operator,
        }
    }

    fn record(r: &Reservation, now: Millis) -> MemberRecord {
        MemberRecord {
            name: r.name.clone(),
            role: r.role,
            slot: r.slot.clone(),
            profile: "sim".into(),
            parent: r.parent.clone(),
            command: vec!["x".into()],
            spawned_at: now,
            pid: Some(1),
            host_pid: None,
            status: Status::Starting,
            status_since: now,
            exit: None,
            charter_sha256: String::new(),
            generation: 1,
            session_id: None,
            worktree: None,
            cwd: None,
            sandbox: None,
            blocked: None,
            charter_due: false,
        }
    }

    fn granted(o: Result<ReserveOutcome, FleetError>) -> Reservation {
        match o {
            Ok(ReserveOutcome::Granted(r)) => r,
            o => panic!("{o:?}"),
        }
    }

    fn exit(at: Millis) -> ExitInfo {
        ExitInfo {
            at,
            code: Some(0),
            reason: "stopped".into(),
        }
    }

    #[test]
    fn reserve_bind_release_cycle() {
        let mut r = reg();
        let a = granted(r.reserve(req("a1", Role::Architect, Some("opus")), 1, 0));
        assert!(matches!(r.slots()["opus"], SlotState::Reserved { .. }));
        r.bind(a.id, record(&a, 0)).unwrap();
        assert_eq!(r.slots()["opus"], SlotState::Live { member: n("a1") });
        // Binding twice is refused.
        assert!(r.bind(a.id, record(&a, 0)).is_err());
        r.released(&n("a1"), exit(5), 5);
        assert_eq!(r.slots()["opus"], SlotState::Free);
        assert_eq!(r.member(&n("a1")).unwrap().status, Status::Exited);
        r.check_invariants().unwrap();
    }

    #[test]
    fn one_primary_unique_names_and_role_rules() {
        let mut r = reg();
        let p = granted(r.reserve(req("lead", Role::Primary, None), 1, 0));
        r.bind(p.id, record(&p, 0)).unwrap();
        let e = r
            .reserve(req("lead2", Role::Primary, None), 2, 0)
            .unwrap_err();
        assert!(e.why.contains("one primary per host"), "{e}");
        let e = r
            .reserve(req("lead", Role::Worker, None), 3, 0)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Conflict);
        let e = r
            .reserve(req("w", Role::Worker, Some("opus")), 4, 0)
            .unwrap_err();
        assert!(e.why.contains("only architects"));
        let e = r
            .reserve(req("a", Role::Architect, None), 5, 0)
            .unwrap_err();
        assert!(e.accepted.contains("opus, sol"), "{e}");
        let e = r
            .reserve(req("a", Role::Architect, Some("zed")), 6, 0)
            .unwrap_err();
        assert!(e.why.contains("`zed`"));
        // An exited member's name can be used again.
        r.released(&n("lead"), exit(1), 1);
        granted(r.reserve(req("lead", Role::Primary, None), 7, 2));
    }

    #[test]
    fn busy_slot_queues_fifo_then_times_out() {
        let mut r = reg();
        let a = granted(r.reserve(req("a1", Role::Architect, Some("opus")), 1, 0));
        r.bind(a.id, record(&a, 0)).unwrap();
        assert_eq!(
            r.reserve(req("a2", Role::Architect, Some("opus")), 2, 10)
                .unwrap(),
            ReserveOutcome::Queued {
                position: 1,
                deadline: 1_010
            }
        );
        assert!(matches!(
            r.reserve(req("a3", Role::Architect, Some("opus")), 3, 20)
                .unwrap(),
            ReserveOutcome::Queued { position: 2, .. }
        ));
        // The queue is bounded.
        let e = r
            .reserve(req("a4", Role::Architect, Some("opus")), 4, 30)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Overloaded);
        // Release serves the head of the queue first.
        let out = r.released(&n("a1"), exit(100), 100);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].waiter, 2);
        let a2 = out[0].result.clone().unwrap();
        assert_eq!(a2.name, n("a2"));
        r.bind(a2.id, record(&a2, 100)).unwrap();
        // a3 runs out of time.
        assert!(r.tick(1_019).is_empty());
        let t = r.tick(1_020);
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].waiter, 3);
        assert_eq!(t[0].result.as_ref().unwrap_err().kind, ErrorKind::Timeout);
        r.check_invariants().unwrap();
    }

    #[test]
    fn failed_launch_releases_slot_to_waiter() {
        let mut r = reg();
        let a = granted(r.reserve(req("a1", Role::Architect, Some("sol")), 1, 0));
        assert!(matches!(
            r.reserve(req("a2", Role::Architect, Some("sol")), 2, 0)
                .unwrap(),
            ReserveOutcome::Queued { .. }
        ));
        let out = r.release(a.id, 5);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].result.as_ref().unwrap().name, n("a2"));
        r.check_invariants().unwrap();
    }

    #[test]
    fn restored_live_architects_hold_their_slots() {
        let mut m = record(
            &Reservation {
                id: 1,
                name: n("a1"),
                role: Role::Architect,
                slot: Some("opus".into()),
                parent: Party::Operator,
                at: 0,
            },
            0,
        );
        m.status = Status::Idle;
        let r = Registry::new(["opus".to_string()], vec![m], limits());
        assert_eq!(r.slots()["opus"], SlotState::Live { member: n("a1") });
        r.check_invariants().unwrap();
    }

    #[derive(Clone, Debug)]
    enum Op {
        Reserve(u8, u8, u8), // name index, role index, slot index (0 = none, 1 = opus, 2 = sol, 3 = bad)
        Bind(u8),
        Release(u8),
        Exit(u8),
        Tick(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..6, 0u8..3, 0u8..4).prop_map(|(a, b, c)| Op::Reserve(a, b, c)),
            (0u8..8).prop_map(Op::Bind),
            (0u8..8).prop_map(Op::Release),
            (0u8..6).prop_map(Op::Exit),
            (0u16..800).prop_map(Op::Tick),
        ]
    }

    proptest! {
        /// Whatever the interleaving of reserve/bind/release/exit/time, slot exclusivity, one
        /// primary and unique live names hold, and every queued spawn is answered exactly once.
        #[test]
        fn invariants_hold(ops in proptest::collection::vec(op(), 1..80)) {
            let mut r = reg();
            let mut now = 0;
            let mut granted: Vec<Reservation> = vec![];
            let mut queued: std::collections::BTreeSet<u64> = Default::default();
            let mut answered: std::collections::BTreeSet<u64> = Default::default();
            let mut next_waiter = 1;
            let handle = |out: Vec<WaiterOutcome>, granted: &mut Vec<Reservation>, answered: &mut std::collections::BTreeSet<u64>, queued: &std::collections::BTreeSet<u64>| -> Result<(), TestCaseError> {
                for o in out {
                    prop_assert!(queued.contains(&o.waiter));
                    prop_assert!(answered.insert(o.waiter), "waiter answered twice");
                    if let Ok(res) = o.result { granted.push(res); }
                }
                Ok(())
            };
            for o in ops {
                match o {
                    Op::Reserve(ni, ri, si) => {
                        let role = Role::ALL[ri as usize];
                        let slot = match si { 0 => None, 1 => Some("opus"), 2 => Some("sol"), _ => Some("bad") };
                        let w = next_waiter; next_waiter += 1;
                        match r.reserve(req(&format!("m{ni}"), role, slot), w, now) {
                            Ok(ReserveOutcome::Granted(res)) => granted.push(res),
                            Ok(ReserveOutcome::Queued { .. }) => { queued.insert(w); }
                            Err(_) => {}
                        }
                    }
                    Op::Bind(i) => {
                        if let Some(res) = granted.get(i as usize).cloned() {
                            let _ = r.bind(res.id, record(&res, now));
                        }
                    }
                    Op::Release(i) => {
                        if let Some(res) = granted.get(i as usize).cloned() {
                            let out = r.release(res.id, now);
                            handle(out, &mut granted, &mut answered, &queued)?;
                        }
                    }
                    Op::Exit(ni) => {
                        let out = r.released(&n(&format!("m{ni}")), exit(now), now);
                        handle(out, &mut granted, &mut answered, &queued)?;
                    }
                    Op::Tick(dt) => {
                        now += dt as u64;
                        let out = r.tick(now);
                        handle(out, &mut granted, &mut answered, &queued)?;
                    }
                }
                prop_assert_eq!(r.check_invariants(), Ok(()));
            }
            // Far in the future every queued spawn has been answered.
            let out = r.tick(now + 10_000);
            handle(out, &mut granted, &mut answered, &queued)?;
            prop_assert_eq!(&answered, &queued);
        }
    }
}
