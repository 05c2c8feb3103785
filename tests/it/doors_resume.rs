//! Issue 24, door 5: a member cannot turn its agent's approvals off on resume.
//!
//! A member reports its session id from its own hook; the operator's later `fleetd spawn
//! --resume` put it on the agent's command line as a bare argument, so a member that reported
//! `--dangerously-skip-permissions` came back as `claude --resume
//! --dangerously-skip-permissions`. Here a stand-in `claude` (first on the daemon's PATH; it
//! records its argv, reports the session id it is given from a SessionStart hook through
//! `fleetd signal --hook` like Claude Code's hook would, then runs the sim agent) runs under the
//! built-in `claude` profile's own resume template. The stand-in fires its hook once the daemon
//! knows it (its `fleetd list` is answered, as it is only for a process placed in a member), so
//! the hook never races the spawn's registration.

use std::path::Path;

use fleetd_actors::config::AgentKind;
use serde_json::{Value, json};

use crate::common::*;

/// The stand-in's runs so far: each its argv.
fn runs(argv_file: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(argv_file).unwrap_or_default();
    text.split("--- run\n")
        .filter(|r| !r.is_empty())
        .map(|r| r.lines().map(str::to_string).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_id_that_is_an_option_is_never_kept_nor_put_on_the_resumed_command_line() {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let sid_file = root.path().join("sid");
    let argv_file = root.path().join("argv");
    let hook_err = root.path().join("hook-stderr");
    let claude = bin.join("claude");
    std::fs::write(
        &claude,
        format!(
            "#!/bin/sh\n{{ echo '--- run'; for a in \"$@\"; do printf '%s\\n' \"$a\"; done; }} >> '{argv}'\n\
             i=0; while ! '{fleetd}' list >/dev/null 2>&1 && [ $i -lt 250 ]; do i=$((i+1)); sleep 0.02; done\n\
             printf '{{\"hook_event_name\":\"SessionStart\",\"source\":\"startup\",\"session_id\":\"%s\"}}' \"$(cat '{sid}')\" \
             | '{fleetd}' signal --hook 2>> '{err}'\n\
             exec '{fleetd}' sim-agent\n",
            argv = argv_file.display(),
            sid = sid_file.display(),
            err = hook_err.display(),
            fleetd = bin_str(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(&claude, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The built-in claude profile's command and resume template; the sim agent's screen rules.
    let mut config = test_config();
    let real = config.profiles["claude"].clone();
    let mut p = config.profiles["sim"].clone();
    p.agent = Some(AgentKind::Claude);
    p.command = real.command.clone();
    p.resume = real.resume.clone();
    config.profiles.insert("claude".into(), p);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let d = D::with_env(config, vec![("PATH".into(), path)]).await;
    let mut ev = d.events().await;
    let hostile = "--dangerously-skip-permissions";

    // A member that reports an option as its session id: not kept, and the hook is told why.
    std::fs::write(&sid_file, hostile).unwrap();
    d.try_spawn(json!({"role": "worker", "name": "w1", "profile": "claude"}))
        .await
        .unwrap_or_else(|e| panic!("spawn: {e}\n{}", d.log()));
    ev.status("w1", "idle").await;
    let m = d.member("w1").await;
    assert_ne!(
        m["session_id"], hostile,
        "the option was kept as the session id: {m}"
    );
    assert!(m["session_id"].is_null(), "{m}");
    let told = std::fs::read_to_string(&hook_err).unwrap_or_default();
    assert!(
        told.contains("not kept") && told.contains("UUID"),
        "the hook says why: {told}"
    );
    assert!(d.log().contains("session id not kept"), "{}", d.log());
    let _: Value = d.client.delete("/members/w1").await.unwrap();
    let resumed = d.try_spawn(json!({"resume": "w1"})).await;
    let e = match resumed {
        Err(e) => e.to_string(),
        Ok(v) => {
            // It launched; make sure the stand-in has run before reading its argv.
            ev.status("w1", "idle").await;
            format!("resumed: {v}")
        }
    };
    let all: Vec<String> = runs(&argv_file).concat();
    assert!(
        !all.iter().any(|a| a.contains(hostile)),
        "the agent was started with the member's option: {all:?}"
    );
    assert!(e.contains("never reported a session id"), "{e}");

    // A Claude Code session id (a UUID) is kept and passed glued to --resume.
    let uuid = "0b1c2d3e-1111-4222-8333-444455556666";
    std::fs::write(&sid_file, uuid).unwrap();
    d.try_spawn(json!({"role": "worker", "name": "w2", "profile": "claude"}))
        .await
        .unwrap_or_else(|e| panic!("spawn: {e}\n{}", d.log()));
    ev.status("w2", "idle").await;
    assert_eq!(d.member("w2").await["session_id"], uuid);
    let _: Value = d.client.delete("/members/w2").await.unwrap();
    let v = d
        .try_spawn(json!({"resume": "w2"}))
        .await
        .unwrap_or_else(|e| panic!("resume: {e}\n{}", d.log()));
    assert!(v["notes"].to_string().contains(uuid), "{v}");
    ev.status("w2", "idle").await;
    let last = runs(&argv_file).pop().unwrap_or_default();
    assert!(
        last.contains(&format!("--resume={uuid}")),
        "the id is glued to its option: {last:?}"
    );
    assert!(
        !last.iter().any(|a| a == uuid || a == "--resume"),
        "never a bare argument: {last:?}"
    );
}
