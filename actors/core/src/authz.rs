//! The Authz table of the seed, as a pure function: every check of who may do what in fleetd
//! is a call to [`authorize`] with an [`Action`].
//!
//! Owns who may do what: SPAWN, STOP and DRAIN are primary-only; SEND is primary or architect;
//! SEND_REMOTE (lead-to-lead mail) the primary's alone; REPLY and ASK belong only to the member
//! that owns the ticket or session; READ is open to members, and a single ticket or message is
//! read by the parties to it, wherever its body is shown (a member's queue too:
//! [`body_visible`]); DECIDE (open and close a decision) is the primary's and POSITION an
//! architect's bound to a slot; DRIFT (one's own drift log) and SIGNAL (one's own status, from
//! an agent hook) belong to each member for itself; a screen's text is its member's and the
//! operator's, wherever it is shown (the screen, a status, a stalled paste's receipt and its
//! event: [`screen_visible`]). The operator (outside every member, on the REST socket) holds
//! every right except the participants' ones (REPLY, ASK, SEND_REMOTE, DECIDE, POSITION, DRIFT,
//! SIGNAL), and alone holds ATTACH (attach, input, resize) and ADMIN (config reload, fault
//! injection). A process that is not a member may only ask who it is. Must never look at
//! anything the caller sent to decide who the caller is: the [`Caller`] comes from the
//! connection.

use crate::error::{ErrorKind, FleetError};
use crate::types::{Caller, MemberName, Party, Role};

/// What a caller wants to do, with just the facts the rule needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action<'a> {
    Spawn,
    Stop,
    Drain,
    Send,
    /// Send to another host's lead (`lead@HOST`): the primary alone.
    SendRemote,
    /// Reply to a ticket whose target (the session that owns it) is `owner`.
    Reply {
        owner: &'a MemberName,
    },
    /// Ask one's lead; `lead` is the lead the caller would ask, if it has one.
    Ask {
        lead: Option<&'a MemberName>,
    },
    /// list, status, poll and ack of own tickets.
    Read,
    /// Read one ticket or message, which went from `from` to `to`.
    ReadOwn {
        from: &'a Party,
        to: &'a MemberName,
    },
    /// See the text on `member`'s screen.
    Screen {
        member: &'a MemberName,
    },
    /// Open or close a decision.
    Decide,
    /// Record a position (or an abstention) in a decision.
    Position,
    /// Append to one's own drift log.
    DriftWrite,
    /// Report one's own status from an agent hook (`fleetd signal`).
    Signal,
    /// Attach to a terminal, type into it, resize it.
    Terminal,
    /// Reload the config; inject a fault (debug builds).
    Admin,
    /// who am I: open to every process.
    WhoAmI,
}

impl Action<'_> {
    /// The rule's name, as refusals quote it.
    pub fn rule(&self) -> &'static str {
        match self {
            Action::Spawn => "SPAWN",
            Action::Stop => "STOP",
            Action::Drain => "DRAIN",
            Action::Send => "SEND",
            Action::SendRemote => "SEND_REMOTE",
            Action::Reply { .. } => "REPLY",
            Action::Ask { .. } => "ASK",
            Action::Read | Action::ReadOwn { .. } => "READ",
            Action::Screen { .. } | Action::Terminal => "ATTACH",
            Action::Decide => "DECIDE",
            Action::Position => "POSITION",
            Action::DriftWrite => "DRIFT",
            Action::Signal => "SIGNAL",
            Action::Admin => "ADMIN",
            Action::WhoAmI => "WHOAMI",
        }
    }
}

/// Decide whether `caller` may perform `action`. `what` names the call for the refusal text.
pub fn authorize(caller: &Caller, action: &Action<'_>, what: &str) -> Result<(), FleetError> {
    let refuse = |why: String, accepted: &str| {
        Err(FleetError::new(ErrorKind::Forbidden, what, why, accepted).with_rule(action.rule()))
    };
    if matches!(action, Action::WhoAmI) {
        return Ok(());
    }
    let member = match caller {
        Caller::Unresolved { .. } => {
            return refuse(
                format!(
                    "{} is refused: fleetd only acts for a caller it can place in exactly one member's process tree, or outside all of them",
                    caller.describe()
                ),
                "the same call from a process that stays in its member's terminal (or, for the operator, outside every member)",
            );
        }
        Caller::NotMember { .. } => {
            return refuse(
                format!(
                    "{} is not a fleet member; only fleet_whoami is open to it",
                    caller.describe()
                ),
                "a call from a process running inside a member's terminal",
            );
        }
        Caller::Operator => {
            return match action {
                Action::Reply { owner } => refuse(
                    format!("only `{owner}`, the member that owns the ticket, may reply to it"),
                    "fleet_reply from the member the ticket was sent to",
                ),
                Action::Ask { .. } => refuse(
                    "the operator has no lead to ask".into(),
                    "fleet_ask from a worker or architect",
                ),
                Action::SendRemote => refuse(
                    "lead-to-lead mail is sent by the primary alone, not by the operator".into(),
                    "fleet_send to lead@HOST from inside the primary's terminal",
                ),
                Action::Decide => refuse(
                    "the operator is not a participant: decisions are opened and closed by the primary".into(),
                    "the same call from the primary (the lead)",
                ),
                Action::Position => refuse(
                    "the operator is not a participant: positions are recorded by architects".into(),
                    "fleet_decision position from an architect bound to a convened slot",
                ),
                Action::DriftWrite => refuse(
                    "the operator has no drift log: only members write their own, through fleet_drift".into(),
                    "fleet_drift from a member (operators append offline with `fleetd drift append`)",
                ),
                Action::Signal => refuse(
                    "the operator is not a member; a signal must come from inside a member's process tree".into(),
                    "`fleetd signal` run by an agent hook inside the member's terminal",
                ),
                Action::Spawn
                | Action::Stop
                | Action::Drain
                | Action::Send
                | Action::Read
                | Action::ReadOwn { .. }
                | Action::Screen { .. }
                | Action::Terminal
                | Action::Admin
                | Action::WhoAmI => Ok(()),
            };
        }
        Caller::Member(m) => m,
    };
    match action {
        Action::Spawn | Action::Stop | Action::Drain => {
            if member.role == Role::Primary {
                Ok(())
            } else {
                refuse(
                    format!(
                        "{} may not {}; it is primary-only",
                        caller.describe(),
                        action.rule().to_lowercase()
                    ),
                    "the same call from the primary (the lead)",
                )
            }
        }
        Action::Send => {
            if matches!(member.role, Role::Primary | Role::Architect) {
                Ok(())
            } else {
                refuse(
                    format!(
                        "{} may not send; SEND is for the primary or an architect",
                        caller.describe()
                    ),
                    "fleet_reply to the ticket you were handed, or fleet_ask to ask your lead",
                )
            }
        }
        Action::SendRemote => {
            if member.role == Role::Primary {
                Ok(())
            } else {
                refuse(
                    format!(
                        "{} may not send to another host; only the primary sends lead-to-lead mail",
                        caller.describe()
                    ),
                    "fleet_send to a member of this host, or fleet_ask to ask your lead",
                )
            }
        }
        Action::Reply { owner } => {
            if &member.name == *owner {
                Ok(())
            } else {
                refuse(
                    format!("the ticket belongs to `{owner}`, not to `{}`", member.name),
                    "fleet_reply to a ticket that was sent to you",
                )
            }
        }
        Action::Ask { lead } => match lead {
            Some(lead) if *lead != &member.name => Ok(()),
            Some(_) => refuse(
                "a member cannot ask itself".into(),
                "fleet_ask from a member whose lead is another member",
            ),
            None => refuse(
                format!(
                    "{} has no lead to ask (no live primary, and its spawner is gone)",
                    caller.describe()
                ),
                "fleet_ask while a primary is running",
            ),
        },
        Action::ReadOwn { from, to } => {
            if *from == &Party::Member(member.name.clone()) || *to == &member.name {
                Ok(())
            } else {
                refuse(
                    format!(
                        "it went from `{from}` to `{to}`, not to or from `{}`",
                        member.name
                    ),
                    "a ticket or message you sent or were sent",
                )
            }
        }
        Action::Screen { member: of } => {
            if *of == &member.name {
                Ok(())
            } else {
                refuse(
                    format!(
                        "{} may not see `{of}`'s screen; a screen is its member's and the operator's",
                        caller.describe()
                    ),
                    "the operator, or the member itself",
                )
            }
        }
        Action::Decide => {
            if member.role == Role::Primary {
                Ok(())
            } else {
                refuse(
                    format!(
                        "{} may not open or close decisions; that is the primary's",
                        caller.describe()
                    ),
                    "the same call from the primary (the lead)",
                )
            }
        }
        Action::Position => match (member.role, &member.slot) {
            (Role::Architect, Some(_)) => Ok(()),
            (Role::Architect, None) => refuse(
                format!("architect `{}` is bound to no slot", member.name),
                "a call from an architect bound to a convened slot",
            ),
            _ => refuse(
                format!(
                    "{} may not record positions; only architects do",
                    caller.describe()
                ),
                "fleet_decision position from an architect bound to a convened slot",
            ),
        },
        Action::Terminal | Action::Admin => refuse(
            format!(
                "{} is not the operator; {} the operator's",
                caller.describe(),
                if matches!(action, Action::Terminal) {
                    "terminals are"
                } else {
                    "the daemon's administration is"
                }
            ),
            "the same request from the operator, outside every member",
        ),
        Action::Read | Action::DriftWrite | Action::Signal | Action::WhoAmI => Ok(()),
    }
}

/// Whether `caller` may read the body of a message that went from `from` to `to`, wherever a
/// body is shown (a member's queue in its status, a receipt): the rule of one ticket or message
/// (READ, [`Action::ReadOwn`]): its two parties and the operator. Everyone else sees the
/// message's shape (id, sender, ticket, state, times) with the body blanked.
pub fn body_visible(caller: &Caller, from: &Party, to: &MemberName) -> bool {
    authorize(caller, &Action::ReadOwn { from, to }, "a message's body").is_ok()
}

/// Whether `caller` may see text taken from `member`'s screen, wherever it is shown: the screen
/// itself, the `screen` field of its status, the screen excerpt a stalled paste's receipt (and
/// its receipt event) carries. The rule of [`Action::Screen`] (ATTACH): the member itself and
/// the operator. Everyone else gets the field blanked, never the text.
pub fn screen_visible(caller: &Caller, member: &MemberName) -> bool {
    authorize(caller, &Action::Screen { member }, "a screen's text").is_ok()
}

/// Whether `caller` may see the last screen lines shown with a member's `blocked` status (the
/// dialog, or the screen nobody foresaw, that holds it): whoever may see its screen (itself,
/// the operator), and the lead, who must decide what to do about a member that waits for a
/// person. Everyone else gets the reason without the text.
pub fn blocked_screen_visible(caller: &Caller, member: &MemberName) -> bool {
    screen_visible(caller, member) || matches!(caller, Caller::Member(m) if m.role == Role::Primary)
}

/// The coordinator row of `fleet_list` (coord-id, mailbox, held mail, peers) is for the primary
/// only. The gate runs before the row is built: for anyone else the key is absent, not empty.
/// The operator sees it too: it is the operator's daemon.
pub fn coordinator_row_visible(caller: &Caller) -> bool {
    match caller {
        Caller::Operator => true,
        Caller::Member(m) => m.role == Role::Primary,
        Caller::NotMember { .. } | Caller::Unresolved { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::MemberIdentity;

    fn member(name: &str, role: Role) -> Caller {
        Caller::Member(MemberIdentity {
            name: MemberName::new(name).unwrap(),
            role,
            slot: None,
        })
    }

    /// The whole table, as data: (caller, action, allowed).
    #[test]
    fn the_table() {
        let lead = member("lead", Role::Primary);
        let work = member("w1", Role::Worker);
        let op = Caller::Operator;
        let nm = Caller::NotMember { pid: Some(4) };
        let w1 = MemberName::new("w1").unwrap();
        let leadn = MemberName::new("lead").unwrap();
        let from_lead = Party::Member(leadn.clone());
        let from_op = Party::Operator;
        let arch = Caller::Member(MemberIdentity {
            name: MemberName::new("opus").unwrap(),
            role: Role::Architect,
            slot: Some("opus".into()),
        });
        let unbound = member("sonnet", Role::Architect);
        let rows: Vec<(&Caller, Action, bool)> = vec![
            (&lead, Action::Spawn, true),
            (&arch, Action::Spawn, false),
            (&work, Action::Spawn, false),
            (&op, Action::Spawn, true),
            (&nm, Action::Spawn, false),
            (&lead, Action::Stop, true),
            (&arch, Action::Stop, false),
            (&work, Action::Stop, false),
            (&nm, Action::Stop, false),
            (&lead, Action::Drain, true),
            (&arch, Action::Drain, false),
            (&work, Action::Drain, false),
            (&lead, Action::Send, true),
            (&arch, Action::Send, true),
            (&work, Action::Send, false),
            (&op, Action::Send, true),
            (&lead, Action::SendRemote, true),
            (&arch, Action::SendRemote, false),
            (&work, Action::SendRemote, false),
            (&op, Action::SendRemote, false),
            (&nm, Action::SendRemote, false),
            (&nm, Action::Send, false),
            (&work, Action::Reply { owner: &w1 }, true),
            (&lead, Action::Reply { owner: &w1 }, false),
            (&arch, Action::Reply { owner: &w1 }, false),
            (&op, Action::Reply { owner: &w1 }, false),
            (&nm, Action::Reply { owner: &w1 }, false),
            (&work, Action::Ask { lead: Some(&leadn) }, true),
            (&arch, Action::Ask { lead: Some(&leadn) }, true),
            (&work, Action::Ask { lead: None }, false),
            (&lead, Action::Ask { lead: Some(&leadn) }, false),
            (&op, Action::Ask { lead: Some(&leadn) }, false),
            (&nm, Action::Ask { lead: Some(&leadn) }, false),
            (&lead, Action::Read, true),
            (&arch, Action::Read, true),
            (&work, Action::Read, true),
            (&op, Action::Read, true),
            (&nm, Action::Read, false),
            (&nm, Action::WhoAmI, true),
            (&work, Action::WhoAmI, true),
            // One ticket or message: its two parties and the operator.
            (
                &work,
                Action::ReadOwn {
                    from: &from_lead,
                    to: &w1,
                },
                true,
            ),
            (
                &lead,
                Action::ReadOwn {
                    from: &from_lead,
                    to: &w1,
                },
                true,
            ),
            (
                &arch,
                Action::ReadOwn {
                    from: &from_lead,
                    to: &w1,
                },
                false,
            ),
            (
                &op,
                Action::ReadOwn {
                    from: &from_op,
                    to: &w1,
                },
                true,
            ),
            (
                &lead,
                Action::ReadOwn {
                    from: &from_op,
                    to: &w1,
                },
                false,
            ),
            (
                &nm,
                Action::ReadOwn {
                    from: &from_lead,
                    to: &w1,
                },
                false,
            ),
            // A screen's text: its member and the operator.
            (&work, Action::Screen { member: &w1 }, true),
            (&op, Action::Screen { member: &w1 }, true),
            (&lead, Action::Screen { member: &w1 }, false),
            (&arch, Action::Screen { member: &w1 }, false),
            (&nm, Action::Screen { member: &w1 }, false),
            // Decisions: the primary decides, an architect bound to a slot takes positions;
            // the operator is not a participant.
            (&lead, Action::Decide, true),
            (&arch, Action::Decide, false),
            (&work, Action::Decide, false),
            (&op, Action::Decide, false),
            (&nm, Action::Decide, false),
            (&arch, Action::Position, true),
            (&unbound, Action::Position, false),
            (&lead, Action::Position, false),
            (&work, Action::Position, false),
            (&op, Action::Position, false),
            (&nm, Action::Position, false),
            // Each member writes its own drift log and signals its own status.
            (&lead, Action::DriftWrite, true),
            (&arch, Action::DriftWrite, true),
            (&work, Action::DriftWrite, true),
            (&op, Action::DriftWrite, false),
            (&nm, Action::DriftWrite, false),
            (&work, Action::Signal, true),
            (&lead, Action::Signal, true),
            (&op, Action::Signal, false),
            (&nm, Action::Signal, false),
            // Terminals and administration: the operator alone.
            (&op, Action::Terminal, true),
            (&lead, Action::Terminal, false),
            (&work, Action::Terminal, false),
            (&nm, Action::Terminal, false),
            (&op, Action::Admin, true),
            (&lead, Action::Admin, false),
            (&arch, Action::Admin, false),
            (&nm, Action::Admin, false),
        ];
        // An unresolved caller: refused everything but who it is.
        let unresolved = Caller::Unresolved {
            pid: Some(9),
            why: "its ancestry breaks off".into(),
        };
        let every: Vec<Action> = rows.iter().map(|(_, a, _)| a.clone()).collect();
        for a in &every {
            let allowed = matches!(a, Action::WhoAmI);
            assert_eq!(authorize(&unresolved, a, "call").is_ok(), allowed, "{a:?}");
        }
        for (caller, action, allowed) in rows {
            let got = authorize(caller, &action, "call");
            assert_eq!(got.is_ok(), allowed, "{caller:?} {action:?}: {got:?}");
            if let Err(e) = got {
                assert_eq!(e.rule.as_deref(), Some(action.rule()));
                assert_eq!(e.kind, ErrorKind::Forbidden);
                assert!(!e.accepted.is_empty());
            }
        }
    }

    /// What each caller sees of a message in someone's queue or receipt, as data: (caller,
    /// from, to, body shown, screen excerpt of `to` shown). A queue's bodies follow READ (the
    /// parties and the operator); a screen excerpt follows ATTACH (the member and the
    /// operator), even for the message's sender.
    #[test]
    fn bodies_and_screen_excerpts() {
        let lead = member("lead", Role::Primary);
        let w1c = member("w1", Role::Worker);
        let w2c = member("w2", Role::Worker);
        let arch = Caller::Member(MemberIdentity {
            name: MemberName::new("opus").unwrap(),
            role: Role::Architect,
            slot: Some("opus".into()),
        });
        let op = Caller::Operator;
        let nm = Caller::NotMember { pid: Some(4) };
        let un = Caller::Unresolved {
            pid: Some(9),
            why: "gone".into(),
        };
        let leadn = MemberName::new("lead").unwrap();
        let w1 = MemberName::new("w1").unwrap();
        let by_op = Party::Operator;
        let by_w1 = Party::Member(w1.clone());
        let by_lead = Party::Member(leadn.clone());
        let rows: Vec<(&Caller, &Party, &MemberName, bool, bool)> = vec![
            // The operator's message in the lead's queue: a worker sees neither.
            (&w1c, &by_op, &leadn, false, false),
            (&w2c, &by_op, &leadn, false, false),
            (&arch, &by_op, &leadn, false, false),
            (&lead, &by_op, &leadn, true, true),
            (&op, &by_op, &leadn, true, true),
            (&nm, &by_op, &leadn, false, false),
            (&un, &by_op, &leadn, false, false),
            // w1 asked the lead: w1 sees its own message's body, not the lead's screen.
            (&w1c, &by_w1, &leadn, true, false),
            (&w2c, &by_w1, &leadn, false, false),
            (&lead, &by_w1, &leadn, true, true),
            // The lead's message to w1: the lead (its sender) sees the body, not w1's screen.
            (&lead, &by_lead, &w1, true, false),
            (&w1c, &by_lead, &w1, true, true),
            (&w2c, &by_lead, &w1, false, false),
            (&op, &by_lead, &w1, true, true),
        ];
        for (caller, from, to, body, screen) in rows {
            assert_eq!(
                body_visible(caller, from, to),
                body,
                "body of {from} -> {to} for {caller:?}"
            );
            assert_eq!(
                screen_visible(caller, to),
                screen,
                "screen of {to} for {caller:?}"
            );
        }
    }

    #[test]
    fn coordinator_gate() {
        assert!(coordinator_row_visible(&member("lead", Role::Primary)));
        assert!(!coordinator_row_visible(&member("a", Role::Architect)));
        assert!(!coordinator_row_visible(&member("w", Role::Worker)));
        assert!(!coordinator_row_visible(&Caller::NotMember { pid: None }));
        assert!(coordinator_row_visible(&Caller::Operator));
    }
}
