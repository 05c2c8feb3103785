//! `fleetd bench load`: one daemon, in its own process, under a fleet-sized load, and what the
//! load costs. Stages, each measured when it is reached:
//!
//! 1. `empty`: the daemon alone.
//! 2. `members`: `--members` cheap members (`cat` under the `generic` profile), all idle.
//!    Also: the spawn time per hundred (does it stay linear?), what the PTY hosts cost (RSS and
//!    PSS, summed over their processes), and the daemon's CPU while the fleet idles for
//!    `--idle-secs`.
//! 3. `sse`: `--sse` clients reading `GET /events`.
//! 4. `queued`: `--queued` messages acknowledged for one member that never goes idle (its screen
//!    changes every 20 ms), so every one of them waits in its queue.
//!
//! At each stage: the daemon's RSS and PSS, and the latency of `GET /status` (what `fleetd
//! status` asks) p50/p99, with the empty daemon's as the baseline measured in the same run.
//! Every process the bench starts carries its state dir in `FLEETD_STATE_DIR` and is killed at
//! the end. Owns measurement only.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fleetd_actors::events::EventKind;
use fleetd_actors::types::Status;
use serde_json::{Value, json};

use super::{Stats, stats};
use crate::client::Client;

#[derive(Debug, Clone, serde::Serialize)]
struct Stage {
    name: &'static str,
    rss_kb: u64,
    pss_kb: u64,
    status: Stats,
}

/// One process's resident and proportional set sizes, in KiB (0 when unreadable).
pub(super) fn memory_kb(pid: u32) -> (u64, u64) {
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|t| field(&t, "VmRSS:"))
        .unwrap_or(0);
    let pss = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .map(|t| field(&t, "Pss:"))
        .unwrap_or(0);
    (rss, pss)
}

/// User + system CPU time of a process, in clock ticks (USER_HZ, 100 per second on Linux).
pub(super) fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Fields after the command name (which may hold spaces) start at field 3; utime is 14.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    n(11) + n(12)
}

/// The processes carrying `FLEETD_STATE_DIR=state` whose command line says `pty-host`, or
/// all of them when `pty_hosts_only` is false.
fn processes_of(state: &Path, pty_hosts_only: bool) -> Vec<u32> {
    let needle = format!("FLEETD_STATE_DIR={}", state.display());
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == needle.as_bytes()))
        })
        .filter(|pid| {
            !pty_hosts_only
                || std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0)
                        .any(|a| a == b"pty-host" || a.ends_with(b"fleetd-pty-host"))
                })
        })
        .collect()
}

async fn stage(name: &'static str, pid: u32, client: &Client, n: usize) -> anyhow::Result<Stage> {
    let status = stats(
        &format!("GET /status ({name})"),
        super::time_gets(client, "/status", n).await?,
    );
    let (rss_kb, pss_kb) = memory_kb(pid);
    Ok(Stage {
        name,
        rss_kb,
        pss_kb,
        status,
    })
}

/// The daemon under test: `fleetd serve` on its own state dir, killed (with everything it
/// started) when dropped.
pub(super) struct Served {
    child: std::process::Child,
    pub(super) state: PathBuf,
}

impl Served {
    pub(super) async fn start(
        dir: &Path,
        cfg: &fleetd_actors::config::Config,
    ) -> anyhow::Result<Served> {
        let state = dir.join("state");
        let config = dir.join("fleetd.toml");
        std::fs::write(&config, toml::to_string(cfg)?)?;
        let notify = dir.join("notify.sock");
        let sock = tokio::net::UnixDatagram::bind(&notify)?;
        let log = std::fs::File::create(dir.join("daemon.log"))?;
        let child = std::process::Command::new(std::env::current_exe()?)
            .arg("serve")
            .arg("--state-dir")
            .arg(&state)
            .arg("--config")
            .arg(&config)
            .env("NOTIFY_SOCKET", &notify)
            .env("FLEETD_STATE_DIR", &state)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        let served = Served { child, state };
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(Duration::from_secs(30), sock.recv(&mut buf)).await {
                Ok(Ok(n)) if buf[..n].starts_with(b"READY=1") => return Ok(served),
                Ok(Ok(_)) => continue,
                _ => anyhow::bail!(
                    "the daemon did not become ready in 30 s; its log: {}",
                    dir.join("daemon.log").display()
                ),
            }
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL);
        let _ = self.child.wait();
        for pid in processes_of(&self.state, false) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

/// Counts of what the SSE clients read.
struct Readers {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counts: Vec<Arc<AtomicU64>>,
}

impl Readers {
    async fn open(client: &Client, n: usize) -> anyhow::Result<Readers> {
        let mut tasks = Vec::with_capacity(n);
        let mut counts = Vec::with_capacity(n);
        for _ in 0..n {
            let mut s = client
                .events(0)
                .await
                .map_err(|e| anyhow::anyhow!("GET /events: {e}"))?;
            let c = Arc::new(AtomicU64::new(0));
            let c2 = c.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(Ok(_)) = s.next().await {
                    c2.fetch_add(1, Ordering::Relaxed);
                }
            }));
            counts.push(c);
        }
        Ok(Readers { tasks, counts })
    }

    /// (fewest, most) events any one client has read so far.
    fn read(&self) -> (u64, u64) {
        let v: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        (
            v.iter().copied().min().unwrap_or(0),
            v.iter().copied().max().unwrap_or(0),
        )
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Run `job(0..total)` on `workers` tasks, each taking the next index; the first error ends it.
async fn concurrently<F, Fut>(workers: usize, total: usize, job: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = vec![];
    for _ in 0..workers.max(1) {
        let (next, job) = (next.clone(), job.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                job(i).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Cheap members to spawn (`cat`, generic profile).
    #[arg(long, default_value_t = 1000)]
    pub members: usize,
    /// Clients reading the event stream.
    #[arg(long, default_value_t = 200)]
    pub sse: usize,
    /// Messages queued for one member that never goes idle.
    #[arg(long, default_value_t = 10_000)]
    pub queued: usize,
    /// Seconds the idle fleet's CPU use is measured over.
    #[arg(long, default_value_t = 10)]
    pub idle_secs: u64,
    /// Concurrent spawn requests.
    #[arg(long, default_value_t = 4)]
    pub spawners: usize,
}

pub async fn run(args: &super::BenchArgs) -> anyhow::Result<serde_json::Value> {
    let a = &args.load;
    let dir = tempfile::Builder::new().prefix("fleetd-load-").tempdir()?;
    let mut cfg = fleetd_actors::config::Config::default();
    cfg.lifecycle.max_members = cfg.lifecycle.max_members.max(a.members + 1);
    cfg.injector.max_queue = cfg.injector.max_queue.max(a.queued);
    let served = Served::start(dir.path(), &cfg).await?;
    let pid = served.pid();
    let client = Arc::new(Client::new(&served.state));
    let n = args.iterations;
    let mut stages = vec![stage("empty", pid, &client, n).await?];

    // Members: spawn them all, then wait until each has been seen idle.
    let mut ev = client
        .events(u64::MAX)
        .await
        .map_err(|e| anyhow::anyhow!("GET /events: {e}"))?;
    let spawned = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let marks = Arc::new(std::sync::Mutex::new(Vec::<Duration>::new()));
    {
        let (client, spawned, marks) = (client.clone(), spawned.clone(), marks.clone());
        concurrently(a.spawners, a.members, move |i| {
            let (client, spawned, marks) = (client.clone(), spawned.clone(), marks.clone());
            async move {
                let _: Value = client
                    .post(
                        "/members",
                        &json!({"role": "worker", "name": format!("m{i:05}"), "command": ["cat"], "profile": "generic"}),
                    )
                    .await
                    .map_err(|e| anyhow::anyhow!("spawn m{i:05}: {e}"))?;
                let done = spawned.fetch_add(1, Ordering::Relaxed) + 1;
                if done % 100 == 0
                    && let Ok(mut m) = marks.lock()
                {
                    m.push(started.elapsed());
                }
                Ok(())
            }
        })
        .await?;
    }
    let spawn_time = started.elapsed();
    let mut idle = std::collections::HashSet::new();
    let deadline = Duration::from_secs(60) + Duration::from_millis(50 * a.members as u64);
    tokio::time::timeout(deadline, async {
        while idle.len() < a.members {
            match ev.next().await {
                Some(Ok(e)) => {
                    if let EventKind::Status {
                        member,
                        to: Status::Idle,
                        ..
                    } = e.kind
                    {
                        idle.insert(member.to_string());
                    }
                }
                _ => return Err(anyhow::anyhow!("the event stream ended")),
            }
        }
        Ok(())
    })
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "only {} of {} members went idle in {deadline:?}",
            idle.len(),
            a.members
        )
    })??;
    drop(ev);
    let all_idle = started.elapsed();
    let mut marks = marks.lock().map(|m| m.clone()).unwrap_or_default();
    marks.sort();
    let hosts = processes_of(&served.state, true);
    let (host_rss, host_pss) = hosts.iter().fold((0, 0), |(r, p), h| {
        let (a, b) = memory_kb(*h);
        (r + a, p + b)
    });
    stages.push(stage("members", pid, &client, n).await?);
    let ticks0 = cpu_ticks(pid);
    let idle_window = Instant::now();
    // A measurement window, not a synchronisation: the fleet is left alone meanwhile.
    tokio::time::sleep(Duration::from_secs(a.idle_secs)).await;
    let idle_cpu =
        (cpu_ticks(pid) - ticks0) as f64 / 100.0 / idle_window.elapsed().as_secs_f64() * 100.0;
    // The same fleet after the window: an idle member's steady cost (its screen dropped after
    // `lifecycle.screen_dormant_seconds`, when the window is longer than that).
    stages.push(stage("idle", pid, &client, n).await?);

    // Event-stream readers.
    let readers = Readers::open(&client, a.sse).await?;
    stages.push(stage("sse", pid, &client, n).await?);

    // Queued messages for a member that never goes idle.
    let _: Value = client
        .post(
            "/members",
            &json!({"role": "worker", "name": "busy", "profile": "generic",
                "command": ["sh", "-c", "while :; do date +%s%N; sleep 0.02; done"]}),
        )
        .await
        .map_err(|e| anyhow::anyhow!("spawn busy: {e}"))?;
    let queueing = Instant::now();
    {
        let client = client.clone();
        concurrently(16, a.queued, move |i| {
            let client = client.clone();
            async move {
                let _: Value = client
                    .post(
                        "/members/busy/messages",
                        &json!({"message": format!("load {i}")}),
                    )
                    .await
                    .map_err(|e| anyhow::anyhow!("send {i}: {e}"))?;
                Ok(())
            }
        })
        .await?;
    }
    let queue_time = queueing.elapsed();
    let busy: Value = client
        .get("/members/busy")
        .await
        .map_err(|e| anyhow::anyhow!("GET /members/busy: {e}"))?;
    let waiting = busy["queue"]["queued"].as_array().map_or(0, |q| q.len());
    stages.push(stage("queued", pid, &client, n).await?);
    let (fewest, most) = readers.read();
    drop(readers);
    drop(served);

    let base = stages[0].clone();
    let per_member_kb =
        |s: &Stage| (s.rss_kb.saturating_sub(base.rss_kb)) as f64 / a.members as f64;
    let members_stage = stages[1].clone();
    let idle_stage = stages[2].clone();
    let dormant_after = cfg.lifecycle.screen_dormant_seconds;
    let doc = json!({
        "members": a.members, "sse_clients": a.sse, "queued": a.queued,
        "stages": stages.iter().map(|s| json!({
            "stage": s.name, "rss_kb": s.rss_kb, "pss_kb": s.pss_kb, "status": s.status,
            "status_p50_ratio": s.status.p50_us / base.status.p50_us,
            "status_p99_ratio": s.status.p99_us / base.status.p99_us,
        })).collect::<Vec<_>>(),
        "spawn_secs": spawn_time.as_secs_f64(),
        "spawn_secs_per_hundred": marks.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
        "all_idle_secs": all_idle.as_secs_f64(),
        "daemon_kb_per_member": per_member_kb(&idle_stage),
        "daemon_kb_per_member_just_idle": per_member_kb(&members_stage),
        "screen_dormant_seconds": dormant_after,
        "pty_hosts": hosts.len(), "pty_host_rss_kb_mean": host_rss as f64 / hosts.len().max(1) as f64,
        "pty_host_pss_kb_mean": host_pss as f64 / hosts.len().max(1) as f64,
        "idle_cpu_percent_of_one_core": idle_cpu, "idle_secs": a.idle_secs,
        "queue_secs": queue_time.as_secs_f64(), "queued_seen": waiting,
        "sse_events_read_min": fewest, "sse_events_read_max": most,
    });
    if args.json {
        return Ok(doc);
    }
    println!(
        "load: {} members (cat, generic), {} SSE clients, {} messages queued for one never-idle member",
        a.members, a.sse, a.queued
    );
    println!(
        "{:<10} {:>10} {:>10} {:>12} {:>12} {:>10} {:>10}",
        "stage", "RSS MiB", "PSS MiB", "status p50", "status p99", "p50 ratio", "p99 ratio"
    );
    for s in &stages {
        println!(
            "{:<10} {:>10.1} {:>10.1} {:>9.0} µs {:>9.0} µs {:>9.2}x {:>9.2}x",
            s.name,
            s.rss_kb as f64 / 1024.0,
            s.pss_kb as f64 / 1024.0,
            s.status.p50_us,
            s.status.p99_us,
            s.status.p50_us / base.status.p50_us,
            s.status.p99_us / base.status.p99_us
        );
    }
    let per_hundred: Vec<String> = marks
        .iter()
        .scan(Duration::ZERO, |prev, d| {
            let step = *d - *prev;
            *prev = *d;
            Some(format!("{:.1}", step.as_secs_f64()))
        })
        .collect();
    println!(
        "spawn: {} members in {:.1} s ({} concurrent); seconds per hundred: {}; all idle after {:.1} s",
        a.members,
        spawn_time.as_secs_f64(),
        a.spawners,
        per_hundred.join(" "),
        all_idle.as_secs_f64()
    );
    println!(
        "daemon memory per member: {:.0} KiB RSS once all are idle (members stage - empty stage, / members); {:.0} KiB after {} s idle (idle stage; screens are dropped after {} s still)",
        per_member_kb(&members_stage),
        per_member_kb(&idle_stage),
        a.idle_secs,
        dormant_after
    );
    println!(
        "PTY hosts: {} processes, mean RSS {:.0} KiB, mean PSS {:.0} KiB",
        hosts.len(),
        host_rss as f64 / hosts.len().max(1) as f64,
        host_pss as f64 / hosts.len().max(1) as f64
    );
    println!(
        "daemon CPU with the fleet idle: {:.2}% of one core over {} s",
        idle_cpu, a.idle_secs
    );
    println!(
        "queue: {} sends acknowledged in {:.1} s ({:.0}/s, 16 concurrent); {} waiting in busy's queue",
        a.queued,
        queue_time.as_secs_f64(),
        a.queued as f64 / queue_time.as_secs_f64(),
        waiting
    );
    println!("SSE: each client read between {fewest} and {most} events");
    Ok(doc)
}
