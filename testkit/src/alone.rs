//! A test that measures its whole process runs alone in it.

/// The variable that marks a child process [`alone`] started.
const ALONE_VAR: &str = "TESTKIT_ALONE";

/// Whether the calling test has its process to itself, so that
/// what it measures of the process (allocations counted by
/// [`CountingAlloc`](crate::alloc::CountingAlloc), peak RSS, threads in
/// `/proc/self/task`) is its own work. Call it first in
/// such a test and return at once when it says `false`:
///
/// ```no_run
/// # fn measure() {}
/// if !testkit::alone() {
///     return; // it ran, and passed, in a child process
/// }
/// measure();
/// ```
///
/// `true` under nextest (a process per test), in the child process this
/// starts, and when the test runs on libtest's main thread
/// (`--test-threads=1`). Otherwise (libtest running tests side by side in
/// one process) it runs the test again, by itself, in a child process
/// (`<this binary> <test name> --exact --test-threads=1`), passes its
/// output on, panics unless exactly that one test ran and passed, and
/// returns `false`.
pub fn alone() -> bool {
    if std::env::var_os("NEXTEST_EXECUTION_MODE").is_some_and(|m| m == "process-per-test")
        || std::env::var_os(ALONE_VAR).is_some()
    {
        return true;
    }
    // libtest names each test's thread after the test.
    let thread = std::thread::current();
    let Some(name) = thread.name().filter(|n| *n != "main") else {
        return true;
    };
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = std::process::Command::new(exe)
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE_VAR, "1")
        .output()
        .expect("rerun the test alone");
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, rerun alone in a child process, did not pass ({})",
        out.status
    );
    false
}
