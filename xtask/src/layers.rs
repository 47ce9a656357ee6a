//! `cargo xtask layers`: the library's import rule, checked from its sources.
//!
//! Every top-level module of `src/` (a file `src/NAME.rs` or a folder
//! `src/NAME/`) has a place in [`LAYERS`], highest first, and may name
//! (`crate::NAME…`, directly or through a re-export at the crate root)
//! only modules below its own place. Since the order is total, this also
//! rules out every import cycle between top-level modules. A module that
//! is not in the table fails the check: a new module gets a place on
//! purpose.
//!
//! The reading is lexical: comments, string and character literals are
//! skipped, then every `crate::` path is resolved by its first segment.
//! Test modules inside `src/` count like any other code.
//!
//! A second rule keeps decisions off the wall clock: outside tests, only
//! the paths in [`CLOCK_READERS`] read it (`Instant::now`,
//! `SystemTime::now`, or the engine's wrapper `clock::now`), each for the
//! reason the list gives, and those in [`CLOCK_LEFT`] until their issue
//! moves the read out. Everything else gets its time from them (the
//! control cores take it as an argument; callers' timeouts are
//! `engine::wait::Deadline`s).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// The top-level modules of `src/`, highest layer first.
pub const LAYERS: &[&str] = &[
    // The public face: PubSub, its builder and settings.
    "pubsub",
    // What a user sees of a cluster: its docs, modes and metrics
    // (re-exported from below).
    "cluster",
    // The control loop of every placement (its control thread) and the
    // publish routes.
    "control_loop",
    // The wanted set, active waits, refusals, unsubscribe bookkeeping
    // (every placement alike).
    "front",
    // Delivery: the worker pool, receivers, recovery from history.
    "workers",
    // Recoverable channels: scripts, headers, reads.
    "history",
    // Runtime, I/O threads, pipelined connections, completions.
    "engine",
    // The one metrics model and its renderer.
    "metrics",
    // TCP and TLS streams under a connection.
    "transport",
    // Server addresses and URLs.
    "url",
    // What shardsub adds to payloads on the wire (the lag envelope).
    "wire",
    // Connection callbacks for applications.
    "observer",
    // The public error type.
    "error",
    // Server addresses: TCP or a Unix socket's path.
    "addr",
    // Thread naming and spawning.
    "threads",
    // The sans-IO connection state machine.
    "conn",
];

/// Where library code may read the clock, and why each may: a path, or a
/// folder ending in `/`.
pub const CLOCK_READERS: &[(&str, &str)] = &[
    (
        "src/engine/",
        "the I/O threads, the one map from the clock to the cores' time, waits",
    ),
    ("src/workers/", "delivery lag"),
    (
        "src/control_loop/driver.rs",
        "the control thread: the time it hands the control cores",
    ),
    (
        "src/control_loop/hold.rs",
        "a publish held on the caller's thread is stamped when it joins \
         (the control thread decides its expiry)",
    ),
    (
        "src/pubsub/instance.rs",
        "PubSub::health says how long ago each server changed (a report, no decision)",
    ),
];

/// Clock reads still to move out, each with the issue that moves it. The
/// check fails on an entry that no longer reads the clock, so the list
/// cannot go stale.
pub const CLOCK_LEFT: &[(&str, &str)] = &[];

/// What reads the clock (outside tests).
const CLOCK_NEEDLES: &[&str] = &["Instant::now", "SystemTime::now", "clock::now("];

/// One `crate::` path that names a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Import {
    /// The file it is in, relative to the repository root.
    pub file: PathBuf,
    /// Its line, from 1.
    pub line: usize,
    /// The top-level module of the file.
    pub from: String,
    /// The top-level module it names.
    pub to: String,
    /// The path as written (up to its first segment).
    pub path: String,
}

/// What the check found wrong.
#[derive(Debug, Default)]
pub struct Findings {
    /// Imports from a module to one above it (or not below it).
    pub upward: Vec<Import>,
    /// Top-level modules missing from [`LAYERS`].
    pub unplaced: Vec<String>,
    /// `crate::` paths whose first segment names no module or re-export.
    pub unresolved: Vec<Import>,
    /// Clock reads outside [`CLOCK_READERS`], [`CLOCK_LEFT`] and tests:
    /// (file, line).
    pub clock_reads: Vec<(PathBuf, usize)>,
    /// Files in [`CLOCK_LEFT`] that no longer read the clock.
    pub stale_clock: Vec<&'static str>,
    /// Files of one folder that import each other in a circle.
    pub circles: Vec<crate::circles::Circle>,
    /// Folders listed in `circles::CIRCLES_LEFT` that have no circle.
    pub stale_circles: Vec<&'static str>,
    /// Files and functions over their length (`lengths.rs`).
    pub lengths: crate::lengths::Lengths,
}

impl Findings {
    /// Nothing wrong.
    pub fn is_clean(&self) -> bool {
        self.upward.is_empty()
            && self.unplaced.is_empty()
            && self.unresolved.is_empty()
            && self.clock_reads.is_empty()
            && self.stale_clock.is_empty()
            && self.circles.is_empty()
            && self.stale_circles.is_empty()
            && self.lengths.is_clean()
    }
}

impl fmt::Display for Findings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in &self.upward {
            writeln!(
                f,
                "{}:{}: `{}` is in `{}`, which may not import `{}` (above it in xtask/src/layers.rs LAYERS)",
                i.file.display(),
                i.line,
                i.path,
                i.from,
                i.to
            )?;
        }
        for m in &self.unplaced {
            writeln!(
                f,
                "src/{m}: a top-level module with no place in LAYERS (xtask/src/layers.rs): give it one"
            )?;
        }
        for (file, line) in &self.clock_reads {
            writeln!(
                f,
                "{}:{line}: reads the clock outside CLOCK_READERS (xtask/src/layers.rs): take the time as an argument, or an engine::wait::Deadline",
                file.display()
            )?;
        }
        for file in &self.stale_clock {
            writeln!(
                f,
                "{file}: reads the clock no more: take it out of CLOCK_LEFT (xtask/src/layers.rs)"
            )?;
        }
        for c in &self.circles {
            write!(f, "{c}")?;
        }
        for folder in &self.stale_circles {
            writeln!(
                f,
                "{folder}/: no circle of files any more: take it out of CIRCLES_LEFT (xtask/src/circles.rs)"
            )?;
        }
        write!(f, "{}", self.lengths)?;
        for i in &self.unresolved {
            writeln!(
                f,
                "{}:{}: `{}` names no top-level module or root re-export",
                i.file.display(),
                i.line,
                i.path
            )?;
        }
        Ok(())
    }
}

/// `cargo xtask layers`: checks `src/` under the repository root.
pub fn run() -> Result<(), String> {
    let found = check(&crate::run::root())?;
    if found.is_clean() {
        println!(
            "xtask: layers: {} modules, imports only downward, no circle of files, \
             no file over {} lines, no function over {} (but those listed)",
            LAYERS.len(),
            crate::lengths::MAX_FILE_LINES,
            crate::lengths::MAX_FN_LINES,
        );
        Ok(())
    } else {
        eprint!("{found}");
        Err(
            "src/ breaks its layering: an upward import, a clock read, a circle of files or a file or function too long (see above)"
                .into(),
        )
    }
}

/// Reads `root/src` and checks it against [`LAYERS`].
pub fn check(root: &Path) -> Result<Findings, String> {
    let src = root.join("src");
    let lib = read(&src.join("lib.rs"))?;
    let reexports = root_reexports(&lib);
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(&src).map_err(|e| format!("read {}: {e}", src.display()))? {
        let path = entry.map_err(|e| e.to_string())?.path();
        let name = match path.file_name().and_then(|n| n.to_str()) {
            Some(n) if path.is_dir() => n.to_string(),
            Some(n) if n.ends_with(".rs") && n != "lib.rs" => n.trim_end_matches(".rs").into(),
            _ => continue,
        };
        let mut files = Vec::new();
        rust_files(&path, &mut files)?;
        modules.entry(name).or_insert_with(Vec::new).extend(files);
    }
    let mut imports = Vec::new();
    let mut clock_reads = Vec::new();
    let mut stale_clock = Vec::new();
    for (module, files) in &modules {
        for file in files {
            let text = read(file)?;
            let rel = file.strip_prefix(root).unwrap_or(file).to_path_buf();
            let rel_text = rel.to_string_lossy().replace('\\', "/");
            let reader = CLOCK_READERS.iter().any(|(r, _)| rel_text.starts_with(r));
            if !reader && !is_test_file(&rel) {
                let lines = clock_lines(&text);
                match CLOCK_LEFT.iter().find(|(f, _)| *f == rel_text) {
                    Some((f, _)) if lines.is_empty() => stale_clock.push(*f),
                    Some(_) => {}
                    None => clock_reads.extend(lines.into_iter().map(|l| (rel.clone(), l))),
                }
            }
            imports.extend(crate_paths(&text).into_iter().map(|(line, first, path)| {
                let to = if modules.contains_key(&first) {
                    first
                } else {
                    reexports.get(&first).cloned().unwrap_or_default()
                };
                Import {
                    file: rel.clone(),
                    line,
                    from: module.clone(),
                    to,
                    path,
                }
            }));
        }
    }
    let modules = modules.keys().cloned().collect();
    let mut found = judge(LAYERS, &modules, imports);
    found.clock_reads = clock_reads;
    found.stale_clock = stale_clock;
    (found.circles, found.stale_circles) = crate::circles::check(root)?;
    found.lengths = crate::lengths::check(root)?;
    Ok(found)
}

/// A file of unit tests by the naming convention (`tests.rs`,
/// `*_tests.rs`, `proptests.rs`, or under a `tests/` folder).
pub(crate) fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "proptests.rs"
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// Lines of `text` that read the clock, outside items under `#[cfg(test)]`.
fn clock_lines(text: &str) -> Vec<usize> {
    let code = without_tests(&strip(text));
    let mut out = Vec::new();
    for needle in CLOCK_NEEDLES {
        let mut at = 0;
        while let Some(found) = code[at..].find(needle) {
            let start = at + found;
            at = start + needle.len();
            out.push(line_of(&code, start));
        }
    }
    out.sort_unstable();
    out
}

/// `code` (already stripped) with every item under `#[cfg(test)]` blanked
/// out, newlines kept: up to its `;`, or through its brace group.
pub(crate) fn without_tests(code: &str) -> String {
    let mut out = code.to_string();
    for item in test_items(code) {
        let blank: String = code[item.clone()]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(item, &blank);
    }
    out
}

/// The items of `code` (already stripped) under `#[cfg(test)]`, from the
/// attribute up to the item's `;`, or through its brace group.
pub(crate) fn test_items(code: &str) -> Vec<std::ops::Range<usize>> {
    let mut items = Vec::new();
    let mut at = 0;
    while let Some(found) = code[at..].find("#[cfg(test)]") {
        let start = at + found;
        let rest = &code[start + "#[cfg(test)]".len()..];
        let semi = rest.find(';');
        let brace = rest.find('{');
        let len = match (semi, brace) {
            (Some(s), b) if b.is_none_or(|b| s < b) => s + 1,
            (_, Some(b)) => match braced(&rest[b..]) {
                Some(inner) => b + inner.len() + 2,
                None => rest.len(),
            },
            _ => rest.len(),
        };
        let end = start + "#[cfg(test)]".len() + len;
        items.push(start..end);
        at = end;
    }
    items
}

/// Sorts the imports into findings against `layers` (highest first).
fn judge(layers: &[&str], modules: &BTreeSet<String>, imports: Vec<Import>) -> Findings {
    let place = |m: &str| layers.iter().position(|l| *l == m);
    let mut found = Findings {
        unplaced: modules
            .iter()
            .filter(|m| place(m).is_none())
            .cloned()
            .collect(),
        ..Findings::default()
    };
    for i in imports {
        if i.to.is_empty() {
            found.unresolved.push(i);
            continue;
        }
        // A re-export of another crate (`crate::Value`) or an item of the
        // root itself: not a module of `src/`.
        if i.to == i.from || !modules.contains(&i.to) {
            continue;
        }
        let (Some(from), Some(to)) = (place(&i.from), place(&i.to)) else {
            continue;
        };
        if to <= from {
            found.upward.push(i);
        }
    }
    found
}

pub(crate) fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))
}

pub(crate) fn rust_files(path: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .map_err(|e| format!("read {}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out)?;
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
    Ok(())
}

/// The root's `pub use MODULE::…` re-exports: exported name → module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let code = strip(lib);
    let mut map = BTreeMap::new();
    for statement in code.split(';') {
        // Attributes (`#[cfg(…)]`) may stand before it.
        let Some((_, rest)) = statement.split_once("pub use ") else {
            continue;
        };
        let rest = rest.trim();
        let (module, items) = rest.split_once("::").unwrap_or((rest, ""));
        let items = items.trim().trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',') {
            let item = item.trim();
            let name = match item.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => item.rsplit("::").next().unwrap_or(item).trim(),
            };
            if !name.is_empty() {
                map.insert(name.to_string(), module.trim().to_string());
            }
        }
    }
    map
}

/// Every `crate::` path in `text`: (line, first segment, the path up to it).
/// A group `crate::{a, b::c}` gives one entry per item.
fn crate_paths(text: &str) -> Vec<(usize, String, String)> {
    let code = strip(text);
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    for start in word_starts(&code, "crate::") {
        let at = start + "crate::".len();
        let line = line_of(&code, start);
        if bytes.get(at) == Some(&b'{') {
            let Some(group) = braced(&code[at..]) else {
                continue;
            };
            for item in top_level_items(group) {
                let first = ident(item);
                if !first.is_empty() && first != "self" {
                    out.push((line, first.to_string(), format!("crate::{first}")));
                }
            }
        } else {
            let first = ident(&code[at..]);
            if !first.is_empty() {
                out.push((line, first.to_string(), format!("crate::{first}")));
            }
        }
    }
    out
}

/// Where `word` stands in `code` with no identifier character just before
/// it (so `crate::` does not match inside `my_crate::`).
pub(crate) fn word_starts<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    code.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        !code.as_bytes()[..i]
            .last()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
    })
}

/// The line (from 1) of byte offset `at` in `code`.
pub(crate) fn line_of(code: &str, at: usize) -> usize {
    code[..at].matches('\n').count() + 1
}

/// The identifier at the start of `s`.
pub(crate) fn ident(s: &str) -> &str {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The inside of the brace group `s` starts with.
pub(crate) fn braced(s: &str) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return s.get(1..i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The comma-separated items of a group, nested groups kept whole.
pub(crate) fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[from..]);
    items
}

/// `text` with comments and the contents of string and character literals
/// blanked out (newlines kept, so line numbers stay).
pub(crate) fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while let Some(&c) = chars.get(i) {
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while let Some(&c) = chars.get(i) {
                if c == '\n' {
                    break;
                }
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0usize;
            while let Some(&c) = chars.get(i) {
                let next = chars.get(i + 1).copied();
                if c == '/' && next == Some('*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c == '*' && next == Some('/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c));
                    i += 1;
                }
            }
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i) {
            // A raw string: r"…", r#"…"#.
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            out.push('"');
            while let Some(&c) = chars.get(i) {
                if c == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(c));
                i += 1;
            }
            out.push('"');
        } else if c == '"' {
            out.push('"');
            i += 1;
            while let Some(&c) = chars.get(i) {
                i += 1;
                if c == '\\' {
                    out.push(' ');
                    if let Some(&e) = chars.get(i) {
                        out.push(blank(e));
                        i += 1;
                    }
                } else if c == '"' {
                    break;
                } else {
                    out.push(blank(c));
                }
            }
            out.push('"');
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime.
            let len = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&q| q == '\'')
                    .map(|p| p + 3)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(3)
            } else {
                None
            };
            match len {
                Some(len) => {
                    out.push_str(&" ".repeat(len));
                    i += len;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn ident_before(chars: &[char], i: usize) -> bool {
    i.checked_sub(1)
        .and_then(|p| chars.get(p))
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_groups_and_nested_groups_are_read() {
        let text = "use crate::engine::{Engine, Pending};\n\
                    use crate::{error::Error, workers::{Pool, Queue}, self};\n\
                    fn f() { crate::metrics::add(1); }\n";
        let firsts: Vec<_> = crate_paths(text)
            .into_iter()
            .map(|(line, first, _)| (line, first))
            .collect();
        assert_eq!(
            firsts,
            [
                (1, "engine".to_string()),
                (2, "error".to_string()),
                (2, "workers".to_string()),
                (3, "metrics".to_string()),
            ]
        );
    }

    #[test]
    fn comments_strings_and_chars_do_not_count() {
        let text = "// crate::pubsub\n/* crate::cluster /* nested */ crate::x */\n\
                    let s = \"crate::history \\\" crate::y\";\n\
                    let r = r#\"crate::workers \"# ;\n\
                    let c = '\"'; let d = '\\''; fn g<'a>(x: &'a str) { crate::conn::f(x) }\n\
                    pub(crate) fn h() {} my_crate::z();";
        let firsts: Vec<_> = crate_paths(text).into_iter().map(|(_, f, _)| f).collect();
        assert_eq!(firsts, ["conn"]);
    }

    #[test]
    fn clock_reads_count_outside_test_items_only() {
        let text = "fn a() { let t = Instant::now(); }\n\
                    // Instant::now() in a comment\n\
                    #[cfg(test)]\nmod tests;\n\
                    fn b() { std::time::SystemTime::now(); }\n\
                    #[cfg(test)]\nmod tests {\n fn c() { Instant::now(); { } }\n}\n\
                    fn d() { Instant::now(); }\n\
                    fn e() { let t = clock::now(); }\n";
        assert_eq!(clock_lines(text), [1, 5, 10, 11]);
        assert!(is_test_file(Path::new("src/engine/lend_tests.rs")));
        assert!(is_test_file(Path::new("src/engine/wait/tests.rs")));
        assert!(!is_test_file(Path::new("src/control_loop/gate.rs")));
    }

    #[test]
    fn root_reexports_map_names_to_modules() {
        let lib = "pub use engine::{Builder, Engine};\npub use error::Error;\n\
                   #[cfg(feature = \"tls\")]\npub use transport::tls::TlsConfig;\n\
                   pub use resp::Value;\npub use a::B as C;";
        let map = root_reexports(lib);
        assert_eq!(map["Builder"], "engine");
        assert_eq!(map["Error"], "error");
        assert_eq!(map["TlsConfig"], "transport");
        assert_eq!(map["Value"], "resp");
        assert_eq!(map["C"], "a");
    }

    fn import(from: &str, to: &str) -> Import {
        Import {
            file: PathBuf::from(format!("src/{from}/x.rs")),
            line: 1,
            from: from.into(),
            to: to.into(),
            path: format!("crate::{to}"),
        }
    }

    const TOY: &[&str] = &["api", "driver", "engine", "conn"];

    fn toy() -> BTreeSet<String> {
        TOY.iter().map(|m| m.to_string()).collect()
    }

    #[test]
    fn an_import_up_a_layer_fails_and_one_down_passes() {
        let down = vec![import("api", "engine"), import("engine", "conn")];
        let found = judge(TOY, &toy(), down.clone());
        assert!(found.is_clean(), "{found}");

        let mut imports = down;
        imports.push(import("conn", "engine"));
        let found = judge(TOY, &toy(), imports);
        assert_eq!(found.upward, [import("conn", "engine")]);
        assert!(found.to_string().contains("may not import `engine`"));
    }

    #[test]
    fn a_module_with_no_place_fails() {
        let mut modules = toy();
        modules.insert("newthing".into());
        let found = judge(TOY, &modules, vec![]);
        assert_eq!(found.unplaced, ["newthing"]);
    }

    #[test]
    fn the_table_names_each_module_once() {
        let set: BTreeSet<_> = LAYERS.iter().collect();
        assert_eq!(set.len(), LAYERS.len());
    }
}
