//! In-band authentication of a queue (DH-HMAC-CHAP) as the host: after
//! its Connect, when the controller sets the authentication-required flag.

use dhchap::host::{HostError, Transaction};
use dhchap::Secret;
use nvme::auth::{reason, AuthCommand, Message};
use nvme::{Command, Completion};

use crate::error::{Error, Result};
use crate::transport::Xfer;

/// Connect response: authentication transaction required.
pub const CONNECT_ATR: u64 = 1 << 17;
/// What an Authentication Receive asks for (as Linux hosts).
pub const RECEIVE_LEN: u32 = 4096;

/// The host's secrets (nvme-cli's `--dhchap-secret`, `--dhchap-ctrl-secret`).
#[derive(Debug, Clone)]
pub struct HostKeys {
    /// The secret the host proves it holds.
    pub secret: Secret,
    /// With it, the controller must prove it holds this one.
    pub ctrl_secret: Option<Secret>,
}

/// Runs one command on a queue: command, transfer, data out, data in.
pub type Exec<'a> = dyn FnMut(Command, Xfer, &[u8], &mut [u8]) -> Result<Completion> + 'a;

/// After a queue's Connect answered `result`: authenticates when the
/// controller asks; refuses a controller that does not authenticate when
/// the host wants it to prove its key.
pub fn after_connect(
    exec: &mut Exec<'_>,
    keys: Option<&HostKeys>,
    result: u64,
    hostnqn: &str,
    subnqn: &str,
    qid: u16,
) -> Result<()> {
    let fail = |why: String| Error::Auth { qid, reason: why };
    match keys {
        None if result & CONNECT_ATR != 0 => Err(fail(
            "the controller requires authentication (give --dhchap-secret)".into(),
        )),
        Some(k) if result & CONNECT_ATR == 0 && k.ctrl_secret.is_some() => Err(fail(
            "the controller does not authenticate, but it was to prove its key (--dhchap-ctrl-secret)"
                .into(),
        )),
        Some(k) if result & CONNECT_ATR != 0 => {
            // A transaction id per queue, as Linux (any value will do).
            authenticate(exec, k, hostnqn, subnqn, qid, qid)
        }
        _ => Ok(()),
    }
}

fn send(exec: &mut Exec<'_>, qid: u16, msg: &[u8]) -> Result<()> {
    let cmd = AuthCommand::dhchap(msg.len() as u32).to_command(0, false);
    let c = exec(cmd, Xfer::ToTarget(msg.len() as u32), msg, &mut [])?;
    if !c.status.is_success() {
        return Err(Error::Auth {
            qid,
            reason: format!("Authentication Send failed: {}", c.status),
        });
    }
    Ok(())
}

fn receive(exec: &mut Exec<'_>, qid: u16) -> Result<Vec<u8>> {
    let cmd = AuthCommand::dhchap(RECEIVE_LEN).to_command(0, true);
    let mut buf = vec![0u8; RECEIVE_LEN as usize];
    let c = exec(cmd, Xfer::FromTarget(RECEIVE_LEN), &[], &mut buf)?;
    if !c.status.is_success() {
        return Err(Error::Auth {
            qid,
            reason: format!("Authentication Receive failed: {}", c.status),
        });
    }
    Ok(buf)
}

/// One whole transaction on queue `qid`.
pub fn authenticate(
    exec: &mut Exec<'_>,
    keys: &HostKeys,
    hostnqn: &str,
    subnqn: &str,
    qid: u16,
    t_id: u16,
) -> Result<()> {
    let mut tx = Transaction::new(
        keys.secret.clone(),
        keys.ctrl_secret.clone(),
        hostnqn,
        subnqn,
        t_id,
    );
    send(exec, qid, &tx.negotiate())?;
    let challenge = receive(exec, qid)?;
    let reply = tx.challenge(&challenge);
    let reply = step(exec, &tx, qid, reply)?;
    send(exec, qid, &reply)?;
    let s1 = receive(exec, qid)?;
    let s2 = tx.success1(&s1);
    if let Some(s2) = step(exec, &tx, qid, s2)? {
        send(exec, qid, &s2)?;
    }
    Ok(())
}

/// A host step's result; when the host is the one refusing, the controller
/// is told why (Failure2) first.
fn step<T>(
    exec: &mut Exec<'_>,
    tx: &Transaction,
    qid: u16,
    r: std::result::Result<T, HostError>,
) -> Result<T> {
    r.map_err(|e| {
        if let Some(why) = e.failure2_reason() {
            let _ = send(exec, qid, &tx.failure2(why));
        }
        Error::Auth {
            qid,
            reason: e.to_string(),
        }
    })
}

/// The reason a Failure1 message carries, named (for raw tests).
pub fn failure_reason(msg: &[u8]) -> Option<&'static str> {
    match Message::parse(msg).ok()? {
        Message::Failure { explanation, .. } => Some(reason::name(explanation)),
        _ => None,
    }
}
