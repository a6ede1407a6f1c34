//! The crates' modules import each other without circles (a module may use its own
//! parent, as a child of it; siblings point one way). A circle means a helper sits in
//! the wrong place: the import graph is read from `use crate::…` and `super::…` paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of the crate at `dir` (by path, `a::b`; the root is ``) and its source.
fn modules(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let src = dir.join("src");
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("a source folder") {
            let p = e.expect("an entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(&src).unwrap().with_extension("");
                let mut name = rel.to_string_lossy().replace('/', "::");
                if name == "lib" || name == "main" {
                    name.clear();
                } else if let Some(parent) = name.strip_suffix("::mod") {
                    name = parent.to_string();
                }
                out.insert(name, std::fs::read_to_string(&p).expect("readable"));
            }
        }
    }
    out
}

/// The module a path used from `from` lands in: its longest prefix that is a module.
fn resolve(mods: &BTreeMap<String, String>, from: &str, path: &str) -> Option<String> {
    let mut parts: Vec<&str> = path.split("::").collect();
    let mut base: Vec<&str> = match parts[0] {
        "crate" => Vec::new(),
        "super" => from.split("::").filter(|s| !s.is_empty()).collect(),
        _ => return None,
    };
    while parts.first() == Some(&"super") {
        base.pop();
        parts.remove(0);
    }
    if parts.first() == Some(&"crate") {
        parts.remove(0);
    }
    (0..=parts.len()).rev().find_map(|n| {
        let mut m = base.clone();
        m.extend(&parts[..n]);
        let m = m.join("::");
        mods.contains_key(&m).then_some(m)
    })
}

/// `crate::a::b` and `super::x` paths in `source`, leaving out comments and the unit tests.
fn paths(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    let mut out = Vec::new();
    for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
        let mut rest = line;
        while let Some(at) = ["crate::", "super::"].iter().filter_map(|k| rest.find(k)).min() {
            let word_start = at == 0
                || !rest.as_bytes()[at - 1].is_ascii_alphanumeric() && rest.as_bytes()[at - 1] != b'_';
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            if word_start {
                out.push(tail[..end].trim_end_matches(':').to_string());
            }
            rest = &tail[end.max(1)..];
        }
    }
    out
}

/// The circles among the modules of the crate at `dir`, each as its modules.
fn circles(dir: &Path) -> Vec<BTreeSet<String>> {
    let mods = modules(dir);
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (m, source) in &mods {
        for p in paths(source) {
            let Some(to) = resolve(&mods, m, &p) else { continue };
            let ancestor = to.is_empty() || m.starts_with(&format!("{to}::"));
            if to != *m && !ancestor {
                edges.entry(m).or_default().insert(to);
            }
        }
    }
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(m) = todo.pop() {
            for n in edges.get(m.as_str()).into_iter().flatten() {
                if seen.insert(n.clone()) {
                    todo.push(n.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<String>> = mods.keys().map(|m| (m.as_str(), reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for m in mods.keys() {
        if !reached[m.as_str()].contains(m) {
            continue;
        }
        let circle: BTreeSet<String> = reached[m.as_str()]
            .iter()
            .filter(|n| reached[n.as_str()].contains(m))
            .cloned()
            .collect();
        if !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

fn crate_dir(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(name)
}

#[test]
fn the_runtime_the_rust_api_and_the_c_library_have_no_import_circle() {
    for name in ["runtime", "pontoon", "mpi-abi"] {
        assert_eq!(
            circles(&crate_dir(name)),
            Vec::<BTreeSet<String>>::new(),
            "{name}"
        );
    }
}

#[test]
fn a_circle_is_found() {
    let dir = std::env::temp_dir().join(format!("pontoon-layering-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src/b")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "mod a;\nmod b;\n").unwrap();
    std::fs::write(dir.join("src/a.rs"), "use crate::b::inner::Thing;\n").unwrap();
    std::fs::write(dir.join("src/b/mod.rs"), "mod inner;\n// use crate::a;\n").unwrap();
    std::fs::write(dir.join("src/b/inner.rs"), "use super::super::a::X;\n").unwrap();
    let found = circles(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let expected: BTreeSet<String> = ["a", "b::inner"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, vec![expected]);
}
