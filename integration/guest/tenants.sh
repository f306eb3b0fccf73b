#!/bin/bash
# tenants.sh: several tenants on one subsystem. Runs INSIDE the lab guest
# (integration/run-tenants-tests), cwd /lab = project root, as root. NVMe/TCP (masking
# does not depend on the transport); the kernel host connects as two hosts (two host
# NQNs and host ids, one controller each):
#   1. differential: what a host is answered for a namespace it is not shown (ours: nsid 2
#      shown to another host) equals what nvmet answers for a namespace that does not
#      exist (nsid 2 of a subsystem with one): Identify Namespace, descriptors, the NVM
#      set's Identify, a read, a write, a flush, a reservation report, the active
#      namespace list;
#   2. masking: host A sees namespaces 1 and 4 only, host B 2 and 5 (their controllers'
#      namespaces), each reads its own;
#   3. live: while fio verifies on A's namespace 1, `nvmf-target namespace attach` shows
#      namespace 3 to A (A's controller gets it without reconnecting, `nvme list` shows
#      it, A reads it, B is told nothing) and `namespace detach` takes it away again; fio
#      sees no error; the file keeps both changes (the list of namespace 3), `status`
#      shows whom each namespace is shown to; the host's kernel log shows the rescans and
#      no error;
#   4. QoS: a cap set live on A's namespace 4 (2000 IOPS, or half of what A reached
#      uncapped on a slower machine) holds within 10 % over 20 s while fio asks for more,
#      and B's uncapped namespace 5 beside it keeps its speed; the waits are counted, the
#      cap is in the file and in status; A's own cap (a quarter of the namespace's) on it
#      holds too, and once removed A runs free again;
#   5. per-host statistics: status shows each controller's reads, writes, bytes, latency
#      and errors; with [metrics] per_host the scrape has series per host (what each did,
#      the initiator's gone controllers included), and a third host beyond per_host_max
#      counts in host="_other", the overflow counted.
# Output: the differential table, then "TENANTS PASS" (last line) on success.
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
PORT=4420
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
INIT=build/release/nvmf-initiator
NQN=nqn.2026-11.io.nvmf-lab:tenants
HOST_A=nqn.2026-11.io.nvmf-lab:tenant-a
HOST_B=nqn.2026-11.io.nvmf-lab:tenant-b
ID_A=6b1a0f3e-0000-4000-8000-00000000000a
ID_B=6b1a0f3e-0000-4000-8000-00000000000b
CONF=/tmp/tenants.toml
TLOG=/tmp/tenants-target.log
TPID= PASSED=0 FIO=
. integration/guest/common.sh
. integration/guest/kmsg.sh
NVMET_TRTYPE=tcp
. integration/guest/nvmet.sh

cleanup() {
    local rc=$?
    set +e
    [ -n "$FIO" ] && kill -9 "$FIO" 2>/dev/null
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    [ -n "$TPID" ] && { kill -TERM "$TPID"; wait "$TPID"; }
    nvmet_unexport "$NQN" 2>/dev/null
    if [ $PASSED = 0 ] && [ -f "$TLOG" ]; then echo "--- our target's log (last 30 lines)"; tail -n 30 "$TLOG"; fi
    [ $PASSED = 1 ] || echo "TENANTS FAILED (exit $rc)"
    exit $rc
}
trap cleanup EXIT

connect_as() { # HOSTNQN HOSTID: connects and prints the new controller's name
    local before c
    before=$(ls /sys/class/nvme/ 2>/dev/null | tr '\n' ' ')
    # As a second host on this machine (nvme-cli refuses a second connection to one
    # subsystem and address, whatever the host NQN).
    echo "transport=tcp,traddr=$IP,trsvcid=$PORT,nqn=$NQN,hostnqn=$1,hostid=$2,nr_io_queues=1" \
        >/dev/nvme-fabrics || fail "connect as $1"
    for _ in $(seq 100); do
        for c in /sys/class/nvme/nvme*; do
            c=${c##*/}
            [[ " $before " == *" $c "* ]] && continue
            [ "$(cat "/sys/class/nvme/$c/subsysnqn" 2>/dev/null)" = "$NQN" ] &&
                [ "$(cat "/sys/class/nvme/$c/state" 2>/dev/null)" = live ] && { echo "$c"; return 0; }
        done
        sleep 0.2
    done
    fail "no live controller for $1"
}
ctrl_nsids() { # CTRL: the nsids of the namespaces the controller has (its paths, or its disks)
    local d n out=
    for d in /sys/class/nvme/"$1"/nvme*; do
        [[ ${d##*/} =~ ^nvme[0-9]+(c[0-9]+)?n[0-9]+$ ]] || continue
        # (A namespace the kernel is removing may go while it is read.)
        n=$(cat "$d/nsid" 2>/dev/null) || { [ -e "$d" ] && fail "no nsid attribute for ${d##*/} of $1"; continue; }
        out+="$n "
    done
    tr ' ' '\n' <<<"$out" | grep . | sort -n | tr '\n' ' ' | sed 's/ $//'
}
wait_nsids() { # CTRL WANT WHAT
    for _ in $(seq 150); do [ "$(ctrl_nsids "$1")" = "$2" ] && return 0; sleep 0.2; done
    fail "$3: controller $1 has namespaces '$(ctrl_nsids "$1")', not '$2'"
}
# What a host is answered for namespace 2: one line per case, "ok" or the NVMe status
# (SCT, SC and DNR; not More, which says whether the error log has an entry), and what
# matters of the data.
declare -A OUT_nvmet OUT_ours
answer() { # nvme-cli ARGS... -> ok, 0x<status>, or host:<what nvme-cli said>
    local out rc=0 hex
    out=$(timeout 30 nvme "$@" 2>&1) || rc=$?
    [ $rc = 0 ] && { echo ok; return; }
    hex=$(grep -oE 'NVMe status: .*\((0x[0-9a-fA-F]+)\)' <<<"$out" | grep -oE '0x[0-9a-fA-F]+' | tail -n1) || true
    [ -n "$hex" ] && { printf '0x%x\n' $(( hex & 0x47ff )); return; }
    echo "host:$(tr '\n' ' ' <<<"$out" | cut -c1-40 | tr ' ' '_')"
}
# The SGL of a command without data, as the Linux host's nvme-tcp sends it (a transport
# SGL data block of length 0).
NO_DATA=0000000000000000000000000000005a
# A command to namespace 2 from our initiator as host A (the kernel host sends no I/O to
# a namespace it has not got): its status, or what went wrong.
raw() {
    local out
    out=$(timeout 30 "$INIT" raw -t tcp -a "$IP" -s "$PORT" -n "$NQN" -q "$HOST_A" -I "$ID_A" --nsid 2 "$@" 2>&1) || true
    sed -n 's/^cid [^ ]* status \(.*\) result .*/\1/p' <<<"$out" | grep . ||
        echo "initiator:$(tr '\n' ' ' <<<"$out" | cut -c1-40 | tr ' ' '_')"
}
probe_ns() { # WHO CTRL: the cases for nsid 2 from controller CTRL
    local who=$1 dev=/dev/$2 out c
    local -A o
    out=$(nvme id-ns "$dev" -n 2 -o json 2>&1) || true
    o[id-ns]="$(answer id-ns "$dev" -n 2) nsze=$(python3 -c 'import json,sys
try: print(json.loads(sys.argv[1])["nsze"])
except Exception: print("-")' "$out")"
    o[ns-descs]=$(answer ns-descs "$dev" -n 2)
    o[read]=$(raw --opcode 2 --cdw 12=7 --window read:4096)
    o[write]=$(raw --opcode 1 --cdw 12=7 --window write:4096)
    o[write-zeroes]=$(raw --opcode 8 --cdw 12=7 --sgl "$NO_DATA")
    o[flush]=$(raw --opcode 0 --sgl "$NO_DATA")
    o[compare]=$(raw --opcode 5 --cdw 12=7 --window write:4096)
    o[deallocate]=$(raw --opcode 9 --cdw 11=4 --in-capsule 16)
    o[resv-register]=$(raw --opcode 0x0d --in-capsule 16)
    o[resv-report]=$(raw --opcode 0x0e --cdw 10=1023 --window read:4096)
    out=$(nvme list-ns "$dev" 2>&1) || true
    # (Whether nsid 2 is listed: ours lists the other namespace A sees too.)
    o[active-list]="$(answer list-ns "$dev") $(grep -qw 0x2 <<<"$out" && echo "lists-2" || echo "without-2")"
    for c in "${!o[@]}"; do
        if [ "$who" = nvmet ]; then OUT_nvmet[$c]=${o[$c]}; else OUT_ours[$c]=${o[$c]}; fi
        info "$who  $c: ${o[$c]}"
    done
}

step "setup: nvme-tcp, nvmet-tcp, three 32 MiB files"
modprobe -a nvme-tcp nvmet nvmet-tcp
info "kernel $(uname -r), $(nvme version)"
for i in 1 2 3; do
    rm -f /var/tmp/tenant$i.img; truncate -s 32M /var/tmp/tenant$i.img
    printf 'tenant-namespace-%s' "$i" | dd of=/var/tmp/tenant$i.img conv=notrunc status=none
done

step "nvmet: a namespace that does not exist (nsid 2 of a subsystem with one)"
nvmet_export "$NQN" /var/tmp/tenant1.img
wait_discovery nvmet
kmsg_mark
C=$(connect_as "$HOST_A" "$ID_A")
probe_ns nvmet "$C"
settle
nvme disconnect -n "$NQN" >/dev/null
nvmet_unexport "$NQN"
kmsg_mark   # the probes' errors are expected

step "ours: namespaces 1 and 4 shown to host A, 2 and 5 to host B, 3 to no host yet"
cat >"$CONF" <<EOF
# Three tenants' disks in one subsystem.
[[listener]]
transport = "tcp"
address = "$IP"
port = $PORT

# Per-host series: host A, host B, and one for whoever comes beyond.
[metrics]
per_host = true
per_host_max = 3

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
path = "/var/tmp/tenant1.img"
hosts = ["$HOST_A"]

[[subsystem.namespace]]
nsid = 2
path = "/var/tmp/tenant2.img"
hosts = ["$HOST_B"]   # the other tenant

[[subsystem.namespace]]
nsid = 3
path = "/var/tmp/tenant3.img"
hosts = []

[[subsystem.namespace]]
nsid = 4
backend = "null"
size = "1G"
hosts = ["$HOST_A"]

[[subsystem.namespace]]
nsid = 5
backend = "null"
size = "1G"
hosts = ["$HOST_B"]
EOF
NO_COLOR=1 "$TARGET_BIN" --config "$CONF" >"$TLOG" 2>&1 &
TPID=$!
wait_discovery ours
A=$(connect_as "$HOST_A" "$ID_A")
probe_ns ours "$A"
kmsg_mark

step "the differential: namespace 2 as host A is answered (ours: shown to B; nvmet: none)"
# Where nvmet-tcp 6.1 strays: the answer the specification asks for, and why.
declare -A KNOWN=(
    [write]="INVALID_NS (0x00b, DNR)|nvmet-tcp 6.1 never answers a write to an nsid it has not got whose data it must fetch (R2T)"
    [compare]="INVALID_NS (0x00b, DNR)|as write"
)
printf '    %-14s %-26s %-26s %s\n' case nvmet ours verdict
bad=0
for c in $(printf '%s\n' "${!OUT_nvmet[@]}" | sort); do
    v=same want=${OUT_nvmet[$c]}
    [ -n "${KNOWN[$c]:-}" ] && { want=${KNOWN[$c]%%|*}; v="spec (${KNOWN[$c]#*|})"; }
    [ "$want" = "${OUT_ours[$c]:-}" ] || { v=DIFFERENT; bad=1; }
    printf '    %-14s %-26s %-26s %s\n' "$c" "${OUT_nvmet[$c]}" "${OUT_ours[$c]:-}" "$v"
done
[ $bad = 0 ] || fail "a namespace shown to another host is not answered as one that does not exist"

step "masking: host A sees namespaces 1 and 4 only, host B 2 and 5"
B=$(connect_as "$HOST_B" "$ID_B")
wait_nsids "$A" "1 4" "host A"
wait_nsids "$B" "2 5" "host B"
info "host A: controller $A, namespaces $(ctrl_nsids "$A"); host B: controller $B, namespaces $(ctrl_nsids "$B")"
NS1=$(ns_dev "$NQN" 1); NS2=$(ns_dev "$NQN" 2)
head -c 18 "$NS1" | grep -q tenant-namespace-1 || fail "host A does not read its namespace"
head -c 18 "$NS2" | grep -q tenant-namespace-2 || fail "host B does not read its namespace"
[ "$("$TARGET_BIN" status --json | python3 -c 'import json,sys
st = json.load(sys.stdin)
s = [x for x in st["subsystems"] if x["nqn"] == sys.argv[1]][0]
print(" ".join("%d:%s" % (n["nsid"], ",".join(n.get("hosts", ["*"])) or "-") for n in s["namespaces"]))' "$NQN")" \
  = "1:$HOST_A 2:$HOST_B 3:- 4:$HOST_A 5:$HOST_B" ] || fail "status does not show whom each namespace is shown to"
"$TARGET_BIN" status | grep -E '^ *(namespace|shown)' | sed 's/^/    status: /'
kmsg_check "two hosts on one subsystem"

step "live: namespace 3 attached to host A and detached, while fio verifies on A's namespace 1"
fio --name=a --filename="$NS1" --rw=randwrite --bs=4k --iodepth=8 --ioengine=libaio --direct=1 \
    --size=16M --verify=crc32c --verify_fatal=1 --time_based --runtime=25 >/tmp/fio-a.txt 2>&1 &
FIO=$!
sleep 3
kmsg_mark
"$TARGET_BIN" namespace attach --subsystem "$NQN" --nsid 3 --host-nqn "$HOST_A" | sed 's/^/    live: /'
wait_nsids "$A" "1 3 4" "after the attach"
nvme list >/tmp/list.txt
NS3=$(ns_dev "$NQN" 3) || fail "no block device for namespace 3 after the attach"
grep -q "^${NS3} " /tmp/list.txt || { cat /tmp/list.txt; fail "nvme list does not show $NS3"; }
head -c 18 "$NS3" | grep -q tenant-namespace-3 || fail "host A does not read namespace 3 after the attach"
[ "$(ctrl_nsids "$B")" = "2 5" ] || fail "host B got namespace 3 too"
info "attached: host A's controller has namespaces $(ctrl_nsids "$A") ($NS3 in nvme list); host B: $(ctrl_nsids "$B")"
settle
"$TARGET_BIN" namespace detach --subsystem "$NQN" --nsid 3 --host-nqn "$HOST_A" | sed 's/^/    live: /'
wait_nsids "$A" "1 4" "after the detach"
for _ in $(seq 50); do [ -b "$NS3" ] || break; sleep 0.2; done
[ -b "$NS3" ] && fail "$NS3 is still there after the detach"
info "detached: host A's controller has namespaces $(ctrl_nsids "$A"); $NS3 gone"
rescans() { kmsg_window | grep -c "$1: rescanning namespaces" || true; }
[ "$(rescans "$A")" -ge 2 ] || { kmsg_window | tail -n 20; fail "host A's kernel did not rescan on each change"; }
[ "$(rescans "$B")" = 0 ] || fail "host B was told of a namespace it never saw"
info "kernel log: $A rescanned $(rescans "$A") times, $B $(rescans "$B")"
wait "$FIO" || { tail -n 20 /tmp/fio-a.txt; FIO=; fail "fio on host A's namespace 1 failed during the attach and detach"; }
FIO=
info "fio: $(grep -E '^ *write: IOPS' /tmp/fio-a.txt | tr -s ' ')"
kmsg_check "a live attach and detach"
python3 - "$CONF" "$HOST_A" "$HOST_B" <<'EOF' || fail "the file does not keep the changes"
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
ns = {n["nsid"]: n.get("hosts") for n in c["subsystem"][0]["namespace"]}
assert ns == {1: [sys.argv[2]], 2: [sys.argv[3]], 3: [], 4: [sys.argv[2]], 5: [sys.argv[3]]}, ns
EOF
grep -q '# the other tenant' "$CONF" || fail "the live changes lost the file's comments"
info "the file keeps namespace 3's list (empty again) and its comments"

step "QoS: namespace 4 capped live while fio asks for more; B's namespace 5 keeps its speed"
NS4=$(ns_dev "$NQN" 4); NS5=$(ns_dev "$NQN" 5)
rr() { # DEV SECONDS OUT: 4k random reads at QD32, IOPS into OUT (JSON)
    fio --name=q --filename="$1" --rw=randread --bs=4k --iodepth=32 --ioengine=libaio --direct=1 \
        --time_based --runtime="$2" --output-format=json --output="$3" >/dev/null 2>&1
}
iops_of() { python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["jobs"][0]["read"]["iops"]))' "$1"; }
both() { # SECONDS: A on namespace 4 and B on namespace 5 at once
    rr "$NS4" "$1" /tmp/qa.json & local pa=$!
    rr "$NS5" "$1" /tmp/qb.json || fail "fio on B's namespace 5"
    wait $pa || fail "fio on A's namespace 4"
    A_IOPS=$(iops_of /tmp/qa.json); B_IOPS=$(iops_of /tmp/qb.json)
}
both 8
A_FREE=$A_IOPS B_FREE=$B_IOPS
info "uncapped, side by side: A $A_FREE IOPS, B $B_FREE IOPS"
# The cap is 2000, or half of A's uncapped speed where the machine is slower (CI's is):
# well below what fio asks for either way, so a cap that does nothing shows.
CAP=$(( A_FREE / 2 / 100 * 100 )); [ "$CAP" -gt 2000 ] && CAP=2000
HOST_CAP=$(( CAP / 4 / 10 * 10 ))
[ "$CAP" -ge 800 ] || fail "A reaches only $A_FREE IOPS uncapped: too slow to tell a cap from noise"
"$TARGET_BIN" namespace qos --subsystem "$NQN" --nsid 4 --rw-iops "$CAP" | sed 's/^/    live: /'
both 20
info "capped at $CAP: A $A_IOPS IOPS over 20 s, B $B_IOPS IOPS"
[ "$A_IOPS" -ge $((CAP * 9 / 10)) ] && [ "$A_IOPS" -le $((CAP * 11 / 10)) ] ||
    fail "the cap of $CAP IOPS did not hold within 10 %: $A_IOPS"
[ "$B_IOPS" -ge $((B_FREE * 9 / 10)) ] || fail "B's uncapped namespace slowed down: $B_IOPS IOPS against $B_FREE"
curl -sf http://127.0.0.1:9469/metrics >/tmp/metrics.txt || fail "no /metrics"
grep -E '^nvmf_target_qos_throttled' /tmp/metrics.txt | sed 's/^/    /'
grep '^nvmf_target_qos_throttled_total{' /tmp/metrics.txt | grep -F 'nsid="4"' | grep -F 'host=""' |
    awk '$2 >= 1 {ok = 1} END {exit !ok}' || fail "the waits for the cap are not counted"
grep -q "qos = { rw_iops = $CAP }" "$CONF" || fail "the cap is not in the file"
"$TARGET_BIN" status | grep -F "QoS (all hosts together): rw_iops $CAP" >/dev/null || fail "status does not show the cap"
# A host's own cap on the namespace, then none: A alone, 8 s each.
"$TARGET_BIN" namespace qos --subsystem "$NQN" --nsid 4 --rw-iops 0 | sed 's/^/    live: /'
"$TARGET_BIN" namespace qos --subsystem "$NQN" --nsid 4 --host-nqn "$HOST_A" --rw-iops "$HOST_CAP" | sed 's/^/    live: /'
rr "$NS4" 8 /tmp/qa.json || fail "fio on A's namespace 4"
A_HOST=$(iops_of /tmp/qa.json)
"$TARGET_BIN" status | grep -F "QoS of $HOST_A: rw_iops $HOST_CAP" >/dev/null || fail "status does not show the host's cap"
"$TARGET_BIN" namespace qos --subsystem "$NQN" --nsid 4 --host-nqn "$HOST_A" --rw-iops 0 | sed 's/^/    live: /'
rr "$NS4" 4 /tmp/qa.json || fail "fio on A's namespace 4"
A_AGAIN=$(iops_of /tmp/qa.json)
info "A's own cap of $HOST_CAP: $A_HOST IOPS; no cap again: $A_AGAIN IOPS"
[ "$A_HOST" -ge $((HOST_CAP * 9 / 10)) ] && [ "$A_HOST" -le $((HOST_CAP * 11 / 10)) ] ||
    fail "the host's cap of $HOST_CAP IOPS did not hold within 10 %: $A_HOST"
# Above both caps set here (the namespace cap left in place would pass a bound between
# the two), and near what A reached uncapped beside B.
[ "$A_AGAIN" -gt $((CAP * 11 / 10)) ] && [ "$A_AGAIN" -ge $((A_FREE * 8 / 10)) ] \
    || fail "A stayed capped after the caps were removed: $A_AGAIN IOPS (uncapped before: $A_FREE)"
grep -q 'host_qos' "$CONF" && fail "the removed host cap is still in the file"
kmsg_check "QoS caps (I/O waits, never fails)"

step "per-host statistics: status per controller, Prometheus series per host (capped)"
"$TARGET_BIN" status | grep -E '^ *(controller|queues)' | sed 's/^/    status: /'
"$TARGET_BIN" status --json | python3 -c 'import json,sys
st = json.load(sys.stdin)
c = {x["host_nqn"]: x for s in st["subsystems"] for x in s["controllers"]}
a, b = c[sys.argv[1]], c[sys.argv[2]]
# fio writes 4 KiB; the host may send a larger write of its own now and then.
assert a["writes"] > 0 and a["write_latency_us"] > 0 and a["bytes_written"] >= 4096 * a["writes"], a
assert a["errors"] >= 1, a          # its Namespace Identification Descriptor list of nsid 2
assert b["reads"] > 0 and b["writes"] == 0 and b["errors"] == 0, b' "$HOST_A" "$HOST_B" ||
    fail "status does not show each controller's I/O, latency and errors"
# A third host: beyond the cap, counted in host="_other".
HOST_C=nqn.2026-11.io.nvmf-lab:tenant-c
connect_as "$HOST_C" 6b1a0f3e-0000-4000-8000-00000000000c >/dev/null
curl -sf http://127.0.0.1:9469/metrics >/tmp/metrics.txt || fail "no /metrics"
grep -E '^nvmf_target_host_' /tmp/metrics.txt | sed 's/^/    /'
series() { grep -E "^nvmf_target_$1\{" /tmp/metrics.txt | grep -F "host=\"$2\"" | grep -F "$3" | awk '{s += $2} END {print s + 0}'; }
python3 - "$(series host_commands_total "$HOST_A" 'op="write"')" "$(series host_command_seconds_total "$HOST_A" 'op="write"')" \
    "$(series host_errors_total "$HOST_A" '')" "$(series host_bytes_total "$HOST_B" 'op="read"')" \
    "$(series host_commands_total "$HOST_B" 'op="write"')" <<'EOF' || fail "the per-host series are not what the hosts did"
import sys
aw, asec, aerr, bread, bw = map(float, sys.argv[1:])
assert aw > 1000 and 0 < asec < aw, (aw, asec)
assert aerr >= 9, aerr        # ns-descs, and the initiator's eight cases (gone controllers count)
assert bread > 0 and bw == 0, (bread, bw)
print("    host A: %d writes, mean %.0f us in the target, %d errors; host B: %d bytes read" % (aw, asec / aw * 1e6, aerr, bread))
EOF
grep -q 'host="_other"' /tmp/metrics.txt || fail "the host beyond the cap has no _other series"
grep -q "host=\"$HOST_C\"" /tmp/metrics.txt && fail "a host beyond the cap got a series of its own"
grep -qE '^nvmf_target_host_series_overflow_total 1$' /tmp/metrics.txt || fail "the overflow is not counted"
command -v promtool >/dev/null || fail "promtool is missing from the lab image (prometheus package)"
promtool check metrics </tmp/metrics.txt 2>&1 | grep -i host_ && fail "promtool finds fault with the per-host series"
info "host C beyond the cap: counted in host=\"_other\", overflow counted"

settle
nvme disconnect -n "$NQN" >/dev/null
own_down
PASSED=1
echo "TENANTS PASS"
