#!/bin/bash
# faults.sh: faults, with the stock kernel host. Runs INSIDE the lab guest
# (integration/run-faults-tests), cwd /lab = project root.
#   1. A backend that fails under the namespace (device-mapper: the middle of a loop device
#      switched to the `error` target, then back): nvmet-rdma and our target in one boot,
#      each alone. Read, write, flush and write zeroes into the failing range must give the
#      same NVMe status from both (or the specification's); the good range must serve
#      meanwhile; the controller must stay live (no reset or timeout in the host's log); once
#      the device heals, the data written before the fault reads back unchanged.
#   2. Our target killed with SIGKILL while fio writes with verify information, restarted
#      3 s later: the host reconnects, fio completes without an error, and a verify pass
#      reads back every block it wrote (acknowledged means on the backing file).
#   3. A host killed mid-I/O (our initiator, SIGKILL during random writes) and a host that
#      stops answering (SIGSTOP: keep-alive expires): the target frees each controller
#      (status --json) within the keep-alive timeout and a margin; the kernel host serves
#      throughout.
#   4. CYCLES (1000) connect / read / shutdown cycles of a whole controller (hostile-probe):
#      every cycle works, and the target's RSS, fds and threads do not grow.
#   5. A host with keep-alive off (KATO 0: hostile-probe; the Linux 6.1 host, asked for 0,
#      still connects with KATO 5 s), quiet for 25 s: it is probed at the RDMA level (a
#      zero-length RDMA WRITE, which a host that vanished would not acknowledge) and keeps
#      its controller; the kernel host, connected meanwhile, sees no error. 5b: such a
#      host whose queue pairs then fall silent (error state, no disconnect: a power loss)
#      is found by the probe and its controller freed within 60 s.
#   6. The RDMA device removed under a connected host (`rdma link delete`) and added back:
#      the removal completes (the kernel waits for every process to close the device: the
#      target must let go of it), the target keeps running with no pinned memory left, it
#      listens again once the device is back, and the host reconnects and reads back what
#      it wrote before. A second soft-RoCE device (on a dummy netdev) stays throughout:
#      librdmacm closes a removed device only while another one is present. Three rounds,
#      on a target started with address-space randomization off: the second round is where
#      librdmacm 44 lost its device list (see rdma::one_malloc_arena) and the target
#      stopped listening.
#   7. A slow backend (device-mapper `delay`, 50 ms) under 4 KiB in-capsule writes at queue
#      depth 128 on each of the host's I/O queues, with a shared receive queue (128) shorter
#      than what those queues may send together: no capsule may find its receive queue
#      empty. The I/O queues get receives of their own (a queue shares the SRQ only while
#      the SRQ has a receive for every capsule of every queue on it), and a receive goes
#      back before its response is sent. A capsule that finds none meets an RNR NAK, and
#      soft-RoCE replays the host's REG_MR when it resends: "rxe_reg_fast_mr: ... not free",
#      error recovery (before: ~50 IOPS, the queue broken; now no RNR at all). nvmet runs the
#      same writes first in the same boot, for comparison (reported, not asserted).
# Output ends with "FAULTS PASS".
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
PORT=4420
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
INI=build/release/nvmf-initiator
PROBE=build/release/examples/hostile-probe
NQN=nqn.2026-11.io.nvmf-lab:faults
IMG=/var/tmp/faults-loop.img
FILE=/var/tmp/faults-file.img
DM=faults
CYCLES=${CYCLES:-1000}
TLOG=/tmp/faults-target.log
TPID= LOOP= PASSED=0 BG= LAUNCH=
. integration/guest/common.sh
. integration/guest/kmsg.sh
. integration/guest/nvmet.sh

cleanup() {
    local rc=$?
    set +e
    [ -n "$BG" ] && kill -9 $BG 2>/dev/null
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    [ -n "$TPID" ] && { kill -TERM "$TPID"; wait "$TPID"; }
    nvmet_unexport "$NQN" 2>/dev/null
    dmsetup remove "$DM" 2>/dev/null
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    if [ $PASSED = 0 ] && [ -f "$TLOG" ]; then echo "--- our target's log (last 30 lines)"; tail -n 30 "$TLOG"; fi
    [ $PASSED = 1 ] || echo "FAULTS FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT

start_own() { # ARGS...: our target in the background, log in $TLOG (liveness probes logged)
    RUST_LOG=info,nvmf_core::queue::timers=debug,nvmf_target::transport::rdma::queue::conn=debug NO_COLOR=1 $LAUNCH "$TARGET_BIN" --listen "$IP:$PORT" --nqn "$NQN" "$@" >>"$TLOG" 2>&1 &
    TPID=$!
    wait_discovery "our target"
}
host_connect() { # [nvme connect options]: the kernel host; sets CTRL, NS
    nvme connect -t rdma -a "$IP" -s "$PORT" -n "$NQN" "$@" >/dev/null || fail "nvme connect failed"
    host_find
}
host_find() { live_ctrl "$NQN"; settle; }
host_disconnect() { settle; nvme disconnect -n "$NQN" >/dev/null; }
resets() { kmsg_errors | grep -ciE 'reset|timeout|error recovery|Reconnecting' || true; }
# io STATUS-OF: nvme io-passthru ARGS -> "SSS" (SCT << 8 | SC, hex) or "host:..."
io_status() {
    local out rc=0 hex
    out=$(timeout 60 nvme io-passthru "$NS" --namespace-id=1 "$@" 2>&1 >/dev/null) || rc=$?
    [ $rc = 0 ] && { echo 000; return; }
    hex=$(grep -oE 'NVMe status: .*\((0x[0-9a-fA-F]+)\)' <<<"$out" | grep -oE '0x[0-9a-fA-F]+' | tail -n1) || true
    [ -n "$hex" ] && { printf '%03x\n' $(( hex & 0x7ff )); return; }
    echo "host:$(tr '\n' ' ' <<<"$out" | cut -c1-40 | tr ' ' '_')"
}
proc_counts() { # PID -> "rss_kib fds threads"
    echo "$(awk '/^VmRSS/ {print $2}' "/proc/$1/status") $(ls "/proc/$1/fd" | wc -l) $(awk '/^Threads/ {print $2}' "/proc/$1/status")"
}

step "setup: soft-RoCE on $IF, a 128 MiB loop device under device-mapper ($DM), a 256 MiB file"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma dm-mod
rdma link show | grep -q "netdev $IF\b" || rdma link add rxe0 type rxe netdev "$IF"
# A second soft-RoCE device, on a dummy netdev, present before any target starts (step 6
# removes the first one; librdmacm lists both at start).
ip link add faults0 type dummy 2>/dev/null || true
ip link set faults0 up
rdma link show | grep -q "netdev faults0\b" || rdma link add rxe9 type rxe netdev faults0
for b in "$TARGET_BIN" "$INI" "$PROBE"; do [ -x "$b" ] || fail "$b missing (cargo build --release)"; done
rm -f "$IMG" "$FILE"; truncate -s 128M "$IMG"; truncate -s 256M "$FILE"
LOOP=$(losetup --find --show --direct-io=on "$IMG")
SECTORS=$(blockdev --getsz "$LOOP")
# The failing range: 32 MiB at 32 MiB (512-byte sectors 65536..131071).
FAIL_START=65536 FAIL_LEN=65536
table_linear() { echo "0 $SECTORS linear $LOOP 0"; }
table_error() {
    echo "0 $FAIL_START linear $LOOP 0"
    echo "$FAIL_START $FAIL_LEN error"
    echo "$((FAIL_START + FAIL_LEN)) $((SECTORS - FAIL_START - FAIL_LEN)) linear $LOOP $((FAIL_START + FAIL_LEN))"
}
dm_load() { # linear|error
    "table_$1" | dmsetup reload "$DM" || fail "dmsetup reload ($1)"
    dmsetup suspend "$DM"; dmsetup resume "$DM"
}
table_linear | dmsetup create "$DM"
DEV=/dev/mapper/$DM
head -c 4M /dev/urandom >/tmp/pattern
dd if=/tmp/pattern of="$DEV" bs=1M seek=36 oflag=direct conv=fsync status=none
info "loop $LOOP ($SECTORS sectors) under $DEV; 4 MiB of data at 36 MiB, inside the range that will fail"

declare -A ST
# case|io-passthru arguments (512-byte blocks; LBA 73728 = 36 MiB, in the failing range)
BCASES=(
"read-failing|--opcode=0x02 --cdw10=73728 --cdw12=7 --data-len=4096 -r"
"write-failing|--opcode=0x01 --cdw10=81920 --cdw12=7 --data-len=4096 -w -i /tmp/pattern"
"write-zeroes-failing|--opcode=0x08 --cdw10=81920 --cdw12=7"
"flush-while-failing|--opcode=0x00"
"read-good-range|--opcode=0x02 --cdw10=0 --cdw12=7 --data-len=4096 -r"
"write-good-range|--opcode=0x01 --cdw10=8 --cdw12=7 --data-len=4096 -w -i /tmp/pattern"
)
# Where ours differs from nvmet 6.1 on purpose: case|our status|why. The store's EIO is a
# media error of the namespace (NVMe base spec, Media and Data Integrity Errors): the host
# names it ("critical medium error") and may retry it. nvmet answers Internal Error (with
# DNR) for any EIO.
declare -A BSPEC=(
    [read-failing]="281|Unrecovered Read Error for a failed read"
    [write-failing]="280|Write Fault for a failed write"
    [write-zeroes-failing]="280|Write Fault for a failed write"
)
for T in kernel own; do
    step "1. [$T] a failing backend: $DEV, the middle 32 MiB switched to dm-error"
    if [ $T = kernel ]; then nvmet_export "$NQN" "$DEV"; else start_own --namespace "$DEV"; fi
    [ $T = kernel ] && wait_discovery "nvmet"
    host_connect
    dm_load error
    kmsg_mark
    for c in "${BCASES[@]}"; do
        IFS='|' read -r n args <<<"$c"
        # shellcheck disable=SC2086
        ST[$T.$n]=$(io_status $args)
        printf '    %-22s %s\n' "$n" "${ST[$T.$n]}"
    done
    [ "$(cat "/sys/class/nvme/$CTRL/state")" = live ] || fail "[$T] the controller left live while the backend failed"
    r=$(resets); [ "$r" = 0 ] || { kmsg_errors | head -n 5; fail "[$T] the failing backend caused resets or timeouts"; }
    dm_load linear
    dd if="$NS" of=/tmp/back bs=1M skip=36 count=4 iflag=direct status=none
    cmp /tmp/pattern /tmp/back || fail "[$T] the data written before the fault changed"
    info "no reset or timeout; the controller stayed live; healed, the data before the fault reads back"
    host_disconnect
    if [ $T = kernel ]; then nvmet_unexport "$NQN"; else own_down; fi
done
bad=0
for c in "${BCASES[@]}"; do
    IFS='|' read -r n _ <<<"$c"
    k=${ST[kernel.$n]} o=${ST[own.$n]}
    if [ -n "${BSPEC[$n]:-}" ]; then
        IFS='|' read -r spec why <<<"${BSPEC[$n]}"
        if [ "$o" = "$spec" ]; then v="ok (spec: $why)"; else v="WRONG: want $spec ($why)"; bad=$((bad + 1)); fi
    elif [ "$o" = "$k" ]; then v=ok
    else v=DIFFERS; bad=$((bad + 1)); fi
    printf '    %-22s nvmet %-8s ours %-8s %s\n' "$n" "$k" "$o" "$v"
done
[ $bad = 0 ] || fail "$bad backend-failure status(es) differ from nvmet"

step "2. our target killed (SIGKILL) while fio writes with verify, restarted 3 s later"
: >"$TLOG"
start_own --namespace "$FILE"
host_connect --reconnect-delay=1 --ctrl-loss-tmo=120
FIO=(fio --name=w --filename="$NS" --rw=randwrite --bs=4k --direct=1 --ioengine=libaio --iodepth=16
     --size=96M --verify=crc32c --verify_state_save=0 --output-format=terse)
kmsg_mark
"${FIO[@]}" --do_verify=0 --rate_iops=2500 >/tmp/fio-w.txt 2>&1 &
BG=$!
sleep 4
kill -9 "$TPID"; wait "$TPID" 2>/dev/null || true; TPID=
kill -0 $BG 2>/dev/null || fail "fio finished before the kill: make it longer"
info "SIGKILL at 4 s, fio still writing"
sleep 3
start_own --namespace "$FILE"
for _ in $(seq 60); do [ "$(cat "/sys/class/nvme/$CTRL/state")" = live ] && break; sleep 0.5; done
[ "$(cat "/sys/class/nvme/$CTRL/state")" = live ] || fail "the host did not reconnect to the restarted target"
info "the host reconnected"
rc=0; wait $BG || rc=$?; BG=
[ $rc = 0 ] || { cat /tmp/fio-w.txt; fail "fio's writes failed across the restart (exit $rc)"; }
werr=$(awk -F';' '$1 == 3 {print $5; exit}' /tmp/fio-w.txt)
[ "${werr:-1}" = 0 ] || { cat /tmp/fio-w.txt; fail "fio reported errors: $werr"; }
rc=0; "${FIO[@]}" --verify_only >/tmp/fio-v.txt 2>&1 || rc=$?
[ $rc = 0 ] || { tail -n 20 /tmp/fio-v.txt; fail "verify after the restart failed (exit $rc)"; }
info "fio wrote 96 MiB across the kill and restart with 0 errors; every block verified"
if kmsg_errors | grep -qE 'I/O Error|I/O error|Buffer I/O|blk_update_request'; then
    kmsg_errors | head -n 5; fail "the host saw I/O errors across the restart"
fi
rec=$(kmsg_errors | grep -ciE 'Reconnecting|reset|error recovery' || true)
[ "$rec" -ge 1 ] || fail "the host's log shows no reconnect: was the target really killed under it?"
info "host log: $rec reconnect/recovery lines, no I/O error"
kmsg_mark

step "3. a host killed mid-I/O, and a host that stops answering (keep-alive)"
H1=nqn.2026-11.io.nvmf-lab:killed H2=nqn.2026-11.io.nvmf-lab:stopped
# Each host its own host ID: an ID belongs to the NQN that uses it (the kernel host holds
# /etc/nvme/hostid), as the Linux host itself requires.
I1=f0000000-2026-4000-8000-0000000000f1 I2=f0000000-2026-4000-8000-0000000000f2
"$INI" perf -a "$IP" -n "$NQN" -q "$H1" -I "$I1" --windows mr --rw randwrite --qd 32 --queues 2 --time 30 >/dev/null 2>&1 &
BG=$!
for _ in $(seq 40); do [ "$(controllers_of "$H1")" = 1 ] && break; sleep 0.25; done
[ "$(controllers_of "$H1")" = 1 ] || fail "the perf host did not connect"
sleep 2
kill -9 $BG 2>/dev/null || true; wait $BG 2>/dev/null || true; BG=
t0=$(date +%s%N); gone=
for _ in $(seq 60); do [ "$(controllers_of "$H1")" = 0 ] && { gone=1; break; }; sleep 0.25; done
[ -n "$gone" ] || fail "the killed host's controller is still there after 15 s"
info "killed host (SIGKILL during writes at QD 32): its controller freed after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
"$INI" connect -a "$IP" -n "$NQN" -q "$H2" -I "$I2" --windows mr -k 5 --watch 60 >/dev/null 2>&1 &
BG=$!
for _ in $(seq 40); do [ "$(controllers_of "$H2")" = 1 ] && break; sleep 0.25; done
[ "$(controllers_of "$H2")" = 1 ] || fail "the keep-alive host did not connect"
kill -STOP $BG
t0=$(date +%s%N); gone=
for _ in $(seq 80); do [ "$(controllers_of "$H2")" = 0 ] && { gone=1; break; }; sleep 0.25; done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
kill -9 $BG; kill -CONT $BG 2>/dev/null || true; wait $BG 2>/dev/null || true; BG=
[ -n "$gone" ] || fail "the stopped host's controller is still there after 20 s (KATO 5 s)"
info "stopped host (SIGSTOP, KATO 5 s): its controller freed after $ms ms"
dd if="$NS" of=/dev/null bs=64k count=64 iflag=direct status=none || fail "the kernel host does not serve"
r=$(resets); [ "$r" = 0 ] || { kmsg_errors | head -n 5; fail "the kernel host saw resets while other hosts died"; }
info "the kernel host served throughout, no reset"

step "4. $CYCLES connect / read / shutdown cycles of a whole controller"
read -r rss0 fd0 th0 <<<"$(proc_counts "$TPID")"
out=$(timeout 900 "$PROBE" cycles "$IP" "$PORT" "$NQN" "$CYCLES" 2>&1) || { echo "$out"; fail "hostile-probe cycles failed"; }
echo "$out" | sed 's/^/    /'
sleep 2
read -r rss1 fd1 th1 <<<"$(proc_counts "$TPID")"
info "target: RSS ${rss0} -> ${rss1} KiB, fds $fd0 -> $fd1, threads $th0 -> $th1"
grep -q "^CYCLES $CYCLES failed 0 " <<<"$out" || fail "some cycles failed"
[ $((fd1 - fd0)) -le 2 ] || fail "fds grew by $((fd1 - fd0)) over $CYCLES cycles"
[ $((th1 - th0)) -le 0 ] || fail "threads grew by $((th1 - th0)) over $CYCLES cycles"
[ $((rss1 - rss0)) -le 8192 ] || fail "RSS grew by $((rss1 - rss0)) KiB over $CYCLES cycles"
r=$(resets); [ "$r" = 0 ] || { kmsg_errors | head -n 5; fail "the kernel host saw resets during the cycles"; }
echo "FAULTS cycles=$CYCLES rss_growth_kib=$((rss1 - rss0)) fd_growth=$((fd1 - fd0)) thread_growth=$((th1 - th0))"

step "5. a host with keep-alive off (KATO 0), quiet for 25 s: probed at the RDMA level, and kept"
kmsg_mark
p0=$(grep -c 'probing the host' "$TLOG" || true)
"$PROBE" kato0 "$IP" "$PORT" "$NQN" 25 >/tmp/kato0.txt 2>&1 &
BG=$!
rc=0; wait $BG || rc=$?; BG=
sed 's/^/    /' /tmp/kato0.txt
[ $rc = 0 ] && grep -q "^KATO0 still connected" /tmp/kato0.txt || fail "hostile-probe's KATO 0 controller did not survive 25 quiet seconds"
p1=$(grep -c 'probing the host' "$TLOG" || true)
[ $((p1 - p0)) -ge 2 ] || fail "$((p1 - p0)) liveness probes in 25 s of a quiet KATO 0 host (want 2: one per 10 s)"
dd if="$NS" of=/dev/null bs=64k count=16 iflag=direct status=none || fail "the kernel host does not serve"
r=$(resets); [ "$r" = 0 ] || { kmsg_errors | head -n 5; fail "the kernel host saw resets meanwhile"; }
info "$((p1 - p0)) probes, each answered; the controller kept; the kernel host undisturbed"

step "5b. a host with keep-alive off (KATO 0) that vanishes: found by the probe, freed"
# hostile-probe's queue pairs go to the error state without a disconnect: nothing of the
# host answers any more (a power loss). Without the RDMA-level probe nothing would ever
# free this controller. Due: the quiet time (10 s), then the probe's retries or, where the
# transport retries forever (soft-RoCE with the retry count 7 the Linux host asks for),
# the probe's 20 s timeout.
PROBE_NQN=nqn.2026-11.io.nvmf-lab:probe
p0=$(grep -c 'probing the host' "$TLOG" || true)
u0=$(grep -c 'host unreachable' "$TLOG" || true)
"$PROBE" vanish "$IP" "$PORT" "$NQN" 90 >/tmp/vanish.txt 2>&1 &
BG=$!
for _ in $(seq 40); do grep -q "^VANISH cntlid" /tmp/vanish.txt && break; sleep 0.25; done
sed 's/^/    /' /tmp/vanish.txt
grep -q "^VANISH cntlid" /tmp/vanish.txt || fail "hostile-probe vanish did not set up its controller"
[ "$(controllers_of "$PROBE_NQN")" = 1 ] || fail "the vanishing host's controller is not there"
t0=$(date +%s%N); gone=
for _ in $(seq 240); do [ "$(controllers_of "$PROBE_NQN")" = 0 ] && { gone=1; break; }; sleep 0.25; done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
kill -9 $BG 2>/dev/null || true; wait $BG 2>/dev/null || true; BG=
[ -n "$gone" ] || fail "the vanished KATO 0 host's controller is still there after 60 s"
p1=$(grep -c 'probing the host' "$TLOG" || true)
[ "$p1" -gt "$p0" ] || fail "the vanished host's controller went without a liveness probe"
u1=$(grep -c 'host unreachable' "$TLOG" || true)
[ "$u1" -gt "$u0" ] || fail "the target freed the vanished host without finding it unreachable"
dd if="$NS" of=/dev/null bs=64k count=16 iflag=direct status=none || fail "the kernel host does not serve"
r=$(resets); [ "$r" = 0 ] || { kmsg_errors | head -n 5; fail "the kernel host saw resets meanwhile"; }
info "vanished host (KATO 0, queue pairs silenced): its controller freed after $ms ms; the kernel host undisturbed"
echo "FAULTS kato0_vanished_freed_ms=$ms"

step "6. the RDMA device removed under a connected host, then added back"
# A fresh target with address-space randomization off: librdmacm 44's device sort (see
# rdma::one_malloc_arena) failed or not by where the heaps landed, so by chance; with the
# layout fixed, a target without the workaround fails round 2 every time.
host_disconnect
own_down
LAUNCH="setarch -R" start_own --namespace "$FILE"
host_connect
dd if=/dev/urandom of=/tmp/pattern bs=64k count=16 status=none
dd if=/tmp/pattern of="$NS" bs=64k seek=100 oflag=direct status=none || fail "writing the pattern failed"
settle
RXE=$(rdma link show | awk -v n="netdev $IF" '$0 ~ n {split($2, a, "/"); print a[1]}')
for round in 1 2 3; do
    pin0=$(awk '/^VmPin/ {print $2}' "/proc/$TPID/status")
    r0=$(grep -c "being removed" "$TLOG" || true)
    b0=$(grep -c "the RDMA device is back" "$TLOG" || true)
    t0=$(date +%s%N)
    rdma link delete "$RXE" &
    DEL=$!
    for _ in $(seq 120); do kill -0 $DEL 2>/dev/null || break; sleep 0.25; done
    if kill -0 $DEL 2>/dev/null; then
        echo "    rdma link delete waits in: $(tr '\n' ' ' </proc/$DEL/stack 2>/dev/null | cut -c1-200)"
        fail "round $round: rdma link delete $RXE did not complete in 30 s: the target still holds the device"
    fi
    wait $DEL || fail "round $round: rdma link delete $RXE failed"
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    kill -0 "$TPID" 2>/dev/null || fail "round $round: our target died when the device was removed"
    for _ in $(seq 40); do [ "$(awk '/^VmPin/ {print $2}' "/proc/$TPID/status")" = 0 ] && break; sleep 0.25; done
    pin1=$(awk '/^VmPin/ {print $2}' "/proc/$TPID/status")
    [ "$pin1" = 0 ] || fail "round $round: the target still pins $pin1 KiB after the device went away"
    [ "$(grep -c "being removed" "$TLOG" || true)" -gt "$r0" ] || fail "round $round: the target did not log the removal"
    rdma link add "$RXE" type rxe netdev "$IF"
    t1=$(date +%s%N)
    for _ in $(seq 40); do [ "$(grep -c "the RDMA device is back" "$TLOG" || true)" -gt "$b0" ] && break; sleep 0.25; done
    [ "$(grep -c "the RDMA device is back" "$TLOG" || true)" -gt "$b0" ] ||
        fail "round $round: the target does not listen again within 10 s of the device coming back"
    back=$(( ($(date +%s%N) - t1) / 1000000 ))
    nvme disconnect -n "$NQN" >/dev/null 2>&1 || true
    kmsg_mark
    host_connect
    cmp <(dd if="$NS" bs=64k skip=100 count=16 iflag=direct status=none) /tmp/pattern ||
        fail "round $round: the data written before the removal does not read back"
    kmsg_check "round $round: reconnect after the device came back"
    info "round $round: rdma link delete $RXE done in $ms ms (VmPin $pin0 -> $pin1 KiB); added back, listening in $back ms; the host reconnected, data intact"
done
fio --name=back --filename="$NS" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
    --size=16M --verify=crc32c --do_verify=1 --output-format=terse >/dev/null 2>&1 ||
    fail "fio verify after the device came back failed"
kmsg_check "I/O after the device came back"
info "after 3 removals: fio verify ok, the target still serving"
# A device the target never served: librdmacm opened it too; the target's periodic device
# sync lets it go.
rdma link delete rxe9 &
DEL=$!
for _ in $(seq 80); do kill -0 $DEL 2>/dev/null || break; sleep 0.25; done
kill -0 $DEL 2>/dev/null && fail "rdma link delete of a device the target never used did not complete in 20 s"
wait $DEL || fail "rdma link delete rxe9 failed"
info "a device the target never used removed as well"

host_disconnect
own_down

step "7. a slow backend (dm-delay 50 ms) under 2 x 128 in-capsule writes, shared receive queue 128"
rnr_naks() { cat /sys/class/infiniband/*/ports/1/hw_counters/rcvd_rnr_err | awk '{ n += $1 } END { print n + 0 }'; }
slow_writes() { # connected host: 10 s of 4k random writes, 2 jobs x QD 128; sets IOPS, RNR
    local r0 out
    r0=$(rnr_naks)
    out=$(fio --name=slow --filename="$NS" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
        --iodepth=128 --numjobs=2 --group_reporting --time_based --runtime=10 \
        --output-format=terse --terse-version=3 2>&1) || fail "fio on the slow backend failed: $out"
    RNR=$(( $(rnr_naks) - r0 ))
    IOPS=$(tail -n1 <<<"$out" | awk -F';' '{print $49}')
}
echo "0 $SECTORS delay $LOOP 0 50" | dmsetup reload "$DM" || fail "dmsetup reload (delay)"
dmsetup suspend "$DM"; dmsetup resume "$DM"
# nvmet first, for comparison in this boot (it has receives per queue, no SRQ).
nvmet_export "$NQN" "$DEV"
host_connect
kmsg_mark
slow_writes
kmsg_check "nvmet: in-capsule writes on a slow backend"
info "nvmet: ${IOPS} write IOPS at 50 ms per write, ${RNR} RNR NAKs"
host_disconnect
nvmet_unexport "$NQN"
SLOWCFG=/tmp/faults-slow.toml
cat >"$SLOWCFG" <<EOF2
[target]
workers = 1
srq_depth = 128
[metrics]
enabled = false
[control]
enabled = false
[[listener]]
address = "$IP"
port = $PORT
[[subsystem]]
nqn = "$NQN"
allow_any_host = true
[[subsystem.namespace]]
path = "$DEV"
EOF2
: >"$TLOG"
RUST_LOG=info,nvmf_core::queue::timers=debug,nvmf_target::transport::rdma::queue::conn=debug NO_COLOR=1 "$TARGET_BIN" -c "$SLOWCFG" >>"$TLOG" 2>&1 &
TPID=$!
wait_discovery "our target"
host_connect
kmsg_mark
slow_writes
own=$(grep -c 'queue accepted qid=[1-9].* srq=false' "$TLOG" || true)
[ "$RNR" = 0 ] || fail "$RNR RNR NAKs: capsules found no receive posted (${IOPS} IOPS)"
kmsg_check "in-capsule writes on a slow backend"
[ "$own" -ge 1 ] || fail "no I/O queue got receives of its own beyond the 128-deep shared receive queue"
info "ours: ${IOPS} write IOPS at 50 ms per write, 0 RNR NAKs; $own I/O queue(s) with receives of their own"
host_disconnect
own_down
dm_load linear
PASSED=1
echo
echo "FAULTS PASS"
