//! The knowledge base on disk: `KB/fleet/drift/{identity}/{YYYY-MM-DD}.jsonl`.
//!
//! Owns reading a KB into a [`Snapshot`] (bounded: file sizes, file counts) and appending a
//! signed line (creating the day's file with its header), never through a symlink: not a log's,
//! not an identity directory's (listing its dates, reading, appending). Must never interpret a line: that is
//! the gates' job.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::drift::gates::{LogFile, Logs, Snapshot};
use crate::drift::line;

/// Largest log file read; a bigger one is reported unreadable.
pub const MAX_FILE: u64 = 16 << 20;
/// At most this many date files per identity are read (the newest).
pub const MAX_FILES: usize = 400;

/// `KB/fleet/drift`, or KB itself if it already is a drift directory.
pub fn drift_root(kb: &Path) -> PathBuf {
    let nested = kb.join("fleet").join("drift");
    if nested.is_dir() {
        nested
    } else {
        kb.to_path_buf()
    }
}

/// `identity`'s directory under `root`, if it is a real directory: never a symlink (to a
/// directory outside the KB or anywhere else), which is refused with `InvalidData` naming it;
/// `NotFound` if there is none.
pub fn identity_dir(root: &Path, identity: &str) -> std::io::Result<PathBuf> {
    let dir = root.join(identity);
    let meta = std::fs::symlink_metadata(&dir)?;
    if meta.file_type().is_symlink() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{identity} is a symlink, not a directory (a symlink is not followed)"),
        ));
    }
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{identity} is not a directory"),
        ));
    }
    Ok(dir)
}

/// Read one KB file safely: never through a symlink (neither the file nor its identity's
/// directory), only a regular file, and at most [`MAX_FILE`] bytes actually read (a size in
/// the metadata is not trusted: `/dev/zero` says 0).
pub fn read_file(root: &Path, identity: &str, file: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
    let dir = identity_dir(root, identity)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(file))
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                refuse(format!("{identity}/{file} is a symlink (not followed)"))
            } else {
                e
            }
        })?;
    if !f.metadata()?.is_file() {
        return Err(refuse(format!("{identity}/{file} is not a regular file")));
    }
    let mut buf = vec![];
    f.take(MAX_FILE + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > MAX_FILE {
        return Err(refuse(format!(
            "{identity}/{file} is over {MAX_FILE} bytes"
        )));
    }
    Ok(buf)
}

/// `identity`'s directory under `root`, made if missing; a symlink in its place is refused
/// ([`identity_dir`]), so an append never lands outside the KB.
fn make_identity_dir(root: &Path, identity: &str) -> std::io::Result<PathBuf> {
    match std::fs::create_dir(root.join(identity)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    identity_dir(root, identity)
}

/// Open a log for appending, never through a symlink.
fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

pub use fleetd_core::clock::date_of;

fn is_date(s: &str) -> bool {
    s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

/// The dates one identity has logs for, oldest first. An identity directory that is a symlink
/// is refused, not listed ([`identity_dir`]).
pub fn dates(kb: &Path, identity: &str) -> std::io::Result<Vec<String>> {
    let dir = identity_dir(&drift_root(kb), identity)?;
    let mut out = vec![];
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(d) = name.strip_suffix(".jsonl")
            && is_date(d)
        {
            out.push(d.to_string());
        }
    }
    out.sort();
    Ok(out)
}

/// Read a whole KB. Errors only if the KB root itself cannot be read.
pub fn read(kb: &Path) -> std::io::Result<Snapshot> {
    let root = drift_root(kb);
    let mut s = Snapshot::default();
    for e in std::fs::read_dir(&root)? {
        let e = e?;
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        let identity = e.file_name().to_string_lossy().into_owned();
        if crate::types::MemberName::new(&identity).is_err() {
            continue;
        }
        s.identities
            .insert(identity.clone(), read_identity(&root, &identity));
    }
    Ok(s)
}

/// Read one identity's directory (missing = no logs; a symlink = unreadable).
pub fn read_identity(root: &Path, identity: &str) -> Logs {
    let dir = match identity_dir(root, identity) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Logs::Present(vec![]),
        Err(e) => return Logs::Unreadable(e.to_string()),
    };
    let mut dates = vec![];
    match std::fs::read_dir(&dir) {
        Ok(rd) => {
            for e in rd {
                let Ok(e) = e else { continue };
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(d) = name.strip_suffix(".jsonl")
                    && is_date(d)
                {
                    dates.push(d.to_string());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Logs::Present(vec![]),
        Err(e) => return Logs::Unreadable(e.to_string()),
    }
    dates.sort();
    let skip = dates.len().saturating_sub(MAX_FILES);
    let mut files = vec![];
    for d in dates.into_iter().skip(skip) {
        let rel = format!("fleet/drift/{identity}/{d}.jsonl");
        match read_file(root, identity, &format!("{d}.jsonl")) {
            Ok(b) => files.push(LogFile {
                date: d,
                path: rel,
                text: String::from_utf8_lossy(&b).into_owned(),
            }),
            Err(e) => return Logs::Unreadable(format!("{rel}: {e}")),
        }
    }
    Logs::Present(files)
}

/// Does `identity` have any log at all?
pub fn has_log(kb: &Path, identity: &str) -> bool {
    dates(kb, identity).map(|d| !d.is_empty()).unwrap_or(false)
}

/// Append a signed line to `identity`'s log for `date`, creating the file with its header.
/// Synced before it returns.
pub fn append(
    kb: &Path,
    identity: &str,
    date: &str,
    signed_line: &str,
) -> std::io::Result<PathBuf> {
    let root = kb.join("fleet").join("drift");
    std::fs::create_dir_all(&root)?;
    let dir = make_identity_dir(&root, identity)?;
    let path = dir.join(format!("{date}.jsonl"));
    let mut f = open_append(&path)?;
    let fresh = f.metadata()?.len() == 0;
    let mut buf = String::new();
    if fresh {
        buf.push_str(&line::header(identity, date));
        buf.push('\n');
    }
    buf.push_str(signed_line);
    buf.push('\n');
    f.write_all(buf.as_bytes())?;
    f.sync_data()?;
    if fresh {
        // A new day's file: its directory entry must survive a crash too.
        std::fs::File::open(&dir)?.sync_all()?;
    }
    Ok(path)
}

/// Append without syncing (building a KB in bulk: benchmarks, fixtures). Same format as
/// [`append`].
pub fn append_unsynced(
    kb: &Path,
    identity: &str,
    date: &str,
    signed_line: &str,
) -> std::io::Result<PathBuf> {
    let root = kb.join("fleet").join("drift");
    std::fs::create_dir_all(&root)?;
    let dir = make_identity_dir(&root, identity)?;
    let path = dir.join(format!("{date}.jsonl"));
    let mut f = open_append(&path)?;
    let fresh = f.metadata()?.len() == 0;
    if fresh {
        writeln!(f, "{}", line::header(identity, date))?;
    }
    writeln!(f, "{signed_line}")?;
    Ok(path)
}

/// The next tick for `identity`: one past the highest tick in its logs.
pub fn next_tick(kb: &Path, identity: &str) -> u64 {
    let root = drift_root(kb);
    match read_identity(&root, identity) {
        Logs::Present(files) => files
            .iter()
            .flat_map(|f| f.text.lines().skip(1))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("tick").and_then(|t| t.as_u64()))
            .max()
            .map_or(1, |t| t + 1),
        Logs::Unreadable(_) => 1,
    }
}

/// The anchors this host serves to its peers: per identity in the KB, the lines of its newest
/// `days` date files (each bounded by [`MAX_FILE`]) that verify against `key` and are anchors,
/// as `(identity, line)`; past `max` of them, the newest `max`. Unreadable files are skipped (the
/// peers keep what they have). The signatures are checked in one batch (`line::check_batch`).
pub fn served_anchors(
    kb: &Path,
    key: &ed25519_dalek::VerifyingKey,
    days: usize,
    max: usize,
) -> std::io::Result<Vec<(String, String)>> {
    let root = drift_root(kb);
    let mut candidates = vec![];
    let rd = match std::fs::read_dir(&root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    for e in rd.flatten() {
        let identity = e.file_name().to_string_lossy().into_owned();
        if !e.file_type().is_ok_and(|t| t.is_dir())
            || crate::types::MemberName::new(&identity).is_err()
        {
            continue;
        }
        let Ok(ds) = dates(kb, &identity) else {
            continue;
        };
        let skip = ds.len().saturating_sub(days);
        for d in ds.into_iter().skip(skip) {
            let Ok(bytes) = read_file(&root, &identity, &format!("{d}.jsonl")) else {
                continue;
            };
            let Ok(text) = String::from_utf8(bytes) else {
                continue;
            };
            candidates.extend(
                text.lines()
                    .skip(1)
                    .map(|l| (identity.clone(), l.to_string())),
            );
        }
    }
    let (good, _) = line::check_batch(
        candidates,
        std::slice::from_ref(key),
        crate::drift::remote::is_anchor,
    );
    let mut good = good;
    if good.len() > max {
        good.sort_by_key(|(_, v, _)| v.ts_ms);
        good.drain(..good.len() - max);
    }
    Ok(good
        .into_iter()
        .map(|(identity, _, l)| (identity, l))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drift::line::{Kind, NewLine, sign};

    #[test]
    fn symlinks_and_special_files_in_the_kb_are_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let secret = root.join("secret");
        std::fs::write(&secret, "not a log").unwrap();
        std::fs::create_dir_all(root.join("w1")).unwrap();
        std::fs::write(root.join("w1/2026-12-01.jsonl"), "{}\n").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("w1/2026-12-02.jsonl")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("w1/2026-12-03.jsonl")).unwrap();
        std::os::unix::fs::symlink(root.join("w1"), root.join("w2")).unwrap();
        assert_eq!(read_file(root, "w1", "2026-12-01.jsonl").unwrap(), b"{}\n");
        for (id, f, why) in [
            ("w1", "2026-12-02.jsonl", "symlink"),
            ("w1", "2026-12-03.jsonl", "symlink"),
            ("w2", "2026-12-01.jsonl", "not a directory"),
        ] {
            let e = read_file(root, id, f).unwrap_err().to_string();
            assert!(e.contains(why), "{id}/{f}: {e}");
        }
        // A FIFO is not read (it would block), nor a device reached by its own name.
        let made = std::process::Command::new("mkfifo")
            .arg(root.join("w1/2026-12-04.jsonl"))
            .status()
            .unwrap();
        assert!(made.success());
        let e = read_file(root, "w1", "2026-12-04.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        // The identity with a symlinked log is unreadable as a whole, said so.
        match read_identity(root, "w1") {
            Logs::Unreadable(why) => assert!(why.contains("symlink"), "{why}"),
            Logs::Present(_) => panic!("a symlinked log was read"),
        }
        // Appending through a symlink is refused (it would write into the target).
        let d = root.join("fleet/drift/w3");
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink(&secret, d.join("2026-12-05.jsonl")).unwrap();
        assert!(append(root, "w3", "2026-12-05", "{}").is_err());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "not a log");
    }

    #[test]
    fn a_log_over_the_limit_is_refused_by_bytes_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("w1")).unwrap();
        let f = std::fs::File::create(root.join("w1/2026-12-01.jsonl")).unwrap();
        f.set_len(MAX_FILE + 1).unwrap();
        let e = read_file(root, "w1", "2026-12-01.jsonl")
            .unwrap_err()
            .to_string();
        assert!(e.contains("over"), "{e}");
    }

    #[test]
    fn only_this_hosts_intact_anchors_are_served() {
        let dir = tempfile::tempdir().unwrap();
        let kb = dir.path();
        let (me, other) = (
            ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]),
            ed25519_dalek::SigningKey::from_bytes(&[2u8; 32]),
        );
        let t = 1_796_212_800_000;
        let day = date_of(t);
        let line =
            |k: &ed25519_dalek::SigningKey, kind: Kind, role: &str, subject: Option<&str>| {
                sign(
                    &NewLine {
                        ts_ms: t,
                        tick: 1,
                        kind: Some(kind),
                        baseline: Some(role.into()),
                        delta: (kind == Kind::Drift).then(|| serde_json::json!({"x": 1})),
                        subject: subject.map(String::from),
                        ..Default::default()
                    },
                    k,
                )
            };
        let good = line(&me, Kind::Fencepost, "reviewer", None);
        append(kb, "x", &day, &good).unwrap();
        append(kb, "x", &day, &line(&me, Kind::Drift, "reviewer", None)).unwrap();
        append(
            kb,
            "x",
            &day,
            &line(&me, Kind::Fencepost, "architect", Some("y")),
        )
        .unwrap();
        append(
            kb,
            "y",
            &day,
            &line(&other, Kind::Fencepost, "architect", None),
        )
        .unwrap();
        let re = line(&me, Kind::Reanchor, "release manager", None);
        append(kb, "z", &day, &re.replace("release manager", "deployer")).unwrap();
        append(kb, "z", &day, &re).unwrap();
        let served = served_anchors(kb, &me.verifying_key(), 3, usize::MAX).unwrap();
        let mut got: Vec<(String, String)> = served;
        got.sort();
        assert_eq!(got, vec![("x".to_string(), good), ("z".to_string(), re)]);
    }

    #[test]
    fn past_the_limit_the_newest_anchors_are_served_whatever_the_identity() {
        let dir = tempfile::tempdir().unwrap();
        let kb = dir.path();
        let me = ed25519_dalek::SigningKey::from_bytes(&[1u8; 32]);
        let t = 1_796_212_800_000;
        // Identities whose directory order is unrelated to the age of their anchors.
        for (i, who) in ["c", "a", "d", "b"].iter().enumerate() {
            let l = NewLine::anchor(t + i as u64 * 1_000, 1, "reviewer");
            append(kb, who, &date_of(t), &sign(&l, &me)).unwrap();
        }
        let mut got: Vec<String> = served_anchors(kb, &me.verifying_key(), 3, 2)
            .unwrap()
            .into_iter()
            .map(|(who, _)| who)
            .collect();
        got.sort();
        assert_eq!(got, vec!["b", "d"]);
    }
}
