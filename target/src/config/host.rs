//! `[[host]]`: per-host DH-HMAC-CHAP settings, with the names of nvmet's
//! configfs (`dhchap_key`, `dhchap_ctrl_key`, `dhchap_hash`, `dhchap_dhgroup`),
//! and the host's NVMe/TCP TLS PSK (`tls_key`, `NVMeTLSkey-1:...` as `nvme
//! gen-tls-key` writes it); the keys may be in files of their own
//! (`dhchap_key_file`, `dhchap_ctrl_key_file`, `tls_key_file`), so that the
//! configuration holds no secret.

use std::collections::HashSet;

use dhchap::{GroupId, HashId, Secret};

pub use crate::model::auth::HostConfig;

use super::check_nqn;
use super::ctx::Ctx;
use super::raw::RawHost;

/// nvmet's default hash.
pub const DEFAULT_HASH: HashId = HashId::Sha256;
/// nvmet's default group.
pub const DEFAULT_GROUP: GroupId = GroupId::Null;

/// A DH-HMAC-CHAP secret given in the file (`field`) or in a file of its
/// own (`field_file`).
fn secret(cx: &mut Ctx, field: String, v: Option<String>, file: Option<String>) -> Option<Secret> {
    key(cx, field, v, file, |t| {
        Secret::parse(t).map_err(|e| e.to_string())
    })
}

/// A key given in the file (`field`) or in a file of its own (`field_file`,
/// read now: a reload reads it again), not both, read by `parse`.
fn key<K>(
    cx: &mut Ctx,
    field: String,
    v: Option<String>,
    file: Option<String>,
    parse: impl Fn(&str) -> Result<K, String>,
) -> Option<K> {
    let text = match (v, file) {
        (Some(_), Some(_)) => {
            let name = field.rsplit('.').next().unwrap_or(&field).to_string();
            cx.err(
                format!("{field}_file"),
                format!("{name} is given too: one or the other"),
            );
            return None;
        }
        (Some(v), None) => zeroize::Zeroizing::new(v),
        (None, Some(path)) => match std::fs::read_to_string(&path) {
            Ok(t) => zeroize::Zeroizing::new(t.trim().to_string()),
            Err(e) => {
                cx.err(format!("{field}_file"), format!("{path}: {e}"));
                return None;
            }
        },
        (None, None) => return None,
    };
    match parse(&text) {
        Ok(s) => Some(s),
        Err(e) => {
            // The error says what is wrong without quoting the secret.
            cx.err(field, e);
            None
        }
    }
}

/// Checks every `[[host]]`.
pub(super) fn validate(cx: &mut Ctx, raw: Vec<(usize, RawHost)>) -> Vec<HostConfig> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (i, h) in raw {
        let f = |n: &str| format!("host[{i}].{n}");
        let Some(nqn) = h.nqn else {
            cx.err(f("nqn"), "is required");
            continue;
        };
        if let Err(e) = check_nqn(&nqn) {
            cx.err(f("nqn"), e);
            continue;
        }
        if !seen.insert(nqn.clone()) {
            cx.err(f("nqn"), format!("'{nqn}' has another [[host]] entry"));
            continue;
        }
        let dhchap_key = secret(cx, f("dhchap_key"), h.dhchap_key, h.dhchap_key_file);
        let ctrl_key = secret(
            cx,
            f("dhchap_ctrl_key"),
            h.dhchap_ctrl_key,
            h.dhchap_ctrl_key_file,
        );
        if ctrl_key.is_some() && dhchap_key.is_none() {
            cx.err(
                f("dhchap_ctrl_key"),
                "needs dhchap_key: the target proves its key only to a host that proved its own",
            );
        }
        let hash = match h.dhchap_hash.as_deref() {
            None => DEFAULT_HASH,
            Some(n) => HashId::from_name(n).unwrap_or_else(|| {
                cx.err(
                    f("dhchap_hash"),
                    format!("'{n}' is not one of hmac(sha256), hmac(sha384), hmac(sha512)"),
                );
                DEFAULT_HASH
            }),
        };
        let group = match h.dhchap_dhgroup.as_deref() {
            None => DEFAULT_GROUP,
            Some(n) => GroupId::from_name(n).unwrap_or_else(|| {
                cx.err(
                    f("dhchap_dhgroup"),
                    format!("'{n}' is not one of null, ffdhe2048, ffdhe3072, ffdhe4096, ffdhe6144, ffdhe8192"),
                );
                DEFAULT_GROUP
            }),
        };
        let tls_key = key(cx, f("tls_key"), h.tls_key, h.tls_key_file, |t| {
            tlspsk::ConfiguredPsk::parse(t).map_err(|e| e.to_string())
        });
        let tls_derivation = match h.tls_derivation.as_deref() {
            None => tlspsk::Derivation::Compat,
            Some(n) => tlspsk::Derivation::from_name(n).unwrap_or_else(|| {
                cx.err(
                    f("tls_derivation"),
                    format!("'{n}' is not one of compat, rfc"),
                );
                tlspsk::Derivation::Compat
            }),
        };
        out.push(HostConfig {
            nqn,
            dhchap_key,
            dhchap_ctrl_key: ctrl_key,
            dhchap_hash: hash,
            dhchap_dhgroup: group,
            tls_key,
            tls_derivation,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::TargetConfig;

    const BASE: &str = r#"
[[listener]]
address = "10.0.0.1"
[[subsystem]]
nqn = "nqn.2026-11.io.example:s"
allow_any_host = true
"#;

    fn key() -> String {
        dhchap::Secret::generate(Some(dhchap::HashId::Sha256), 32)
            .unwrap()
            .to_dhhc()
            .to_string()
    }

    #[test]
    fn hosts_with_keys() {
        let (k, ck) = (key(), key());
        let t = format!(
            "{BASE}[[host]]\nnqn = \"nqn.h:a\"\ndhchap_key = \"{k}\"\ndhchap_ctrl_key = \"{ck}\"\n\
             dhchap_hash = \"hmac(sha512)\"\ndhchap_dhgroup = \"ffdhe3072\"\n[[host]]\nnqn = \"nqn.h:b\"\n"
        );
        let c = TargetConfig::from_toml(&t, "t").unwrap();
        assert_eq!(c.hosts.len(), 2);
        let a = &c.hosts[0];
        assert_eq!(a.dhchap_key.as_ref().unwrap().to_dhhc().as_str(), k);
        assert_eq!(a.dhchap_hash, dhchap::HashId::Sha512);
        assert_eq!(a.dhchap_dhgroup, dhchap::GroupId::Ffdhe3072);
        let b = &c.hosts[1];
        assert!(b.dhchap_key.is_none());
        assert_eq!(
            (b.dhchap_hash, b.dhchap_dhgroup),
            (super::DEFAULT_HASH, super::DEFAULT_GROUP)
        );
        // The configuration's debug form never shows a key.
        assert!(!format!("{c:?}").contains(&k[10..30]));
    }

    #[test]
    fn tls_psks_in_the_file_or_their_own_never_shown() {
        const K: &str = "NVMeTLSkey-1:01:VRLbtnN9AQb2WXW3c9+wEf/DRLz0QuLdbYvEhwtdWwNf9LrZ:";
        let dir = std::env::temp_dir().join(format!("nvmf-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("psk");
        std::fs::write(&f, format!("{K}\n")).unwrap();
        let t = format!(
            "{BASE}[[host]]\nnqn = \"nqn.h:a\"\ntls_key = \"{K}\"\n[[host]]\nnqn = \"nqn.h:b\"\ntls_key_file = \"{}\"\n",
            f.display()
        );
        let c = TargetConfig::from_toml(&t, "t").unwrap();
        let want = tlspsk::ConfiguredPsk::parse(K).unwrap();
        assert_eq!(c.hosts[0].tls_key.as_ref(), Some(&want));
        assert_eq!(c.hosts[1].tls_key.as_ref(), Some(&want));
        assert!(!format!("{c:?}").contains("VRLb"));
        let shown = crate::config::edit::without_secrets(&t).unwrap();
        assert!(!shown.contains("VRLb"), "{shown}");
        let bad = t.replace("VRLbtnN9", "VRLbtnN8");
        let e = TargetConfig::from_toml(&bad, "t").unwrap_err().to_string();
        assert!(
            e.contains("host[0].tls_key: the key's CRC-32 does not match"),
            "{e}"
        );
        assert!(!e.contains("VRLb"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refusals_name_the_field_not_the_key() {
        let k = key();
        let mut bad = k.clone().into_bytes();
        bad[12] = if bad[12] == b'A' { b'B' } else { b'A' };
        let bad = String::from_utf8(bad).unwrap();
        let t = format!(
            "{BASE}[[host]]\nnqn = \"nqn.h:a\"\ndhchap_key = \"{bad}\"\ndhchap_hash = \"md5\"\n\
             dhchap_dhgroup = \"modp2048\"\n[[host]]\nnqn = \"nqn.h:a\"\n[[host]]\nnqn = \"nqn.h:c\"\n\
             dhchap_ctrl_key = \"{k}\"\n[[host]]\nnqn = \"nqn.h:d\"\ndhchap_key = \"DHHC-1:00:abc\"\n"
        );
        let e = TargetConfig::from_toml(&t, "t").unwrap_err().to_string();
        for want in [
            "host[0].dhchap_key: the key's CRC-32 does not match",
            "host[0].dhchap_hash: 'md5' is not one of",
            "host[0].dhchap_dhgroup: 'modp2048' is not one of",
            "host[1].nqn: 'nqn.h:a' has another [[host]] entry",
            "host[2].dhchap_ctrl_key: needs dhchap_key",
            "host[3].dhchap_key: not a DHHC-1 secret",
        ] {
            assert!(e.contains(want), "{want} not in {e}");
        }
        assert!(!e.contains(&bad[10..30]) && !e.contains(&k[10..30]));
    }

    /// Issue 38, 9: a syntax error on a line with a key does not quote it
    /// (check-config's output goes to terminals and the journal).
    #[test]
    fn a_syntax_error_never_quotes_a_secret() {
        let k = "DHHC-1:00:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWa2y3yE:";
        for text in [
            format!("[[host]]\nnqn = \"nqn.h:a\"\ndhchap_key = \"{k}\n"),
            format!("[[host]]\nnqn = \"nqn.h:a\"\ndhchap_ctrl_key = {k}\n"),
            format!("[[host]]\nnqn = \"nqn.h:a\" x = \"{k}\"\n"),
        ] {
            let e = crate::config::TargetConfig::from_toml(&text, "t.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("TOML parse error") || e.contains("t.toml"),
                "{e}"
            );
            assert!(!e.contains("MDEyMzQ1"), "{e}");
        }
    }

    /// Issue 38, 9: keys in files of their own.
    #[test]
    fn host_keys_from_files() {
        let dir = std::env::temp_dir().join(format!("nvmf-keyfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let k = dhchap::Secret::generate(Some(dhchap::HashId::Sha256), 32)
            .unwrap()
            .to_dhhc()
            .to_string();
        let path = dir.join("host1.key");
        std::fs::write(&path, format!("{k}\n")).unwrap();
        let base = BASE;
        let t = format!(
            "{base}\n[[host]]\nnqn = \"nqn.h:a\"\ndhchap_key_file = \"{}\"\n",
            path.display()
        );
        let c = crate::config::TargetConfig::from_toml(&t, "t.toml").unwrap();
        assert_eq!(
            c.hosts[0].dhchap_key.as_ref().unwrap().to_dhhc().as_str(),
            k
        );
        let both = format!("{t}dhchap_key = \"{k}\"\n");
        let e = crate::config::TargetConfig::from_toml(&both, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("host[0].dhchap_key_file: dhchap_key is given too"),
            "{e}"
        );
        let missing = t.replace("host1.key", "nope.key");
        let e = crate::config::TargetConfig::from_toml(&missing, "t.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("host[0].dhchap_key_file:") && e.contains("nope.key"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
