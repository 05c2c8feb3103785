//! `fleetd-pty-host`: one member's PTY host as a small program of its own (the same code as
//! `fleetd pty-host`, see `fleetd::term::host`). A fleet runs one per member, so its footprint is
//! multiplied by the fleet: this binary links only the host (no HTTP, MCP, QUIC, CLI or
//! daemon, no tokio: the host is one `poll(2)` loop, and no clap: its arguments are the
//! daemon's, read by `HostArgs::parse_from`), which keeps its private memory small and its pages
//! shared between hosts. The daemon starts it when
//! it sits beside the `fleetd` binary, and falls back to `fleetd pty-host`.

#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = match fleetd::term::HostArgs::parse_from(std::env::args_os().skip(1)) {
        Ok(a) => a,
        Err(why) => {
            eprintln!(
                "fleetd-pty-host: {} (it is started by the fleetd daemon, not by hand)",
                fleetd_actors::sanitize::for_display(&why)
            );
            return ExitCode::from(2);
        }
    };
    match fleetd::term::run_host(args) {
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
