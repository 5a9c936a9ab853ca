//! The host's layers, checked: data flows one way. Each top-level module of `host/src` may
//! import only the modules of the layers below its own (see ARCHITECTURE.md), so there is no
//! import cycle between them and the service layer reaches no adapter.
//!
//! The check reads the `crate::<module>` paths of every source file (test modules at the end of a
//! file and comments left out), like a reader following the imports would.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first, and the top-level modules in each.
const LAYERS: &[(&str, &[&str])] = &[
    ("model", &["model", "metrics", "telemetry"]),
    ("storage", &["storage"]),
    ("service", &["service"]),
    ("runtime", &["plugins"]),
    ("engine", &["delivery"]),
    ("api", &["http"]),
    ("config", &["config"]),
    ("entry", &["cli"]),
];

fn host_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read host/src")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The source without its trailing test module and its comments.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a source text names through `crate::<module>`, including those in a
/// grouped `use crate::{a, b::c}`.
fn referenced(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let body = group.split('}').next().unwrap_or_default();
            for item in body.split(',') {
                found.insert(ident(item.trim()));
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| modules.contains(m));
    found
}

/// Each top-level module and the other top-level modules it imports.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = host_src();
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(&src).expect("read host/src") {
        let path = entry.expect("entry").path();
        let name = path
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        if path.is_dir() || (name != "lib" && name != "main") {
            modules.insert(name);
        }
    }
    let mut edges = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        let dir = src.join(module);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        } else {
            files.push(src.join(format!("{module}.rs")));
        }
        let mut imports = BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read source");
            imports.extend(referenced(&code_of(&text), &modules));
        }
        imports.remove(module);
        edges.insert(module.clone(), imports);
    }
    edges
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

#[test]
fn every_top_level_module_has_a_layer() {
    let unplaced: Vec<String> = graph()
        .into_keys()
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "place {unplaced:?} in a layer of tests/tests/suite/layers.rs and ARCHITECTURE.md"
    );
}

#[test]
fn modules_import_only_the_layers_below_them() {
    let graph = graph();
    let mut wrong = Vec::new();
    for (module, imports) in &graph {
        let Some(own) = layer_of(module) else {
            continue;
        };
        for import in imports {
            match layer_of(import) {
                Some(layer) if layer < own => {}
                _ => wrong.push(format!(
                    "{module} ({}) imports {import} ({})",
                    LAYERS[own].0,
                    layer_of(import).map_or("no layer", |l| LAYERS[l].0)
                )),
            }
        }
    }
    let shown: Vec<String> = graph
        .iter()
        .map(|(m, i)| {
            format!(
                "{m:10} -> {}",
                i.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n  {}\n\nthe graph:\n  {}",
        wrong.join("\n  "),
        shown.join("\n  ")
    );
}

#[test]
fn there_is_no_import_cycle_between_top_level_modules() {
    let graph = graph();
    // Depth-first search for a back edge.
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| (*s).to_owned()).collect();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        let mut path = Vec::new();
        if let Some(cycle) = visit(module, &graph, &mut path, &mut done) {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
}

#[test]
fn the_check_sees_imports_and_ignores_comments_and_tests() {
    let modules: BTreeSet<String> = ["model", "service", "http"].map(String::from).into();
    let code = code_of(
        "use crate::model::ids::StoreId;\nuse crate::{service::Service, http};\n\
         // crate::http in a comment\n#[cfg(test)]\nmod tests { use crate::http; }",
    );
    assert_eq!(
        referenced(&code, &modules),
        ["http", "model", "service"].map(String::from).into()
    );
    let without: BTreeSet<String> = ["model"].map(String::from).into();
    assert_eq!(
        referenced(&code_of("use crate::model::x; // crate::service"), &modules),
        without
    );
}
