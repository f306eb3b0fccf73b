//! The edits against a file with comments, numbering and every kind of entry.

use super::*;
use crate::config::{BackendConfig, TargetConfig};

const FILE: &str = r#"# The lab's target.
[[listener]]
address = "10.0.2.15"   # eth0

# First disk.
[[subsystem]]
nqn = "nqn.2026-11.io.example:a"
hosts = ["nqn.2026-11.io.example:h1"]   # the database host

[[subsystem.namespace]]
path = "/dev/null"      # numbered 1 by position

[[subsystem.namespace]]
backend = "null"
size = "1M"

[[subsystem]]
nqn = "nqn.2026-11.io.example:b"
allow_any_host = true

[[subsystem.namespace]]
nsid = 7
backend = "null"
size = "1M"
"#;

fn parsed(text: &str) -> TargetConfig {
    TargetConfig::from_toml(text, "edited").unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn nsids_of(c: &TargetConfig, nqn: &str) -> Vec<u32> {
    let s = c.subsystems.iter().find(|s| s.nqn == nqn).unwrap();
    s.namespaces.iter().map(|n| n.nsid).collect()
}

const A: &str = "nqn.2026-11.io.example:a";
const B: &str = "nqn.2026-11.io.example:b";

fn ns_add(sub: &str) -> NamespaceAdd {
    NamespaceAdd {
        subsystem: sub.into(),
        null_size: Some("2M".into()),
        ..Default::default()
    }
}

#[test]
fn a_namespace_lands_in_its_subsystem_and_comments_stay() {
    let e = apply(FILE, &Edit::NamespaceAdd(ns_add(A))).unwrap();
    assert_eq!(e.nsid, Some(3));
    assert!(e.text.contains("# the database host"));
    assert!(e.text.contains("# numbered 1 by position"));
    assert!(e.text.starts_with("# The lab's target.\n"));
    let c = parsed(&e.text);
    // In the first subsystem, not the last table of the file.
    assert_eq!(nsids_of(&c, A), vec![1, 2, 3]);
    assert_eq!(nsids_of(&c, B), vec![7]);
    let n = &c.subsystems[0].namespaces[2];
    assert_eq!(n.backend, BackendConfig::Null { size: 2 << 20 });
    // Everything else as it was.
    let before = parsed(FILE);
    assert_eq!(c.subsystems[1], before.subsystems[1]);
    assert_eq!(c.listeners, before.listeners);
}

#[test]
fn nsids_chosen_given_taken_and_kept() {
    let mut a = ns_add(B);
    a.nsid = Some(7);
    assert_eq!(
        apply(FILE, &Edit::NamespaceAdd(a.clone())),
        Err(EditError::NsidInUse {
            nqn: B.into(),
            nsid: 7
        })
    );
    a.nsid = None;
    let e = apply(FILE, &Edit::NamespaceAdd(a)).unwrap();
    assert_eq!(e.nsid, Some(1));
    assert_eq!(nsids_of(&parsed(&e.text), B), vec![7, 1]);
    // Removing the first of two position-numbered entries leaves the
    // second its number.
    let d = Edit::NamespaceDel(NamespaceRef {
        subsystem: A.into(),
        nsid: 1,
    });
    let e = apply(FILE, &d).unwrap();
    assert_eq!(nsids_of(&parsed(&e.text), A), vec![2]);
    assert_eq!(
        apply(&e.text, &d),
        Err(EditError::NoNamespace {
            nqn: A.into(),
            nsid: 1
        })
    );
}

#[test]
fn the_last_namespace_and_the_last_subsystem_go() {
    let e = apply(
        FILE,
        &Edit::NamespaceDel(NamespaceRef {
            subsystem: B.into(),
            nsid: 7,
        }),
    )
    .unwrap();
    assert!(nsids_of(&parsed(&e.text), B).is_empty());
    let e = apply(&e.text, &Edit::SubsystemDel(SubsystemRef { nqn: B.into() })).unwrap();
    assert_eq!(nsids_of(&parsed(&e.text), A), vec![1, 2]);
    let e = apply(&e.text, &Edit::SubsystemDel(SubsystemRef { nqn: A.into() })).unwrap();
    assert!(!e.text.contains("[[subsystem"), "{}", e.text);
    // The last one: a file without any is valid, and says it serves nothing.
    let c = TargetConfig::from_toml(&e.text, "edited").unwrap();
    assert!(c.subsystems.is_empty());
    assert!(
        c.warnings().iter().any(|w| w.field == "subsystem"),
        "{:?}",
        c.warnings()
    );
    assert_eq!(
        apply(&e.text, &Edit::SubsystemDel(SubsystemRef { nqn: A.into() })),
        Err(EditError::NoSubsystem(A.into()))
    );
}

#[test]
fn a_subsystem_added_to_a_file_without_any() {
    let add = SubsystemAdd {
        nqn: "nqn.2026-11.io.example:c".into(),
        allow_any_host: false,
        hosts: vec!["nqn.2026-11.io.example:h2".into()],
        serial: Some("SN1".into()),
        model: None,
    };
    let e = apply(
        "[[listener]]\naddress = \"10.0.0.1\"\n",
        &Edit::SubsystemAdd(add.clone()),
    )
    .unwrap();
    let c = parsed(&e.text);
    assert_eq!(c.subsystems[0].hosts, add.hosts);
    assert_eq!(c.subsystems[0].serial.as_deref(), Some("SN1"));
    let mut ns = ns_add("nqn.2026-11.io.example:c");
    ns.path = Some("/dev/null".into());
    ns.null_size = None;
    ns.read_only = true;
    ns.ana_group = Some(2);
    let e = apply(&e.text, &Edit::NamespaceAdd(ns)).unwrap();
    let c = parsed(&e.text);
    let n = &c.subsystems[0].namespaces[0];
    assert!(n.readonly);
    assert_eq!(n.ana_group, 2);
    assert_eq!(
        apply(&e.text, &Edit::SubsystemAdd(add)),
        Err(EditError::SubsystemExists(
            "nqn.2026-11.io.example:c".into()
        ))
    );
}

#[test]
fn namespaces_shown_to_hosts_attached_and_detached() {
    let h1 = "nqn.2026-11.io.example:h1";
    let h2 = "nqn.2026-11.io.example:h2";
    let mut add = ns_add(A);
    add.hosts = Some(vec![h1.into()]);
    let e = apply(FILE, &Edit::NamespaceAdd(add)).unwrap();
    let shown = |text: &str, nsid: u32| {
        let c = parsed(text);
        let s = c.subsystems.iter().find(|s| s.nqn == A).unwrap();
        s.namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .unwrap()
            .hosts
            .clone()
    };
    assert_eq!(shown(&e.text, 3), Some(vec![h1.to_string()]));
    let at = |nsid: u32, host: &str| NamespaceHost {
        subsystem: A.into(),
        nsid,
        host_nqn: host.into(),
    };
    let e = apply(&e.text, &Edit::NamespaceAttach(at(3, h2))).unwrap();
    assert_eq!(e.summary, format!("namespace 3 of {A} shown to host {h2}"));
    assert_eq!(
        shown(&e.text, 3),
        Some(vec![h1.to_string(), h2.to_string()])
    );
    assert!(e.text.contains("# the database host"), "comments stay");
    let err = apply(&e.text, &Edit::NamespaceAttach(at(3, h2))).unwrap_err();
    assert!(err.to_string().contains("already"), "{err}");
    let e = apply(&e.text, &Edit::NamespaceDetach(at(3, h1))).unwrap();
    let e = apply(&e.text, &Edit::NamespaceDetach(at(3, h2))).unwrap();
    assert_eq!(shown(&e.text, 3), Some(vec![]), "an empty list: no host");
    let err = apply(&e.text, &Edit::NamespaceDetach(at(3, h2))).unwrap_err();
    assert!(err.to_string().contains("not shown"), "{err}");
    // Without a list a namespace is every host's: neither changes it.
    for edit in [
        Edit::NamespaceAttach(at(1, h2)),
        Edit::NamespaceDetach(at(1, h1)),
    ] {
        let err = apply(FILE, &edit).unwrap_err();
        assert!(err.to_string().contains("every host"), "{err}");
    }
    assert_eq!(shown(FILE, 1), None);
    assert!(matches!(
        apply(FILE, &Edit::NamespaceAttach(at(9, h1))),
        Err(EditError::NoNamespace { nsid: 9, .. })
    ));
}

#[test]
fn qos_caps_set_changed_and_removed() {
    let q = |host: Option<&str>, iops: Option<u64>, mbps: Option<u64>| NamespaceQos {
        subsystem: A.into(),
        nsid: 2,
        host_nqn: host.map(Into::into),
        rw_iops: iops,
        rw_mbps: mbps,
        ..Default::default()
    };
    let caps = |text: &str| {
        let c = parsed(text);
        let n = c.subsystems[0].namespaces[1].clone();
        (n.qos, n.host_qos)
    };
    let h1 = "nqn.2026-11.io.example:h1";
    let e = apply(FILE, &Edit::NamespaceQos(q(None, Some(2000), None))).unwrap();
    assert!(e.text.contains("qos = { rw_iops = 2000 }"), "{}", e.text);
    let e = apply(&e.text, &Edit::NamespaceQos(q(None, None, Some(100)))).unwrap();
    let e = apply(&e.text, &Edit::NamespaceQos(q(Some(h1), Some(50), None))).unwrap();
    let (all, hosts) = caps(&e.text);
    assert_eq!(
        (all.rw_iops, all.rw_mbps),
        (2000, 100),
        "caps not given stay"
    );
    assert_eq!(hosts.len(), 1);
    assert_eq!((hosts[0].host.as_str(), hosts[0].caps.rw_iops), (h1, 50));
    assert!(
        e.text.contains("[[subsystem.namespace.host_qos]]"),
        "{}",
        e.text
    );
    assert!(e.text.contains("# the database host"), "comments stay");
    // 0 removes a cap; none left, the entry goes.
    let e = apply(&e.text, &Edit::NamespaceQos(q(Some(h1), Some(0), None))).unwrap();
    let e = apply(&e.text, &Edit::NamespaceQos(q(None, Some(0), Some(0)))).unwrap();
    assert_eq!(caps(&e.text), (Default::default(), vec![]));
    assert!(!e.text.contains("qos"), "{}", e.text);
    let err = apply(FILE, &Edit::NamespaceQos(q(None, None, None))).unwrap_err();
    assert!(err.to_string().contains("no cap given"), "{err}");
}

#[test]
fn a_null_namespace_s_size_is_the_file_s_others_are_their_store_s() {
    let r = |nsid: u32, size: Option<&str>| {
        Edit::NamespaceResize(NamespaceResize {
            subsystem: A.into(),
            nsid,
            size: size.map(Into::into),
        })
    };
    let e = apply(FILE, &r(2, Some("8M"))).unwrap();
    assert_eq!(
        parsed(&e.text).subsystems[0].namespaces[1].backend,
        BackendConfig::Null { size: 8 << 20 }
    );
    assert!(e.text.contains("# numbered 1 by position"), "comments stay");
    assert_eq!(e.summary, format!("namespace 2 of {A} resized to 8M"));
    let err = apply(FILE, &r(1, Some("8M"))).unwrap_err();
    assert!(
        err.to_string().contains("keeps its size in its store"),
        "{err}"
    );
    assert!(matches!(
        apply(FILE, &r(9, Some("8M"))).unwrap_err(),
        EditError::NoNamespace { nsid: 9, .. }
    ));
    assert!(matches!(
        apply(FILE, &r(2, None)).unwrap_err(),
        EditError::Invalid(_)
    ));
}

#[test]
fn hosts_and_any_host() {
    let h = |host: &str| HostRef {
        subsystem: A.into(),
        host_nqn: host.into(),
    };
    let add = |host: &str| HostAdd {
        subsystem: A.into(),
        host_nqn: host.into(),
        dhchap_key: None,
        dhchap_ctrl_key: None,
        tls_key: None,
    };
    let e = apply(FILE, &Edit::HostAdd(add("nqn.2026-11.io.example:h2"))).unwrap();
    assert!(e.text.contains("# the database host"));
    let c = parsed(&e.text);
    assert_eq!(c.subsystems[0].hosts.len(), 2);
    assert!(matches!(
        apply(&e.text, &Edit::HostAdd(add("nqn.2026-11.io.example:h2"))),
        Err(EditError::HostExists { .. })
    ));
    let e = apply(&e.text, &Edit::HostDel(h("nqn.2026-11.io.example:h1"))).unwrap();
    assert_eq!(
        parsed(&e.text).subsystems[0].hosts,
        vec!["nqn.2026-11.io.example:h2".to_string()]
    );
    assert!(matches!(
        apply(&e.text, &Edit::HostDel(h("nqn.2026-11.io.example:h1"))),
        Err(EditError::NoHost { .. })
    ));
    let e = apply(&e.text, &Edit::HostAdd(add(ANY_HOST))).unwrap();
    assert!(parsed(&e.text).subsystems[0].allow_any_host);
    let e = apply(&e.text, &Edit::HostDel(h(ANY_HOST))).unwrap();
    assert!(!parsed(&e.text).subsystems[0].allow_any_host);
    // The last listed host removed: valid, and warned of (no host may
    // connect).
    let e = apply(&e.text, &Edit::HostDel(h("nqn.2026-11.io.example:h2"))).unwrap();
    let c = TargetConfig::from_toml(&e.text, "edited").expect("a subsystem no host may reach");
    assert!(c.warnings()[0].reason.contains("no host may connect"));
}

#[test]
fn bad_requests_and_bad_files() {
    let mut a = ns_add(A);
    a.path = Some("/dev/null".into());
    assert!(matches!(
        apply(FILE, &Edit::NamespaceAdd(a)),
        Err(EditError::Invalid(_))
    ));
    let mut a = ns_add(A);
    a.null_size = None;
    assert!(matches!(
        apply(FILE, &Edit::NamespaceAdd(a)),
        Err(EditError::Invalid(_))
    ));
    let mut a = ns_add(A);
    a.null_size = None;
    a.rbd_pool = Some("rbd".into());
    assert!(matches!(
        apply(FILE, &Edit::NamespaceAdd(a)),
        Err(EditError::Invalid(_))
    ));
    assert_eq!(
        apply(FILE, &Edit::NamespaceAdd(ns_add("nqn.x:none"))),
        Err(EditError::NoSubsystem("nqn.x:none".into()))
    );
    assert!(matches!(
        apply("subsystem = 3\n", &Edit::NamespaceAdd(ns_add(A))),
        Err(EditError::Unreadable(_))
    ));
    assert!(matches!(
        apply("[[subsystem]\n", &Edit::NamespaceAdd(ns_add(A))),
        Err(EditError::Unreadable(_))
    ));
    // Every nsid taken.
    let mut text =
        String::from("[[subsystem]]\nnqn = \"nqn.2026-11.io.example:a\"\nallow_any_host = true\n");
    for i in 1..=MAX_NSID {
        text.push_str(&format!("[[subsystem.namespace]]\nnsid = {i}\n"));
    }
    assert_eq!(
        apply(&text, &Edit::NamespaceAdd(ns_add(A))),
        Err(EditError::NoFreeNsid(A.into()))
    );
}

const KEY1: &str = "DHHC-1:00:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj/jBqb2:";
const KEY2: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
const H3: &str = "nqn.2026-11.io.example:h3";

fn key(k: Option<&str>, ctrl: Option<&str>) -> HostKey {
    HostKey {
        host_nqn: H3.into(),
        dhchap_key: k.map(Into::into),
        dhchap_ctrl_key: ctrl.map(Into::into),
        tls_key: None,
    }
}

fn host_cfg(c: &TargetConfig) -> &crate::config::HostConfig {
    c.hosts
        .iter()
        .find(|h| h.nqn == H3)
        .expect("the [[host]] entry")
}

#[test]
fn host_keys_added_rotated_and_removed_and_never_said() {
    // host add with a key: the subsystem lists it, a [[host]] entry holds it.
    let e = apply(
        FILE,
        &Edit::HostAdd(HostAdd {
            subsystem: A.into(),
            host_nqn: H3.into(),
            dhchap_key: Some(KEY1.into()),
            dhchap_ctrl_key: None,
            tls_key: None,
        }),
    )
    .unwrap();
    assert!(!e.summary.contains("DHHC"), "{}", e.summary);
    assert!(e.summary.ends_with("(its key set)"), "{}", e.summary);
    let c = parsed(&e.text);
    assert!(c.subsystems[0].hosts.contains(&H3.to_string()));
    let first = host_cfg(&c).dhchap_key.clone().expect("a key");
    // Rotation: the key replaced, a controller key added, the key kept.
    let e = apply(&e.text, &Edit::HostKeySet(key(Some(KEY2), None))).unwrap();
    assert!(!e.summary.contains("DHHC"), "{}", e.summary);
    let c = parsed(&e.text);
    assert_ne!(host_cfg(&c).dhchap_key.as_ref(), Some(&first));
    let e = apply(&e.text, &Edit::HostKeySet(key(None, Some(KEY1)))).unwrap();
    let c = parsed(&e.text);
    assert!(host_cfg(&c).dhchap_key.is_some() && host_cfg(&c).dhchap_ctrl_key.is_some());
    assert_eq!(e.text.matches("[[host]]").count(), 1);
    // Shown: every key hidden, the rest as written.
    let shown = without_secrets(&e.text).unwrap();
    assert!(!shown.contains("DHHC"), "{shown}");
    assert_eq!(shown.matches(HIDDEN).count(), 2);
    assert!(shown.contains("# the database host"));
    // Inline tables, and a secret under another name, are hidden too.
    let inline =
        format!("host = [{{ nqn = \"{H3}\", dhchap_key = \"{KEY1}\" }}]\n[x]\nnote = \"{KEY2}\"\n");
    let shown = without_secrets(&inline).unwrap();
    assert!(!shown.contains("DHHC"), "{shown}");
    assert_eq!(shown.matches(HIDDEN).count(), 2);
    // Debug output of a request names no key either.
    assert!(!format!("{:?}", key(Some(KEY1), Some(KEY2))).contains("DHHC"));
    // Removed: the entry goes with its last key; removing again says so.
    let e = apply(
        &e.text,
        &Edit::HostKeyDel(HostNqn {
            host_nqn: H3.into(),
        }),
    )
    .unwrap();
    assert!(!e.text.contains("[[host]]"), "{}", e.text);
    assert!(parsed(&e.text).hosts.is_empty());
    assert_eq!(
        apply(
            &e.text,
            &Edit::HostKeyDel(HostNqn {
                host_nqn: H3.into()
            })
        ),
        Err(EditError::NoKey(H3.into()))
    );
    // Nothing to set; a key for '*'; a key kept in a file of its own.
    assert!(matches!(
        apply(FILE, &Edit::HostKeySet(key(None, None))),
        Err(EditError::Invalid(_))
    ));
    let any = HostAdd {
        subsystem: A.into(),
        host_nqn: ANY_HOST.into(),
        dhchap_key: Some(KEY1.into()),
        dhchap_ctrl_key: None,
        tls_key: None,
    };
    assert!(matches!(
        apply(FILE, &Edit::HostAdd(any)),
        Err(EditError::Invalid(_))
    ));
    let filed = format!("{FILE}\n[[host]]\nnqn = \"{H3}\"\ndhchap_key_file = \"/etc/k\"\n");
    let e = apply(&filed, &Edit::HostKeySet(key(Some(KEY2), None))).unwrap_err();
    assert!(matches!(e, EditError::KeyInFile { .. }));
    assert!(e.to_string().contains("/etc/k"), "{e}");
    // A controller key beside a key kept in a file is fine.
    apply(&filed, &Edit::HostKeySet(key(None, Some(KEY2)))).unwrap();
}

const PSK: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";

#[test]
fn tls_psk_added_beside_dhchap_keys_and_removed_with_them() {
    let e = apply(
        FILE,
        &Edit::HostAdd(HostAdd {
            subsystem: A.into(),
            host_nqn: H3.into(),
            dhchap_key: Some(KEY1.into()),
            dhchap_ctrl_key: None,
            tls_key: Some(PSK.into()),
        }),
    )
    .unwrap();
    assert!(
        e.summary.ends_with("(its key and TLS PSK set)"),
        "{}",
        e.summary
    );
    let c = parsed(&e.text);
    assert!(host_cfg(&c).tls_key.is_some() && host_cfg(&c).dhchap_key.is_some());
    // Rotated alone: the DH-HMAC-CHAP key stays; the summary says what follows.
    let with_derivation = format!("{}tls_derivation = \"rfc\"\n", e.text);
    let set = HostKey {
        host_nqn: H3.into(),
        dhchap_key: None,
        dhchap_ctrl_key: None,
        tls_key: Some(PSK.into()),
    };
    let e = apply(&with_derivation, &Edit::HostKeySet(set.clone())).unwrap();
    assert!(e.summary.contains("TLS PSK set"), "{}", e.summary);
    assert!(e.summary.contains("disconnected"), "{}", e.summary);
    assert!(!format!("{set:?}").contains("NVMeTLSkey"));
    let shown = without_secrets(&e.text).unwrap();
    assert!(
        !shown.contains("NVMeTLSkey") && !shown.contains("DHHC"),
        "{shown}"
    );
    assert_eq!(shown.matches(HIDDEN).count(), 2);
    // A PSK kept in a file of its own is changed there.
    let filed = format!("{FILE}\n[[host]]\nnqn = \"{H3}\"\ntls_key_file = \"/etc/psk\"\n");
    assert!(matches!(
        apply(&filed, &Edit::HostKeySet(set)),
        Err(EditError::KeyInFile {
            field: "tls_key",
            ..
        })
    ));
    // Removed with the other keys, the derivation with it.
    let e = apply(
        &e.text,
        &Edit::HostKeyDel(HostNqn {
            host_nqn: H3.into(),
        }),
    )
    .unwrap();
    assert!(!e.text.contains("[[host]]"), "{}", e.text);
}

#[test]
fn listener_ana_states_set_per_address_or_everywhere() {
    let two = format!(
        "{FILE}\n[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.2.15\"\n[[listener]]\naddress = \"10.0.2.16\"\nport = 4421\nana = {{ 1 = \"optimized\" }}\n"
    );
    let at = |l: Option<&str>, g: u32, s: &str| {
        Edit::ListenerAna(ListenerAna {
            listener: l.map(Into::into),
            group: g,
            state: s.into(),
        })
    };
    let e = apply(&two, &at(Some("10.0.2.15:4420"), 2, "inaccessible")).unwrap();
    assert!(
        e.summary.contains("2 listener(s) of 10.0.2.15:4420"),
        "{}",
        e.summary
    );
    assert!(e.text.contains("# eth0"));
    assert!(
        e.text.contains("ana = { 2 = \"inaccessible\" }"),
        "{}",
        e.text
    );
    let c = parsed(&e.text);
    use nvme::ana::AnaState;
    let st = |c: &TargetConfig, i: usize, g: u32| c.listeners[i].ana.get(&g).copied();
    assert_eq!(st(&c, 0, 2), Some(AnaState::Inaccessible));
    assert_eq!(st(&c, 1, 2), Some(AnaState::Inaccessible));
    assert_eq!(st(&c, 2, 2), None);
    let e = apply(&e.text, &at(None, 1, "non-optimized")).unwrap();
    let c = parsed(&e.text);
    assert!((0..3).all(|i| st(&c, i, 1) == Some(AnaState::NonOptimized)));
    assert_eq!(
        st(&c, 0, 2),
        Some(AnaState::Inaccessible),
        "other groups stay"
    );
    assert_eq!(
        apply(&two, &at(Some("10.0.2.99:4420"), 1, "optimized")),
        Err(EditError::NoListener("10.0.2.99:4420".into()))
    );
    // With a transport: that listener only (the TCP one at 10.0.2.15:4420).
    let e = apply(&two, &at(Some("tcp:10.0.2.15:4420"), 3, "inaccessible")).unwrap();
    let c = parsed(&e.text);
    assert_eq!(st(&c, 0, 3), None, "the RDMA listener there");
    assert_eq!(st(&c, 1, 3), Some(AnaState::Inaccessible));
    for bad in [
        at(None, 1, "fast"),
        at(None, 0, "optimized"),
        at(Some("here"), 1, "optimized"),
    ] {
        assert!(
            matches!(apply(&two, &bad), Err(EditError::Invalid(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn listeners_added_and_removed_by_transport_and_address() {
    let l = |t: Option<&str>, a: &str, p: Option<u16>| ListenerRef {
        transport: t.map(Into::into),
        address: a.into(),
        port: p,
        secure: None,
    };
    let e = apply(FILE, &Edit::ListenerAdd(l(Some("tcp"), "10.0.2.15", None))).unwrap();
    assert_eq!(e.summary, "tcp listener 10.0.2.15:4420 added");
    assert!(e.text.contains("# eth0"), "comments stay");
    let c = parsed(&e.text);
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.listeners[1].transport, crate::config::Transport::Tcp);
    assert_eq!(c.listeners[1].addr.to_string(), "10.0.2.15:4420");
    let e = apply(&e.text, &Edit::ListenerAdd(l(None, "fd00::1", Some(4421)))).unwrap();
    let c = parsed(&e.text);
    assert_eq!(c.listeners[2].addr.to_string(), "[fd00::1]:4421");
    // Twice: refused; the same address on the other transport: fine.
    assert!(matches!(
        apply(
            &e.text,
            &Edit::ListenerAdd(l(Some("rdma"), "10.0.2.15", Some(4420)))
        ),
        Err(EditError::Invalid(_))
    ));
    // Removed by transport and address: the RDMA one stays.
    let d = apply(
        &e.text,
        &Edit::ListenerDel(l(Some("tcp"), "10.0.2.15", None)),
    )
    .unwrap();
    assert_eq!(d.summary, "tcp listener 10.0.2.15:4420 removed");
    let c = parsed(&d.text);
    assert_eq!(c.listeners.len(), 2);
    assert_eq!(c.listeners[0].transport, crate::config::Transport::Rdma);
    assert_eq!(
        apply(
            &d.text,
            &Edit::ListenerDel(l(Some("tcp"), "10.0.2.15", None))
        ),
        Err(EditError::NoListener("10.0.2.15:4420 (tcp)".into()))
    );
    // Never the last one; bad names refused.
    assert!(matches!(
        apply(FILE, &Edit::ListenerDel(l(None, "10.0.2.15", None))),
        Err(EditError::Invalid(_))
    ));
    for bad in [
        l(Some("fc"), "10.0.2.15", None),
        l(None, "host.example", None),
        l(None, "10.0.2.15", Some(0)),
    ] {
        assert!(
            matches!(
                apply(FILE, &Edit::ListenerAdd(bad.clone())),
                Err(EditError::Invalid(_))
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn a_subsystem_taken_off_and_put_back_on_listeners() {
    let two = FILE.replace(
        "address = \"10.0.2.15\"   # eth0\n",
        "address = \"10.0.2.15\"   # eth0\n\n[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.2.15\"\n",
    );
    let sl = |l: &str| SubsystemListener {
        subsystem: "nqn.2026-11.io.example:b".into(),
        listener: l.into(),
    };
    let on = |text: &str| {
        parsed(text)
            .subsystems
            .iter()
            .find(|s| s.nqn == "nqn.2026-11.io.example:b")
            .unwrap()
            .listeners
            .clone()
            .map(|v| v.iter().map(|n| n.to_string()).collect::<Vec<_>>())
    };
    assert_eq!(on(&two), None, "every listener");
    // On every listener: putting it on one changes nothing, taking it off
    // one lists the others by their full names.
    let e = apply(&two, &Edit::SubsystemListenerAdd(sl("10.0.2.15:4420"))).unwrap_err();
    assert!(e.to_string().contains("on every listener already"), "{e}");
    let off = apply(&two, &Edit::SubsystemListenerDel(sl("rdma:10.0.2.15:4420"))).unwrap();
    assert_eq!(on(&off.text), Some(vec!["tcp:10.0.2.15:4420".into()]));
    assert!(off.text.contains("# eth0"), "comments stay");
    let e = apply(
        &off.text,
        &Edit::SubsystemListenerDel(sl("rdma:10.0.2.15:4420")),
    )
    .unwrap_err();
    assert!(e.to_string().contains("is not on"), "{e}");
    let back = apply(
        &off.text,
        &Edit::SubsystemListenerAdd(sl("rdma:10.0.2.15:4420")),
    )
    .unwrap();
    assert_eq!(
        on(&back.text),
        Some(vec![
            "tcp:10.0.2.15:4420".into(),
            "rdma:10.0.2.15:4420".into()
        ])
    );
    let e = apply(
        &back.text,
        &Edit::SubsystemListenerAdd(sl("tcp:10.0.2.15:4420")),
    )
    .unwrap_err();
    assert!(e.to_string().contains("already"), "{e}");
    // Without a transport: every listener at the address, here both.
    let none = apply(
        &back.text,
        &Edit::SubsystemListenerDel(sl("10.0.2.15:4420")),
    )
    .unwrap();
    assert_eq!(on(&none.text), Some(vec![]));
    assert!(parsed(&none.text)
        .warnings()
        .iter()
        .any(|w| w.reason.contains("no host reaches")));
    // A listener the target does not have, a name that is none.
    let e = apply(&two, &Edit::SubsystemListenerDel(sl("tcp:10.0.2.16:4420"))).unwrap_err();
    assert_eq!(e, EditError::NoListener("tcp:10.0.2.16:4420".into()));
    let e = apply(&two, &Edit::SubsystemListenerDel(sl("eth0"))).unwrap_err();
    assert!(e.to_string().contains("[rdma:|tcp:]ADDRESS:PORT"), "{e}");
    // Its listener removed from the file: the file is refused.
    let e = TargetConfig::from_toml(
        &off.text.replace(
            "transport = \"tcp\"\naddress = \"10.0.2.15\"\n",
            "transport = \"tcp\"\naddress = \"10.0.2.16\"\n",
        ),
        "t",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("subsystem[1].listeners[0]") && e.contains("no [[listener]]"),
        "{e}"
    );
}
