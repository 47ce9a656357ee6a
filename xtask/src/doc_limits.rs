//! The product docs describe the current state: each stays under its byte
//! bound, and none names a commit hash except in the heading line that
//! `cargo xtask bench` writes above a generated table (the first line
//! between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`). Run logs and
//! commit hashes belong in git history.
//!
//! A test of this module checks the repository's docs, so `cargo xtask
//! test` (through nextest) and `cargo test -p xtask doc_limits` run it.

use std::path::Path;

use crate::bench::{markers, registry};

/// A product doc and the most bytes it may have (`None`: no size bound,
/// only the commit-hash rule). A doc that does not exist is skipped.
struct Doc {
    path: &'static str,
    max_bytes: Option<usize>,
}

const DOCS: &[Doc] = &[
    Doc {
        path: "README.md",
        max_bytes: Some(15_360),
    },
    Doc {
        path: "BENCHMARKS.md",
        max_bytes: Some(30_720),
    },
    Doc {
        path: "resp/BENCHMARKS.md",
        max_bytes: Some(30_720),
    },
    Doc {
        path: "shardcore/BENCHMARKS.md",
        max_bytes: Some(30_720),
    },
    Doc {
        path: "RELIABILITY.md",
        max_bytes: Some(30_720),
    },
    Doc {
        path: "benches/peers/BENCHMARKS.md",
        max_bytes: Some(30_720),
    },
    Doc {
        path: "ARCHITECTURE.md",
        max_bytes: None,
    },
    Doc {
        path: "CONTRIBUTING.md",
        max_bytes: None,
    },
];

/// Whether `word` reads as a commit hash: 7–40 hex digits with at least
/// one digit and one letter `a`–`f`.
fn is_hash(word: &str) -> bool {
    (7..=40).contains(&word.len())
        && word.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && word.bytes().any(|b| b.is_ascii_digit())
        && word.bytes().any(|b| b.is_ascii_lowercase())
}

/// The commit hashes of `line`, as whole words (a word is a run of ASCII
/// letters, digits and `_`).
fn hashes(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| is_hash(w))
        .collect()
}

/// What breaks the rule in one doc's `text`: its size over `max_bytes`,
/// and each commit hash outside a generated table's heading line.
fn problems(name: &str, text: &str, max_bytes: Option<usize>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(max) = max_bytes.filter(|&max| text.len() > max) {
        out.push(format!("{name}: {} bytes, over its {max}", text.len()));
    }
    let names: Vec<&str> = registry::all().iter().map(|e| e.name).collect();
    let regions = match markers::regions(text, &names) {
        Ok(regions) => regions,
        Err(e) => {
            out.push(format!("{name}: {e}"));
            Vec::new()
        }
    };
    // Each generated table's heading line: the first non-blank line of its
    // region, when it is the line `cargo xtask bench` writes.
    let headings: Vec<usize> = regions
        .iter()
        .filter_map(|r| {
            let body = &text[r.body.clone()];
            let skipped = body.len() - body.trim_start().len();
            body.trim_start()
                .starts_with("_Generated ")
                .then_some(r.body.start + skipped)
        })
        .collect();
    let mut offset = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let start = offset;
        offset += line.len();
        if headings.contains(&start) {
            continue;
        }
        for hash in hashes(line) {
            out.push(format!(
                "{name}:{}: commit hash `{hash}` outside a generated table's heading line",
                index + 1
            ));
        }
    }
    out
}

/// Every problem of the repository's product docs under `root`.
fn check(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for doc in DOCS {
        let max_bytes = doc.max_bytes;
        let path = root.join(doc.path);
        if !path.exists() {
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(text) => out.extend(problems(doc.path, &text, max_bytes)),
            Err(e) => out.push(format!("{}: {e}", doc.path)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_product_docs_keep_their_bounds_and_name_no_commits() {
        let found = check(&crate::run::root());
        assert!(found.is_empty(), "\n{}", found.join("\n"));
    }

    #[test]
    fn hashes_are_whole_hex_words_with_a_digit_and_a_letter() {
        assert_eq!(
            hashes("see a1b2c3d, or `c0ffee1`+dirty"),
            ["a1b2c3d", "c0ffee1"]
        );
        let full = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(hashes(full), [full]);
        for no in [
            "a1b2c3",    // six digits
            "1000000",   // no letter
            "deadbeef",  // no digit
            "a1b2c3dx",  // not hex
            "0xa1b2c3d", // one word with an x
            "A1B2C3D",   // upper case
            "x_a1b2c3d", // `_` joins words
            "0123456789abcdef0123456789abcdef012345678",
        ] {
            assert!(hashes(no).is_empty(), "{no}");
        }
    }

    #[test]
    fn a_hash_passes_only_in_a_generated_heading_line() {
        let heading = "_Generated 2026-12-05 · commit `a1b2c3d` · reproduce: \
                       `cargo xtask bench --only shardcore`_";
        let doc = format!(
            "# B\n\n<!-- bench:shardcore -->\n\n{heading}\n\n| a |\n|---|\n| 1 |\n\
             <!-- /bench:shardcore -->\n"
        );
        assert_eq!(problems("B.md", &doc, None), Vec::<String>::new());
        let prose = doc.replace("# B", "# B\nsee a1b2c3d");
        assert_eq!(
            problems("B.md", &prose, None),
            ["B.md:2: commit hash `a1b2c3d` outside a generated table's heading line"]
        );
        let row = doc.replace("| 1 |", "| b2c3d4e |");
        assert_eq!(problems("B.md", &row, None).len(), 1, "a table row");
        let outside = format!("{heading}\n");
        assert_eq!(problems("B.md", &outside, None).len(), 1, "no markers");
        let second = doc.replace("| a |", &format!("{heading}\n| a |"));
        assert_eq!(problems("B.md", &second, None).len(), 1, "a second heading");
    }

    #[test]
    fn a_doc_over_its_bound_fails() {
        let doc = "x".repeat(101);
        assert_eq!(problems("R.md", &doc, Some(101)), Vec::<String>::new());
        assert_eq!(
            problems("R.md", &doc, Some(100)),
            ["R.md: 101 bytes, over its 100"]
        );
        assert_eq!(problems("R.md", &doc, None), Vec::<String>::new());
        let bad = "<!-- bench:nope -->\n<!-- /bench:nope -->\n";
        assert_eq!(problems("R.md", bad, None).len(), 1, "an unknown marker");
    }
}
