//! `fleetd probe`: plays a hostile member. Run as a member's command (a worker that runs any
//! command as the user, as a prompt-injected agent would), it tries every door out of its role
//! that issue 24 found and the obvious next ones, and writes one line per door:
//! `DOOR closed|open what it found`. `tests/it/probe.rs` runs it with and without the sandbox
//! and judges the lines.
//!
//! Owns nothing the product needs; it only reads, connects and asks, as any process of the user
//! could. Its targets come from a JSON file (never its argv: its own command line must not carry
//! the markers it looks for in other processes' command lines). Must never change what it
//! probes beyond what the door itself is (it plants one symlink in the drift KB, if it can).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Arguments of `fleetd probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The targets, as JSON (`Targets`).
    #[arg(long)]
    pub targets: PathBuf,
    /// Where the lines go (written whole at the end: temporary file + rename).
    #[arg(long)]
    pub out: PathBuf,
}

/// What the probe aims at: the daemon's state dir as the operator knows it, another member
/// (the victim) and what only the victim's parties should see.
#[derive(Debug, Deserialize)]
pub struct Targets {
    pub state_dir: PathBuf,
    /// This member's own name.
    pub me: String,
    pub victim: String,
    pub victim_pid: i32,
    /// The victim's PTY host socket (`term/NAME.GEN.sock`).
    pub victim_socket: PathBuf,
    /// The victim's worktree, if it has one.
    pub victim_worktree: Option<PathBuf>,
    pub daemon_pid: i32,
    /// Text in a message queued to the victim (only its parties may read it).
    pub message_marker: String,
    /// Text on the victim's screen (only it and the operator may read it).
    pub screen_marker: String,
    /// The API token file, if the daemon has one.
    pub token_file: Option<PathBuf>,
}

/// One door: its name, whether it opened (`None`: the try itself failed, so the probe cannot
/// say; a judge must not read that as closed), what was seen.
struct Door {
    name: &'static str,
    open: Option<bool>,
    what: String,
}

fn door(name: &'static str, open: bool, what: impl Into<String>) -> Door {
    Door {
        name,
        open: Some(open),
        what: what.into().replace('\n', " "),
    }
}

/// A door the probe could not try (the API did not answer; nothing to aim at).
fn untried(name: &'static str, what: impl Into<String>) -> Door {
    Door {
        name,
        open: None,
        what: what.into().replace('\n', " "),
    }
}

/// Runs the probe; the lines are written to `args.out`.
pub fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.targets)?;
    let t: Targets = serde_json::from_str(&text)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut doors = rt.block_on(api_doors(&t));
    doors.push(argv(&t));
    doors.push(read_file("token-file", t.token_file.as_deref()));
    doors.push(signal("signal-member", t.victim_pid));
    doors.push(signal("signal-daemon", t.daemon_pid));
    // Opening another process's memory is the kernel's ptrace-attach check.
    let mem = format!("/proc/{}/mem", t.victim_pid);
    doors.push(match std::fs::File::open(&mem) {
        Ok(_) => door("ptrace", true, format!("{mem} opened")),
        Err(e) => door("ptrace", false, format!("{mem}: {e}")),
    });
    doors.push(read_file(
        "environ",
        Some(&PathBuf::from(format!("/proc/{}/environ", t.victim_pid))),
    ));
    let s = &t.state_dir;
    doors.push(list_dir("wiring", &s.join("agents").join(&t.victim)));
    doors.push(read_file(
        "charter",
        Some(&s.join("charters").join(format!("{}.md", t.victim))),
    ));
    doors.push(read_file("ledger", Some(&s.join("ledger.jsonl"))));
    doors.push(read_file("redb", Some(&s.join("fleetd.redb"))));
    doors.push(read_file("host-key", Some(&s.join("host.key"))));
    doors.push(list_dir("term-dir", &s.join("term")));
    doors.push(write_into("other-worktree", t.victim_worktree.as_deref()));
    // Last: a host that takes the connection drops the daemon's, which ends the victim's
    // membership (and its queue and worktree) on a daemon without the peer check.
    doors.push(pty_host(&t));
    let mut out = String::new();
    for d in &doors {
        out.push_str(&format!(
            "{} {} {}\n",
            d.name,
            match d.open {
                Some(true) => "open",
                Some(false) => "closed",
                None => "untried",
            },
            d.what
        ));
    }
    print!("{out}");
    let tmp = args.out.with_extension("tmp");
    std::fs::write(&tmp, out)?;
    std::fs::rename(&tmp, &args.out)?;
    Ok(())
}

/// Door 1: another member's PTY host. Open if it says anything (its greeting carries the screen).
fn pty_host(t: &Targets) -> Door {
    let mut s = match UnixStream::connect(&t.victim_socket) {
        Ok(s) => s,
        Err(e) => return door("pty-host", false, format!("connect: {e}")),
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => door(
            "pty-host",
            false,
            "the host closed the connection unanswered",
        ),
        Ok(n) => door(
            "pty-host",
            true,
            format!("the host greeted with {n}+ bytes"),
        ),
        Err(e) => untried(
            "pty-host",
            format!("neither greeted nor closed within 2 s: {e}"),
        ),
    }
}

/// Doors on the API socket: the victim's queue, its screen, the event stream, a KB symlink.
async fn api_doors(t: &Targets) -> Vec<Door> {
    let c = crate::client::Client::new(&t.state_dir);
    let get = |path: String| {
        let c = &c;
        async move {
            match tokio::time::timeout(
                Duration::from_secs(5),
                c.raw(hyper::Method::GET, &path, None),
            )
            .await
            {
                Ok(Ok((status, body))) => Ok((status, String::from_utf8_lossy(&body).into_owned())),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no answer within 5 s".to_string()),
            }
        }
    };
    // First, until the daemon has placed this process in its member (the spawn registers the
    // member's root process once its terminal runs; a call before that is refused as coming
    // from nowhere, which would read as a closed door).
    let placed = async {
        loop {
            if let Ok((st, b)) = get("/whoami".to_string()).await
                && st.is_success()
                && serde_json::from_str::<serde_json::Value>(&b)
                    .is_ok_and(|v| v["name"].as_str() == Some(t.me.as_str()))
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(10), placed)
        .await
        .is_err()
    {
        return ["queue-bodies", "screen", "kb-symlink"]
            .into_iter()
            .map(|n| untried(n, "the daemon never placed this process in its member"))
            .collect();
    }
    let mut doors = vec![];
    // Door 3: the queued message bodies of another member.
    doors.push(match get(format!("/members/{}", t.victim)).await {
        Ok((st, b)) if b.contains(&t.message_marker) => door(
            "queue-bodies",
            true,
            format!("HTTP {st} carries the message"),
        ),
        Ok((st, _)) => door(
            "queue-bodies",
            false,
            format!("HTTP {st} without the message"),
        ),
        Err(e) => untried("queue-bodies", e),
    });
    // Door 4: another member's screen, directly, in its status, and in the event history.
    let (mut seen, mut failed) = (vec![], vec![]);
    for path in [
        format!("/members/{}/screen", t.victim),
        format!("/members/{}", t.victim),
    ] {
        match get(path.clone()).await {
            Ok((_, b)) if b.contains(&t.screen_marker) => seen.push(path),
            Ok(_) => {}
            Err(e) => failed.push(format!("{path}: {e}")),
        }
    }
    match events_carry(&c, &t.screen_marker).await {
        Ok(true) => seen.push("/events".into()),
        Ok(false) => {}
        Err(e) => failed.push(format!("/events: {e}")),
    }
    doors.push(match (seen.is_empty(), failed.is_empty()) {
        (false, _) => door(
            "screen",
            true,
            format!("the victim's screen text in {}", seen.join(", ")),
        ),
        (true, true) => door(
            "screen",
            false,
            "the victim's screen text is nowhere this member may read",
        ),
        (true, false) => untried("screen", failed.join("; ")),
    });
    // Door 9: a symlinked identity directory in the drift KB, listed through the API.
    let id = format!("{}-probe", t.me);
    let link = t.state_dir.join("kb/fleet/drift").join(&id);
    let planted = std::fs::create_dir_all(t.state_dir.join("kb/fleet/drift"))
        .and_then(|_| std::os::unix::fs::symlink("/etc", &link));
    let listed = get(format!("/kb/fleet/drift/{id}/")).await;
    doors.push(match (planted, listed) {
        (_, Ok((st, b))) if st.is_success() => {
            door("kb-symlink", true, format!("HTTP {st} listed {}", b.len()))
        }
        (Ok(()), Ok((st, _))) => door("kb-symlink", false, format!("planted; HTTP {st}")),
        (Err(e), _) => door("kb-symlink", false, format!("cannot plant: {e}")),
        (Ok(()), Err(e)) => untried("kb-symlink", format!("planted; {e}")),
    });
    let _ = std::fs::remove_file(&link);
    doors
}

/// Whether the event history (replayed from the start) carries `marker`: read for at most 2 s.
/// An error: the stream did not open.
async fn events_carry(c: &crate::client::Client, marker: &str) -> Result<bool, String> {
    let mut s = match tokio::time::timeout(Duration::from_secs(5), c.events(0)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("no answer within 5 s".into()),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(Some(Ok(e))) = tokio::time::timeout_at(deadline, s.next()).await {
        if serde_json::to_string(&e).is_ok_and(|j| j.contains(marker)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Door 6: message or screen text in any command line this member can see (but its own tree's).
fn argv(t: &Targets) -> Door {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return door("argv", false, "/proc cannot be listed");
    };
    let mut seen = 0;
    let mut found = vec![];
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(f) = std::fs::File::open(e.path().join("cmdline")) else {
            continue;
        };
        let mut buf = Vec::new();
        if f.take(1 << 20).read_to_end(&mut buf).is_err() {
            continue;
        }
        seen += 1;
        let text = String::from_utf8_lossy(&buf);
        if text.contains(&t.message_marker) || text.contains(&t.screen_marker) {
            found.push(pid);
        }
    }
    door(
        "argv",
        !found.is_empty(),
        match found.is_empty() {
            true => format!("{seen} command lines read, none carries fleet text"),
            false => format!("fleet text on the command line of pids {found:?}"),
        },
    )
}

fn read_file(name: &'static str, path: Option<&Path>) -> Door {
    let Some(path) = path else {
        return untried(name, "no such file configured");
    };
    let mut buf = [0u8; 16];
    match std::fs::File::open(path).and_then(|mut f| f.read(&mut buf)) {
        Ok(0) => door(name, false, format!("{} reads empty", path.display())),
        Ok(n) => door(name, true, format!("read {n} bytes of {}", path.display())),
        Err(e) => door(name, false, format!("{}: {e}", path.display())),
    }
}

fn list_dir(name: &'static str, path: &Path) -> Door {
    match std::fs::read_dir(path) {
        Ok(d) => {
            let n = d.count();
            door(name, n > 0, format!("{} lists {n} entries", path.display()))
        }
        Err(e) => door(name, false, format!("{}: {e}", path.display())),
    }
}

fn write_into(name: &'static str, dir: Option<&Path>) -> Door {
    let Some(dir) = dir else {
        return untried(name, "no worktree to aim at");
    };
    let p = dir.join(".probe-was-here");
    match std::fs::File::create(&p).and_then(|mut f| f.write_all(b"x")) {
        Ok(()) => {
            let _ = std::fs::remove_file(&p);
            door(name, true, format!("wrote {}", p.display()))
        }
        Err(e) => door(name, false, format!("{}: {e}", p.display())),
    }
}

fn signal(name: &'static str, pid: i32) -> Door {
    use nix::sys::signal::kill;
    use nix::unistd::Pid;
    // Signal 0: the permission and existence check of a real signal, without its effect.
    match kill(Pid::from_raw(pid), None) {
        Ok(()) => door(name, true, format!("pid {pid} can be signalled")),
        Err(e) => door(name, false, format!("pid {pid}: {e}")),
    }
}
