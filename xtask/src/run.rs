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

/// Like [`status`], but the command's output also passes through `pick`:
/// the lines it keeps (at most [`NOTED_LINES`]) come back with a failure,
/// so a summary can name what failed even when a log shows only its tail.
pub fn status_noting(command: &mut Command, pick: fn(&str) -> Note) -> Result<(), String> {
    let line = show(command);
    println!("xtask: $ {line}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("`{line}` could not run: {e}"))?;
    let out = child.stdout.take().map(|o| relay(o, pick, false));
    let err = child.stderr.take().map(|e| relay(e, pick, true));
    let status = child
        .wait()
        .map_err(|e| format!("`{line}` could not be waited for: {e}"))?;
    let mut noted = Vec::new();
    for relay in [out, err].into_iter().flatten() {
        noted.extend(relay.join().unwrap_or_default());
    }
    noted.truncate(NOTED_LINES);
    if status.success() {
        Ok(())
    } else if noted.is_empty() {
        Err(format!("`{line}` failed ({status})"))
    } else {
        Err(format!(
            "`{line}` failed ({status}):\n    {}",
            noted.join("\n    ")
        ))
    }
}

/// The most lines [`status_noting`] returns.
pub const NOTED_LINES: usize = 40;

/// The most characters [`status_noting`] keeps of one line.
pub const NOTED_CHARS: usize = 400;

/// `line`, cut after `max` characters.
fn cut(line: &str, max: usize) -> &str {
    match line.char_indices().nth(max) {
        Some((at, _)) => &line[..at],
        None => line,
    }
}

/// What [`status_noting`] keeps of a line of output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Note {
    /// Not this line.
    Skip,
    /// This line.
    Line,
    /// This line and the next (a panic's location, then its message).
    AndNext,
}

/// Copies a child's output through, line by line, keeping what `pick` notes.
fn relay(
    from: impl std::io::Read + Send + 'static,
    pick: fn(&str) -> Note,
    to_stderr: bool,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let mut noted = Vec::new();
        let mut take_next = false;
        for line in std::io::BufReader::new(from).split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            let _ = if to_stderr {
                writeln!(std::io::stderr(), "{text}")
            } else {
                writeln!(std::io::stdout(), "{text}")
            };
            let note = pick(&text);
            let kept = cut(text.trim(), NOTED_CHARS);
            let fresh = !noted.iter().any(|n: &String| n == kept);
            if (take_next || note != Note::Skip) && fresh && noted.len() < NOTED_LINES {
                noted.push(kept.to_string());
            }
            take_next = note == Note::AndNext;
        }
        noted
    })
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

    #[test]
    fn a_failure_names_the_noted_lines_once() {
        fn pick(line: &str) -> Note {
            if line.starts_with("FAIL") {
                Note::Line
            } else if line.starts_with("panic") {
                Note::AndNext
            } else {
                Note::Skip
            }
        }
        let script =
            "echo 'FAIL a'; echo ok; echo 'panic at x' >&2; echo why >&2; echo 'FAIL a'; exit 3";
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        let err = status_noting(&mut command, pick).unwrap_err();
        assert!(
            err.ends_with(":\n    FAIL a\n    panic at x\n    why"),
            "{err}"
        );
        assert_eq!(cut("abcdef", 3), "abc");
        assert_eq!(cut("ab", 3), "ab");
        let mut passing = Command::new("sh");
        passing.args(["-c", "echo 'FAIL a'"]);
        assert_eq!(status_noting(&mut passing, pick), Ok(()));
    }
}
