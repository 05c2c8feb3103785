//! `fleetd demo`: it runs where it is told, and however it ends (done, Ctrl-C, a closed pipe)
//! it leaves no member, PTY host or temporary state dir behind.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::*;

/// Start the demo with its stdout read line by line on a thread; lines arrive on the channel.
fn demo(args: &[&str]) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(bin())
        .arg("demo")
        .args(args)
        .env_remove("FLEETD_STATE_DIR")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the demo");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn line_with(rx: &std::sync::mpsc::Receiver<String>, what: &str) -> String {
    loop {
        match rx.recv_timeout(T) {
            Ok(l) if l.contains(what) => return l,
            Ok(_) => continue,
            Err(e) => panic!("no line with {what:?} from the demo: {e}"),
        }
    }
}

/// The state dir the demo's first line names.
fn dir_of(first: &str) -> PathBuf {
    let rest = first
        .split(" in ")
        .nth(1)
        .expect("the demo names its state dir");
    PathBuf::from(rest.split(" (").next().unwrap())
}

fn settle(dir: &Path) {
    // The demo stops its members before it exits; nothing of it may outlive it.
    let left = processes_of(dir);
    assert!(left.is_empty(), "processes left behind: {left:?}");
}

#[test]
fn the_demo_runs_in_a_given_state_dir_and_keeps_it() {
    let root = tempfile::Builder::new()
        .prefix("fd")
        .tempdir_in("/tmp")
        .unwrap();
    let dir = root.path().join("demo-state");
    let o = Command::new(bin())
        .args(["demo", "--state-dir"])
        .arg(&dir)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("demo ok") && out.contains("(kept)"), "{out}");
    assert!(
        dir.join("ledger.jsonl").is_file(),
        "the state is kept in {}",
        dir.display()
    );
    settle(&dir);
}

#[test]
fn an_interrupted_demo_stops_everything_and_removes_its_state_dir() {
    let (child, rx) = demo(&["--work-ms", "20000"]);
    let dir = dir_of(&line_with(&rx, "fleetd demo:"));
    line_with(&rx, "spawned worker-2");
    assert!(dir.is_dir());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let Ok(status) = wait_child(child, Duration::from_secs(30)) else {
        panic!("the demo did not end after SIGINT");
    };
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(!dir.exists(), "{} left behind", dir.display());
    settle(&dir);
}

#[test]
fn a_closed_pipe_does_not_leave_the_demo_behind() {
    let (child, rx) = demo(&["--work-ms", "1500"]);
    let dir = dir_of(&line_with(&rx, "fleetd demo:"));
    // `fleetd demo | head -1`: the reader goes away after the first line.
    drop(rx);
    let Ok(status) = wait_child(child, Duration::from_secs(60)) else {
        panic!("the demo did not end after its reader went away");
    };
    assert!(status.success(), "{status:?}");
    assert!(!dir.exists(), "{} left behind", dir.display());
    settle(&dir);
}
