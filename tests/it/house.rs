//! The house's rules that hold by construction, checked where construction could slip: the rules'
//! crate (`fleetd-core`) depends on nothing that runs tasks, opens files or sockets, or keeps a
//! database, and the shells' crate does not grow a second copy of a rule module.

use std::process::Command;

/// Crates that do I/O or run tasks. None may appear among `fleetd-core`'s normal dependencies.
const NOT_IN_THE_CORE: &[&str] = &[
    "tokio",
    "ractor",
    "redb",
    "quinn",
    "quinn-proto",
    "rustls",
    "mio",
    "socket2",
    "libc",
    "nix",
    "rustix",
    "getrandom",
    "axum",
    "hyper",
    "portable-pty",
    "rmcp",
    "futures",
    "tempfile",
];

fn cargo_tree(package: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_rules_crate_depends_on_nothing_that_does_io() {
    let deps = cargo_tree("fleetd-core");
    assert!(
        deps.iter().any(|d| d == "fleetd-core") && deps.iter().any(|d| d == "serde"),
        "cargo tree did not list fleetd-core's dependencies: {deps:?}"
    );
    let bad: Vec<&String> = deps
        .iter()
        .filter(|d| NOT_IN_THE_CORE.contains(&d.as_str()))
        .collect();
    assert!(
        bad.is_empty(),
        "fleetd-core must not depend on {bad:?} (directly or through another crate): the rules \
         do no I/O; put the code that needs them in fleetd-actors"
    );
    // The shells' crate does depend on the runtime: the check above would catch it.
    let shells = cargo_tree("fleetd-actors");
    assert!(shells.iter().any(|d| d == "tokio") && shells.iter().any(|d| d == "redb"));
}

/// A rule module lives once, in `fleetd-core`; `fleetd-actors` only re-exports it. A `state.rs`
/// (or another pure module) written again under `actors/src` would shadow the core's copy.
#[test]
fn no_core_module_is_also_a_file_in_the_shells_crate() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("actors");
    let mut core_files = vec![];
    walk(&root.join("core/src"), &mut core_files);
    assert!(
        core_files.len() > 20,
        "found {} core files",
        core_files.len()
    );
    // These concepts have a pure part in the core and an I/O part in the shells, by design.
    let split = ["lib.rs", "keys.rs", "events.rs", "term.rs"];
    let mut twice = vec![];
    for f in core_files {
        let rel = f
            .strip_prefix(root.join("core/src"))
            .expect("under core/src");
        let name = rel.to_string_lossy().to_string();
        if name.ends_with("mod.rs") || split.contains(&name.as_str()) {
            continue;
        }
        if root.join("src").join(rel).exists() {
            twice.push(name);
        }
    }
    assert!(
        twice.is_empty(),
        "rule modules also present in actors/src: {twice:?}"
    );
}

fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir)
        .expect("readable source dir")
        .flatten()
    {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}
