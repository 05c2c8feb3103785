//! Files the daemon writes whole: readable only by their owner, and durable (a temporary beside
//! the file, fsync, rename, fsync of the directory), so a crash leaves the old file or the new,
//! never a torn one. Must never follow a rule of its own about what goes in them.

/// Write a file readable only by its owner, durably: a temporary beside it, fsync, rename,
/// fsync the directory (so the rename itself survives a crash).
pub fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    // A new file, never an existing one and never through a symlink: whatever is at the
    // temporary's name (a leftover, or a link a member planted in a directory it can write) is
    // removed, not written through.
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}

/// A directory a member can write in (its wiring dir), and the check that a path the daemon is
/// about to write under it really is under it: every directory on the way is a real one, not a
/// symlink the member planted to send the daemon's write elsewhere.
pub struct Confined {
    real: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Confined {
    /// `dir`, made if missing; refused if it is itself a symlink.
    pub fn new(dir: &std::path::Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        if std::fs::symlink_metadata(dir)?.file_type().is_symlink() {
            return Err(std::io::Error::other(format!(
                "{} is a symlink; fleetd writes only into a real directory",
                dir.display()
            )));
        }
        Ok(Confined {
            real: std::fs::canonicalize(dir)?,
            dir: dir.to_path_buf(),
        })
    }

    /// Whether `path` (under the directory) has a real directory, inside it, as its parent
    /// (made if missing), and is not itself a directory or a symlink to one.
    pub fn check(&self, path: &std::path::Path) -> std::io::Result<()> {
        let refuse = |why: &str| {
            Err(std::io::Error::other(format!(
                "{}: {why}; fleetd writes only into real directories under {}",
                path.display(),
                self.dir.display()
            )))
        };
        let Some(parent) = path.parent() else {
            return refuse("no parent directory");
        };
        if !path.starts_with(&self.dir) {
            return refuse("outside the directory");
        }
        // The deepest directory that exists must be inside before anything is made under it,
        // and the parent after.
        let existing = parent.ancestors().find(|a| a.exists()).unwrap_or(&self.dir);
        if !std::fs::canonicalize(existing)?.starts_with(&self.real) {
            return refuse("a symlink on the way leads outside");
        }
        std::fs::create_dir_all(parent)?;
        if !std::fs::canonicalize(parent)?.starts_with(&self.real) {
            return refuse("a symlink on the way leads outside");
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => refuse("is a directory"),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_symlink_neither_receives_the_write_nor_leads_it_out() {
        let root = tempfile::tempdir().unwrap();
        let wiring = root.path().join("agents/w");
        let victim = root.path().join("ledger.jsonl");
        std::fs::write(&victim, "the ledger").unwrap();
        let c = Confined::new(&wiring).unwrap();
        // A link at the temporary's name: removed, not written through.
        std::os::unix::fs::symlink(&victim, wiring.join("mcp.tmp")).unwrap();
        c.check(&wiring.join("mcp.json")).unwrap();
        write_private(&wiring.join("mcp.json"), b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the ledger");
        assert_eq!(
            std::fs::read_to_string(wiring.join("mcp.json")).unwrap(),
            "{}"
        );
        // A directory on the way that is a link out: refused.
        let out = root.path().join("elsewhere");
        std::fs::create_dir(&out).unwrap();
        std::os::unix::fs::symlink(&out, wiring.join("gemini-home")).unwrap();
        let e = c
            .check(&wiring.join("gemini-home/.gemini/settings.json"))
            .unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(std::fs::read_dir(&out).unwrap().next().is_none());
        // The directory itself a link: refused.
        let linked = root.path().join("agents/x");
        std::os::unix::fs::symlink(&out, &linked).unwrap();
        assert!(Confined::new(&linked).is_err());
    }
}
