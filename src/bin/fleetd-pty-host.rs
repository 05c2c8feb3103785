//! `fleetd-pty-host`: one member's PTY host as a small program of its own (the same code as
//! `fleetd pty-host`, see `fleetd::term`). A fleet runs one per member, so its footprint is
//! multiplied by the fleet: this binary links only the host (no HTTP, MCP, QUIC, CLI or
//! daemon), which keeps its private memory small and its pages shared between hosts. The daemon
//! starts it when it sits beside the `fleetd` binary, and falls back to `fleetd pty-host`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

/// The per-member PTY host (started by the fleetd daemon, not by hand).
#[derive(Parser)]
#[command(name = "fleetd-pty-host", version)]
struct Cli {
    #[command(flatten)]
    host: fleetd::term::HostArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match fleetd::term::run_host(cli.host) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "fleetd-pty-host: {}",
                fleetd_actors::sanitize::for_display(&fleetd::report::report(&e))
            );
            ExitCode::FAILURE
        }
    }
}
