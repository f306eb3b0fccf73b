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
