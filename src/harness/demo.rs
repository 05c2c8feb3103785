//! `fleetd demo`: an embedded daemon on the default config in a temporary state dir; the
//! operator spawns a lead, hands it a brief with two tasks; the lead spawns two workers, hands
//! each a task through its terminal, collects their replies and answers the operator. Prints a
//! short readable account with timings, cleans up, exits 0.
//!
//! Owns the narration only; everything it shows goes through the real daemon (REST socket,
//! PTYs, MCP shim, injector, tickets).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetd_actors::events::{Event, EventKind};
use fleetd_actors::injector::state::ReceiptState;
use fleetd_actors::tickets::state::TicketState;
use fleetd_actors::types::{Party, TicketId};
use serde_json::{Value, json};

use crate::client::Client;
use crate::daemon::Daemon;

/// A line on stdout; a closed stdout (`fleetd demo | head -1`) is ignored, so the demo still
/// stops its members and removes its state dir instead of dying mid-run.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

const BRIEF: &str = "Plan the work below: one worker per task, collect the answers, report back.\n\
task: sum: 3 4 5 6 7\n\
task: count words: the quick brown fox jumps over the lazy dog";

struct Narrator {
    t0: Instant,
    tickets: BTreeMap<TicketId, (Party, String)>,
    marks: BTreeMap<&'static str, f64>,
}

impl Narrator {
    fn at(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn say(&self, s: &str) {
        out!("  +{:>6.3}s  {s}", self.at());
    }

    fn mark(&mut self, what: &'static str) {
        let t = self.at();
        self.marks.entry(what).or_insert(t);
    }

    fn event(&mut self, e: &Event) {
        match &e.kind {
            EventKind::Spawned {
                member,
                role,
                parent,
                ..
            } => {
                self.say(&format!("spawned {member} ({role}), by {parent}"));
                if member.as_str().starts_with("worker") {
                    self.mark("workers spawned");
                }
            }
            EventKind::Status { member, to, .. }
                if to.as_str() == "idle" && member.as_str() == "lead" =>
            {
                self.mark("lead ready");
            }
            EventKind::Receipt {
                msg,
                target,
                from,
                state,
                ticket,
                ..
            } => {
                let what = match state {
                    ReceiptState::Delivered => "pasted into the terminal of",
                    ReceiptState::Accepted => "taken up by",
                    ReceiptState::Stalled => "STALLED at",
                    ReceiptState::Failed => "FAILED for",
                    ReceiptState::Queued => "queued for",
                    ReceiptState::Transmitted => "transmitted for",
                };
                let t = ticket.map(|t| format!(" ({t})")).unwrap_or_default();
                self.say(&format!("{msg}{t} from {from} {what} {target}"));
                if *state == ReceiptState::Delivered && target.as_str() == "lead" {
                    self.mark("brief delivered");
                }
            }
            EventKind::Ticket {
                ticket,
                from,
                to,
                state,
                ..
            } if *state != TicketState::Open && !self.tickets.contains_key(ticket) => {
                self.say(&format!("{to} answered {ticket} for {from} ({state:?})"));
                self.tickets.insert(*ticket, (from.clone(), to.to_string()));
            }
            EventKind::Exited { member, reason, .. } => {
                self.say(&format!("{member} exited: {reason}"))
            }
            EventKind::Restarted { child, reason, .. } => {
                self.say(&format!("supervisor restarted {child}: {reason}"))
            }
            _ => {}
        }
    }
}

/// The first of SIGINT (Ctrl-C), SIGTERM or SIGHUP, by name.
async fn interrupted() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
    }
}

/// Run the demo in `state_dir` (kept afterwards), or in a temporary one (removed); returns an
/// error (and a non-zero exit) if the fleet did not finish. Interrupted (Ctrl-C, SIGTERM,
/// SIGHUP), it stops its members and the daemon, removes a temporary state dir, and fails with
/// status 130.
pub async fn run(
    work_ms: u64,
    timeout: Duration,
    state_dir: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let temp = match &state_dir {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("fleetd-demo-")
                .tempdir()
                .context("temporary state dir")?,
        ),
    };
    let dir = match (&state_dir, &temp) {
        (Some(d), _) => d.clone(),
        (None, Some(t)) => t.path().to_path_buf(),
        (None, None) => anyhow::bail!("no state dir for the demo"),
    };
    let exe = std::env::current_exe()?;
    out!(
        "fleetd demo: a lead and two workers, all sim agents, in {}{}",
        dir.display(),
        if temp.is_some() {
            " (removed at the end)"
        } else {
            " (kept)"
        }
    );
    let daemon = Daemon::start(&dir, None, exe.clone()).await?;
    let (_, mut events) = daemon.fleet.ctx.events.subscribe(0);
    let client = Client::new(&daemon.layout.state_dir);
    let mut n = Narrator {
        t0: Instant::now(),
        tickets: BTreeMap::new(),
        marks: BTreeMap::new(),
    };
    let work = async {
        let _: Value = client
            .post(
                "/members",
                &json!({"role": "primary", "name": "lead", "profile": "sim",
                    "command": [exe.display().to_string(), "sim-agent", "--script", "lead", "--work-ms", work_ms.to_string()]}),
            )
            .await?;
        let sent: Value = client
            .post("/members/lead/messages", &json!({"message": BRIEF}))
            .await?;
        let brief: TicketId = sent["ticket"]["id"].as_str().unwrap_or("").parse()?;
        n.say(&format!("operator sent the brief to lead as {brief}"));
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let e = tokio::time::timeout_at(deadline, events.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!("the fleet did not finish within {} s", timeout.as_secs())
                })?;
            let Ok(e) = e else { continue };
            n.event(&e);
            if let EventKind::Ticket { ticket, state, .. } = &e.kind
                && *ticket == brief
                && *state != TicketState::Open
            {
                break;
            }
        }
        n.mark("brief answered");
        let t: Value = client.get(&format!("/tickets/{brief}")).await?;
        let answer = t["reply"]["text"]
            .as_str()
            .or(t["tail"]["text"].as_str())
            .unwrap_or("(none)")
            .to_string();
        let tickets: Value = client.get("/tickets").await?;
        anyhow::Ok((answer, tickets))
    };
    let mut stopped_by = None;
    let result = tokio::select! {
        r = work => r,
        sig = interrupted() => {
            stopped_by = Some(sig);
            Err(anyhow::anyhow!("interrupted by {sig}"))
        }
    };
    // Stop whatever is still running, then the daemon.
    let members: Value = client.get("/members").await.unwrap_or(Value::Null);
    for m in members["members"].as_array().cloned().unwrap_or_default() {
        if m["status"] != "exited"
            && let Some(name) = m["name"].as_str()
        {
            let _: Result<Value, _> = client.delete(&format!("/members/{name}")).await;
        }
    }
    while let Ok(Ok(e)) = tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
        n.event(&e);
    }
    let state_dir = daemon.layout.state_dir.clone();
    let host_key = daemon.fleet.ctx.host_key.verifying_key();
    let code = daemon.shutdown().await;
    if let Some(sig) = stopped_by {
        let kept = temp.is_none();
        drop(temp);
        return Err(crate::cli::Failed::new(
            130,
            format!(
                "demo interrupted by {sig}: its members and daemon are stopped{}",
                if kept {
                    format!(", its state is kept in {}", dir.display())
                } else {
                    ", its state dir removed".into()
                }
            ),
        )
        .into());
    }
    let (answer, tickets) = result?;
    out!();
    out!("The lead's answer to the operator:\n  {answer}");
    out!();
    out!("Tickets:");
    for t in tickets.as_array().cloned().unwrap_or_default() {
        out!(
            "  {:<5} {:<9} -> {:<9} {:<8} {}",
            t["id"].as_str().unwrap_or(""),
            t["from"].as_str().unwrap_or(""),
            t["to"].as_str().unwrap_or(""),
            t["state"].as_str().unwrap_or(""),
            t["reply"]["text"].as_str().unwrap_or("")
        );
    }
    // The drift logs the agents wrote, through the same gates the pullers run, as the lead.
    let snap = fleetd_actors::drift::kb::read(&state_dir.join("kb"))?;
    let ix = fleetd_actors::drift::gates::index(&snap, &[host_key]);
    let p = fleetd_actors::drift::gates::Params::from_config(
        &fleetd_actors::config::Config::default().drift,
        fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock),
    );
    let reports = fleetd_actors::drift::gates::evaluate_all(&ix, Some("lead"), &p);
    out!();
    out!("Drift (signed anchors in STATE_DIR/kb, gates G1-G4 as the lead reads them):");
    for r in &reports {
        out!(
            "  {:<9} {:<9} anchor {:?}, G1 {}, G2 {}, G3 {} ({}), G4 {}",
            r.peer,
            r.verdict,
            r.anchor.as_deref().unwrap_or("-"),
            r.g1,
            r.g2,
            r.g3,
            r.reporters.join(", "),
            r.g4
        );
    }
    out!();
    let m = |k: &str| {
        n.marks
            .get(k)
            .map(|v| format!("{v:.2} s"))
            .unwrap_or_else(|| "-".into())
    };
    out!(
        "Timings: lead ready {}, brief delivered {}, workers spawned {}, brief answered {} (total {:.2} s).",
        m("lead ready"),
        m("brief delivered"),
        m("workers spawned"),
        m("brief answered"),
        n.at()
    );
    anyhow::ensure!(code == 0, "the daemon did not shut down cleanly");
    anyhow::ensure!(
        answer.contains("sum of 5 numbers = 25") && answer.contains("9 words"),
        "unexpected answer: {answer}"
    );
    anyhow::ensure!(
        reports.len() == 2
            && reports.iter().all(
                |r| r.verdict == fleetd_actors::drift::gates::Verdict::Trusted
                    && r.g3 == fleetd_actors::drift::gates::G3::Consensus
            ),
        "the workers' drift anchors did not come out trusted by consensus"
    );
    out!("demo ok");
    Ok(())
}
