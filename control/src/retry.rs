//! A refused publish's next step: how often it may be redirected
//! (`MOVED`, `ASK`), and when a publish refused for now (`TRYAGAIN`,
//! `CLUSTERDOWN`, no owner known) is tried again, within its retry window.
//! It reads no clock: the driver keeps each publish's counts and the time
//! of its first refusal, and asks.
//!
//! ```
//! use control::{RetryFailure, RetryPolicy, Time};
//! use core::time::Duration;
//! let ms = Duration::from_millis;
//! let policy = RetryPolicy::new(2, ms(100));
//! let mut redirects = 0;
//! assert!(policy.redirect(&mut redirects).is_ok());
//! assert!(policy.redirect(&mut redirects).is_ok());
//! assert_eq!(
//!     policy.redirect(&mut redirects),
//!     Err(RetryFailure::Redirects { count: 2 })
//! );
//! let mut tries = 0;
//! let first = Time::from_millis(7);
//! assert_eq!(policy.retry(first, first, &mut tries), Ok(Time::from_millis(27)));
//! assert_eq!(
//!     policy.retry(Time::from_millis(107), first, &mut tries),
//!     Err(RetryFailure::Window { tries: 2 })
//! );
//! ```

use core::fmt;
use core::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::time::Time;

/// The delay before a publish refused for now is sent again: 20 ms
/// doubling to 500 ms, exact (each publish counts its own retries).
const SCHEDULE: Backoff = Backoff::new(
    Duration::from_millis(20),
    Duration::from_millis(500),
    Jitter::None,
    0,
);

/// Why a refused publish is given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryFailure {
    /// It was redirected `count` times, the most allowed, and then again.
    Redirects {
        /// Redirects it followed.
        count: u32,
    },
    /// Still refused when its retry window ran out, after `tries` tries.
    Window {
        /// Times it was refused for now.
        tries: u32,
    },
}

impl fmt::Display for RetryFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RetryFailure::Redirects { count } => write!(f, "{count} redirects"),
            RetryFailure::Window { tries } => write!(f, "still failing after {tries} tries"),
        }
    }
}

/// The bounds on a refused publish.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    max_redirects: u32,
    window: Duration,
    schedule: Backoff,
}

impl RetryPolicy {
    /// At most `max_redirects` redirects per publish; retries for now
    /// within `window` of its first refusal.
    pub const fn new(max_redirects: u32, window: Duration) -> RetryPolicy {
        RetryPolicy {
            max_redirects,
            window,
            schedule: SCHEDULE,
        }
    }

    /// A publish redirected `redirects` times so far is redirected again:
    /// counted, or given up when that is one too many.
    ///
    /// # Errors
    ///
    /// [`RetryFailure::Redirects`] past the bound.
    pub fn redirect(&self, redirects: &mut u32) -> Result<(), RetryFailure> {
        *redirects = redirects.saturating_add(1);
        if *redirects > self.max_redirects {
            return Err(RetryFailure::Redirects {
                count: *redirects - 1,
            });
        }
        Ok(())
    }

    /// A publish first refused for now at `first` is refused again at
    /// `now` (its `tries` counted here): when to send it again.
    ///
    /// # Errors
    ///
    /// [`RetryFailure::Window`] once `now` is `window` past `first`.
    pub fn retry(&self, now: Time, first: Time, tries: &mut u32) -> Result<Time, RetryFailure> {
        *tries = tries.saturating_add(1);
        if now.since(first) >= self.window {
            return Err(RetryFailure::Window { tries: *tries });
        }
        let mut schedule = self.schedule.clone();
        Ok(now + schedule.delay_at(*tries - 1))
    }

    /// The longest a publish waits between two tries.
    pub fn longest_delay(&self) -> Duration {
        self.schedule.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_to_half_a_second_within_the_window() {
        let p = RetryPolicy::new(0, Duration::from_secs(2));
        let first = Time::from_millis(1000);
        let mut tries = 0;
        let mut now = first;
        let mut delays = Vec::new();
        while let Ok(at) = p.retry(now, first, &mut tries) {
            delays.push(at.since(now).as_millis());
            now = at;
        }
        assert_eq!(delays, [20, 40, 80, 160, 320, 500, 500, 500]);
        assert_eq!(now, Time::from_millis(1000 + 2120));
        assert_eq!(tries, 9);
        assert_eq!(
            p.redirect(&mut 0),
            Err(RetryFailure::Redirects { count: 0 })
        );
    }
}
