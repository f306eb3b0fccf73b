//! Log filters as operators write them. The core's modules live in the
//! `nvmf_core` crate, whose events carry `nvmf_core::...` targets; a filter
//! written for the daemon (`nvmf_target=debug`, or
//! `nvmf_target::queue::timers=debug` from before the core was a crate of
//! its own) reaches them too.

/// The core's modules, as they were named under `nvmf_target`.
const CORE_MODULES: [&str; 10] = [
    "backend",
    "base",
    "command",
    "counters",
    "loopback",
    "model",
    "queue",
    "request",
    "reservation",
    "worker",
];

/// Modules that moved within the daemon or into the core, by their old
/// path under `nvmf_target::` and their new target (a longer path before
/// its parent).
const MOVED: [(&str, &str); 10] = [
    ("engine::request", "nvmf_core::request::lifecycle"),
    ("engine::admission", "nvmf_core::base::admission"),
    ("engine::aligned", "nvmf_core::base::aligned"),
    ("engine::log_limit", "nvmf_core::base::log_limit"),
    ("engine::peer_rate", "nvmf_core::base::peer_rate"),
    ("engine::liveness", "nvmf_core::queue::liveness"),
    ("engine", "nvmf_core::request"),
    ("backend::rbd", "nvmf_target::rbd"),
    ("reservation::cluster", "nvmf_target::rbd::cluster"),
    ("transport::loopback", "nvmf_core::loopback"),
];

/// `spec` (comma-separated `tracing` directives) with every directive for
/// the whole daemon also given to the core, every one for a core module
/// under `nvmf_target::` given to it under `nvmf_core::`, and every one for
/// a module that moved given to its new path.
pub fn with_core(spec: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    for d in spec.split(',') {
        let Some(rest) = d.trim().strip_prefix("nvmf_target") else {
            out.push(d.to_string());
            continue;
        };
        let moved = MOVED.iter().find_map(|(old, new)| {
            let tail = rest.strip_prefix("::")?.strip_prefix(old)?;
            (tail.is_empty() || tail.starts_with([':', '=', '['])).then(|| format!("{new}{tail}"))
        });
        if let Some(m) = moved {
            out.push(m);
            continue;
        }
        if rest.is_empty() || rest.starts_with(['=', '[']) {
            out.push(d.to_string());
            out.push(format!("nvmf_core{rest}"));
            continue;
        }
        let core = rest.strip_prefix("::").is_some_and(|path| {
            let module = path.split([':', '=', '[']).next().unwrap_or("");
            CORE_MODULES.contains(&module)
        });
        out.push(if core {
            format!("nvmf_core{rest}")
        } else {
            d.to_string()
        });
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::with_core;

    #[test]
    fn a_filter_for_the_daemon_reaches_the_core() {
        assert_eq!(with_core("info"), "info");
        assert_eq!(
            with_core("info,nvmf_target=debug"),
            "info,nvmf_target=debug,nvmf_core=debug"
        );
        assert_eq!(with_core("nvmf_target"), "nvmf_target,nvmf_core");
        assert_eq!(
            with_core("info,nvmf_target::queue::timers=debug,nvmf_target::transport::tcp=trace"),
            "info,nvmf_core::queue::timers=debug,nvmf_target::transport::tcp=trace"
        );
        assert_eq!(
            with_core("nvmf_target::model=warn"),
            "nvmf_core::model=warn"
        );
        assert_eq!(
            with_core("nvmf_target_other=debug"),
            "nvmf_target_other=debug",
            "another crate's name"
        );
        assert_eq!(
            with_core("nvmf_core::queue=debug"),
            "nvmf_core::queue=debug"
        );
        assert_eq!(
            with_core("nvmf_target::backend::rbd::owner=debug,nvmf_target::backend=info"),
            "nvmf_target::rbd::owner=debug,nvmf_core::backend=info"
        );
        assert_eq!(
            with_core("nvmf_target::reservation::cluster=trace"),
            "nvmf_target::rbd::cluster=trace"
        );
        assert_eq!(
            with_core("nvmf_target::transport::loopback=debug,nvmf_target::transport=info"),
            "nvmf_core::loopback=debug,nvmf_target::transport=info"
        );
        assert_eq!(
            with_core("nvmf_target::engine::admission=debug,nvmf_target::engine=info"),
            "nvmf_core::base::admission=debug,nvmf_core::request=info"
        );
        assert_eq!(
            with_core("nvmf_target::engine::request=trace,nvmf_target::engines=info"),
            "nvmf_core::request::lifecycle=trace,nvmf_target::engines=info"
        );
    }
}
