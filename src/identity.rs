//! Who is calling: the daemon resolves a connection's peer pid (SO_PEERCRED) to the member
//! whose terminal the process descends from, by walking `/proc/<pid>/stat` parent links
//! against the registry's pid index.
//!
//! Owns caller resolution. Must never read anything the caller sends (arguments, environment):
//! identity comes from the kernel's view of the process tree only.

use fleetd_actors::ctx::Ctx;
use fleetd_actors::types::{Caller, MemberIdentity};

/// How deep an ancestry walk goes before giving up (process trees are shallow).
const MAX_DEPTH: usize = 128;

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ..." where comm may itself contain spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The member `pid` descends from (itself included), if any.
pub fn member_of(ctx: &Ctx, pid: u32) -> Option<MemberIdentity> {
    let mut p = pid;
    for _ in 0..MAX_DEPTH {
        if let Some(m) = ctx.member_by_pid(p) {
            return Some(m);
        }
        match parent_of(p) {
            Some(pp) if pp > 1 && pp != p => p = pp,
            _ => return None,
        }
    }
    None
}

/// A caller on the MCP socket: a member, or "not a member".
pub fn mcp_caller(ctx: &Ctx, pid: Option<u32>) -> Caller {
    match pid.and_then(|p| member_of(ctx, p)) {
        Some(m) => Caller::Member(m),
        None => Caller::NotMember { pid },
    }
}

/// A caller on the operator's REST socket: a member if it runs inside one (so a worker cannot
/// bypass Authz by calling the CLI from its shell), else the operator.
pub fn rest_caller(ctx: &Ctx, pid: Option<u32>) -> Caller {
    match pid.and_then(|p| member_of(ctx, p)) {
        Some(m) => Caller::Member(m),
        None => Caller::Operator,
    }
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

    #[test]
    fn parent_of_self_is_our_parent() {
        let me = std::process::id();
        let expected = std::os::unix::process::parent_id();
        assert_eq!(parent_of(me), Some(expected));
        assert_eq!(parent_of(u32::MAX), None);
    }
}
