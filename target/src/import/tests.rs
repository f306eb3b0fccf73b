//! Tests of the nvmetcli import.

use super::render::{push_comment, toml_str};
use super::*;
use crate::config::{BackendConfig, TargetConfig};
use std::path::PathBuf;

const H1: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-5310-8052-b4c04f4e4e31";
const H2: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0051-4410-8035-c8c04f565a32";
const OPEN: &str = "nqn.2026-01.io.example:open";
const RESTRICTED: &str = "nqn.2026-01.io.example:restricted";
const STAGING: &str = "nqn.2026-01.io.example:staging";

/// What `nvmetcli save` writes on a recent kernel (Python 3
/// `json.dumps(sort_keys=True, indent=2)` plus a newline): two rdma ports
/// (IPv4 and IPv6), a tcp port, an open subsystem with a brd and a file
/// namespace, a restricted one with two hosts (namespace in ANA group 2,
/// with an NGUID) and one, linked to the tcp port only, with a disabled
/// namespace.
const SAMPLE: &str = r#"{
  "discovery": {
    "nqn": "nqn.2014-08.org.nvmexpress.discovery"
  },
  "hosts": [
    {
      "dhchap": {
        "ctrl_key": "",
        "dhgroup": "null",
        "hash": "hmac(sha256)",
        "key": ""
      },
      "nqn": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-5310-8052-b4c04f4e4e31"
    },
    {
      "dhchap": {
        "ctrl_key": "",
        "dhgroup": "null",
        "hash": "hmac(sha256)",
        "key": ""
      },
      "nqn": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0051-4410-8035-c8c04f565a32"
    }
  ],
  "ports": [
    {
      "addr": {
        "adrfam": "ipv4",
        "traddr": "10.0.2.15",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "rdma",
        "tsas": "connected"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        },
        {
          "ana": {
            "state": "non-optimized"
          },
          "grpid": 2
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 1,
      "referrals": [],
      "subsystems": [
        "nqn.2026-01.io.example:open",
        "nqn.2026-01.io.example:restricted"
      ]
    },
    {
      "addr": {
        "adrfam": "ipv6",
        "traddr": "fd00:0:0:2::15",
        "treq": "not specified",
        "trsvcid": "4420",
        "trtype": "rdma",
        "tsas": "connected"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 2,
      "referrals": [],
      "subsystems": [
        "nqn.2026-01.io.example:open"
      ]
    },
    {
      "addr": {
        "adrfam": "ipv4",
        "traddr": "10.0.2.15",
        "treq": "required",
        "trsvcid": "4420",
        "trtype": "tcp",
        "tsas": "tls1.3"
      },
      "ana_groups": [
        {
          "ana": {
            "state": "optimized"
          },
          "grpid": 1
        }
      ],
      "param": {
        "inline_data_size": "-1",
        "max_queue_size": "-1",
        "pi_enable": "0"
      },
      "portid": 3,
      "referrals": [],
      "subsystems": [
        "nqn.2026-01.io.example:staging"
      ]
    }
  ],
  "subsystems": [
    {
      "allowed_hosts": [],
      "attr": {
        "allow_any_host": "1",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.8.0-45",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "a1b2c3d4e5f60718",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/dev/ram0",
            "uuid": "1f0ee7a2-5b35-4a8e-9e36-0c1b1c1d9a01"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        },
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/srv/nvmet/disk2.img",
            "uuid": "9c4b0c55-8d0a-4d7e-b0b4-54a1f0d2c7e2"
          },
          "enable": 1,
          "nsid": 2,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-01.io.example:open"
    },
    {
      "allowed_hosts": [
        "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034-5310-8052-b4c04f4e4e31",
        "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0051-4410-8035-c8c04f565a32"
      ],
      "attr": {
        "allow_any_host": "0",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.8.0-45",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "0123456789abcdef",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "2"
          },
          "ana_grpid": 2,
          "device": {
            "nguid": "2c7f1e4a-09b3-4d56-8e1f-3a5b7c9d0e14",
            "path": "/dev/nvme1n1",
            "uuid": "5d3e2f10-7c1b-4f3a-8d2e-6b9a0c4e1f03"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-01.io.example:restricted"
    },
    {
      "allowed_hosts": [],
      "attr": {
        "allow_any_host": "1",
        "cntlid_max": "65519",
        "cntlid_min": "1",
        "firmware": "6.8.0-45",
        "ieee_oui": "0x000000",
        "model": "Linux",
        "pi_enable": "0",
        "qid_max": "128",
        "serial": "5e6f708192a3b4c5",
        "version": "1.3"
      },
      "namespaces": [
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/dev/ram1",
            "uuid": "0b8d6c2e-3f41-4a7b-9c5d-7e8f9a0b1c04"
          },
          "enable": 1,
          "nsid": 1,
          "resv": {
            "enable": "0"
          }
        },
        {
          "ana": {
            "grpid": "1"
          },
          "ana_grpid": 1,
          "device": {
            "nguid": "00000000-0000-0000-0000-000000000000",
            "path": "/srv/nvmet/old.img",
            "uuid": "e2d4f6a8-1b3c-4d5e-8f70-9a1b2c3d4e05"
          },
          "enable": 0,
          "nsid": 5,
          "resv": {
            "enable": "0"
          }
        }
      ],
      "nqn": "nqn.2026-01.io.example:staging"
    }
  ]
}
"#;

/// The shape older nvmetcli releases wrote (Python 2 `json.dumps` with
/// `indent=2` leaves a space before each newline), as in the examples
/// shipped with nvmetcli: no `param`, `ana_groups` or `discovery`.
const LEGACY: &str = "{\n  \"hosts\": [\n    {\n      \"nqn\": \"nqn.2026-01.io.example:h1\"\n    }\n  ], \n  \"ports\": [\n    {\n      \"addr\": {\n        \"adrfam\": \"ipv4\", \n        \"traddr\": \"192.0.2.7\", \n        \"treq\": \"not specified\", \n        \"trsvcid\": \"4420\", \n        \"trtype\": \"rdma\"\n      }, \n      \"portid\": 2, \n      \"referrals\": [], \n      \"subsystems\": [\n        \"nqn.2026-01.io.example:legacy\"\n      ]\n    }\n  ], \n  \"subsystems\": [\n    {\n      \"allowed_hosts\": [\n        \"nqn.2026-01.io.example:h1\"\n      ], \n      \"attr\": {\n        \"allow_any_host\": \"0\"\n      }, \n      \"namespaces\": [\n        {\n          \"device\": {\n            \"nguid\": \"00000000-0000-0000-0000-000000000000\", \n            \"path\": \"/dev/nvme0n1\"\n          }, \n          \"enable\": 1, \n          \"nsid\": 1\n        }\n      ], \n      \"nqn\": \"nqn.2026-01.io.example:legacy\"\n    }\n  ]\n}\n";

fn has_note(imp: &Import, parts: &[&str]) -> bool {
    imp.notes
        .iter()
        .any(|n| parts.iter().all(|p| n.contains(p)))
}

fn c_of(imp: &Import) -> TargetConfig {
    TargetConfig::from_toml(&imp.toml, "import").unwrap()
}

fn assert_note(imp: &Import, parts: &[&str]) {
    assert!(
        has_note(imp, parts),
        "no note contains {parts:?}; notes:\n{}",
        imp.notes.join("\n")
    );
}

fn file(path: &str) -> BackendConfig {
    BackendConfig::File {
        path: PathBuf::from(path),
    }
}

#[test]
fn sample_has_the_exact_shape_of_nvmetcli_save() {
    // nvmetcli: f.write(json.dumps(self.dump(), sort_keys=True, indent=2)); f.write("\n").
    // serde_json's pretty printer with a sorted map writes the same bytes.
    let v: Value = serde_json::from_str(SAMPLE).unwrap();
    assert_eq!(serde_json::to_string_pretty(&v).unwrap() + "\n", SAMPLE);
}

#[test]
fn realistic_sample_converts_and_validates() {
    let imp = import(SAMPLE, "/etc/nvmet/config.json").unwrap();
    let t = &imp.toml;

    // Header and notes.
    assert!(t.starts_with("# nvmf-target configuration imported from the nvmet"));
    assert!(t.contains("/etc/nvmet/config.json"));
    assert!(t.contains("`nvmf-target import-nvmetcli`"));
    let note_lines = t.lines().filter(|l| l.starts_with("# NOTE: ")).count();
    assert_eq!(note_lines, imp.notes.len(), "{t}");
    let first_section = t.find("[[listener]]").unwrap();
    assert!(t.rfind("# NOTE:").unwrap() < first_section);

    // Listeners: the two rdma ports and the TLS one.
    assert_eq!(t.matches("[[listener]]").count(), 3, "{t}");
    assert!(
        t.contains("# nvmet port 3\n[[listener]]\ntransport = \"tcp\"\naddress = \"10.0.2.15\"\nport = 4420\nsecure = \"required\"\n"),
        "{t}"
    );
    // Each subsystem on the listeners of the ports that link it.
    assert!(t.contains(&format!(
        "nqn = \"{OPEN}\"\nallow_any_host = true\nlisteners = [\"rdma:10.0.2.15:4420\", \"rdma:[fd00:0:0:2::15]:4420\"]\n"
    )), "{t}");
    assert!(
        t.contains("]\nlisteners = [\"rdma:10.0.2.15:4420\"]\n"),
        "{t}"
    );
    assert!(t.contains("listeners = [\"tcp:10.0.2.15:4420\"]\n"), "{t}");
    assert!(t.contains(
            "# nvmet port 1\n[[listener]]\ntransport = \"rdma\"\naddress = \"10.0.2.15\"\nport = 4420\n"
        ));
    assert!(t.contains("address = \"fd00:0:0:2::15\"\nport = 4420\n"));

    // Subsystems.
    assert!(t.contains(&format!(
            "[[subsystem]]\nnqn = \"{OPEN}\"\nallow_any_host = true\nlisteners = [\"rdma:10.0.2.15:4420\", \"rdma:[fd00:0:0:2::15]:4420\"]\nserial = \"a1b2c3d4e5f60718\"\nmodel = \"Linux\"\n"
        )));
    assert!(t.contains(&format!(
            "[[subsystem]]\nnqn = \"{RESTRICTED}\"\nallow_any_host = false\nhosts = [\n    \"{H1}\",\n    \"{H2}\",\n]\n"
        )));
    assert!(t.contains("[[subsystem.namespace]]\nnsid = 1\npath = \"/dev/ram0\"\n"));
    assert!(t.contains("[[subsystem.namespace]]\nnsid = 2\npath = \"/srv/nvmet/disk2.img\"\n"));
    assert!(t.contains("# [[subsystem.namespace]]\n# nsid = 5\n# path = \"/srv/nvmet/old.img\"\n"));
    // Nothing unsupported leaks into the sections.
    // ANA: the port's group states, the group nvmet lacks on port 2, the
    // namespace's group.
    assert!(
        t.contains("address = \"10.0.2.15\"\nport = 4420\nana = { \"2\" = \"non-optimized\" }\n"),
        "{t}"
    );
    assert!(
        t.contains(
            "address = \"fd00:0:0:2::15\"\nport = 4420\nana = { \"2\" = \"inaccessible\" }\n"
        ),
        "{t}"
    );
    assert_eq!(t.matches("ana_group = 2\n").count(), 1, "{t}");
    assert!(!t.contains("ana_group = 1"), "{t}");
    // nvmet's identifiers are carried over (a zero NGUID is none).
    assert!(
        t.contains("uuid = \"1f0ee7a2-5b35-4a8e-9e36-0c1b1c1d9a01\"\n"),
        "{t}"
    );
    assert!(
        t.contains("nguid = \"2c7f1e4a-09b3-4d56-8e1f-3a5b7c9d0e14\"\n"),
        "{t}"
    );
    assert!(
        t.contains("uuid = \"5d3e2f10-7c1b-4f3a-8d2e-6b9a0c4e1f03\"\n"),
        "{t}"
    );
    assert!(!t.contains("nguid = \"0000"), "{t}");
    let open = &c_of(&imp).subsystems;
    let n = &open.iter().find(|s| s.nqn == OPEN).unwrap().namespaces[0];
    assert_eq!(n.ids.nguid, Some([0; 16]));
    let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
    let n = &c
        .subsystems
        .iter()
        .find(|s| s.nqn == RESTRICTED)
        .unwrap()
        .namespaces[0];
    assert_eq!(
        n.ids
            .nguid
            .map(|v| crate::model::identity::hex(&v))
            .as_deref(),
        Some("2c7f1e4a09b34d568e1f3a5b7c9d0e14")
    );
    for word in ["firmware", "version ="] {
        let body = &t[first_section..];
        assert!(!body.contains(word), "'{word}' in\n{body}");
    }

    // Notes.
    assert_note(
        &imp,
        &[
            "listener rdma:[fd00:0:0:2::15]:4420",
            "port 2",
            "no ANA group 2",
            "inaccessible",
        ],
    );
    assert!(!imp.notes.iter().any(|n| n.contains("ANA groups are not")));
    assert!(!imp
        .notes
        .iter()
        .any(|n| n.contains("every listener") || n.contains("skipped")));
    assert_note(
        &imp,
        &[STAGING, "namespace 5", "/srv/nvmet/old.img", "disabled"],
    );
    assert!(
        !imp.notes.iter().any(|n| n.contains("device.")),
        "{:?}",
        imp.notes
    );
    // nvmet's zero NGUID: hosts saw none, and see none.
    assert_eq!(t.matches("nguid = \"none\"\n").count(), 3, "{t}");
    // A zero NGUID is "unset", default attributes, the firmware revision,
    // the standard discovery NQN and default port params are not noted.
    assert!(!imp.notes.iter().any(|n| n.contains("nguid 0000")));
    for quiet in [
        "cntlid",
        "version",
        "firmware",
        "qid_max",
        "param.",
        "discovery NQN",
    ] {
        assert!(
            !imp.notes.iter().any(|n| n.contains(quiet)),
            "'{quiet}' noted: {:?}",
            imp.notes
        );
    }
    assert_eq!(imp.notes.len(), 3, "{:#?}", imp.notes);
    assert_note(
        &imp,
        &["listener tcp:10.0.2.15:4420", "port 3", "no ANA group 2"],
    );

    // And our target accepts it.
    let c = TargetConfig::from_toml(t, "import").unwrap();
    let addrs: Vec<String> = c
        .listeners
        .iter()
        .map(|l| format!("{}:{}:{}", l.transport.name(), l.addr, l.secure.name()))
        .collect();
    assert_eq!(
        addrs,
        [
            "rdma:10.0.2.15:4420:none",
            "rdma:[fd00:0:0:2::15]:4420:none",
            "tcp:10.0.2.15:4420:required"
        ]
    );
    let nqns: Vec<&str> = c.subsystems.iter().map(|s| s.nqn.as_str()).collect();
    assert_eq!(nqns, [OPEN, RESTRICTED, STAGING]);
    let open = &c.subsystems[0];
    assert!(open.allow_any_host);
    assert!(open.hosts.is_empty());
    assert_eq!(open.serial.as_deref(), Some("a1b2c3d4e5f60718"));
    assert_eq!(open.model, "Linux");
    let ns: Vec<(u32, &BackendConfig)> = open
        .namespaces
        .iter()
        .map(|n| (n.nsid, &n.backend))
        .collect();
    assert_eq!(
        ns,
        [(1, &file("/dev/ram0")), (2, &file("/srv/nvmet/disk2.img"))]
    );
    assert!(open
        .namespaces
        .iter()
        .all(|n| n.block_size.is_none() && !n.readonly));
    let restricted = &c.subsystems[1];
    assert!(!restricted.allow_any_host);
    assert_eq!(restricted.hosts, [H1, H2]);
    assert_eq!(restricted.serial.as_deref(), Some("0123456789abcdef"));
    assert_eq!(restricted.namespaces.len(), 1);
    assert_eq!(restricted.namespaces[0].backend, file("/dev/nvme1n1"));
    let staging = &c.subsystems[2];
    assert_eq!(
        staging.namespaces.len(),
        1,
        "the disabled namespace is commented out"
    );
    assert_eq!(staging.namespaces[0].nsid, 1);
    assert_eq!(staging.namespaces[0].backend, file("/dev/ram1"));
}

#[test]
fn legacy_python2_dump_converts() {
    let imp = import(LEGACY, "old.json").unwrap();
    assert!(imp.notes.is_empty(), "{:?}", imp.notes);
    assert!(!imp.toml.contains("# NOTE:"));
    let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
    assert_eq!(c.listeners[0].addr, "192.0.2.7:4420".parse().unwrap());
    assert_eq!(c.subsystems[0].nqn, "nqn.2026-01.io.example:legacy");
    assert!(!c.subsystems[0].allow_any_host);
    assert_eq!(c.subsystems[0].hosts, ["nqn.2026-01.io.example:h1"]);
    assert_eq!(c.subsystems[0].serial, None);
    assert_eq!(c.subsystems[0].model, crate::config::DEFAULT_MODEL);
    assert_eq!(c.subsystems[0].namespaces[0].backend, file("/dev/nvme0n1"));
}

#[test]
fn malformed_json_reports_line_and_column() {
    let e = import(
        "{\n  \"ports\": [\n    {\"portid\": 1,}\n  ]\n}\n",
        "bad.json",
    )
    .unwrap_err();
    match &e {
        ImportError::Json { line, column, .. } => {
            assert_eq!(*line, 3);
            assert!(*column > 0);
        }
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.starts_with("bad.json: invalid JSON at line 3, column "),
        "{msg}"
    );
    assert!(
        !msg.contains(" at line 3 column "),
        "position given twice: {msg}"
    );

    let msg = import("", "empty.json").unwrap_err().to_string();
    assert!(msg.contains("empty.json: invalid JSON at line 1"), "{msg}");
    let msg = import("{} trailing", "t.json").unwrap_err().to_string();
    assert!(msg.contains("line 1"), "{msg}");
}

/// Replaces `from` (which must occur) in SAMPLE and imports the result.
fn import_edited(from: &str, to: &str) -> Result<Import, ImportError> {
    assert!(SAMPLE.contains(from), "{from}");
    import(&SAMPLE.replacen(from, to, 1), "c.json")
}

fn bad_edit(from: &str, to: &str, expect: &str) {
    let e = import_edited(from, to).unwrap_err();
    assert!(matches!(e, ImportError::Field { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(expect), "'{msg}' does not contain '{expect}'");
}

#[test]
fn wrong_types_report_the_json_path() {
    let msg = import("[]", "a.json").unwrap_err().to_string();
    assert_eq!(msg, "a.json: top level: expected an object, found an array");
    let msg = import("{\"ports\": {}}", "a.json").unwrap_err().to_string();
    assert_eq!(msg, "a.json: ports: expected an array, found an object");
    bad_edit(
        "\"path\": \"/srv/nvmet/disk2.img\"",
        "\"path\": 7",
        "c.json: subsystems[0].namespaces[1].device.path: expected a string, found a number",
    );
    bad_edit(
        "\"nsid\": 2,",
        "\"nsid\": \"two\",",
        "subsystems[0].namespaces[1].nsid: 'two' is not a non-negative integer",
    );
    bad_edit(
        "\"nsid\": 2,",
        "\"nsid\": -2,",
        "subsystems[0].namespaces[1].nsid: -2 is not a non-negative integer",
    );
    bad_edit(
        "\"allow_any_host\": \"0\"",
        "\"allow_any_host\": \"maybe\"",
        "subsystems[1].attr.allow_any_host: 'maybe' is not 0 or 1",
    );
    bad_edit(
        &format!("\"{H2}\"\n      ],"),
        "42\n      ],",
        "subsystems[1].allowed_hosts[1]: expected a string, found a number",
    );
    bad_edit(
        "\"trsvcid\": \"4420\"",
        "\"trsvcid\": [4420]",
        "ports[0].addr.trsvcid: expected a string, found an array",
    );
    bad_edit(
        "\"trtype\": \"tcp\"",
        "\"trtype\": null",
        "ports[2].addr.trtype: is required",
    );
    bad_edit(
        "\"ana_groups\": [",
        "\"ana_groups\": \"none\", \"x\": [",
        "ports[0].ana_groups: expected an array, found a string",
    );
    bad_edit(
            "\"device\": {\n            \"nguid\": \"00000000-0000-0000-0000-000000000000\",\n            \"path\": \"/dev/ram0\",",
            "\"device\": [], \"x\": {\n            \"nguid\": \"00000000-0000-0000-0000-000000000000\",\n            \"path\": \"/dev/ram0\",",
            "subsystems[0].namespaces[0].device: expected an object, found an array",
        );
    bad_edit(
        "\"nqn\": \"nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0034",
        "\"nqn\": false, \"x\": \"",
        "hosts[0].nqn: expected a string, found a boolean",
    );
}

#[test]
fn missing_required_fields_report_the_json_path() {
    bad_edit(
        "\"path\": \"/srv/nvmet/disk2.img\",",
        "",
        "c.json: subsystems[0].namespaces[1].device.path: is required (the namespace is enabled)",
    );
    bad_edit(
        "\"path\": \"/srv/nvmet/disk2.img\",",
        "\"path\": \"\",",
        "subsystems[0].namespaces[1].device.path: is empty",
    );
    bad_edit(
        "\"nsid\": 2,",
        "",
        "subsystems[0].namespaces[1].nsid: is required",
    );
    bad_edit(
        &format!("\"nqn\": \"{RESTRICTED}\"\n"),
        "\"x\": 1\n",
        "subsystems[1].nqn: is required",
    );
    // A disabled namespace needs no path.
    let imp = import_edited("\"path\": \"/srv/nvmet/old.img\",", "\"path\": \"\",").unwrap();
    assert!(imp
        .toml
        .contains("# nsid = 5\n# path = \"\"  # nvmet had no device path\n"));
    TargetConfig::from_toml(&imp.toml, "import").unwrap();
}

#[test]
fn strings_needing_toml_escaping_round_trip() {
    let nqn = "nqn.2026-01.io.example:q\"uo\\te'd#[x]";
    let path = "/srv/img/ünï \"q\"\\b\ttab\nnl\u{1}.img";
    let model = "Model \"7\" \\x";
    let json = serde_json::json!({
        "ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1",
            "trsvcid": "4420"}, "subsystems": [nqn]}],
        "subsystems": [{"nqn": nqn, "attr": {"allow_any_host": "1", "model": model},
            "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": path}}]}],
    })
    .to_string();
    let imp = import(&json, "/tmp/we\"ird\nname.json").unwrap();
    assert!(imp.notes.is_empty(), "{:?}", imp.notes);
    // The newline of the source name does not end the comment.
    assert!(
        imp.toml.contains("/tmp/we\"ird\\nname.json"),
        "{}",
        imp.toml
    );
    assert!(imp
        .toml
        .contains("path = \"/srv/img/ünï \\\"q\\\"\\\\b\\ttab\\nnl\\u0001.img\""));
    let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
    assert_eq!(c.subsystems[0].nqn, nqn);
    assert_eq!(c.subsystems[0].model, model);
    assert_eq!(c.subsystems[0].namespaces[0].backend, file(path));

    assert_eq!(toml_str("plain"), "\"plain\"");
    assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_eq!(toml_str("\r\u{8}\u{c}\u{7f}"), "\"\\r\\b\\f\\u007F\"");
}

#[test]
fn ports_duplicates_empty_and_unusable() {
    let json = serde_json::json!({
            "ports": [
                {"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"},
                 "subsystems": ["nqn.2026-01.io.example:a"]},
                {"portid": 2, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": 4420},
                 "subsystems": ["nqn.2026-01.io.example:a"]},
                {"portid": 3, "addr": {"trtype": "rdma", "traddr": "2001:db8::1"}, "subsystems": []},
                {"portid": 4, "addr": {"trtype": "rdma", "adrfam": "ib", "traddr": "fe80:0000:0000:0000:0002:c903:0003:1a2b%ib0", "trsvcid": "4420"}},
                {"portid": 5, "addr": {"trtype": "rdma", "traddr": "192.0.2.2", "trsvcid": "70000"}},
                {"portid": 6, "addr": {"trtype": "loop", "traddr": "", "trsvcid": ""}},
                {"addr": {"trtype": "rdma", "traddr": "", "trsvcid": ""}},
                {"portid": 8, "addr": {"trtype": "rdma", "traddr": "192.0.2.3", "trsvcid": "4420"},
                 "subsystems": ["nqn.2026-01.io.example:gone"]},
            ],
            "subsystems": [{"nqn": "nqn.2026-01.io.example:a", "attr": {"allow_any_host": "1"},
                "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/ram0"}}]}],
        })
        .to_string();
    let imp = import(&json, "p.json").unwrap();
    assert_eq!(imp.toml.matches("[[listener]]").count(), 3, "{}", imp.toml);
    assert!(imp.toml.contains("# nvmet port 1, port 2\n[[listener]]"));
    assert_note(
        &imp,
        &["port 2", "192.0.2.1:4420", "port 1", "one listener"],
    );
    assert_note(&imp, &["port 3", "no trsvcid", "4420"]);
    assert_note(&imp, &["port 4", "not an IPv4 or IPv6 address", "skipped"]);
    assert_note(&imp, &["port 5", "'70000'", "skipped"]);
    assert_note(&imp, &["port 6", "'loop'", "skipped"]);
    assert_note(&imp, &["ports[6]", "without an address"]);
    assert_note(
        &imp,
        &["port 8", "nqn.2026-01.io.example:gone", "not defined"],
    );
    let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
    // Port 3 links no subsystem, port 8 only one that is not defined: the
    // subsystem is on the listener of ports 1 and 2 only.
    assert_eq!(
        c.subsystems[0].listeners.as_ref().unwrap()[0].to_string(),
        "rdma:192.0.2.1:4420"
    );
    assert_eq!(c.subsystems[0].listeners.as_ref().unwrap().len(), 1);
    let addrs: Vec<String> = c.listeners.iter().map(|l| l.addr.to_string()).collect();
    assert_eq!(
        addrs,
        ["192.0.2.1:4420", "[2001:db8::1]:4420", "192.0.2.3:4420"]
    );
}

#[test]
fn unsupported_features_are_noted() {
    let json = serde_json::json!({
        "discovery": {"nqn": "nqn.2026-01.io.example:disc"},
        "hosts": [{"nqn": "nqn.2026-01.io.example:h", "dhchap": {
            "key": "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:", "ctrl_key": "",
            "hash": "hmac(sha256)", "dhgroup": "null"}}],
        "ports": [{"portid": 1,
            "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420",
                     "treq": "required"},
            "param": {"inline_data_size": "16384", "pi_enable": "1", "max_queue_size": "128"},
            "referrals": [{"name": "r1", "addr": {"trtype": "rdma", "traddr": "192.0.2.9"}}],
            "subsystems": ["nqn.2026-01.io.example:pt", "nqn.2026-01.io.example:x"]}],
        "subsystems": [
            {"nqn": "nqn.2026-01.io.example:pt", "attr": {"allow_any_host": "1"},
             "passthru": [{"device": {"path": "/dev/nvme0"}, "enable": 1,
                           "admin_timeout": 0, "clear_ids": 1, "io_timeout": 0}]},
            {"nqn": "nqn.2026-01.io.example:x",
             "attr": {"allow_any_host": "0", "cntlid_min": "5", "version": "2.0",
                      "pi_enable": "1"},
             "allowed_hosts": ["nqn.2026-01.io.example:h"],
             "namespaces": [
                 {"nsid": 3, "enable": 1, "device": {"path": "/dev/sdb", "p2pmem": "auto"},
                  "resv": {"enable": "1"}, "buffered_io": "1"},
                 {"nsid": 2000, "enable": 1, "device": {"path": "/dev/sdc"}},
                 {"nsid": 4, "device": {"path": "/dev/sdd"}},
             ]},
            {"nqn": "nqn.2014-08.org.nvmexpress.discovery"},
        ],
    })
    .to_string();
    let imp = import(&json, "u.json").unwrap();
    assert_note(&imp, &["discovery NQN", "nqn.2026-01.io.example:disc"]);
    assert!(
        !imp.notes.iter().any(|n| n.contains("DHHC-1")),
        "a secret in a note"
    );
    assert_note(&imp, &["port 1", "treq 'required'"]);
    assert_note(
        &imp,
        &["port 1", "param.inline_data_size = '16384'", "8192"],
    );
    assert_note(&imp, &["port 1", "param.pi_enable = '1'"]);
    assert!(!has_note(&imp, &["max_queue_size"]), "128 is our value");
    assert_note(&imp, &["port 1", "1 discovery referral(s)"]);
    assert_note(&imp, &[":pt'", "passthru", "/dev/nvme0"]);
    assert_note(&imp, &[":pt'", "exports no (enabled) namespace"]);
    assert_note(&imp, &[":x'", "attr.cntlid_min = '5'"]);
    assert_note(&imp, &[":x'", "attr.version = '2.0'"]);
    assert_note(
        &imp,
        &[":x'", "attr.pi_enable = '1'", "protection information"],
    );
    assert_note(
        &imp,
        &[
            "namespace 3",
            "device.p2pmem auto",
            "reservations",
            "buffered_io 1",
        ],
    );
    assert!(
        !has_note(&imp, &["namespace 3", "new ones"]),
        "no NGUID/UUID"
    );
    assert_note(&imp, &["namespace 2000", "out of nvmf-target's range"]);
    assert_note(&imp, &["namespace 4", "/dev/sdd", "no 'enable'"]);
    assert_note(&imp, &["discovery subsystem", "skipped"]);
    assert!(!imp
        .toml
        .contains("nqn = \"nqn.2014-08.org.nvmexpress.discovery\""));
    assert!(imp.toml.contains("# nsid = 4\n# path = \"/dev/sdd\"\n"));
    // nsid 2000 is emitted as it was and validation names it.
    let e = TargetConfig::from_toml(&imp.toml, "import")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("subsystem[1].namespace[1].nsid: 2000 is out of range"),
        "{e}"
    );
}

#[test]
fn minimal_and_loosely_typed_input_is_accepted() {
    let json = r#"{"ports": [{"addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": 4421},
            "subsystems": ["nqn.2026-01.io.example:m"]}],
          "subsystems": [{"nqn": "nqn.2026-01.io.example:m",
            "attr": {"allow_any_host": true, "serial": 1234},
            "namespaces": [{"nsid": "7", "enable": "1", "device": {"path": "/dev/ram3", "uuid": null}},
                           {"nsid": 2, "enable": true, "device": {"path": "/dev/ram2"}}]}]}"#;
    let imp = import(json, "m.json").unwrap();
    assert!(imp.notes.is_empty(), "{:?}", imp.notes);
    let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
    assert_eq!(c.listeners[0].addr, "192.0.2.1:4421".parse().unwrap());
    let s = &c.subsystems[0];
    assert!(s.allow_any_host);
    assert_eq!(s.serial.as_deref(), Some("1234"));
    let nsids: Vec<u32> = s.namespaces.iter().map(|n| n.nsid).collect();
    assert_eq!(nsids, [2, 7], "sorted by nsid");
}

#[test]
fn empty_configuration_is_converted_and_left_to_validation() {
    let imp = import("{}", "e.json").unwrap();
    assert_note(&imp, &["no usable port"]);
    assert_note(&imp, &["defines no subsystem"]);
    assert!(imp.toml.contains("# [[listener]]\n# transport = \"rdma\""));
    assert!(!imp.toml.contains("\n[[listener]]"));
    // Valid, serving nothing, and the warnings say so.
    let c = TargetConfig::from_toml(&imp.toml, "import").unwrap();
    let fields: Vec<String> = c.warnings().into_iter().map(|w| w.field).collect();
    assert_eq!(fields, ["listener", "subsystem"]);

    // Subsystems but no usable port: the subsystem is on no listener.
    let imp = import(LEGACY.replace("\"rdma\"", "\"loop\"").as_str(), "t.json").unwrap();
    assert_note(&imp, &["transport 'loop'"]);
    assert_note(&imp, &["no usable port"]);
    assert_note(&imp, &["is linked only to port 2 (loop)", "listeners = []"]);
}

#[test]
fn long_notes_are_wrapped_as_comments() {
    let mut out = String::new();
    let text = "word ".repeat(60);
    push_comment(&mut out, "# NOTE:", text.trim());
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() > 2);
    assert!(lines[0].starts_with("# NOTE: word"));
    let cont = format!("#{}word", " ".repeat(7));
    assert!(lines[1..].iter().all(|l| l.starts_with(&cont)), "{out}");
    assert!(lines.iter().all(|l| l.len() <= 100));
    assert_eq!(out.matches("word").count(), 60);
}

#[test]
fn host_keys_are_carried_over() {
    const K: &str = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:";
    let json = |key: &str, ctrl: &str| {
        serde_json::json!({
            "hosts": [
                {"nqn": "nqn.2026-01.io.example:h", "dhchap": {
                    "key": key, "ctrl_key": ctrl, "hash": "hmac(sha512)", "dhgroup": "ffdhe4096"}},
                {"nqn": "nqn.2026-01.io.example:plain", "dhchap": {
                    "key": "", "ctrl_key": "", "hash": "hmac(sha256)", "dhgroup": "null"}}],
            "ports": [{"portid": 1, "addr": {"trtype": "rdma", "traddr": "192.0.2.1", "trsvcid": "4420"},
                       "subsystems": ["nqn.2026-01.io.example:x"]}],
            "subsystems": [{"nqn": "nqn.2026-01.io.example:x", "attr": {"allow_any_host": "0"},
                "allowed_hosts": ["nqn.2026-01.io.example:h", "nqn.2026-01.io.example:plain"],
                "namespaces": [{"nsid": 1, "enable": 1, "device": {"path": "/dev/sdb"}}]}],
        })
        .to_string()
    };
    let imp = import(&json(K, K), "k.json").unwrap();
    assert_note(&imp, &["1 host(s)", "secrets", "root only"]);
    let cfg = crate::config::TargetConfig::from_toml(&imp.toml, "k.toml").unwrap();
    assert_eq!(cfg.hosts.len(), 1, "only the host with a key");
    let h = &cfg.hosts[0];
    assert_eq!(h.nqn, "nqn.2026-01.io.example:h");
    assert_eq!(h.dhchap_key.as_ref().unwrap().to_dhhc().as_str(), K);
    assert!(h.dhchap_ctrl_key.is_some());
    assert_eq!(h.dhchap_hash, dhchap::HashId::Sha512);
    assert_eq!(h.dhchap_dhgroup, dhchap::GroupId::Ffdhe4096);
    // A key nvmet would take but we cannot read: an error at its path, the
    // key not quoted.
    let bad = K.replace("AAEC", "AAED");
    let e = import(&json(&bad, ""), "k.json").unwrap_err().to_string();
    assert!(
        e.contains("hosts[0].dhchap.key") && e.contains("CRC"),
        "{e}"
    );
    assert!(!e.contains("AAED"), "{e}");
    // A controller key without a host key: nvmet does not authenticate.
    let imp = import(&json("", K), "k.json").unwrap();
    assert_note(&imp, &["controller key but no host key"]);
    assert!(!imp.toml.contains("DHHC-1"));
}
