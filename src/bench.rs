//! `fleetd bench`: latency of the fleet's two hot paths, each beside a baseline measured in the
//! same run on the same machine (this machine is shared and noisy: compare ratios, not
//! absolutes).
//!
//! - MCP tool round trip through the shim (`fleetd mcp` on stdio -> daemon -> back), against a
//!   bare rmcp echo server through the same stdio path (`fleetd echo-server`).
//! - `fleet_send` -> the message visible in the target's PTY (REST send -> ticket -> durable
//!   queue -> injector -> PTY host -> the agent echoes it -> back through the slot), against a
//!   raw PTY echo (`cat` in a portable-pty).
//!
//! Owns measurement only.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use fleetd_actors::events::EventKind;
use fleetd_actors::types::{Caller, Status};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, ServerCapabilities, ServerConfig};
use rmcp::transport::TokioChildProcess;
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use serde_json::{Value, json};

use crate::client::Client;
use crate::daemon::Daemon;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// What to measure: `fleet` (MCP and send paths) or `ledger` (group-committed appends).
    #[arg(value_enum, default_value_t = Which::Fleet)]
    pub which: Which,
    /// Samples per measurement.
    #[arg(long, default_value_t = 500)]
    pub iterations: usize,
    /// Ledger: seconds per writer count.
    #[arg(long, default_value_t = 3)]
    pub seconds: u64,
    /// Samples for the send -> PTY path (each waits for the agent to be idle again).
    #[arg(long, default_value_t = 200)]
    pub send_iterations: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Which {
    Fleet,
    Ledger,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    pub text: String,
}

/// The baseline: a bare rmcp server with one tool.
#[derive(Clone)]
pub struct Echo {
    tool_router: ToolRouter<Echo>,
}

#[tool_router]
impl Echo {
    pub fn new() -> Self {
        Echo {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Echo the text back.")]
    async fn echo(&self, Parameters(a): Parameters<EchoArgs>) -> String {
        a.text
    }
}

impl Default for Echo {
    fn default() -> Self {
        Self::new()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

pub async fn run_echo_server() -> anyhow::Result<()> {
    let svc = Echo::new().serve(rmcp::transport::stdio()).await?;
    svc.waiting().await?;
    Ok(())
}

#[derive(Debug, serde::Serialize)]
pub struct Stats {
    pub name: String,
    pub n: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub mean_us: f64,
    pub per_sec: f64,
}

fn stats(name: &str, mut v: Vec<Duration>) -> Stats {
    v.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let n = v.len().max(1);
    let p = |q: f64| us(v[((n as f64 * q).ceil() as usize).clamp(1, n) - 1]);
    let mean = v.iter().map(|d| us(*d)).sum::<f64>() / n as f64;
    Stats {
        name: name.into(),
        n: v.len(),
        p50_us: p(0.50),
        p99_us: p(0.99),
        mean_us: mean,
        per_sec: 1e6 / mean,
    }
}

async fn mcp_client(
    args: &[&str],
    env: &[(&str, String)],
) -> anyhow::Result<rmcp::service::RunningService<rmcp::RoleClient, ()>> {
    let exe = std::env::current_exe()?;
    let mut cmd = tokio::process::Command::new(exe);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (t, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    Ok(().serve(t).await?)
}

async fn time_calls(
    svc: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &str,
    args: Value,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut p = CallToolRequestParams::new(tool.to_string());
    if let Value::Object(m) = args {
        p = p.with_arguments(m);
    }
    for _ in 0..20 {
        svc.call_tool(p.clone()).await?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        svc.call_tool(p.clone()).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// A raw PTY round trip: write a line to `cat` in a PTY and wait for its echo.
fn pty_baseline(n: usize) -> anyhow::Result<Vec<Duration>> {
    use portable_pty::{CommandBuilder, PtySize, native_pty_system};
    let pair = native_pty_system()
        .openpty(PtySize {
            rows: 24,
            cols: 80,
            pixel_width: 0,
            pixel_height: 0,
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut child = pair
        .slave
        .spawn_command(CommandBuilder::new("cat"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(pair.slave);
    let mut r = pair
        .master
        .try_clone_reader()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut w = pair
        .master
        .take_writer()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = Vec::with_capacity(n);
    let mut buf = [0u8; 4096];
    for i in 0..n + 20 {
        let marker = format!("m{i}x\r");
        let t = Instant::now();
        w.write_all(marker.as_bytes())?;
        w.flush()?;
        let mut seen = Vec::new();
        let want = format!("m{i}x");
        while !String::from_utf8_lossy(&seen).contains(&want) {
            let k = r.read(&mut buf)?;
            anyhow::ensure!(k > 0, "cat closed");
            seen.extend_from_slice(&buf[..k]);
        }
        if i >= 20 {
            out.push(t.elapsed());
        }
    }
    let _ = child.kill();
    Ok(out)
}

/// Wait (bounded) until `member` reports idle, or (with `ticket`) until that ticket's turn has
/// been wrapped up (the sink never replies, so its tickets end with the transcript tail), so the
/// next sample does not share the disk with the last one's bookkeeping.
async fn wait_idle(
    ev: &mut tokio::sync::broadcast::Receiver<fleetd_actors::events::Event>,
    member: &str,
    ticket: Option<&str>,
) -> Result<(), tokio::time::error::Elapsed> {
    let fut = async {
        loop {
            match ev.recv().await {
                Ok(e) => match (&e.kind, ticket) {
                    (
                        EventKind::Status {
                            member: m,
                            to: Status::Idle,
                            ..
                        },
                        None,
                    ) if m.as_str() == member => return,
                    (
                        EventKind::Ticket {
                            ticket: t, state, ..
                        },
                        Some(want),
                    ) if t.to_string() == want
                        && *state != fleetd_actors::tickets::state::TicketState::Open =>
                    {
                        return;
                    }
                    _ => {}
                },
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(_) => return,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), fut).await
}

/// The floor under a durable send: a raw 200-byte append + fdatasync, and the send's own redb
/// commit (a ticket and its message, queued then delivered) through the daemon's store code, on the
/// same disk.
fn durability_baselines(
    dir: &std::path::Path,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    use fleetd_actors::injector::state::{Message, ReceiptState};
    use fleetd_actors::store::{Batch, Store};
    use fleetd_actors::tickets::state::{Desk, TicketKind};
    use fleetd_actors::types::{MemberName, MsgId, Party, TicketId};
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("fsync.bin"))?;
    let mut raw = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&[b'x'; 200])?;
        f.sync_data()?;
        raw.push(t.elapsed());
    }
    let store = Store::open(&dir.join("bench.redb"))?;
    let mut desk = Desk::new(vec![], 1, usize::MAX);
    let mut commits = Vec::with_capacity(n);
    for i in 0..n {
        let (ticket, _) = desk.open(
            TicketKind::Send,
            Party::Operator,
            MemberName::new("sink")?,
            Some(MsgId(i as u64 + 1)),
            "x",
            600_000,
            0,
        );
        let m = Message {
            id: MsgId(i as u64 + 1),
            target: MemberName::new("sink")?,
            from: Party::Operator,
            ticket: Some(TicketId(ticket.id.0)),
            body: "x".repeat(200),
            state: ReceiptState::Queued,
            queued_at: 0,
            delivered_at: None,
            settled_at: None,
            note: None,
        };
        let t = Instant::now();
        let mut delivered = m.clone();
        delivered.state = ReceiptState::Delivered;
        let next = Some(ticket.id.0 + 1);
        store.commit(&Batch {
            messages: vec![m, delivered],
            tickets: vec![ticket],
            next_ticket: next,
            ..Default::default()
        })?;
        commits.push(t.elapsed());
    }
    Ok((raw, commits))
}

/// Returns (send -> visible in the PTY, send -> REST answer, a bare REST round trip).
async fn send_to_pty(
    daemon: &Daemon,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, Vec<Duration>)> {
    let fleet = &daemon.fleet;
    let client = Client::new(&daemon.layout.state_dir);
    let exe = std::env::current_exe()?.display().to_string();
    let (_, mut ev) = fleet.ctx.events.subscribe(u64::MAX);
    let _: Value = client
        .post("/members", &json!({"role": "worker", "name": "sink", "command": [exe, "sim-agent", "--script", "sink"]}))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    wait_idle(&mut ev, "sink", None)
        .await
        .map_err(|_| anyhow::anyhow!("the sink agent never became idle"))?;
    let (_, mut screen) = fleet.attach(&Caller::Operator, "sink").await?;
    let mut rest = Vec::with_capacity(n);
    for i in 0..n + 10 {
        let t = Instant::now();
        let _: Value = client
            .get("/whoami")
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if i >= 10 {
            rest.push(t.elapsed());
        }
    }
    let mut out = Vec::with_capacity(n);
    let mut phases = Vec::with_capacity(n);
    for i in 0..n + 10 {
        while screen.try_recv().is_ok() {}
        let t = Instant::now();
        let v: Value = client
            .post(
                "/members/sink/messages",
                &json!({"message": format!("bench {i}")}),
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let acked = t.elapsed();
        let ticket = v["ticket"]["id"].as_str().unwrap_or("").to_string();
        let needle = format!("ticket {ticket} ");
        let mut seen = String::new();
        let found = tokio::time::timeout(Duration::from_secs(10), async {
            while let Ok(b) = screen.recv().await {
                seen.push_str(&String::from_utf8_lossy(&b));
                if seen.contains(&needle) {
                    return true;
                }
            }
            false
        })
        .await;
        anyhow::ensure!(
            matches!(found, Ok(true)),
            "message {ticket} never showed in the PTY"
        );
        if i >= 10 {
            out.push(t.elapsed());
            phases.push(acked);
        }
        wait_idle(&mut ev, "sink", Some(&ticket))
            .await
            .map_err(|_| anyhow::anyhow!("the sink agent did not return to idle"))?;
    }
    let _ = fleet.stop(&Caller::Operator, "sink", false).await;
    Ok((out, phases, rest))
}

/// Ledger appends per second with `writers` concurrent appenders, for `secs` seconds, through the
/// real writer actor (group commit, fdatasync before each answer).
async fn ledger_rate(daemon: &Daemon, writers: usize, secs: u64) -> anyhow::Result<(f64, u64)> {
    use fleetd_actors::decision::state::DecisionEvent;
    use fleetd_actors::ledger::state::Author;
    use fleetd_actors::types::DecisionId;
    let ctx = daemon.fleet.ctx.clone();
    let stop = Instant::now() + Duration::from_secs(secs);
    let t0 = Instant::now();
    let mut tasks = vec![];
    for w in 0..writers {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < stop {
                let author = Author {
                    member: format!("arch-{w}"),
                    role: "architect".into(),
                    slot: Some("opus".into()),
                };
                let ev = DecisionEvent::Position {
                    decision: DecisionId(1),
                    slot: "opus".into(),
                    round: 1,
                    content: "x".repeat(120),
                };
                fleetd_actors::decision::actor::append(&ctx, author, ev)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    Ok((total as f64 / t0.elapsed().as_secs_f64(), total))
}

/// Raw 200-byte appends with fdatasync after each, per second (the machine's floor).
fn fsync_rate(dir: &std::path::Path, secs: u64) -> anyhow::Result<f64> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("fsync-rate.bin"))?;
    let stop = Instant::now() + Duration::from_secs(secs);
    let t0 = Instant::now();
    let mut n = 0u64;
    while Instant::now() < stop {
        f.write_all(&[b'x'; 200])?;
        f.sync_data()?;
        n += 1;
    }
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

async fn run_ledger(args: &BenchArgs) -> anyhow::Result<()> {
    let dir = tempfile::Builder::new().prefix("fleetd-bench-").tempdir()?;
    let daemon = Daemon::start(dir.path(), None, std::env::current_exe()?).await?;
    let (d2, secs) = (dir.path().to_path_buf(), args.seconds);
    let fsync_before = tokio::task::spawn_blocking(move || fsync_rate(&d2, secs)).await??;
    let mut rows = vec![];
    for w in [1usize, 8, 64] {
        let (rate, n) = ledger_rate(&daemon, w, args.seconds).await?;
        rows.push((w, rate, n));
    }
    let (d2, secs) = (dir.path().to_path_buf(), args.seconds);
    let fsync_after = tokio::task::spawn_blocking(move || fsync_rate(&d2, secs)).await??;
    let fsync = (fsync_before + fsync_after) / 2.0;
    let entries = daemon.fleet.ctx.decision_views().len();
    let code = daemon.shutdown().await;
    anyhow::ensure!(code == 0, "daemon did not shut down cleanly");
    let _ = entries;
    // The file the writer produced must verify.
    let text = std::fs::read_to_string(dir.path().join("ledger.jsonl"))?;
    let key = std::fs::read_to_string(dir.path().join("host.key.pub"))?;
    let vk = fleetd_actors::keys::parse_public(&key).map_err(|e| anyhow::anyhow!("{e}"))?;
    let report = fleetd_actors::ledger::state::verify(&text, Some(&vk))
        .map_err(|b| anyhow::anyhow!("the benchmark's ledger does not verify: {b}"))?;
    if args.json {
        let v: Vec<Value> = rows
            .iter()
            .map(|(w, r, n)| json!({"writers": w, "appends_per_sec": r, "appends": n, "ratio_to_fsync": r / fsync}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({"fsync_per_sec": fsync, "fsync_before": fsync_before, "fsync_after": fsync_after, "ledger": v, "verified_entries": report.entries})
            )?
        );
    } else {
        println!(
            "raw 200 B append + fdatasync: {fsync:.0}/s (before {fsync_before:.0}/s, after {fsync_after:.0}/s)"
        );
        println!(
            "{:>8} {:>14} {:>10} {:>14}",
            "writers", "appends/s", "appends", "x fsync rate"
        );
        for (w, r, n) in &rows {
            println!("{w:>8} {r:>14.0} {n:>10} {:>13.1}x", r / fsync);
        }
        println!(
            "the ledger ({} entries, {} checkpoints) verifies with the host key",
            report.entries, report.checkpoints
        );
    }
    Ok(())
}

pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    if args.which == Which::Ledger {
        return run_ledger(&args).await;
    }
    let dir = tempfile::Builder::new().prefix("fleetd-bench-").tempdir()?;
    let daemon = Daemon::start(dir.path(), None, std::env::current_exe()?).await?;
    let sd = daemon.layout.state_dir.display().to_string();

    let echo = mcp_client(&["echo-server"], &[]).await?;
    let base_mcp = stats(
        "rmcp echo via stdio (baseline)",
        time_calls(&echo, "echo", json!({"text": "x"}), args.iterations).await?,
    );
    let _ = echo.cancel().await;
    let shim = mcp_client(&["mcp"], &[("FLEETD_STATE_DIR", sd.clone())]).await?;
    let ours_mcp = stats(
        "fleet_whoami via fleetd mcp shim",
        time_calls(&shim, "fleet_whoami", json!({}), args.iterations).await?,
    );
    let _ = shim.cancel().await;

    let n = args.send_iterations;
    let base_pty = stats(
        "raw PTY echo via cat (baseline)",
        tokio::task::spawn_blocking(move || pty_baseline(n)).await??,
    );
    let (visible, acked, rest) = send_to_pty(&daemon, args.send_iterations).await?;
    let rest = stats("  a bare REST round trip (GET /whoami)", rest);
    let (bdir, n) = (dir.path().to_path_buf(), args.send_iterations);
    let (raw_sync, redb_commit) =
        tokio::task::spawn_blocking(move || durability_baselines(&bdir, n)).await??;
    let raw_sync = stats("  raw 200 B append + fdatasync", raw_sync);
    let redb_commit = stats("  one redb commit: ticket + message", redb_commit);
    let ours_send = stats("send -> message in target PTY", visible);
    let acked = stats("  of which send -> durable ticket+queue", acked);
    let code = daemon.shutdown().await;
    anyhow::ensure!(code == 0, "daemon did not shut down cleanly");

    let rows = [(&ours_mcp, &base_mcp), (&ours_send, &base_pty)];
    if args.json {
        let v: Vec<Value> = rows
            .iter()
            .map(|(o, b)| json!({"ours": o, "baseline": b, "p50_ratio": o.p50_us / b.p50_us, "p99_ratio": o.p99_us / b.p99_us}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"pairs": v, "send_ack": acked}))?
        );
    } else {
        println!(
            "{:<38} {:>7} {:>10} {:>10} {:>10} {:>9}",
            "measurement", "n", "p50 µs", "p99 µs", "mean µs", "ops/s"
        );
        for (o, b) in rows {
            for s in [b, o] {
                println!(
                    "{:<38} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>9.0}",
                    s.name, s.n, s.p50_us, s.p99_us, s.mean_us, s.per_sec
                );
            }
            println!(
                "{:<38} p50 ratio {:.2}x, p99 ratio {:.2}x",
                "  -> ours / baseline",
                o.p50_us / b.p50_us,
                o.p99_us / b.p99_us
            );
        }
        for s in [&acked, &rest, &redb_commit, &raw_sync] {
            println!(
                "{:<38} {:>7} {:>10.1} {:>10.1} {:>10.1} {:>9.0}",
                s.name, s.n, s.p50_us, s.p99_us, s.mean_us, s.per_sec
            );
        }
        println!(
            "{:<38} p50 {:.0} µs beyond one REST round trip + one redb commit (Authz, actor hops, the ticket view)",
            "  -> send ack overhead",
            acked.p50_us - rest.p50_us - redb_commit.p50_us
        );
    }
    Ok(())
}
