#!/bin/bash
# e2e.sh: end-to-end test of an NVMe-oF/RDMA target. Runs INSIDE the lab guest
# (integration/lab/run-guest), cwd /lab = project root, as root. Soft-RoCE (rdma_rxe on
# eth0), the kernel nvme-rdma initiator and nvme-cli, all in the same guest.
#
#   TARGET=own     (default) our binary build/release/nvmf-target --config <generated>
#   TARGET=kernel  the kernel target (nvmet + nvmet-rdma via configfs) with the same
#                  subsystems: validates this script and gives the performance baseline
#
# Host side: integration/run-tests [--kernel], or directly:
#   integration/lab/run-guest -t 900 -e TARGET=kernel . integration/guest/e2e.sh
#
# Exported subsystems (both targets):
#   nqn.2026-11.io.nvmf-lab:open        any host; ns1 = /dev/ram0 (brd, 512 MiB),
#                                       ns2 = /var/tmp/ns2.img (file, 512 MiB, guest ext4 root)
#   nqn.2026-11.io.nvmf-lab:restricted  only nqn.2026-11.io.nvmf-lab:host-allowed;
#                                       ns1 = null backend, 1G
#
# E2E_DEVICE=second: everything goes through a second soft-RoCE device instead, rxe1 on
# a dummy netdev (10.99.0.1), created beside rxe0 (a server with a dual-port adapter has
# two devices; the target's workers serve every device).
#
# E2E_QUICK=1: the same steps on less data (48 MiB fio passes, a small tree for ext4), for
# the repeat runs of test-all (a second device, the current host) whose point is the path.
#
# E2E_TRANSPORT=tcp: everything over NVMe/TCP (the kernel's nvme-tcp host; nvmet-tcp for
# TARGET=kernel) instead of RDMA; no soft-RoCE is needed.
#
# Environment (optional): TARGET, E2E_DEVICE (first), E2E_QUICK (0), E2E_TRANSPORT (rdma),
#   FIO_RUNTIME (perf seconds per job, 10),
#   FIO_ENGINE (libaio), TARGET_BIN (build/release/nvmf-target), RUST_LOG (passed on),
#   E2E_OUT (folder for logs, /lab/integration/out; ignored when not writable).
# Output: "=== [t] step" lines, "FAIL: ..." on failure, the target log, then
#   RESULT target=<own|kernel> randread_iops=N randwrite_iops=N
#   E2E PASS target=<own|kernel>                   (last line on success)
set -euo pipefail

TARGET=${TARGET:-own}
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
E2E_DEVICE=${E2E_DEVICE:-first}
PORT=4420
FIO_RUNTIME=${FIO_RUNTIME:-10}
E2E_QUICK=${E2E_QUICK:-0}
TR=${E2E_TRANSPORT:-rdma}
DATA=128M
[ "$E2E_QUICK" = 1 ] && DATA=48M
FIO_ENGINE=${FIO_ENGINE:-libaio}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
E2E_OUT=${E2E_OUT:-/lab/integration/out}

NQN_OPEN=nqn.2026-11.io.nvmf-lab:open
NQN_RESTRICTED=nqn.2026-11.io.nvmf-lab:restricted
NQN_MISSING=nqn.2026-11.io.nvmf-lab:does-not-exist
HOST_ALLOWED=nqn.2026-11.io.nvmf-lab:host-allowed
# a host ID of its own for the allowed host NQN: the kernel host refuses a second host
# NQN with the same host ID as one in use ("duplicate host NQN ... or host ID")
HOSTID_ALLOWED=2b6a3c47-2026-4b11-9e2d-6e766d662d31
SIZE=$(( 512 * 1024 * 1024 ))
NS2_FILE=/var/tmp/ns2.img
MNT=/mnt/t
CONF=/tmp/nvmf-target.toml
TLOG=/tmp/nvmf-target.log
CFG=/sys/kernel/config/nvmet
TPID=
PASSED=0
. integration/guest/common.sh


case $TARGET in own|kernel) ;; *) fail "TARGET must be own or kernel (got '$TARGET')" ;; esac
case $E2E_DEVICE in first) ;; second) IP=10.99.0.1 ;; *) fail "E2E_DEVICE must be first or second (got '$E2E_DEVICE')" ;; esac
case $TR in rdma|tcp) ;; *) fail "E2E_TRANSPORT must be rdma or tcp (got '$TR')" ;; esac
[ "$TR" = tcp ] && [ "$E2E_DEVICE" = second ] && fail "E2E_DEVICE=second is an RDMA device"

. integration/guest/kmsg.sh   # kmsg_check: no I/O error, reset or timeout in the kernel log
dmesg_mark() { dmesg | wc -l; }
dmesg_since() { dmesg | tail -n +$(( $1 + 1 )); }

# --- device lookup -------------------------------------------------------------------
# live controller (nvmeX) of the transport under test of a subsystem NQN
ctrl_of() {
    local c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        [ "$(cat "$c/transport" 2>/dev/null)" = "$TR" ] || continue
        [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
        echo "${c##*/}"; return 0
    done
    return 1
}
# nsid of a namespace block device (sysfs attribute, else nvme-cli)
nsid_of() {
    local id
    if id=$(cat "/sys/block/$1/nsid" 2>/dev/null); then echo "$id"; return 0; fi
    id=$(nvme get-ns-id "/dev/$1" 2>/dev/null | grep -oE '(0x)?[0-9a-f]+$') || return 1
    echo $(( id ))
}
# namespace block device (nvmeXnY: multipath head or, without native multipath, the
# per-controller disk) of subsystem NQN $1 with nsid $2
ns_of() {
    local s n name
    for s in /sys/class/nvme-subsystem/*/ /sys/class/nvme/*/; do
        [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        for n in "$s"nvme*n*; do
            name=${n##*/}
            [[ $name =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/$name" ] || continue
            [ "$(nsid_of "$name")" = "$2" ] && { echo "$name"; return 0; }
        done
    done
    return 1
}
# wait (30 s) until subsystem $1 has a live controller and namespaces $2...; sets CTRL, NSDEV[nsid]
declare -A NSDEV
wait_ns() {
    local nqn=$1 id ok; shift
    for _ in $(seq 300); do
        ok=1
        CTRL=$(ctrl_of "$nqn") || ok=0
        for id in "$@"; do
            NSDEV[$id]=$(ns_of "$nqn" "$id") || { ok=0; break; }
            [ "$(blockdev --getsize64 "/dev/${NSDEV[$id]}" 2>/dev/null || echo 0)" -gt 0 ] || ok=0
        done
        [ $ok = 1 ] && { info "$nqn: controller /dev/$CTRL, namespaces $(for id in "$@"; do printf 'nsid %s=/dev/%s ' "$id" "${NSDEV[$id]}"; done)"; return 0; }
        sleep 0.1
    done
    nvme list || true
    ls -l /sys/class/nvme-subsystem/*/ /sys/class/nvme/ 2>/dev/null || true
    fail "$nqn: no live controller with namespaces $* within 30 s of connect"
}
connect_open() {
    nvme connect -t "$TR" -a "$IP" -s "$PORT" -n "$NQN_OPEN" || fail "nvme connect $NQN_OPEN failed"
    wait_ns "$NQN_OPEN" 1 2
    NS1=/dev/${NSDEV[1]} NS2=/dev/${NSDEV[2]}
}
disconnect() {
    settle
    nvme disconnect -n "$1" || fail "nvme disconnect -n $1 failed"
    for _ in $(seq 100); do ctrl_of "$1" >/dev/null || return 0; sleep 0.1; done
    fail "controller of $1 still present after nvme disconnect"
}

# --- fio helpers ---------------------------------------------------------------------
# fio_run NAME DEV ARGS...: runs fio, prints its IOPS/bandwidth lines, FAIL with the log on error
fio_run() {
    local name=$1 dev=$2; shift 2
    local out=/tmp/fio-$name.log
    if ! fio --name="$name" --filename="$dev" --direct=1 --ioengine="$FIO_ENGINE" \
            --verify_state_save=0 --output="$out" "$@"; then
        cat "$out" 2>/dev/null || true
        fail "fio $name on $dev failed ($*)"
    fi
    grep -E '^ *(read|write): IOPS=' "$out" | sed "s/^ */    $name: /"
    if grep -qE 'err= *[1-9]|verify:.*bad|crc32c: verify failed' "$out"; then
        cat "$out"; fail "fio $name reported errors"
    fi
}
VERIFY=(--verify=crc32c --verify_fatal=1 --verify_dump=0)

# --- teardown ------------------------------------------------------------------------
stop_own_target() {
    [ -n "$TPID" ] || return 0
    local rc=0 i
    kill -TERM "$TPID" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$TPID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$TPID" 2>/dev/null; then
        kill -KILL "$TPID" 2>/dev/null || true; wait "$TPID" 2>/dev/null || true; TPID=
        echo "target did not exit within 10 s of SIGTERM (killed)"; return 1
    fi
    wait "$TPID" || rc=$?
    TPID=
    echo "target exited with status $rc"
    [ $rc = 0 ]
}
kernel_teardown() {
    [ -d "$CFG" ] || return 0
    local p s n
    for p in "$CFG"/ports/*/; do
        [ -d "$p" ] || continue
        for s in "$p"subsystems/*; do [ -L "$s" ] && rm -f "$s"; done
        rmdir "$p" 2>/dev/null || true
    done
    for s in "$CFG"/subsystems/*/; do
        [ -d "$s" ] || continue
        for n in "$s"allowed_hosts/*; do [ -L "$n" ] && rm -f "$n"; done
        for n in "$s"namespaces/*/; do
            [ -d "$n" ] || continue
            echo 0 >"$n/enable" 2>/dev/null || true; rmdir "$n" 2>/dev/null || true
        done
        rmdir "$s" 2>/dev/null || true
    done
    for n in "$CFG"/hosts/*/; do [ -d "$n" ] && { rmdir "$n" 2>/dev/null || true; }; done
    return 0
}
LOG_PRINTED=0
print_target_log() {
    [ $LOG_PRINTED = 0 ] || return 0
    LOG_PRINTED=1
    echo "--- target log ($TARGET)"
    if [ "$TARGET" = kernel ]; then
        dmesg | grep -E 'nvmet' | tail -n 40 || true
    elif [ -f "$TLOG" ]; then
        local n; n=$(wc -l <"$TLOG")
        if [ "$n" -le 400 ]; then sed 's/\x1b\[[0-9;]*m//g' "$TLOG"
        else
            head -n 100 "$TLOG" | sed 's/\x1b\[[0-9;]*m//g'
            echo "... ($(( n - 400 )) lines skipped, full log in $E2E_OUT/nvmf-target.log) ..."
            tail -n 300 "$TLOG" | sed 's/\x1b\[[0-9;]*m//g'
        fi
    fi
    echo "--- end of target log"
    if mkdir -p "$E2E_OUT" 2>/dev/null && [ -w "$E2E_OUT" ]; then
        [ -f "$TLOG" ] && cp "$TLOG" "$E2E_OUT/nvmf-target.log" 2>/dev/null
        dmesg >"$E2E_OUT/dmesg-$TARGET.log" 2>/dev/null || true
    fi
    return 0
}
cleanup() {
    local rc=$?
    set +eE; trap - ERR
    mountpoint -q "$MNT" && umount "$MNT"
    for n in "$NQN_OPEN" "$NQN_RESTRICTED" "$NQN_MISSING"; do nvme disconnect -n "$n" >/dev/null 2>&1; done
    if [ $PASSED = 0 ]; then
        echo; echo "--- dmesg (nvme/rdma, last 40 lines)"
        dmesg | grep -iE 'nvme|rdma|rxe|infiniband' | tail -n 40
        stop_own_target
        print_target_log
    fi
    [ "$TARGET" = kernel ] && kernel_teardown
    [ $rc = 0 ] || echo "E2E FAILED target=$TARGET (exit $rc) after $(( ($(date +%s%N) - T0) / 1000000000 ))s"
    exit $rc
}
trap cleanup EXIT

# =====================================================================================
step "setup: modules, soft-RoCE on $IF (and rxe1 on a dummy netdev with E2E_DEVICE=second), target address $IP, backing stores (TARGET=$TARGET, transport $TR)"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvme-tcp
rdma link show | grep "netdev $IF\b" >/dev/null || rdma link add rxe0 type rxe netdev "$IF"
if [ "$E2E_DEVICE" = second ]; then
    modprobe dummy
    ip link add e2e1 type dummy 2>/dev/null || true
    ip addr add "$IP/24" dev e2e1 2>/dev/null || true
    ip link set e2e1 up
    rdma link show | grep "netdev e2e1\b" >/dev/null || rdma link add rxe1 type rxe netdev e2e1
fi
rdma link show
info "kernel $(uname -r), $(nvme version), $(fio --version), memlock $(ulimit -l)"
[ -s /etc/nvme/hostnqn ] || { mkdir -p /etc/nvme; nvme gen-hostnqn >/etc/nvme/hostnqn; }
HOSTNQN=$(cat /etc/nvme/hostnqn)
info "default host NQN: $HOSTNQN"
[ -e /sys/module/brd ] || modprobe brd rd_nr=1 rd_size=$(( SIZE / 1024 ))
[ "$(blockdev --getsize64 /dev/ram0)" = $SIZE ] || fail "/dev/ram0 is not 512 MiB (brd already loaded with other parameters?)"
rm -f "$NS2_FILE"; truncate -s $SIZE "$NS2_FILE"
ls -l /dev/ram0 "$NS2_FILE"

if [ "$TARGET" = own ]; then
    step "start own target: $TARGET_BIN --config $CONF"
    [ -x "$TARGET_BIN" ] || fail "$TARGET_BIN missing or not executable (cargo build --release -p nvmf-target on the host)"
    cat >"$CONF" <<EOF
[[listener]]
transport = "$TR"
address = "$IP"
port = $PORT

[[subsystem]]
nqn = "$NQN_OPEN"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
path = "/dev/ram0"
[[subsystem.namespace]]
nsid = 2
path = "$NS2_FILE"

[[subsystem]]
nqn = "$NQN_RESTRICTED"
allow_any_host = false
hosts = ["$HOST_ALLOWED"]
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1G"
EOF
    cat "$CONF"
    # NO_COLOR: plain tracing output (the log is checked for " ERROR ")
    NO_COLOR=1 "$TARGET_BIN" --config "$CONF" >"$TLOG" 2>&1 &
    TPID=$!
    sleep 0.5
    kill -0 "$TPID" 2>/dev/null || { cat "$TLOG"; fail "target exited right after start"; }
else
    step "kernel target: nvmet configfs with the same subsystems"
    modprobe -a nvmet nvmet-rdma nvmet-tcp
    [ -e /sys/module/null_blk ] || modprobe null_blk nr_devices=1 gb=1
    [ -b /dev/nullb0 ] || fail "/dev/nullb0 missing (null_blk)"
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
    kernel_teardown  # leftovers of an earlier run in the same boot
    mk_ns() { # subsys nsid path
        mkdir "$CFG/subsystems/$1/namespaces/$2"
        echo -n "$3" >"$CFG/subsystems/$1/namespaces/$2/device_path"
        echo 1 >"$CFG/subsystems/$1/namespaces/$2/enable"
    }
    mkdir "$CFG/subsystems/$NQN_OPEN"
    echo 1 >"$CFG/subsystems/$NQN_OPEN/attr_allow_any_host"
    mk_ns "$NQN_OPEN" 1 /dev/ram0
    mk_ns "$NQN_OPEN" 2 "$NS2_FILE"   # file backend, O_DIRECT (ext4 root)
    mkdir "$CFG/subsystems/$NQN_RESTRICTED"
    echo 0 >"$CFG/subsystems/$NQN_RESTRICTED/attr_allow_any_host"
    mkdir "$CFG/hosts/$HOST_ALLOWED"
    ln -s "$CFG/hosts/$HOST_ALLOWED" "$CFG/subsystems/$NQN_RESTRICTED/allowed_hosts/$HOST_ALLOWED"
    mk_ns "$NQN_RESTRICTED" 1 /dev/nullb0
    mkdir "$CFG/ports/1"
    echo "$TR" >"$CFG/ports/1/addr_trtype"
    echo ipv4 >"$CFG/ports/1/addr_adrfam"
    echo "$IP" >"$CFG/ports/1/addr_traddr"
    echo "$PORT" >"$CFG/ports/1/addr_trsvcid"
    ln -s "$CFG/subsystems/$NQN_OPEN" "$CFG/ports/1/subsystems/$NQN_OPEN"
    ln -s "$CFG/subsystems/$NQN_RESTRICTED" "$CFG/ports/1/subsystems/$NQN_RESTRICTED"
    dmesg | grep nvmet | tail -n 3 || true
fi

step "wait for the target: nvme discover (up to 20 s)"
for try in $(seq 40); do
    nvme discover -t "$TR" -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 && break
    [ -n "$TPID" ] && ! kill -0 "$TPID" 2>/dev/null && { cat /tmp/discover.txt; fail "target exited"; }
    [ "$try" = 40 ] && { cat /tmp/discover.txt; fail "nvme discover did not succeed within 20 s"; }
    sleep 0.5
done
info "discovery answered after $try attempt(s)"

# =====================================================================================
step "test 1: discovery log filtered by host NQN"
discovered() { # hostnqn [hostid] -> subsystem NQNs of the discovery log
    local args=(-t "$TR" -a "$IP" -s "$PORT" --hostnqn="$1")
    [ -n "${2:-}" ] && args+=(--hostid="$2")
    nvme discover "${args[@]}" >/tmp/discover.txt 2>&1 || { cat /tmp/discover.txt; fail "nvme discover --hostnqn=$1 failed"; }
    awk '/^subnqn:/ {print $2}' /tmp/discover.txt
}
D=$(discovered "$HOSTNQN")
cat /tmp/discover.txt
grep -qxF "$NQN_OPEN" <<<"$D" || fail "discovery for $HOSTNQN does not list $NQN_OPEN"
grep -qxF "$NQN_RESTRICTED" <<<"$D" && fail "discovery for $HOSTNQN lists $NQN_RESTRICTED (host not allowed)"
info "default host sees: $(echo $D)"
D=$(discovered "$HOST_ALLOWED" "$HOSTID_ALLOWED")
grep -qxF "$NQN_OPEN" <<<"$D" || { cat /tmp/discover.txt; fail "discovery for $HOST_ALLOWED does not list $NQN_OPEN"; }
grep -qxF "$NQN_RESTRICTED" <<<"$D" || { cat /tmp/discover.txt; fail "discovery for $HOST_ALLOWED does not list $NQN_RESTRICTED"; }
grep -B6 -A1 "subnqn: *$NQN_RESTRICTED" /tmp/discover.txt | grep -E 'trtype|traddr|trsvcid' | sed 's/^/    /' || true
info "allowed host sees: $(echo $D)"

# =====================================================================================
step "test 2: connect $NQN_OPEN, identify"
connect_open
nvme list
for id in 1 2; do
    dev=/dev/${NSDEV[$id]}
    sz=$(blockdev --getsize64 "$dev")
    info "nsid $id: $dev $sz bytes, /sys/block/${NSDEV[$id]}/nsid $( [ -e "/sys/block/${NSDEV[$id]}/nsid" ] && echo exists || echo MISSING)"
    [ "$sz" = $SIZE ] || fail "nsid $id ($dev): size $sz, expected $SIZE"
done
nvme id-ctrl "/dev/$CTRL" >/tmp/id-ctrl.txt || fail "nvme id-ctrl /dev/$CTRL failed"
grep -E '^(vid|ssvid|sn|mn|fr|rab|ieee|cmic|mdts|cntlid|ver|oaes|ctratt|cntrltype|oacs|acl|aerl|lpa|elpe|kas|sqes|cqes|maxcmd|nn|oncs|fuses|vwc|sgls|subnqn|ioccsz|iorcsz|icdoff|fcatt|msdbd|ofcs) ' /tmp/id-ctrl.txt | sed 's/^/    /' || true
SUBNQN=$(sed -n 's/^subnqn *: *//p' /tmp/id-ctrl.txt | head -n 1 | sed 's/[[:space:]]*$//')
[ "$SUBNQN" = "$NQN_OPEN" ] || fail "id-ctrl subnqn is '$SUBNQN', expected $NQN_OPEN"
info "controller attributes: $(cd "/sys/class/nvme/$CTRL" && for a in transport address cntlid state queue_count sqsize; do printf '%s=%s ' "$a" "$(cat $a 2>/dev/null)"; done)"
grep -q "traddr=$IP" "/sys/class/nvme/$CTRL/address" || fail "controller address is not traddr=$IP"
for id in 1 2; do
    dev=/dev/${NSDEV[$id]}
    nvme id-ns "$dev" >/tmp/id-ns.txt || fail "nvme id-ns $dev failed"
    nsze=$(awk -F: '/^nsze/ {gsub(/[ \t]/, "", $2); print $2; exit}' /tmp/id-ns.txt)
    lbads=$(sed -n 's/.*lbads:\([0-9]*\).*(in use).*/\1/p' /tmp/id-ns.txt | head -1)
    [ -n "$nsze" ] && [ -n "$lbads" ] || { cat /tmp/id-ns.txt; fail "id-ns $dev: cannot parse nsze/lbaf in use"; }
    info "nsid $id id-ns: $(grep -E '^(nsze|ncap|nuse|nsfeat|nlbaf|flbas|dlfeat|nmic) ' /tmp/id-ns.txt | tr -s ' ' | tr '\n' ' ')$(grep '(in use)' /tmp/id-ns.txt | tr -s ' ')"
    [ $(( nsze * (1 << lbads) )) = $SIZE ] || fail "nsid $id: nsze $nsze * 2^$lbads != $SIZE"
done
nvme list-subsys >/tmp/list-subsys.txt || fail "nvme list-subsys failed"
cat /tmp/list-subsys.txt
grep -A4 -F "$NQN_OPEN" /tmp/list-subsys.txt | grep -E "$TR.*traddr=$IP" >/dev/null \
    || fail "nvme list-subsys does not show a $TR path traddr=$IP for $NQN_OPEN"

# =====================================================================================
step "test 3a: fio randwrite + crc32c verify on nsid 1 ($DATA, 4k, QD32)"
fio_run verify-4k "$NS1" --rw=randwrite --bs=4k --iodepth=32 --size=$DATA "${VERIFY[@]}" --do_verify=1
step "test 3b: fio randwrite + crc32c verify on nsid 1 ($DATA, 128k, QD32)"
fio_run verify-128k "$NS1" --rw=randwrite --bs=128k --iodepth=32 --size=$DATA "${VERIFY[@]}" --do_verify=1
step "test 3c: separate write pass then read-back verify pass on nsid 1 ($DATA, 16k)"
RB=(--rw=randwrite --bs=16k --iodepth=32 --size=$DATA --randseed=20261121 "${VERIFY[@]}")
fio_run write-pass "$NS1" "${RB[@]}" --do_verify=0
fio_run readback-pass "$NS1" "${RB[@]}" --verify_only=1
grep -qE 'read: IOPS=' /tmp/fio-readback-pass.log || fail "read-back pass did not read"
step "test 3d: fio randwrite + crc32c verify on nsid 2 (file backend, 64 MiB, 4k)"
fio_run verify-ns2 "$NS2" --rw=randwrite --bs=4k --iodepth=32 --size=64M "${VERIFY[@]}" --do_verify=1

step "test 3e: ext4 on nsid 2: mkfs, copy a tree, fsck, remount, compare"
mkfs.ext4 -q -F "$NS2"
mkdir -p "$MNT"
mount "$NS2" "$MNT"
TREE=()
SRC=(usr/lib/python3.11 usr/share/doc usr/lib/x86_64-linux-gnu/perl-base)   # disjoint trees
[ "$E2E_QUICK" = 1 ] && SRC=(usr/lib/x86_64-linux-gnu/perl-base usr/share/doc)
for d in "${SRC[@]}"; do
    [ -d "/$d" ] && TREE+=("$d")
done
[ ${#TREE[@]} -gt 0 ] || fail "no source tree to copy"
(cd / && find "${TREE[@]}" -type f -print0 | sort -z | xargs -0 sha256sum) >/tmp/src-sums
(cd / && cp -a --parents "${TREE[@]}" "$MNT"/)
sync
(cd "$MNT" && find "${TREE[@]}" -type f -print0 | sort -z | xargs -0 sha256sum) >/tmp/sums
cmp -s /tmp/src-sums /tmp/sums || { diff /tmp/src-sums /tmp/sums | head; fail "copied tree differs from the source"; }
info "copied ${TREE[*]}: $(wc -l </tmp/sums) files, $(du -sm "$MNT" | cut -f1) MiB; $(df -h "$MNT" | awk 'NR==2 {print $3 " used of " $2}')"
umount "$MNT"
echo 3 >/proc/sys/vm/drop_caches
fsck.ext4 -f -n "$NS2" >/tmp/fsck.txt 2>&1 || { cat /tmp/fsck.txt; fail "fsck.ext4 -f -n $NS2 found problems"; }
tail -n 1 /tmp/fsck.txt | sed 's/^/    fsck: /'
mount "$NS2" "$MNT"
(cd "$MNT" && find "${TREE[@]}" -type f -print0 | sort -z | xargs -0 sha256sum) >/tmp/sums2
cmp -s /tmp/sums /tmp/sums2 || { diff /tmp/sums /tmp/sums2 | head; fail "checksums differ after remount"; }
umount "$MNT"
info "checksums match after remount"

# =====================================================================================
step "test 4: disconnect, reconnect, data persists"
head -c 4M /dev/urandom >/tmp/pattern
dd if=/tmp/pattern of="$NS1" bs=1M oflag=direct status=none
disconnect "$NQN_OPEN"
info "disconnected"
connect_open
info "reconnected"
dd if="$NS1" of=/tmp/readback bs=1M count=4 iflag=direct status=none
cmp /tmp/pattern /tmp/readback || fail "4 MiB pattern at offset 0 of nsid 1 differs after reconnect"
info "nsid 1: 4 MiB pattern intact"
mount "$NS2" "$MNT"
(cd "$MNT" && find "${TREE[@]}" -type f -print0 | sort -z | xargs -0 sha256sum) >/tmp/sums3
cmp -s /tmp/sums /tmp/sums3 || { diff /tmp/sums /tmp/sums3 | head; fail "nsid 2: checksums differ after reconnect"; }
umount "$MNT"
info "nsid 2: filesystem mounts, $(wc -l </tmp/sums3) checksums match"
rm -f /tmp/pattern /tmp/readback
disconnect "$NQN_OPEN"

# =====================================================================================
kmsg_check "tests 1-4 (discovery, connect, fio verify, ext4, reconnect)"
step "test 5: access control"
M=$(dmesg_mark)
if nvme connect -t "$TR" -a "$IP" -s "$PORT" -n "$NQN_RESTRICTED" >/tmp/connect.txt 2>&1; then
    fail "connect to $NQN_RESTRICTED with host $HOSTNQN succeeded (must be refused)"
fi
info "refused as expected: $(tr '\n' ' ' </tmp/connect.txt)"
dmesg_since "$M" | grep -iE 'nvme' | tail -n 5 | sed 's/^/    dmesg: /' || true
dmesg_since "$M" | grep -E "Connect for subsystem .* is not allowed" >/dev/null \
    || fail "no 'Connect for subsystem ... is not allowed' in dmesg (expected status 0x184, Connect Invalid Host)"

M=$(dmesg_mark)
if nvme connect -t "$TR" -a "$IP" -s "$PORT" -n "$NQN_MISSING" >/tmp/connect.txt 2>&1; then
    fail "connect to $NQN_MISSING succeeded"
fi
info "refused as expected: $(tr '\n' ' ' </tmp/connect.txt)"
dmesg_since "$M" | grep -iE 'nvme' | tail -n 5 | sed 's/^/    dmesg: /' || true
dmesg_since "$M" | grep -E 'Connect Invalid Data Parameter, subsysnqn' >/dev/null \
    || fail "no 'Connect Invalid Data Parameter, subsysnqn' in dmesg (expected status 0x182 with IATTR=1, IPO=256)"

kmsg_mark   # the refused connects above log their failures
nvme connect -t "$TR" -a "$IP" -s "$PORT" -n "$NQN_RESTRICTED" --hostnqn="$HOST_ALLOWED" --hostid="$HOSTID_ALLOWED" \
    || fail "connect to $NQN_RESTRICTED as $HOST_ALLOWED failed"
wait_ns "$NQN_RESTRICTED" 1
R1=/dev/${NSDEV[1]}
info "restricted nsid 1: $R1, $(blockdev --getsize64 "$R1") bytes"
dd if="$R1" of=/dev/null bs=1M count=1 iflag=direct status=none || fail "1 MiB read from $R1 failed"
info "1 MiB read OK"
disconnect "$NQN_RESTRICTED"

connect_open
fio_run verify-after-acl "$NS1" --rw=randwrite --bs=4k --iodepth=16 --size=16M "${VERIFY[@]}" --do_verify=1

# =====================================================================================
declare -A IOPS
perf() { # name rw
    local out=/tmp/fio-$1.log
    fio --name="$1" --filename="$NS1" --direct=1 --ioengine="$FIO_ENGINE" --rw="$2" \
        --bs=4k --iodepth=32 --numjobs=1 --time_based --runtime="$FIO_RUNTIME" \
        --group_reporting --output-format=normal,terse --terse-version=3 --output="$out" \
        || { cat "$out"; fail "fio $1 failed"; }
    grep -E '^ *(read|write): IOPS=' "$out" | sed "s/^ */    $1: /"
    grep -E '^ *lat \([mun]sec\): min' "$out" | head -1 | sed "s/^ */    $1: /" || true
    # terse v3: field 8 = read IOPS, field 49 = write IOPS
    IOPS[$1]=$(awk -F';' '/^3;/ {print ($8 > 0 ? $8 : $49)}' "$out")
}
step "test 6: perf (informative) fio 4k randread QD32 ${FIO_RUNTIME}s on nsid 1"
perf randread randread
step "test 6: perf (informative) fio 4k randwrite QD32 ${FIO_RUNTIME}s on nsid 1"
perf randwrite randwrite

# =====================================================================================
step "teardown"
disconnect "$NQN_OPEN"
kmsg_check "test 5 (allowed host), test 6 (perf) and disconnect"
if [ "$TARGET" = own ]; then
    stop_own_target || fail "target did not stop on SIGTERM"
fi
print_target_log
if [ "$TARGET" = own ]; then
    sed 's/\x1b\[[0-9;]*m//g' "$TLOG" >/tmp/nvmf-target.plain.log
    # tracing's level field: " ERROR " (or at the start of the line without timestamps)
    if grep -nE '(^|[[:space:]])ERROR[[:space:]]' /tmp/nvmf-target.plain.log; then fail "target log has ERROR lines (above)"; fi
    STATS=$(grep -E 'STATS .*send_with_inv=' /tmp/nvmf-target.plain.log | tail -n 1) \
        || fail "no 'STATS ... send_with_inv=N ... in_capsule_writes=M' line in the target log"
    info "last stats: ${STATS#*STATS }"
    swi=$(grep -oE 'send_with_inv=[0-9]+' <<<"$STATS" | cut -d= -f2) || true
    icw=$(grep -oE 'in_capsule_writes=[0-9]+' <<<"$STATS" | cut -d= -f2) || true
    [ "${icw:-0}" -gt 0 ] || fail "in_capsule_writes=${icw:-missing}: expected > 0 (in-capsule data unused)"
    if [ "$TR" = rdma ]; then
        [ "${swi:-0}" -gt 0 ] || fail "send_with_inv=${swi:-missing}: expected > 0 (remote invalidation unused)"
        # soft-RoCE is a software device: send_offload = "auto" hands the sends of large
        # reads (the 128k verify of test 3b) to poster threads, so that path was verified too
        grep -q 'offload_sends=true' /tmp/nvmf-target.plain.log \
            || fail "send_offload auto did not take soft-RoCE for a software device"
        ofs=$(grep -oE 'offloaded_batches=[0-9]+' <<<"$STATS" | cut -d= -f2) || true
        [ "${ofs:-0}" -gt 0 ] || fail "offloaded_batches=${ofs:-missing}: expected > 0 (large reads not offloaded)"
    fi
else
    kernel_teardown
    LEFT=$(find "$CFG/subsystems" "$CFG/ports" "$CFG/hosts" -mindepth 1 -maxdepth 1 2>/dev/null)
    [ -z "$LEFT" ] || fail "nvmet configfs objects left after teardown: $(echo $LEFT)"
fi
rm -f "$NS2_FILE"
PASSED=1
echo "RESULT target=$TARGET randread_iops=${IOPS[randread]} randwrite_iops=${IOPS[randwrite]}"
echo "E2E PASS target=$TARGET"
