//! Log lines for systemd's journal: each line starts with the syslog
//! priority of its level (`<3>` error, `<4>` warning, `<6>` info, `<7>`
//! debug and trace), which journald reads from a service's stderr
//! (`SyslogLevelPrefix=`, on by default) and strips, so `journalctl -p err`
//! finds the errors. The line itself is the usual `tracing` line, fields
//! and all (`journalctl -o cat` shows it whole).

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

    #[test]
    fn a_journal_stream_elsewhere_is_not_stderr() {
        // The test's stderr is not the journal whatever the variable says
        // (unless it really is, as when the tests run under a service).
        if std::env::var_os("JOURNAL_STREAM").is_none() {
            assert!(!stderr_is_journal());
        }
    }
}
