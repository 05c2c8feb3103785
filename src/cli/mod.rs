//! The command line: `fleetd serve` runs the daemon; every other subcommand is a thin client of
//! its REST API (found through `--state-dir` or `FLEETD_STATE_DIR`), printing readable tables
//! for people and JSON (`--json`) for scripts.
//!
//! Owns argument parsing and presentation. Must never decide anything the daemon decides.
//!
//! Rooms: `args` (the subcommands and flags), `run` (the client subcommands and `attach`),
//! `views` (the daemon's answers, typed), `print` (human output from them), `offline` (what
//! runs without a daemon); this file holds the refusal wording shared by all of them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::client::{Client, ClientError};
use fleetd_actors::types::wire_name;

/// Human output. Member text (names aside, everything an agent wrote: replies, notes, exit
/// reasons, screens) never reaches the operator's terminal as control sequences: it is shown
/// through [`fleetd_actors::sanitize::for_display`]. `--json` output stays exact.
macro_rules! say {
    () => {
        println!()
    };
    ($($t:tt)*) => {
        println!("{}", fleetd_actors::sanitize::for_display(&format!($($t)*)))
    };
}

/// [`say!`] into a `String` instead of stdout: the printers render into a buffer (so their
/// output can be tested), and the command prints it.
macro_rules! put {
    ($out:expr) => {
        $out.push('\n')
    };
    ($out:expr, $($t:tt)*) => {{
        $out.push_str(&fleetd_actors::sanitize::for_display(&format!($($t)*)));
        $out.push('\n');
    }};
}

mod args;
mod offline;
mod print;
mod run;
#[cfg(test)]
mod samples;
mod views;

pub use args::*;
pub use offline::*;
use print::*;
pub use run::run_client;

/// A command that ran and failed in a way with its own exit status (e.g. `send --wait` that
/// got no reply in time: 3). The message goes to stderr as any error's does.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failed {
    pub code: u8,
    pub message: String,
}

impl Failed {
    pub fn new(code: u8, message: String) -> Self {
        Failed { code, message }
    }
}

fn state_dir(cli: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    cli.clone()
        .context("no state dir: pass --state-dir DIR or set FLEETD_STATE_DIR")
}

fn client(cli: &Option<PathBuf>) -> anyhow::Result<Client> {
    Ok(Client::new(&state_dir(cli)?))
}

/// An API refusal, printed as the daemon worded it, addressed to the operator: the fleet tools
/// the CLI has a command for are named by that command (`fleetd list`, not `fleet_list`).
fn api(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::Api(mut f) => {
            f.refused = for_operator(&f.refused);
            f.accepted = for_operator(&f.accepted);
            anyhow::Error::new(f)
        }
        other => anyhow::Error::new(other),
    }
}

/// `fleet_X` -> `` `fleetd X` `` for the tools the CLI has a command of the same name for.
fn for_operator(text: &str) -> String {
    const SAME: [&str; 8] = [
        "list", "send", "stop", "spawn", "status", "poll", "ack", "reply",
    ];
    let mut out = text.to_string();
    for c in SAME {
        let tool = format!("fleet_{c}");
        let mut from = 0;
        while let Some(i) = out[from..].find(&tool).map(|i| i + from) {
            let end = i + tool.len();
            let word_ends = out[end..]
                .chars()
                .next()
                .is_none_or(|ch| !(ch.is_alphanumeric() || ch == '_'));
            let cmd = format!("`fleetd {c}`");
            if word_ends {
                // A tool name already in backticks keeps one pair.
                let (i, end) = if out[..i].ends_with('`') && out[end..].starts_with('`') {
                    (i - 1, end + 1)
                } else {
                    (i, end)
                };
                out.replace_range(i..end, &cmd);
                from = i + cmd.len();
            } else {
                from = end;
            }
        }
    }
    out
}

/// How long the shim keeps retrying a daemon that is down.
pub fn reconnect(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::for_operator;

    /// Every visible command, argument and flag says what it is in `--help`.
    #[test]
    fn every_argument_has_help_text() {
        use clap::CommandFactory;
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for s in c.get_subcommands() {
                if s.is_hide_set() {
                    continue;
                }
                let p = format!("{path} {}", s.get_name());
                if s.get_about().is_none() && s.get_name() != "help" {
                    missing.push(p.clone());
                }
                walk(s, &p, missing);
            }
        }
        let mut missing = vec![];
        walk(&super::Cli::command(), "fleetd", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn refusals_name_the_cli_command_not_the_tool() {
        assert_eq!(
            for_operator("a member name from fleet_list"),
            "a member name from `fleetd list`"
        );
        assert_eq!(
            for_operator("fleet_send to `w1`; see `fleet_status`"),
            "`fleetd send` to `w1`; see `fleetd status`"
        );
        // Tools without a command of that name, and longer words, stay as they are.
        assert_eq!(
            for_operator("fleet_ask, fleet_sendx, fleet_decision"),
            "fleet_ask, fleet_sendx, fleet_decision"
        );
    }
}
