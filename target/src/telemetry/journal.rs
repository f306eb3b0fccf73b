//! Log lines for systemd's journal. Under systemd (stderr is the journal)
//! each event goes over the journal's native protocol ([`ToJournal`]):
//! `MESSAGE` is the usual `tracing` line, fields and all (`journalctl -o cat`
//! shows it whole), `PRIORITY` its level's, and the event's fields are
//! journal fields of their own, named as the metric labels are (`SUBSYSTEM`,
//! `HOST`, `PEER`, `NSID`, `CNTLID`; the others uppercased), so
//! `journalctl SUBSYSTEM=nqn...` finds a subsystem's lines; the events an
//! operator looks for carry a `MESSAGE_ID` ([`ids`]). Where the journal is
//! not reachable, a line goes to stderr with its syslog priority first
//! (`<3>` error, `<4>` warning, `<6>` info, `<7>` debug and trace), which
//! journald reads from a service's stderr (`SyslogLevelPrefix=`) and strips.

use std::fmt;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The syslog priority of a level.
pub fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// A formatter that prefixes another's lines with their priority.
#[derive(Debug, Clone)]
pub struct WithPriority<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for WithPriority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        write!(writer, "<{}>", priority(event.metadata().level()))?;
        self.0.format_event(ctx, writer, event)
    }
}

/// A formatter that keeps another's event on one line: a line break or
/// another control character inside it (a peer's NQN may hold any) is
/// written escaped (`\x0a`), so no value forges a line of its own in the
/// journal. Escape sequences in values are escaped by the inner formatter.
#[derive(Debug, Clone)]
pub struct OneLine<F>(pub F);

impl<S, N, F> FormatEvent<S, N> for OneLine<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let body = line.strip_suffix('\n').unwrap_or(&line);
        write_one_line(&mut writer, body)?;
        writer.write_char('\n')
    }
}

/// Writes `s` with its control characters other than tab and escape (which
/// colours use) escaped.
fn write_one_line(w: &mut impl fmt::Write, s: &str) -> fmt::Result {
    for ch in s.chars() {
        if ch.is_control() && ch != '\t' && ch != '\x1b' {
            write!(w, "\\x{:02x}", ch as u32)?;
        } else {
            w.write_char(ch)?;
        }
    }
    Ok(())
}

pub use crate::base::message_ids as ids;

/// The journal field an event field goes to: the metric label's name for
/// the ones metrics label by, else the name uppercased (journal field names
/// are `A-Z`, `0-9` and `_`, not first). `None`: the message itself.
pub fn field_name(name: &str) -> Option<String> {
    let named = match name {
        "message" => return None,
        "subsys" | "subsystem" | "subnqn" => "SUBSYSTEM",
        "host" | "hostnqn" | "host_nqn" => "HOST",
        "peer" => "PEER",
        "nsid" => "NSID",
        "cntlid" => "CNTLID",
        "message_id" => "MESSAGE_ID",
        other => {
            let mut f: String = other
                .chars()
                .map(|c| match c.to_ascii_uppercase() {
                    c @ ('A'..='Z' | '0'..='9') => c,
                    _ => '_',
                })
                .collect();
            if !f.starts_with(|c: char| c.is_ascii_uppercase()) {
                f.insert_str(0, "F_");
            }
            // Nor a field journald reserves for itself or its protocol.
            if matches!(f.as_str(), "PRIORITY" | "SYSLOG_IDENTIFIER" | "SYSLOG_PID")
                || f.starts_with("CODE_")
            {
                f.insert_str(0, "F_");
            }
            return Some(f);
        }
    };
    Some(named.to_string())
}

/// An event's fields, as journal fields.
#[derive(Default)]
struct Fields(Vec<(String, String)>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if let Some(k) = field_name(field.name()) {
            self.0.push((k, value.to_string()));
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if let Some(k) = field_name(field.name()) {
            self.0.push((k, format!("{value:?}")));
        }
    }
}

/// Sends one entry to the journal: priority, message, fields.
pub type SendFn = fn(u8, &str, &[(String, String)]) -> std::io::Result<()>;

/// Sends an entry over the journal's native protocol.
pub fn native(priority: u8, message: &str, fields: &[(String, String)]) -> std::io::Result<()> {
    use libsystemd::logging::Priority;
    let p = match priority {
        3 => Priority::Error,
        4 => Priority::Warning,
        6 => Priority::Info,
        _ => Priority::Debug,
    };
    let ident = [("SYSLOG_IDENTIFIER", "nvmf-target")];
    libsystemd::logging::journal_send(
        p,
        message,
        ident
            .into_iter()
            .chain(fields.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
    )
    .map_err(std::io::Error::other)
}

/// A formatter that sends each event to the journal (see the module) and
/// writes nothing itself, unless the journal refuses it: then the line goes
/// to stderr, with its priority first.
#[derive(Debug, Clone)]
pub struct ToJournal<F> {
    /// Makes the line (`MESSAGE`).
    pub inner: F,
    /// Where entries go ([`native`]; a test's list).
    pub send: SendFn,
}

impl<S, N, F> FormatEvent<S, N> for ToJournal<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let mut fields = Fields::default();
        event.record(&mut fields);
        let prio = priority(event.metadata().level());
        let mut message = line.strip_suffix('\n').unwrap_or(&line).to_string();
        // The id is a field of its own; the line reads as without it.
        if let Some((_, id)) = fields.0.iter().find(|(k, _)| k == "MESSAGE_ID") {
            message = message.replace(&format!(" message_id={id}"), "");
        }
        match (self.send)(prio, &message, &fields.0) {
            Ok(()) => Ok(()),
            Err(_) => {
                write!(writer, "<{prio}>{message}")?;
                writer.write_char('\n')
            }
        }
    }
}

/// Whether stderr is the journal: `JOURNAL_STREAM` (set by systemd for a
/// service whose output goes to the journal) names stderr's device and
/// inode. A child that inherited the variable but writes elsewhere does not
/// count.
pub fn stderr_is_journal() -> bool {
    use std::os::fd::AsRawFd;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    match nix::sys::stat::fstat(std::io::stderr().as_raw_fd()) {
        Ok(st) => dev.parse() == Ok(st.st_dev) && ino.parse() == Ok(st.st_ino),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    #[test]
    fn each_line_carries_its_priority_and_the_fields_stay() {
        let buf = Buf::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_ansi(false)
            .without_time()
            .with_max_level(Level::DEBUG)
            .event_format(WithPriority(
                tracing_subscriber::fmt::format()
                    .with_ansi(false)
                    .without_time(),
            ))
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::error!(error = "no such file", "reload refused");
            tracing::warn!("careful");
            tracing::info!(nsid = 3, "namespace ready");
            tracing::debug!("detail");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 4, "{out}");
        assert!(
            lines[0].starts_with("<3>") && lines[0].contains("error=\"no such file\""),
            "{out}"
        );
        assert!(lines[1].starts_with("<4>"), "{out}");
        assert!(
            lines[2].starts_with("<6>") && lines[2].contains("nsid=3"),
            "{out}"
        );
        assert!(lines[3].starts_with("<7>"), "{out}");
    }

    /// A peer's NQN with a line break in it forges no journal line.
    #[test]
    fn a_value_with_a_line_break_stays_on_its_line() {
        let buf = Buf::default();
        let sub = tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_ansi(false)
            .with_max_level(Level::DEBUG)
            .event_format(OneLine(WithPriority(
                tracing_subscriber::fmt::format()
                    .with_ansi(false)
                    .without_time(),
            )))
            .finish();
        let nqn = "nqn.evil\n<3>ERROR forged: host authenticated\r";
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(host = %nqn, "connect refused");
            tracing::info!(host = ?nqn, "second");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines[0].starts_with("<4>"), "{out}");
        assert!(lines[0].contains("nqn.evil\\x0a<3>ERROR forged"), "{out}");
        assert!(!out.contains('\r'), "{out}");
    }

    type Entry = (u8, String, Vec<(String, String)>);
    static SENT: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

    fn keep(p: u8, m: &str, f: &[(String, String)]) -> std::io::Result<()> {
        SENT.lock().unwrap().push((p, m.to_string(), f.to_vec()));
        Ok(())
    }

    fn refuse(_: u8, _: &str, _: &[(String, String)]) -> std::io::Result<()> {
        Err(std::io::Error::other("no journal"))
    }

    fn journal_sub(buf: &Buf, send: SendFn) -> impl Subscriber {
        tracing_subscriber::fmt()
            .with_writer(buf.clone())
            .with_ansi(false)
            .with_max_level(Level::DEBUG)
            .event_format(ToJournal {
                inner: OneLine(
                    tracing_subscriber::fmt::format()
                        .with_ansi(false)
                        .without_time(),
                ),
                send,
            })
            .finish()
    }

    #[test]
    fn events_reach_the_journal_with_their_fields_named_as_the_labels() {
        let buf = Buf::default();
        tracing::subscriber::with_default(journal_sub(&buf, keep), || {
            tracing::warn!(message_id = %ids::AUTH_FAILED, cntlid = 3, qid = 0u16,
                host = %"nqn.h\nx", subsys = %"nqn.s", reason = "bad_key",
                "authentication failed");
            tracing::info!(peer = ?"10.0.0.1:4420", nsid = 2, "namespace ready");
        });
        let sent = std::mem::take(&mut *SENT.lock().unwrap());
        assert!(buf.0.lock().unwrap().is_empty(), "nothing on stderr");
        assert_eq!(sent.len(), 2, "{sent:?}");
        let (p, m, f) = &sent[0];
        assert_eq!(*p, 4);
        assert!(m.contains("authentication failed"), "{m}");
        assert!(m.contains("host=nqn.h\\x0ax subsys=nqn.s"), "one line: {m}");
        assert!(!m.contains("message_id"), "{m}");
        let get = |f: &[(String, String)], k: &str| {
            f.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(get(f, "MESSAGE_ID").as_deref(), Some(ids::AUTH_FAILED));
        assert_eq!(
            get(f, "HOST").as_deref(),
            Some("nqn.h\nx"),
            "the value as it is"
        );
        assert_eq!(get(f, "SUBSYSTEM").as_deref(), Some("nqn.s"));
        assert_eq!(get(f, "CNTLID").as_deref(), Some("3"));
        assert_eq!(get(f, "QID").as_deref(), Some("0"));
        assert_eq!(get(f, "REASON").as_deref(), Some("bad_key"));
        assert_eq!(get(f, "MESSAGE"), None);
        let (p, _, f) = &sent[1];
        assert_eq!(*p, 6);
        assert_eq!(get(f, "PEER").as_deref(), Some("\"10.0.0.1:4420\""));
        assert_eq!(get(f, "NSID").as_deref(), Some("2"));
        // No journal: the line goes to stderr with its priority.
        tracing::subscriber::with_default(journal_sub(&buf, refuse), || {
            tracing::error!(message_id = %ids::FENCED, "fenced");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(
            out.starts_with("<3>") && out.contains("fenced") && out.ends_with('\n'),
            "{out}"
        );
        assert!(!out.contains("message_id"), "{out}");
    }

    #[test]
    fn field_names_fit_the_journal_s_rules() {
        assert_eq!(field_name("subsys").as_deref(), Some("SUBSYSTEM"));
        assert_eq!(field_name("message"), None);
        assert_eq!(field_name("old_blocks").as_deref(), Some("OLD_BLOCKS"));
        assert_eq!(field_name("r#type").as_deref(), Some("R_TYPE"));
        assert_eq!(field_name("_x").as_deref(), Some("F__X"));
        assert_eq!(field_name("9").as_deref(), Some("F_9"));
        assert_eq!(field_name("priority").as_deref(), Some("F_PRIORITY"));
        assert_eq!(field_name("code_line").as_deref(), Some("F_CODE_LINE"));
    }

    #[test]
    fn a_journal_stream_elsewhere_is_not_stderr() {
        // The test's stderr is not the journal whatever the variable says
        // (unless it really is, as when the tests run under a service).
        if std::env::var_os("JOURNAL_STREAM").is_none() {
            assert!(!stderr_is_journal());
        }
    }
}
