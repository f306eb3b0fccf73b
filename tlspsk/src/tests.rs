//! Known answers from libnvme's test/psk.c (interchange format, version 1
//! identities in both derivations) and SPDK's unit tests (version 0
//! identity), and what a target must refuse.

use super::*;

const KEY32: [u8; 32] = [
    0x55, 0x12, 0xDB, 0xB6, 0x73, 0x7D, 0x01, 0x06, 0xF6, 0x59, 0x75, 0xB7, 0x73, 0xDF, 0xB0, 0x11,
    0xFF, 0xC3, 0x44, 0xBC, 0xF4, 0x42, 0xE2, 0xDD, 0x6D, 0x8B, 0xC4, 0x87, 0x0B, 0x5D, 0x5B, 0x03,
];

fn key48() -> Vec<u8> {
    let mut k = KEY32.to_vec();
    k.extend_from_slice(&KEY32[16..]);
    k
}

const HOST: &str = "nqn.psk-test-host";
const SUB: &str = "nqn.psk-test-subsys";

#[test]
fn the_interchange_format_as_libnvme_writes_it() {
    for (hh, key, text) in [
        (
            None,
            KEY32.to_vec(),
            "NVMeTLSkey-1:00:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
        ),
        (
            Some(PskHash::Sha256),
            KEY32.to_vec(),
            "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:",
        ),
        (
            Some(PskHash::Sha384),
            key48(),
            "NVMeTLSkey-1:02:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwP/w0S89ELi3W2LxIcLXVsDn8kXZQ==:",
        ),
    ] {
        let p = ConfiguredPsk::parse(text).unwrap();
        assert_eq!(p, ConfiguredPsk::new(hh, &key).unwrap());
        assert_eq!(p.to_interchange().as_str(), text);
        assert_eq!(p.hash().len(), key.len());
    }
    assert!(!format!("{:?}", ConfiguredPsk::new(None, &KEY32).unwrap()).contains("55"));
}

#[test]
fn bad_keys_are_refused_without_quoting_them() {
    let good = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
    assert_eq!(
        ConfiguredPsk::parse("DHHC-1:01:abc:"),
        Err(PskError::Format)
    );
    assert_eq!(
        ConfiguredPsk::parse(&good.replace(":01:", ":03:")),
        Err(PskError::Hash("03".into()))
    );
    // A SHA-384 PSK must be 48 bytes.
    assert_eq!(
        ConfiguredPsk::parse(&good.replace(":01:", ":02:")),
        Err(PskError::Length(32))
    );
    assert_eq!(
        ConfiguredPsk::parse(&good.replace("VRLb", "VRLc")),
        Err(PskError::Crc)
    );
    assert_eq!(
        ConfiguredPsk::parse(&good.replace("VRLb", "VR!b")),
        Err(PskError::Base64)
    );
    assert_eq!(
        ConfiguredPsk::parse(good.trim_end_matches(':')),
        Err(PskError::Format)
    );
    assert!(ConfiguredPsk::new(Some(PskHash::Sha384), &KEY32).is_err());
}

#[test]
fn version_1_identities_as_libnvme_derives_them_in_both_derivations() {
    for (d, hash, key, digest) in [
        (
            Derivation::Rfc,
            PskHash::Sha256,
            KEY32.to_vec(),
            "iSbjiStwJ/1TrTvDlt2fjFmzvsytOJelidNnA+X5lEU=",
        ),
        (
            Derivation::Rfc,
            PskHash::Sha384,
            key48(),
            "QhW2+Rp6RzHlNtCslyRxMnwJ11tKKhz8JCAQpQ+XUD8f9td1VeH5h53yz2wKJG1a",
        ),
        (
            Derivation::Compat,
            PskHash::Sha256,
            KEY32.to_vec(),
            "66GuqV08TsAGII39teWUfwQwizjv06Jy8jOcX3NAAzM=",
        ),
        (
            Derivation::Compat,
            PskHash::Sha384,
            key48(),
            "RsKmYJ3nAn1ApjjMloJFbAkLPivONDAX/xW327YBUsn2eGShXSjCZvBaOxscLqmz",
        ),
    ] {
        let p = ConfiguredPsk::new(Some(hash), &key).unwrap();
        let (id, host_key) = p.host_psk(HOST, SUB, 1, d).unwrap();
        let text = format!("NVMe1R{:02} {HOST} {SUB} {digest}", hash.code());
        assert_eq!(id.to_string(), text, "{d:?} {hash:?}");
        assert_eq!(Identity::parse(text.as_bytes()).unwrap(), id);
        assert_eq!(host_key.len(), hash.len());
        // The target finds the derivation by the digest, and the same key.
        let (target_key, found) = p.server_psk(&id, &Derivation::ALL).unwrap();
        assert_eq!((target_key, found), (host_key, d));
        // Told only the other derivation, it refuses.
        let other: Vec<Derivation> = Derivation::ALL.into_iter().filter(|x| *x != d).collect();
        assert_eq!(p.server_psk(&id, &other), Err(PskError::Digest));
        // Another key: no digest matches.
        let mut k2 = key.clone();
        k2[0] ^= 1;
        let p2 = ConfiguredPsk::new(Some(hash), &k2).unwrap();
        assert_eq!(p2.server_psk(&id, &Derivation::ALL), Err(PskError::Digest));
    }
}

#[test]
fn version_0_identities_and_the_two_derivations() {
    let id =
        Identity::parse(b"NVMe0R01 nqn.2016-06.io.spdk:host1 nqn.2016-06.io.spdk:cnode1").unwrap();
    assert_eq!(
        (id.version, id.hash, id.digest.as_deref()),
        (0, PskHash::Sha256, None)
    );
    let p = ConfiguredPsk::new(Some(PskHash::Sha256), &KEY32).unwrap();
    let (host_id, host_key) = p
        .host_psk(&id.hostnqn, &id.subnqn, 0, Derivation::Compat)
        .unwrap();
    assert_eq!(host_id, id);
    // Nothing in a version 0 identity says which: the first one given.
    assert_eq!(
        p.server_psk(&id, &[Derivation::Compat]).unwrap(),
        (host_key.clone(), Derivation::Compat)
    );
    let (rfc, _) = p.server_psk(&id, &[Derivation::Rfc]).unwrap();
    assert_ne!(rfc, host_key, "the derivations differ");
    // An untransformed PSK is its own retained PSK: both derivations agree
    // on it, not on the TLS PSK.
    let raw = ConfiguredPsk::new(None, &KEY32).unwrap();
    assert_eq!(
        raw.retained(HOST, Derivation::Rfc).unwrap(),
        raw.retained(HOST, Derivation::Compat).unwrap()
    );
}

#[test]
fn identities_from_a_peer_are_bounded_and_exact() {
    let d44 = "A".repeat(43) + "=";
    let ok = format!("NVMe1R01 h s {d44}");
    assert!(Identity::parse(ok.as_bytes()).is_ok());
    for bad in [
        "".to_string(),
        "NVMe0R01 h".to_string(),
        "NVMe0R01 h s extra".to_string(),
        "NVMe1R01 h s".to_string(),
        format!("NVMe1R01 h s {d44}x"),
        format!("NVMe1R02 h s {d44}"),
        "NVMe2R01 h s".to_string(),
        "NVMe0R03 h s".to_string(),
        "NVMe0X01 h s".to_string(),
        "NVMe0R01  s".to_string(),
        format!("NVMe0R01 {} s", "h".repeat(224)),
        format!("NVMe0R01 h s{}", " ".repeat(600)),
        "NVMe0R01 h\u{e9} s".to_string(),
        "NVMe0R01 h\n s".to_string(),
        "NVMe0R01 h\x1b[2J s".to_string(),
    ] {
        assert_eq!(
            Identity::parse(bad.as_bytes()),
            Err(PskError::Identity),
            "{bad:?}"
        );
    }
    assert_eq!(Identity::parse(b"NVMe1G01 h s x"), Err(PskError::Generated));
    // A SHA-384 identity against a SHA-256 key.
    let p = ConfiguredPsk::new(None, &KEY32).unwrap();
    let id = Identity::parse(b"NVMe0R02 h s").unwrap();
    assert_eq!(
        p.server_psk(&id, &Derivation::ALL),
        Err(PskError::HashMismatch {
            asked: 48,
            have: 32
        })
    );
}

#[test]
fn nqns_too_long_for_a_label_are_refused_not_truncated() {
    let p = ConfiguredPsk::new(Some(PskHash::Sha256), &KEY32).unwrap();
    let long = "n".repeat(223);
    // The v0 identity of two long NQNs is past the 255 bytes of a label's
    // context.
    assert_eq!(
        p.host_psk(&long, &long, 0, Derivation::Rfc).map(|_| ()),
        Err(PskError::TooLong)
    );
    assert!(p.host_psk(&long, &long, 1, Derivation::Rfc).is_ok());
}
