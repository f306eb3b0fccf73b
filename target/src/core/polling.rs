//! How long a worker keeps polling after its last work before it sleeps.
//!
//! A sleeping worker is woken through the completion channel: the device's
//! completion handler, an event on the channel, the ring's poll, a wake-up
//! of the thread, often on another CPU. In the lab (soft-RoCE, 2 vCPUs
//! under TCG) a kernel trace put that at ~100 µs between a capsule's
//! completion and our response, against ~50 µs for nvmet, whose handler
//! runs on the CPU that took the packet. A host at queue depth 1 waits for
//! each answer before it sends the next command, so every I/O paid it. While
//! I/O flows and the target has at most one I/O in flight, a worker
//! therefore polls up to `light_load_spin_us` for the next capsule; under
//! load it does not (the CPUs are busy with the I/O itself, and polling
//! takes from them), nor after a keep-alive or a timer.

/// The polling window after a worker's last work, in microseconds:
/// `poll_spin_us` always, and at least `light_load_spin_us` while no more
/// than one I/O is in flight in the target and I/O is flowing (`io_recent`:
/// the target started one lately; a keep-alive or a timer is no reason to
/// poll, and an idle target must stay idle).
pub fn spin_window_us(
    poll_spin_us: u64,
    light_load_spin_us: u64,
    io_in_flight: usize,
    io_recent: bool,
) -> u64 {
    if io_recent && io_in_flight <= 1 {
        poll_spin_us.max(light_load_spin_us)
    } else {
        poll_spin_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_at_queue_depth_one_gets_the_light_load_window() {
        assert_eq!(spin_window_us(0, 300, 0, true), 300);
        assert_eq!(spin_window_us(0, 300, 1, true), 300);
        assert_eq!(spin_window_us(500, 300, 1, true), 500);
    }

    #[test]
    fn without_recent_io_a_keep_alive_or_timer_gets_no_window() {
        assert_eq!(spin_window_us(0, 300, 0, false), 0);
        assert_eq!(spin_window_us(50, 300, 0, false), 50);
    }

    #[test]
    fn under_load_only_the_configured_window() {
        assert_eq!(spin_window_us(0, 300, 2, true), 0);
        assert_eq!(spin_window_us(50, 300, 32, true), 50);
    }

    #[test]
    fn zero_turns_light_load_polling_off() {
        assert_eq!(spin_window_us(0, 0, 0, true), 0);
        assert_eq!(spin_window_us(50, 0, 1, true), 50);
    }
}
