//! File-descriptor helpers for the channels of verbs and RDMA-CM objects.

use std::os::fd::RawFd;

use crate::error::{Error, Result};

/// Waits up to `timeout_ms` (-1: forever) for `fd` to become readable.
/// Returns whether it did (an interrupted wait counts as not yet).
pub(crate) fn wait_readable(fd: RawFd, timeout_ms: i32, call: &'static str) -> Result<bool> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    // SAFETY: the callers pass the descriptor of a channel they own and keep
    // open for the call.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    let t = if timeout_ms < 0 {
        PollTimeout::NONE
    } else {
        PollTimeout::try_from(timeout_ms).unwrap_or(PollTimeout::MAX)
    };
    match poll(&mut fds, t) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(Error::Os {
            call,
            source: e.into(),
        }),
    }
}

/// Drains a descriptor that several threads may read: sets it non-blocking,
/// then calls `read_one` while `fd` polls readable, until it returns `None`.
/// `read_one` must read `fd` itself (a blocking read would hang this thread
/// when another reader takes the data between the poll and the read; on the
/// non-blocking descriptor it fails at once with EAGAIN and returns `None`).
pub(crate) fn drain_shared<T>(
    fd: RawFd,
    call: &'static str,
    mut read_one: impl FnMut() -> Option<T>,
) -> Result<Vec<T>> {
    set_nonblocking(fd)?;
    let mut out = Vec::new();
    while wait_readable(fd, 0, call)? {
        match read_one() {
            Some(item) => out.push(item),
            None => break,
        }
    }
    Ok(out)
}

/// Sets O_NONBLOCK on `fd` (a descriptor a verbs or RDMA-CM object owns).
pub(crate) fn set_nonblocking(fd: RawFd) -> Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let os = |e: nix::errno::Errno| Error::Os {
        call: "fcntl(O_NONBLOCK)",
        source: e.into(),
    };
    let fl = OFlag::from_bits_retain(fcntl(fd, FcntlArg::F_GETFL).map_err(os)?);
    fcntl(fd, FcntlArg::F_SETFL(fl | OFlag::O_NONBLOCK)).map_err(os)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Two readers share one descriptor: the poll finds a byte, the other
    /// reader takes it before this one reads. The drain must end, not block
    /// (a worker draining a device's async events while another worker does
    /// the same). Fails (times out) if `drain_shared` leaves the descriptor
    /// blocking.
    #[test]
    #[cfg_attr(miri, ignore = "pipe and poll")]
    fn drain_ends_when_another_reader_took_the_data() {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, b"x").unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            let fd = r.as_raw_fd();
            let mut first = true;
            let got = drain_shared(fd, "poll(test)", || {
                let mut b = [0u8; 1];
                if first {
                    first = false;
                    // The other reader wins the race for the only byte.
                    assert_eq!(nix::unistd::read(fd, &mut b), Ok(1));
                }
                nix::unistd::read(fd, &mut b).ok().filter(|&n| n == 1)
            });
            done_tx.send(got.map(|v| v.len())).unwrap();
            r
        });
        let got = done_rx.recv_timeout(Duration::from_secs(5));
        // On a hang, unblock the reader so the test process can finish.
        if let Err(mpsc::RecvTimeoutError::Timeout) = got {
            let _ = nix::unistd::write(&w, b"y");
        }
        reader.join().unwrap();
        assert_eq!(
            got.expect("drain blocked on a shared descriptor").unwrap(),
            0
        );
    }

    /// Every pending item is taken when no one else reads.
    #[test]
    #[cfg_attr(miri, ignore = "pipe and poll")]
    fn drain_takes_everything_pending() {
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, b"abc").unwrap();
        let fd = r.as_raw_fd();
        let got = drain_shared(fd, "poll(test)", || {
            let mut b = [0u8; 1];
            nix::unistd::read(fd, &mut b)
                .ok()
                .filter(|&n| n == 1)
                .map(|_| b[0])
        })
        .unwrap();
        assert_eq!(got, b"abc");
        drop(w);
    }
}
