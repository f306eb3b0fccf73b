//! JSON access with paths: typed getters whose errors name the JSON path.

use serde_json::{Map, Value};

use super::ImportError;

pub(super) type Obj = Map<String, Value>;

pub(super) struct Cx<'a> {
    pub(super) src: &'a str,
}

/// `path.key`, or `key` at the top level.
pub(super) fn at(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A field, `None` when missing or null.
pub(super) fn get<'v>(o: &'v Obj, key: &str) -> Option<&'v Value> {
    o.get(key).filter(|v| !v.is_null())
}

impl Cx<'_> {
    pub(super) fn err(&self, path: &str, reason: impl Into<String>) -> ImportError {
        ImportError::Field {
            source_name: self.src.to_string(),
            path: if path.is_empty() {
                "top level".into()
            } else {
                path.to_string()
            },
            reason: reason.into(),
        }
    }

    pub(super) fn expected(&self, path: &str, what: &str, v: &Value) -> ImportError {
        self.err(path, format!("expected {what}, found {}", kind(v)))
    }

    pub(super) fn object<'v>(&self, v: &'v Value, path: &str) -> Result<&'v Obj, ImportError> {
        v.as_object()
            .ok_or_else(|| self.expected(path, "an object", v))
    }

    pub(super) fn opt_object<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<&'v Obj>, ImportError> {
        get(o, key)
            .map(|v| self.object(v, &at(path, key)))
            .transpose()
    }

    /// An array; missing means empty.
    pub(super) fn array<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<&'v [Value], ImportError> {
        match get(o, key) {
            None => Ok(&[]),
            Some(Value::Array(a)) => Ok(a),
            Some(v) => Err(self.expected(&at(path, key), "an array", v)),
        }
    }

    /// An array of objects, each with its path.
    pub(super) fn objects<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Vec<(String, &'v Obj)>, ImportError> {
        let base = at(path, key);
        self.array(o, path, key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let p = format!("{base}[{i}]");
                let obj = self.object(v, &p)?;
                Ok((p, obj))
            })
            .collect()
    }

    /// An array of strings; missing means empty.
    pub(super) fn strings<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Vec<&'v str>, ImportError> {
        let base = at(path, key);
        self.array(o, path, key)?
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .ok_or_else(|| self.expected(&format!("{base}[{i}]"), "a string", v))
            })
            .collect()
    }

    pub(super) fn opt_string<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<&'v str>, ImportError> {
        match get(o, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.expected(&at(path, key), "a string", v)),
        }
    }

    pub(super) fn req_string<'v>(
        &self,
        o: &'v Obj,
        path: &str,
        key: &str,
    ) -> Result<&'v str, ImportError> {
        self.opt_string(o, path, key)?
            .ok_or_else(|| self.err(&at(path, key), "is required"))
    }

    /// An attribute value: nvmetcli writes strings; numbers and booleans (as
    /// hand-written files may have) are taken as their text.
    pub(super) fn text_of(&self, v: &Value, path: &str) -> Result<String, ImportError> {
        match v {
            Value::String(s) => Ok(s.trim().to_string()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(if *b { "1" } else { "0" }.to_string()),
            _ => Err(self.expected(path, "a string", v)),
        }
    }

    pub(super) fn opt_text(
        &self,
        o: &Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<String>, ImportError> {
        get(o, key)
            .map(|v| self.text_of(v, &at(path, key)))
            .transpose()
    }

    /// A non-negative integer, or a string holding one (`nvmetcli restore`
    /// applies `int()`).
    pub(super) fn opt_int(
        &self,
        o: &Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<u64>, ImportError> {
        let p = at(path, key);
        match get(o, key) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.err(&p, format!("{n} is not a non-negative integer"))),
            Some(Value::String(s)) => {
                s.trim().parse().map(Some).map_err(|_| {
                    self.err(&p, format!("'{}' is not a non-negative integer", safe(s)))
                })
            }
            Some(v) => Err(self.expected(&p, "an integer", v)),
        }
    }

    /// A flag: 0/1 (integer or string, as nvmet writes them), a boolean, or
    /// what the kernel's `kstrtobool` accepts (y/n, on/off).
    pub(super) fn opt_flag(
        &self,
        o: &Obj,
        path: &str,
        key: &str,
    ) -> Result<Option<bool>, ImportError> {
        let p = at(path, key);
        let Some(v) = get(o, key) else {
            return Ok(None);
        };
        let t = match v {
            Value::Bool(b) => return Ok(Some(*b)),
            Value::Number(n) => return Ok(Some(n.as_f64() != Some(0.0))),
            Value::String(s) => s.trim().to_ascii_lowercase(),
            _ => return Err(self.expected(&p, "0 or 1", v)),
        };
        match t.as_str() {
            "1" | "y" | "yes" | "on" | "true" => Ok(Some(true)),
            "0" | "n" | "no" | "off" | "false" => Ok(Some(false)),
            _ => Err(self.err(&p, format!("'{}' is not 0 or 1", safe(&t)))),
        }
    }
}

/// Control characters escaped, for notes (the text comes from the file).
pub(super) fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}
