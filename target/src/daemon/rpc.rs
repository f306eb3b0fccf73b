//! The control socket's protocol: JSON-RPC 2.0, one request per line, one
//! response line, then the daemon closes the connection. Methods (their
//! parameters and results are in `docs/control.md`):
//!
//! | method | params | result |
//! |---|---|---|
//! | `status` | none | [`super::status::Status`] |
//! | `config_show` | none | `{"path", "toml"}` |
//! | `subsystem_add` | [`SubsystemAdd`] | [`Changed`] |
//! | `subsystem_del` | [`SubsystemRef`] | [`Changed`] |
//! | `namespace_add` | [`NamespaceAdd`] | [`Changed`] (with `nsid`) |
//! | `namespace_del` | [`NamespaceRef`] | [`Changed`] |
//! | `host_add`, `host_del` | [`HostRef`] | [`Changed`] |
//! | `controller_disconnect` | [`ControllerRef`] | [`Changed`] |
//!
//! A bare `status` line (no JSON) is still answered with the status alone,
//! for scripts written against the first protocol.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::config::edit::{HostRef, NamespaceAdd, NamespaceRef, SubsystemAdd, SubsystemRef};

use super::control::ControlError;

/// Invalid JSON.
pub const PARSE_ERROR: i64 = -32700;
/// Not a JSON-RPC 2.0 request.
pub const INVALID_REQUEST: i64 = -32600;
/// No such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// The parameters do not fit the method.
pub const INVALID_PARAMS: i64 = -32602;
/// The change was refused: nothing changed (the reason says why).
pub const REFUSED: i64 = -32000;
/// The daemon cannot make changes now (no configuration file, the file was
/// edited since it was loaded, the daemon is busy).
pub const UNAVAILABLE: i64 = -32001;
/// The file could not be written: the change was undone.
pub const NOT_SAVED: i64 = -32002;

/// How long a client waits for the answer to a change (opening an RBD image
/// may take a while).
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(120);

/// Every method, for the help of an unknown one.
pub const METHODS: &[&str] = &[
    "status",
    "config_show",
    "subsystem_add",
    "subsystem_del",
    "subsystem_listener_add",
    "subsystem_listener_del",
    "namespace_add",
    "namespace_del",
    "namespace_attach",
    "namespace_detach",
    "namespace_qos",
    "namespace_resize",
    "host_add",
    "host_del",
    "host_key_set",
    "host_key_del",
    "listener_ana",
    "listener_add",
    "listener_del",
    "controller_disconnect",
    "drain",
    "undrain",
    "ok_to_stop",
];

/// The parameters of `drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainParams {
    /// The listener address to drain (every listener there, RDMA and
    /// TCP); none: every listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
    /// How long the drain may take (seconds; default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
}

/// The parameters of `ok_to_stop` (none: stopping now).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopParams {
    /// Stopping once drained (as SIGTERM does on a gateway with peers): a
    /// live gateway that would take a drained group over counts as a path.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_drain: bool,
}

/// The result of `ok_to_stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopCheck {
    /// Stopping leaves every host an optimized path.
    pub ok: bool,
    /// Why not: one line per namespace.
    pub reasons: Vec<String>,
    /// Those namespaces are served by this target alone: no drain or wait
    /// makes stopping safe (a restart pauses their I/O, which the hosts
    /// hold within their ctrl-loss-tmo). `None`: a daemon older than
    /// this field, which cannot tell (nor stop after a drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alone: Option<bool>,
    /// Listeners drained (inaccessible) now.
    pub drained: usize,
}

/// A controller, by subsystem and controller id (`controller_disconnect`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControllerRef {
    /// The subsystem's NQN.
    pub subsystem: String,
    /// The controller id (`nvmf-target status` lists them).
    pub cntlid: u16,
}

/// The result of a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changed {
    /// What changed.
    pub summary: String,
    /// The nsid of an added namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nsid: Option<u32>,
    /// What the reload did ("subsystems +0 -0, namespaces +1 -0, ...").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<String>,
    /// The file the change was written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub saved: Option<String>,
}

/// The result of `config_show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigText {
    /// The file.
    pub path: String,
    /// The running configuration, as that file's text.
    pub toml: String,
}

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct RpcError {
    /// One of the codes above.
    pub code: i64,
    /// Why.
    pub message: String,
}

impl RpcError {
    /// An error with `code`.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }
}

/// A request, as read.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// Must be "2.0".
    pub jsonrpc: String,
    /// Echoed in the response.
    #[serde(default)]
    pub id: Value,
    /// The method.
    pub method: String,
    /// Its parameters.
    #[serde(default)]
    pub params: Value,
}

impl Request {
    /// Reads a request line.
    pub fn parse(line: &str) -> Result<Request, (Value, RpcError)> {
        let v: Value = serde_json::from_str(line).map_err(|e| {
            (
                Value::Null,
                RpcError::new(PARSE_ERROR, format!("not JSON: {e}")),
            )
        })?;
        let id = v.get("id").cloned().unwrap_or(Value::Null);
        let r: Request = serde_json::from_value(v).map_err(|e| {
            (
                id.clone(),
                RpcError::new(INVALID_REQUEST, format!("not a JSON-RPC request: {e}")),
            )
        })?;
        if r.jsonrpc != "2.0" {
            return Err((
                id,
                RpcError::new(INVALID_REQUEST, "jsonrpc must be \"2.0\""),
            ));
        }
        Ok(r)
    }
}

/// The parameters of a method, or the error that names what is wrong.
pub fn params<T: for<'de> Deserialize<'de>>(method: &str, p: Value) -> Result<T, RpcError> {
    let p = if p.is_null() {
        Value::Object(Default::default())
    } else {
        p
    };
    serde_json::from_value(p).map_err(|e| RpcError::new(INVALID_PARAMS, format!("{method}: {e}")))
}

/// The response line to request `id`.
pub fn response(id: Value, result: Result<Value, RpcError>) -> String {
    let v = match result {
        Ok(r) => serde_json::json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err(e) => serde_json::json!({"jsonrpc": "2.0", "id": id, "error": e}),
    };
    v.to_string()
}

/// Why a call failed, for the command line.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The socket could not be reached or answered garbage.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The daemon answered with an error.
    #[error("{0}")]
    Refused(RpcError),
}

/// Calls `method` on the daemon at `path` and returns its result.
pub fn call(
    path: &Path,
    method: &str,
    params: Value,
    timeout: Duration,
) -> Result<Value, CallError> {
    let io = |what| super::control::io(path, what);
    let mut s = UnixStream::connect(path).map_err(io("connect"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(io("set timeout"))?;
    let req = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    s.write_all(format!("{req}\n").as_bytes())
        .map_err(io("send"))?;
    let mut line = String::new();
    BufReader::new(&s)
        .read_line(&mut line)
        .map_err(io("read"))?;
    let answer = |reason: String| ControlError::Answer {
        path: path.into(),
        reason,
    };
    let mut v: Value = serde_json::from_str(&line)
        .map_err(|e| answer(format!("the daemon's answer is not JSON: {e}")))?;
    if let Some(e) = v.get("error") {
        let e: RpcError = serde_json::from_value(e.clone())
            .map_err(|e| answer(format!("unexpected error format: {e}")))?;
        return Err(CallError::Refused(e));
    }
    match v.get_mut("result") {
        Some(r) => Ok(r.take()),
        None => Err(answer("the daemon's answer has no result".into()).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_and_bad_ones_named() {
        let r = Request::parse(r#"{"jsonrpc":"2.0","id":7,"method":"status"}"#).unwrap();
        assert_eq!((r.method.as_str(), r.id.as_i64()), ("status", Some(7)));
        assert!(r.params.is_null());
        let (id, e) = Request::parse("status?").unwrap_err();
        assert_eq!((id, e.code), (Value::Null, PARSE_ERROR));
        let (id, e) =
            Request::parse(r#"{"jsonrpc":"1.0","id":"x","method":"status"}"#).unwrap_err();
        assert_eq!((id.as_str(), e.code), (Some("x"), INVALID_REQUEST));
        let (_, e) = Request::parse(r#"{"jsonrpc":"2.0","id":1}"#).unwrap_err();
        assert_eq!(e.code, INVALID_REQUEST);
    }

    #[test]
    fn params_are_checked_by_name() {
        let p: NamespaceRef = params(
            "namespace_del",
            serde_json::json!({"subsystem": "nqn.a", "nsid": 3}),
        )
        .unwrap();
        assert_eq!(p.nsid, 3);
        let e = params::<NamespaceRef>("namespace_del", serde_json::json!({"subsystem": "nqn.a"}))
            .unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        assert!(e.message.contains("nsid"), "{}", e.message);
        let e = params::<ControllerRef>(
            "controller_disconnect",
            serde_json::json!({"subsystem": "nqn.a", "cntlid": 1, "force": true}),
        )
        .unwrap_err();
        assert!(e.message.contains("force"), "{}", e.message);
        let e = params::<ControllerRef>("controller_disconnect", Value::Null).unwrap_err();
        assert!(e.message.contains("subsystem"), "{}", e.message);
    }

    #[test]
    fn responses_carry_the_id() {
        let ok = response(serde_json::json!(5), Ok(serde_json::json!({"a": 1})));
        assert_eq!(ok, r#"{"id":5,"jsonrpc":"2.0","result":{"a":1}}"#);
        let err = response(Value::Null, Err(RpcError::new(REFUSED, "no")));
        assert_eq!(
            err,
            r#"{"error":{"code":-32000,"message":"no"},"id":null,"jsonrpc":"2.0"}"#
        );
    }
}
