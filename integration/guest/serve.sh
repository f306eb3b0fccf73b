#!/bin/bash
# serve.sh: the demo (integration/demo), cwd = project root, as root. Runs inside the lab
# guest (soft-RoCE on eth0), or on a machine with an RDMA device (LAB_IP/LAB_IF = its
# address and netdev; soft-RoCE is added only when that netdev has no RDMA link): a
# 1 GiB RAM disk, our target exporting it, the kernel NVMe-oF host connected to it with
# nvme-cli, `nvmf-target status`, a short fio run, disconnect, stop.
# Environment (optional): FIO_RUNTIME (5), TARGET_BIN (build/release/nvmf-target), RUST_LOG,
#   DEMO_DISK (default: a 1 GiB brd RAM disk /dev/ram0; a path: a 1 GiB sparse file made
#   there for the demo and removed after).
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
NQN=nqn.2026-11.io.nvmf-lab:demo
PORT=4420
FIO_RUNTIME=${FIO_RUNTIME:-5}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
TLOG=/tmp/nvmf-target.log
DISK=/dev/ram0
[ -n "${DEMO_DISK:-}" ] && DISK=$DEMO_DISK
TPID=
. integration/guest/common.sh
stop_target() {
    [ -n "$TPID" ] || return 0
    kill -TERM "$TPID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$TPID" 2>/dev/null || break; sleep 0.1; done
    local rc=0
    if kill -KILL "$TPID" 2>/dev/null; then echo "target killed (no exit within 10 s of SIGTERM)"; fi
    wait "$TPID" 2>/dev/null || rc=$?
    echo "target exit status $rc"; TPID=
}
print_log() {
    echo "--- target log"; sed 's/\x1b\[[0-9;]*m//g' "$TLOG" 2>/dev/null; echo "--- end of target log"
}
cleanup() {
    local rc=$?
    set +e
    [ $rc = 0 ] && return
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    stop_target
    [ -n "${DEMO_DISK:-}" ] && rm -f "$DISK"
    print_log
    echo "DEMO FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT
. integration/guest/kmsg.sh   # kmsg_check: no I/O error, reset or timeout in the kernel log

step "RDMA on $IF ($IP) (soft-RoCE unless it has a device), 1 GiB disk $DISK"
[ -x "$TARGET_BIN" ] || fail "$TARGET_BIN missing (cargo build --release -p nvmf-target on the host)"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma
rdma link show | grep "netdev $IF\b" >/dev/null || rdma link add rxe0 type rxe netdev "$IF"
rdma link show
if [ -n "${DEMO_DISK:-}" ]; then
    [ -e "$DISK" ] && fail "$DISK exists: the demo makes its own disk (set DEMO_DISK to a new path)"
    truncate -s 1G "$DISK"
else
    [ -e /sys/module/brd ] || modprobe brd rd_nr=1 rd_size=1048576
fi

step "start: $TARGET_BIN --listen $IP:$PORT --nqn $NQN --namespace $DISK"
NO_COLOR=1 "$TARGET_BIN" --listen "$IP:$PORT" --nqn "$NQN" --namespace "$DISK" >"$TLOG" 2>&1 &
TPID=$!
for try in $(seq 40); do
    nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 && break
    kill -0 "$TPID" 2>/dev/null || fail "target exited"
    [ "$try" = 40 ] && { cat /tmp/discover.txt; fail "no discovery answer within 20 s"; }
    sleep 0.5
done
cat /tmp/discover.txt

step "nvme connect -t rdma -a $IP -s $PORT -n $NQN"
nvme connect -t rdma -a "$IP" -s "$PORT" -n "$NQN"
DEV=
for _ in $(seq 300); do
    for s in /sys/class/nvme-subsystem/*/ /sys/class/nvme/*/; do
        [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
        for n in "$s"nvme*n*; do
            [[ ${n##*/} =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/${n##*/}" ] && { DEV=/dev/${n##*/}; break 3; }
        done
    done
    sleep 0.1
done
[ -n "$DEV" ] || fail "no namespace block device appeared"
nvme list
nvme list-subsys

step "nvmf-target status (the daemon's view, over its control socket)"
"$TARGET_BIN" status | tee /tmp/demo-status.txt || fail "nvmf-target status failed"
grep -q "^subsystem $NQN" /tmp/demo-status.txt || fail "nvmf-target status answered for another daemon (is one running?)"

step "fio 4k randrw 70/30 QD32 ${FIO_RUNTIME}s on $DEV"
fio --name=demo --filename="$DEV" --direct=1 --ioengine=libaio --rw=randrw --rwmixread=70 \
    --bs=4k --iodepth=32 --time_based --runtime="$FIO_RUNTIME" --output=/tmp/fio-demo.log \
    || { cat /tmp/fio-demo.log; fail "fio failed"; }
grep -E '^ *(read|write): IOPS=' /tmp/fio-demo.log

step "nvme disconnect, stop the target"
settle
nvme disconnect -n "$NQN"
kmsg_check "the demo"
stop_target
[ -n "${DEMO_DISK:-}" ] && rm -f "$DISK"
print_log
echo "DEMO OK"
