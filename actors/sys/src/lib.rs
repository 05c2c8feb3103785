//! The few calls into the C library that no safe crate wraps, each with its safety argument.
//! Every other fleetd crate is `#![forbid(unsafe_code)]`; this one holds the exceptions, so they
//! are few, small and reviewed in one place.
//!
//! Owns: giving the allocator's free memory back to the operating system. Must never hold
//! state, take pointers from callers, or grow into a general FFI layer.

#![deny(unsafe_code)]

/// Give the heap's free pages back to the operating system (glibc's `malloc_trim(0)`: free
/// memory in every arena is returned with `madvise(MADV_DONTNEED)`, not only the top of the
/// heap as `free` does). Returns whether any memory was released. Costs a walk over the
/// heap's free chunks, so call it after a burst of frees, not per free. Elsewhere than glibc
/// it does nothing.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a plain integer, touches only the allocator's own free
        // lists under the allocator's locks, and is safe to call from any thread at any time.
        #[allow(unsafe_code)]
        let released = unsafe { libc::malloc_trim(0) };
        released == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn freed_memory_goes_back_to_the_system() {
        fn rss_kib() -> u64 {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
                })
                .unwrap_or(0)
        }
        // Runs of small blocks (below the mmap threshold, so `free` alone keeps them
        // resident; like a screen grid's rows), each run followed by a block that stays, so
        // the freed runs are not at the heap's top.
        let mut gone: Vec<Vec<u8>> = Vec::new();
        let mut stay: Vec<Vec<u8>> = Vec::new();
        for i in 0..500 {
            for _ in 0..40 {
                gone.push(vec![i as u8; 4000]);
            }
            stay.push(vec![i as u8; 64]);
        }
        let full = rss_kib();
        drop(gone);
        let before = rss_kib();
        super::release_free_memory();
        let after = rss_kib();
        assert!(stay.len() == 500);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(
                after + 40_000 < before,
                "RSS {full} KiB full, {before} KiB after free, {after} KiB after the release"
            );
        }
    }
}
