//! What identifies the data of a file or block device, whatever path names
//! it: a disk's WWID or serial (with the partition's number), a device
//! mapper's UUID, a file's inode and birth time. A namespace's identifiers
//! derive from it ([`crate::model::identity`]), so `/dev/sdb` and its
//! `/dev/disk/by-id/` name give the same NGUID, and another disk that takes
//! the name `sdb` after a reboot does not.

use std::fs::Metadata;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The key of the file or device `path` whose metadata is `meta`.
pub fn data_key(path: &Path, meta: &Metadata) -> String {
    if meta.file_type().is_block_device() {
        let (major, minor) = (
            nix::sys::stat::major(meta.rdev()),
            nix::sys::stat::minor(meta.rdev()),
        );
        return block_key(Path::new("/sys"), major, minor, path);
    }
    // An inode number is reused once its file is gone; with its birth time,
    // a file made later at the same path is other data. (Not the device
    // number: a reboot that reorders disks changes it.)
    match meta.created() {
        Ok(t) => {
            let t = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            format!(
                "file:ino={},born={}.{:09}",
                meta.ino(),
                t.as_secs(),
                t.subsec_nanos()
            )
        }
        // No birth time on this file system: only the path is left.
        Err(_) => format!("path:{}", canonical(path)),
    }
}

fn canonical(path: &Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The key of block device `major:minor`, read under `sys` (sysfs).
pub fn block_key(sys: &Path, major: u64, minor: u64, path: &Path) -> String {
    let dev = sys.join(format!("dev/block/{major}:{minor}"));
    let read = |p: &Path| -> Option<String> {
        let v = std::fs::read_to_string(p).ok()?;
        let v = v.trim();
        (!v.is_empty()).then(|| v.to_string())
    };
    // A partition: its disk's identity and its number.
    let (disk, part) = match read(&dev.join("partition")) {
        Some(n) => (dev.join(".."), Some(n)),
        None => (dev.clone(), None),
    };
    let id = [
        ("wwid", "wwid"),
        ("wwid", "device/wwid"),
        ("dm", "dm/uuid"),
        ("md", "md/uuid"),
        ("serial", "serial"),
        ("serial", "device/serial"),
    ]
    .iter()
    .find_map(|(kind, f)| read(&disk.join(f)).map(|v| format!("{kind}:{v}")));
    match (id, part) {
        (Some(id), Some(p)) => format!("{id}/part{p}"),
        (Some(id), None) => id,
        // Nothing names the disk (a RAM disk, a loop device): its kernel
        // name, which such devices keep.
        (None, _) => format!("path:{}", canonical(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sysfs(files: &[(&str, &str)]) -> std::path::PathBuf {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "nvmf-sysfs-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        for (p, v) in files {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        }
        root
    }

    #[test]
    fn a_disk_is_named_by_its_wwid_or_serial_and_a_partition_by_its_number() {
        let sys = sysfs(&[
            ("dev/block/8:16/device/wwid", "naa.5000c500a1b2c3d4\n"),
            ("dev/block/8:16/device/serial", "ZA1B2C3\n"),
            ("dev/block/8:16/p1/partition", "1\n"),
            ("dev/block/259:0/wwid", "eui.0025388b91c0a8f2\n"),
            ("dev/block/253:0/dm/uuid", "LVM-abc\n"),
            ("dev/block/253:1/dm/uuid", "\n"),
            ("dev/block/254:0/serial", "lab-disk\n"),
            ("dev/block/1:0/size", "8192\n"),
        ]);
        // The partition's directory sits under its disk's, as in sysfs.
        std::os::unix::fs::symlink(sys.join("dev/block/8:16/p1"), sys.join("dev/block/8:17"))
            .unwrap();
        let p = Path::new("/nonexistent/x");
        assert_eq!(block_key(&sys, 8, 16, p), "wwid:naa.5000c500a1b2c3d4");
        assert_eq!(block_key(&sys, 8, 17, p), "wwid:naa.5000c500a1b2c3d4/part1");
        assert_eq!(block_key(&sys, 259, 0, p), "wwid:eui.0025388b91c0a8f2");
        assert_eq!(block_key(&sys, 253, 0, p), "dm:LVM-abc");
        assert_eq!(block_key(&sys, 254, 0, p), "serial:lab-disk");
        // Nothing names it (an empty dm uuid, a RAM disk): the kernel name.
        assert_eq!(block_key(&sys, 253, 1, p), "path:/nonexistent/x");
        assert_eq!(block_key(&sys, 1, 0, p), "path:/nonexistent/x");
        let _ = std::fs::remove_dir_all(&sys);
    }

    #[test]
    fn a_file_keeps_its_key_when_renamed() {
        let dir = std::env::temp_dir().join(format!("nvmf-key-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::write(&a, b"x").unwrap();
        let key = |p: &Path| data_key(p, &std::fs::metadata(p).unwrap());
        let before = key(&a);
        std::fs::rename(&a, &b).unwrap();
        assert_eq!(key(&b), before, "renamed");
        std::fs::write(&a, b"x").unwrap();
        assert_ne!(key(&a), before, "another file");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
