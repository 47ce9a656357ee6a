//! The live view. On a terminal (stdout is one, and no `--no-live`): a
//! small block redrawn four times a second with ANSI cursor moves, the
//! last second's sample and the running totals. Otherwise: one line per
//! second. Lines other code prints in between (a fault's report) scroll
//! above the block, which is drawn again below them.

use std::io::{IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use fleet_report::Sample;

use crate::fleet::{self, Instances};
use crate::node;
use crate::options::Options;
use crate::publish::Run;
use crate::servers::n;

/// Lines in the block.
const BLOCK: usize = 4;

/// Lines to print above the view (a fault's report), in order.
static NOTES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Prints `line` above the live view (at its next redraw, ≤ 250 ms).
pub fn note(line: String) {
    NOTES.lock().unwrap_or_else(|p| p.into_inner()).push(line);
}

fn take_notes() -> Vec<String> {
    std::mem::take(&mut *NOTES.lock().unwrap_or_else(|p| p.into_inner()))
}

pub struct Live {
    tty: bool,
    /// Whether the block is on screen (to move up over it).
    drawn: bool,
    last: Option<Sample>,
    seconds: u64,
}

impl Live {
    pub fn new(o: &Options) -> Live {
        let tty = !o.no_live && std::io::stdout().is_terminal();
        if !tty {
            println!(
                "{:>6} {:>11} {:>12} {:>9} {:>9} {:>7} {:>6} {:>6} {:>8} {:>11}",
                "t",
                "published/s",
                "delivered/s",
                "lag p50",
                "lag p99",
                "drops",
                "gaps",
                "conns",
                "rebuilds",
                "target/s"
            );
        }
        Live {
            tty,
            drawn: false,
            last: None,
            seconds: o.seconds,
        }
    }

    /// Between samples: on a terminal, the block again with fresh totals.
    pub fn tick(&mut self, elapsed: Duration, inst: &Instances, run: &Run) {
        if self.tty {
            self.draw(elapsed, inst, run);
        } else {
            for l in take_notes() {
                println!("{l}");
            }
        }
    }

    /// A new sample: a line, or the block.
    pub fn sample(&mut self, s: &Sample, inst: &Instances, run: &Run) {
        self.last = Some(s.clone());
        if self.tty {
            self.draw(Duration::from_secs_f64(s.t_s), inst, run);
        } else {
            for l in take_notes() {
                println!("{l}");
            }
            println!("{}", line(s));
        }
    }

    /// Leaves the last block on screen, and prints what is left to print.
    pub fn finish(&mut self) {
        for l in take_notes() {
            println!("{l}");
        }
    }

    fn draw(&mut self, elapsed: Duration, inst: &Instances, run: &Run) {
        let mut out = String::new();
        if self.drawn {
            // Up over the block, clearing each line.
            out += &format!("\x1b[{BLOCK}A");
        }
        for l in take_notes() {
            out += &format!("\x1b[2K{l}\n");
        }
        let fleet = &inst.fleet;
        // Every line under 80 columns: a wrapped line would throw the
        // cursor moves off.
        out += &format!(
            "\x1b[2K\x1b[1mfleet\x1b[0m {:.1} s of {} s, {} engines, {} connections\n",
            elapsed.as_secs_f64(),
            self.seconds,
            fleet.len(),
            n(fleet::connections(inst)),
        );
        out += &format!(
            "\x1b[2K  so far: {} published, {} delivered, {} dropped, {} gaps, {} rebuilds\n",
            n(run.published.load(Ordering::Relaxed)),
            n(node::total(fleet, |x| &x.delivered)),
            n(node::dropped(fleet)),
            n(node::total(fleet, |x| &x.gap_events)),
            n(fleet::rebuilds(inst)),
        );
        out += &format!(
            "\x1b[2K  {:>5} {:>9} {:>9} {:>8} {:>8} {:>6} {:>5} {:>6} {:>7} {:>8}\n",
            "t", "pub/s", "deliv/s", "p50", "p99", "drops", "gaps", "conns", "rebuild", "target"
        );
        out += "\x1b[2K  ";
        out += &self
            .last
            .as_ref()
            .map_or("(the first second …)".into(), compact);
        out += "\n";
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(out.as_bytes());
        let _ = stdout.flush();
        self.drawn = true;
    }
}

/// One sample in under 80 columns, for the block.
fn compact(s: &Sample) -> String {
    let lag = |us: u64| format!("{:.1}ms", us as f64 / 1000.0);
    format!(
        "{:>4.0}s {:>9} {:>9} {:>8} {:>8} {:>6} {:>5} {:>6} {:>7} {:>8}",
        s.t_s,
        n(s.published_per_s as u64),
        n(s.delivered_per_s as u64),
        lag(s.lag_p50_us),
        lag(s.lag_p99_us),
        n(s.drops),
        n(s.gaps),
        n(s.connections),
        n(s.rebuilds),
        if s.rate_target > 0.0 {
            n(s.rate_target as u64)
        } else {
            "max".into()
        }
    )
}

/// One sample as a line.
pub fn line(s: &Sample) -> String {
    let lag = |us: u64| format!("{:.2} ms", us as f64 / 1000.0);
    format!(
        "{:>5.1}s {:>11} {:>12} {:>9} {:>9} {:>7} {:>6} {:>6} {:>8} {:>11}",
        s.t_s,
        n(s.published_per_s as u64),
        n(s.delivered_per_s as u64),
        lag(s.lag_p50_us),
        lag(s.lag_p99_us),
        n(s.drops),
        n(s.gaps),
        n(s.connections),
        n(s.rebuilds),
        if s.rate_target > 0.0 {
            n(s.rate_target as u64)
        } else {
            "flat out".into()
        }
    )
}
