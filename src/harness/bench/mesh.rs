//! `fleetd bench mesh`: `--hosts` daemons on 127.0.0.1..=127.0.0.N, each linked to every other
//! (N(N-1)/2 links), and what the mesh costs. Two phases:
//!
//! 1. **Processes**: each host is `fleetd serve` in its own process (its own host key, listening
//!    on its own loopback address), plus one more with `[link]` but no peers as the baseline.
//!    Measured: the time from spawning them until every daemon reports every link up (the `Link`
//!    events on each daemon's event stream, checked against `GET /peers`), then each daemon's
//!    RSS/PSS and its CPU over an idle window of `--idle-secs`, against the baseline's, and so
//!    per link.
//! 2. **In process**: the same mesh as `Daemon`s in this process, so that one host's anchor
//!    puller can be told to pull now (`AnchorService::pull_now`) and a lead identity can send
//!    (`Caller::Member`, as `bench mail` does). Measured: one pull of every peer's anchors on
//!    the first host (until its `AnchorsPulled` event from each peer), and every other host's
//!    lead sending to `lead@FIRST` at once (until each sender's ticket says `transmitted`,
//!    which the receiver answers only after its inbox commit).
//!
//! Every host's KB holds `--anchors-per-host` signed anchors, so a pull carries some. Every
//! child process carries its state dir in `FLEETD_STATE_DIR` and is killed (with anything it
//! started) when the bench ends, by error or not; the temp dirs go with it. Owns measurement
//! only.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fleetd_actors::config::{Config, PeerConfig};
use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use super::load::{Served, cpu_ticks, memory_kb};
use super::{Stats, stats};
use crate::client::Client;
use crate::daemon::Daemon;

#[derive(Debug, Clone, clap::Args)]
pub struct MeshArgs {
    /// Mesh: daemons, on 127.0.0.1 ..= 127.0.0.N, each linked to every other.
    #[arg(long, default_value_t = 20)]
    pub hosts: usize,
    /// Mesh: signed drift anchors in each host's KB (what a pull of that host carries).
    #[arg(long, default_value_t = 10)]
    pub anchors_per_host: usize,
    /// Mesh: rounds of the in-process phase (an anchor pull on the first host, then one mail
    /// from every other host's lead to it); 0 skips the phase.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
}

/// One host of the mesh, before it runs.
struct Host {
    name: String,
    listen: String,
    key: ed25519_dalek::SigningKey,
}

/// `n` hosts, `hNN` on 127.0.0.(i+1), each on a UDP port that was free on its address.
fn plan(n: usize) -> anyhow::Result<Vec<Host>> {
    (0..n)
        .map(|i| {
            let s = std::net::UdpSocket::bind(format!("127.0.0.{}:0", i + 1))?;
            Ok(Host {
                name: format!("h{i:02}"),
                listen: s.local_addr()?.to_string(),
                key: fleetd_actors::keys::generate(),
            })
        })
        .collect()
}

/// Host `i`'s config: its key file, its listen address, every other host of `peers` a peer.
fn config(hosts: &[Host], i: usize, peers: bool, key_file: &Path, heartbeat: u64) -> Config {
    let mut c = Config::default();
    c.daemon.host = hosts[i].name.clone();
    c.daemon.key_file = Some(key_file.display().to_string());
    c.link.listen = Some(hosts[i].listen.clone());
    c.drift.heartbeat_secs = heartbeat;
    if peers {
        for h in hosts.iter().filter(|h| h.name != hosts[i].name) {
            c.peers.insert(
                h.name.clone(),
                PeerConfig {
                    addr: h.listen.clone(),
                    public_key: fleetd_actors::keys::public_text(&h.key.verifying_key()),
                },
            );
        }
    }
    c
}

/// `state/kb` with `n` signed anchors (identities `wN`), and the host key in `dir/host.key`.
fn prepare(
    dir: &Path,
    state: &Path,
    key: &ed25519_dalek::SigningKey,
    n: usize,
) -> anyhow::Result<PathBuf> {
    use fleetd_actors::drift::{kb, line};
    std::fs::create_dir_all(state)?;
    let kf = dir.join("host.key");
    fleetd_actors::keys::save(&kf, key)?;
    let now = fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock);
    let day = kb::date_of(now);
    let kb_dir = state.join("kb");
    for i in 0..n {
        let l = line::sign(
            &line::NewLine::anchor(now, 1, &format!("worker on service {i}")),
            key,
        );
        kb::append_unsynced(&kb_dir, &format!("w{i}"), &day, &l)?;
    }
    Ok(kf)
}

/// What one daemon's event stream said about its links (`at`: the daemon's clock, ms).
enum Seen {
    Link {
        host: usize,
        peer: String,
        up: bool,
        at: u64,
    },
    Pulled {
        host: usize,
    },
}

/// Forward `client`'s link and anchor-pull events (from the start of its ring) to `tx`.
async fn watch(
    host: usize,
    client: Client,
    tx: tokio::sync::mpsc::UnboundedSender<Seen>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut s = client
        .events(0)
        .await
        .map_err(|e| anyhow::anyhow!("GET /events on host {host}: {e}"))?;
    Ok(tokio::spawn(async move {
        while let Some(Ok(e)) = s.next().await {
            let seen = match e.kind {
                EventKind::Link { peer, up, .. } => Seen::Link {
                    host,
                    peer,
                    up,
                    at: e.at,
                },
                EventKind::AnchorsPulled { .. } => Seen::Pulled { host },
                _ => continue,
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    }))
}

/// Min, mean and max of `v`.
fn spread(v: &[f64]) -> Value {
    let n = v.len().max(1) as f64;
    json!({
        "min": v.iter().copied().fold(f64::INFINITY, f64::min),
        "mean": v.iter().sum::<f64>() / n,
        "max": v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// Phase 1: the mesh as processes.
async fn processes(args: &super::BenchArgs) -> anyhow::Result<Value> {
    let m = &args.mesh;
    let n = m.hosts;
    let idle = args.load.idle_secs;
    let root = tempfile::Builder::new().prefix("fleetd-mesh-").tempdir()?;
    // The baseline is host n of n+1 addresses: linked to nobody.
    let hosts = plan(n + 1)?;
    let mut starts = vec![];
    for (i, h) in hosts.iter().enumerate() {
        let dir = root.path().join(&h.name);
        let kf = prepare(&dir, &dir.join("state"), &h.key, m.anchors_per_host)?;
        // The default heartbeat: the idle window sees the anchor pulls and witness
        // submissions a real mesh makes.
        let cfg = if i < n {
            config(&hosts[..n], i, true, &kf, 60)
        } else {
            config(&hosts, i, false, &kf, 60)
        };
        starts.push((dir, cfg));
    }
    // Link times are taken from the daemons' events (the same wall clock as this process).
    let t0_ms = fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock);
    let t0 = Instant::now();
    // All started at once (each waits for its own READY=1), as hosts coming up together.
    let served: Vec<Served> =
        futures::future::try_join_all(starts.iter().map(|(dir, cfg)| Served::start(dir, cfg)))
            .await?;
    let ready = t0.elapsed();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watchers = vec![];
    for (i, s) in served.iter().enumerate().take(n) {
        watchers.push(watch(i, Client::new(&s.state), tx.clone()).await?);
    }
    drop(tx);
    let index: HashMap<String, usize> = hosts[..n]
        .iter()
        .enumerate()
        .map(|(i, h)| (h.name.clone(), i))
        .collect();
    // Link ends up, per host; a link is up when both of its ends are.
    let mut up: Vec<HashSet<usize>> = vec![HashSet::new(); n];
    let mut downs = 0usize;
    let mut first_link: Option<Duration> = None;
    let mut last = Duration::ZERO;
    let want = n * (n - 1);
    let deadline = Duration::from_secs(60 + 2 * n as u64);
    let mesh = tokio::time::timeout(deadline, async {
        while up.iter().map(|s| s.len()).sum::<usize>() < want {
            let Some(seen) = rx.recv().await else {
                anyhow::bail!("every event stream ended before the mesh formed");
            };
            if let Seen::Link {
                host,
                peer,
                up: is_up,
                at,
            } = seen
            {
                let Some(&j) = index.get(&peer) else { continue };
                let at = Duration::from_millis(at.saturating_sub(t0_ms));
                if is_up {
                    up[host].insert(j);
                    first_link = Some(first_link.map_or(at, |f: Duration| f.min(at)));
                    last = last.max(at);
                } else {
                    up[host].remove(&j);
                    downs += 1;
                }
            }
        }
        anyhow::Ok(last)
    })
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "the mesh did not form in {deadline:?}: {} of {want} link ends up",
            up.iter().map(|s| s.len()).sum::<usize>()
        )
    })??;
    // What the daemons themselves report.
    for (i, s) in served.iter().enumerate().take(n) {
        let v: Value = Client::new(&s.state)
            .get("/peers")
            .await
            .map_err(|e| anyhow::anyhow!("GET /peers on host {i}: {e}"))?;
        let links = v["links"].as_array().map(|l| l.as_slice()).unwrap_or(&[]);
        let n_up = links.iter().filter(|l| l["phase"] == "up").count();
        anyhow::ensure!(
            n_up == n - 1,
            "host {i} reports {n_up} of {} links up",
            n - 1
        );
    }
    let pids: Vec<u32> = served.iter().map(|s| s.pid()).collect();
    let mem_at_mesh: Vec<(u64, u64)> = pids.iter().map(|p| memory_kb(*p)).collect();
    // The idle window: a measurement, not a synchronisation; nothing is asked of the daemons.
    let ticks0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p)).collect();
    let w0 = Instant::now();
    let mut pulls = 0usize;
    // Peers each host pulled anchors from in the window (a heartbeat pulls every linked one).
    let mut pulled_by = vec![0usize; n];
    let mut flaps = 0usize;
    let window = tokio::time::sleep(Duration::from_secs(idle));
    tokio::pin!(window);
    loop {
        tokio::select! {
            _ = &mut window => break,
            got = rx.recv() => match got {
                Some(Seen::Pulled { host }) => {
                    pulls += 1;
                    pulled_by[host] += 1;
                }
                Some(Seen::Link { up: false, .. }) => flaps += 1,
                Some(_) => {}
                None => anyhow::bail!("every event stream ended in the idle window"),
            },
        }
    }
    let secs = w0.elapsed().as_secs_f64();
    let cpu: Vec<f64> = pids
        .iter()
        .zip(&ticks0)
        .map(|(p, t)| cpu_ticks(*p).saturating_sub(*t) as f64 / 100.0 / secs * 100.0)
        .collect();
    let mem: Vec<(u64, u64)> = pids.iter().map(|p| memory_kb(*p)).collect();
    for w in watchers {
        w.abort();
    }
    drop(served);
    drop(root);

    let links = n - 1;
    let mesh_rss: Vec<f64> = mem[..n].iter().map(|m| m.0 as f64).collect();
    let mesh_pss: Vec<f64> = mem[..n].iter().map(|m| m.1 as f64).collect();
    let mesh_cpu: Vec<f64> = cpu[..n].to_vec();
    let (base_rss, base_pss, base_cpu) = (mem[n].0 as f64, mem[n].1 as f64, cpu[n]);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let per_link = |v: &[f64], base: f64| (mean(v) - base) / links as f64;
    let at_mesh_rss: Vec<f64> = mem_at_mesh[..n].iter().map(|m| m.0 as f64).collect();
    Ok(json!({
        "hosts": n, "links": n * (n - 1) / 2, "links_per_host": links,
        "all_ready_secs": ready.as_secs_f64(),
        "first_link_up_secs": first_link.map(|d| d.as_secs_f64()),
        "full_mesh_secs": mesh.as_secs_f64(),
        "link_downs_while_forming": downs,
        "idle_secs": secs, "anchor_pulls_in_window": pulls, "anchor_pulls_in_window_by_host": pulled_by, "link_downs_in_window": flaps,
        "rss_kb": spread(&mesh_rss), "pss_kb": spread(&mesh_pss),
        "rss_kb_at_mesh": spread(&at_mesh_rss),
        "cpu_percent_of_one_core": spread(&mesh_cpu),
        "mesh_cpu_percent_of_one_core_total": mesh_cpu.iter().sum::<f64>(),
        "baseline": {"rss_kb": base_rss, "pss_kb": base_pss, "cpu_percent_of_one_core": base_cpu},
        "per_link": {
            "rss_kb": per_link(&mesh_rss, base_rss),
            "pss_kb": per_link(&mesh_pss, base_pss),
            "cpu_percent_of_one_core": per_link(&mesh_cpu, base_cpu),
        },
    }))
}

/// Until every daemon of `ds` reports `ds.len() - 1` links up (the views, re-read on each
/// `Link` event of the daemon still short).
async fn meshed(ds: &[Daemon]) -> anyhow::Result<()> {
    let want = ds.len() - 1;
    let ups = |d: &Daemon| {
        d.fleet
            .ctx
            .link_views()
            .iter()
            .filter(|v| v.phase == fleetd_actors::link::state::Phase::Up)
            .count()
    };
    for d in ds {
        let (_, mut rx) = d.fleet.ctx.events.subscribe(u64::MAX);
        while ups(d) < want {
            match rx.recv().await {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => anyhow::bail!("event bus: {e}"),
            }
        }
    }
    Ok(())
}

/// Phase 2: the mesh in this process; an anchor pull on the first host and mail to its lead.
async fn in_process(args: &super::BenchArgs) -> anyhow::Result<Value> {
    use fleetd_actors::types::{Caller, MemberIdentity, MemberName, Role};
    let m = &args.mesh;
    let n = m.hosts;
    let root = tempfile::Builder::new().prefix("fleetd-mesh-").tempdir()?;
    let hosts = plan(n)?;
    let t0 = Instant::now();
    let mut ds = vec![];
    for (i, h) in hosts.iter().enumerate() {
        let dir = root.path().join(&h.name);
        let kf = prepare(&dir, &dir, &h.key, m.anchors_per_host)?;
        // No heartbeat pull during the bench: the pulls timed are the ones it asks for.
        let cfg = config(&hosts, i, true, &kf, 3600);
        let cp = dir.join("fleetd.toml");
        std::fs::write(&cp, toml::to_string(&cfg)?)?;
        ds.push(Daemon::start(&dir, Some(cp), std::env::current_exe()?).await?);
    }
    let result = async {
        tokio::time::timeout(Duration::from_secs(60 + 2 * n as u64), meshed(&ds))
            .await
            .map_err(|_| anyhow::anyhow!("the in-process mesh did not form"))??;
        let mesh = t0.elapsed();
        let first = &ds[0];
        let anchors = first
            .links
            .as_ref()
            .map(|l| l.anchors.clone())
            .ok_or_else(|| anyhow::anyhow!("the first host has no links"))?;
        let lead = Caller::Member(MemberIdentity {
            name: MemberName::new("lead")?,
            role: Role::Primary,
            slot: None,
        });
        let to = format!("lead@{}", hosts[0].name);
        let (mut pull_t, mut mail_t, mut sender_t) = (vec![], vec![], vec![]);
        // Pull rounds in which some peer's answer never came (the puller tries each linked
        // peer once per heartbeat and logs a failed pull at debug level only): (round, answered).
        let mut short = vec![];
        for round in 0..m.rounds {
            // One pull of every peer: until an `AnchorsPulled` with all its anchors from each.
            let (_, mut rx) = first.fleet.ctx.events.subscribe(u64::MAX);
            let t = Instant::now();
            anyhow::ensure!(anchors.pull_now(), "the first host's anchor puller is not running");
            let mut from = BTreeSet::new();
            let done = tokio::time::timeout(Duration::from_secs(10), async {
                while from.len() < n - 1 {
                    match rx.recv().await {
                        Ok(e) => {
                            if let EventKind::AnchorsPulled { peer, anchors } = e.kind {
                                anyhow::ensure!(
                                    anchors == m.anchors_per_host,
                                    "{peer} served {anchors} anchors, not {}",
                                    m.anchors_per_host
                                );
                                from.insert(peer);
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                        Err(e) => anyhow::bail!("event bus: {e}"),
                    }
                }
                anyhow::Ok(())
            })
            .await;
            match done {
                Ok(r) => {
                    r?;
                    pull_t.push(t.elapsed());
                }
                Err(_) => short.push(json!({"round": round, "answered": from.len()})),
            }

            // Mail: every other host's lead sends to the first host's lead at once.
            let t = Instant::now();
            let sends = ds[1..].iter().map(|d| {
                let (fleet, lead, to) = (d.fleet.clone(), lead.clone(), to.clone());
                async move {
                    let (_, mut rx) = fleet.ctx.events.subscribe(u64::MAX);
                    let r = fleet
                        .send(&lead, &to, format!("mesh round {round}"), false, None)
                        .await?;
                    let id = r.ticket.ticket.id;
                    tokio::time::timeout(Duration::from_secs(30), async {
                        loop {
                            match rx.recv().await {
                                Ok(e) => {
                                    if matches!(e.kind, EventKind::Ticket { ticket, .. } if ticket == id)
                                    {
                                        return Ok(());
                                    }
                                }
                                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                                Err(e) => anyhow::bail!("event bus: {e}"),
                            }
                        }
                    })
                    .await
                    .map_err(|_| anyhow::anyhow!("a mail was not transmitted in 30 s"))??;
                    anyhow::Ok(t.elapsed())
                }
            });
            let each = futures::future::try_join_all(sends).await?;
            mail_t.push(t.elapsed());
            sender_t.extend(each);
        }
        // What the receiver holds: every round's mail from every peer (no primary runs there
        // to hand it on to), each kept durably before its sender heard `transmitted`.
        let held = serde_json::to_value(first.fleet.ctx.views.mail.get())?["held_total"]
            .as_u64()
            .unwrap_or(0);
        anyhow::ensure!(
            held as usize == (n - 1) * m.rounds,
            "the first host holds {held} mails, not {}",
            (n - 1) * m.rounds
        );
        anyhow::Ok((mesh, pull_t, short, mail_t, sender_t, held))
    }
    .await;
    for d in ds {
        d.shutdown().await;
    }
    drop(root);
    let (mesh, pull_t, short, mail_t, sender_t, held) = result?;
    let pull =
        (!pull_t.is_empty()).then(|| stats(&format!("anchor pull of {} peers", n - 1), pull_t));
    let rows: [Stats; 2] = [
        stats(
            &format!("mail from {} leads, until all transmitted", n - 1),
            mail_t,
        ),
        stats("  each sender: send -> transmitted", sender_t),
    ];
    Ok(json!({
        "full_mesh_secs": mesh.as_secs_f64(),
        "anchors_per_host": m.anchors_per_host,
        "anchor_pull": pull,
        "anchor_pull_incomplete_rounds": short,
        "mail_all": rows[0], "mail_each": rows[1],
        "receiver_held_mail": held,
    }))
}

pub async fn run(args: &super::BenchArgs) -> anyhow::Result<Value> {
    let n = args.mesh.hosts;
    anyhow::ensure!(
        (2..=250).contains(&n),
        "--hosts must be 2..=250 (one 127.0.0.x address each, and one for the baseline)"
    );
    let say = |what: &str| {
        if !args.json {
            eprintln!("bench mesh: {what}...");
        }
    };
    say(&format!(
        "{n} fleetd serve processes in a full mesh, and one alone"
    ));
    let procs = processes(args).await?;
    let inproc = if args.mesh.rounds > 0 {
        say(&format!(
            "the same mesh in this process, {} rounds",
            args.mesh.rounds
        ));
        Some(in_process(args).await?)
    } else {
        None
    };
    let doc = json!({
        "schema": "fleetd.bench.mesh/1",
        "hosts": n,
        "cores": std::thread::available_parallelism().map(|c| c.get()).unwrap_or(0),
        "processes": procs, "in_process": inproc,
    });
    if args.json {
        return Ok(doc);
    }
    let p = &procs;
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "mesh: {n} daemons (processes), {} links, {} per daemon; {} cores",
        p["links"], p["links_per_host"], doc["cores"]
    );
    println!(
        "  all READY after {:.2} s; first link up {:.2} s; full mesh (every link up at both ends) {:.2} s; {} link-down events while forming",
        f(&p["all_ready_secs"]),
        f(&p["first_link_up_secs"]),
        f(&p["full_mesh_secs"]),
        p["link_downs_while_forming"]
    );
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>14}",
        "per daemon (after idle)", "min", "mean", "max", "alone (no peers)"
    );
    for (what, key, base) in [
        ("RSS KiB", "rss_kb", "rss_kb"),
        ("PSS KiB", "pss_kb", "pss_kb"),
        (
            "CPU % of one core",
            "cpu_percent_of_one_core",
            "cpu_percent_of_one_core",
        ),
    ] {
        println!(
            "{:<28} {:>12.2} {:>12.2} {:>12.2} {:>14.2}",
            what,
            f(&p[key]["min"]),
            f(&p[key]["mean"]),
            f(&p[key]["max"]),
            f(&p["baseline"][base])
        );
    }
    println!(
        "  per link (mean - alone) / {}: {:.0} KiB RSS, {:.0} KiB PSS, {:.3}% of one core",
        p["links_per_host"],
        f(&p["per_link"]["rss_kb"]),
        f(&p["per_link"]["pss_kb"]),
        f(&p["per_link"]["cpu_percent_of_one_core"])
    );
    println!(
        "  idle window {:.1} s: the whole mesh used {:.2}% of one core; {} anchor pulls, {} link-down events in it",
        f(&p["idle_secs"]),
        f(&p["mesh_cpu_percent_of_one_core_total"]),
        p["anchor_pulls_in_window"],
        p["link_downs_in_window"]
    );
    println!(
        "  peers pulled in the window, by host: {}",
        p["anchor_pulls_in_window_by_host"]
    );
    if let Some(ip) = &doc["in_process"].as_object() {
        println!(
            "in process: full mesh after {:.2} s (daemons started one after another); {} anchors per host",
            f(&ip["full_mesh_secs"]),
            ip["anchors_per_host"]
        );
        let rows: Vec<Stats> = ["anchor_pull", "mail_all", "mail_each"]
            .iter()
            .filter_map(|k| serde_json::from_value(ip[*k].clone()).ok())
            .collect();
        super::print_p50_p99(&rows);
        if let Some(short) = ip["anchor_pull_incomplete_rounds"].as_array()
            && !short.is_empty()
        {
            println!(
                "  anchor pull rounds where some peer never answered (10 s), not timed: {}",
                Value::Array(short.clone())
            );
        }
        println!(
            "  the first host holds {} mails (no primary runs there to take them)",
            ip["receiver_held_mail"]
        );
    }
    Ok(doc)
}
