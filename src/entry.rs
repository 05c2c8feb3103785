//! The program's entry: parses the command line and runs the daemon, the shim, the sim agent,
//! the demo, or a client subcommand. It lives in the library, not in `main.rs`, so every async
//! path is compiled once, here: a `block_on` in the binary would make the binary crate compile
//! the whole daemon's futures a second time (release builds do not share generics across
//! crates). Owns process set-up (logging, the runtime, exit codes); must never hold fleet logic.

use std::process::ExitCode;

use crate::cli::{Cli, Cmd, ConfigCmd, DriftCmd, LedgerCmd};
use clap::Parser;
use tracing_subscriber::EnvFilter;

/// Logs go to stderr (stdout carries MCP for `fleetd mcp`). `RUST_LOG` overrides the default;
/// rmcp's own logs are off by default because it reports every agent disconnect as an error
/// (`RUST_LOG=info,rmcp=debug` shows them).
fn init_tracing(default: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("{default},rmcp=off")));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person's terminal: a log file or the journal gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// A closed stdout (`fleetd list | head`) ends the command quietly: Rust ignores SIGPIPE, so the
/// next print panics with EPIPE; that one panic exits 0 without a backtrace. Every other panic is
/// reported as before.
fn quiet_on_closed_stdout() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(0);
        }
        previous(info);
    }));
}

/// Run the program with this process's arguments; what `main` returns.
pub fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    let result: anyhow::Result<i32> = (|| match cli.cmd {
        Cmd::PtyHost(args) => crate::term::run_host(args).map(|_| 0),
        Cmd::SimAgent(args) => crate::harness::sim::run(args).map(|_| 0),
        Cmd::Probe(args) => crate::harness::probe::run(args).map(|_| 0),
        Cmd::Config {
            cmd: ConfigCmd::Default,
        } => {
            print!("{}", fleetd_actors::config::DEFAULT_CONFIG_TOML);
            Ok(0)
        }
        Cmd::Config {
            cmd: ConfigCmd::Show { file },
        } => {
            let c = crate::daemon::load_config(file.as_deref())?;
            print!("{}", c.to_toml()?);
            Ok(0)
        }
        Cmd::Config {
            cmd: ConfigCmd::Check { file },
        } => crate::cli::config_check(file.as_deref()).map(|_| 0),
        Cmd::Ledger {
            cmd:
                LedgerCmd::Verify {
                    ref path,
                    ref key,
                    ref witness,
                    no_signatures,
                    json,
                },
        } => crate::cli::ledger_verify(path, key.as_deref(), witness, no_signatures, json),
        Cmd::Keygen { ref out } => crate::cli::keygen(out).map(|_| 0),
        Cmd::Drift {
            cmd:
                DriftCmd::Check {
                    ref kb,
                    ref reader,
                    ref now,
                    ref trust,
                    ref config,
                    json,
                },
        } => crate::cli::drift_check(kb, reader, now.as_deref(), trust, config.as_deref(), json),
        Cmd::Drift {
            cmd:
                DriftCmd::Append {
                    ref kb,
                    ref key,
                    ref identity,
                    ref kind,
                    ref baseline,
                    ref delta,
                    ref subject,
                    ref ts,
                    tick,
                    ref source,
                },
        } => crate::cli::drift_append(
            kb,
            key,
            identity,
            kind,
            baseline.clone(),
            delta.as_deref(),
            subject.clone(),
            ts.as_deref(),
            tick,
            source.clone(),
        )
        .map(|_| 0),
        Cmd::Mcp { reconnect_secs } => {
            init_tracing("warn");
            let sd = cli.state_dir.clone().ok_or_else(|| {
                anyhow::anyhow!("no state dir: pass --state-dir DIR or set FLEETD_STATE_DIR")
            })?;
            // A pipe needs no worker threads: one thread keeps the shim small.
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(crate::shim::run_stdio(
                    sd.join("mcp.sock"),
                    crate::cli::reconnect(reconnect_secs),
                ))?;
            Ok(0)
        }
        Cmd::EchoServer => {
            runtime()?.block_on(crate::harness::bench::run_echo_server())?;
            Ok(0)
        }
        Cmd::Serve { ref config } => {
            init_tracing("info");
            let sd = cli.state_dir.clone().ok_or_else(|| {
                anyhow::anyhow!("fleetd serve needs --state-dir DIR (or FLEETD_STATE_DIR)")
            })?;
            let exe = std::env::current_exe()?;
            let config = config.clone();
            runtime()?.block_on(async move {
                let d = crate::daemon::Daemon::start(&sd, config, exe).await?;
                d.run_until_signalled().await
            })
        }
        Cmd::Demo {
            work_ms,
            timeout_secs,
        } => {
            init_tracing("warn");
            runtime()?.block_on(crate::harness::demo::run(
                work_ms,
                std::time::Duration::from_secs(timeout_secs),
                cli.state_dir.clone(),
            ))?;
            Ok(0)
        }
        Cmd::Bench(args) => {
            init_tracing("warn");
            runtime()?.block_on(crate::harness::bench::run(args))?;
            Ok(0)
        }
        _ => {
            init_tracing("warn");
            runtime()?.block_on(crate::cli::run_client(cli))?;
            Ok(0)
        }
    })();
    match result {
        Ok(0) => ExitCode::SUCCESS,
        Ok(code) => ExitCode::from(code.clamp(1, 255) as u8),
        Err(e) => {
            // A refusal can quote member text: shown, never interpreted by the terminal.
            eprintln!(
                "fleetd: {}",
                fleetd_actors::sanitize::for_display(&crate::report::report(&e))
            );
            match e.downcast_ref::<crate::cli::Failed>() {
                Some(f) => ExitCode::from(f.code.max(1)),
                None => ExitCode::FAILURE,
            }
        }
    }
}
