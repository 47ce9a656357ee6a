//! Running commands from the workspace root, loudly.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The workspace root (the parent of this crate).
pub fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// `cargo`, as the one running us (so `cargo +toolchain xtask` is kept).
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(root()).stdin(Stdio::null());
    command
}

/// Prints the command line, runs it with inherited output, reports failure.
pub fn status(command: &mut Command) -> Result<(), String> {
    let line = show(command);
    println!("xtask: $ {line}");
    let status = command
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("`{line}` could not run: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{line}` failed ({status})"))
    }
}

/// Runs quietly and returns stdout if it succeeded.
pub fn output(command: &mut Command) -> Option<String> {
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether a command runs and succeeds (quietly).
pub fn succeeds(command: &mut Command) -> bool {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The command line, for printing.
pub fn show(command: &Command) -> String {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        let arg = arg.to_string_lossy();
        if arg.is_empty() || arg.contains(' ') {
            line.push_str(&format!(" '{arg}'"));
        } else {
            line.push(' ');
            line.push_str(&arg);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_quotes_empty_and_spaced_arguments() {
        let mut command = Command::new("redis-server");
        command.args(["--save", "", "--dir", "/tmp/a b"]);
        assert_eq!(show(&command), "redis-server --save '' --dir '/tmp/a b'");
    }
}
