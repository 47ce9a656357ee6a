//! The generated parts of BENCHMARKS.md: each table lives between
//! `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, each marker alone on
//! its line. [`replace`] swaps what is between the markers of the given
//! tables and keeps every other byte of the file (the prose) as it was.

use std::fmt;

/// Why a file's markers cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerError {
    /// An opening marker with no closing one before the next opening marker
    /// or the end of the file (`line` is 1-based).
    Unclosed { name: String, line: usize },
    /// A closing marker that closes nothing, or closes another name.
    UnexpectedClose { name: String, line: usize },
    /// A marker whose name is not in the registry.
    UnknownMarker { name: String, line: usize },
    /// A generated table whose name has no markers in the file.
    NoMarkers { name: String },
    /// The same name marked twice.
    Duplicate { name: String, line: usize },
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unclosed { name, line } => {
                write!(
                    f,
                    "line {line}: `<!-- bench:{name} -->` is never closed by `<!-- /bench:{name} -->`"
                )
            }
            Self::UnexpectedClose { name, line } => {
                write!(
                    f,
                    "line {line}: `<!-- /bench:{name} -->` closes no open table"
                )
            }
            Self::UnknownMarker { name, line } => write!(
                f,
                "line {line}: marker `bench:{name}` names no table (see `cargo xtask bench --list`)"
            ),
            Self::NoMarkers { name } => write!(
                f,
                "table {name} has no `<!-- bench:{name} -->` … `<!-- /bench:{name} -->` markers"
            ),
            Self::Duplicate { name, line } => {
                write!(f, "line {line}: table {name} is marked a second time")
            }
        }
    }
}

/// One marker line.
#[derive(Debug, PartialEq, Eq)]
enum Marker<'a> {
    Open(&'a str),
    Close(&'a str),
}

fn marker(line: &str) -> Option<Marker<'_>> {
    let inner = line
        .trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim();
    if let Some(name) = inner.strip_prefix("/bench:") {
        Some(Marker::Close(name.trim()))
    } else {
        inner
            .strip_prefix("bench:")
            .map(|name| Marker::Open(name.trim()))
    }
}

/// A marked region: its name and the byte range of its body (the lines
/// strictly between the two markers).
#[derive(Debug, PartialEq, Eq)]
pub struct Region {
    pub name: String,
    pub body: std::ops::Range<usize>,
}

/// Every marked region of `doc`, in order, checked against the `known`
/// table names.
///
/// # Errors
///
/// Unbalanced, nested, duplicated or unknown markers.
pub fn regions(doc: &str, known: &[&str]) -> Result<Vec<Region>, MarkerError> {
    let mut out: Vec<Region> = Vec::new();
    let mut open: Option<(String, usize, usize)> = None; // name, line, body start
    let mut offset = 0;
    for (index, line) in doc.split_inclusive('\n').enumerate() {
        let number = index + 1;
        let start = offset;
        offset += line.len();
        let Some(found) = marker(line) else { continue };
        match (found, open.take()) {
            (Marker::Open(name), None) => {
                if !known.contains(&name) {
                    return Err(MarkerError::UnknownMarker {
                        name: name.into(),
                        line: number,
                    });
                }
                if out.iter().any(|r| r.name == name) {
                    return Err(MarkerError::Duplicate {
                        name: name.into(),
                        line: number,
                    });
                }
                open = Some((name.into(), number, offset));
            }
            (Marker::Open(_), Some((name, line, _))) => {
                return Err(MarkerError::Unclosed { name, line });
            }
            (Marker::Close(name), Some((open_name, _, body))) if name == open_name => {
                out.push(Region {
                    name: open_name,
                    body: body..start,
                });
            }
            (Marker::Close(name), _) => {
                return Err(MarkerError::UnexpectedClose {
                    name: name.into(),
                    line: number,
                });
            }
        }
    }
    match open {
        Some((name, line, _)) => Err(MarkerError::Unclosed { name, line }),
        None => Ok(out),
    }
}

/// `doc` with the body of each named region replaced by its new text
/// (a final newline is added when missing); regions not in `tables` and
/// everything outside the markers are kept byte for byte.
///
/// # Errors
///
/// Any error of [`regions`], or a table in `tables` with no markers.
pub fn replace(
    doc: &str,
    known: &[&str],
    tables: &[(String, String)],
) -> Result<String, MarkerError> {
    let found = regions(doc, known)?;
    if let Some((name, _)) = tables
        .iter()
        .find(|(name, _)| !found.iter().any(|r| &r.name == name))
    {
        return Err(MarkerError::NoMarkers { name: name.clone() });
    }
    let mut out = String::with_capacity(doc.len());
    let mut at = 0;
    for region in &found {
        let Some((_, text)) = tables.iter().find(|(name, _)| *name == region.name) else {
            continue;
        };
        out.push_str(&doc[at..region.body.start]);
        out.push_str(text);
        if !text.is_empty() && !text.ends_with('\n') {
            out.push('\n');
        }
        at = region.body.end;
    }
    out.push_str(&doc[at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: &[&str] = &["a", "b"];

    fn tables(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, t)| (n.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn replaces_only_between_markers_and_keeps_the_prose() {
        let doc = "# T\nprose 1\n<!-- bench:a -->\nold a\n| x |\n<!-- /bench:a -->\nprose 2\n\
                   <!-- bench:b -->\nold b\n<!-- /bench:b -->\nend";
        let new = replace(doc, KNOWN, &tables(&[("a", "new a\n| y |")])).unwrap();
        assert_eq!(
            new,
            "# T\nprose 1\n<!-- bench:a -->\nnew a\n| y |\n<!-- /bench:a -->\nprose 2\n\
             <!-- bench:b -->\nold b\n<!-- /bench:b -->\nend"
        );
        let both = replace(doc, KNOWN, &tables(&[("b", "B\n"), ("a", "A\n")])).unwrap();
        assert!(both.contains("<!-- bench:a -->\nA\n<!-- /bench:a -->\nprose 2\n"));
        assert!(both.contains("<!-- bench:b -->\nB\n<!-- /bench:b -->\nend"));
    }

    #[test]
    fn nothing_to_replace_gives_the_same_bytes() {
        let doc = "x\n<!-- bench:a -->\n\n<!-- /bench:a -->\r\ny";
        assert_eq!(replace(doc, KNOWN, &[]).unwrap(), doc);
        // An empty region fills in; running again gives the same file.
        let once = replace(doc, KNOWN, &tables(&[("a", "t")])).unwrap();
        assert_eq!(once, "x\n<!-- bench:a -->\nt\n<!-- /bench:a -->\r\ny");
        assert_eq!(replace(&once, KNOWN, &tables(&[("a", "t")])).unwrap(), once);
    }

    #[test]
    fn unknown_and_unmarked_names_are_errors() {
        let doc = "<!-- bench:zzz -->\n<!-- /bench:zzz -->\n";
        assert_eq!(
            replace(doc, KNOWN, &[]),
            Err(MarkerError::UnknownMarker {
                name: "zzz".into(),
                line: 1
            })
        );
        let doc = "<!-- bench:a -->\n<!-- /bench:a -->\n";
        assert_eq!(
            replace(doc, KNOWN, &tables(&[("b", "t")])),
            Err(MarkerError::NoMarkers { name: "b".into() })
        );
    }

    #[test]
    fn unbalanced_markers_are_errors() {
        let cases: &[(&str, MarkerError)] = &[
            (
                "p\n<!-- bench:a -->\nt\n",
                MarkerError::Unclosed {
                    name: "a".into(),
                    line: 2,
                },
            ),
            (
                "<!-- bench:a -->\n<!-- bench:b -->\n<!-- /bench:b -->\n",
                MarkerError::Unclosed {
                    name: "a".into(),
                    line: 1,
                },
            ),
            (
                "t\n<!-- /bench:a -->\n",
                MarkerError::UnexpectedClose {
                    name: "a".into(),
                    line: 2,
                },
            ),
            (
                "<!-- bench:a -->\n<!-- /bench:b -->\n",
                MarkerError::UnexpectedClose {
                    name: "b".into(),
                    line: 2,
                },
            ),
            (
                "<!-- bench:a -->\n<!-- /bench:a -->\n<!-- bench:a -->\n<!-- /bench:a -->\n",
                MarkerError::Duplicate {
                    name: "a".into(),
                    line: 3,
                },
            ),
        ];
        for (doc, want) in cases {
            assert_eq!(replace(doc, KNOWN, &[]).as_ref(), Err(want), "{doc:?}");
        }
    }

    #[test]
    fn other_comments_are_prose() {
        let doc = "<!-- note -->\n<!-- benchmark:a -->\n`<!-- bench:a -->` in text\n";
        assert_eq!(regions(doc, KNOWN).unwrap(), Vec::new());
        assert_eq!(replace(doc, KNOWN, &[]).unwrap(), doc);
    }
}
