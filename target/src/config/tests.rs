use super::*;

const GOOD: &str = r#"
[[listener]]
transport = "rdma"
address = "10.0.2.15"
port = 4420
[[subsystem]]
nqn = "nqn.2026-11.io.example:disk1"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1G"
[[subsystem]]
nqn = "nqn.2026-11.io.example:disk2"
hosts = ["nqn.2026-11.io.example:host1"]
[[subsystem.namespace]]
nsid = 3
backend = "null"
size = 1048576
block_size = 4096
"#;

#[test]
fn good_config() {
    let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
    assert_eq!(c.listeners[0].addr, "10.0.2.15:4420".parse().unwrap());
    assert_eq!(c.subsystems.len(), 2);
    assert_eq!(
        c.subsystems[0].namespaces[0].backend,
        BackendConfig::Null { size: 1 << 30 }
    );
    assert_eq!(c.subsystems[1].namespaces[0].nsid, 3);
    assert_eq!(c.subsystems[1].namespaces[0].block_size, Some(4096));
    assert!(!c.subsystems[1].allow_any_host);
}

/// Issue 38, 8: a subsystem no host may reach is valid (every other
/// target allows it; removing the last host is an emergency), with a
/// warning.
#[test]
fn a_subsystem_no_host_may_reach_is_a_warning() {
    let c = TargetConfig::from_toml(
        &GOOD.replace("hosts = [\"nqn.2026-11.io.example:host1\"]", ""),
        "t.toml",
    )
    .expect("valid");
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0].field, "subsystem[1].hosts");
    assert!(w[0].to_string().contains("no host may connect"), "{}", w[0]);
    assert!(TargetConfig::from_toml(GOOD, "t.toml")
        .unwrap()
        .warnings()
        .is_empty());
}

fn bad(text: &str, expect: &str) {
    let e = TargetConfig::from_toml(text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(expect),
        "error '{e}' does not contain '{expect}'"
    );
}

const LISTENER: &str = "[[listener]]\ntransport = \"rdma\"\naddress = \"10.0.2.15\"\nport = 4420\n[[subsystem]]\nnqn = \"nqn.2026-11.io.example:rbd\"\nallow_any_host = true\n";

#[test]
fn ana_and_cntlids() {
    let text = format!(
        "{LISTENER}cntlid_min = 100\ncntlid_max = 199\n[[subsystem.namespace]]\nbackend = \"null\"\nsize = \"1M\"\nana_group = 2\n"
    )
    .replace("port = 4420", "port = 4420\nana = { 1 = \"optimized\", 2 = \"non-optimized\" }");
    let c = TargetConfig::from_toml(&text, "t.toml").unwrap();
    let l = &c.listeners[0];
    assert_eq!(l.ana_state(1), AnaState::Optimized);
    assert_eq!(l.ana_state(2), AnaState::NonOptimized);
    assert_eq!(l.ana_state(3), AnaState::Optimized, "not listed");
    assert_eq!(c.subsystems[0].cntlid_range, (100, 199));
    assert_eq!(c.subsystems[0].namespaces[0].ana_group, 2);
    let d = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
    assert_eq!(d.subsystems[0].cntlid_range, (1, 0xFFEF));
    assert_eq!(d.subsystems[0].namespaces[0].ana_group, 1);
    bad(
        &text.replace("\"non-optimized\"", "\"standby\""),
        "listener[0].ana.2: 'standby' is not an ANA state",
    );
    bad(
        &text.replace("2 = \"non", "129 = \"non"),
        "listener[0].ana.129: ANA group ids are 1..=128",
    );
    bad(
        &text.replace("ana_group = 2", "ana_group = 0"),
        "namespace[0].ana_group: 0 is out of range 1..=128",
    );
    bad(
        &text.replace("cntlid_max = 199", "cntlid_max = 50"),
        "subsystem[0].cntlid_max: 50 is below cntlid_min 100",
    );
    bad(
        &text.replace("cntlid_max = 199", "cntlid_max = 65535"),
        "subsystem[0].cntlid_max: 65535 is out of range 1..=65519",
    );
}

#[test]
fn rbd_namespaces() {
    let c = TargetConfig::from_toml(
        &format!("{LISTENER}[[subsystem.namespace]]\nbackend = \"rbd\"\npool = \"rbd\"\nimage = \"disk1\"\n[[subsystem.namespace]]\nbackend = \"rbd\"\npool = \"fast\"\nimage = \"disk2\"\nclient = \"nvmf\"\nfencing = false\nceph_conf = \"/etc/hostname\"\nblock_size = 4096\n"),
        "t.toml",
    )
    .unwrap();
    let ns = &c.subsystems[0].namespaces;
    assert_eq!(
        ns[0].backend,
        BackendConfig::Rbd(RbdConfig {
            pool: "rbd".into(),
            image: "disk1".into(),
            ceph_conf: None,
            client: "admin".into(),
            fencing: true,
        })
    );
    assert_eq!(
        ns[1].backend,
        BackendConfig::Rbd(RbdConfig {
            pool: "fast".into(),
            image: "disk2".into(),
            ceph_conf: Some("/etc/hostname".into()),
            client: "nvmf".into(),
            fencing: false,
        })
    );
    assert_eq!(ns[1].block_size, Some(4096));
    let ns = |body: &str| format!("{LISTENER}[[subsystem.namespace]]\n{body}");
    bad(
        &ns("backend = \"rbd\"\nimage = \"d\""),
        "subsystem[0].namespace[0].pool: is required for backend = \"rbd\"",
    );
    bad(
        &ns("backend = \"rbd\"\npool = \"p\""),
        "namespace[0].image: is required",
    );
    bad(
        &ns("backend = \"rbd\"\npool = \"p\"\nimage = \"a/b\""),
        "namespace[0].image: \"a/b\" is not a valid Ceph name",
    );
    bad(
        &ns("backend = \"rbd\"\npool = \"p\"\nimage = \"i\"\npath = \"/dev/null\""),
        "namespace[0].path: an RBD namespace has no path",
    );
    bad(
        &ns("backend = \"rbd\"\npool = \"p\"\nimage = \"i\"\nsize = \"1G\""),
        "namespace[0].size: is the image's size",
    );
    bad(
        &ns("backend = \"null\"\nsize = \"1M\"\npool = \"p\""),
        "namespace[0].pool: is only for backend = \"rbd\"",
    );
    bad(
        &ns("backend = \"ceph\""),
        "use \"file\", \"null\" or \"rbd\"",
    );
}

#[test]
fn bad_configs_name_field_and_reason() {
    bad(
        &GOOD.replace("10.0.2.15", "ten"),
        "listener[0].address: 'ten' is not an IPv4",
    );
    bad(
        &GOOD.replace("transport = \"rdma\"", "transport = \"fc\""),
        "listener[0].transport: 'fc' is not supported",
    );
    bad(
        &GOOD.replace(
            "nqn.2026-11.io.example:disk2",
            "nqn.2026-11.io.example:disk1",
        ),
        "subsystem[1].nqn: 'nqn.2026-11.io.example:disk1' is defined twice",
    );
    bad(
        &GOOD.replace("nqn = \"nqn.2026-11.io.example:disk1\"", "nqn = \"disk1\""),
        "subsystem[0].nqn: 'disk1' must start with 'nqn.'",
    );
    bad(
        &GOOD.replace("size = \"1G\"", "size = \"1Q\""),
        "subsystem[0].namespace[0].size: '1Q' has an unknown unit",
    );
    bad(
        &GOOD.replace("size = \"1G\"", ""),
        "subsystem[0].namespace[0].size: is required",
    );
    bad(
        &GOOD.replace("nsid = 3", "nsid = 0"),
        "subsystem[1].namespace[0].nsid: 0 is out of range",
    );
    bad(
        &GOOD.replace("block_size = 4096", "block_size = 1000"),
        "block_size: 1000 must be a power of two",
    );
    bad(
        &GOOD.replace("backend = \"null\"\nsize = \"1G\"", "backend = \"iscsi\""),
        "subsystem[0].namespace[0].backend: 'iscsi' is unknown",
    );
    bad(
        &GOOD.replace("port = 4420", "port = 4420\nspeed = 1"),
        "unknown field `speed`",
    );
    bad(&GOOD.replace("port = 4420", "port = \"x\""), "t.toml");
    bad(
        &GOOD.replace(
            "nsid = 3",
            "nsid = 1\nbackend = \"null\"\nsize = 512\n[[subsystem.namespace]]\nnsid = 1",
        ),
        "subsystem[1].namespace[1].nsid: 1 is used twice",
    );
}

/// `[target]` holds the daemon's own keys and the engine's (spelled once,
/// in the core): both read from one table, an unknown key named with all.
#[test]
fn target_section_reads_own_and_engine_keys() {
    let text = format!(
        "[target]\nworkers = 2\nmax_pinned_memory = \"64M\"\nsrq = \"off\"\n\
         drain_on_stop_s = 30\nkey_rotation_grace_ms = 0\n{GOOD}"
    );
    let c = TargetConfig::from_toml(&text, "t.toml").unwrap();
    assert_eq!(c.engine.workers, 2);
    assert_eq!(c.engine.max_pinned_memory, 64 << 20);
    assert_eq!(c.engine.srq, super::SrqMode::Off);
    assert_eq!(c.engine.key_rotation_grace_ms, 0);
    assert_eq!(c.drain_on_stop, Some(std::time::Duration::from_secs(30)));
    assert_eq!(
        c.engine.max_pending_queues,
        super::EngineConfig::default().max_pending_queues
    );
    // CPU 0 only: the machine running the tests may have one.
    for (v, cpus) in [("0", "0"), ("[0]", "0"), ("\" 0-0 \"", "0")] {
        let c = TargetConfig::from_toml(&format!("[target]\nworker_cpus = {v}\n{GOOD}"), "t.toml")
            .unwrap();
        assert_eq!(c.engine.worker_cpus.to_string(), cpus, "{v}");
    }
    bad(
        &format!("[target]\nworker_cpus = \"1,1\"\n{GOOD}"),
        "target.worker_cpus: CPU 1 is listed twice",
    );
    bad(
        &format!("[target]\nworker_cpus = 1023\n{GOOD}"),
        "target.worker_cpus: CPU(s) 1023 are not among the CPUs this process may run on",
    );
    bad(
        &format!("[target]\nworker_cpus = 2.5\n{GOOD}"),
        "a CPU number, a list of them, or text as \"2-3,6\"",
    );
    bad(
        &format!("[target]\nworkerz = 2\n{GOOD}"),
        "target: unknown field `workerz`, expected one of poll_spin_us, state_dir, drain_on_stop_s, workers,",
    );
    bad(
        &format!("[target]\nworkers = \"many\"\n{GOOD}"),
        "target: invalid type",
    );
    bad(
        &format!("[target]\nmax_pinned_memory = \"lots\"\n{GOOD}"),
        "target.max_pinned_memory: ",
    );
}

#[test]
fn every_error_is_reported_in_one_run() {
    let text = r#"
[target]
workers = 0
srq_depth = 1
[[subsystem]]
nqn = "disk1"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1Q"
[[subsystem.namespace]]
nsid = 2
bogus = 1
[[subsystem]]
nqn = "nqn.2026-11.io.example:ok"
port = 1
[metrics]
address = "nowhere"
[controls]
socket = "x"
"#;
    let e = TargetConfig::from_toml(text, "t.toml").unwrap_err();
    let msg = e.to_string();
    let lines: Vec<&str> = msg.lines().collect();
    for want in [
        "t.toml: controls: unknown section",
        "t.toml: subsystem[0].nqn: 'disk1' must start with 'nqn.'",
        "t.toml: subsystem[0].namespace[0].size: '1Q' has an unknown unit",
        "t.toml: subsystem[0].namespace[1]: unknown field `bogus`",
        "t.toml: subsystem[1]: unknown field `port`",
        "t.toml: target.workers: 0 is out of range",
        "t.toml: target.srq_depth: 1 is out of range",
        "t.toml: metrics.address: 'nowhere' is not ADDRESS:PORT",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(want)),
            "no line starts with '{want}' in:\n{msg}"
        );
    }
    assert_eq!(e.count(), 8, "{msg}");
    assert_eq!(lines.len(), 8, "{msg}");
}

#[test]
fn a_zero_or_odd_block_size_is_one_error_not_a_panic() {
    for bs in ["0", "3", "8192"] {
        let text = GOOD.replace("block_size = 4096", &format!("block_size = {bs}"));
        let e = TargetConfig::from_toml(&text, "t.toml").unwrap_err();
        assert_eq!(e.count(), 1, "{e}");
        assert!(
            e.to_string()
                .contains(&format!("block_size: {bs} must be a power of two")),
            "{e}"
        );
    }
}

#[test]
fn a_bad_nqn_without_a_listener_is_named() {
    let text = GOOD
        .replace("nqn.2026-11.io.example:disk1", "disk1")
        .replace(
            "[[listener]]\ntransport = \"rdma\"\naddress = \"10.0.2.15\"\nport = 4420\n",
            "",
        );
    let e = TargetConfig::from_toml(&text, "t.toml")
        .unwrap_err()
        .to_string();
    assert!(!e.contains("listener"), "no listener is no error: {e}");
    assert!(e.contains("t.toml: subsystem[0].nqn: 'disk1'"), "{e}");
}

#[test]
fn control_socket() {
    let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
    assert_eq!(
        c.control_socket.as_deref(),
        Some(Path::new(DEFAULT_CONTROL_SOCKET))
    );
    let c =
        TargetConfig::from_toml(&format!("[control]\nenabled = false\n{GOOD}"), "t.toml").unwrap();
    assert_eq!(c.control_socket, None);
    let c = TargetConfig::from_toml(
        &format!("[control]\nsocket = \"/tmp/n.sock\"\n{GOOD}"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.control_socket.as_deref(), Some(Path::new("/tmp/n.sock")));
    let e = TargetConfig::from_toml(&format!("[control]\nsocket = \"n.sock\"\n{GOOD}"), "t.toml")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("control.socket: 'n.sock' must be an absolute path"),
        "{e}"
    );
}

#[test]
fn drain_on_stop() {
    let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
    assert_eq!(
        c.drain_on_stop,
        Some(std::time::Duration::from_secs(
            super::DEFAULT_DRAIN_ON_STOP_S
        ))
    );
    let with = |s: &str| format!("[target]\ndrain_on_stop_s = {s}\n{GOOD}");
    let c = TargetConfig::from_toml(&with("0"), "t.toml").unwrap();
    assert_eq!(c.drain_on_stop, None, "0: stop at once");
    let c = TargetConfig::from_toml(&with("45"), "t.toml").unwrap();
    assert_eq!(c.drain_on_stop, Some(std::time::Duration::from_secs(45)));
    bad(
        &with("3"),
        "target.drain_on_stop_s: 3 is not 0 (stop at once) or 5 to 110 seconds",
    );
    bad(&with("111"), "target.drain_on_stop_s: 111 is not 0");
}

#[test]
fn metrics_and_log_sections() {
    let c = TargetConfig::from_toml(GOOD, "t.toml").unwrap();
    assert_eq!(c.metrics_addr, Some("127.0.0.1:9469".parse().unwrap()));
    assert_eq!(c.log_level, "info");
    let c = TargetConfig::from_toml(
        &format!(
            "[metrics]\naddress = \"[::1]:9100\"\n[log]\nlevel = \"nvmf_target=debug\"\n{GOOD}"
        ),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.metrics_addr, Some("[::1]:9100".parse().unwrap()));
    assert_eq!(c.log_level, "nvmf_target=debug");
    let c =
        TargetConfig::from_toml(&format!("[metrics]\nenabled = false\n{GOOD}"), "t.toml").unwrap();
    assert_eq!(c.metrics_addr, None);
    let bad = |text: String, want: &str| {
        let e = TargetConfig::from_toml(&text, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{e}");
    };
    bad(
        format!("[metrics]\naddress = \"localhost\"\n{GOOD}"),
        "t.toml: metrics.address: 'localhost' is not ADDRESS:PORT",
    );
    bad(
        format!("[log]\nlevel = \"info,,=x=\"\n{GOOD}"),
        "t.toml: log.level: 'info,,=x=' is not a log filter",
    );
    // Per-host series: off unless asked for, capped.
    assert_eq!(
        TargetConfig::from_toml(GOOD, "t.toml")
            .unwrap()
            .per_host_series,
        None
    );
    let c =
        TargetConfig::from_toml(&format!("[metrics]\nper_host = true\n{GOOD}"), "t.toml").unwrap();
    assert_eq!(
        c.per_host_series,
        Some(crate::config::PerHostSeries {
            max: 256,
            idle: Some(std::time::Duration::from_secs(3600))
        })
    );
    let c = TargetConfig::from_toml(
        &format!("[metrics]\nper_host = true\nper_host_idle_secs = 0\n{GOOD}"),
        "t.toml",
    )
    .unwrap();
    assert_eq!(c.per_host_series.unwrap().idle, None, "0: for ever");
    bad(
        format!("[metrics]\nper_host_idle_secs = 8\n{GOOD}"),
        "metrics.per_host_idle_secs: is only for per_host = true",
    );
    bad(
        format!("[metrics]\nper_host = true\nper_host_max = 1\n{GOOD}"),
        "metrics.per_host_max: 1 is out of range 2..=65536",
    );
    bad(
        format!("[metrics]\nper_host_max = 8\n{GOOD}"),
        "metrics.per_host_max: is only for per_host = true",
    );
}

#[test]
fn latency_buckets_round_up_to_the_histogram_s_bounds() {
    let parse = |b: &str| {
        TargetConfig::from_toml(
            &format!("[metrics]\nlatency_buckets = {b}\n{GOOD}"),
            "t.toml",
        )
        .unwrap()
        .latency_buckets
    };
    // 1 ms -> 1.024 ms (7), 100 µs -> 128 µs (4), 1 s -> 1.048576 s (17).
    assert_eq!(parse("[0.001, 0.0001, 1, 0.001]"), Some(vec![4, 7, 17]));
    assert_eq!(parse("[]"), Some(vec![]), "none: +Inf, sum and count only");
    assert_eq!(
        TargetConfig::from_toml(GOOD, "t.toml")
            .unwrap()
            .latency_buckets,
        None
    );
    bad(
        &format!("[metrics]\nlatency_buckets = [0.001, 0, 20]\n{GOOD}"),
        "metrics.latency_buckets: 0 is not a bound in seconds above 0 and up to 16.7",
    );
}

#[test]
fn missing_backing_file_is_refused() {
    let e = TargetConfig::quick(
        "rdma",
        "10.0.0.1:4420",
        "nqn.2026-11.io.example:x",
        &["/nonexistent/disk".into()],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("command line: subsystem[0].namespace[0].path: /nonexistent/disk"),
        "{e}"
    );
}

#[test]
fn environment_overrides() {
    let dir = std::env::temp_dir().join(format!("nvmf-cfg-env-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.toml");
    std::fs::write(
        &path,
        "[target]\npoll_spin_us = 7\n[[listener]]\naddress = \"127.0.0.1\"\n\
         [[subsystem]]\nnqn = \"nqn.2026-11.io.test:a\"\nallow_any_host = true\n\
         [[subsystem.namespace]]\nnsid = 1\nbackend = \"null\"\nsize = \"1M\"\n",
    )
    .unwrap();
    let env = |k: &str, v: &str| Some([(k.to_string(), v.to_string())].into_iter().collect());
    let c = TargetConfig::load_with_env(&path, Some(Default::default())).unwrap();
    assert_eq!(c.poll_spin_us, 7);
    let c =
        TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__POLL_SPIN_US", "0")).unwrap();
    assert_eq!(c.poll_spin_us, 0);
    let e = TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__POLL_SPIN_US", "lots"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.toml") && e.contains("NVMF_TARGET_") && e.contains("poll_spin_us"),
        "{e}"
    );
    let e = TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__POLL_SPIN", "1"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("poll_spin"), "{e}");
    assert_eq!(c.engine.send_offload, SendOffload::Auto);
    let c =
        TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__SEND_OFFLOAD", "off")).unwrap();
    assert_eq!(c.engine.send_offload, SendOffload::Off);
    let e =
        TargetConfig::load_with_env(&path, env("NVMF_TARGET_TARGET__SEND_OFFLOAD", "sometimes"))
            .unwrap_err()
            .to_string();
    assert!(e.contains("sometimes") && e.contains("send_offload"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quick_form() {
    let c = TargetConfig::quick(
        "rdma",
        "10.0.0.1:4421",
        "nqn.2026-11.io.example:x",
        &["null:64M".into()],
    )
    .unwrap();
    assert_eq!(c.listeners[0].addr.port(), 4421);
    assert!(c.subsystems[0].allow_any_host);
    assert_eq!(
        c.subsystems[0].namespaces[0].backend,
        BackendConfig::Null { size: 64 << 20 }
    );
    let c = TargetConfig::quick(
        "rdma",
        "10.0.0.1:4420",
        "nqn.2026-11.io.example:x",
        &["rbd:rbd/disk1".into(), "null:1M".into()],
    )
    .unwrap();
    assert_eq!(
        c.subsystems[0].namespaces[0].backend,
        BackendConfig::Rbd(RbdConfig {
            pool: "rbd".into(),
            image: "disk1".into(),
            ceph_conf: None,
            client: "admin".into(),
            fencing: true,
        })
    );
    let e = TargetConfig::quick(
        "rdma",
        "10.0.0.1:4420",
        "nqn.2026-11.io.example:x",
        &["rbd:disk1".into()],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("namespace[0].pool"), "{e}");
}

#[test]
fn errors_as_json_name_file_field_and_reason() {
    let e = TargetConfig::from_toml(
        "[[subsystem]]\nnqn = \"disk1\"\nallow_any_host = true\n",
        "t.toml",
    )
    .unwrap_err();
    let j = e.to_json();
    assert_eq!(j.len(), e.count());
    assert!(j.iter().any(|x| x["field"] == "subsystem[0].nqn"
        && x["file"] == "t.toml"
        && x["reason"].as_str().unwrap().contains("nqn.")));
    let e = TargetConfig::from_toml("[[x", "t.toml").unwrap_err();
    assert_eq!(e.to_json()[0]["field"], serde_json::Value::Null);
}

#[test]
fn tls_listeners() {
    let c = TargetConfig::from_toml(
        "[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.0.1\"\nsecure = \"required\"\n\
         [[listener]]\ntransport = \"tcp\"\naddress = \"10.0.0.1\"\nport = 4421\n\
         [[subsystem]]\nnqn = \"nqn.2026-11.io.example:s\"\nallow_any_host = true\n",
        "t",
    )
    .unwrap();
    use crate::model::port::Secure;
    assert_eq!(c.listeners[0].secure, Secure::Required);
    assert_eq!(c.listeners[1].secure, Secure::None);
    bad(
        "[[listener]]\naddress = \"10.0.0.1\"\nsecure = \"required\"\n",
        "listener[0].secure: TLS is for NVMe/TCP listeners",
    );
    bad(
        "[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.0.1\"\nsecure = \"tls\"\n",
        "listener[0].secure: 'tls' is not one of none, optional, required",
    );
}

/// Issue 57, 8: a syntax error quotes its line; no secret in it is shown,
/// in an inline table or wherever it stands.
#[test]
fn a_syntax_error_quotes_no_secret_wherever_it_stands() {
    let psk = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    let chap = "DHHC-1:00:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj/jBqb2:";
    for text in [
        format!("host = [{{ nqn = \"nqn.h:a\", tls_key = \"{psk}\" }} oops\n"),
        format!("host = [{{ nqn = \"nqn.h:a\", dhchap_key = \"{chap}\", x = }}]\n"),
        format!("[[host]]\nnqn = \"nqn.h:a\"\ntls_key = \"{psk}\nport = 1\n"),
        format!("x = [\"{chap}\" \"{psk}\"]\n"),
    ] {
        let e = TargetConfig::from_toml(&text, "t.toml")
            .unwrap_err()
            .to_string();
        for secret in [&psk[12..], &chap[7..]] {
            assert!(!e.contains(secret), "a secret shown: {e}");
        }
        assert!(
            e.contains("<secret left out>") || e.contains("= <secret"),
            "{e}"
        );
    }
}

/// Issue 53, 1: the packaged file serves nothing. It is valid as it ships,
/// has no listener and no subsystem, and says so in its warnings.
#[test]
fn the_packaged_file_is_valid_and_serves_nothing() {
    let c = TargetConfig::from_toml(include_str!("../../../etc/nvmf-target.toml"), "shipped")
        .expect("the packaged configuration parses");
    assert!(c.listeners.is_empty(), "{:?}", c.listeners);
    assert!(c.subsystems.is_empty());
    let fields: Vec<String> = c.warnings().into_iter().map(|w| w.field).collect();
    assert_eq!(fields, ["listener", "subsystem"]);
    // An empty file too, and one with a listener only.
    let c = TargetConfig::from_toml("", "empty").unwrap();
    assert_eq!(c.warnings().len(), 2);
    let c = TargetConfig::from_toml(
        "[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.0.1\"\n",
        "l",
    )
    .unwrap();
    let fields: Vec<String> = c.warnings().into_iter().map(|w| w.field).collect();
    assert_eq!(fields, ["subsystem"]);
}

/// Issue 53, 3: kernel names that may move are warned of.
#[test]
fn kernel_names_that_may_move_are_warned_of() {
    use super::is_moving_kernel_name as moving;
    use std::path::Path;
    for p in [
        "/dev/sdb",
        "/dev/sdaa3",
        "/dev/vdb1",
        "/dev/xvdf",
        "/dev/nvme0n1",
        "/dev/nvme12n3p4",
        "/dev/dm-3",
        "/dev/loop7",
        "/dev/nbd0p1",
        "/dev/rbd0",
    ] {
        assert!(moving(Path::new(p)), "{p}");
    }
    for p in [
        "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4",
        "/dev/mapper/vg-lv",
        "/dev/ram0",
        "/dev/md/data",
        "/dev/nvme0",
        "/dev/nvme0n",
        "/dev/sd",
        "/dev/sdb-x",
        "/var/lib/disk.img",
        "/dev/vg0/lv",
    ] {
        assert!(!moving(Path::new(p)), "{p}");
    }
    let c = TargetConfig::from_toml(
        "[[subsystem]]\nnqn = \"nqn.2026-11.io.example:a\"\nallow_any_host = true\n\
         [[subsystem.namespace]]\npath = \"/dev/sdb\"\n",
        "t.toml",
    )
    .expect("from_toml does not open the paths");
    let w: Vec<String> = c.warnings().into_iter().map(|w| w.field).collect();
    assert_eq!(w, ["subsystem[0].namespace[0].path", "listener"]);
}

#[test]
fn namespace_identifiers_are_parsed_checked_and_unique() {
    let with = |a: &str, b: &str| {
        GOOD.replace("nsid = 1\n", &format!("nsid = 1\n{a}\n"))
            .replace("nsid = 3\n", &format!("nsid = 3\n{b}\n"))
    };
    let c = TargetConfig::from_toml(
        &with(
            "nguid = \"00112233-4455-6677-8899-aabbccddeeff\"\neui64 = \"0102030405060708\"",
            "nguid = \"none\"\nuuid = \"1f0ee7a2-5b35-4a8e-9e36-0c1b1c1d9a01\"",
        ),
        "t.toml",
    )
    .unwrap();
    let ids = c.subsystems[0].namespaces[0].ids;
    assert_eq!(ids.nguid.unwrap()[..3], [0x00, 0x11, 0x22]);
    assert_eq!(ids.eui64, Some([1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(ids.uuid, None, "derived");
    let ids = c.subsystems[1].namespaces[0].ids;
    assert_eq!(ids.nguid, Some([0; 16]), "none, as nvmet's default");
    assert_eq!(ids.uuid.unwrap()[0], 0x1f);
    bad(
        &with("nguid = \"0011\"", ""),
        "subsystem[0].namespace[0].nguid",
    );
    bad(&with("eui64 = \"xyz\"", ""), "not 8 bytes of hex");
    bad(
        &with("", "nguid = \"none\"\nuuid = \"none\""),
        "a namespace needs one identifier",
    );
    bad(
        &with(
            "eui64 = \"0102030405060708\"",
            "eui64 = \"01:02:03:04:05:06:07:08\"",
        ),
        "is also subsystem 'nqn.2026-11.io.example:disk1' namespace 1's",
    );
    // Two namespaces that both have no NGUID do not share one.
    TargetConfig::from_toml(&with("nguid = \"none\"", "nguid = \"none\""), "t.toml").unwrap();
}
