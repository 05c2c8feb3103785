//! What an agent's hook means: the typed signal a `fleetd signal` carries.
//!
//! Owns the mapping from what agent CLIs report (a state named on the command line, or a hook's
//! JSON payload as Claude Code, Gemini CLI, Codex's `notify` and fleetd's opencode plugin send
//! it) to a [`Signal`] for the member's slot and the native session id it names (checked by
//! `session.rs` for the member's CLI before it is kept for resume).
//! An event it does not know means nothing (no status change), never a guess. Pure: JSON in,
//! typed values out. Must never decide identity (the daemon takes that from the process tree)
//! and never trust a payload to make a permission dialog injectable.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::FleetError;
use crate::slot::state::Signal;

/// The most of a hook's prompt text kept (the header that identifies a paste is its first line).
pub const PROMPT_KEPT: usize = 512;

/// The states `fleetd signal STATE` accepts, for refusals and `--help`.
pub const STATES: &str = "working, idle, permission, question, exited (blocked = permission)";

/// What one hook report says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// The hook event as the CLI named it (for logs and events).
    pub event: String,
    /// The status change it means; None: it changes nothing.
    #[serde(skip)]
    pub signal: Option<Signal>,
    /// The session id the payload names, as reported (bounded, unchecked): kept for
    /// `fleetd spawn --resume` only if `session::check` accepts it for the member's agent CLI.
    pub session_id: Option<String>,
    /// A session start that resumed a conversation (`source: resume`): a CLI that does not give
    /// the model the context its session start was answered with again (Gemini CLI) is given
    /// its charter at the next turn instead (`fleetd signal --hook --context-on-resume`).
    #[serde(default)]
    pub resumed: bool,
}

/// `fleetd signal STATE`.
pub fn from_state(state: &str) -> Result<Signal, FleetError> {
    Ok(match state.trim().to_ascii_lowercase().as_str() {
        "working" | "busy" => Signal::Working,
        "idle" => Signal::Idle { turn: None },
        // `blocked` was once injectable; a dialog nobody classified is a permission dialog.
        "permission" | "blocked" => Signal::Permission,
        "question" => Signal::Question,
        "exited" | "exiting" => Signal::Closing,
        "turn-started" | "prompt" => Signal::TurnStarted { prompt: None },
        other => {
            return Err(FleetError::invalid(
                format!("signal `{}`", crate::types::truncate(other, 40)),
                "it is not an agent state",
                STATES,
            ));
        }
    })
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| crate::types::truncate(s, PROMPT_KEPT))
}

/// The most of a reported session id kept for its check (no CLI's id is near this long).
pub const SESSION_KEPT: usize = 256;

/// The session id the payload names, as reported (bounded), or nothing. It is member text: the
/// daemon keeps it only once `session::check` accepts it for the member's agent CLI.
fn session(v: &Value) -> Option<String> {
    ["session_id", "sessionId", "thread-id", "thread_id"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .filter(|s| !s.is_empty())
        .map(|s| s.chars().take(SESSION_KEPT).collect())
}

/// The last user message of a Codex `agent-turn-complete` notification.
fn last_input(v: &Value) -> Option<String> {
    let msgs = v
        .get("input-messages")
        .or_else(|| v.get("input_messages"))?;
    let last = msgs.as_array()?.last()?;
    last.as_str()
        .map(|s| crate::types::truncate(s, PROMPT_KEPT))
}

/// A hook's JSON payload.
pub fn from_payload(v: &Value) -> Result<Report, FleetError> {
    let event = v
        .get("hook_event_name")
        .or_else(|| v.get("hookEventName"))
        .or_else(|| v.get("type"))
        .or_else(|| v.get("event"))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            FleetError::invalid(
                "hook payload",
                "it names no event (no hook_event_name, type or event field)",
                "the JSON object an agent CLI's hook sends on stdin (or Codex's notify argument)",
            )
        })?;
    let kind = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
    let signal = match event {
        // A turn starts: Claude Code's UserPromptSubmit, Gemini CLI's BeforeAgent, fleetd's own.
        "UserPromptSubmit" | "BeforeAgent" | "turn-started" => Some(Signal::TurnStarted {
            prompt: text(v, "prompt"),
        }),
        // A turn ends.
        // A turn ends: Claude Code's Stop (StopFailure after an API error), Gemini CLI's
        // AfterAgent, Codex's Stop and Interrupt (Esc), fleetd's own.
        "Stop" | "StopFailure" | "AfterAgent" | "Interrupt" | "idle" => {
            Some(Signal::Idle { turn: None })
        }
        "agent-turn-complete" => Some(Signal::Idle {
            turn: last_input(v),
        }),
        // Work goes on (a tool runs, so any dialog before it was answered).
        "PreToolUse" | "PostToolUse" | "PostToolUseFailure" | "BeforeTool" | "AfterTool"
        | "working" => Some(Signal::Working),
        "PermissionRequest" | "permission" => Some(Signal::Permission),
        "question" => Some(Signal::Question),
        "Notification" => match kind("notification_type") {
            "permission_prompt" | "ToolPermission" => Some(Signal::Permission),
            "idle_prompt" => Some(Signal::Idle { turn: None }),
            // An MCP server's form: a paste would fill it in. Not injectable.
            "elicitation_dialog" => Some(Signal::Permission),
            _ => None,
        },
        "SessionStart" | "session-start" => Some(Signal::SessionStart),
        "SessionEnd" | "exited" => Some(Signal::Closing),
        _ => None,
    };
    let resumed = matches!(event, "SessionStart" | "session-start") && kind("source") == "resume";
    Ok(Report {
        event: crate::types::truncate(event, 64),
        signal,
        session_id: session(v),
        resumed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states() {
        assert_eq!(from_state("idle").unwrap(), Signal::Idle { turn: None });
        assert_eq!(from_state("blocked").unwrap(), Signal::Permission);
        assert_eq!(from_state("question").unwrap(), Signal::Question);
        assert_eq!(from_state("exited").unwrap(), Signal::Closing);
        let e = from_state("sleepy").unwrap_err();
        assert!(e.accepted.contains("permission"), "{e}");
    }

    #[test]
    fn payloads_table() {
        let sid = "0b7c3a55-1f7e-4a1c-9b0e-4c5b7b7a9e11";
        let cases: Vec<(Value, Option<Signal>)> = vec![
            (
                json!({"hook_event_name": "UserPromptSubmit", "session_id": sid, "prompt": "[fleet ticket t-1 from lead]\nhi"}),
                Some(Signal::TurnStarted {
                    prompt: Some("[fleet ticket t-1 from lead]\nhi".into()),
                }),
            ),
            (
                json!({"hook_event_name": "Stop", "session_id": sid}),
                Some(Signal::Idle { turn: None }),
            ),
            (
                json!({"hook_event_name": "Notification", "notification_type": "permission_prompt", "session_id": sid}),
                Some(Signal::Permission),
            ),
            (
                json!({"hook_event_name": "Notification", "notification_type": "idle_prompt", "session_id": sid}),
                Some(Signal::Idle { turn: None }),
            ),
            (
                json!({"hook_event_name": "Notification", "notification_type": "auth_success"}),
                None,
            ),
            (
                json!({"hook_event_name": "PermissionRequest", "tool_name": "Bash"}),
                Some(Signal::Permission),
            ),
            (
                json!({"hook_event_name": "PostToolUse"}),
                Some(Signal::Working),
            ),
            (
                json!({"hook_event_name": "SessionStart", "source": "startup", "session_id": sid}),
                Some(Signal::SessionStart),
            ),
            (
                json!({"hook_event_name": "SessionEnd"}),
                Some(Signal::Closing),
            ),
            (json!({"hook_event_name": "PreCompact"}), None),
            (
                json!({"type": "agent-turn-complete", "thread-id": sid, "input-messages": ["a", "[fleet ticket t-2 from lead]\nx"]}),
                Some(Signal::Idle {
                    turn: Some("[fleet ticket t-2 from lead]\nx".into()),
                }),
            ),
        ];
        for (payload, want) in cases {
            let r = from_payload(&payload).unwrap();
            assert_eq!(r.signal, want, "{payload}");
        }
        let r = from_payload(&json!({"hook_event_name": "Stop", "session_id": sid})).unwrap();
        assert_eq!(r.session_id.as_deref(), Some(sid));
    }

    #[test]
    fn hostile_payloads_are_bounded_or_refused() {
        assert!(from_payload(&json!({"prompt": "x"})).is_err());
        let r = from_payload(&json!({
            "hook_event_name": "UserPromptSubmit",
            "session_id": "../../etc/passwd\u{1b}",
            "prompt": "p".repeat(100_000),
        }))
        .unwrap();
        // Named as reported; no profile's check accepts it, so it is never kept.
        let id = r.session_id.clone().unwrap();
        for agent in crate::config::AgentKind::ALL
            .map(Some)
            .into_iter()
            .chain([None])
        {
            assert!(crate::session::check("p", agent, &id).is_err(), "{agent:?}");
        }
        let long =
            from_payload(&json!({"hook_event_name": "Stop", "session_id": "x".repeat(100_000)}))
                .unwrap();
        assert!(long.session_id.unwrap().chars().count() <= SESSION_KEPT);
        let Some(Signal::TurnStarted { prompt: Some(p) }) = r.signal else {
            panic!("{r:?}")
        };
        assert!(p.len() <= PROMPT_KEPT + 4);
        // No payload makes a dialog injectable: the only injectable blocked is `question`.
        for ev in ["Notification", "PermissionRequest", "Stop", "SessionStart"] {
            for nt in ["permission_prompt", "idle_prompt", "question", "injectable"] {
                let r = from_payload(
                    &json!({"hook_event_name": ev, "notification_type": nt, "injectable": true}),
                )
                .unwrap();
                assert_ne!(r.signal, Some(Signal::Question), "{ev}/{nt}");
            }
        }
    }

    /// Only a session start that resumed a conversation says so (the charter is then owed at
    /// the next turn, for a CLI that does not replay what its session start was given).
    #[test]
    fn a_resumed_session_start_is_told_apart() {
        for (payload, resumed) in [
            (
                json!({"hook_event_name": "SessionStart", "source": "resume"}),
                true,
            ),
            (
                json!({"hook_event_name": "SessionStart", "source": "startup"}),
                false,
            ),
            (
                json!({"hook_event_name": "SessionStart", "source": "clear"}),
                false,
            ),
            (
                json!({"hook_event_name": "BeforeAgent", "source": "resume"}),
                false,
            ),
            (json!({"hook_event_name": "SessionStart"}), false),
        ] {
            assert_eq!(
                from_payload(&payload).unwrap().resumed,
                resumed,
                "{payload}"
            );
        }
    }
}
