#!/bin/bash
# tcp.sh: the NVMe/TCP differential. Runs INSIDE the lab guest, cwd /lab = project root,
# as root. In one boot: nvmet-tcp, then our target with a TCP listener, each alone on
# $IP:$PORT exporting one file (64 MiB):
#   1. the kernel host's nvme-tcp: discovery (a TCP entry), connect, fio crc32c verify
#      through two I/O queues, disconnect; the kernel log must show no error;
#   2. what a well-behaved host never sends, from our initiator's tcp-probe (its own host,
#      one connection per case): a PDU before the ICReq, a second ICReq, an ICReq of an
#      unknown format, half an ICReq left hanging, an unknown PDU type, a wrong header
#      length, a length beyond any limit, a truncated capsule, a bad header digest, a
#      Connect whose in-capsule data fails its data digest,
#      H2CData without an R2T and outside its R2T; and the good paths (digests, a Connect
#      whose data comes by R2T);
#   then the outcomes side by side: ours must equal nvmet's, or be what KNOWN says (the
#   specification's answer where nvmet strays, and why);
#   3. ours: a host with keep-alive off in practice (KATO 49 days) whose network goes
#      dark (its own network namespace, the link cut: no FIN, nothing acknowledged) is
#      freed within 60 s by TCP keep-alive (nvmet-tcp holds it for the 49 days); status
#      shows the controller's transport, metrics count connects and disconnects by it,
#      and the reads' zero-copy sends (the kernel copies for this local host, and says so);
#   4. ours: IPv6 (a second TCP listener on ::1): discovery, connect, read; a namespace
#      added live (control socket) reaches that host without a reconnect, and goes;
#   5. both (after 1 and 2), strangers on the fabric (our initiator's hostile-load): 16
#      addresses hold 20 stalled connections each (past every cap), re-opened as they are
#      closed, while the kernel host connects from another address three times, each
#      within CONNECT_BOUND_MS; then 8 discovery controllers keep their queues full of
#      128 KiB Set Features whose R2Ts they never answer, while the host's fio reads
#      64 KiB blocks: no error, no read waits 2 s or more (issue 57, items 1 and 2).
# Output: the table, then "TCP PASS" (last line) on success.
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
PORT=4420
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
PROBE=build/release/examples/tcp-probe
LOAD=build/release/examples/hostile-load
# The kernel host's nvme connect (admin queue, two I/O queues, identify) under TCG takes
# a few hundred ms. While strangers flood, it must be served: refused or held past this
# bound is a lock-out (the issue's goal, 1 s, is printed beside it: under TCG the flood's
# churn of connections costs ours a few hundred ms more than nvmet, which never closes
# them, and the noise is +-15 %).
CONNECT_BOUND_MS=${CONNECT_BOUND_MS:-3000}
NQN=nqn.2026-11.io.nvmf-lab:tcp
PROBE_NQN=nqn.2026-11.io.nvmf-lab:tcp-probe
IMG=/var/tmp/tcp.img
TLOG=/tmp/tcp-target.log
TPID= PASSED=0 BG=
GONE_NS=tcpgone
. integration/guest/common.sh
. integration/guest/kmsg.sh
NVMET_TRTYPE=tcp
. integration/guest/nvmet.sh

cleanup() {
    local rc=$?
    set +e
    [ -n "$BG" ] && kill -9 "$BG" 2>/dev/null
    ip netns del "$GONE_NS" 2>/dev/null
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    [ -n "$TPID" ] && { kill -TERM "$TPID"; wait "$TPID"; }
    nvmet_unexport "$NQN" 2>/dev/null
    if [ $PASSED = 0 ] && [ -f "$TLOG" ]; then echo "--- our target's log (last 30 lines)"; tail -n 30 "$TLOG"; fi
    [ $PASSED = 1 ] || echo "TCP FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT

# Both targets end a connection that breaks the rules; ours says why first, with the
# C2HTermReq the specification asks for (term:<fatal error status>), where nvmet 6.1 just
# closes. Outcomes are compared by what happened (ended, connected, open...); where that
# differs on purpose, KNOWN says why.
declare -A KNOWN=(
    [half-icreq]="nvmet keeps a connection with half an ICReq open without end; ours closes what has not sent its ICReq and Connect within 5 s"
    [truncated-capsule]="as half-icreq: a capsule that never completes holds nothing of ours past the Connect deadline"
    [oversized-plen]="nvmet waits for the 16 MiB the header announces; ours refuses a length beyond its limits from the header alone (data limit exceeded)"
    [connect-by-r2t]="nvmet sends no R2T for a Connect whose data is not in the capsule and leaves the connection hanging; ours fetches it (data by R2T is allowed for any command)"
    [h2c-outside-r2t]="as connect-by-r2t: nvmet sends no R2T to answer with data outside it; ours checks H2CData against its R2T"
)
# What happened, whatever the detail: a termination request and a close both end it.
class_of() { case $1 in term:*|closed) echo ended ;; *) echo "$1" ;; esac; }

declare -A OUT_nvmet OUT_ours
phase() { # WHO
    local WHO=$1
    step "$WHO: discovery, the kernel host over nvme-tcp, fio crc32c verify"
    wait_discovery "$WHO"
    nvme discover -t tcp -a "$IP" -s "$PORT" >/tmp/discover.txt
    grep -q "trtype: *tcp" /tmp/discover.txt || { cat /tmp/discover.txt; fail "$WHO: no TCP entry in the discovery log"; }
    grep -q "subnqn: *$NQN" /tmp/discover.txt || { cat /tmp/discover.txt; fail "$WHO: $NQN not in the discovery log"; }
    kmsg_mark
    nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN" -i 2 >/dev/null || fail "$WHO: nvme connect -t tcp"
    live_ctrl "$NQN"
    [ "$(cat "/sys/class/nvme/$CTRL/transport")" = tcp ] || fail "$WHO: controller $CTRL is not tcp"
    fio --name=tcp --filename="$NS" --rw=randwrite --bs=4k,64k --iodepth=16 --numjobs=2 \
        --ioengine=libaio --direct=1 --size=16M --offset_increment=16M --verify=crc32c \
        --verify_fatal=1 --group_reporting >/tmp/fio.txt 2>&1 || { tail -n 20 /tmp/fio.txt; fail "$WHO: fio verify"; }
    info "$WHO: $(grep -E '^ *(read|write): IOPS' /tmp/fio.txt | tr -s ' ' | head -n 2 | tr '\n' ' ')"
    settle
    nvme disconnect -n "$NQN" >/dev/null
    kmsg_check "$WHO: the kernel host's I/O over TCP"
    step "$WHO: tcp-probe, what a host never sends"
    "$PROBE" "$IP" "$PORT" "$NQN" >/tmp/probe.txt 2>/tmp/probe.err || { cat /tmp/probe.err; fail "$WHO: tcp-probe failed"; }
    while read -r _ c o; do
        if [ "$WHO" = nvmet ]; then OUT_nvmet[$c]=$o; else OUT_ours[$c]=$o; fi
        info "$WHO  $c: $o"
    done </tmp/probe.txt
    kmsg_mark   # the probe's connections are no host's concern
}

declare -A CONN_MS READ_MAX_MS
hostile() { # WHO: strangers hold connections and buffers; the kernel host is served
    local WHO=$1 i t0 ms worst=0 lp
    step "$WHO: 16 addresses hold stalled connections past every cap; the kernel host connects"
    t0=$(date +%s%N)
    nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN" -i 2 >/dev/null || fail "$WHO: nvme connect"
    live_ctrl "$NQN"; settle; nvme disconnect -n "$NQN" >/dev/null
    info "$WHO: connected in $(( ($(date +%s%N) - t0) / 1000000 )) ms without the flood (with live_ctrl)"
    kmsg_mark
    "$LOAD" stall "$IP" "$PORT" 127.1.0.1 16 20 40 >/tmp/stall.txt 2>&1 &
    lp=$!
    sleep 3
    for i in 1 2 3; do
        t0=$(date +%s%N)
        if ! nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN" -i 2 >/dev/null; then
            info "$WHO: nvme connect refused during the flood (round $i)"
            worst=refused
            break
        fi
        ms=$(( ($(date +%s%N) - t0) / 1000000 ))
        live_ctrl "$NQN"; settle
        nvme disconnect -n "$NQN" >/dev/null
        [ $ms -gt $worst ] && worst=$ms
        info "$WHO: nvme connect took $ms ms during the flood (round $i)"
        sleep 1
    done
    kill "$lp"; wait "$lp" 2>/dev/null || true
    info "$WHO: $(tail -n 1 /tmp/stall.txt) (16 addresses x 20 stalled connections)"
    CONN_MS[$WHO]=$worst
    [ "$worst" = refused ] && kmsg_mark   # the refusal's lines: the verdict below says it
    kmsg_check "$WHO: connects during a flood of stalled connections"
    step "$WHO: 8 discovery controllers never answer their R2Ts; the kernel host reads 64 KiB blocks"
    nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN" -i 2 >/dev/null || fail "$WHO: nvme connect"
    live_ctrl "$NQN"
    "$LOAD" hog "$IP" "$PORT" 8 16 >/tmp/hog.txt 2>&1 &
    lp=$!
    sleep 2
    fio --name=hog --filename="$NS" --rw=randread --bs=64k --iodepth=8 --ioengine=libaio \
        --direct=1 --time_based --runtime=10 --output-format=json >/tmp/hogfio.json 2>/tmp/hogfio.err ||
        { tail -n 3 /tmp/hogfio.err | sed 's/^/    fio: /'; }
    wait "$lp" || true
    info "$WHO: $(tail -n 1 /tmp/hog.txt)"
    python3 -c 'import json,sys
j = json.load(open(sys.argv[1]))["jobs"][0]
if j["error"]: sys.exit("fio error %d" % j["error"])
r = j["read"]
print("%d" % (r["clat_ns"]["max"] / 1e6))
print("reads: %d IOPS, %d completed" % (r["iops"], r["total_ios"]))' /tmp/hogfio.json >/tmp/hogmax.txt 2>&1 ||
        echo failed >/tmp/hogmax.txt
    READ_MAX_MS[$WHO]=$(head -n 1 /tmp/hogmax.txt)
    info "$WHO: $(tail -n 1 /tmp/hogmax.txt)"
    info "$WHO: longest 64 KiB read ${READ_MAX_MS[$WHO]} ms while the hogs held R2Ts"
    settle; nvme disconnect -n "$NQN" >/dev/null 2>&1 || true
    if [ "${READ_MAX_MS[$WHO]}" = failed ]; then
        kmsg_errors | head -n 5 | sed 's/^/    kernel: /'; kmsg_mark
    else
        kmsg_check "$WHO: 64 KiB reads while discovery controllers held R2Ts"
    fi
}

step "setup: nvme-tcp, nvmet-tcp, a 64 MiB file"
modprobe -a nvme-tcp nvmet nvmet-tcp
info "kernel $(uname -r), $(nvme version)"
[ -s /etc/nvme/hostnqn ] || { mkdir -p /etc/nvme; nvme gen-hostnqn >/etc/nvme/hostnqn; }
rm -f "$IMG"; truncate -s 64M "$IMG"

nvmet_export "$NQN" "$IMG"
phase nvmet
hostile nvmet
nvmet_unexport "$NQN"

step "ours: $TARGET_BIN with a TCP listener"
cat >/tmp/tcp.toml <<EOF
[[listener]]
transport = "tcp"
address = "$IP"
port = $PORT

[[listener]]
transport = "tcp"
address = "::1"
port = $PORT

[[subsystem]]
nqn = "$NQN"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
path = "$IMG"
EOF
NO_COLOR=1 "$TARGET_BIN" --config /tmp/tcp.toml >"$TLOG" 2>&1 &
TPID=$!
phase ours
hostile ours
info "strangers: connect during the flood (ms) nvmet ${CONN_MS[nvmet]}, ours ${CONN_MS[ours]}; longest 64 KiB read (ms) nvmet ${READ_MAX_MS[nvmet]}, ours ${READ_MAX_MS[ours]}"
bad=
info "ours: the kernel host's slowest connect during the flood ${CONN_MS[ours]} ms (goal 1000, bound $CONNECT_BOUND_MS)"
[[ ${CONN_MS[ours]} =~ ^[0-9]+$ ]] && [ "${CONN_MS[ours]}" -le "$CONNECT_BOUND_MS" ] ||
    bad+=" the kernel host's connect during the flood (ms): ${CONN_MS[ours]} (bound $CONNECT_BOUND_MS);"
[[ ${READ_MAX_MS[ours]} =~ ^[0-9]+$ ]] && [ "${READ_MAX_MS[ours]}" -lt 2000 ] ||
    bad+=" the longest 64 KiB read while the hogs held R2Ts (ms): ${READ_MAX_MS[ours]} (goal < 2000);"
[ -z "$bad" ] || fail "ours, strangers on the fabric:$bad"


step "ours: a host with a 49-day keep-alive whose network goes dark is freed within 60 s"
for _ in $(seq 40); do [ "$(controllers_of "$PROBE_NQN")" = 0 ] && break; sleep 0.25; done
ip netns add "$GONE_NS"
ip link add tg0 type veth peer name tg1
ip link set tg1 netns "$GONE_NS"
ip addr add 10.98.0.1/24 dev tg0
ip link set tg0 up
ip netns exec "$GONE_NS" sh -c 'ip addr add 10.98.0.2/24 dev tg1 && ip link set tg1 up &&
    ip link set lo up && ip route add default via 10.98.0.1'
ip netns exec "$GONE_NS" "$PROBE" vanish "$IP" "$PORT" "$NQN" 120 4294967295 >/tmp/vanish.txt 2>&1 &
BG=$!
for _ in $(seq 40); do [ "$(controllers_of "$PROBE_NQN")" = 1 ] && break; sleep 0.25; done
[ "$(controllers_of "$PROBE_NQN")" = 1 ] || { cat /tmp/vanish.txt; fail "the vanishing host did not connect"; }
"$TARGET_BIN" status --json | python3 -c 'import json,sys
st = json.load(sys.stdin)
t = [c["transport"] for s in st["subsystems"] for c in s["controllers"] if c["host_nqn"] == sys.argv[1]]
sys.exit(0 if t == ["tcp"] else "status: the transport of the probe controller is %r" % t)' "$PROBE_NQN" ||
    fail "status does not show the controller's transport"
ip netns exec "$GONE_NS" ip link set tg1 down
T=$SECONDS gone=0
while [ $((SECONDS - T)) -lt 60 ]; do [ "$(controllers_of "$PROBE_NQN")" = 0 ] && { gone=1; break; }; sleep 0.5; done
[ $gone = 1 ] || fail "a host with a 49-day keep-alive whose network went dark still holds its controller after 60 s"
info "freed after $((SECONDS - T)) s"
curl -s http://127.0.0.1:9469/metrics >/tmp/metrics.txt
grep -E '^nvmf_target_(connects|disconnects)_total\{.*transport="tcp"' /tmp/metrics.txt | sed 's/^/    /'
grep -qE "^nvmf_target_connects_total\{subsystem=\"$NQN\",transport=\"tcp\",type=\"io\"\} [1-9]" /tmp/metrics.txt ||
    fail "no I/O queue connect counted with transport=\"tcp\""
grep -qE '^nvmf_target_disconnects_total\{reason="[a-z_]+",transport="tcp"\} [1-9]' /tmp/metrics.txt ||
    fail "no disconnect counted with transport=\"tcp\""
# fio's 64k reads went zero-copy; the host is in this guest, so the kernel copied after
# all and said so (each connection then sends by copy); no buffer was left with it.
grep -E '^nvmf_target_zero_copy_sends_total' /tmp/metrics.txt | sed 's/^/    /'
grep -qE '^nvmf_target_zero_copy_sends_total\{outcome="sent"\} [1-9]' /tmp/metrics.txt ||
    fail "no zero-copy send of a read's data counted"
grep -qE '^nvmf_target_zero_copy_sends_total\{outcome="copied"\} [1-9]' /tmp/metrics.txt ||
    fail "the kernel's notice that it copied a local peer's zero-copy send was not read"
! grep -qE '^nvmf_target_zero_copy_sends_total\{outcome="abandoned"\} [1-9]' /tmp/metrics.txt ||
    fail "zero-copy buffers abandoned"
kill -9 "$BG" 2>/dev/null; wait "$BG" 2>/dev/null || true; BG=
ip netns del "$GONE_NS"

step "ours: IPv6 (a listener on ::1): discovery lists it, the kernel host connects and reads"
kmsg_mark
nvme discover -t tcp -a ::1 -s "$PORT" >/tmp/discover6.txt || fail "discovery over IPv6"
grep -q "adrfam: *ipv6" /tmp/discover6.txt || { cat /tmp/discover6.txt; fail "no ipv6 entry in the discovery log"; }
nvme connect -t tcp -a ::1 -s "$PORT" -n "$NQN" >/dev/null || fail "nvme connect -t tcp -a ::1"
live_ctrl "$NQN"
[ "$(cat "/sys/class/nvme/$CTRL/address" | tr ',' '\n' | grep traddr)" = "traddr=::1" ] ||
    fail "controller $CTRL is not at ::1: $(cat "/sys/class/nvme/$CTRL/address")"
dd if="$NS" of=/dev/null bs=4096 count=256 iflag=direct status=none || fail "read over IPv6"

step "ours: a namespace added live reaches the host on TCP (IPv6) without a reconnect, and goes"
truncate -s 16M /var/tmp/tcp2.img
printf 'live-added-tcp' | dd of=/var/tmp/tcp2.img conv=notrunc status=none
"$TARGET_BIN" namespace add --subsystem "$NQN" --path /var/tmp/tcp2.img >/dev/null || fail "namespace add"
NS2=
for _ in $(seq 150); do NS2=$(ns_dev "$NQN" 2) && break; sleep 0.2; done
[ -n "$NS2" ] || fail "namespace 2, added live, did not reach the host over TCP"
dd if="$NS2" bs=4096 count=1 iflag=direct status=none | head -c 14 | grep -q live-added-tcp ||
    fail "namespace 2 does not read what its file holds"
[ "$(cat "/sys/class/nvme/$CTRL/state")" = live ] || fail "the host's controller is not live after the change"
settle
# The host is connected and sees it: refused unless --force, the file and the host unchanged.
if "$TARGET_BIN" namespace del --subsystem "$NQN" --nsid 2 >/tmp/nsdel.txt 2>&1; then
    fail "namespace del of a namespace a connected host sees was not refused"
fi
grep -q "namespace 2 of $NQN is in use: 1 host(s) connected" /tmp/nsdel.txt || fail "namespace del refused without saying why: $(cat /tmp/nsdel.txt)"
ns_dev "$NQN" 2 >/dev/null || fail "a refused namespace del removed namespace 2 from the host"
"$TARGET_BIN" namespace del --subsystem "$NQN" --nsid 2 --force >/dev/null || fail "namespace del --force"
for _ in $(seq 150); do ns_dev "$NQN" 2 >/dev/null || break; sleep 0.2; done
ns_dev "$NQN" 2 >/dev/null && fail "namespace 2, removed live, is still on the host"
info "namespace 2 added live appeared as $NS2 on $CTRL and went when removed"
settle
nvme disconnect -n "$NQN" >/dev/null
kmsg_check "ours: the kernel host over IPv6"
grep -q " ERROR " "$TLOG" && { grep " ERROR " "$TLOG" | head -n 5; fail "our target logged errors"; }
own_down

step "results: tcp-probe, our outcome vs nvmet's (or ours by design, and why)"
printf '    %-20s %-34s %-34s\n' case nvmet ours
bad=0
for c in $(printf '%s\n' "${!OUT_ours[@]}" | sort); do
    n=${OUT_nvmet[$c]:-missing} o=${OUT_ours[$c]}
    note=
    if [ "$(class_of "$n")" != "$(class_of "$o")" ]; then
        if [ -n "${KNOWN[$c]:-}" ]; then note="(${KNOWN[$c]})"; else note="<-- DIFFERS"; bad=1; fi
    fi
    printf '    %-20s %-34s %-34s %s\n' "$c" "$n" "$o" "$note"
done
# Ours, whatever nvmet does: every malformed PDU is answered with a termination request.
for c in pdu-before-icreq second-icreq icreq-bad-pfv unknown-pdu-type wrong-hlen oversized-plen bad-header-digest h2c-without-r2t h2c-outside-r2t; do
    case ${OUT_ours[$c]:-} in term:*) ;; *) echo "FAIL: ours answered $c with ${OUT_ours[$c]:-nothing}"; bad=1 ;; esac
done
for c in good good-digests connect-by-r2t; do
    [ "${OUT_ours[$c]:-}" = connected ] || { echo "FAIL: ours: $c is ${OUT_ours[$c]:-missing}"; bad=1; }
done
# Where KNOWN excuses a difference from nvmet, ours is still held to what KNOWN says.
[ "${OUT_ours[half-icreq]:-}" = closed ] || { echo "FAIL: ours kept half an ICReq: ${OUT_ours[half-icreq]:-}"; bad=1; }
[ "${OUT_ours[truncated-capsule]:-}" = closed ] || { echo "FAIL: ours kept a truncated capsule's connection past the Connect deadline: ${OUT_ours[truncated-capsule]:-}"; bad=1; }
[[ ${OUT_ours[oversized-plen]:-} == term:* ]] || { echo "FAIL: ours did not refuse an oversized length from the header: ${OUT_ours[oversized-plen]:-}"; bad=1; }
[ $bad = 0 ] || fail "outcomes differ from nvmet's"
PASSED=1
echo "TCP PASS"
