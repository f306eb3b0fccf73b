//! `worker_cpus`: the CPUs the workers are pinned to, one worker per CPU,
//! written as in `taskset -c`, cgroups' `cpuset.cpus` or systemd's
//! `CPUAffinity=` (`"2-3,6"`). Pinned workers that also poll without pause
//! (`poll_spin_us`) are SPDK's layout: a core given to the target for the
//! IOPS it buys (see docs/engine.md).

use std::fmt;

/// The highest CPU number a list may name (the kernel's `CPU_SETSIZE` for
/// glibc's `cpu_set_t`).
pub const MAX_CPU: usize = 1023;

/// CPUs, in the order the workers take them (worker `i` on the `i`-th);
/// empty: the workers are not pinned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuList(Vec<usize>);

impl CpuList {
    /// Parses a CPU list: numbers and ranges `a-b`, separated by commas
    /// (spaces allowed); each CPU at most once; the empty text is no list.
    pub fn parse(text: &str) -> Result<CpuList, String> {
        let mut cpus = Vec::new();
        for part in text.split(',').map(str::trim) {
            if part.is_empty() {
                if text.trim().is_empty() {
                    break;
                }
                return Err(format!("{text:?}: an empty entry (write e.g. \"2-3,6\")"));
            }
            let num = |s: &str| {
                let s = s.trim();
                Some(s)
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|&c| c <= MAX_CPU)
                    .ok_or_else(|| format!("{s:?} is not a CPU number (0..={MAX_CPU})"))
            };
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => (num(part)?, num(part)?),
            };
            if lo > hi {
                return Err(format!("{part:?}: a range runs from low to high"));
            }
            cpus.extend(lo..=hi);
        }
        CpuList::of(cpus)
    }

    /// The CPUs given, in their order: each at most [`MAX_CPU`], each once.
    pub fn of(cpus: impl IntoIterator<Item = usize>) -> Result<CpuList, String> {
        let mut list = Vec::new();
        for c in cpus {
            if c > MAX_CPU {
                return Err(format!("\"{c}\" is not a CPU number (0..={MAX_CPU})"));
            }
            if list.contains(&c) {
                return Err(format!("CPU {c} is listed twice"));
            }
            list.push(c);
        }
        Ok(CpuList(list))
    }

    /// No CPU listed: the workers are not pinned.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many CPUs.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The CPU of worker `index` (none without a list).
    pub fn of_worker(&self, index: usize) -> Option<usize> {
        self.0.get(index).copied()
    }

    /// The CPUs listed that `allowed` does not have.
    pub fn outside(&self, allowed: &dyn Fn(usize) -> bool) -> Vec<usize> {
        self.0.iter().copied().filter(|&c| !allowed(c)).collect()
    }

    /// Why this list cannot be served here: CPUs the calling thread may not
    /// run on (offline, or left out by systemd's `CPUAffinity=`, a cgroup's
    /// `cpuset`, or `taskset`), or the affinity mask unreadable. `None`: all
    /// are allowed (or none is listed).
    pub fn unavailable(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mask = match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
            Ok(m) => m,
            Err(e) => return Some(format!("the CPUs this process may run on are unknown: {e}")),
        };
        let outside = self.outside(&|c| mask.is_set(c).unwrap_or(false));
        (!outside.is_empty()).then(|| {
            format!(
                "CPU(s) {} are not among the CPUs this process may run on (offline, or left \
                 out by systemd's CPUAffinity=, a cgroup's cpuset or taskset)",
                CpuList(outside)
            )
        })
    }
}

impl fmt::Display for CpuList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "none");
        }
        let s: Vec<String> = self.0.iter().map(|c| c.to_string()).collect();
        write!(f, "{}", s.join(","))
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_this_thread(cpu: usize) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(t: &str) -> Vec<usize> {
        CpuList::parse(t).unwrap().0
    }

    #[test]
    fn lists_and_ranges_in_order() {
        assert_eq!(list(""), Vec::<usize>::new());
        assert_eq!(list("  "), Vec::<usize>::new());
        assert_eq!(list("3"), [3]);
        assert_eq!(list("2-3,6"), [2, 3, 6]);
        assert_eq!(list(" 6, 0 - 1 "), [6, 0, 1]);
        assert_eq!(list("5-5"), [5]);
        assert_eq!(list("1023"), [1023]);
        assert_eq!(CpuList::parse("2-3,6").unwrap().to_string(), "2,3,6");
        assert_eq!(CpuList::default().to_string(), "none");
        let l = CpuList::parse("4,1").unwrap();
        assert_eq!(
            (l.len(), l.of_worker(0), l.of_worker(1), l.of_worker(2)),
            (2, Some(4), Some(1), None)
        );
    }

    #[test]
    fn bad_lists_say_why() {
        let why = |t: &str| CpuList::parse(t).unwrap_err();
        assert!(why("3-1").contains("low to high"), "{}", why("3-1"));
        assert!(why("1,1").contains("CPU 1 is listed twice"));
        assert!(why("0-2,2").contains("CPU 2 is listed twice"));
        assert!(why("1,,2").contains("empty entry"));
        assert!(why("1,").contains("empty entry"));
        assert!(why("x").contains("not a CPU number"));
        assert!(why("-1").contains("not a CPU number"));
        assert!(why("+3").contains("not a CPU number"));
        assert!(why("1-").contains("not a CPU number"));
        assert!(why("1024").contains("0..=1023"));
        assert!(why("0-1024").contains("0..=1023"));
        assert!(why("5000").contains("0..=1023"));
    }

    #[test]
    fn cpus_outside_the_allowed_ones_are_named() {
        let l = CpuList::parse("0-3").unwrap();
        assert_eq!(l.outside(&|c| c < 2), [2, 3]);
        assert!(l.outside(&|_| true).is_empty());
        assert_eq!(CpuList::default().unavailable(), None);
        let why = CpuList::parse("1023").unwrap().unavailable().unwrap();
        assert!(why.starts_with("CPU(s) 1023 are not among"), "{why}");
    }

    #[test]
    fn every_cpu_number_fits_the_kernel_mask() {
        assert!(MAX_CPU < nix::sched::CpuSet::count());
    }
}
