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
    let split = ["lib.rs", "keys.rs", "events.rs", "term.rs", "sandbox.rs"];
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

/// The import drawing rises cleanly: within each crate, no module imports one that imports it
/// back (directly or around a circle). Cores at the bottom (their own crate), the shells above,
/// the operations (`fleet`) and the program on top. A module's own submodules are not imports.
#[test]
fn no_module_imports_form_a_circle() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for krate in ["actors/core/src", "actors/src", "src"] {
        let circles = import_circles(&root.join(krate));
        assert!(
            circles.is_empty(),
            "{krate}: modules that import each other around a circle: {circles:?}"
        );
    }
}

/// The strongly connected sets (more than one module) of a crate's `crate::`/`super::` imports.
fn import_circles(dir: &std::path::Path) -> Vec<Vec<String>> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut files = vec![];
    walk(dir, &mut files);
    let name_of = |p: &std::path::Path| -> String {
        let rel = p.strip_prefix(dir).expect("under the crate");
        let mut parts: Vec<String> = rel
            .with_extension("")
            .iter()
            .map(|s| s.to_string_lossy().to_string())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        parts.join("::")
    };
    let modules: BTreeMap<String, std::path::PathBuf> =
        files.iter().map(|p| (name_of(p), p.clone())).collect();
    let path_re = regex::Regex::new(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)").unwrap();
    let group_re = regex::Regex::new(r"(?s)use crate::\{([^;]*)\};").unwrap();
    let word_re = regex::Regex::new(r"[a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*").unwrap();
    let super_re = regex::Regex::new(r"super::([a-z_][a-z0-9_]*)").unwrap();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, p) in &modules {
        let text = std::fs::read_to_string(p).expect("readable source");
        // Test modules may reach anywhere; comments (doc links included) import nothing.
        let text: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let text = text.as_str();
        let mut refs: BTreeSet<String> = BTreeSet::new();
        refs.extend(path_re.captures_iter(text).map(|c| c[1].to_string()));
        for g in group_re.captures_iter(text) {
            refs.extend(word_re.find_iter(&g[1]).map(|w| w.as_str().to_string()));
        }
        let parent = m.rsplit_once("::").map(|(p, _)| p.to_string());
        for c in super_re.captures_iter(text) {
            refs.insert(match &parent {
                Some(p) => format!("{p}::{}", &c[1]),
                None => c[1].to_string(),
            });
        }
        for r in refs {
            let parts: Vec<&str> = r.split("::").collect();
            for k in (1..=parts.len()).rev() {
                let cand = parts[..k].join("::");
                if modules.contains_key(&cand) {
                    if &cand != m && !cand.starts_with(&format!("{m}::")) {
                        edges.entry(m.clone()).or_default().insert(cand);
                    }
                    break;
                }
            }
        }
    }
    // Tarjan's strongly connected components.
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        stack: Vec<String>,
        on: BTreeSet<String>,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T, v: &str) {
        let i = t.index.len();
        t.index.insert(v.to_string(), i);
        t.low.insert(v.to_string(), i);
        t.stack.push(v.to_string());
        t.on.insert(v.to_string());
        let next: Vec<String> = t.edges.get(v).into_iter().flatten().cloned().collect();
        for w in next {
            if !t.index.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(&w) {
                let iw = t.index[&w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges: &edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for m in modules.keys() {
        if !t.index.contains_key(m) {
            visit(&mut t, m);
        }
    }
    t.out
}

/// The circle check finds a circle when there is one.
#[test]
fn the_circle_check_sees_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("lib.rs"),
        "pub mod a;\npub mod b;\npub mod c;\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("a.rs"), "use crate::b::X;\n").unwrap();
    std::fs::write(dir.path().join("b.rs"), "use crate::{c::Y};\n").unwrap();
    std::fs::write(dir.path().join("c.rs"), "fn f() { super::a::g() }\n").unwrap();
    assert_eq!(
        import_circles(dir.path()),
        vec![vec!["a".to_string(), "b".to_string(), "c".to_string()]]
    );
    std::fs::write(dir.path().join("c.rs"), "fn f() {}\n").unwrap();
    assert!(import_circles(dir.path()).is_empty());
}
