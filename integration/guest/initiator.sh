#!/bin/bash
# initiator.sh: tests of our initiator (nvmf-initiator, and the mw-probe window
# security peer). Runs INSIDE the lab guest (integration/lab/run-guest), cwd = project
# root, as root. Both targets run in this same boot, one after the other, on the same
# brd disk, so their numbers compare:
#   own     build/release/nvmf-target
#   kernel  nvmet + nvmet-rdma (configfs)
# Per target: discover, connect/identify, write 64 MiB of random data and read it back
# (memory windows) and 16 MiB more with memory regions, flush, then perf for PERF_TIME
# seconds: randread and randwrite with windows, randread with regions on 2 queues; raw
# mode cases with the status our target must give; with nvmet, a namespace-changed
# asynchronous event. Every perf run
# must show no errors and, in window mode, one target invalidation per bound window.
# Then, per target, the same over NVMe/TCP (nvmet-tcp; ours with a TCP listener): discover,
# 16 MiB written with digests and read back without and with them, perf randread and
# randwrite.
# Then the window security probe (build/release/examples/mw-probe).
# Environment: PERF_TIME (10), TARGETS ("own kernel"), INIT_OUT (/lab/integration/out).
# Last line on success: INITIATOR PASS
set -euo pipefail

IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
PORT=4420
PERF_TIME=${PERF_TIME:-10}
TARGETS=${TARGETS:-own kernel}
OUT=${INIT_OUT:-/lab/integration/out}
INI=build/release/nvmf-initiator
TGT=build/release/nvmf-target
PROBE=build/release/examples/mw-probe
NQN=nqn.2026-11.io.nvmf-lab:init
SIZE_MB=256
CFG=/sys/kernel/config/nvmet
TLOG=/tmp/nvmf-target.log
TPID=
. integration/guest/common.sh
declare -A RESULT
RETRIED=()


kernel_teardown() {
    [ -d "$CFG/subsystems/$NQN" ] || [ -d "$CFG/ports/1" ] || return 0
    rm -f "$CFG/ports/1/subsystems/$NQN" 2>/dev/null || true
    rmdir "$CFG/ports/1" 2>/dev/null || true
    local n
    for n in 1 2; do
        [ -d "$CFG/subsystems/$NQN/namespaces/$n" ] || continue
        echo 0 >"$CFG/subsystems/$NQN/namespaces/$n/enable" || true
        rmdir "$CFG/subsystems/$NQN/namespaces/$n" 2>/dev/null || true
    done
    rmdir "$CFG/subsystems/$NQN" 2>/dev/null || true
}
stop_target() {
    if [ -n "$TPID" ]; then
        kill -TERM "$TPID" 2>/dev/null || true
        wait "$TPID" 2>/dev/null || true
        TPID=
    fi
    kernel_teardown
}
cleanup() {
    local rc=$?
    set +eE; trap - ERR
    stop_target
    if [ $rc != 0 ]; then
        [ -f "$TLOG" ] && { echo "--- target log"; sed 's/\x1b\[[0-9;]*m//g' "$TLOG" | tail -n 60; }
        echo "--- dmesg"; dmesg | grep -iE 'nvme|rdma|rxe' | tail -n 30
        echo "INITIATOR FAILED (exit $rc)"
    fi
    exit $rc
}
trap cleanup EXIT

start_target() { # own|kernel [rdma|tcp]
    local tr=${2:-rdma}
    if [ "$1" = own ]; then
        [ -x "$TGT" ] || fail "$TGT missing"
        NO_COLOR=1 "$TGT" --listen "$IP:$PORT" --transport "$tr" --nqn "$NQN" --namespace /dev/ram0 >"$TLOG" 2>&1 &
        TPID=$!
    else
        modprobe -a nvmet "nvmet-$tr"
        rm -f "$TLOG"   # a failure report then shows no stale log of our target
        mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
        kernel_teardown
        mkdir "$CFG/subsystems/$NQN"
        echo 1 >"$CFG/subsystems/$NQN/attr_allow_any_host"
        mkdir "$CFG/subsystems/$NQN/namespaces/1"
        echo -n /dev/ram0 >"$CFG/subsystems/$NQN/namespaces/1/device_path"
        echo 1 >"$CFG/subsystems/$NQN/namespaces/1/enable"
        mkdir -p "$CFG/ports/1"
        echo "$tr" >"$CFG/ports/1/addr_trtype"
        echo ipv4 >"$CFG/ports/1/addr_adrfam"
        echo "$IP" >"$CFG/ports/1/addr_traddr"
        echo "$PORT" >"$CFG/ports/1/addr_trsvcid"
        ln -s "$CFG/subsystems/$NQN" "$CFG/ports/1/subsystems/$NQN"
    fi
    local try
    for try in $(seq 40); do
        "$INI" discover -t "$tr" -a "$IP" -s "$PORT" >/tmp/disc.txt 2>&1 && return 0
        [ -n "$TPID" ] && ! kill -0 "$TPID" 2>/dev/null && { cat "$TLOG"; fail "target exited"; }
        sleep 0.5
    done
    cat /tmp/disc.txt; fail "discovery did not answer within 20 s"
}

json_field() { # json key
    python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"
}

# Retransmissions on the lab's RDMA devices so far (timeouts and RNR NAKs, both
# sides of every queue pair: the counters are per device).
retransmits() {
    cat /sys/class/infiniband/*/ports/1/hw_counters/completer_retry_err 2>/dev/null |
        awk '{ n += $1 } END { print n + 0 }'
}

perf() { # target name windows|tcp rw [extra...]
    local t=$1 name=$2 win=$3 rw=$4; shift 4
    local j attempt before after why how=(--windows "$win")
    [ "$win" = tcp ] && how=(-t tcp)
    for attempt in 1 2; do
        before=$(retransmits)
        j=$("$INI" perf -a "$IP" -n "$NQN" "${how[@]}" --rw "$rw" --bs 4k --qd "${QD:-32}" \
            --time "$PERF_TIME" --size 256M --json "$@" 2>/tmp/perf-progress.txt) && break
        after=$(retransmits)
        tail -n 5 /tmp/perf-progress.txt; echo "$j"
        echo "--- dmesg (last 10 lines)"; dmesg | grep -v 'speed is unknown' | tail -n 10
        # soft-RoCE (6.1, and mainline as of this writing) replays the local
        # operations of its send queue when it retransmits: req_retry rewinds
        # to the oldest unacknowledged request and the requester executes every
        # BIND_MW (or the kernel host's REG_MR) behind it a second time, which
        # fails (the window's key has moved on, or it is still bound) and breaks
        # the queue pair. Shown deterministically with RNR retransmits (a target
        # whose receive queue is shorter than the host's queue depth): every RNR
        # broke a queue with windows, none with regions. Under TCG a spurious
        # retransmit timeout does the same about once in 50 runs, against either
        # target. Such a break spoils a measurement, not data: when the device
        # counted a retransmit during the run, run it once more and report it.
        # A break without one, anything else, or a second failure fails the test.
        why=$(grep -m1 -E "disconnected \(|memory window bind failed" /tmp/perf-progress.txt)
        if [ $attempt = 2 ] || [ -z "$why" ] || [ "$after" = "$before" ]; then
            echo "    retransmits during the run: $((after - before))"
            fail "perf $name against $t failed"
        fi
        RETRIED+=("$t $name: $why ($((after - before)) retransmits during the run)")
        echo "    $name against $t: the queue broke after a retransmit; running it once more"
    done
    echo "    $name: $j"
    [ "$(json_field "$j" errors)" = 0 ] || fail "perf $name against $t: I/O errors"
    local ios binds rinv
    ios=$(json_field "$j" ios); binds=$(json_field "$j" binds)
    rinv=$(json_field "$j" remote_invalidations)
    [ "$ios" -gt 0 ] || fail "perf $name against $t: no I/O completed"
    if [ "$win" = tcp ]; then
        :
    elif [ "$win" = mw ]; then
        [ "$binds" -gt 0 ] || fail "perf $name: no window bound"
        [ "$rinv" = "$binds" ] || fail "perf $name against $t: $binds windows bound but $rinv invalidated by the target"
    else
        [ "$binds" = 0 ] || fail "perf $name: windows bound in mr mode"
    fi
    [ "$(json_field "$j" keep_alives)" -ge 1 ] || [ "$PERF_TIME" -lt 3 ] \
        || fail "perf $name against $t: no keep-alive sent"
    RESULT[$t.$name]=$(json_field "$j" iops)
    RESULT[$t.$name.p99]=$(json_field "$j" lat_p99_us)
}

# Raw mode: hand-made commands and the status each must get from our target
# (nvmet's answer is printed beside it; where they differ, that is noted).
RAW_CASES=(
    "lba-range|LBA_RANGE|--opcode 2 --cdw 10=524288 --window read:512"
    "unknown-opcode|INVALID_OPCODE|--opcode 0x7e --sgl 00000000000000000000000000000000"
    "bad-nsid|INVALID_NS|--opcode 2 --nsid 99 --window read:512"
    "sgl-shorter-than-nlb|SGL_INVALID_DATA|--opcode 2 --window read:256"
    "in-capsule-bad-offset|SGL_INVALID_OFFSET|--opcode 1 --in-capsule 512 --sgl 00200000000000000002000000000001"
    "keyed-bad-subtype|INVALID_FIELD|--opcode 2 --sgl 00000000000000000002000000000041"
    "data-block-address-sgl|INVALID_FIELD|--opcode 2 --sgl 00000000000000000002000000000000"
    "in-capsule-write|SUCCESS|--opcode 1 --cdw 12=0 --in-capsule 512"
    "write-zeroes|SUCCESS|--opcode 8 --cdw 12=7"
)
raw_cases() { # target
    local c name want args out st
    for c in "${RAW_CASES[@]}"; do
        IFS='|' read -r name want args <<<"$c"
        # shellcheck disable=SC2086
        out=$("$INI" raw -a "$IP" -n "$NQN" $args 2>&1) || { echo "$out"; fail "[$1] raw $name: nvmf-initiator failed"; }
        st=$(sed -n 's/^cid [0-9a-fx]* status \([A-Z_]*\).*/\1/p' <<<"$out")
        [ -n "$st" ] || { echo "$out"; fail "[$1] raw $name: no status"; }
        printf '    %-24s %s\n' "$name" "$(head -n1 <<<"$out")"
        RESULT[$1.raw.$name]=$st
        if [ "$1" = own ] && [ "$st" != "$want" ]; then fail "[own] raw $name: got $st, want $want"; fi
    done
}

step "setup: soft-RoCE on $IF ($IP), brd ${SIZE_MB} MiB"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-tcp
rdma link show | grep -q "netdev $IF\b" || rdma link add rxe0 type rxe netdev "$IF"
[ -e /sys/module/brd ] || modprobe brd rd_nr=1 rd_size=$(( SIZE_MB * 1024 ))
for b in "$INI" "$TGT" "$PROBE"; do [ -x "$b" ] || fail "$b missing (cargo build --release)"; done
head -c 64M /dev/urandom >/tmp/data64
head -c 16M /dev/urandom >/tmp/data16

for t in $TARGETS; do
    step "[$t] start target, discover"
    start_target "$t"
    cat /tmp/disc.txt
    grep -q "subnqn:  $NQN" /tmp/disc.txt || fail "[$t] $NQN not in the discovery log"

    step "[$t] connect / identify"
    "$INI" connect -a "$IP" -n "$NQN" | tee /tmp/id.txt
    grep -qE "^namespace 1: 524288 blocks of 512 B" /tmp/id.txt || fail "[$t] namespace 1 not as expected"

    step "[$t] write 64 MiB (memory windows), read back, compare"
    "$INI" write -a "$IP" -n "$NQN" --windows mw -d /tmp/data64
    "$INI" read -a "$IP" -n "$NQN" --windows mw -z 64M -d /tmp/back64
    cmp /tmp/data64 /tmp/back64 || fail "[$t] 64 MiB read back differs"
    echo "    64 MiB verified"
    step "[$t] write 16 MiB at block 131072 (memory regions), read back with windows, compare"
    "$INI" write -a "$IP" -n "$NQN" --windows mr --start-block 131072 -d /tmp/data16
    "$INI" read -a "$IP" -n "$NQN" --windows mw --start-block 131072 -z 16M -d - >/tmp/back16
    cmp /tmp/data16 /tmp/back16 || fail "[$t] 16 MiB read back differs"
    "$INI" read -a "$IP" -n "$NQN" --windows mr -z 64M -d /tmp/back64b
    cmp /tmp/data64 /tmp/back64b || fail "[$t] 64 MiB read back (regions) differs"
    "$INI" flush -a "$IP" -n "$NQN"
    echo "    16 MiB verified; 64 MiB re-verified through regions; flush ok"

    step "[$t] raw mode: malformed and out-of-range commands"
    raw_cases "$t"

    step "[$t] perf, ${PERF_TIME}s each"
    perf "$t" randread-mw mw randread
    perf "$t" randwrite-mw mw randwrite
    QD=16 perf "$t" randread-mr mr randread --queues 2
    if [ "$t" = kernel ]; then
        # Asynchronous events: our target has no event source yet (config reload
        # adds one); nvmet announces a namespace added through configfs.
        step "[$t] asynchronous event: namespace 2 added while connected"
        truncate -s 64M /var/tmp/ns2.img
        "$INI" connect -a "$IP" -n "$NQN" --watch 15 >/tmp/watch.txt 2>&1 &
        W=$!
        for i in $(seq 40); do grep -q "^watching" /tmp/watch.txt && break; sleep 0.25; done
        mkdir "$CFG/subsystems/$NQN/namespaces/2"
        echo -n /var/tmp/ns2.img >"$CFG/subsystems/$NQN/namespaces/2/device_path"
        echo 1 >"$CFG/subsystems/$NQN/namespaces/2/enable"
        wait $W || { cat /tmp/watch.txt; fail "connect --watch failed"; }
        sed -n '/^watching/,$p' /tmp/watch.txt
        grep -q "^event: notice, info 0x00, log page 0x04, changed namespaces \[2\]" /tmp/watch.txt \
            || fail "no namespace-changed event for namespace 2"
        grep -q "^namespace 2: 16384 blocks of 4096 B" /tmp/watch.txt || fail "namespace 2 not listed after the event"
    fi
    stop_target

    step "[$t] NVMe/TCP: discover, 16 MiB written and read back (with and without digests), perf"
    start_target "$t" tcp
    grep -q "trtype:  tcp" /tmp/disc.txt || { cat /tmp/disc.txt; fail "[$t] no TCP entry in the discovery log"; }
    "$INI" write -t tcp -a "$IP" -n "$NQN" --digests --start-block 196608 -d /tmp/data16
    "$INI" read -t tcp -a "$IP" -n "$NQN" --start-block 196608 -z 16M -d - >/tmp/back16t
    cmp /tmp/data16 /tmp/back16t || fail "[$t] 16 MiB read back over TCP differs"
    "$INI" read -t tcp -a "$IP" -n "$NQN" --digests --start-block 196608 -z 16M -d /tmp/back16d
    cmp /tmp/data16 /tmp/back16d || fail "[$t] 16 MiB read back over TCP with digests differs"
    echo "    16 MiB written over TCP with digests, read back without and with them: verified"
    perf "$t" randread-tcp tcp randread
    perf "$t" randwrite-tcp tcp randwrite
    stop_target
done

step "window security probe"
"$PROBE" "$IP" | tee /tmp/probe.txt
grep -q "^PROBE PASS" /tmp/probe.txt || fail "window security probe"

step "summary (same boot, 4k, QD32 in total, ${PERF_TIME}s; randread-mr on 2 queues of QD16)"
printf '    %-14s' run; for t in $TARGETS; do printf '%22s' "$t IOPS (p99 us)"; done; echo
for n in randread-mw randwrite-mw randread-mr randread-tcp randwrite-tcp; do
    printf '    %-14s' "$n"
    for t in $TARGETS; do printf '%22s' "$(printf '%.0f (%.0f)' "${RESULT[$t.$n]}" "${RESULT[$t.$n.p99]}")"; done
    echo
done
if [[ " $TARGETS " == *" own "* && " $TARGETS " == *" kernel "* ]]; then
    same=0
    for c in "${RAW_CASES[@]}"; do
        n=${c%%|*}
        if [ "${RESULT[own.raw.$n]}" = "${RESULT[kernel.raw.$n]}" ]; then same=$((same + 1))
        else echo "    raw $n: ours ${RESULT[own.raw.$n]}, nvmet ${RESULT[kernel.raw.$n]}"; fi
    done
    echo "    raw mode: both targets agree on $same of ${#RAW_CASES[@]} cases"
    for n in randread-mw randwrite-mw randread-mr randread-tcp randwrite-tcp; do
        echo "RESULT $n own/kernel=$(python3 -c "print(f'{${RESULT[own.$n]}/${RESULT[kernel.$n]}:.2f}')")"
    done
fi
for r in "${RETRIED[@]}"; do echo "    NOTE: perf retried after soft-RoCE broke a queue on a retransmit: $r"; done
mkdir -p "$OUT" 2>/dev/null && cp /tmp/probe.txt "$OUT/mw-probe.txt" 2>/dev/null || true
echo "INITIATOR PASS"
