//! A member's own git worktree (`fleetd spawn --worktree`).
//!
//! Owns where a member's worktree lives (`STATE_DIR/worktrees/NAME`, branch `fleet/NAME`), making
//! it from the repository the member would have started in, and removing it when the member
//! exits unless it holds work: commits no other branch has, or uncommitted changes. Runs `git`
//! (blocking: call it on the blocking pool). Must never remove a worktree with work in it, and
//! never touch a worktree it did not make.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::FleetError;
use crate::registry::state::Worktree;

/// Where member `name`'s worktree goes and its branch.
pub fn plan(state_dir: &Path, name: &str) -> (PathBuf, String) {
    (
        state_dir.join("worktrees").join(name),
        format!("fleet/{name}"),
    )
}

fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .map_err(|e| format!("git could not be run: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "git {} failed: {}",
            args.join(" "),
            crate::types::truncate(String::from_utf8_lossy(&out.stderr).trim(), 300)
        ))
    }
}

fn refused(name: &str, why: String) -> FleetError {
    FleetError::invalid(
        format!("--worktree for `{name}`"),
        why,
        "a spawn whose working directory is inside a git repository with at least one commit",
    )
}

/// Make (or, for a resumed member, find or remake) member `name`'s worktree from the repository
/// that contains `cwd`. Returns the worktree (its path is the member's new cwd).
pub fn create(
    state_dir: &Path,
    name: &str,
    cwd: &Path,
    prior: Option<&Worktree>,
) -> Result<Worktree, FleetError> {
    let (path, branch) = plan(state_dir, name);
    let repo = match prior {
        Some(w) => PathBuf::from(&w.repo),
        None => PathBuf::from(git(cwd, &["rev-parse", "--show-toplevel"]).map_err(|e| {
            refused(
                name,
                format!("{} is not in a git repository ({e})", cwd.display()),
            )
        })?),
    };
    if let Some(w) = prior
        && Path::new(&w.path).join(".git").exists()
    {
        return Ok(w.clone());
    }
    if path.exists() {
        return Err(refused(
            name,
            format!(
                "{} already exists and is not this member's worktree",
                path.display()
            ),
        ));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| refused(name, format!("{} could not be made: {e}", parent.display())))?;
    }
    let p = path.display().to_string();
    let branch_exists = git(
        &repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("refs/heads/{branch}"),
        ],
    )
    .is_ok();
    let base = match (prior, branch_exists) {
        (_, true) => {
            git(&repo, &["worktree", "add", &p, &branch]).map_err(|e| refused(name, e))?;
            prior
                .map(|w| w.base.clone())
                .unwrap_or(git(&repo, &["rev-parse", &branch]).map_err(|e| refused(name, e))?)
        }
        (Some(w), false) => {
            git(&repo, &["worktree", "add", "-b", &branch, &p, &w.base])
                .map_err(|e| refused(name, e))?;
            w.base.clone()
        }
        (None, false) => {
            let head = git(&repo, &["rev-parse", "HEAD"]).map_err(|e| refused(name, e))?;
            git(&repo, &["worktree", "add", "-b", &branch, &p, &head])
                .map_err(|e| refused(name, e))?;
            head
        }
    };
    Ok(Worktree {
        path: p,
        branch,
        repo: repo.display().to_string(),
        base,
    })
}

/// What became of a worktree at its member's exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Removed with its branch: it held no work.
    Removed,
    /// Kept: it holds work (why).
    Kept(String),
}

/// Remove `w` unless it holds work: commits no other branch has, or uncommitted changes.
pub fn cleanup(w: &Worktree) -> Result<Cleanup, String> {
    let path = Path::new(&w.path);
    let repo = Path::new(&w.repo);
    if !path.exists() {
        return Ok(Cleanup::Removed);
    }
    let dirty = git(path, &["status", "--porcelain"])?;
    if !dirty.is_empty() {
        return Ok(Cleanup::Kept(format!("{} has uncommitted changes", w.path)));
    }
    let exclude = format!("--exclude={}", w.branch);
    let own: u64 = git(
        repo,
        &[
            "rev-list",
            "--count",
            &format!("refs/heads/{}", w.branch),
            "--not",
            &exclude,
            "--branches",
        ],
    )?
    .parse()
    .unwrap_or(1);
    if own > 0 {
        return Ok(Cleanup::Kept(format!(
            "branch {} has {own} commit{} no other branch has",
            w.branch,
            if own == 1 { "" } else { "s" }
        )));
    }
    git(repo, &["worktree", "remove", &w.path])?;
    // Its commits are all on other branches (checked above), so -D loses nothing.
    git(repo, &["branch", "-D", &w.branch])?;
    Ok(Cleanup::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }

    fn commit(dir: &Path, extra: &[&str]) {
        let mut args = vec!["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q"];
        args.extend_from_slice(extra);
        sh(dir, &args);
    }

    fn repo() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        sh(d.path(), &["init", "-q", "-b", "main"]);
        commit(d.path(), &["--allow-empty", "-m", "root"]);
        d
    }

    #[test]
    fn a_worktree_without_work_is_removed_one_with_commits_or_changes_kept() {
        let r = repo();
        let state = tempfile::tempdir().unwrap();
        let sub = r.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let w = create(state.path(), "w1", &sub, None).unwrap();
        assert_eq!(w.branch, "fleet/w1");
        assert!(Path::new(&w.path).join(".git").exists());
        assert_eq!(cleanup(&w).unwrap(), Cleanup::Removed);
        assert!(!Path::new(&w.path).exists());

        let w = create(state.path(), "w2", r.path(), None).unwrap();
        std::fs::write(Path::new(&w.path).join("f"), "x").unwrap();
        assert!(matches!(cleanup(&w).unwrap(), Cleanup::Kept(why) if why.contains("uncommitted")));
        sh(Path::new(&w.path), &["add", "f"]);
        commit(Path::new(&w.path), &["-m", "work"]);
        assert!(matches!(cleanup(&w).unwrap(), Cleanup::Kept(why) if why.contains("1 commit")));
        // Merged into main: no longer its own work.
        sh(r.path(), &["merge", "-q", "--ff-only", "fleet/w2"]);
        assert_eq!(cleanup(&w).unwrap(), Cleanup::Removed);
        // A resumed member gets its worktree back at the same path.
        let w3 = create(state.path(), "w3", r.path(), None).unwrap();
        assert_eq!(cleanup(&w3).unwrap(), Cleanup::Removed);
        let again = create(state.path(), "w3", r.path(), Some(&w3)).unwrap();
        assert_eq!(again.path, w3.path);
        assert!(Path::new(&again.path).join(".git").exists());
    }

    #[test]
    fn outside_a_repository_it_is_refused_clearly() {
        let state = tempfile::tempdir().unwrap();
        let plain = tempfile::tempdir().unwrap();
        let e = create(state.path(), "w1", plain.path(), None).unwrap_err();
        assert!(e.why.contains("not in a git repository"), "{e}");
    }
}
