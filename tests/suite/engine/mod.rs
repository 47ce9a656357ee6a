//! The engine alone, against real servers and scripted fake servers.

mod basic;
mod display_protocol;
mod faults;
mod io_threads;
mod routing;
mod wire_limits;
mod writes;
