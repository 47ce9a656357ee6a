//! The file-level half of `cargo xtask layers`: no import circle between
//! the files of one folder.
//!
//! Within a folder module (`src/engine/` with its `mod.rs` and children),
//! each direct child (a file, or a sub-folder taken whole) and the folder's
//! own `mod.rs` is a node; a path in one node's code that names an item
//! defined in another node is an arrow between them. A circle of arrows
//! means neither file can be read, moved or tested without the other: a
//! type lives in the wrong file. The check follows `use` re-exports to the
//! file that defines the item (`super::Latch`, re-exported by `mod.rs`
//! from `latch.rs`, is an arrow to `latch.rs`), so re-exporting from
//! `mod.rs` is not a circle; defining a type in `mod.rs` that a child
//! needs, while `mod.rs` needs the child, is.
//!
//! The reading is lexical, like the layer rule's: comments, literals and
//! test items (`#[cfg(test)]`, test files) are left out; `crate::`,
//! `super::`, `self::` paths, paths through a child module's name and
//! through names a `use` brought in are resolved by the module tree of
//! `src/`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::layers::{
    braced, is_test_file, line_of, read, rust_files, strip, top_level_items, without_tests,
    word_starts,
};

/// One module of `src/`: a file, with what it defines and brings in.
struct Module {
    file: PathBuf,
    /// The code with comments, literals and test items blanked.
    code: String,
    /// Names brought in by `use` (alias → the path as written).
    uses: BTreeMap<String, Vec<String>>,
    /// Paths named by `use …::*`.
    globs: Vec<Vec<String>>,
}

/// An arrow between two nodes of a folder, with one place that draws it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrow {
    pub from: String,
    pub to: String,
    /// Where (file:line) and the path as written.
    pub at: String,
}

/// A circle among the nodes of one folder.
#[derive(Debug, PartialEq, Eq)]
pub struct Circle {
    /// The folder, relative to the repository root (`src/engine`).
    pub folder: String,
    /// The nodes in it (`mod.rs`, `driver.rs`, `wait/`).
    pub nodes: Vec<String>,
    /// The arrows between them.
    pub arrows: Vec<Arrow>,
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}/: files import each other in a circle: {} (move the types so the arrows run one way)",
            self.folder,
            self.nodes.join(", ")
        )?;
        for a in &self.arrows {
            writeln!(f, "  {} -> {}: {}", a.from, a.to, a.at)?;
        }
        Ok(())
    }
}

type ModPath = Vec<String>;

/// Folders whose circle is known and being taken apart, each with the
/// issue that does it. The check fails on a circle anywhere else, and on a
/// folder listed here that has none (so the list cannot go stale).
pub const CIRCLES_LEFT: &[(&str, &str)] = &[];

/// Every folder of `root/src` whose files import each other in a circle,
/// except those in [`CIRCLES_LEFT`]; and the folders listed there that
/// have none.
pub fn check(root: &Path) -> Result<(Vec<Circle>, Vec<&'static str>), String> {
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files)?;
    let mut modules: BTreeMap<ModPath, Module> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        let Some(path) = module_path(file.strip_prefix(&src).unwrap_or(&file)) else {
            continue;
        };
        if is_test_file(&rel) {
            continue;
        }
        let code = without_tests(&strip(&read(&file)?));
        let (uses, globs) = uses(&code);
        modules.insert(
            path,
            Module {
                file: rel,
                code,
                uses,
                globs,
            },
        );
    }
    let found = circles(&modules);
    let stale = CIRCLES_LEFT
        .iter()
        .map(|(f, _)| *f)
        .filter(|f| !found.iter().any(|c| c.folder == *f))
        .collect();
    let circles = found
        .into_iter()
        .filter(|c| !CIRCLES_LEFT.iter().any(|(f, _)| *f == c.folder))
        .collect();
    Ok((circles, stale))
}

/// `x/y.rs` and `x/y/mod.rs` → `[x, y]`; `lib.rs` → `[]`.
fn module_path(rel: &Path) -> Option<ModPath> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?.strip_suffix(".rs")?.to_string();
    if last != "mod" && !(parts.is_empty() && last == "lib") {
        parts.push(last);
    }
    Some(parts)
}

fn circles(modules: &BTreeMap<ModPath, Module>) -> Vec<Circle> {
    // Arrows per folder: folder → (from node, to node) → first site.
    let mut arrows: BTreeMap<ModPath, BTreeMap<(String, String), String>> = BTreeMap::new();
    for (path, module) in modules {
        for (line, segs) in paths(&module.code) {
            let Some(abs) = absolute(modules, path, &segs, 0) else {
                continue;
            };
            let Some(target) = definer(modules, &abs, 0) else {
                continue;
            };
            // The folder is the longest common prefix, if both lie under it
            // and in different nodes.
            let common = path.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common == path.len() && common == target.len() {
                continue;
            }
            let folder: ModPath = path[..common].to_vec();
            if !modules.contains_key(&folder) {
                continue;
            }
            let (from, to) = (
                node(modules, &folder, path),
                node(modules, &folder, &target),
            );
            if from == to {
                continue;
            }
            arrows
                .entry(folder)
                .or_default()
                .entry((from, to))
                .or_insert_with(|| {
                    format!("{}:{line} `{}`", module.file.display(), segs.join("::"))
                });
        }
    }
    let mut out = Vec::new();
    for (folder, edges) in arrows {
        let nodes: BTreeSet<&String> = edges.keys().flat_map(|(a, b)| [a, b]).collect();
        let reach = |from: &String| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut todo = vec![from.clone()];
            while let Some(n) = todo.pop() {
                for (a, b) in edges.keys() {
                    if *a == n && seen.insert(b.clone()) {
                        todo.push(b.clone());
                    }
                }
            }
            seen
        };
        let reaches: BTreeMap<&String, BTreeSet<String>> =
            nodes.iter().map(|n| (*n, reach(n))).collect();
        let mut done = BTreeSet::new();
        for n in &nodes {
            if done.contains(*n) || !reaches[n].contains(*n) {
                continue;
            }
            let group: Vec<String> = nodes
                .iter()
                .filter(|m| reaches[n].contains(**m) && reaches[*m].contains(*n))
                .map(|m| (*m).clone())
                .collect();
            done.extend(group.iter().cloned());
            let arrows = edges
                .iter()
                .filter(|((a, b), _)| group.contains(a) && group.contains(b))
                .map(|((a, b), at)| Arrow {
                    from: a.clone(),
                    to: b.clone(),
                    at: at.clone(),
                })
                .collect();
            let dir = modules[&folder]
                .file
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_default();
            out.push(Circle {
                folder: dir.to_string_lossy().replace('\\', "/"),
                nodes: group,
                arrows,
            });
        }
    }
    out
}

/// The node of `folder` that `path` lies in: `mod.rs` for the folder's own
/// file, else the child's file name (`driver.rs`) or folder (`wait/`).
fn node(modules: &BTreeMap<ModPath, Module>, folder: &ModPath, path: &ModPath) -> String {
    if path.len() == folder.len() {
        return modules[folder]
            .file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    let child: ModPath = path[..=folder.len()].to_vec();
    let is_dir = modules
        .get(&child)
        .is_some_and(|m| m.file.ends_with("mod.rs"))
        || modules
            .keys()
            .any(|k| k.len() > child.len() && k.starts_with(&child));
    if is_dir {
        format!("{}/", child[folder.len()])
    } else {
        format!("{}.rs", child[folder.len()])
    }
}

/// `segs`, written in module `at`, as a path from the crate root; `None`
/// for a path that does not start in this crate (`std::…`, `Self::…`).
fn absolute(
    modules: &BTreeMap<ModPath, Module>,
    at: &ModPath,
    segs: &[String],
    depth: usize,
) -> Option<ModPath> {
    let (first, rest) = segs.split_first()?;
    if depth > 8 {
        return None;
    }
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => at.clone(),
        "super" => {
            let mut base = at.clone();
            base.pop()?;
            let mut rest = rest;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            return Some(base);
        }
        _ => {
            let mut child = at.clone();
            child.push(first.clone());
            if modules.contains_key(&child) {
                child
            } else if let Some(used) = modules.get(at).and_then(|m| m.uses.get(first)) {
                absolute(modules, at, used, depth + 1)?
            } else {
                return None;
            }
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module that defines the item `abs` names, following `use`
/// re-exports; the module itself when `abs` names a module.
fn definer(modules: &BTreeMap<ModPath, Module>, abs: &ModPath, depth: usize) -> Option<ModPath> {
    let prefix = (0..=abs.len())
        .rev()
        .find(|&n| modules.contains_key(&abs[..n]))?;
    let module: ModPath = abs[..prefix].to_vec();
    let Some(item) = abs.get(prefix) else {
        return Some(module);
    };
    if depth < 8 {
        let m = &modules[&module];
        if let Some(used) = m.uses.get(item) {
            let mut through = absolute(modules, &module, used, 0)?;
            through.extend(abs[prefix + 1..].iter().cloned());
            return definer(modules, &through, depth + 1);
        }
        if !defines(&m.code, item) {
            // Perhaps brought in by a glob.
            for glob in &m.globs {
                let Some(mut through) = absolute(modules, &module, glob, 0) else {
                    continue;
                };
                through.push(item.clone());
                if let Some(found) = definer(modules, &through, depth + 1) {
                    if defines(&modules[&found].code, item) {
                        return Some(found);
                    }
                }
            }
        }
    }
    Some(module)
}

/// Whether `code` defines an item called `name`.
fn defines(code: &str, name: &str) -> bool {
    const KEYWORDS: &[&str] = &[
        "struct",
        "enum",
        "fn",
        "trait",
        "type",
        "const",
        "static",
        "union",
        "mod",
        "macro_rules!",
    ];
    let words: Vec<&str> = code
        .split(|c: char| c.is_whitespace() || c == '(' || c == '<' || c == '{' || c == ':')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .any(|w| KEYWORDS.contains(&w[0]) && w[1] == name)
}

/// Every path of two or more segments in `code`, groups expanded:
/// (line, segments). `a::{b, c::d}` gives `a::b` and `a::c::d`.
fn paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let starts = (b.is_ascii_alphabetic() || b == b'_')
            && (i == 0 || !is_ident(bytes[i - 1]))
            && !(i >= 2 && &bytes[i - 2..i] == b"::");
        if !starts {
            i += 1;
            continue;
        }
        let line = line_of(code, i);
        let (trees, end) = path_tree(code, i);
        for segs in trees {
            if segs.len() >= 2 {
                out.push((line, segs));
            }
        }
        i = end.max(i + 1);
    }
    out
}

/// The path (tree) that starts at `at`: its expanded paths, and where it
/// ends. A glob (`a::*`) gives `a`.
fn path_tree(code: &str, at: usize) -> (Vec<Vec<String>>, usize) {
    let bytes = code.as_bytes();
    let mut segs = Vec::new();
    let mut i = at;
    loop {
        let word = ident_at(code, i);
        if word.is_empty() {
            if bytes.get(i) == Some(&b'{') {
                let Some(group) = braced(&code[i..]) else {
                    return (vec![segs], i);
                };
                let end = i + group.len() + 2;
                let mut out = Vec::new();
                let group_at = i + 1;
                let mut offset = 0;
                for item in top_level_items(group) {
                    let lead = item.len() - item.trim_start().len();
                    let start = group_at + offset + lead;
                    offset += item.len() + 1;
                    let item = item.trim();
                    if item.is_empty() || item == "*" {
                        out.push(segs.clone());
                        continue;
                    }
                    if item == "self" || item.starts_with("self ") {
                        out.push(segs.clone());
                        continue;
                    }
                    let (inner, _) = path_tree(code, start);
                    for mut tail in inner {
                        let mut full = segs.clone();
                        full.append(&mut tail);
                        out.push(full);
                    }
                }
                return (out, end);
            }
            // `a::*`, or something that is not a path segment.
            return (vec![segs], i);
        }
        segs.push(word.to_string());
        i += word.len();
        let rest = &code[i..];
        let trimmed = rest.trim_start();
        if trimmed.starts_with("::") && !trimmed[2..].trim_start().starts_with('<') {
            i += rest.len() - trimmed.len() + 2;
            i += code[i..].len() - code[i..].trim_start().len();
        } else {
            return (vec![segs], i);
        }
    }
}

fn ident_at(code: &str, at: usize) -> &str {
    let s = &code[at.min(code.len())..];
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    if s[..end].chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return "";
    }
    &s[..end]
}

/// The names `use` statements in `code` bring in (alias → path as
/// written), and the paths of its globs.
fn uses(code: &str) -> (BTreeMap<String, Vec<String>>, Vec<Vec<String>>) {
    let mut names = BTreeMap::new();
    let mut globs = Vec::new();
    for start in word_starts(code, "use ") {
        let at = start + "use ".len();
        let Some(len) = code[at..].find(';') else {
            break;
        };
        let statement = &code[at..at + len];
        collect_use(statement, &mut Vec::new(), &mut names, &mut globs);
    }
    (names, globs)
}

/// Walks one use tree under `prefix`.
fn collect_use(
    tree: &str,
    prefix: &mut Vec<String>,
    names: &mut BTreeMap<String, Vec<String>>,
    globs: &mut Vec<Vec<String>>,
) {
    let tree = tree.trim().trim_start_matches("::").trim();
    if let Some(head) = tree.strip_suffix('*') {
        let mut full = prefix.clone();
        full.extend(
            head.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
        globs.push(full);
        return;
    }
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
        let Some(group) = braced(&tree[open..]) else {
            return;
        };
        let n = prefix.len();
        prefix.extend(head);
        for item in top_level_items(group) {
            collect_use(item, prefix, names, globs);
        }
        prefix.truncate(n);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p.trim(), Some(a.trim())),
        None => (tree, None),
    };
    let mut full = prefix.clone();
    // `a::{self}` names `a` itself; a leading `self::` stays (this module).
    if path != "self" || prefix.is_empty() {
        full.extend(
            path.split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
    }
    let Some(last) = full.last().cloned() else {
        return;
    };
    let name = alias.unwrap_or(&last).to_string();
    if name != "_" && full.len() >= 2 {
        names.insert(name, full);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy(files: &[(&str, &str)]) -> BTreeMap<ModPath, Module> {
        files
            .iter()
            .map(|(path, text)| {
                let rel = PathBuf::from(format!("src/{path}"));
                let code = without_tests(&strip(text));
                let (uses, globs) = uses(&code);
                let mp = module_path(Path::new(path)).unwrap();
                (
                    mp,
                    Module {
                        file: rel,
                        code,
                        uses,
                        globs,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn groups_nested_groups_and_globs_expand() {
        let code =
            "use crate::engine::{lend::{Lend, LendFd}, Latch, self};\nfn f() { super::x::y(); }";
        let got: Vec<String> = paths(code).into_iter().map(|(_, s)| s.join("::")).collect();
        assert_eq!(
            got,
            [
                "crate::engine::lend::Lend",
                "crate::engine::lend::LendFd",
                "crate::engine::Latch",
                "crate::engine",
                "super::x::y"
            ]
        );
        let (names, globs) = uses("use super::{a::B as C, d::*};\npub(crate) use self::e::F;");
        assert_eq!(names["C"], ["super", "a", "B"]);
        assert_eq!(names["F"], ["self", "e", "F"]);
        assert_eq!(globs, [vec!["super".to_string(), "d".to_string()]]);
    }

    #[test]
    fn a_type_a_child_needs_in_mod_rs_makes_a_circle() {
        let modules = toy(&[
            ("lib.rs", "mod engine;"),
            (
                "engine/mod.rs",
                "mod driver;\npub struct Latch;\nfn run() { driver::Driver::new(); }",
            ),
            (
                "engine/driver.rs",
                "use super::Latch;\npub struct Driver(Latch);",
            ),
        ]);
        let found = circles(&modules);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].folder, "src/engine");
        assert_eq!(found[0].nodes, ["driver.rs", "mod.rs"]);
        let text = found[0].to_string();
        assert!(
            text.contains("driver.rs -> mod.rs: src/engine/driver.rs:1 `super::Latch`"),
            "{text}"
        );
        assert!(
            text.contains("mod.rs -> driver.rs: src/engine/mod.rs:3 `driver::Driver::new`"),
            "{text}"
        );
    }

    #[test]
    fn a_re_export_from_mod_rs_is_followed_to_its_file() {
        let modules = toy(&[
            ("lib.rs", "mod engine;"),
            (
                "engine/mod.rs",
                "mod driver;\nmod latch;\npub(crate) use latch::Latch;\nfn run() { driver::Driver::new(); }",
            ),
            ("engine/latch.rs", "pub struct Latch;"),
            ("engine/driver.rs", "use super::Latch;\npub struct Driver(Latch);\n#[cfg(test)]\nmod tests { use super::super::run; }"),
        ]);
        assert_eq!(circles(&modules), []);
    }

    #[test]
    fn a_sub_folder_is_one_node() {
        let modules = toy(&[
            ("lib.rs", "mod engine;"),
            ("engine/mod.rs", "mod wait;\nmod host;"),
            ("engine/wait/mod.rs", "mod deadline;"),
            (
                "engine/wait/deadline.rs",
                "use crate::engine::host::Host;\npub struct Deadline;",
            ),
            (
                "engine/host.rs",
                "pub struct Host(super::wait::deadline::Deadline);",
            ),
        ]);
        let found = circles(&modules);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].nodes, ["host.rs", "wait/"]);
    }
}
