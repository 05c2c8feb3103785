//! Issue 24, door 2: the daemon never runs a member's code as the operator through git.
//!
//! A `--worktree` member shares its repository's `.git`: it can write hooks, `core.fsmonitor`
//! and filter drivers there. When the daemon made or removed the worktree with the git CLI,
//! git ran them outside every member's tree, where on `api.sock` they are the operator. Here
//! a repository names a program for each (every one leaves a marker file when run), a member
//! is spawned with `--worktree` through the daemon, writes one more hook while it runs, as a
//! hostile worker would, and is stopped: the worktree is made and removed, and no marker is
//! written.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::common::*;

fn git(dir: &Path, args: &[&str]) -> String {
    let o = std::process::Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.email=t@t", "-c", "user.name=t"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A program that leaves `marks/ran-NAME` and passes its input through (a filter's content).
fn marker(marks: &Path, name: &str) -> PathBuf {
    let f = marks.join(format!("{name}.sh"));
    std::fs::write(
        &f,
        format!(
            "#!/bin/sh\ntouch '{}/ran-{name}'\n[ \"$1\" = process ] && exit 1\nexec cat\n",
            marks.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    f
}

fn hook(hooks: &Path, marks: &Path, name: &str) {
    std::fs::create_dir_all(hooks).unwrap();
    std::fs::copy(marker(marks, name), hooks.join(name)).unwrap();
    std::fs::set_permissions(
        hooks.join(name),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

fn ran(marks: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(marks)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with("ran-"))
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hook_fsmonitor_or_filter_a_member_can_write_runs_when_fleetd_makes_or_removes_its_worktree()
 {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("repo");
    let marks = root.path().join("marks");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&marks).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join(".gitattributes"), "* filter=evil\n").unwrap();
    std::fs::write(repo.join("tracked.txt"), "data\n").unwrap();
    git(&repo, &["add", ".gitattributes", "tracked.txt"]);
    git(&repo, &["commit", "-q", "-m", "root"]);
    // What the repository names before the member exists (another member could have written
    // it): hooks that run at a checkout and at an index change, fsmonitor, a filter driver
    // (its `smudge` and `clean`; a long-running `process` is in the unit test, since one that
    // fails makes the git CLI stop before the rest of this test would run on it).
    let common = repo.join(git(&repo, &["rev-parse", "--git-common-dir"]));
    let hooks = common.join("hooks");
    for h in ["post-checkout", "post-index-change", "pre-auto-gc"] {
        hook(&hooks, &marks, h);
    }
    for (k, v) in [
        (
            "core.fsmonitor",
            marker(&marks, "fsmonitor").display().to_string(),
        ),
        (
            "filter.evil.smudge",
            format!("{} %f", marker(&marks, "smudge").display()),
        ),
        (
            "filter.evil.clean",
            format!("{} %f", marker(&marks, "clean").display()),
        ),
    ] {
        git(&repo, &["config", k, &v]);
    }
    let none = Vec::<String>::new();

    let d = D::start().await;
    let mut ev = d.events().await;
    let spawned = d
        .try_spawn(
            json!({"role": "worker", "name": "w1", "profile": "sim", "worktree": true,
            "cwd": repo.display().to_string(), "command": sim(&[])}),
        )
        .await;
    let at_make = ran(&marks);
    let v = spawned.unwrap_or_else(|e| panic!("spawn: {e}; ran: {at_make:?}"));
    assert_eq!(v["worktree"]["branch"], "fleet/w1", "{v}");
    ev.status("w1", "idle").await;
    let wt = d.state.join("worktrees").join("w1");
    assert_eq!(
        std::fs::read_to_string(wt.join("tracked.txt")).unwrap(),
        "data\n"
    );
    // The worker, while it runs, writes the hook git runs when a branch is deleted (the
    // cleanup's `git branch -D`), into the repository's common dir, as the issue describes.
    hook(&hooks, &marks, "reference-transaction");
    let _: Value = d.client.delete("/members/w1").await.unwrap();
    let at_remove: Vec<String> = ran(&marks)
        .into_iter()
        .filter(|m| !at_make.contains(m))
        .collect();
    assert_eq!(
        (at_make, at_remove),
        (none.clone(), none),
        "programs the repository names ran (when the worktree was made, when it was removed); log:\n{}",
        d.log()
    );
    assert!(!wt.exists(), "a worktree without work is removed");
    assert!(
        d.log().contains("worktree removed"),
        "the log says so:\n{}",
        d.log()
    );
    // Its branch is gone too (read from the refs, not with a git that would run the hooks).
    assert!(!common.join("refs/heads/fleet/w1").exists());
    let packed = std::fs::read_to_string(common.join("packed-refs")).unwrap_or_default();
    assert!(!packed.contains("refs/heads/fleet/w1"), "{packed}");
}
