//! An agent's own session id, the one `fleetd spawn --resume` continues: what each CLI's ids
//! look like, and the one check an id passes before it is kept (from a hook) and again before
//! it is put on a command line (a resume).
//!
//! A member reports its session id from its own hooks, so the id is member text, and the
//! operator's later resume puts it on the agent's command line. An id such as
//! `--dangerously-skip-permissions` (Claude Code) or `--yolo` (Gemini CLI) would turn the
//! resumed agent's approvals off if it were passed as a bare argument. So an id is accepted only
//! in its CLI's own format (verified against each CLI, docs/AGENTS.md): Claude Code, Codex and
//! Gemini CLI a UUID, opencode `ses_` and 26 letters and digits; a profile with no agent CLI a
//! plain token (letters and digits first, then letters, digits, `.`, `_`, `:`, `-`, at most 128).
//! None of these can start with `-` or hold whitespace or a control character. The built-in
//! profiles then pass it glued to its option (`--resume=ID`, `--session=ID`) or after `--`
//! (`codex resume ... -- ID`), never as a bare argument. Pure.

use crate::config::AgentKind;
use crate::error::FleetError;
use crate::types::truncate;

/// The longest id of a profile with no agent CLI.
pub const MAX_LEN: usize = 128;

/// What a session id of `agent` looks like, for refusals and docs.
pub fn accepted(agent: Option<AgentKind>) -> &'static str {
    match agent {
        Some(AgentKind::Claude) => {
            "a Claude Code session id: a UUID (8-4-4-4-12 hex digits, e.g. 0b1c2d3e-1111-4222-8333-444455556666)"
        }
        Some(AgentKind::Codex) => {
            "a Codex session id: a UUID (8-4-4-4-12 hex digits, e.g. 0b1c2d3e-1111-7222-8333-444455556666)"
        }
        Some(AgentKind::Gemini) => {
            "a Gemini CLI session id: a UUID (8-4-4-4-12 hex digits, e.g. 0b1c2d3e-1111-4222-8333-444455556666)"
        }
        Some(AgentKind::Opencode) => {
            "an opencode session id: `ses_` and 26 letters or digits (e.g. ses_1f2e3d4c5b6aAbCdEfGhIjKlMn)"
        }
        None => {
            "a session id of 1-128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or digit"
        }
    }
}

fn is_uuid(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

fn is_opencode(id: &str) -> bool {
    id.strip_prefix("ses_")
        .is_some_and(|rest| rest.len() == 26 && rest.bytes().all(|c| c.is_ascii_alphanumeric()))
}

fn is_token(id: &str) -> bool {
    id.len() <= MAX_LEN
        && id.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(&c))
}

/// Whether `id` is a session id of `agent` (a profile's agent CLI; None: a profile without one).
pub fn valid(agent: Option<AgentKind>, id: &str) -> bool {
    match agent {
        Some(AgentKind::Claude | AgentKind::Codex | AgentKind::Gemini) => is_uuid(id),
        Some(AgentKind::Opencode) => is_opencode(id),
        None => is_token(id),
    }
}

/// How an id is shown in a refusal: bounded, controls escaped (it is member text).
fn shown(id: &str) -> String {
    format!("{:?}", truncate(id, 60))
}

/// Check a session id a member of profile `profile` (whose agent CLI is `agent`) reported or
/// is to be resumed with. The refusal names the id, why, and what would be accepted.
pub fn check(profile: &str, agent: Option<AgentKind>, id: &str) -> Result<(), FleetError> {
    if valid(agent, id) {
        return Ok(());
    }
    let why = if id.starts_with('-') {
        "it starts with `-`, so the agent CLI would read it as an option"
    } else if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        "it holds whitespace or a control character"
    } else {
        "it is not in the format that CLI gives its sessions"
    };
    Err(FleetError::invalid(
        format!("session id {} (profile `{profile}`)", shown(id)),
        why,
        accepted(agent),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KINDS: [Option<AgentKind>; 5] = [
        Some(AgentKind::Claude),
        Some(AgentKind::Codex),
        Some(AgentKind::Gemini),
        Some(AgentKind::Opencode),
        None,
    ];

    #[test]
    fn each_cli_takes_its_own_format() {
        let uuid = "0b1c2d3e-1111-4222-8333-444455556666";
        let v7 = "019a7f3c-5e21-7c40-9d2b-0123456789AB";
        let ses = "ses_1f2e3d4c5b6aAbCdEfGhIjKlMn";
        for (agent, id, ok) in [
            (Some(AgentKind::Claude), uuid, true),
            (Some(AgentKind::Codex), v7, true),
            (Some(AgentKind::Gemini), uuid, true),
            (Some(AgentKind::Opencode), ses, true),
            (None, "sess-9", true),
            (None, uuid, true),
            (Some(AgentKind::Claude), ses, false),
            (Some(AgentKind::Gemini), "latest", false),
            (Some(AgentKind::Gemini), "5", false),
            (Some(AgentKind::Codex), "my-thread-name", false),
            (Some(AgentKind::Opencode), uuid, false),
            (Some(AgentKind::Opencode), "ses_short", false),
            (
                Some(AgentKind::Claude),
                "0b1c2d3e-1111-4222-8333-44445555666g",
                false,
            ),
            (
                Some(AgentKind::Claude),
                "0b1c2d3e11114222833344445555666600",
                false,
            ),
            (None, "", false),
            (None, &"a".repeat(MAX_LEN + 1), false),
            (None, "../../etc/passwd", false),
        ] {
            assert_eq!(valid(agent, id), ok, "{agent:?} {id}");
            assert_eq!(check("p", agent, id).is_ok(), ok, "{agent:?} {id}");
        }
    }

    #[test]
    fn the_refusal_names_the_id_why_and_what_would_do() {
        let e = check(
            "claude",
            Some(AgentKind::Claude),
            "--dangerously-skip-permissions",
        )
        .unwrap_err();
        assert!(e.refused.contains("--dangerously-skip-permissions"), "{e}");
        assert!(e.refused.contains("claude"), "{e}");
        assert!(e.why.contains("starts with `-`"), "{e}");
        assert!(e.accepted.contains("UUID"), "{e}");
        let e = check("gemini", Some(AgentKind::Gemini), "a\u{1b}[2J b").unwrap_err();
        assert!(!e.refused.contains('\u{1b}'), "controls are escaped: {e}");
        assert!(e.why.contains("control"), "{e}");
        let e = check("opencode", Some(AgentKind::Opencode), "latest").unwrap_err();
        assert!(e.accepted.contains("ses_"), "{e}");
    }

    proptest! {
        /// Whatever the profile, an id that starts with `-` or holds whitespace or a control
        /// character is refused: it could be read as an option, or split into several.
        #[test]
        fn an_option_like_or_spaced_id_is_refused_for_every_profile(
            body in "\\PC{0,40}",
            bad in prop_oneof![
                Just(' '), Just('\t'), Just('\n'), Just('\r'), Just('\u{0}'), Just('\u{1b}'),
                Just('\u{7f}'), Just('\u{85}'), Just('\u{a0}'), Just('\u{2028}'), Just('\u{3000}'),
            ],
            at in 0usize..64,
        ) {
            let dashed = format!("-{body}");
            let mut spaced: Vec<char> = body.chars().collect();
            spaced.insert(at.min(spaced.len()), bad);
            let spaced: String = spaced.into_iter().collect();
            for agent in KINDS {
                prop_assert!(check("p", agent, &dashed).is_err(), "{agent:?} {dashed:?}");
                prop_assert!(check("p", agent, &spaced).is_err(), "{agent:?} {spaced:?}");
            }
        }

        /// Every id any profile accepts is one argument that no CLI reads as an option: it
        /// starts with a letter or digit and holds only letters, digits and `. _ : -`.
        #[test]
        fn an_accepted_id_is_a_plain_token(id in "[ -~]{0,40}|[0-9a-f-]{36}|ses_[0-9A-Za-z]{26}") {
            for agent in KINDS {
                if valid(agent, &id) {
                    prop_assert!(id.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric()));
                    prop_assert!(id.bytes().all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(&c)));
                }
            }
        }
    }
}
