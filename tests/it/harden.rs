//! Hardening regressions (issue 11): damaged files at start, the KB never followed through
//! symlinks, working directories that do not exist, absurd terminal sizes, private state files.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;

use serde_json::json;

use crate::common::*;

/// `fleetd serve` on `state` must refuse to start: (exit code, stderr).
fn serve_refused(state: &std::path::Path) -> (Option<i32>, String) {
    let child = Command::new(bin())
        .args(["serve", "--state-dir"])
        .arg(state)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = match wait_child_output(child) {
        Some(o) => o,
        None => panic!("the daemon started on a damaged state dir"),
    };
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The child's output if it exits within the test timeout; `None` (and killed) otherwise.
fn wait_child_output(child: std::process::Child) -> Option<std::process::Output> {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(T) {
        Ok(o) => o.ok(),
        Err(_) => {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            None
        }
    }
}

/// A state dir that a daemon ran on and stopped cleanly.
async fn used_state_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let mut d = D::start().await;
    d.spawn("w1", "worker", sim(&[])).await;
    d.signal(libc::SIGTERM);
    assert!(d.wait_exit(T).success(), "{}", d.log());
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("s");
    let copy = Command::new("cp")
        .arg("-a")
        .arg(&d.state)
        .arg(&state)
        .status()
        .unwrap();
    assert!(copy.success());
    (root, state)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_state_database_stops_the_start_with_its_name_not_a_panic() {
    let (_root, state) = used_state_dir().await;
    let db = state.join("fleetd.redb");
    // Keep redb's header, overwrite everything after it with garbage (a deterministic stream).
    let mut bytes = std::fs::read(&db).unwrap();
    let mut x: u32 = 0x9e37_79b9;
    for b in bytes.iter_mut().skip(4096) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    std::fs::write(&db, &bytes).unwrap();
    let (code, err) = serve_refused(&state);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&db.display().to_string()), "{err}");
    assert!(err.contains("damaged") && err.contains("backup"), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );

    // Not a redb file at all.
    std::fs::write(&db, vec![0x5a; 70_000]).unwrap();
    let (code, err) = serve_refused(&state);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("damaged"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_that_is_not_one_stops_the_start_with_what_to_do() {
    let (_root, state) = used_state_dir().await;
    let ledger = state.join("ledger.jsonl");
    let garbage: Vec<u8> = (0..5000u32)
        .map(|i| (i * 7919 % 251) as u8 | 0x80)
        .collect();
    std::fs::write(&ledger, &garbage).unwrap();
    let (code, err) = serve_refused(&state);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&ledger.display().to_string()), "{err}");
    assert!(
        err.contains("fleetd ledger verify") && err.contains("backup"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // `ledger verify` says the same, and fails.
    let out = Command::new(bin())
        .args(["ledger", "verify"])
        .arg(&ledger)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not text"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn state_files_are_private_and_members_keep_the_users_umask() {
    let d = D::start().await;
    let work = tempfile::tempdir().unwrap();
    let made = work.path().join("made-by-member");
    // The member creates a file where it works: it must get the umask the daemon started with
    // (the test runner's, 022 by default), not the daemon's 077.
    let script = format!(
        "touch {}; exec {}",
        made.display(),
        sim(&["--script", "exec", "--work-ms", "0"]).join(" ")
    );
    let body = json!({"role": "worker", "name": "w1", "command": ["sh", "-c", script],
        "profile": "sim", "cwd": work.path()});
    d.try_spawn(body).await.unwrap();
    // Something in the KB (written by the daemon for its member).
    let r = d
        .calls_as(
            "w1",
            json!([{"tool": "fleet_drift", "args": {"action": "anchor", "baseline": "a worker"}}]),
        )
        .await;
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert!(d.state.join("kb/fleet/drift/w1").is_dir());
    let mut checked = 0;
    let mut stack = vec![d.state.clone()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
        if m.is_file() || m.is_dir() {
            assert_eq!(
                m.permissions().mode() & 0o077,
                0,
                "{} is {:o}",
                p.display(),
                m.permissions().mode()
            );
            checked += 1;
        }
    }
    for f in ["fleetd.redb", "ledger.jsonl", "host.key"] {
        assert!(d.state.join(f).exists(), "{f} missing");
    }
    assert!(checked > 5, "only {checked} entries checked");
    // SAFETY: reading (and restoring) this process's umask.
    let ours = unsafe {
        let m = libc::umask(0o022);
        libc::umask(m);
        m
    };
    let mode = std::fs::metadata(&made).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode,
        0o666 & !(ours as u32),
        "the member's file is {mode:o}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spawn_whose_working_directory_does_not_exist_is_refused() {
    let d = D::start().await;
    for cwd in ["/nonexistent/fleetd-test", "relative/dir", "/etc/hostname"] {
        let e = d
            .try_spawn(json!({"role": "worker", "name": "w1", "command": sim(&[]),
                "profile": "sim", "cwd": cwd}))
            .await
            .expect_err(cwd)
            .to_string();
        assert!(e.contains(cwd) && e.contains("working directory"), "{e}");
    }
    let v: serde_json::Value = d.client.get("/members").await.unwrap();
    assert_eq!(v["members"].as_array().map(Vec::len), Some(0), "{v}");
}

#[tokio::test(flavor = "multi_thread")]
async fn absurd_terminal_sizes_are_refused_where_they_enter() {
    let d = D::start().await;
    d.spawn("w1", "worker", sim(&[])).await;
    let sock = d.state.join("api.sock");
    for (rows, cols) in [(65535, 65535), (1, 80), (40, 5000)] {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.write_all(
            format!(
                "GET /members/w1/attach?rows={rows}&cols={cols} HTTP/1.1\r\nhost: fleetd\r\nconnection: upgrade\r\nupgrade: fleetd-attach\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
        let mut buf = vec![0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        let resp = String::from_utf8_lossy(&buf[..n]);
        assert!(resp.starts_with("HTTP/1.1 400"), "{rows}x{cols}: {resp}");
        assert!(resp.contains(&format!("{rows} rows")), "{resp}");
    }
    // The daemon is alive and the member's screen is its old size.
    let m = d.member("w1").await;
    assert_eq!(m["name"], "w1");
    assert!(d.pid() > 0);

    // A config with an absurd size does not pass `config check`.
    let mut c = test_config();
    c.lifecycle.rows = 65535;
    c.lifecycle.cols = 65535;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.toml");
    std::fs::write(&p, toml::to_string(&c).unwrap()).unwrap();
    let out = Command::new(bin())
        .args(["config", "check"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("lifecycle.rows"), "{all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kb_is_never_read_through_a_symlink_over_rest() {
    let d = D::start().await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "secret-contents").unwrap();
    let dir = d.state.join("kb/fleet/drift/w1");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(secret.path(), dir.join("2026-12-01.jsonl")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("2026-12-02.jsonl")).unwrap();
    for f in ["2026-12-01.jsonl", "2026-12-02.jsonl"] {
        let e = d
            .client
            .get_text(&format!("/kb/fleet/drift/w1/{f}"))
            .await
            .expect_err(f)
            .to_string();
        assert!(
            e.contains("symlink") && !e.contains("secret-contents"),
            "{e}"
        );
    }
    let v: serde_json::Value = d.client.get("/status").await.unwrap();
    assert!(v.is_object());
}
