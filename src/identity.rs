//! Who is calling: the daemon resolves a connection's peer pid (SO_PEERCRED) to the member
//! whose terminal the process descends from, by walking `/proc/<pid>/stat` parent links
//! against the registry's pid index, all the way to init.
//!
//! Owns caller resolution, and fails closed: a caller whose ancestry cannot be read to its end
//! (the connecting process is gone, its tree deeper than the walk goes, a `/proc` entry that
//! cannot be read) is *unresolved* and refused on every socket, never taken for the operator.
//! Identity comes from the kernel's view of the process tree only; the one thing read from the
//! caller's side is its `FLEETD_MEMBER` (from `/proc/<pid>/environ`, as the kernel holds it),
//! and only to refuse a contradiction: a process in one member's tree started for another (a
//! helper shared between members), or outside every tree but started for a member.

use fleetd_actors::ctx::Ctx;
use fleetd_actors::types::{Caller, MemberIdentity};

/// How deep an ancestry walk goes (process trees are shallow; deeper is refused, not guessed).
const MAX_DEPTH: usize = 128;

/// Why a process's `/proc` entry gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcError {
    /// The process does not exist (any more).
    Gone,
    /// It may exist, but its entry could not be read or parsed: the daemon short of file
    /// descriptors or memory, say. Never taken to mean the process is gone.
    Unreadable(String),
}

/// Reads `/proc/<pid>/stat`, telling a process that is gone from an entry the daemon could
/// not read.
fn read_stat(pid: u32) -> Result<String, ProcError> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(proc_error)
}

/// ENOENT: no such process; ESRCH: it died between open and read. Anything else (EMFILE,
/// ENOMEM, EACCES) says nothing about the process.
fn proc_error(e: std::io::Error) -> ProcError {
    if e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) {
        ProcError::Gone
    } else {
        ProcError::Unreadable(e.to_string())
    }
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
pub fn parent_of(pid: u32) -> Result<u32, ProcError> {
    let stat = read_stat(pid)?;
    // "pid (comm) state ppid ..." where comm may itself contain spaces and parentheses.
    let unparsable = || ProcError::Unreadable(format!("its stat line {stat:?} does not parse"));
    let rest = &stat[stat.rfind(')').ok_or_else(unparsable)? + 1..];
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(unparsable)
}

/// Where a process stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Inside this member's tree, whose root process is `root`.
    Member { who: MemberIdentity, root: u32 },
    /// Outside every member: its ancestry was read up to init.
    Outside,
    /// Its ancestry could not be established (why).
    Unknown(String),
}

/// The member `pid` descends from (itself included), read to the end of its ancestry.
pub fn standing(ctx: &Ctx, pid: u32) -> Standing {
    standing_with(pid, |p| ctx.member_by_pid(p), parent_of)
}

/// [`standing`], over any pid index and parent lookup (for tests).
pub fn standing_with(
    pid: u32,
    member: impl Fn(u32) -> Option<MemberIdentity>,
    parent: impl Fn(u32) -> Result<u32, ProcError>,
) -> Standing {
    let mut p = pid;
    for _ in 0..MAX_DEPTH {
        if let Some(who) = member(p) {
            return Standing::Member { who, root: p };
        }
        if p == 1 {
            return Standing::Outside;
        }
        match parent(p) {
            // init's parent (or a process of another pid namespace's init).
            Ok(0) => return Standing::Outside,
            Ok(pp) if pp != p => p = pp,
            Ok(_) => return Standing::Unknown(format!("pid {p} is its own parent")),
            Err(ProcError::Gone) if p == pid => {
                return Standing::Unknown(format!(
                    "the connecting process (pid {pid}) is gone, so its ancestry cannot be read"
                ));
            }
            Err(ProcError::Gone) => {
                return Standing::Unknown(format!(
                    "the ancestry of pid {pid} breaks off at pid {p}, which is gone"
                ));
            }
            Err(ProcError::Unreadable(e)) => {
                return Standing::Unknown(format!(
                    "the daemon could not read /proc/{p}/stat ({e}) while tracing pid {pid}'s ancestry; the same call may succeed when it is retried"
                ));
            }
        }
    }
    Standing::Unknown(format!(
        "the ancestry of pid {pid} is deeper than {MAX_DEPTH} processes"
    ))
}

/// The `FLEETD_MEMBER` a process was started with, if any (bounded read). An environment
/// that cannot be read is an error, not "no claim": the claim is what catches a helper shared
/// between members.
pub fn claimed_member(pid: u32) -> Result<Option<String>, ProcError> {
    use std::io::Read;
    let f = std::fs::File::open(format!("/proc/{pid}/environ")).map_err(proc_error)?;
    let mut buf = Vec::new();
    f.take(1 << 20).read_to_end(&mut buf).map_err(proc_error)?;
    Ok(buf
        .split(|&b| b == 0)
        .find_map(|kv| kv.strip_prefix(b"FLEETD_MEMBER="))
        .map(|v| String::from_utf8_lossy(v).into_owned()))
}

/// The caller `pid` is: `outside` is what a process outside every member is on this socket.
fn resolve(ctx: &Ctx, pid: Option<u32>, outside: Caller) -> Caller {
    resolve_rooted(ctx, pid, outside).0
}

/// [`resolve`], and the root pid of the member it resolved to.
fn resolve_rooted(ctx: &Ctx, pid: Option<u32>, outside: Caller) -> (Caller, Option<u32>) {
    let Some(p) = pid else {
        return (
            Caller::Unresolved {
                pid,
                why: "the connection carries no peer pid".into(),
            },
            None,
        );
    };
    let claim = match claimed_member(p) {
        Ok(c) => c.filter(|c| !c.is_empty()),
        Err(e) => {
            let why = match e {
                ProcError::Gone => {
                    format!(
                        "the connecting process (pid {p}) is gone, so its environment cannot be read"
                    )
                }
                ProcError::Unreadable(e) => format!(
                    "the daemon could not read /proc/{p}/environ ({e}); the same call may succeed when it is retried"
                ),
            };
            return (Caller::Unresolved { pid, why }, None);
        }
    };
    let caller = match (standing(ctx, p), claim) {
        (Standing::Unknown(why), _) => Caller::Unresolved { pid, why },
        (Standing::Member { who, .. }, Some(c)) if c != who.name.as_str() => Caller::Unresolved {
            pid,
            why: format!(
                "it runs in the process tree of `{}` but was started for `{}` (FLEETD_MEMBER): a helper shared between members answers for none of them",
                who.name,
                fleetd_actors::types::truncate(&c, 40)
            ),
        },
        (Standing::Member { who, root }, _) => return (Caller::Member(who), Some(root)),
        (Standing::Outside, Some(c)) => Caller::Unresolved {
            pid,
            why: format!(
                "it was started for member `{}` (FLEETD_MEMBER) but runs outside every member's process tree (detached from it?)",
                fleetd_actors::types::truncate(&c, 40)
            ),
        },
        (Standing::Outside, None) => outside,
    };
    (caller, None)
}

/// A process as `/proc/<pid>/stat` shows it: its parent and its start time (clock ticks since
/// boot), which together tell the same process from a later one with a reused pid, and one that
/// has been moved to another parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ppid: u32,
    start: u64,
}

fn stamp(pid: u32) -> Option<Stamp> {
    let stat = read_stat(pid).ok()?;
    // After "(comm)": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
    // utime stime cutime cstime priority nice num_threads itrealvalue starttime (field 22).
    let mut f = stat[stat.rfind(')')? + 1..].split_whitespace();
    let ppid = f.nth(1)?.parse().ok()?;
    let start = f.nth(17)?.parse().ok()?;
    Some(Stamp { ppid, start })
}

/// An MCP connection's caller, resolved in full (the `/proc` ancestry walk and the environment
/// read) on its first call and again only when something it rests on changed: the connecting
/// process (same pid, same start time, same parent) and, for a member, that member still being
/// registered at the same root process; for a process outside every member, no member having
/// been registered or cleared since (it may have connected before its member's pid was known).
/// Each later call costs one `/proc/<pid>/stat` read and one index lookup. A caller that
/// resolved as unresolved is never kept.
#[derive(Debug)]
pub struct ConnectionCaller {
    pid: Option<u32>,
    kept: std::sync::Mutex<Option<Kept>>,
}

#[derive(Debug)]
struct Kept {
    caller: Caller,
    /// The member's root process, for a member.
    root: Option<u32>,
    /// The pid index's version, for a caller outside every member.
    version: u64,
    stamp: Stamp,
}

impl ConnectionCaller {
    pub fn new(pid: Option<u32>) -> Self {
        ConnectionCaller {
            pid,
            kept: std::sync::Mutex::new(None),
        }
    }

    /// The connecting process.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    pub fn get(&self, ctx: &Ctx) -> Caller {
        let Some(pid) = self.pid else {
            return mcp_caller(ctx, None);
        };
        let now = stamp(pid);
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let (Some(k), Some(now)) = (kept.as_ref(), now)
            && k.stamp == now
        {
            let still = match (&k.caller, k.root) {
                (Caller::Member(m), Some(r)) => ctx.member_by_pid(r).as_ref() == Some(m),
                (Caller::NotMember { .. }, None) => ctx.pids_version() == k.version,
                _ => false,
            };
            if still {
                return k.caller.clone();
            }
        }
        let version = ctx.pids_version();
        let (caller, root) = resolve_rooted(ctx, Some(pid), Caller::NotMember { pid: Some(pid) });
        *kept = match (&caller, now) {
            (Caller::Member(_) | Caller::NotMember { .. }, Some(stamp)) => Some(Kept {
                caller: caller.clone(),
                root,
                version,
                stamp,
            }),
            _ => None,
        };
        caller
    }
}

/// A caller on the MCP socket: a member, or "not a member", or unresolved.
pub fn mcp_caller(ctx: &Ctx, pid: Option<u32>) -> Caller {
    resolve(ctx, pid, Caller::NotMember { pid })
}

/// A caller on the operator's REST socket: a member if it runs inside one (so a worker cannot
/// bypass Authz by calling the CLI from its shell), the operator if its ancestry reaches init
/// outside every member, and otherwise unresolved (refused).
pub fn rest_caller(ctx: &Ctx, pid: Option<u32>) -> Caller {
    resolve(ctx, pid, Caller::Operator)
}

/// The working directory of `pid`, for spawns that do not name one.
pub fn cwd_of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/cwd"))
        .ok()
        .map(|p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetd_actors::types::{MemberName, Role};

    #[test]
    fn parent_of_self_is_our_parent() {
        let me = std::process::id();
        let expected = std::os::unix::process::parent_id();
        assert_eq!(parent_of(me), Ok(expected));
        assert_eq!(parent_of(u32::MAX), Err(ProcError::Gone));
        assert_eq!(claimed_member(u32::MAX), Err(ProcError::Gone));
    }

    #[test]
    fn ancestry_is_read_to_its_end_or_the_caller_is_unknown() {
        let w1 = MemberIdentity {
            name: MemberName::new("w1").unwrap(),
            role: Role::Worker,
            slot: None,
        };
        let member = |p: u32| (p == 50).then(|| w1.clone());
        // 100 -> 50 (w1's root): inside w1.
        let tree = |p: u32| match p {
            100 => Ok(50),
            50 => Ok(10),
            10 => Ok(1),
            1 => Ok(0),
            _ => Err(ProcError::Gone),
        };
        assert_eq!(
            standing_with(100, member, tree),
            Standing::Member {
                who: w1.clone(),
                root: 50
            }
        );
        // 10 -> 1: outside, read to init.
        assert_eq!(standing_with(10, member, tree), Standing::Outside);
        // The connecting process is gone (its fd passed to a parent that kept it).
        assert!(
            matches!(standing_with(77, member, tree), Standing::Unknown(w) if w.contains("is gone"))
        );
        // The chain breaks off in the middle.
        let broken = |p: u32| match p {
            100 => Ok(99),
            _ => Err(ProcError::Gone),
        };
        assert!(
            matches!(standing_with(100, member, broken), Standing::Unknown(w) if w.contains("breaks off at pid 99"))
        );
        // An entry the daemon cannot read (out of descriptors) is not a process that is gone:
        // refused, with the reason and that a retry may succeed.
        let starved = |_: u32| {
            Err(ProcError::Unreadable(
                "Too many open files (os error 24)".into(),
            ))
        };
        match standing_with(100, member, starved) {
            Standing::Unknown(w) => {
                assert!(!w.contains("gone"), "{w}");
                assert!(
                    w.contains("Too many open files") && w.contains("retried"),
                    "{w}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Deeper than the walk goes: refused, not taken for the operator.
        let deep = |p: u32| Ok(p + 1);
        assert!(
            matches!(standing_with(1_000, member, deep), Standing::Unknown(w) if w.contains("deeper than 128"))
        );
    }

    fn ctx(dir: &std::path::Path) -> (Ctx, fleetd_actors::ctx::Publishers) {
        use fleetd_actors::clock::{Clock, SystemClock};
        let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(SystemClock);
        Ctx::new(
            fleetd_actors::store::Store::open(&dir.join("state.redb")).unwrap(),
            std::sync::Arc::new(fleetd_actors::events::EventBus::new(clock.clone(), 16)),
            clock,
            fleetd_actors::config::Config::default(),
            std::sync::Arc::new(crate::term::HostBackend::new(dir, "/bin/false".into()).unwrap()),
            dir.to_path_buf(),
            "/bin/false".into(),
            ed25519_dalek::SigningKey::from_bytes(&[7; 32]),
        )
    }

    /// A connection's caller is kept between calls, but not past a change that could alter it:
    /// a process that connected before its member was registered becomes that member.
    #[test]
    fn a_kept_caller_follows_member_registration() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, publishers) = ctx(dir.path());
        let me = std::process::id();
        let c = ConnectionCaller::new(Some(me));
        assert!(matches!(c.get(&ctx), Caller::NotMember { .. }));
        assert!(matches!(c.get(&ctx), Caller::NotMember { .. }));
        let w1 = MemberIdentity {
            name: MemberName::new("w1").unwrap(),
            role: Role::Worker,
            slot: None,
        };
        // This process becomes a member's root (as a member's agent is).
        publishers.pids.modify(|ix| ix.set(me, w1.clone()));
        assert_eq!(c.get(&ctx), Caller::Member(w1.clone()));
        assert_eq!(c.get(&ctx), Caller::Member(w1.clone()));
        // The member exits: the connection is no longer its.
        publishers.pids.modify(|ix| ix.clear(&w1.name));
        assert!(matches!(c.get(&ctx), Caller::NotMember { .. }));
        // A connection whose process is gone is unresolved, never kept.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let c = ConnectionCaller::new(Some(gone));
        assert!(matches!(c.get(&ctx), Caller::Unresolved { .. }));
    }

    #[test]
    fn a_stamp_names_the_parent_and_tells_processes_apart() {
        let me = stamp(std::process::id()).unwrap();
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        let theirs = stamp(child.id()).unwrap();
        assert_eq!(theirs.ppid, std::process::id());
        assert!(theirs.start >= me.start);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(stamp(child.id()), None, "a reaped process has no stamp");
    }

    #[test]
    fn our_own_environment_is_read_as_the_kernel_holds_it() {
        // This test process was not started for a member (the harness does not set it).
        let me = std::process::id();
        assert_eq!(
            claimed_member(me),
            Ok(std::env::var("FLEETD_MEMBER").ok()),
            "environ of our own pid"
        );
    }
}
