//! A thread whose memory other parties still use must not unwind: a worker's
//! buffers are registered with the RDMA device and io_uring, and librbd may
//! hold pointers into them for operations in flight. Unwinding would drop
//! them while the device or the kernel can still write there, so a panic on
//! such a thread aborts the process instead (systemd restarts it, the hosts
//! reconnect and resend what they had in flight).

/// Aborts the process if dropped while its thread unwinds from a panic. A
/// function's locals are dropped before its arguments: a guard held by a
/// function that takes the shared memory by value (`Worker::run(self)`)
/// aborts before that memory is dropped.
#[derive(Debug)]
pub struct AbortOnUnwind(pub &'static str);

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(
                thread = self.0,
                "panicked: aborting, so that no memory the RDMA device, io_uring or librbd may still write is freed"
            );
            eprintln!("nvmf-target: the {} thread panicked: aborting", self.0);
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    const CHILD: &str = "NVMF_TARGET_ABORT_TEST_CHILD";

    /// In a child process (this test binary, run again): panics holding the
    /// guard. Does nothing in the normal test run.
    #[test]
    fn child_panics_holding_the_guard() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        struct Memory;
        impl Drop for Memory {
            fn drop(&mut self) {
                // Reached only if the guard let the thread unwind.
                std::process::exit(42);
            }
        }
        fn run(_memory: Memory) {
            let _guard = AbortOnUnwind("test");
            panic!("on purpose");
        }
        run(Memory);
    }

    #[test]
    fn a_panic_aborts_before_the_memory_it_guards_is_dropped() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "base::abort::tests::child_panics_holding_the_guard",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        assert_eq!(
            out.status.signal(),
            Some(nix::sys::signal::Signal::SIGABRT as i32),
            "{:?}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
