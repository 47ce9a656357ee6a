//! The connection handshake: `HELLO 3 [AUTH user pass] [SETNAME name]`, or,
//! for RESP2 (asked for, or fallen back to when `HELLO` is refused),
//! `AUTH` and `CLIENT SETNAME` as separate commands; then, for a server
//! that must be a primary ([`ConnConfig::require_primary`]), `ROLE`, once
//! the rest is answered (so it is sent authenticated whichever protocol
//! was settled on).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use resp::Frame;

use super::types::{ConnConfig, ConnError, Protocol};

/// A handshake command whose reply is awaited.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Step {
    Hello,
    Auth,
    SetName,
    /// `SCRIPT LOAD` of one of [`ConnConfig::load_scripts`].
    LoadScript,
    /// `ROLE`, whose reply must say `master`.
    Role,
}

/// Handshake progress.
#[derive(Debug)]
pub(super) struct Handshake {
    steps: VecDeque<Step>,
    pub(super) deadline: Instant,
    fell_back: bool,
    /// `ROLE` is still to be sent, after the other steps.
    role_to_check: bool,
}

/// What a handshake reply led to.
#[derive(Debug)]
pub(super) enum HandshakeOutcome {
    /// More replies are awaited.
    Continue,
    /// `HELLO` was refused; RESP2 commands were queued.
    FellBack,
    /// One more command was queued (`ROLE`).
    Sent,
    /// The handshake is over.
    Done { fell_back: bool },
    /// The server refused a step.
    Failed(ConnError),
}

impl Handshake {
    /// Queues the handshake commands; `None` when no handshake is needed
    /// (RESP2 without credentials or name).
    pub(super) fn start(config: &ConnConfig, out: &mut Vec<u8>, now: Instant) -> Option<Self> {
        let mut steps = VecDeque::with_capacity(3);
        match config.protocol {
            Protocol::Resp3 => {
                encode_hello(config, out);
                steps.push_back(Step::Hello);
            }
            Protocol::Resp2 => encode_resp2_steps(config, out, &mut steps),
        }
        for script in &config.load_scripts {
            resp::encode_command(out, [&b"SCRIPT"[..], b"LOAD", script.as_bytes()]);
            steps.push_back(Step::LoadScript);
        }
        let mut role_to_check = config.require_primary;
        if steps.is_empty() {
            if !role_to_check {
                return None;
            }
            encode_role(out, &mut steps);
            role_to_check = false;
        }
        Some(Handshake {
            steps,
            deadline: now + config.handshake_timeout,
            fell_back: false,
            role_to_check,
        })
    }

    /// Handles the reply to the oldest handshake command.
    pub(super) fn handle_reply(
        &mut self,
        frame: &Frame<'_>,
        config: &ConnConfig,
        out: &mut Vec<u8>,
        _now: Instant,
    ) -> HandshakeOutcome {
        let Some(step) = self.steps.pop_front() else {
            return HandshakeOutcome::Failed(ConnError::UnexpectedReply);
        };
        if let Some(text) = error_text(frame).filter(|_| step != Step::LoadScript) {
            return match step {
                Step::Hello if refuses_hello(&text) => {
                    log::info!("server refused HELLO 3 ({text}); falling back to RESP2");
                    self.fell_back = true;
                    encode_resp2_steps(config, out, &mut self.steps);
                    if self.steps.is_empty() {
                        HandshakeOutcome::Done { fell_back: true }
                    } else {
                        HandshakeOutcome::FellBack
                    }
                }
                Step::Hello if is_auth_error(&text) => {
                    HandshakeOutcome::Failed(ConnError::Auth(text))
                }
                Step::Hello | Step::SetName | Step::LoadScript | Step::Role => {
                    HandshakeOutcome::Failed(ConnError::Handshake(text))
                }
                Step::Auth => HandshakeOutcome::Failed(ConnError::Auth(text)),
            };
        }
        if step == Step::LoadScript {
            if let Some(text) = error_text(frame) {
                log::info!("SCRIPT LOAD refused in the handshake ({text}): NOSCRIPT later");
            }
        }
        if step == Step::Role {
            if let Some(role) = not_primary(frame) {
                return HandshakeOutcome::Failed(ConnError::NotPrimary(role));
            }
        }
        if self.steps.is_empty() && self.role_to_check {
            self.role_to_check = false;
            encode_role(out, &mut self.steps);
            return HandshakeOutcome::Sent;
        }
        if self.steps.is_empty() {
            HandshakeOutcome::Done {
                fell_back: self.fell_back,
            }
        } else {
            HandshakeOutcome::Continue
        }
    }
}

fn encode_hello(config: &ConnConfig, out: &mut Vec<u8>) {
    let mut args: Vec<&[u8]> = vec![b"HELLO", b"3"];
    if let Some(password) = &config.password {
        args.push(b"AUTH");
        args.push(config.username.as_deref().unwrap_or(b"default"));
        args.push(password);
    }
    if let Some(name) = &config.client_name {
        args.push(b"SETNAME");
        args.push(name);
    }
    resp::encode_command(out, args);
}

fn encode_resp2_steps(config: &ConnConfig, out: &mut Vec<u8>, steps: &mut VecDeque<Step>) {
    if let Some(password) = &config.password {
        match &config.username {
            Some(user) => resp::encode_command(out, [&b"AUTH"[..], user, password]),
            None => resp::encode_command(out, [&b"AUTH"[..], password]),
        }
        steps.push_back(Step::Auth);
    }
    if let Some(name) = &config.client_name {
        resp::encode_command(out, [&b"CLIENT"[..], b"SETNAME", name]);
        steps.push_back(Step::SetName);
    }
}

fn encode_role(out: &mut Vec<u8>, steps: &mut VecDeque<Step>) {
    resp::encode_command(out, [&b"ROLE"[..]]);
    steps.push_back(Step::Role);
}

/// The role a `ROLE` reply names, unless it is `master` (the reply's
/// first element).
fn not_primary(frame: &Frame<'_>) -> Option<Arc<str>> {
    let v = frame.to_value();
    let role = v
        .as_array()
        .and_then(|a| a.first())
        .and_then(resp::Value::as_bytes);
    match role {
        Some(b"master") => None,
        Some(r) => Some(String::from_utf8_lossy(r).into()),
        None => Some(format!("unreadable ROLE reply {v:?}").into()),
    }
}

fn error_text(frame: &Frame<'_>) -> Option<Arc<str>> {
    match frame {
        Frame::Error(t) | Frame::BlobError(t) => Some(String::from_utf8_lossy(t).into()),
        _ => None,
    }
}

/// `HELLO` itself is unknown (before Redis 6) or RESP3 is not offered.
fn refuses_hello(text: &str) -> bool {
    text.starts_with("NOPROTO") || text.to_ascii_lowercase().contains("unknown command")
}

fn is_auth_error(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    text.starts_with("WRONGPASS")
        || text.starts_with("NOPERM")
        || text.starts_with("NOAUTH")
        || lower.contains("auth")
        || lower.contains("password")
}
