//! No secret on a command line: `/proc/PID/cmdline` is readable by every local user, while a
//! member's charter file and wiring are 0600. A member of every built-in agent profile is
//! spawned (the agent CLIs stood in for by a shell that reads its terminal, so fleetd's wiring
//! lands on its argv exactly as on the real CLI's; the real CLIs in tests/it/agents.rs), with a
//! charter carrying a marker, and sent a message carrying another; no command line in the
//! daemon's process tree may carry either, and the files that do must be private.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::json;

use crate::common::*;

const CHARTER: &str = "CHARTER-MARKER-c41e";
const MESSAGE: &str = "MESSAGE-MARKER-9b07";

/// Every regular file under `dir` (links not followed: Gemini's member home links the user's).
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)
            .expect("read the wiring dir")
            .flatten()
        {
            let t = e.file_type().expect("file type");
            if t.is_dir() {
                todo.push(e.path());
            } else if t.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

fn private(path: &Path) {
    let mode = std::fs::metadata(path).expect("stat").permissions().mode();
    assert_eq!(mode & 0o077, 0, "{} is mode {mode:o}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_charter_or_message_is_on_any_member_command_line() {
    let home = tempfile::Builder::new()
        .prefix("argv-home-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("throwaway HOME");
    let mut config = test_config();
    config.charters.worker = format!("You are a worker. {CHARTER}");
    let d = D::with_env(
        config,
        vec![("HOME".into(), home.path().display().to_string())],
    )
    .await;
    let mut ev = d.events().await;
    // (name, profile, command): a stand-in for each agent CLI, the generic profile, the sim.
    let stand_in = |cli: &str| json!(["sh", "-c", "read line", cli]);
    let members = [
        ("wclaude", Some("claude"), Some(stand_in("claude"))),
        ("wcodex", Some("codex"), Some(stand_in("codex"))),
        ("wgemini", Some("gemini"), Some(stand_in("gemini"))),
        ("wopencode", Some("opencode"), Some(stand_in("opencode"))),
        ("wgeneric", None, Some(stand_in("generic"))),
        ("wsim", Some("sim"), None),
    ];
    let watch = ArgvWatch::start(d.pid(), vec![CHARTER.into(), MESSAGE.into()]);
    for (name, profile, command) in &members {
        let mut body = json!({"role": "worker", "name": name});
        if let Some(p) = profile {
            body["profile"] = json!(p);
        }
        if let Some(c) = command {
            body["command"] = c.clone();
        }
        d.try_spawn(body)
            .await
            .unwrap_or_else(|e| panic!("spawn {name}: {e}\n{}", d.log()));
        // The agent has started (its PTY host answers after the exec): its argv is final.
        let m = d.member(name).await;
        let pid = m["pid"].as_u64().unwrap_or_else(|| panic!("no pid: {m}")) as u32;
        let argv = tree_cmdlines(pid)
            .first()
            .map(|(_, c)| c.clone())
            .unwrap_or_else(|| panic!("{name} (pid {pid}) has no command line"));
        assert!(
            !argv.contains(CHARTER),
            "{name}'s charter is on its argv: {argv}"
        );
        // The stand-ins got the wiring appended, as the real CLIs do.
        let wired = match *profile {
            Some("claude") => "--append-system-prompt-file",
            Some("codex") => "--no-daemon",
            _ => "",
        };
        assert!(argv.contains(wired), "{name}: {argv}");
        // The charter is in its file, private; so is every file of the wiring.
        let charter = d.state.join("charters").join(format!("{name}.md"));
        let text = std::fs::read_to_string(&charter).expect("the charter file");
        assert!(text.contains(CHARTER), "{name}: {text}");
        private(&charter);
        // (Codex's wiring is all flags: it has no files.)
        if profile.is_some_and(|p| ["claude", "gemini", "opencode"].contains(&p)) {
            let dir = d.state.join("agents").join(name);
            let files = files_under(&dir);
            assert!(!files.is_empty(), "{name}: no wiring in {}", dir.display());
            for f in files {
                private(&f);
            }
        }
    }
    // A message with a marker, through to the sim's terminal.
    let t = d
        .send("wsim", &format!("Who are you? {MESSAGE} is in the body."))
        .await;
    ev.receipt(&t, "delivered").await;
    let all = tree_cmdlines(d.pid());
    let (seen, hits) = watch.finish();
    // The walk from the daemon reached every member's agent.
    for (name, profile, _) in &members {
        let agent = match profile {
            Some("sim") => "sim-agent".to_string(),
            _ => format!("read line {}", profile.unwrap_or("generic")),
        };
        assert!(
            all.iter().any(|(_, c)| c.contains(&agent)),
            "the walk from the daemon missed {name}: {all:?}"
        );
    }
    for (pid, cmd) in &all {
        assert!(
            !cmd.contains(CHARTER) && !cmd.contains(MESSAGE),
            "pid {pid}'s command line carries a secret: {cmd}"
        );
    }
    assert!(
        hits.is_empty(),
        "command lines that carried the charter or the message ({seen} processes watched): {hits:#?}"
    );
}
