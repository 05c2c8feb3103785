//! The `fleetd` binary. Everything is in the library (`fleetd::entry`), so that it is compiled
//! once; see there.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    fleetd::entry::main()
}
