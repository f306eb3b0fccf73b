//! The commands against the requests and answers they make.

use super::*;

#[test]
fn commands_become_requests() {
    let (m, p) = Admin::Namespace {
        cmd: NamespaceCmd::Add {
            subsystem: "nqn.a".into(),
            path: None,
            rbd_pool: None,
            rbd_image: None,
            null: Some("1G".into()),
            nsid: None,
            read_only: true,
            ana_group: Some(2),
            hosts: vec![],
            hidden: true,
            nguid: Some("00112233445566778899aabbccddeeff".into()),
            uuid: None,
            eui64: None,
        },
        conn: Conn::default(),
    }
    .request();
    assert_eq!(m, "namespace_add");
    let back: NamespaceAdd = rpc::params(m, p).unwrap();
    assert_eq!(back.null_size.as_deref(), Some("1G"));
    assert!(back.read_only);
    assert_eq!(back.hosts, Some(vec![]), "hidden: shown to no host");
    assert_eq!(
        back.nguid.as_deref(),
        Some("00112233445566778899aabbccddeeff")
    );
    let (m, p) = Admin::Namespace {
        cmd: NamespaceCmd::Attach {
            subsystem: "nqn.a".into(),
            nsid: 2,
            host_nqn: "nqn.h".into(),
        },
        conn: Conn::default(),
    }
    .request();
    assert_eq!(m, "namespace_attach");
    let back: NamespaceHost = rpc::params(m, p).unwrap();
    assert_eq!((back.nsid, back.host_nqn.as_str()), (2, "nqn.h"));
    let (m, p) = Admin::Config {
        cmd: ConfigCmd::Show,
        conn: Conn::default(),
    }
    .request();
    assert_eq!((m, p), ("config_show", Value::Null));
    let (m, p) = Admin::Drain {
        listener: Some("10.0.0.1:4420".into()),
        timeout: Some(30),
        conn: Conn::default(),
    }
    .request();
    assert_eq!(m, "drain");
    let back: DrainParams = rpc::params(m, p).unwrap();
    assert_eq!(back.listener.as_deref(), Some("10.0.0.1:4420"));
    assert_eq!(back.timeout_s, Some(30));
    let (m, p) = Admin::OkToStop {
        after_drain: false,
        conn: Conn::default(),
    }
    .request();
    assert_eq!((m, p), ("ok_to_stop", Value::Null));
    let (_, p) = Admin::OkToStop {
        after_drain: true,
        conn: Conn::default(),
    }
    .request();
    assert_eq!(p, serde_json::json!({ "after_drain": true }));
    let (m, p) = Admin::Controller {
        cmd: ControllerCmd::Disconnect {
            subsystem: "nqn.a".into(),
            cntlid: 3,
        },
        conn: Conn::default(),
    }
    .request();
    assert_eq!(m, "controller_disconnect");
    assert_eq!(p["cntlid"], 3);
    // Every method the CLI asks is one the daemon knows.
    for a in [
        Admin::Subsystem {
            cmd: SubsystemCmd::Del {
                subsystem: "x".into(),
                force: false,
            },
            conn: Conn::default(),
        },
        Admin::Host {
            cmd: HostCmd::Add {
                subsystem: "x".into(),
                host_nqn: "h".into(),
                keys: Keys::default(),
            },
            conn: Conn::default(),
        },
        Admin::Host {
            cmd: HostCmd::Key {
                cmd: KeyCmd::Set {
                    host_nqn: "h".into(),
                    keys: Keys {
                        dhchap_key: Some("k".into()),
                        dhchap_ctrl_key: None,
                        tls_key: None,
                    },
                },
            },
            conn: Conn::default(),
        },
        Admin::Host {
            cmd: HostCmd::Key {
                cmd: KeyCmd::Del {
                    host_nqn: "h".into(),
                },
            },
            conn: Conn::default(),
        },
        Admin::Listener {
            cmd: ListenerCmd::Ana {
                listener: None,
                group: 1,
                state: "optimized".into(),
            },
            conn: Conn::default(),
        },
        Admin::Listener {
            cmd: ListenerCmd::Del(ListenerArgs {
                transport: "tcp".into(),
                address: "::1".into(),
                port: 4420,
            }),
            conn: Conn::default(),
        },
        Admin::Listener {
            cmd: ListenerCmd::Add {
                listener: ListenerArgs {
                    transport: "tcp".into(),
                    address: "::1".into(),
                    port: 4420,
                },
                secure: Some("required".into()),
            },
            conn: Conn::default(),
        },
        Admin::Host {
            cmd: HostCmd::Del {
                subsystem: "x".into(),
                host_nqn: "*".into(),
            },
            conn: Conn::default(),
        },
        Admin::Namespace {
            cmd: NamespaceCmd::Del {
                subsystem: "x".into(),
                nsid: 1,
                force: false,
            },
            conn: Conn::default(),
        },
    ] {
        assert!(rpc::METHODS.contains(&a.request().0));
    }
    // --force is sent only when given (a daemon before it refuses the field).
    let del = |force| Admin::Namespace {
        cmd: NamespaceCmd::Del {
            subsystem: "x".into(),
            nsid: 1,
            force,
        },
        conn: Conn::default(),
    };
    assert_eq!(del(false).request().1.get("force"), None);
    assert_eq!(del(true).request().1["force"], true);
}

#[test]
fn answers_read_well() {
    let c = Changed {
        summary: "namespace 2 added to nqn.a".into(),
        nsid: Some(2),
        applied: Some("subsystems +0 -0, namespaces +1 -0".into()),
        saved: Some("/etc/x.toml".into()),
    };
    let t = text(&serde_json::to_value(&c).unwrap());
    assert_eq!(
        t,
        "namespace 2 added to nqn.a\n  applied: subsystems +0 -0, namespaces +1 -0\n  saved to /etc/x.toml\n"
    );
    let t = text(&serde_json::json!({"path": "/etc/x.toml", "toml": "[log]\n"}));
    assert_eq!(t, "# /etc/x.toml (as running)\n[log]\n");
}

#[test]
fn each_kind_of_failure_has_its_own_exit_status() {
    use crate::daemon::rpc;
    assert_eq!(exit_of(rpc::REFUSED), EXIT_REFUSED);
    assert_eq!(exit_of(rpc::INVALID_PARAMS), EXIT_INVALID);
    assert_eq!(exit_of(rpc::METHOD_NOT_FOUND), EXIT_INVALID);
    assert_eq!(exit_of(rpc::UNAVAILABLE), EXIT_LATER);
    assert_eq!(exit_of(rpc::NOT_SAVED), EXIT_LATER);
    let codes: Vec<&str> = EXIT_STATUS.iter().map(|(c, _)| *c).collect();
    for c in [
        EXIT_UNREACHABLE,
        EXIT_REFUSED,
        EXIT_USAGE,
        EXIT_INVALID,
        EXIT_LATER,
    ] {
        assert!(
            codes.contains(&c.to_string().as_str()),
            "{c} is not in the man pages"
        );
    }
}
