#!/bin/bash
# fs.sh: what the Linux host sends in normal use of a disk — discards, mkfs.xfs,
# mkfs.ext4, mount -o discard, fstrim — against the kernel target (nvmet-rdma) and our
# target in one boot, each alone in its phase, on namespaces that support discard:
#   nsid 1: a loop device (block device; discards punch holes in its backing file)
#   nsid 2: a regular file (discards punch holes in it)
# For each namespace: blkdiscard (whole and a range, checked in the backing file's
# allocation), mkfs.xfs + mount -o discard + files + fstrim + remount + checksums +
# xfs_repair -n, the same with ext4 + e2fsck -fn; the host's kernel log must show no
# I/O error, reset or timeout (kmsg.sh). Runs INSIDE the lab guest
# (integration/run-fs-tests), cwd /lab = project root, as root.
# Environment: FS_TARGETS ("kernel own"), TARGET_BIN (build/release/nvmf-target).
# Output: "=== [t] step" lines, a table per target, "FS PASS" as the last line.
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
PORT=4420
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
NQN=nqn.2026-11.io.nvmf-lab:fs
LOOP_IMG=/var/tmp/fs-loop.img
FILE_IMG=/var/tmp/fs-file.img
SIZE_MB=1024
MNT=/mnt/fs
CONF=/tmp/fs-target.toml
TLOG=/tmp/fs-target.log
TPID= LOOP= PASSED=0 CUR=
. integration/guest/common.sh
. integration/guest/kmsg.sh
. integration/guest/nvmet.sh

cleanup() {
    local rc=$?
    set +eE; trap - ERR
    umount "$MNT" 2>/dev/null
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    if [ $PASSED = 0 ] && [ "$CUR" = own ] && [ -f "$TLOG" ]; then
        echo "--- our target's log (last 40 lines)"; tail -n 40 "$TLOG"
    fi
    [ -n "$TPID" ] && kill -KILL "$TPID" 2>/dev/null
    nvmet_unexport "$NQN" 2>/dev/null
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null
    [ $PASSED = 1 ] || echo "FS FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT

alloc_mb() { echo $(( $(stat -c %b "$1") * 512 / 1048576 )); }   # allocated MiB of a file

# One namespace: DEV on the host, IMG the file that finally holds its blocks.
# Appends a row to ROWS.
exercise() { # label DEV IMG
    local label=$1 dev=$2 img=$3 a0 a1 a2 f n
    local row="$CUR $label"
    step "[$CUR $label] blkdiscard $dev, whole and a range"
    kmsg_mark
    blkdiscard -f "$dev" || fail "blkdiscard $dev failed"
    dd if=/dev/urandom of="$dev" bs=1M count=32 seek=64 oflag=direct status=none
    a0=$(alloc_mb "$img")
    blkdiscard -f -o $(( 64 << 20 )) -l $(( 32 << 20 )) "$dev" || fail "blkdiscard of a range of $dev failed"
    a1=$(alloc_mb "$img")
    info "$img: ${a0} MiB allocated after writing 32 MiB, ${a1} MiB after discarding them"
    [ $(( a0 - a1 )) -ge 24 ] || fail "the discard did not reach $img (allocation ${a0} -> ${a1} MiB)"
    cmp -n $(( 32 << 20 )) -i $(( 64 << 20 )):0 "$dev" /dev/zero >/dev/null 2>&1 \
        || info "(the discarded range does not read back as zeroes: allowed, DLFEAT says so)"
    kmsg_check "blkdiscard on $CUR $label"
    row+=" blkdiscard=ok freed=$(( a0 - a1 ))MiB"

    for fs in xfs ext4; do
        step "[$CUR $label] mkfs.$fs, mount -o discard, files, fstrim, remount, verify, check"
        if [ $fs = xfs ]; then mkfs.xfs -f -q "$dev"; else mkfs.ext4 -F -q "$dev"; fi \
            || fail "mkfs.$fs on $dev failed"
        mkdir -p "$MNT"
        mount -o discard "$dev" "$MNT" || fail "mount -o discard ($fs) failed"
        for f in $(seq 12); do dd if=/dev/urandom of="$MNT/f$f" bs=1M count=4 status=none; done
        sync
        (cd "$MNT" && sha256sum f* >/tmp/fs.sha)
        a0=$(alloc_mb "$img")
        for f in $(seq 1 6); do rm "$MNT/f$f"; done
        sync
        fstrim -v "$MNT" | sed 's/^/    /' || fail "fstrim ($fs) failed"
        # ext4's online discards (issued after the journal commit, from a workqueue) may
        # still be in flight; blocks whose discard is pending are not free yet, so fstrim
        # skipped them. If they are not freed within 5 s, a second fstrim (which trims
        # the groups where blocks were freed since) must do it. A target that drops
        # discards fails either way.
        a1=$(alloc_mb "$img")
        for _ in $(seq 25); do [ $(( a0 - a1 )) -ge 16 ] && break; sleep 0.2; a1=$(alloc_mb "$img"); done
        if [ $(( a0 - a1 )) -lt 16 ]; then
            info "$fs: ${a0} -> ${a1} MiB 5 s after fstrim; fstrim again"
            fstrim -v "$MNT" | sed 's/^/    /' || fail "the second fstrim ($fs) failed"
            for _ in $(seq 25); do [ $(( a0 - a1 )) -ge 16 ] && break; sleep 0.2; a1=$(alloc_mb "$img"); done
        fi
        umount "$MNT"
        mount "$dev" "$MNT" || fail "remount ($fs) failed"
        (cd "$MNT" && grep -E ' f([7-9]|1[0-2])$' /tmp/fs.sha | sha256sum -c --quiet) \
            || fail "files on $fs read back different after remount"
        n=$(ls "$MNT" | grep -c '^f' || true)
        umount "$MNT"
        if [ $fs = xfs ]; then xfs_repair -n "$dev" >/tmp/fsck.log 2>&1; else e2fsck -fn "$dev" >/tmp/fsck.log 2>&1; fi \
            || { cat /tmp/fsck.log; fail "$fs check of $dev found problems"; }
        a2=$(alloc_mb "$img")
        info "$fs: 6 files of 4 MiB verified after remount ($n left), check clean; $img ${a0} -> ${a1} MiB after deleting 24 MiB and fstrim"
        if [ $(( a0 - a1 )) -lt 16 ]; then
            # nvmet is the reference here, not under test: once (in ~20 runs) its ext4 run
            # freed 10 of 24 MiB with the second fstrim trimming nothing. Said, not failed;
            # the same on our target fails.
            [ "$CUR" = kernel ] || fail "online discard/fstrim on $fs did not reach $img (${a0} -> ${a1} MiB)"
            info "NOTE nvmet: online discard/fstrim on $fs freed only $(( a0 - a1 )) of 24 MiB in $img (reference run, not asserted)"
        fi
        kmsg_check "$fs on $CUR $label"
        row+=" $fs=ok trim_freed=$(( a0 - a1 ))MiB"
    done
    ROWS+=("$row")
}

# =====================================================================================
step "setup: soft-RoCE on $IF, a loop device and a file, xfsprogs"
command -v mkfs.xfs >/dev/null || fail "mkfs.xfs missing in the guest image (xfsprogs; rebuild: integration/lab/build-image)"
[ -x "$TARGET_BIN" ] || fail "$TARGET_BIN missing"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma loop
rdma link show | grep -q "netdev $IF\b" || rdma link add rxe0 type rxe netdev "$IF"
rm -f "$LOOP_IMG" "$FILE_IMG"
truncate -s ${SIZE_MB}M "$LOOP_IMG" "$FILE_IMG"
LOOP=$(losetup -f --show "$LOOP_IMG")
info "loop device $LOOP over $LOOP_IMG (discard_max_bytes $(cat /sys/block/${LOOP#/dev/}/queue/discard_max_bytes)), file $FILE_IMG"
ROWS=()

for CUR in ${FS_TARGETS:-kernel own}; do
    step "[$CUR] start the target: nsid 1 = $LOOP, nsid 2 = $FILE_IMG"
    if [ $CUR = kernel ]; then
        nvmet_export "$NQN" "$LOOP" "$FILE_IMG"
    else
        cat >"$CONF" <<TOML
[[listener]]
address = "$IP"
port = $PORT
[[subsystem]]
nqn = "$NQN"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
path = "$LOOP"
[[subsystem.namespace]]
nsid = 2
path = "$FILE_IMG"
TOML
        NO_COLOR=1 "$TARGET_BIN" --config "$CONF" >"$TLOG" 2>&1 &
        TPID=$!
    fi
    wait_discovery "the $CUR target"
    nvme connect -t rdma -a "$IP" -s "$PORT" -n "$NQN" >/dev/null || fail "nvme connect ($CUR) failed"
    for _ in $(seq 100); do ns_dev "$NQN" 1 >/dev/null && ns_dev "$NQN" 2 >/dev/null && break; sleep 0.2; done
    D1=$(ns_dev "$NQN" 1) && D2=$(ns_dev "$NQN" 2) || fail "namespaces of $NQN did not appear"
    info "nsid 1 = $D1 (discard_max_bytes $(cat /sys/block/${D1#/dev/}/queue/discard_max_bytes)), nsid 2 = $D2"
    kmsg_check "connect to $CUR"
    exercise "loop" "$D1" "$LOOP_IMG"
    exercise "file" "$D2" "$FILE_IMG"
    step "[$CUR] disconnect, stop"
    settle
    nvme disconnect -n "$NQN" >/dev/null
    if [ $CUR = kernel ]; then nvmet_unexport "$NQN"; else own_down; fi
    kmsg_check "disconnect from $CUR"
done

step "results (target namespace: what passed, MiB freed in the backing file)"
printf '    %s\n' "${ROWS[@]}"
PASSED=1
echo
echo "FS PASS"
