//! The library's own threads (I/O, control, workers): spawned by name, and a
//! panic on one is logged and counted, never dropped.
//!
//! [`spawn`] catches a panic at the top of the thread, so it is reported the
//! moment it happens (a metrics poll sees it while the rest runs on), not
//! only when the thread is joined at shutdown. [`join`] reports a panic that
//! got past that (none should) the same way instead of discarding it.

use std::any::Any;
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How many of the library's threads panicked; shared between a Pub/Sub
/// instance and its engines, so one counter covers all of their threads.
#[derive(Clone, Debug, Default)]
pub(crate) struct PanicCount(Arc<AtomicU64>);

impl PanicCount {
    /// The count now.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts `f` on a thread called `name`. If `f` panics, the panic is logged
/// (`log::error!`, with the thread's name and the panic message) and counted
/// in `panics`; the thread then ends as it would have.
///
/// # Errors
///
/// The OS error when the thread cannot be started.
pub(crate) fn spawn<F>(name: String, panics: PanicCount, f: F) -> io::Result<JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    let thread_name = name.clone();
    std::thread::Builder::new().name(name).spawn(move || {
        // The thread ends either way; what `f` owned has been dropped by the
        // unwind, so nothing observes a half-updated value afterwards.
        if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
            report(&thread_name, &*payload, &panics);
        }
    })
}

/// Joins `h`; a panic that ended the thread is reported as in [`spawn`].
pub(crate) fn join(h: JoinHandle<()>, panics: &PanicCount) {
    let name = h.thread().name().unwrap_or("unnamed").to_owned();
    if let Err(payload) = h.join() {
        report(&name, &*payload, panics);
    }
}

pub(crate) fn report(name: &str, payload: &(dyn Any + Send), panics: &PanicCount) {
    panics.bump();
    log::error!("{}", describe(name, payload));
}

/// The log line for a panic of thread `name`.
fn describe(name: &str, payload: &(dyn Any + Send)) -> String {
    format!(
        "thread {name:?} panicked: {}; it has stopped (counted in thread_panics)",
        panic_message(payload)
    )
}

/// The text a panic was raised with (`panic!("…")` carries a `&str` or a
/// `String`); a placeholder for any other payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(a payload that is not text)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages_are_read_from_str_and_string_payloads() {
        let s: Box<dyn Any + Send> = Box::new("static text");
        assert_eq!(panic_message(&*s), "static text");
        let s: Box<dyn Any + Send> = Box::new(format!("formatted {}", 7));
        assert_eq!(panic_message(&*s), "formatted 7");
        let s: Box<dyn Any + Send> = Box::new(42u32);
        assert_eq!(panic_message(&*s), "(a payload that is not text)");
        let line = describe("shardsub-io-3", &*Box::new("boom") as &(dyn Any + Send));
        assert_eq!(
            line,
            "thread \"shardsub-io-3\" panicked: boom; it has stopped (counted in thread_panics)"
        );
    }

    #[test]
    fn a_spawned_thread_that_panics_is_counted_and_joins_cleanly() {
        let panics = PanicCount::default();
        let h = spawn("shardsub-test-panic".into(), panics.clone(), || {
            panic!("provoked {}", "on purpose")
        })
        .unwrap();
        join(h, &panics);
        assert_eq!(panics.get(), 1);
        let h = spawn("shardsub-test-ok".into(), panics.clone(), || {}).unwrap();
        join(h, &panics);
        assert_eq!(panics.get(), 1, "a thread that returns is not counted");
    }

    #[test]
    fn join_reports_a_panic_that_escaped_the_thread() {
        let panics = PanicCount::default();
        let h = std::thread::Builder::new()
            .name("shardsub-test-raw".into())
            .spawn(|| panic!("raw"))
            .unwrap();
        join(h, &panics);
        assert_eq!(panics.get(), 1);
    }
}
