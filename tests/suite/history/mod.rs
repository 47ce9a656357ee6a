//! Recoverable channels: the history stream, reading it back, automatic
//! recovery, and faults.

mod basics;
mod faults;
mod recovery;
mod rewire;
