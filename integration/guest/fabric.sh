#!/bin/bash
# fabric.sh: a shared fabric, as an attacker and as a second tenant see it. Runs INSIDE the
# lab guest (integration/run-fabric-tests), cwd /lab = project root. Our target runs with
# one worker (so every queue shares its buffers and its completion queue) and listens on
# two soft-RoCE devices: rxe0 on $IF and a second one on a dummy netdev ($IP_B).
#   1. Two RDMA devices: the kernel host connects one subsystem through each device (4 I/O
#      queues each); the target's queue pairs on the two devices share QP numbers (shown
#      with `rdma resource show qp`; a worker that looked queues up by number alone took
#      one device's capsules for the other's); fio writes and verifies on both at once;
#      no error in the host's kernel log.
#   2. Tenancy: host A (its own host NQN) writes a marker pattern through its subsystem and
#      reads it back, all the time; meanwhile host B (another host NQN, another subsystem)
#      reads every kind of namespace it may: null (must read as zeroes), a file that
#      shrank under the target (reads past its new end fail), a block device whose second
#      half fails (device-mapper error). No byte of A's pattern may reach B. The errors B
#      sees are on B's failing namespaces only; no reset, timeout or reconnect.
#   3. Raw capsules (hostile-probe, its own host NQN): an I/O queue of 16 entries sent 24
#      commands at once (disconnected: it would hold more than its share of the shared
#      receive queue), eight Connects at once on one queue
#      (one controller, the others refused; none left behind once the probe is gone), a
#      Connect offering 128 KiB of data (SGL Invalid Data: a Connect has 1 KiB), and an
#      I/O-queue Connect for the probe's controller from another address than its admin
#      queue's (refused).
#   4. Queues that never send Connect: from one peer, beyond [target]
#      max_pending_queues_per_peer (8 here), that peer's oldest evicted (hung up on within
#      a second) while another host connects and reads; from two peers, beyond
#      max_pending_queues (12), the oldest of the peer holding the most evicted (the
#      newcomer admitted every time, evening out); the evictions counted in /metrics; the
#      rest hung up on by the Connect timeout.
#   5. A host that connects with KATO 0xFFFFFFFF (49 days) and vanishes (queue pairs
#      silent, no disconnect): probed like a host without keep-alive and freed within
#      60 s, not 49 days.
# Output ends with "FABRIC PASS".
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
IP_B=10.99.0.1
PORT=4420
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
PROBE=build/release/examples/hostile-probe
PROBE_NQN=nqn.2026-11.io.nvmf-lab:probe
P=nqn.2026-11.io.nvmf-lab
DEV0=$P:fabric-dev0 DEV1=$P:fabric-dev1 TEN_A=$P:tenant-a TEN_B=$P:tenant-b OPEN=$P:fabric-open
HOST_A=nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-00000000000a
HOST_B=nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-00000000000b
HID_A=aaaaaaaa-0000-4000-8000-00000000000a HID_B=bbbbbbbb-0000-4000-8000-00000000000b
MARKER=TENANT-A-SECRET-7f3c9e21
DIR=/var/tmp/fabric
CONF=$DIR/target.toml
TLOG=/tmp/fabric-target.log
DM=fabric-err SLOW=fabric-slow
TPID= LOOP= PASSED=0 BG=
. integration/guest/common.sh
. integration/guest/kmsg.sh
. integration/guest/nvmet.sh

cleanup() {
    local rc=$?
    set +e
    [ -n "$BG" ] && kill -9 $BG 2>/dev/null
    for n in $DEV0 $DEV1 $TEN_A $TEN_B $OPEN; do nvme disconnect -n "$n" >/dev/null 2>&1; done
    [ -n "$TPID" ] && { kill -TERM "$TPID"; wait "$TPID"; }
    dmsetup remove "$DM" "$SLOW" 2>/dev/null
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    if [ $PASSED = 0 ] && [ -f "$TLOG" ]; then echo "--- our target's log (last 40 lines)"; tail -n 40 "$TLOG"; fi
    [ $PASSED = 1 ] || echo "FABRIC FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT

all_controllers() {
    "$TARGET_BIN" status --json | python3 -c 'import json,sys; st=json.load(sys.stdin); print(sum(len(s["controllers"]) for s in st["subsystems"]))'
}
metric() { # NAME{LABELS} -> value (0 when absent)
    curl -s http://127.0.0.1:9469/metrics | awk -v k="$1" '$1 == k {print $2; f=1} END {if (!f) print 0}'
}
connect() { # ADDR NQN HOSTNQN HOSTID [options]
    local a=$1 n=$2 h=$3 i=$4; shift 4
    nvme connect -t rdma -a "$a" -s "$PORT" -n "$n" --hostnqn="$h" --hostid="$i" "$@" >/dev/null ||
        fail "nvme connect to $n through $a failed"
}
dev_of() { # NQN NSID -> /dev/nvmeXnY, waiting up to 20 s
    local d
    for _ in $(seq 100); do d=$(ns_dev "$1" "$2") && { echo "$d"; return 0; }; sleep 0.2; done
    fail "no block device for namespace $2 of $1"
}

step "setup: rxe0 on $IF, rxe1 on a dummy netdev ($IP_B), files, a half-failing block device"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma dm-mod dm-delay dummy
rdma link show | grep -q "netdev $IF\b" || rdma link add rxe0 type rxe netdev "$IF"
ip link add fabric0 type dummy 2>/dev/null || true
ip addr add "$IP_B/24" dev fabric0 2>/dev/null || true
ip link set fabric0 up
rdma link show | grep -q "netdev fabric0\b" || rdma link add rxe1 type rxe netdev fabric0
for b in "$TARGET_BIN" "$PROBE"; do [ -x "$b" ] || fail "$b missing (cargo build --release)"; done
rm -rf "$DIR"; mkdir -p "$DIR"
for f in dev0 dev1 a b-file; do truncate -s 64M "$DIR/$f.img"; done
truncate -s 64M "$DIR/loop.img"
LOOP=$(losetup --find --show --direct-io=on "$DIR/loop.img")
# First 16 MiB served, the rest fails (512-byte sectors).
printf '0 32768 linear %s 0\n32768 98304 error\n' "$LOOP" | dmsetup create "$DM"
# A slow device (every read takes 300 ms), for commands that stay outstanding.
echo "0 $(blockdev --getsz "$LOOP") delay $LOOP 0 300" | dmsetup create "$SLOW"
cat >"$CONF" <<EOF
[target]
workers = 1
max_pending_queues_per_peer = 8
max_pending_queues = 12

[[listener]]
address = "$IP"
port = $PORT

[[listener]]
address = "$IP_B"
port = $PORT

[[subsystem]]
nqn = "$DEV0"
allow_any_host = true
[[subsystem.namespace]]
path = "$DIR/dev0.img"

[[subsystem]]
nqn = "$DEV1"
allow_any_host = true
[[subsystem.namespace]]
path = "$DIR/dev1.img"

[[subsystem]]
nqn = "$TEN_A"
hosts = ["$HOST_A"]
[[subsystem.namespace]]
path = "$DIR/a.img"

[[subsystem]]
nqn = "$TEN_B"
hosts = ["$HOST_B"]
[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "64M"
[[subsystem.namespace]]
nsid = 2
path = "$DIR/b-file.img"
[[subsystem.namespace]]
nsid = 3
path = "/dev/mapper/$DM"

[[subsystem]]
nqn = "$OPEN"
allow_any_host = true
[[subsystem.namespace]]
backend = "null"
size = "64M"
[[subsystem.namespace]]
path = "/dev/mapper/$SLOW"
EOF
RUST_LOG=info NO_COLOR=1 "$TARGET_BIN" --config "$CONF" >"$TLOG" 2>&1 &
TPID=$!
wait_discovery "our target"
IP=$IP_B wait_discovery "our target (second device)"
kmsg_mark

step "1. two RDMA devices: $DEV0 through rxe0, $DEV1 through rxe1, 4 I/O queues each, fio verify on both"
# The target's queue pairs on each device, by QP number (rdma resource show qp: "link
# rxe0/1 lqpn 18 ... pid 321 comm nvmf-worker-0": the pid is the worker thread's).
qpns() { rdma resource show qp | awk -v l="link $1/" 'index($0, l) == 1 && / comm nvmf-worker-/ { for (i = 1; i < NF; i++) if ($i == "lqpn") print $(i + 1) }' | sort -n; }
connect_both() {
    connect "$IP" "$DEV0" "$HOST_A" "$HID_A" -i 2 -W 2
    connect "$IP_B" "$DEV1" "$HOST_A" "$HID_A" -i 2 -W 2
    D0=$(dev_of "$DEV0" 1) D1=$(dev_of "$DEV1" 1)
    settle
    Q0=$(qpns rxe0 | tr '\n' ' ') Q1=$(qpns rxe1 | tr '\n' ' ')
    SHARED=$(comm -12 <(qpns rxe0) <(qpns rxe1) | tr '\n' ' ')
}
# Each device numbers its queue pairs in turn, and host and target take turns on one
# device: whether the target's numbers meet depends on how many queue pairs each device
# made before. When they do not, the device behind makes as many more as it lags (each
# a host queue pair whose connection nobody accepts) and both subsystems connect again.
connect_both
if [ -z "${SHARED// /}" ] && [ -n "$Q0" ] && [ -n "$Q1" ]; then
    lag=$(( ${Q0%% *} - ${Q1%% *} ))
    info "no QP number on both devices yet (rxe0: $Q0; rxe1: $Q1): moving one device's numbering by ${lag#-}"
    settle; nvme disconnect -n "$DEV0" >/dev/null; nvme disconnect -n "$DEV1" >/dev/null
    behind=$IP_B; [ $lag -lt 0 ] && behind=$IP
    for _ in $(seq ${lag#-}); do nvme discover -t rdma -a "$behind" -s 4499 >/dev/null 2>&1 || true; done
    connect_both
fi
info "target QPs on rxe0: $Q0"
info "target QPs on rxe1: $Q1"
[ "$(wc -w <<<"$Q1")" -ge 5 ] || fail "expected the admin queue and 4 I/O queues of $DEV1 on rxe1"
[ -n "${SHARED// /}" ] || fail "no QP number is used on both devices: the test would not show a mix-up"
info "QP numbers on both devices: $SHARED"
FIO_OUT=$DIR/fio-devices.log
fio --name=dev0 --filename="$D0" --name=dev1 --filename="$D1" --ioengine=libaio --direct=1 \
    --rw=randwrite --bsrange=4k-64k --iodepth=16 --size=32M --numjobs=1 \
    --verify=crc32c --verify_fatal=1 --do_verify=1 --group_reporting=0 >"$FIO_OUT" 2>&1 ||
    { tail -n 20 "$FIO_OUT"; fail "fio with verify over both devices failed"; }
grep -q "err= 0" "$FIO_OUT" || { tail -n 20 "$FIO_OUT"; fail "fio reported errors"; }
info "fio: $(grep -cE '^dev[01]: \(groupid' "$FIO_OUT") jobs, every block verified"
kmsg_check "I/O over two RDMA devices"
settle
nvme disconnect -n "$DEV0" >/dev/null; nvme disconnect -n "$DEV1" >/dev/null

step "2. tenancy: host A writes $MARKER through $TEN_A; host B reads its own namespaces meanwhile"
connect "$IP" "$TEN_A" "$HOST_A" "$HID_A" -i 2
connect "$IP" "$TEN_B" "$HOST_B" "$HID_B" -i 2
A=$(dev_of "$TEN_A" 1) BNULL=$(dev_of "$TEN_B" 1) BFILE=$(dev_of "$TEN_B" 2) BERR=$(dev_of "$TEN_B" 3)
settle
info "A: $A; B: null $BNULL, file $BFILE, failing $BERR"
PAT="--buffer_pattern=\"$MARKER\""
fio --name=fill --filename="$A" --ioengine=libaio --direct=1 --rw=write --bs=128k --iodepth=8 \
    --size=32M "$PAT" >/dev/null 2>&1 || fail "host A could not write its pattern"
# A's pattern in the file, as the target stores it.
grep -c "$MARKER" "$DIR/a.img" >/dev/null || fail "A's pattern is not in its file"
# The file under B's namespace 2 shrinks to 16 MiB + 100 bytes under the target.
truncate -s $((16 * 1048576 + 100)) "$DIR/b-file.img"
fio --name=a --filename="$A" --ioengine=libaio --direct=1 --rw=randrw --bsrange=4k-128k --iodepth=16 \
    --size=32M --time_based --runtime=600 "$PAT" >/dev/null 2>&1 &
BG=$!
sleep 2
READER=$DIR/reader.py
cat >"$READER" <<'EOF'
import mmap, os, sys
dev, marker, bs = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
start, limit = int(sys.argv[4]), int(sys.argv[5])
fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, bs)
ok = err = leak = nonzero = 0
for off in range(start, limit, bs):
    buf.seek(0); buf.write(b"\xee" * bs)  # what a read that moved nothing would leave
    try:
        n = os.preadv(fd, [buf], off)
    except OSError:
        err += 1
        continue
    ok += 1
    data = buf[:n]
    if marker in data:
        leak += 1
    if data.count(0) != n:
        nonzero += 1
print(f"ok {ok} err {err} leak {leak} nonzero {nonzero}")
EOF
read_b() { # NAME DEV BS FROM TO (MiB) -> sets R (the reader's line)
    R=$(python3 "$READER" "$2" "$MARKER" "$3" $(( $4 << 20 )) $(( $5 << 20 )))
    info "B reads $1 ($2, $3-byte reads, MiB $4 to $5): $R"
}
field() { awk -v k="$1" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' <<<"$R"; }
LEAKS=0
for bs in 4096 131072; do
    read_b null "$BNULL" $bs 0 $(( bs == 4096 ? 8 : 64 ))
    LEAKS=$((LEAKS + $(field leak)))
    [ "$(field nonzero)" = 0 ] && [ "$(field err)" = 0 ] || fail "a null namespace must read as zeroes, without errors"
done
# Each read that fails costs the host its retries, so the ranges straddle the edges only.
read_b "a shrunk file" "$BFILE" 4096 14 18
LEAKS=$((LEAKS + $(field leak)))
[ "$(field err)" -gt 0 ] || fail "reads past the file's new end must fail"
read_b "a shrunk file" "$BFILE" 131072 8 24
LEAKS=$((LEAKS + $(field leak)))
read_b "a failing device" "$BERR" 65536 12 20
LEAKS=$((LEAKS + $(field leak)))
[ "$(field err)" -gt 0 ] && [ "$(field ok)" -gt 0 ] || fail "the failing device should serve its first 16 MiB and fail the rest"
kill -0 $BG 2>/dev/null || fail "host A's I/O stopped"
kill $BG; wait $BG 2>/dev/null || true; BG=
[ $LEAKS = 0 ] || fail "host B received host A's data in $LEAKS reads"
info "no read of B carried A's pattern"
# B's failures are read errors of its own failing namespaces, nothing else.
# (Path devices of a multipath head nvmeXnY are named nvmeXcZnY.)
path_pat() { sed -E 's#^/dev/nvme([0-9]+)n([0-9]+)$#nvme\1(c[0-9]+)?n\2#' <<<"$1"; }
BNAMES="$(path_pat "$BFILE")|$(path_pat "$BERR")"
OTHER=$(kmsg_errors | grep -vE "($BNAMES)\b" | grep -vE 'Buffer I/O error|async page read' || true)
if [ -n "$OTHER" ] || kmsg_errors | grep -qiE 'reset|timeout|Reconnecting|error recovery'; then
    echo "$OTHER" | head -n 10 | sed 's/^/    kernel: /'
    fail "the host's kernel log shows errors other than B's failing reads"
fi
kmsg_mark
settle
nvme disconnect -n "$TEN_A" >/dev/null; nvme disconnect -n "$TEN_B" >/dev/null

step "3. raw capsules: a queue overrun, concurrent Connects, a 128 KiB Connect, an I/O queue from another address"
BEFORE=$(all_controllers)
OUT=$("$PROBE" shared "$IP" "$PORT" "$OPEN" "$IP_B")
echo "$OUT" | sed 's/^/    /'
token() { awk -v c="$1" '$1 == "CASE" && $2 == c {print $3}' <<<"$OUT"; }
[[ $(token io-queue-24-of-16-at-once) == disconnected* ]] ||
    fail "a queue sent more commands than it holds must be disconnected (it would take more than its share of the shared receives)"
[[ $(token connect-concurrent-8) == success:1:refused:7:* ]] ||
    fail "eight Connects at once on one queue must make one controller and refuse the others"
[ "$(token connect-data-128k)" = status:SGL_INVALID_DATA ] || fail "a Connect with 128 KiB of data must be refused"
[ "$(token io-connect-other-peer)" = status:CONNECT_INVALID_PARAM ] ||
    fail "an I/O queue from another address than its admin queue's must be refused"
for _ in $(seq 40); do [ "$(controllers_of "$PROBE_NQN")" = 0 ] && break; sleep 0.25; done
[ "$(controllers_of "$PROBE_NQN")" = 0 ] || fail "the probe's controllers outlived it: $(controllers_of "$PROBE_NQN") left"
[ "$(all_controllers)" = "$BEFORE" ] || fail "controllers: $BEFORE before the probe, $(all_controllers) after"
info "controllers back to $BEFORE"
[ "$(metric 'nvmf_target_connect_rejections_total{reason="other_peer"}')" -ge 1 ] || fail "other_peer refusal not counted"

step "4. queues without Connect: 12 from $IP_B (cap 8 per peer) while host A connects from $IP"
PER_PEER0=$(metric 'nvmf_target_connect_rejections_total{reason="pending_evicted_per_peer"}')
TOTAL0=$(metric 'nvmf_target_connect_rejections_total{reason="pending_evicted_total"}')
"$PROBE" pending "$IP_B" "$PORT" 12 8 >"$DIR/pending1.log" 2>&1 &
BG=$!
for _ in $(seq 120); do grep -q accepted "$DIR/pending1.log" && break; sleep 0.1; done
connect "$IP" "$TEN_A" "$HOST_A" "$HID_A" -i 1
dd if="$(dev_of "$TEN_A" 1)" of=/dev/null bs=64k count=64 iflag=direct status=none || fail "host A could not read during the flood"
wait $BG || fail "the pending probe failed"; BG=
sed 's/^/    /' "$DIR/pending1.log"
grep -q "accepted 12 refused 0 failed 0 of 12" "$DIR/pending1.log" || fail "a peer at its cap must not be refused: its oldest make room"
grep -q "within 1 s: hung up on 4$" "$DIR/pending1.log" || fail "the peer's 4 oldest pending queues must be evicted at once"
grep -q "hung up on 12 of 12" "$DIR/pending1.log" || fail "pending queues must be hung up on by the Connect timeout"
settle; nvme disconnect -n "$TEN_A" >/dev/null
step "4b. 8 from $IP_B, then 8 from $IP: at the total cap (12) the address holding the most loses its oldest"
"$PROBE" pending "$IP_B" "$PORT" 8 6 >"$DIR/pending2.log" 2>&1 &
BG=$!
for _ in $(seq 120); do grep -q accepted "$DIR/pending2.log" && break; sleep 0.1; done
"$PROBE" pending "$IP" "$PORT" 8 1 >"$DIR/pending3.log" 2>&1 || fail "the second pending probe failed"
wait $BG || fail "the first pending probe failed"; BG=
sed 's/^/    /' "$DIR/pending2.log" "$DIR/pending3.log"
grep -q "accepted 8 refused 0" "$DIR/pending2.log" || fail "the first peer should have had 8"
grep -q "accepted 8 refused 0" "$DIR/pending3.log" || fail "the newcomer must not be refused at the total cap"
# 3 of $IP_B's go (8 against 4, 7/5, 6/6: the older address first), then 1 of $IP's (5/7).
grep -q "within 1 s: hung up on 1$" "$DIR/pending3.log" || fail "the newcomer must lose only the place it took beyond an even share"
grep -q "hung up on 8 of 8" "$DIR/pending2.log" || fail "the first peer's pending queues must all be hung up on"
PER_PEER=$(( $(metric 'nvmf_target_connect_rejections_total{reason="pending_evicted_per_peer"}') - PER_PEER0 ))
TOTAL=$(( $(metric 'nvmf_target_connect_rejections_total{reason="pending_evicted_total"}') - TOTAL0 ))
info "evictions counted: pending_evicted_per_peer +$PER_PEER, pending_evicted_total +$TOTAL"
[ $PER_PEER = 4 ] && [ $TOTAL = 4 ] || fail "evictions not counted as such"
[ "$(grep -c 'lost its place to a newer one' "$TLOG")" -le 2 ] || fail "evictions must be logged once a minute per peer"

step "5. a host with KATO 0xFFFFFFFF that vanishes is freed within 60 s"
"$PROBE" vanish "$IP" "$PORT" "$OPEN" 90 4294967295 >"$DIR/vanish.log" 2>&1 &
BG=$!
for _ in $(seq 40); do [ "$(controllers_of "$PROBE_NQN")" = 1 ] && break; sleep 0.25; done
[ "$(controllers_of "$PROBE_NQN")" = 1 ] || { cat "$DIR/vanish.log"; fail "the vanishing host did not connect"; }
T=$SECONDS gone=0
while [ $((SECONDS - T)) -lt 60 ]; do [ "$(controllers_of "$PROBE_NQN")" = 0 ] && { gone=1; break; }; sleep 0.25; done
[ $gone = 1 ] || fail "a host with a 49-day keep-alive that vanished still holds its controller after 60 s"
info "freed after $((SECONDS - T)) s"
kill $BG 2>/dev/null; wait $BG 2>/dev/null || true; BG=
kmsg_check "the raw-capsule cases"

step "our target stops cleanly"
own_down
grep -q panicked "$TLOG" && fail "the target panicked"
PASSED=1
echo "FABRIC PASS"
