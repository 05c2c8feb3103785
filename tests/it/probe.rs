//! The isolation probes (issue 24): a hostile member (`fleetd probe`, a worker that runs any
//! command as the user) tries every door out of its role, once with the sandbox and once
//! without, and reports one line per door; each line is judged here. Confined, every door is
//! closed. Unconfined, the doors fleetd closes for everyone stay closed, and the ones only the
//! sandbox closes (the same Unix user's files, signals and ptrace) are reported open, which also
//! shows that the probe's checks can see an open door.

use std::collections::BTreeMap;
use std::path::Path;

use fleetd_actors::events::EventKind;
use fleetd_actors::sandbox::Mode;
use serde_json::{Value, json};

use crate::common::*;

/// Closed whatever the sandbox: rules of the daemon (Authz, the PTY host's peer check, argv).
const CLOSED_FOR_EVERYONE: &[&str] = &["pty-host", "queue-bodies", "screen", "argv", "kb-symlink"];

/// Closed only by the sandbox: what a process of the same user reaches without it.
const CLOSED_BY_THE_SANDBOX: &[&str] = &[
    "token-file",
    "signal-member",
    "signal-daemon",
    "ptrace",
    "environ",
    "wiring",
    "charter",
    "ledger",
    "redb",
    "host-key",
    "term-dir",
    "other-worktree",
];

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .expect("git runs");
    assert!(o.status.success(), "git {args:?}: {o:?}");
}

/// Runs the probe against a daemon in `mode`; returns door -> (open, what it saw).
async fn probe(mode: Mode) -> BTreeMap<String, (Option<bool>, String)> {
    let work = tempfile::tempdir().expect("tempdir");
    let token = work.path().join("api.token");
    std::fs::write(&token, "probe-secret-token\n").expect("token");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let repo = work.path().join("repo");
    std::fs::create_dir(&repo).expect("repo");
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("README"), "x").expect("file");
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-qm", "init"]);

    let mut c = test_config();
    c.sandbox.mode = mode;
    c.api.token_file = Some(token.display().to_string());
    let d = D::with(c).await;
    let mut ev = d.events().await;

    // The victim: never idle (its screen never settles), so what is sent to it stays queued;
    // its screen carries a marker only it and the operator may read.
    let screen_marker = format!("SCREEN-{}", std::process::id());
    let message_marker = format!("MESSAGE-{}", std::process::id());
    let v = d
        .try_spawn(json!({
            "role": "worker", "name": "victim", "worktree": true,
            "cwd": repo.display().to_string(),
            "command": ["bash", "-c", format!(
                "echo {}''{}; while :; do printf '\\r%s' $RANDOM; sleep 0.2; done",
                &screen_marker[..4], &screen_marker[4..])],
        }))
        .await
        .unwrap_or_else(|e| panic!("spawn victim: {e}\n{}", d.log()));
    let victim_pid = v["pid"].as_i64().expect("victim pid");
    let worktree = v["worktree"]["path"]
        .as_str()
        .expect("victim worktree")
        .to_string();
    d.send("victim", &format!("for the victim only: {message_marker}"))
        .await;
    // What a real agent's wiring would be, for the wiring door.
    let wiring = d.state.join("agents/victim");
    std::fs::create_dir_all(&wiring).expect("wiring dir");
    std::fs::write(wiring.join("mcp.json"), "{}").expect("wiring file");
    let socket = std::fs::read_dir(d.state.join("term"))
        .expect("term dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            n.starts_with("victim.") && n.ends_with(".sock")
        })
        .expect("the victim's terminal socket");

    let targets = work.path().join("targets.json");
    let out = work.path().join("doors.txt");
    std::fs::write(
        &targets,
        json!({
            "state_dir": d.state, "me": "prober", "victim": "victim",
            "victim_pid": victim_pid, "victim_socket": socket,
            "victim_worktree": worktree, "daemon_pid": d.pid(),
            "message_marker": message_marker, "screen_marker": screen_marker,
            "token_file": token,
        })
        .to_string(),
    )
    .expect("targets");
    let p = d
        .try_spawn(json!({
            "role": "worker", "name": "prober",
            "command": [bin_str(), "probe", "--targets", targets, "--out", out],
        }))
        .await
        .unwrap_or_else(|e| panic!("spawn prober: {e}\n{}", d.log()));
    let confined = p["sandbox"].as_str() == Some("bwrap");
    assert_eq!(
        confined,
        mode == Mode::Bwrap,
        "the prober runs confined exactly when the sandbox is on: {p}"
    );
    ev.until(
        "the prober's exit",
        |e| matches!(&e.kind, EventKind::Exited { member, .. } if member.as_str() == "prober"),
    )
    .await;
    let text = match std::fs::read_to_string(&out) {
        Ok(t) => t,
        Err(e) => {
            let prober: Value = d.member("prober").await;
            panic!(
                "the probe wrote no report ({e}); prober: {prober}\n{}",
                d.log()
            )
        }
    };
    println!("--- doors, sandbox {mode:?} ---\n{text}");
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let (name, state, what) = (it.next()?, it.next()?, it.next().unwrap_or(""));
            // `untried` (the probe could not try the door) is neither: judged wrong either way.
            let open = match state {
                "open" => Some(true),
                "closed" => Some(false),
                _ => None,
            };
            Some((name.to_string(), (open, what.to_string())))
        })
        .collect()
}

fn judge(
    doors: &BTreeMap<String, (Option<bool>, String)>,
    names: &[&str],
    open: bool,
) -> Vec<String> {
    names
        .iter()
        .filter_map(|n| match doors.get(*n) {
            None => Some(format!("{n}: no line")),
            Some((o, what)) if *o != Some(open) => Some(format!(
                "{n}: {} ({what}), expected {}",
                match o {
                    Some(true) => "open",
                    Some(false) => "closed",
                    None => "untried",
                },
                if open { "open" } else { "closed" }
            )),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_confined_member_reaches_nothing_but_its_own() {
    if !sandbox_here() {
        return;
    }
    let doors = probe(Mode::Bwrap).await;
    let mut wrong = judge(&doors, CLOSED_FOR_EVERYONE, false);
    wrong.extend(judge(&doors, CLOSED_BY_THE_SANDBOX, false));
    assert!(
        wrong.is_empty(),
        "doors open to a confined member: {wrong:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unconfined_member_meets_the_daemons_rules_and_the_same_users_reach() {
    let doors = probe(Mode::Off).await;
    let mut wrong = judge(&doors, CLOSED_FOR_EVERYONE, false);
    wrong.extend(judge(&doors, CLOSED_BY_THE_SANDBOX, true));
    assert!(wrong.is_empty(), "unexpected doors unconfined: {wrong:#?}");
}

/// Where the sandbox cannot be built, `auto` runs members unconfined and the first spawn says why
/// (the rest say so briefly), `fleetd status` says it, and `bwrap` refuses the spawn instead.
#[tokio::test(flavor = "multi_thread")]
async fn without_bubblewrap_spawns_say_so_once_and_bwrap_mode_refuses() {
    let mut c = test_config();
    c.sandbox.bwrap = Some("/nonexistent/bwrap".into());
    let d = D::with(c.clone()).await;
    let notes = |v: &Value| -> String {
        v["notes"]
            .as_array()
            .map(|n| {
                n.iter()
                    .filter_map(Value::as_str)
                    .filter(|s| s.starts_with("sandbox:"))
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .unwrap_or_default()
    };
    let first = d.spawn("w1", "worker", sim(&[])).await;
    let second = d.spawn("w2", "worker", sim(&[])).await;
    assert!(first["sandbox"].is_null() && second["sandbox"].is_null());
    assert!(
        notes(&first).contains("unconfined") && notes(&first).contains("/nonexistent/bwrap"),
        "the first spawn says why: {first}"
    );
    assert_eq!(notes(&second), "sandbox: none (see `fleetd status`)");
    let st: Value = d.client.get("/status").await.expect("status");
    assert_eq!(st["sandbox"]["confined"], false, "{st}");
    assert!(
        st["sandbox"]["detail"]
            .as_str()
            .is_some_and(|s| s.contains("/nonexistent/bwrap")),
        "{st}"
    );
    let out = d.cli(&["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sandbox    NONE"), "{text}");
    drop(d);

    c.sandbox.mode = Mode::Bwrap;
    let d = D::with(c).await;
    let e = d
        .try_spawn(json!({"role": "worker", "name": "w1", "command": sim(&[]), "profile": "sim"}))
        .await
        .expect_err("a spawn that cannot be confined is refused under mode bwrap");
    let text = e.to_string();
    assert!(
        text.contains("SANDBOX") && text.contains("/nonexistent/bwrap"),
        "{text}"
    );
    // Refused before anything was written: no charter, no terminal.
    assert!(!d.state.join("charters/w1.md").exists());
}
