//! The test, demo and bench harness: not the product. `sim` is the scripted terminal agent
//! (`fleetd sim-agent`) the demo, the integration tests and the benches run as members; `demo`
//! is `fleetd demo`; `bench` is `fleetd bench` (and `fleetd echo-server`, its baseline);
//! `probe` is `fleetd probe`, the hostile member of the isolation probes (`tests/it/probe.rs`).
//!
//! Owns nothing the product needs. It drives the product only from outside, as an operator or
//! an agent would (the REST client, MCP through the shim, a PTY). The product's modules
//! (daemon, rest, mcp, shim, term, link, identity, metrics, dashboard, the CLI's client
//! commands, ...) must never import it: only `entry.rs`'s subcommand dispatch and
//! `cli/args.rs`'s subcommand definitions reach it. The test below enforces that, and the
//! module is private to the crate, so it is no part of the library's public surface either.

pub mod bench;
pub mod demo;
pub mod probe;
pub mod sim;

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The only files outside the harness that may name it.
    const MAY_REACH_IT: [&str; 2] = ["src/entry.rs", "src/cli/args.rs"];

    /// Spellings of a path into the harness (or into its modules at their old places).
    const REACHES_IT: [&str; 7] = [
        "harness::",
        "crate::bench",
        "crate::sim",
        "crate::demo",
        "fleetd::bench",
        "fleetd::sim",
        "fleetd::demo",
    ];

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("a source directory reads") {
            let p = e.expect("a directory entry reads").path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn no_product_module_imports_the_harness() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = vec![];
        rust_files(&root.join("src"), &mut files);
        let mut offenders = vec![];
        for f in &files {
            let rel = f
                .strip_prefix(root)
                .expect("under the crate")
                .to_string_lossy();
            if rel.starts_with("src/harness/") || MAY_REACH_IT.contains(&rel.as_ref()) {
                continue;
            }
            let text = std::fs::read_to_string(f).expect("a source file reads");
            for (n, line) in text.lines().enumerate() {
                if let Some(what) = REACHES_IT.iter().find(|w| line.contains(*w)) {
                    offenders.push(format!("{rel}:{}: `{what}` in {}", n + 1, line.trim()));
                }
            }
        }
        assert!(files.len() > 20, "the scan found the sources: {files:?}");
        assert!(
            offenders.is_empty(),
            "product code reaches the test/demo/bench harness (only {MAY_REACH_IT:?} may): \
             {offenders:#?}"
        );
        // Nor is it part of the library's public surface.
        let lib = std::fs::read_to_string(root.join("src/lib.rs")).expect("lib.rs reads");
        for m in ["harness", "bench", "demo", "sim"] {
            assert!(
                !lib.lines().any(|l| l.trim() == format!("pub mod {m};")),
                "lib.rs exports `{m}`"
            );
        }
    }
}
