//! A member's own git worktree (`fleetd spawn --worktree`).
//!
//! Owns where a member's worktree lives (`STATE_DIR/worktrees/NAME`, branch `fleet/NAME`), making
//! it from the repository the member would have started in, and removing it when the member
//! exits unless it holds work: commits no other branch has, or uncommitted changes (untracked
//! files included). Blocking: call it on the blocking pool. Must never remove a worktree with
//! work in it, and never touch a worktree it did not make.
//!
//! Runs no program. It uses libgit2 (the `git2` crate), never the git CLI: a member can write
//! the repository's hooks and config (its worktree shares the repository's `.git`), and the git
//! CLI run by the daemon would run what they name (a `reference-transaction` or `post-checkout`
//! hook, `core.fsmonitor`, a filter driver, `core.hooksPath`, ...) as the operator, outside
//! every member's tree. libgit2 runs no hooks, has no fsmonitor and runs no filter, diff or
//! transport program; it only reads the config. A removal follows nothing a member could have
//! planted: the worktree's directory, its `.git` file and its entry under the repository's
//! `worktrees/` must be real directories and files that point at each other as this module made
//! them, or the worktree is kept with the reason; what is deleted is deleted without following
//! symlinks (`std::fs::remove_dir_all`).

use std::io::Read;
use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, Repository, StatusOptions, WorktreeAddOptions};

use crate::error::FleetError;
use crate::registry::state::Worktree;

/// Where member `name`'s worktree goes and its branch.
pub fn plan(state_dir: &Path, name: &str) -> (PathBuf, String) {
    (
        state_dir.join("worktrees").join(name),
        format!("fleet/{name}"),
    )
}

fn refused(name: &str, why: String) -> FleetError {
    FleetError::invalid(
        format!("--worktree for `{name}`"),
        why,
        "a spawn whose working directory is inside a git repository with at least one commit",
    )
}

/// What libgit2 said, for a refusal or a log line.
fn said(what: &str, e: &git2::Error) -> String {
    format!("{what}: {}", crate::types::truncate(e.message(), 300))
}

/// A path as git2 gives it, without the trailing `/` of a directory.
fn dir_text(p: &Path) -> String {
    let s = p.display().to_string();
    match s.trim_end_matches('/') {
        "" => s,
        t => t.to_string(),
    }
}

/// The top of the working tree that contains `cwd`.
fn toplevel(cwd: &Path) -> Result<PathBuf, String> {
    let repo = Repository::discover(cwd).map_err(|e| said("git", &e))?;
    let top = repo
        .workdir()
        .ok_or_else(|| "it is a bare repository, with no working tree".to_string())?;
    Ok(PathBuf::from(dir_text(top)))
}

/// Read a small file this module (or git) wrote, refusing a symlink or anything but a regular
/// file, and anything over 4 KiB.
fn read_small(path: &Path) -> Result<String, String> {
    let meta = path
        .symlink_metadata()
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    if !meta.file_type().is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(4096).read_to_string(&mut text))
        .map_err(|e| format!("{} cannot be read: {e}", path.display()))?;
    Ok(text.trim_end_matches(['\n', '\r']).to_string())
}

fn is_real_dir(path: &Path) -> bool {
    path.symlink_metadata()
        .is_ok_and(|m| m.file_type().is_dir())
}

/// The name of the repository's entry (`COMMON/worktrees/NAME`) the new worktree at `path` gets:
/// `name`, or `name1`, `name2`, ... if taken (as git names them). A stale entry of this very
/// path (its directory gone, e.g. removed by hand) is this module's own: it is removed and
/// reused.
fn entry_name(common: &Path, name: &str, path: &Path) -> Result<String, String> {
    let dir = common.join("worktrees");
    let ours = path.join(".git");
    for i in 0..100u32 {
        let cand = match i {
            0 => name.to_string(),
            i => format!("{name}{i}"),
        };
        let entry = dir.join(&cand);
        if entry.symlink_metadata().is_err() {
            return Ok(cand);
        }
        if is_real_dir(&entry)
            && read_small(&entry.join("gitdir")).is_ok_and(|g| Path::new(&g) == ours)
            && path.symlink_metadata().is_err()
        {
            std::fs::remove_dir_all(&entry).map_err(|e| {
                format!(
                    "the stale entry {} could not be removed: {e}",
                    entry.display()
                )
            })?;
            return Ok(cand);
        }
    }
    Err(format!(
        "{} already holds worktrees named {name} to {name}99",
        dir.display()
    ))
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
    let repo_dir = match prior {
        Some(w) => PathBuf::from(&w.repo),
        None => toplevel(cwd).map_err(|e| {
            refused(
                name,
                format!("{} is not in a git repository ({e})", cwd.display()),
            )
        })?,
    };
    if let Some(w) = prior
        && Path::new(&w.path).join(".git").exists()
    {
        return Ok(w.clone());
    }
    if path.symlink_metadata().is_ok() {
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
    let repo = Repository::open(&repo_dir).map_err(|e| {
        refused(
            name,
            said(&format!("{} cannot be opened", repo_dir.display()), &e),
        )
    })?;
    let (reference, base, made) = match (prior, repo.find_branch(&branch, BranchType::Local)) {
        (_, Ok(b)) => {
            let base = match prior {
                Some(w) => w.base.clone(),
                None => b
                    .get()
                    .peel_to_commit()
                    .map_err(|e| refused(name, said(&format!("branch {branch}"), &e)))?
                    .id()
                    .to_string(),
            };
            (b.into_reference(), base, false)
        }
        (prior, Err(_)) => {
            let commit = match prior {
                Some(w) => Oid::from_str(&w.base).and_then(|oid| repo.find_commit(oid)),
                None => repo.head().and_then(|h| h.peel_to_commit()),
            }
            .map_err(|e| {
                refused(
                    name,
                    said(
                        &format!("{} has no commit to start from", repo_dir.display()),
                        &e,
                    ),
                )
            })?;
            let b = repo
                .branch(&branch, &commit, false)
                .map_err(|e| refused(name, said(&format!("branch {branch}"), &e)))?;
            (b.into_reference(), commit.id().to_string(), true)
        }
    };
    let added = entry_name(repo.commondir(), name, &path).and_then(|entry| {
        let mut opts = WorktreeAddOptions::new();
        opts.reference(Some(&reference));
        repo.worktree(&entry, &path, Some(&opts))
            .map_err(|e| said("the worktree could not be added", &e))
    });
    if let Err(why) = added {
        // Leave nothing half made: the branch made for it, a directory libgit2 began.
        if made && let Ok(mut b) = repo.find_branch(&branch, BranchType::Local) {
            let _ = b.delete();
        }
        if is_real_dir(&path) {
            let _ = std::fs::remove_dir_all(&path);
        }
        return Err(refused(name, why));
    }
    Ok(Worktree {
        path: path.display().to_string(),
        branch,
        repo: repo_dir.display().to_string(),
        base,
    })
}

/// What became of a worktree at its member's exit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cleanup {
    /// Removed with its branch: it held no work.
    Removed,
    /// Kept: it holds work, or is not as fleetd made it (why).
    Kept(String),
}

/// The repository's entry for the worktree at `path` (`COMMON/worktrees/ENTRY`), if the two
/// point at each other as made: `path/.git` a regular file naming a real directory right under
/// `COMMON/worktrees` (itself a real directory), whose `gitdir` file names `path/.git` back.
/// Else why not.
fn entry_of(path: &Path, common: &Path) -> Result<PathBuf, String> {
    let dot_git = path.join(".git");
    let named = read_small(&dot_git)?;
    let named = named
        .strip_prefix("gitdir: ")
        .ok_or_else(|| format!("{} does not name a gitdir", dot_git.display()))?;
    let named = path.join(named);
    let worktrees = common.join("worktrees");
    let entry = match (named.parent(), named.file_name()) {
        (Some(dir), Some(entry))
            if is_real_dir(&worktrees)
                && std::fs::canonicalize(dir).ok() == Some(worktrees.clone()) =>
        {
            worktrees.join(entry)
        }
        _ => {
            return Err(format!(
                "{} names {}, not an entry of {}",
                dot_git.display(),
                named.display(),
                worktrees.display()
            ));
        }
    };
    if !is_real_dir(&entry) {
        return Err(format!("{} is not a directory", entry.display()));
    }
    let back = read_small(&entry.join("gitdir"))?;
    let back = entry.join(back);
    let same = |a: &Path, b: &Path| {
        std::fs::canonicalize(a).is_ok_and(|a| std::fs::canonicalize(b).is_ok_and(|b| a == b))
    };
    if !same(back.parent().unwrap_or(Path::new("")), path) {
        return Err(format!(
            "{} names {}, not this worktree",
            entry.join("gitdir").display(),
            back.display()
        ));
    }
    Ok(entry)
}

/// Remove `w` unless it holds work: commits no other branch has, or uncommitted changes. A
/// worktree that is not as fleetd made it (a symlink, a `.git` that points elsewhere), that is
/// locked, or that has submodules is kept, with the reason.
pub fn cleanup(w: &Worktree) -> Result<Cleanup, String> {
    let path = Path::new(&w.path);
    let kept = |why: String| Ok(Cleanup::Kept(why));
    match path.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Cleanup::Removed),
        Err(e) => return Err(format!("{} cannot be read: {e}", w.path)),
        Ok(m) if !m.file_type().is_dir() => {
            return kept(format!(
                "{} is not the directory fleetd made (a symlink or a file); left alone",
                w.path
            ));
        }
        Ok(_) => {}
    }
    let repo =
        Repository::open(&w.repo).map_err(|e| said(&format!("{} cannot be opened", w.repo), &e))?;
    let common = std::fs::canonicalize(repo.commondir())
        .map_err(|e| format!("{} cannot be read: {e}", repo.commondir().display()))?;
    let entry = match entry_of(path, &common) {
        Ok(e) => e,
        Err(why) => {
            return kept(format!(
                "{} is not as fleetd made it ({why}); left alone",
                w.path
            ));
        }
    };
    if entry.join("locked").symlink_metadata().is_ok() {
        return kept(format!("{} is locked (git worktree lock)", w.path));
    }
    let wt =
        Repository::open(path).map_err(|e| said(&format!("{} cannot be opened", w.path), &e))?;
    if std::fs::canonicalize(wt.commondir()).ok().as_deref() != Some(common.as_path()) {
        return kept(format!(
            "{} is not as fleetd made it (its repository is not {}); left alone",
            w.path, w.repo
        ));
    }
    // The directory fleetd made is the working tree, whatever the config says (`core.worktree`).
    wt.set_workdir(path, false)
        .map_err(|e| said(&format!("{} as the working tree", w.path), &e))?;
    let index = wt.index().map_err(|e| said("the worktree's index", &e))?;
    if entry.join("modules").symlink_metadata().is_ok()
        || index.iter().any(|e| e.mode & 0o170000 == 0o160000)
    {
        return kept(format!("{} has submodules; remove it by hand", w.path));
    }
    let mut opts = StatusOptions::new();
    opts.include_untracked(true)
        .recurse_untracked_dirs(false)
        .include_ignored(false)
        .exclude_submodules(true);
    let dirty = !wt
        .statuses(Some(&mut opts))
        .map_err(|e| said(&format!("the status of {}", w.path), &e))?
        .is_empty();
    if dirty {
        return kept(format!("{} has uncommitted changes", w.path));
    }
    // Commits on its branch (or its HEAD, if detached there) that no other branch has.
    let own_ref = format!("refs/heads/{}", w.branch);
    let tip = repo
        .find_reference(&own_ref)
        .and_then(|r| r.peel_to_commit())
        .map_err(|e| said(&format!("branch {}", w.branch), &e))?
        .id();
    let mut walk = repo.revwalk().map_err(|e| said("rev walk", &e))?;
    walk.push(tip).map_err(|e| said("rev walk", &e))?;
    if let Ok(head) = wt.head().and_then(|h| h.peel_to_commit()) {
        walk.push(head.id()).map_err(|e| said("rev walk", &e))?;
    }
    let branches = repo
        .branches(Some(BranchType::Local))
        .map_err(|e| said("branches", &e))?;
    for b in branches {
        let (b, _) = b.map_err(|e| said("branches", &e))?;
        if b.get().name().ok() == Some(own_ref.as_str()) {
            continue;
        }
        if let Ok(c) = b.get().peel_to_commit() {
            walk.hide(c.id()).map_err(|e| said("rev walk", &e))?;
        }
    }
    let mut own = 0u64;
    for oid in walk {
        oid.map_err(|e| said("rev walk", &e))?;
        own += 1;
    }
    if own > 0 {
        return kept(format!(
            "branch {} has {own} commit{} no other branch has",
            w.branch,
            if own == 1 { "" } else { "s" }
        ));
    }
    drop(index);
    drop(wt);
    std::fs::remove_dir_all(path).map_err(|e| format!("{} could not be removed: {e}", w.path))?;
    std::fs::remove_dir_all(&entry)
        .map_err(|e| format!("{} could not be removed: {e}", entry.display()))?;
    // Its commits are all on other branches (checked above), so deleting it loses nothing.
    repo.find_branch(&w.branch, BranchType::Local)
        .and_then(|mut b| b.delete())
        .map_err(|e| said(&format!("branch {} could not be deleted", w.branch), &e))?;
    Ok(Cleanup::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

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

    /// A repository whose hooks, `core.fsmonitor` and filter driver each leave a marker file
    /// when run (what a member can write into the `.git` it shares with its worktree).
    fn hostile_repo() -> (tempfile::TempDir, PathBuf) {
        let r = repo();
        let marks = r.path().parent().unwrap().join(format!(
            "{}-marks",
            r.path().file_name().unwrap().to_string_lossy()
        ));
        std::fs::create_dir_all(&marks).unwrap();
        std::fs::write(r.path().join(".gitattributes"), "* filter=evil\n").unwrap();
        std::fs::write(r.path().join("tracked.txt"), "data\n").unwrap();
        sh(r.path(), &["add", ".gitattributes", "tracked.txt"]);
        commit(r.path(), &["-m", "files"]);
        let script = |name: &str| {
            let f = marks.join(format!("{name}.sh"));
            std::fs::write(
                &f,
                // Leaves its mark and passes its input through (a filter's content), so git
                // goes on; a long-running filter (`process`) that never answers the handshake
                // makes git fall back to `smudge`/`clean`.
                format!(
                    "#!/bin/sh\ntouch '{}/ran-{name}'\n[ \"$1\" = process ] && exit 1\nexec cat\n",
                    marks.display()
                ),
            )
            .unwrap();
            std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            f
        };
        let hooks = r.path().join(".git").join("hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        for hook in [
            "reference-transaction",
            "post-checkout",
            "post-index-change",
            "pre-commit",
            "post-commit",
            "post-rewrite",
            "pre-auto-gc",
        ] {
            let f = script(hook);
            std::fs::copy(&f, hooks.join(hook)).unwrap();
            std::fs::set_permissions(
                hooks.join(hook),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
        }
        let fsmonitor = script("fsmonitor");
        let smudge = script("smudge");
        let clean = script("clean");
        let process = script("process");
        for (k, v) in [
            ("core.fsmonitor", fsmonitor.display().to_string()),
            ("filter.evil.smudge", format!("{} %f", smudge.display())),
            ("filter.evil.clean", format!("{} %f", clean.display())),
            (
                "filter.evil.process",
                format!("{} process", process.display()),
            ),
            (
                "diff.external",
                script("diff-external").display().to_string(),
            ),
            ("core.pager", script("pager").display().to_string()),
        ] {
            sh(r.path(), &["config", k, &v]);
        }
        (r, marks)
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

    /// Door 2 of issue 24: the daemon never runs a program a repository names (hooks,
    /// `core.fsmonitor`, filter drivers) while it makes, inspects or removes a worktree.
    #[test]
    fn no_hook_fsmonitor_or_filter_of_the_repository_runs() {
        let (r, marks) = hostile_repo();
        let state = tempfile::tempdir().unwrap();
        let none = Vec::<String>::new();
        let w = create(state.path(), "w1", r.path(), None);
        assert_eq!(
            ran(&marks),
            none,
            "programs the repository named ran: {w:?}"
        );
        let w = w.unwrap();
        assert_eq!(
            std::fs::read_to_string(Path::new(&w.path).join("tracked.txt")).unwrap(),
            "data\n",
            "the worktree has the branch's files"
        );
        assert_eq!(cleanup(&w).unwrap(), Cleanup::Removed);
        assert_eq!(ran(&marks), none, "at the cleanup");
        assert!(!Path::new(&w.path).exists());
        // Kept for a change, then resumed and removed: every path runs.
        let w = create(state.path(), "w2", r.path(), None).unwrap();
        std::fs::write(Path::new(&w.path).join("tracked.txt"), "changed\n").unwrap();
        assert!(matches!(cleanup(&w).unwrap(), Cleanup::Kept(_)));
        std::fs::write(Path::new(&w.path).join("tracked.txt"), "data\n").unwrap();
        assert_eq!(cleanup(&w).unwrap(), Cleanup::Removed);
        let again = create(state.path(), "w2", r.path(), Some(&w)).unwrap();
        assert_eq!(cleanup(&again).unwrap(), Cleanup::Removed);
        assert_eq!(ran(&marks), none, "programs the repository named ran");
    }

    /// What a member planted in its worktree for the cleanup to follow is not followed: a
    /// worktree directory swapped for a symlink, a `.git` file or a repository entry that points
    /// elsewhere, a symlink inside the tree. Each is kept (with the reason) or removed without
    /// touching what it points at.
    #[test]
    fn the_cleanup_follows_no_symlink_or_gitdir_a_member_planted() {
        let r = repo();
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let precious = outside.path().join("precious");
        std::fs::write(&precious, "keep me").unwrap();

        // The worktree directory itself swapped for a symlink to elsewhere.
        let w = create(state.path(), "w1", r.path(), None).unwrap();
        let moved = state.path().join("w1-moved");
        std::fs::rename(&w.path, &moved).unwrap();
        std::os::unix::fs::symlink(outside.path(), &w.path).unwrap();
        let c = cleanup(&w).unwrap();
        assert!(
            matches!(&c, Cleanup::Kept(why) if why.contains("symlink")),
            "{c:?}"
        );
        assert!(precious.exists());

        // Its `.git` file names another directory (here: one holding a precious file).
        let w = create(state.path(), "w2", r.path(), None).unwrap();
        std::fs::write(
            Path::new(&w.path).join(".git"),
            format!("gitdir: {}\n", outside.path().display()),
        )
        .unwrap();
        let c = cleanup(&w).unwrap();
        assert!(
            matches!(&c, Cleanup::Kept(why) if why.contains("not as fleetd made it")),
            "{c:?}"
        );
        assert!(precious.exists() && Path::new(&w.path).exists());

        // The repository's entry names another worktree than this one.
        let w = create(state.path(), "w3", r.path(), None).unwrap();
        let entry = r.path().join(".git").join("worktrees").join("w3");
        std::fs::write(
            entry.join("gitdir"),
            format!("{}\n", outside.path().join(".git").display()),
        )
        .unwrap();
        let c = cleanup(&w).unwrap();
        assert!(
            matches!(&c, Cleanup::Kept(why) if why.contains("not this worktree")),
            "{c:?}"
        );
        assert!(precious.exists() && Path::new(&w.path).exists());

        // A symlink committed in the tree (merged, so no work of its own): the worktree is
        // removed, and what the link points at is not.
        let w = create(state.path(), "w4", r.path(), None).unwrap();
        std::os::unix::fs::symlink(outside.path(), Path::new(&w.path).join("link")).unwrap();
        let c = cleanup(&w).unwrap();
        assert!(
            matches!(&c, Cleanup::Kept(why) if why.contains("uncommitted")),
            "{c:?}"
        );
        sh(Path::new(&w.path), &["add", "link"]);
        commit(Path::new(&w.path), &["-m", "link"]);
        sh(r.path(), &["merge", "-q", "--ff-only", "fleet/w4"]);
        assert_eq!(cleanup(&w).unwrap(), Cleanup::Removed);
        assert!(!Path::new(&w.path).exists());
        assert!(!entry.with_file_name("w4").exists(), "its entry is gone");
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me");
    }

    /// A worktree removed by hand (its entry left behind) is made again at the same place.
    #[test]
    fn a_stale_entry_of_the_same_path_is_reused() {
        let r = repo();
        let state = tempfile::tempdir().unwrap();
        let w = create(state.path(), "w1", r.path(), None).unwrap();
        std::fs::remove_dir_all(&w.path).unwrap();
        let again = create(state.path(), "w1", r.path(), Some(&w)).unwrap();
        assert_eq!(again.path, w.path);
        assert!(Path::new(&again.path).join(".git").is_file());
        assert_eq!(cleanup(&again).unwrap(), Cleanup::Removed);
        let entries = std::fs::read_dir(r.path().join(".git").join("worktrees")).unwrap();
        assert_eq!(entries.count(), 0, "no entry left");
    }

    #[test]
    fn outside_a_repository_it_is_refused_clearly() {
        let state = tempfile::tempdir().unwrap();
        let plain = tempfile::tempdir().unwrap();
        let e = create(state.path(), "w1", plain.path(), None).unwrap_err();
        assert!(e.why.contains("not in a git repository"), "{e}");
    }
}
