//! Programs run as child processes against real servers: the README's
//! examples, the fleet demo and its report, the metrics and tokio
//! examples, the chat gateway driven in headless Chromium, and a Python
//! publisher speaking the wire format.

mod demo_report;
mod fanout;
mod gateway;
mod metrics_http;
mod readme;
mod tokio_server;
mod wire_files;
mod wire_python;
