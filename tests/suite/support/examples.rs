//! Building an example (or a workspace package's program) for a smoke
//! test: in the same target directory and profile as the test itself (a
//! no-op when fresh), so an old binary never stands in for the code under
//! test.

use std::path::PathBuf;
use std::process::Command;

/// The path of example `name`, built now.
pub fn example_binary(name: &str) -> PathBuf {
    example_binary_of("shardsub", name)
}

/// Builds example `name` of workspace package `package` (in the test
/// binary's target directory and profile) and returns its path.
pub fn example_binary_of(package: &str, name: &str) -> PathBuf {
    build(package, "--example", name)
}

/// Builds binary `name` of workspace package `package` (an example that
/// is a package of its own, like `examples/gateway`) and returns its path.
pub fn bin_of(package: &str, name: &str) -> PathBuf {
    build(package, "--bin", name)
}

/// `cargo build -p PACKAGE KIND NAME` (`--example` or `--bin`).
fn build(package: &str, kind: &str, name: &str) -> PathBuf {
    // Examples live next to <target>/<profile>/deps, binaries in it.
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("profile dir");
    let target_dir = profile_dir.parent().expect("target dir");
    let mut build = Command::new(env!("CARGO"));
    build
        .args(["build", "--quiet", "-p", package, kind, name])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    assert!(
        build.status().expect("cargo runs").success(),
        "building {package} {kind} {name} failed"
    );
    let bin = match kind {
        "--example" => profile_dir.join("examples").join(name),
        _ => profile_dir.join(name),
    };
    assert!(bin.exists(), "{} missing", bin.display());
    bin
}
