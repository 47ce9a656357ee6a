//! The size half of `cargo xtask layers`: files and functions a reader can
//! hold. No library file of `src/` over [`MAX_FILE_LINES`] lines, and no
//! function over [`MAX_FN_LINES`] (test files and `#[cfg(test)]` items
//! aside), but those in [`LONG_FNS_LEFT`], each named with the issue that
//! splits it; one listed that is no longer long fails too, so the list
//! cannot go stale. No inline test module over [`MAX_INLINE_TEST_LINES`]
//! either: a longer one moves beside the code as `tests.rs`.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::layers::{
    braced, ident, is_test_file, line_of, read, rust_files, strip, test_items, without_tests,
    word_starts,
};

/// The most lines a library file may have.
pub const MAX_FILE_LINES: usize = 800;
/// The most lines a function may have, from its `fn` line to its `}`.
pub const MAX_FN_LINES: usize = 120;
/// The most lines an inline test module (`#[cfg(test)] mod name { … }`)
/// may have; a longer one moves beside the code as `tests.rs`.
pub const MAX_INLINE_TEST_LINES: usize = 300;

/// Functions still over [`MAX_FN_LINES`]: (file, function, the issue that
/// splits it).
pub const LONG_FNS_LEFT: &[(&str, &str, &str)] = &[];

/// What is too long.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Lengths {
    /// Files over [`MAX_FILE_LINES`]: (file, lines).
    pub files: Vec<(PathBuf, usize)>,
    /// Functions over [`MAX_FN_LINES`] not listed: (file, line, name, lines).
    pub fns: Vec<(PathBuf, usize, String, usize)>,
    /// Listed functions that are no longer long (or no longer there).
    pub stale: Vec<String>,
    /// Inline test modules over [`MAX_INLINE_TEST_LINES`]: (file, line,
    /// lines).
    pub test_mods: Vec<(PathBuf, usize, usize)>,
}

impl Lengths {
    pub fn is_clean(&self) -> bool {
        self.files.is_empty()
            && self.fns.is_empty()
            && self.stale.is_empty()
            && self.test_mods.is_empty()
    }
}

impl fmt::Display for Lengths {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (file, n) in &self.files {
            writeln!(
                f,
                "{}: {n} lines, over {MAX_FILE_LINES}: split it by responsibility",
                file.display()
            )?;
        }
        for (file, line, name, n) in &self.fns {
            writeln!(
                f,
                "{}:{line}: fn {name} is {n} lines, over {MAX_FN_LINES}: split it into named steps",
                file.display()
            )?;
        }
        for (file, line, n) in &self.test_mods {
            writeln!(
                f,
                "{}:{line}: an inline test module of {n} lines, over {MAX_INLINE_TEST_LINES}: \
                 move it beside the code as tests.rs",
                file.display()
            )?;
        }
        for s in &self.stale {
            writeln!(
                f,
                "{s}: no longer over {MAX_FN_LINES} lines: take it out of LONG_FNS_LEFT (xtask/src/lengths.rs)"
            )?;
        }
        Ok(())
    }
}

/// Checks the library files under `root/src`.
pub fn check(root: &Path) -> Result<Lengths, String> {
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files)?;
    let mut found = Lengths::default();
    let mut long = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        if is_test_file(&rel) {
            continue;
        }
        let text = read(&file)?;
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            found.files.push((rel.clone(), lines));
        }
        let code = strip(&text);
        for (line, name, n) in long_fns(&without_tests(&code)) {
            long.push((rel.clone(), line, name, n));
        }
        for (line, n) in long_test_mods(&code) {
            found.test_mods.push((rel.clone(), line, n));
        }
    }
    let listed = |file: &Path, name: &str| {
        LONG_FNS_LEFT
            .iter()
            .any(|(f, n, _)| Path::new(f) == file && *n == name)
    };
    for (f, n, _) in LONG_FNS_LEFT {
        if !long
            .iter()
            .any(|(file, _, name, _)| file == Path::new(f) && name == n)
        {
            found.stale.push(format!("{f}: fn {n}"));
        }
    }
    found.fns = long
        .into_iter()
        .filter(|(file, _, name, _)| !listed(file, name))
        .collect();
    Ok(found)
}

/// Functions of `code` (stripped) longer than [`MAX_FN_LINES`]: (line,
/// name, lines), from the `fn` line to the line of its closing brace.
fn long_fns(code: &str) -> Vec<(usize, String, usize)> {
    let mut out = Vec::new();
    for start in word_starts(code, "fn ") {
        let at = start + "fn ".len();
        let name = ident(&code[at..]).to_string();
        if name.is_empty() {
            continue;
        }
        // The body: the first `{` before any `;` (a declaration has none).
        let rest = &code[at..];
        let (Some(brace), semi) = (rest.find('{'), rest.find(';')) else {
            continue;
        };
        if semi.is_some_and(|s| s < brace) {
            continue;
        }
        let Some(body) = braced(&rest[brace..]) else {
            continue;
        };
        let end = at + brace + body.len() + 1;
        let (first, last) = (line_of(code, start), line_of(code, end));
        let n = last - first + 1;
        if n > MAX_FN_LINES {
            out.push((first, name, n));
        }
    }
    out
}

/// Inline test modules of `code` (stripped) longer than
/// [`MAX_INLINE_TEST_LINES`]: (line, lines), from the attribute to the
/// module's closing brace.
fn long_test_mods(code: &str) -> Vec<(usize, usize)> {
    test_items(code)
        .into_iter()
        .filter(|item| {
            let head = &code[item.start + "#[cfg(test)]".len()..item.end];
            let head = head.split('{').next().unwrap_or("");
            word_starts(head, "mod ").next().is_some() && !head.contains(';')
        })
        .map(|item| {
            let (first, last) = (line_of(code, item.start), line_of(code, item.end - 1));
            (first, last - first + 1)
        })
        .filter(|&(_, n)| n > MAX_INLINE_TEST_LINES)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_inline_test_module_is_found_and_a_test_file_declaration_is_not() {
        let body = "    fn t() {}\n".repeat(MAX_INLINE_TEST_LINES);
        let code = format!(
            "fn a() {{}}\n#[cfg(test)]\nmod tests;\n#[cfg(test)]\nfn helper() {{\n{body}}}\n\
             #[cfg(test)]\nmod inline {{\n{body}}}\n"
        );
        let at = 7 + MAX_INLINE_TEST_LINES;
        assert_eq!(long_test_mods(&code), [(at, MAX_INLINE_TEST_LINES + 3)]);
        let short = "    fn t() {}\n".repeat(MAX_INLINE_TEST_LINES - 3);
        assert_eq!(
            long_test_mods(&format!("#[cfg(test)]\nmod ok {{\n{short}}}\n")),
            []
        );
    }

    #[test]
    fn a_long_function_is_found_and_a_declaration_is_not() {
        let body = "    x();\n".repeat(MAX_FN_LINES);
        let code =
            format!("trait T {{ fn decl(&self); }}\nfn short() {{ }}\nfn long() {{\n{body}}}\n");
        assert_eq!(long_fns(&code), [(3, "long".to_string(), MAX_FN_LINES + 2)]);
        let just = "    x();\n".repeat(MAX_FN_LINES - 2);
        assert_eq!(long_fns(&format!("fn ok() {{\n{just}}}\n")), []);
    }
}
