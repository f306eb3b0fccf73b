#!/bin/bash
# tls.sh: NVMe/TCP over TLS 1.3 with a pre-shared key, against the kernel's target
# (nvmet-tcp, tsas tls1.3) in the same boot. Runs INSIDE the current-host lab guest
# (Debian 13, Linux 7.x, nvme-cli 2.13, tlshd from ktls-utils: the host's TLS handshake,
# and nvmet's), cwd /lab = project root (integration/run-tls-tests).
#   1. a PSK from nvme-cli (gen-tls-key --insert: the retained/TLS PSK under the identity
#      NVMe0R01 <host> <subsystem> in the .nvme keyring, as the host looks it up)
#   2. each target alone on $IP:$PORT, TLS required: the discovery log says TLS 1.3
#      (sectype) and required (treq); the host connects with --tls and runs fio with
#      crc32c verify; a host without TLS is refused
#      and the host holding a wrong key for its identity (outside .nvme, given to nvme
#      connect by serial) is refused
#   3. our initiator's tls-probe against each (TLS required): the right PSK connects; a
#      wrong key, an identity of a host without a key and a non-NVMe identity are refused;
#      a plain ICReq, a record larger than TLS allows and a record no key sealed end the
#      connection; a stalled ClientHello is closed; a flood of stalled handshakes from one
#      address is capped (ours: per peer address)
#   4. ours only: a listener where TLS is optional serves a host without a PSK in plain and
#      the host with one over TLS only (a host with a PSK is who its key says, on any
#      listener); a target holding another key refuses the host (its binder fails); the
#      PSK changed live (`host key set --tls-key`) disconnects the host, the old key is
#      refused, the restored one connects
# Output ends with the table and "TLS PASS".
set -euo pipefail
IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
PORT=4420
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
PROBE_BIN=${PROBE_BIN:-build/release/examples/tls-probe}
P=nqn.2026-11.io.nvmf-lab
SUB=$P:tls
HOST=nqn.2014-08.org.nvmexpress:uuid:c0000000-0000-4000-8000-00000000c0c0
HID=c0000000-0000-4000-8000-00000000c0c0
PLAIN=nqn.2014-08.org.nvmexpress:uuid:d0000000-0000-4000-8000-00000000d0d0
PLAIN_ID=d0000000-0000-4000-8000-00000000d0d0
H384=nqn.2014-08.org.nvmexpress:uuid:e0000000-0000-4000-8000-00000000e0e0
H384_ID=e0000000-0000-4000-8000-00000000e0e0
DIR=/var/tmp/tls
DISK=$DIR/disk.img
CONF=$DIR/target.toml
TLOG=/tmp/tls-target.log
TPID=
. integration/guest/common.sh
. integration/guest/kmsg.sh
NVMET_TRTYPE=tcp
. integration/guest/nvmet.sh
declare -A ROW

cleanup() {
    local rc=$?
    set +eE; trap - ERR
    nvme disconnect -n "$SUB" >/dev/null 2>&1
    [ -n "$TPID" ] && kill "$TPID" 2>/dev/null
    nvmet_unexport "$SUB" 2>/dev/null
    if [ $rc != 0 ]; then
        echo "--- our target's log (last 40 lines)"; tail -n 40 "$TLOG" 2>/dev/null
        echo "--- tlshd (last 30 lines)"; journalctl -u tlshd -b --no-pager -o cat 2>/dev/null | tail -n 30
        echo "--- dmesg (nvme/tls, last 30 lines)"; dmesg | grep -iE 'nvme|tls' | tail -n 30
        echo "TLS FAILED (exit $rc)"
    fi
    exit $rc
}
trap cleanup EXIT

connect_tls() { # [ARGS]: connect with TLS (the PSK from the keyring); returns its status
    timeout 60 nvme connect -t tcp -a "$IP" -s "$PORT" -n "$SUB" --hostnqn="$HOST" \
        --hostid="$HID" --tls --ctrl-loss-tmo=2 --reconnect-delay=1 "$@" >/tmp/connect.out 2>&1
}
connect_plain() { # [HOSTNQN HOSTID]: without TLS (default: the host with the PSK)
    timeout 60 nvme connect -t tcp -a "$IP" -s "$PORT" -n "$SUB" --hostnqn="${1:-$HOST}" \
        --hostid="${2:-$HID}" --ctrl-loss-tmo=2 --reconnect-delay=1 >/tmp/connect.out 2>&1
}
connect_wrong() { # with TLS and the wrong key WRONG (a key serial: no keyring lookup)
    timeout 60 nvme connect -t tcp -a "$IP" -s "$PORT" -n "$SUB" --hostnqn="$HOST" \
        --hostid="$HID" --tls --tls-key="$WRONG" --ctrl-loss-tmo=2 --reconnect-delay=1 \
        >/tmp/connect.out 2>&1
}
# udev probes a new namespace (blkid reads its first and last blocks): a disconnect under
# it logs "Buffer I/O error ... async page read" on the host, with any target.
disconnect() { settle; nvme disconnect -n "$SUB" >/dev/null 2>&1 || true; sleep 0.5; }
tls_of() { # the controller's TLS key serial (none: not TLS)
    cat "/sys/class/nvme/$CTRL/tls_key" 2>/dev/null || echo none
}
wait_port() { # WHO: the target takes TCP connections on IP:PORT
    for _ in $(seq 40); do
        bash -c "exec 3<>/dev/tcp/$IP/$PORT" 2>/dev/null && return 0
        sleep 0.5
    done
    fail "$1 does not listen on $IP:$PORT"
}
discover_says() { # WHO: what the discovery log's entry for SUB says of TLS (over TLS:
    # the discovery controller of a TLS-required port takes nothing else)
    nvme discover -t tcp -a "$IP" -s "$PORT" --hostnqn="$HOST" --hostid="$HID" --tls \
        >/tmp/disc.txt 2>&1 || info "$1: nvme discover --tls: $(tail -n 1 /tmp/disc.txt)"
    # The entry of SUB alone (entries are separated by "=====Discovery Log Entry").
    local e treq sec
    e=$(awk -v s="$SUB" '/^=====Discovery Log Entry/ { if (hit) exit; buf = "" }
        { buf = buf $0 "\n" } $0 ~ "subnqn: *" s "$" { hit = 1 } END { if (hit) printf "%s", buf }' /tmp/disc.txt)
    treq=$(grep -oE 'treq: *[a-z]+( [a-z]+)?' <<<"$e" | head -n 1 | sed 's/treq: *//') || true
    sec=$(grep -oE 'sectype: *[a-z0-9]+' <<<"$e" | head -n 1 | sed 's/sectype: *//') || true
    ROW[$1-disc]="treq ${treq:-?}, sectype ${sec:-?}"
}
run_fio() { # WHO
    fio --name=tls --filename="$NS" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
        --iodepth=16 --size=32M --time_based --runtime=6 --verify=crc32c --verify_fatal=1 \
        --output=/tmp/fio-tls.log || { cat /tmp/fio-tls.log; fail "$1: fio failed over TLS"; }
    grep -qE 'err= *0' /tmp/fio-tls.log || { cat /tmp/fio-tls.log; fail "$1: fio errors over TLS"; }
    ROW[$1-fio]=$(grep -oE 'IOPS=[0-9.k]+' /tmp/fio-tls.log | head -n 1)
}
case_tls() { # WHO: the host connects with TLS, fio verify, then a plain host is refused
    if connect_tls; then
        live_ctrl "$SUB"
        case $(tls_of) in none | 0 | "") fail "$1: the controller is not under TLS (tls_key $(tls_of))" ;; esac
        ROW[$1-tls]="connected (tls_key $(tls_of))"
        run_fio "$1"
        disconnect
    else
        ROW[$1-tls]="refused: $(tail -n 1 /tmp/connect.out)"
        fail "$1: the host with its PSK was refused: $(cat /tmp/connect.out)"
    fi
    if connect_plain; then
        ROW[$1-plain]="connected"
        disconnect
        fail "$1: a host without TLS connected where TLS is required"
    fi
    ROW[$1-plain]="refused"
    local n0
    n0=$(dmesg | grep -cE "TLS handshake complete, error -[0-9]+" || true)
    if connect_wrong; then
        ROW[$1-wrong]="connected"
        disconnect
        fail "$1: the host with a wrong key connected"
    fi
    # Refused by the handshake, not before it (the key serial was taken).
    [ "$(dmesg | grep -cE "TLS handshake complete, error -[0-9]+" || true)" -gt "$n0" ] \
        || fail "$1: the wrong key was refused without a handshake: $(cat /tmp/connect.out)"
    ROW[$1-wrong]="refused"
}
case_sha384() { # WHO: the host with a SHA-384 PSK connects over TLS_AES_256_GCM_SHA384
    if timeout 60 nvme connect -t tcp -a "$IP" -s "$PORT" -n "$SUB" --hostnqn="$H384" \
        --hostid="$H384_ID" --tls --ctrl-loss-tmo=2 --reconnect-delay=1 >/tmp/connect.out 2>&1; then
        ROW[$1-sha384]="connected"
        settle
        disconnect
    else
        ROW[$1-sha384]="refused: $(tail -n 1 /tmp/connect.out | cut -c1-40)"
        [ "$1" = nvmet ] || grep -E 'TLS: connection refused' "$TLOG" | tail -n 1 >"$TLOG.sha384"
    fi
}
start_ours() { # TOML of the listener's extra lines, the host's PSK[, its other lines]
    cat >"$CONF" <<EOF
[[listener]]
transport = "tcp"
address = "$IP"
port = $PORT
$1

[[subsystem]]
nqn = "$SUB"
allow_any_host = true
[[subsystem.namespace]]
path = "$DISK"

[[host]]
nqn = "$HOST"
tls_key = "$2"
${3:-}

[control]
socket = "$DIR/control.sock"
[metrics]
enabled = false
EOF
    RUST_LOG=info,nvmf_target::transport::tcp::tls=debug NO_COLOR=1 "$TARGET_BIN" --config "$CONF" >"$TLOG" 2>&1 &
    TPID=$!
    wait_port "our target"
}
# Ours must still be running when stopped, exit cleanly, and have logged no panic: a
# handshake thread that panicked would otherwise score as a refusal.
stop_ours() {
    local rc=0
    kill -TERM "$TPID" 2>/dev/null || true
    wait "$TPID" 2>/dev/null || rc=$?
    TPID=
    [ $rc = 0 ] || { tail -n 30 "$TLOG" | sed 's/^/    target: /'; fail "our target exited with status $rc"; }
    ! grep -q "panicked" "$TLOG" || { grep -A5 "panicked" "$TLOG" | sed 's/^/    target: /'; fail "our target logged a panic"; }
}
PROBE_CASES="psk wrong-key unknown-host foreign-identity plain-icreq oversized-record bad-record stall flood"
run_probe() { # WHO: tls-probe's cases, their outcomes in ROW[WHO-p-CASE]
    timeout 300 "$PROBE_BIN" "$IP" "$PORT" "$SUB" "$HOST" "$KEY" 0 compat >/tmp/probe.txt 2>&1 \
        || { cat /tmp/probe.txt; fail "$1: tls-probe failed"; }
    local c o
    for c in $PROBE_CASES; do
        o=$(awk -v c="$c" '$1 == "CASE" && $2 == c { print $3 }' /tmp/probe.txt)
        [ -n "$o" ] || { cat /tmp/probe.txt; fail "$1: tls-probe printed no outcome for $c"; }
        ROW[$1-p-$c]=$o
    done
    info "$1: tls-probe: $(awk '$1 == "CASE" { printf "%s=%s ", $2, $3 }' /tmp/probe.txt)"
    grep -E '^CASE (psk|wrong-key|unknown-host) ' /tmp/probe.txt | cut -c1-200 | sed 's/^/    /'
}

step "setup: tlshd, a PSK (nvme gen-tls-key --insert), a 128 MiB file"
# tlshd links the .nvme keyring into its session when it starts: the keyring exists once
# nvme-keyring is loaded (with nvme-tcp), so tlshd starts after it.
modprobe -a tls nvme-tcp nvmet nvmet-tcp
systemctl restart tlshd || fail "tlshd did not start"
mkdir -p "$DIR"
truncate -s 128M "$DISK"
KEY=$(nvme gen-tls-key --hostnqn="$HOST" --subsysnqn="$SUB" --insert 2>/tmp/genkey.err | grep -o 'NVMeTLSkey-1:0[12]:[^ ]*:' | head -n 1)
[ -n "$KEY" ] || fail "nvme gen-tls-key: $(cat /tmp/genkey.err)"
OTHER=$(nvme gen-tls-key 2>/dev/null | grep -o 'NVMeTLSkey-1:0[12]:[^ ]*:' | head -n 1)
# The same key for the discovery controller (a TLS-required port's discovery too).
nvme check-tls-key --keydata="$KEY" --hostnqn="$HOST" --subsysnqn=nqn.2014-08.org.nvmexpress.discovery \
    --insert >/dev/null 2>&1 || info "check-tls-key --insert for discovery failed"
grep -q "NVMe0R01 $HOST $SUB" /proc/keys || info "the keyring: $(grep -i nvme /proc/keys | head -n 3)"
# A wrong key for the same identity in this script's session keyring (the targets look in
# .nvme), readable by tlshd by its serial (tlshd's session keyring is not ours: user read).
WRONG=$(head -c 32 /dev/urandom | keyctl padd psk "NVMe0R01 $HOST $SUB" @s) || fail "keyctl padd psk"
keyctl setperm "$WRONG" 0x3f030000 || fail "keyctl setperm"
info "PSK ${KEY:0:16}... inserted for NVMe0R01 $HOST $SUB"
# A SHA-384 PSK (TLS_AES_256_GCM_SHA384) for another host.
KEY384=$(nvme gen-tls-key --hmac=2 --hostnqn="$H384" --subsysnqn="$SUB" --insert 2>/tmp/genkey.err | grep -o 'NVMeTLSkey-1:02:[^ ]*:' | head -n 1)
[ -n "$KEY384" ] || fail "nvme gen-tls-key --hmac=2: $(cat /tmp/genkey.err)"
kmsg_mark

step "nvmet-tcp, tsas tls1.3 (TLS required)"
NVMET_TSAS=tls1.3 nvmet_export "$SUB" "$DISK"
info "nvmet port: treq $(cat "$NVMET_CFG/ports/1/addr_treq"), tsas $(cat "$NVMET_CFG/ports/1/addr_tsas")"
wait_port "nvmet"
discover_says nvmet
case_tls nvmet
case_sha384 nvmet
run_probe nvmet
nvmet_unexport "$SUB"
sleep 1

step "ours, secure = required"
start_ours 'secure = "required"' "$KEY" $'\n[[host]]\nnqn = "'"$H384"$'"\ntls_key = "'"$KEY384"'"'
discover_says ours
case_tls ours
case_sha384 ours
run_probe ours
stop_ours

step "ours, secure = optional: a host without a PSK in plain, the host with one over TLS only"
start_ours 'secure = "optional"' "$KEY"
connect_plain "$PLAIN" "$PLAIN_ID" || fail "optional: a host without a PSK was refused: $(cat /tmp/connect.out)"
live_ctrl "$SUB"
case $(tls_of) in none | 0 | "") ;; *) fail "optional: the plain host's controller has a TLS key" ;; esac
disconnect
if connect_plain; then
    disconnect
    fail "optional: the host with a PSK connected without TLS"
fi
grep -q "tls_required" "$TLOG" || info "our log says of the plain attempt: $(grep -i 'refused' "$TLOG" | tail -n 1)"
connect_tls || fail "optional: the TLS host was refused: $(cat /tmp/connect.out)"
live_ctrl "$SUB"
ROW[ours-optional]="plain (no PSK), TLS (tls_key $(tls_of)); PSK host plain: refused"
disconnect
stop_ours

step "ours, another key: the host is refused"
start_ours 'secure = "required"' "$OTHER"
if connect_tls; then
    disconnect
    fail "a target with another key took the host"
fi
ROW[ours-wrongkey]="refused"
grep -qiE "handshake|no PSK" "$TLOG" || info "our log: $(grep -i tls "$TLOG" | tail -n 2)"
stop_ours
# What the refusals make the host say (a plain host closed by a TLS-required port before
# its ICResp; the host with a PSK refused without TLS, Connect Invalid Host 0x4184; the
# handshakes refused for another key; nvmet's own lines for the probe's flood of stalled
# handshakes, beyond what the kernel's handshake upcall takes at once); nothing else.
expected='failed to receive icresp, error -104|failed to connect queue: 0 ret=16772|TLS handshake|tls|nvmet_tcp: failed to (start TLS|allocate queue)'
if kmsg_errors | grep -vE "$expected" | grep -c . >/dev/null; then
    kmsg_errors | grep -vE "$expected" | head -n 20 | sed 's/^/    kernel: /'
    fail "the host's kernel log shows errors beyond the refused handshakes"
fi

step "ours: TLS and DH-HMAC-CHAP together: the host authenticates inside the TLS session"
DK=$(nvme gen-dhchap-key -m 1 -n "$HOST" 2>/dev/null | grep -o 'DHHC-1:[^ ]*' | head -n 1)
[ -n "$DK" ] || fail "nvme gen-dhchap-key"
start_ours 'secure = "required"' "$KEY" "dhchap_key = \"$DK\""
if connect_tls; then
    disconnect
    fail "tls+auth: the host connected over TLS without its DH-HMAC-CHAP key"
fi
connect_tls --dhchap-secret="$DK" || fail "tls+auth: the host was refused: $(cat /tmp/connect.out)"
live_ctrl "$SUB"
"$TARGET_BIN" status --json --socket "$DIR/control.sock" >/tmp/status.json || fail "tls+auth: status"
python3 - "$SUB" /tmp/status.json <<'PY' || fail "tls+auth: status does not show the controller authenticated"
import json, sys
s = json.load(open(sys.argv[2]))
def walk(o):
    if isinstance(o, dict):
        if isinstance(o.get("authentication"), dict) and o["authentication"].get("authenticated"):
            return True
        return any(walk(v) for v in o.values())
    return isinstance(o, list) and any(walk(v) for v in o)
sys.exit(0 if walk(s) else 1)
PY
ROW[ours-tlsauth]="without its key: refused; with it: connected (tls_key $(tls_of), authenticated)"
disconnect
stop_ours

step "ours: the PSK changed live (host key set --tls-key): the host is disconnected"
start_ours 'secure = "required"' "$KEY"
connect_tls || fail "live: the host was refused: $(cat /tmp/connect.out)"
live_ctrl "$SUB"
echo "$OTHER" | "$TARGET_BIN" host key set --socket "$DIR/control.sock" --host-nqn "$HOST" \
    --tls-key - >/tmp/keyset.txt 2>&1 || { cat /tmp/keyset.txt; fail "live: host key set"; }
info "host key set: $(head -n 1 /tmp/keyset.txt)"
for _ in $(seq 50); do [ "$(cat "/sys/class/nvme/$CTRL/state" 2>/dev/null)" = live ] || break; sleep 0.1; done
st=$(cat "/sys/class/nvme/$CTRL/state" 2>/dev/null || echo gone)
[ "$st" = live ] && fail "live: the host's controller is still live after its PSK changed"
disconnect
if connect_tls; then
    disconnect
    fail "live: the host connected with the PSK the target no longer holds"
fi
grep -qF "$OTHER" "$CONF" || fail "live: the new PSK is not in the configuration file"
"$TARGET_BIN" config show --socket "$DIR/control.sock" >/tmp/show.txt || fail "live: config show"
"$TARGET_BIN" status --json --socket "$DIR/control.sock" >>/tmp/show.txt || fail "live: status"
if grep -q "NVMeTLSkey" /tmp/keyset.txt /tmp/show.txt "$TLOG"; then fail "live: a PSK is shown (set's answer, config show, status or the log)"; fi
echo "$KEY" | "$TARGET_BIN" host key set --socket "$DIR/control.sock" --host-nqn "$HOST" \
    --tls-key - >/tmp/keyset.txt 2>&1 || { cat /tmp/keyset.txt; fail "live: host key set (back)"; }
connect_tls || fail "live: the host was refused with its PSK restored: $(cat /tmp/connect.out)"
live_ctrl "$SUB"
ROW[ours-live]="disconnected ($st); old key refused; restored: connected"
disconnect
stop_ours
# The host's error recovery after its controller was ended is expected here.
kmsg_mark

step "the table"
printf '    %-26s %-40s %s\n' case nvmet-tcp ours
for c in disc tls plain wrong sha384 fio; do
    printf '    %-26s %-40s %s\n' "$c" "${ROW[nvmet-$c]:-}" "${ROW[ours-$c]:-}"
done
printf '    %-26s %-40s %s\n' "optional port" "(n/a)" "${ROW[ours-optional]}"
printf '    %-26s %-40s %s\n' "target: another key" "(one keyring)" "${ROW[ours-wrongkey]}"
printf '    %-26s %-40s %s\n' "PSK changed live" "(n/a)" "${ROW[ours-live]}"
printf '    %-26s %-40s %s\n' "TLS + DH-HMAC-CHAP" "(not run)" "${ROW[ours-tlsauth]}"
for c in $PROBE_CASES; do
    printf '    %-26s %-40s %s\n' "probe: $c" "${ROW[nvmet-p-$c]}" "${ROW[ours-p-$c]}"
done
# What ours must answer; nvmet's is the yardstick shown beside it.
want() { # CASE PATTERN
    [[ "${ROW[ours-p-$1]}" =~ ^($2)$ ]] || fail "ours: tls-probe $1: ${ROW[ours-p-$1]}, expected $2"
}
want psk connected
want wrong-key refused
want unknown-host refused
want foreign-identity refused
want plain-icreq closed
want oversized-record closed
want bad-record closed
want stall 'closed:(9|10|11|12)s'
want flood 'closed:24/40'
[ "${ROW[nvmet-p-psk]}" = connected ] || fail "nvmet: tls-probe's PSK did not connect (${ROW[nvmet-p-psk]}): the probe's derivation differs from the host's"
[ "${ROW[nvmet-p-wrong-key]}" = refused ] || fail "nvmet took the probe's wrong key (${ROW[nvmet-p-wrong-key]})"
# Both say TLS 1.3, required (nvmet also says SQ flow control may be disabled).
for w in nvmet ours; do
    [ "${ROW[$w-disc]}" = "treq required, sectype tls13" ] || fail "$w's discovery log says ${ROW[$w-disc]}, not TLS 1.3 required"
done
# SHA-384: tlshd 1.0 makes the binder of a SHA-384 PSK with SHA-256 and offers, of TLS 1.3's
# suites, TLS_AES_256_GCM_SHA384 and TLS_CHACHA20_POLY1305_SHA256 only: nvmet (tlshd too)
# settles on ChaCha20, outside NVMe/TCP's two suites (TP 8011); ours refuses and says why.
# A host that follows the identity's hash connects to ours (in-process tests).
if [ "${ROW[ours-sha384]}" != connected ]; then
    grep -q "binder is not made with its identity's hash" "$TLOG.sha384" \
        || fail "ours refused the SHA-384 PSK without saying why: $(cat "$TLOG.sha384")"
fi
echo "TLS PASS"
