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
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}
