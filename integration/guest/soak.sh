#!/bin/bash
# soak.sh: a hostile soak (issue 57, item 10). Runs INSIDE the current-host lab guest
# (Debian 13, Linux 7.x, nvme-cli 2.13, tlshd), cwd /lab = project root
# (integration/run-soak-tests). Three kernel hosts, each of its own host NQN and
# subsystem: one over RDMA (soft-RoCE) and one over NVMe/TCP, both authenticating with
# DH-HMAC-CHAP (ffdhe2048), and one over NVMe/TCP with TLS 1.3 (a PSK). While they run fio
# with crc32c verify, a generator from 32 other addresses of this guest floods the
# target with what strangers can send without proving anything:
#   - 96 plain TCP connections that send nothing (8 addresses x 12), re-opened when closed
#   - 96 stalled TLS handshakes on the TLS port (8 addresses x 12)
#   - 8 discovery controllers, each of its own host NQN, that keep 30 Set Features of
#     128 KiB each waiting on R2Ts they never answer
#   - garbage: random bytes, broken ICReqs, random capsules, Connects with random data
#     (16 connections at a time from 8 addresses)
#   - DH-HMAC-CHAP as the TCP host's NQN: 6 loops from 8 addresses that connect,
#     negotiate (the target computes its ffdhe2048 exponentiation), take the challenge
#     and hang up
# Ours for SOAK_SECS (300 by default: five minutes), then nvmet in the same boot under the
# same flood for SOAK_NVMET_SECS (40: the comparison), each target alone in its phase. The
# goals are ours: where nvmet misses one, it is recorded and printed, not a failure.
# Each phase: the hosts connect during the flood (each within 5 s, authentication
# included), fio verify runs to the end with no error and no I/O waiting 2 s or more, then
# each host's controller is reset (a path blip) and must be live again within 5 s; the
# hosts' kernel log shows nothing but the resets. Printed: connections the target
# absorbed per second, our RSS and CPU, the guest's CPU, the longest I/O wait, connect and
# reconnect times, for both targets.
# Output ends with the table and "SOAK PASS".
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
SECS=${SOAK_SECS:-300}
NVMET_SECS=${SOAK_NVMET_SECS:-40}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
LOAD=${LOAD_BIN:-build/release/examples/hostile-load}
PROBE=${PROBE_BIN:-build/release/examples/auth-probe}
P=nqn.2026-11.io.nvmf-lab
DIR=/var/tmp/soak
CONF=$DIR/target.toml
TLOG=/tmp/soak-target.log
TPID=
# The three hosts: transport, port, subsystem, host NQN, host ID.
NAMES=(rdma tcp tls)
declare -A TRT=([rdma]=rdma [tcp]=tcp [tls]=tcp)
declare -A PRT=([rdma]=4420 [tcp]=4420 [tls]=4421)
declare -A SUBN HOSTN HID DEV KEYS ROW
for n in "${NAMES[@]}"; do
    SUBN[$n]=$P:soak-$n
    HID[$n]=$(printf '5a000000-0000-4000-8000-%012d' "${#n}${PRT[$n]}")
    HOSTN[$n]=nqn.2014-08.org.nvmexpress:uuid:${HID[$n]}
done
. integration/guest/common.sh
. integration/guest/kmsg.sh
NVMET_CFG=/sys/kernel/config/nvmet

cleanup() {
    local rc=$?
    set +eE; trap - ERR
    jobs -p | xargs -r kill 2>/dev/null
    for n in "${NAMES[@]}"; do nvme disconnect -n "${SUBN[$n]}" >/dev/null 2>&1; done
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null
    nvmet_down 2>/dev/null
    if [ $rc != 0 ]; then
        echo "--- our target's log (last 40 lines; all of it in integration/out/soak-target.log)"
        tail -n 40 "$TLOG" 2>/dev/null
        cp "$TLOG" /lab/integration/out/soak-target.log 2>/dev/null
        echo "--- dmesg (last 30 lines)"; dmesg | tail -n 30
        echo "SOAK FAILED (exit $rc)"
    fi
    exit $rc
}
trap cleanup EXIT

step "setup: soft-RoCE, tlshd, keys, 32 more addresses, three 128 MiB files"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma tls nvme-tcp nvmet nvmet-rdma nvmet-tcp
rdma link show | grep -q "netdev $IF\b" || rdma link add rxe0 type rxe netdev "$IF"
systemctl restart tlshd || fail "tlshd did not start"
mkdir -p "$DIR"
for n in "${NAMES[@]}"; do rm -f "$DIR/$n.img"; truncate -s 128M "$DIR/$n.img"; done
for i in $(seq 200 231); do
    ip addr show dev "$IF" | grep -q "inet 10.0.2.$i/" || ip addr add "10.0.2.$i/24" dev "$IF"
done
for n in rdma tcp; do
    KEYS[$n]=$(nvme gen-dhchap-key -m 1 -n "${HOSTN[$n]}" 2>/dev/null | grep -o 'DHHC-1:[^ ]*' | head -n 1)
    [ -n "${KEYS[$n]}" ] || fail "nvme gen-dhchap-key"
done
KEYS[tls]=$(nvme gen-tls-key --hostnqn="${HOSTN[tls]}" --subsysnqn="${SUBN[tls]}" --insert 2>/tmp/genkey.err | grep -o 'NVMeTLSkey-1:01:[^ ]*:' | head -n 1)
[ -n "${KEYS[tls]}" ] || fail "nvme gen-tls-key: $(cat /tmp/genkey.err)"
info "kernel $(uname -r), $(nvme version | head -n 1), $(nproc) vCPUs"

# ---- the targets ------------------------------------------------------------------------
nvmet_up() {
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
    local n h i=0 port
    for n in "${NAMES[@]}"; do
        h=$NVMET_CFG/hosts/${HOSTN[$n]}
        mkdir "$NVMET_CFG/subsystems/${SUBN[$n]}" "$h"
        echo 0 >"$NVMET_CFG/subsystems/${SUBN[$n]}/attr_allow_any_host"
        mkdir "$NVMET_CFG/subsystems/${SUBN[$n]}/namespaces/1"
        echo -n "$DIR/$n.img" >"$NVMET_CFG/subsystems/${SUBN[$n]}/namespaces/1/device_path"
        echo 1 >"$NVMET_CFG/subsystems/${SUBN[$n]}/namespaces/1/enable"
        if [ "$n" != tls ]; then
            echo "hmac(sha256)" >"$h/dhchap_hash"; echo ffdhe2048 >"$h/dhchap_dhgroup"
            echo "${KEYS[$n]}" >"$h/dhchap_key"
        fi
        ln -s "$h" "$NVMET_CFG/subsystems/${SUBN[$n]}/allowed_hosts/${HOSTN[$n]}"
    done
    for port in 1:rdma:4420 2:tcp:4420 3:tcp:4421; do
        IFS=: read -r i tr p <<<"$port"
        mkdir "$NVMET_CFG/ports/$i"
        echo "$tr" >"$NVMET_CFG/ports/$i/addr_trtype"; echo ipv4 >"$NVMET_CFG/ports/$i/addr_adrfam"
        echo "$IP" >"$NVMET_CFG/ports/$i/addr_traddr"; echo "$p" >"$NVMET_CFG/ports/$i/addr_trsvcid"
        [ "$i" = 3 ] && echo tls1.3 >"$NVMET_CFG/ports/$i/addr_tsas"
    done
    ln -s "$NVMET_CFG/subsystems/${SUBN[rdma]}" "$NVMET_CFG/ports/1/subsystems/"
    ln -s "$NVMET_CFG/subsystems/${SUBN[tcp]}" "$NVMET_CFG/ports/2/subsystems/"
    ln -s "$NVMET_CFG/subsystems/${SUBN[tls]}" "$NVMET_CFG/ports/3/subsystems/"
}
nvmet_down() {
    local n i
    for i in 1 2 3; do
        rm -f "$NVMET_CFG/ports/$i/subsystems/"* 2>/dev/null
        rmdir "$NVMET_CFG/ports/$i" 2>/dev/null
    done
    for n in "${NAMES[@]}"; do
        [ -d "$NVMET_CFG/subsystems/${SUBN[$n]}" ] || continue
        rm -f "$NVMET_CFG/subsystems/${SUBN[$n]}/allowed_hosts/"*
        echo 0 >"$NVMET_CFG/subsystems/${SUBN[$n]}/namespaces/1/enable"
        rmdir "$NVMET_CFG/subsystems/${SUBN[$n]}/namespaces/1" "$NVMET_CFG/subsystems/${SUBN[$n]}"
        rmdir "$NVMET_CFG/hosts/${HOSTN[$n]}"
    done
}
ours_up() {
    {
        printf '[[listener]]\naddress = "%s"\nport = 4420\n' "$IP"
        printf '[[listener]]\ntransport = "tcp"\naddress = "%s"\nport = 4420\n' "$IP"
        printf '[[listener]]\ntransport = "tcp"\naddress = "%s"\nport = 4421\nsecure = "required"\n' "$IP"
        for n in "${NAMES[@]}"; do
            printf '[[subsystem]]\nnqn = "%s"\nhosts = ["%s"]\n' "${SUBN[$n]}" "${HOSTN[$n]}"
            printf '[[subsystem.namespace]]\npath = "%s"\n' "$DIR/$n.img"
        done
        for n in rdma tcp; do
            printf '[[host]]\nnqn = "%s"\ndhchap_key = "%s"\ndhchap_dhgroup = "ffdhe2048"\n' "${HOSTN[$n]}" "${KEYS[$n]}"
        done
        printf '[[host]]\nnqn = "%s"\ntls_key = "%s"\n' "${HOSTN[tls]}" "${KEYS[tls]}"
        printf '[control]\nsocket = "%s/control.sock"\n[metrics]\naddress = "127.0.0.1:9469"\n' "$DIR"
    } >"$CONF"
    "$TARGET_BIN" check-config "$CONF" >/dev/null || fail "check-config refused the soak's configuration"
    RUST_LOG=${SOAK_LOG:-info} NO_COLOR=1 "$TARGET_BIN" --config "$CONF" >"$TLOG" 2>&1 &
    TPID=$!
}
wait_ports() { # WHO: RDMA discovery, and both TCP ports, answer
    local i
    for i in $(seq 60); do
        if nvme discover -t rdma -a "$IP" -s 4420 >/dev/null 2>&1 &&
            bash -c "exec 3<>/dev/tcp/$IP/4420 && exec 4<>/dev/tcp/$IP/4421" 2>/dev/null; then
            return 0
        fi
        sleep 0.5
    done
    fail "$1 does not answer on $IP (rdma 4420, tcp 4420 and 4421)"
}

# ---- the hosts --------------------------------------------------------------------------
hconnect() { # NAME: the kernel host connects (TLS or DH-HMAC-CHAP); prints the ms it took,
    # or "refused"
    local n=$1 t0 extra=()
    case $n in tls) extra=(--tls) ;; *) extra=(--dhchap-secret="${KEYS[$n]}") ;; esac
    t0=$(date +%s%N)
    timeout 60 nvme connect -t "${TRT[$n]}" -a "$IP" -s "${PRT[$n]}" -n "${SUBN[$n]}" \
        --hostnqn="${HOSTN[$n]}" --hostid="${HID[$n]}" --ctrl-loss-tmo=30 --reconnect-delay=1 \
        "${extra[@]}" >/tmp/connect-$n.out 2>&1 || { echo refused; return 0; }
    echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
ctrl_of() { # NAME -> the live controller of its subsystem
    local c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "${SUBN[$1]}" ] && [ "$(cat "$c/state" 2>/dev/null)" = live ] &&
            { echo "${c##*/}"; return 0; }
    done
    return 1
}
live_of() { # NAME: waits up to 20 s for its controller and namespace; sets DEV[NAME]
    local c s n
    for _ in $(seq 100); do
        if c=$(ctrl_of "$1"); then
            for s in /sys/class/nvme/"$c"/nvme*n1 /sys/class/nvme/"$c"/nvme*c*n1; do
                [ -e "$s" ] || continue
                n=${s##*/}; n=$(echo "$n" | sed 's/c[0-9]*n/n/')
                [ -b "/dev/$n" ] && { DEV[$1]=/dev/$n; return 0; }
            done
        fi
        sleep 0.2
    done
    return 1
}
FLOOD_PIDS=()
flood() { # WHO SECONDS: the generator, in the background (FLOOD_PIDS); its outputs in
    # /tmp/flood-*.txt
    local s=$2
    FLOOD_PIDS=()
    "$LOAD" stall "$IP" 4420 10.0.2.200 8 12 "$s" >/tmp/flood-stall.txt 2>&1 &
    FLOOD_PIDS+=($!)
    "$LOAD" stall "$IP" 4421 10.0.2.208 8 12 "$s" >/tmp/flood-tls.txt 2>&1 &
    FLOOD_PIDS+=($!)
    "$LOAD" hog "$IP" 4420 8 "$s" >/tmp/flood-hog.txt 2>&1 &
    FLOOD_PIDS+=($!)
    "$LOAD" garbage "$IP" 4420 10.0.2.216 8 16 "$s" >/tmp/flood-garbage.txt 2>&1 &
    FLOOD_PIDS+=($!)
    NVMF_TRANSPORT=tcp "$PROBE" "$IP" 4420 "${SUBN[tcp]}" "${HOSTN[tcp]}" "${HID[tcp]}" \
        "${KEYS[tcp]}" flood 6 10.0.2.224 8 "$s" >/tmp/flood-dh.txt 2>&1 &
    FLOOD_PIDS+=($!)
}
cpu_busy() { # the guest's busy and total jiffies
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t }' /proc/stat
}
proc_cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }

# must WHO MESSAGE: a goal missed: ours fails; nvmet's miss is recorded (the yardstick).
must() {
    [ "$1" = ours ] && fail "$2"
    info "nvmet missed a goal: $2"
    MISSED[$1]="${MISSED[$1]:-}${MISSED[$1]:+; }$2"
}
declare -A MISSED
phase() { # WHO SECONDS
    local who=$1 secs=$2 n t0 start ms rss0 rssmax=0 r cpu0 busy0 tot0 busy1 tot1 fpid worst=0 x
    step "$who: the flood for ${secs}s from 32 addresses; three hosts connect and run fio verify"
    kmsg_mark
    read -r busy0 tot0 < <(cpu_busy)
    [ "$who" = ours ] && { rss0=$(rss_kib "$TPID"); cpu0=$(proc_cpu "$TPID"); }
    flood "$who" "$secs"
    start=$(date +%s)
    sleep 5
    local up=()
    for n in "${NAMES[@]}"; do
        ms=$(hconnect "$n")
        ROW[$who-connect-$n]=$ms
        if [ "$ms" = refused ]; then
            must "$who" "the $n host could not connect during the flood: $(tail -n 1 /tmp/connect-$n.out)"
            continue
        fi
        live_of "$n" || fail "$who: $n: no live controller with a namespace"
        up+=("$n")
        info "$who: $n host connected in $ms ms during the flood (${DEV[$n]})"
        [ "$ms" -lt 5000 ] || must "$who" "the $n host took $ms ms to connect during the flood (goal < 5 s)"
    done
    [ ${#up[@]} -gt 0 ] || fail "$who: no host connected during the flood"
    # fio to 15 s before the flood ends: the blips come while it still runs.
    local run=$(( secs - ($(date +%s) - start) - 15 ))
    [ $run -ge 20 ] || run=20
    local args=()
    for n in "${up[@]}"; do
        args+=(--name="$n" --filename="${DEV[$n]}")
    done
    fio --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=8 --size=96M \
        --time_based --runtime="$run" --verify=crc32c --verify_fatal=1 --verify_backlog=64 \
        --output-format=json "${args[@]}" >/tmp/fio-$who.json 2>/tmp/fio-$who.err &
    fpid=$!
    while kill -0 "$fpid" 2>/dev/null; do
        [ "$who" = ours ] && { r=$(rss_kib "$TPID"); [ "$r" -gt "$rssmax" ] && rssmax=$r; }
        sleep 5
    done
    wait "$fpid" || { tail -n 5 /tmp/fio-$who.err; must "$who" "fio failed during the flood"; }
    python3 - /tmp/fio-$who.json >/tmp/fio-$who.txt <<'PY' || { cat /tmp/fio-$who.txt; must "$who" "fio reported errors"; }
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
bad = 0
for j in jobs:
    m = max(j[d]["clat_ns"]["max"] for d in ("read", "write")) / 1e6
    io = j["write"]["total_ios"] + j["read"]["total_ios"]
    print("%s %d %d %d %d" % (j["jobname"], j["error"], m, io, j["write"]["iops"]))
    bad |= j["error"] != 0
sys.exit(1 if bad else 0)
PY
    while read -r n e x io iops; do
        ROW[$who-wait-$n]=$x; ROW[$who-ios-$n]=$io
        info "$who: $n: fio error $e, $io I/Os verified ($iops IOPS), longest I/O wait $x ms"
        [ "$x" -gt "$worst" ] && worst=$x
    done </tmp/fio-$who.txt
    ROW[$who-wait]=$worst
    [ "$worst" -lt 2000 ] || must "$who" "an I/O waited $worst ms during the flood (goal < 2 s)"
    kmsg_window | grep -v nvmet | grep -E "$KMSG_PAT" >/tmp/kmsg-$who.txt || true
    if [ -s /tmp/kmsg-$who.txt ]; then
        head -n 20 /tmp/kmsg-$who.txt | sed 's/^/    kernel: /'
        must "$who" "the hosts' kernel log shows errors during the flood"
    fi
    # A path blip: each host's controller reset, while the flood goes on.
    for n in "${up[@]}"; do
        x=$(ctrl_of "$n") || { must "$who" "the $n host lost its controller"; continue; }
        t0=$(date +%s%N)
        nvme reset "/dev/$x" >/dev/null 2>&1 || true
        ms=
        for _ in $(seq 200); do
            [ "$(cat "/sys/class/nvme/$x/state" 2>/dev/null)" = live ] &&
                { ms=$(( ($(date +%s%N) - t0) / 1000000 )); break; }
            sleep 0.05
        done
        ROW[$who-reset-$n]=${ms:-never}
        info "$who: $n host's controller reset: live again after ${ms:-more than 10 s} ms"
        [ -n "$ms" ] && [ "$ms" -lt 5000 ] || must "$who" "the $n host did not reconnect within 5 s of a reset"
    done
    kmsg_window | grep -v nvmet | grep -E "$KMSG_PAT" | grep -vE 'resetting controller|reset|Reconnecting' \
        >/tmp/kmsg-$who.txt || true
    if [ -s /tmp/kmsg-$who.txt ]; then
        head -n 20 /tmp/kmsg-$who.txt | sed 's/^/    kernel: /'
        must "$who" "the hosts' kernel log shows more than the resets"
    fi
    for n in "${NAMES[@]}"; do nvme disconnect -n "${SUBN[$n]}" >/dev/null 2>&1 || true; done
    wait "${FLOOD_PIDS[@]}" || true   # the generator ends with its time
    read -r busy1 tot1 < <(cpu_busy)
    ROW[$who-guestcpu]=$(( 100 * (busy1 - busy0) / (tot1 - tot0 + 1) ))
    local opened sent chal hogs secs_run
    secs_run=$(( $(date +%s) - start + 5 ))
    opened=$(( $(awk '{ v = $3 } END { print v + 0 }' /tmp/flood-stall.txt) + $(awk '{ v = $3 } END { print v + 0 }' /tmp/flood-tls.txt) ))
    sent=$(awk '{ v = $3 } END { print v + 0 }' /tmp/flood-garbage.txt)
    chal=$(awk '{ c = $3; r = $5; o = $7 } END { print c + r + o }' /tmp/flood-dh.txt)
    hogs=$(awk '{ v = $7 } END { print v + 0 }' /tmp/flood-hog.txt)
    ROW[$who-absorbed]=$(( (opened + sent + chal + hogs) / secs_run ))
    info "$who: $(tail -n 1 /tmp/flood-stall.txt) (plain) / $(tail -n 1 /tmp/flood-tls.txt) (TLS port)"
    info "$who: $(tail -n 1 /tmp/flood-garbage.txt); $(tail -n 1 /tmp/flood-dh.txt); $(tail -n 1 /tmp/flood-hog.txt)"
    info "$who: ${ROW[$who-absorbed]} connections absorbed per second; the guest's CPU ${ROW[$who-guestcpu]} % busy"
    if [ "$who" = ours ]; then
        kill -0 "$TPID" 2>/dev/null || fail "ours: the target died during the flood"
        ROW[ours-rss]="$((rss0 / 1024)) -> max $((rssmax / 1024)) MiB"
        ROW[ours-cpu]=$(( (($(proc_cpu "$TPID") - cpu0) * 100 / $(getconf CLK_TCK)) / secs_run ))
        info "ours: RSS ${ROW[ours-rss]}; the target's CPU ${ROW[ours-cpu]} % of one vCPU"
        [ $((rssmax - rss0)) -lt $((256 * 1024)) ] || fail "ours: RSS grew by $(( (rssmax - rss0) / 1024 )) MiB under the flood"
    fi
}

step "ours: three listeners (RDMA 4420, TCP 4420, TLS 4421), three subsystems"
ours_up
wait_ports ours
phase ours "$SECS"
own_down
grep -q "panicked" "$TLOG" && fail "ours: a thread panicked (see $TLOG)"

step "nvmet: the same ports and hosts"
nvmet_up
wait_ports nvmet
phase nvmet "$NVMET_SECS"
nvmet_down

step "the table"
printf '    %-34s %-22s %s\n' figure "ours (${SECS}s)" "nvmet (${NVMET_SECS}s)"
for n in "${NAMES[@]}"; do
    printf '    %-34s %-22s %s\n' "$n: connect during the flood (ms)" "${ROW[ours-connect-$n]:--}" "${ROW[nvmet-connect-$n]:--}"
done
for n in "${NAMES[@]}"; do
    printf '    %-34s %-22s %s\n' "$n: longest I/O wait (ms)" "${ROW[ours-wait-$n]:--}" "${ROW[nvmet-wait-$n]:--}"
    printf '    %-34s %-22s %s\n' "$n: I/Os verified" "${ROW[ours-ios-$n]:--}" "${ROW[nvmet-ios-$n]:--}"
    printf '    %-34s %-22s %s\n' "$n: live after a reset (ms)" "${ROW[ours-reset-$n]:--}" "${ROW[nvmet-reset-$n]:--}"
done
printf '    %-34s %-22s %s\n' "connections absorbed per second" "${ROW[ours-absorbed]:--}" "${ROW[nvmet-absorbed]:--}"
printf '    %-34s %-22s %s\n' "the guest's CPU busy (%)" "${ROW[ours-guestcpu]:--}" "${ROW[nvmet-guestcpu]:--}"
printf '    %-34s %-22s %s\n' "the target's CPU (% of a vCPU)" "${ROW[ours-cpu]:--}" "(in the kernel)"
printf '    %-34s %-22s %s\n' "the target's RSS" "${ROW[ours-rss]:--}" "(in the kernel)"
[ -n "${MISSED[nvmet]:-}" ] && info "nvmet under the same flood: ${MISSED[nvmet]}"
echo "SOAK PASS"
