//! The wire format's exported files (`shardcore/wire/`, described in
//! `WIRE_FORMAT.md`): how a test that generates one from the code
//! compares it with the file, or (`SHARDSUB_BLESS=1`) writes it. A
//! rewritten file must only ever be a new one: a changed vector is a
//! changed wire format.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The directory of the exported files.
pub fn dir() -> PathBuf {
    let testkit = Path::new(env!("CARGO_MANIFEST_DIR"));
    testkit.parent().unwrap_or(testkit).join("shardcore/wire")
}

/// Panics unless the file `name` there holds exactly `want`; with
/// `SHARDSUB_BLESS` set, writes `want` to it instead.
pub fn check(name: &str, want: &str) {
    let path = dir().join(name);
    if std::env::var_os("SHARDSUB_BLESS").is_some() {
        std::fs::write(&path, want).expect("write");
        return;
    }
    let got = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (SHARDSUB_BLESS=1 writes it)", path.display()));
    if got != want {
        let line = got.lines().zip(want.lines()).position(|(g, w)| g != w);
        let at = line.map_or_else(|| "in length".to_string(), |i| format!("at line {}", i + 1));
        panic!(
            "{} differs from what the code computes ({at}; SHARDSUB_BLESS=1 writes it)",
            path.display()
        );
    }
}

/// Bytes in lowercase hex, two digits each (how the files write names
/// and payloads).
pub fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}
