//! A namespace's identifiers (NGUID, UUID, EUI-64): set by the operator, or
//! derived from what identifies its data and saved once chosen, so that a
//! new spelling of the same store's path keeps them and other data at the
//! same path gets new ones.
//!
//! The saved choices live in `STATE_DIR/namespaces.json`. Versions before
//! this file derived the identifiers from the path as written; on the first
//! start of this version over such a state directory (its `reservations/`
//! exists, this file does not), namespaces keep those identifiers (hosts
//! connected before the upgrade see the same namespaces after it) and they
//! are saved with the data's key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::namespace::id128;

/// The identifiers the operator set (`nguid`, `uuid`, `eui64`); each unset
/// one is chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetIds {
    /// NGUID (zero: none, as nvmet's default).
    pub nguid: Option<[u8; 16]>,
    /// UUID (zero: none).
    pub uuid: Option<[u8; 16]>,
    /// EUI-64 (none unless set: nothing identifies a store as IEEE's
    /// registry would want).
    pub eui64: Option<[u8; 8]>,
}

/// A namespace's identifiers as hosts see them (zero: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ids {
    /// NGUID.
    pub nguid: [u8; 16],
    /// UUID (RFC 4122 version 4 layout when derived).
    pub uuid: [u8; 16],
    /// EUI-64.
    pub eui64: [u8; 8],
}

impl Ids {
    /// The identifiers derived from `key` for namespace `nsid` of `subnqn`.
    pub fn derived(subnqn: &str, nsid: u32, key: &str) -> Ids {
        let key = format!("{subnqn}/{nsid}/{key}");
        let mut uuid = id128(&format!("uuid:{key}"));
        uuid[6] = (uuid[6] & 0x0F) | 0x40;
        uuid[8] = (uuid[8] & 0x3F) | 0x80;
        Ids {
            nguid: id128(&key),
            uuid,
            eui64: [0; 8],
        }
    }

    /// These with what the operator set in their place.
    pub fn with(mut self, set: &SetIds) -> Ids {
        if let Some(v) = set.nguid {
            self.nguid = v;
        }
        if let Some(v) = set.uuid {
            self.uuid = v;
        }
        if let Some(v) = set.eui64 {
            self.eui64 = v;
        }
        self
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Lower-case hex of `b`, or `none` when it is zero.
pub fn hex_or_none(b: &[u8]) -> String {
    if b.iter().all(|&x| x == 0) {
        "none".into()
    } else {
        hex(b)
    }
}

/// A UUID as RFC 4122 writes it.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h = hex(u);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Parses `N` bytes of hex, allowing `-`, `:` and spaces between digits
/// (nvme-cli, nvmet and RFC 4122 write them so) and a `0x` prefix; `none`
/// is zero, which the wire reads as no such identifier (nvmet's NGUID
/// unless set).
pub fn parse_hex<const N: usize>(text: &str) -> Result<[u8; N], String> {
    if text.trim() == "none" {
        return Ok([0; N]);
    }
    let t = text.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    let digits: Vec<u8> = t
        .bytes()
        .filter(|c| !matches!(c, b'-' | b':' | b' '))
        .collect();
    if digits.len() != 2 * N || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!(
            "'{text}' is not {N} bytes of hex ({} digits, '-' or ':' may separate them)",
            2 * N
        ));
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        let s = std::str::from_utf8(&digits[2 * i..2 * i + 2]).unwrap_or("00");
        *o = u8::from_str_radix(s, 16).unwrap_or(0);
    }
    Ok(out)
}

/// One namespace's saved identifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// What identified its data when they were chosen.
    pub key: String,
    /// NGUID, hex.
    pub nguid: String,
    /// UUID, hex.
    pub uuid: String,
    /// EUI-64, hex (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eui64: Option<String>,
}

impl Saved {
    fn of(key: &str, ids: &Ids) -> Saved {
        Saved {
            key: key.into(),
            nguid: hex(&ids.nguid),
            uuid: hex(&ids.uuid),
            eui64: (ids.eui64 != [0; 8]).then(|| hex(&ids.eui64)),
        }
    }

    fn ids(&self) -> Option<Ids> {
        Some(Ids {
            nguid: parse_hex(&self.nguid).ok()?,
            uuid: parse_hex(&self.uuid).ok()?,
            eui64: match &self.eui64 {
                None => [0; 8],
                Some(e) => parse_hex(e).ok()?,
            },
        })
    }
}

/// The saved identifiers of every namespace, by `SUBNQN NSID`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Book {
    /// Namespaces that have no entry yet take the identifiers versions
    /// before this file gave them (the path as written): set on the first
    /// start over an older version's state, cleared once it has loaded.
    #[serde(default)]
    pub legacy_pending: bool,
    /// The entries.
    #[serde(default)]
    pub namespaces: BTreeMap<String, Saved>,
}

/// What the choice was based on (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Saved before, for the same data.
    Saved,
    /// Derived from the data's key (a new namespace, or new data at it).
    Derived,
    /// Kept from the version before (the path as written).
    Legacy,
}

/// Chooses namespace `nsid`'s identifiers: what the operator set wins;
/// then what was saved for the same data; then, while an upgrade from the
/// path-derived scheme is pending, that scheme (`legacy_key`); then the
/// derivation from the data's `key`. Returns them and updates `book`.
pub fn choose(
    book: &mut Book,
    subnqn: &str,
    nsid: u32,
    set: &SetIds,
    key: &str,
    legacy_key: &str,
) -> (Ids, Basis) {
    let name = format!("{subnqn} {nsid}");
    let saved = book
        .namespaces
        .get(&name)
        .filter(|s| s.key == key)
        .and_then(Saved::ids);
    let (ids, basis) = match saved {
        Some(ids) => (ids, Basis::Saved),
        None if book.legacy_pending && !book.namespaces.contains_key(&name) => {
            (Ids::derived(subnqn, nsid, legacy_key), Basis::Legacy)
        }
        None => (Ids::derived(subnqn, nsid, key), Basis::Derived),
    };
    let ids = ids.with(set);
    book.namespaces.insert(name, Saved::of(key, &ids));
    (ids, basis)
}

/// The file of saved identifiers under a state directory.
pub fn book_path(state_dir: &Path) -> PathBuf {
    state_dir.join("namespaces.json")
}

/// One reader-writer of the book at a time in this process.
static BOOK: Mutex<()> = Mutex::new(());

/// Reads the book (empty when there is none).
pub fn load(state_dir: &Path) -> Result<Book, String> {
    let path = book_path(state_dir);
    match std::fs::read(&path) {
        Ok(t) => serde_json::from_slice(&t).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Book::default()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn save(state_dir: &Path, book: &Book) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = book_path(state_dir);
    let tmp = path.with_extension("json.new");
    let text = serde_json::to_vec_pretty(book).map_err(|e| e.to_string())?;
    let err = |e: std::io::Error| format!("{}: {e}", tmp.display());
    std::fs::create_dir_all(state_dir).map_err(|e| format!("{}: {e}", state_dir.display()))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(&text).map_err(err)?;
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Before namespaces open at start: over the state of a version that
/// derived identifiers from the path (a `reservations/` directory and no
/// book), marks the book so that they keep those.
pub fn prepare(state_dir: &Path) -> Result<(), String> {
    let _g = BOOK.lock().unwrap_or_else(|e| e.into_inner());
    if book_path(state_dir).exists() || !state_dir.join("reservations").is_dir() {
        return Ok(());
    }
    save(
        state_dir,
        &Book {
            legacy_pending: true,
            namespaces: BTreeMap::new(),
        },
    )
}

/// After the namespaces of the start have opened: new namespaces get
/// identifiers derived from their data from now on.
pub fn settle(state_dir: &Path) -> Result<(), String> {
    let _g = BOOK.lock().unwrap_or_else(|e| e.into_inner());
    let mut book = load(state_dir)?;
    if !book.legacy_pending {
        return Ok(());
    }
    book.legacy_pending = false;
    save(state_dir, &book)
}

/// Chooses and saves namespace `nsid`'s identifiers (see [`choose`]); with
/// no state directory, what the operator set over the derivation.
pub fn assign(
    state_dir: Option<&Path>,
    subnqn: &str,
    nsid: u32,
    set: &SetIds,
    key: &str,
    legacy_key: &str,
) -> Result<(Ids, Basis), String> {
    let Some(dir) = state_dir else {
        return Ok((Ids::derived(subnqn, nsid, key).with(set), Basis::Derived));
    };
    let _g = BOOK.lock().unwrap_or_else(|e| e.into_inner());
    let mut book = load(dir)?;
    let before = book.clone();
    let chosen = choose(&mut book, subnqn, nsid, set, key, legacy_key);
    if book != before {
        save(dir, &book)?;
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_forms_parse_and_zero_is_refused() {
        let want = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        for t in [
            "123456789abcdef00102030405060708",
            "12345678-9abc-def0-0102-030405060708",
            "0x123456789ABCDEF00102030405060708",
            " 12:34:56:78:9a:bc:de:f0:01:02:03:04:05:06:07:08 ",
        ] {
            assert_eq!(parse_hex::<16>(t), Ok(want), "{t}");
        }
        assert!(parse_hex::<16>("1234").is_err());
        assert!(parse_hex::<16>("g23456789abcdef00102030405060708").is_err());
        assert_eq!(parse_hex::<8>("00000000-00000000"), Ok([0; 8]));
        assert_eq!(parse_hex::<16>("none"), Ok([0; 16]));
        assert_eq!(
            parse_hex::<8>("0102030405060708"),
            Ok([1, 2, 3, 4, 5, 6, 7, 8])
        );
        assert_eq!(uuid_text(&want), "12345678-9abc-def0-0102-030405060708");
    }

    #[test]
    fn the_same_data_keeps_its_ids_under_a_new_path() {
        let mut book = Book::default();
        let none = SetIds::default();
        let (a, b) = choose(&mut book, "nqn.s", 1, &none, "wwid:naa.1", "/dev/sdb");
        assert_eq!(b, Basis::Derived);
        assert_eq!(a, Ids::derived("nqn.s", 1, "wwid:naa.1"));
        // The legacy key (the path as written) is not looked at again.
        let (again, b) = choose(
            &mut book,
            "nqn.s",
            1,
            &none,
            "wwid:naa.1",
            "/dev/disk/by-id/x",
        );
        assert_eq!((again, b), (a, Basis::Saved));
        // Other data at the same nsid: new identifiers, saved in its place.
        let (other, b) = choose(&mut book, "nqn.s", 1, &none, "wwid:naa.2", "/dev/sdb");
        assert_eq!(b, Basis::Derived);
        assert_ne!(other.nguid, a.nguid);
        assert_ne!(other.uuid, a.uuid);
        assert_eq!(book.namespaces["nqn.s 1"].key, "wwid:naa.2");
        // The same data in another subsystem or at another nsid: other ids.
        let (s2, _) = choose(&mut book, "nqn.t", 1, &none, "wwid:naa.1", "/dev/sdb");
        let (n2, _) = choose(&mut book, "nqn.s", 2, &none, "wwid:naa.1", "/dev/sdb");
        assert!(s2.nguid != a.nguid && n2.nguid != a.nguid && s2.nguid != n2.nguid);
        assert_eq!(a.uuid[6] >> 4, 4, "version 4");
        assert_eq!(a.uuid[8] >> 6, 2, "RFC 4122 variant");
        assert_eq!(a.eui64, [0; 8]);
    }

    #[test]
    fn what_the_operator_sets_wins_and_is_kept() {
        let mut book = Book::default();
        let set = SetIds {
            nguid: Some([7; 16]),
            uuid: None,
            eui64: Some([9; 8]),
        };
        let (ids, _) = choose(&mut book, "nqn.s", 1, &set, "file:x", "/a");
        assert_eq!(ids.nguid, [7; 16]);
        assert_eq!(ids.eui64, [9; 8]);
        assert_eq!(ids.uuid, Ids::derived("nqn.s", 1, "file:x").uuid);
        // Unset later: what was chosen stays.
        let (kept, b) = choose(&mut book, "nqn.s", 1, &SetIds::default(), "file:x", "/b");
        assert_eq!((kept, b), (ids, Basis::Saved));
    }

    #[test]
    fn an_upgrade_keeps_the_path_derived_ids_until_settled() {
        let mut book = Book {
            legacy_pending: true,
            namespaces: BTreeMap::new(),
        };
        let none = SetIds::default();
        let (old, b) = choose(&mut book, "nqn.s", 1, &none, "wwid:naa.1", "/dev/sdb");
        assert_eq!(b, Basis::Legacy);
        assert_eq!(old, Ids::derived("nqn.s", 1, "/dev/sdb"));
        // Renamed after the upgrade: kept, because the data's key was saved.
        book.legacy_pending = false;
        let (renamed, b) = choose(
            &mut book,
            "nqn.s",
            1,
            &none,
            "wwid:naa.1",
            "/dev/disk/by-id/x",
        );
        assert_eq!((renamed, b), (old, Basis::Saved));
        // A namespace added after the upgrade is derived from its data.
        let (new, b) = choose(&mut book, "nqn.s", 2, &none, "wwid:naa.9", "/dev/sdc");
        assert_eq!(
            (new, b),
            (Ids::derived("nqn.s", 2, "wwid:naa.9"), Basis::Derived)
        );
    }

    #[test]
    fn the_book_survives_a_restart_and_prepare_marks_only_an_upgrade() {
        let dir = std::env::temp_dir().join(format!("nvmf-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A fresh state directory: nothing to keep.
        prepare(&dir).unwrap();
        assert!(!book_path(&dir).exists());
        let none = SetIds::default();
        let (a, _) = assign(Some(&dir), "nqn.s", 1, &none, "k1", "/p").unwrap();
        let (b, basis) = assign(Some(&dir), "nqn.s", 1, &none, "k1", "/q").unwrap();
        assert_eq!((a, basis), (b, Basis::Saved));
        // An older version's state: reservations/ and no book.
        let old = dir.join("old");
        std::fs::create_dir_all(old.join("reservations")).unwrap();
        prepare(&old).unwrap();
        let (l, basis) = assign(Some(&old), "nqn.s", 1, &none, "k1", "/p").unwrap();
        assert_eq!((l, basis), (Ids::derived("nqn.s", 1, "/p"), Basis::Legacy));
        settle(&old).unwrap();
        assert!(!load(&old).unwrap().legacy_pending);
        // A second prepare (the next start) changes nothing.
        prepare(&old).unwrap();
        let (n, basis) = assign(Some(&old), "nqn.s", 2, &none, "k2", "/r").unwrap();
        assert_eq!((n, basis), (Ids::derived("nqn.s", 2, "k2"), Basis::Derived));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
