# upgrade.sh: the two gateways of $NQN2 upgraded under the host's I/O (sourced by rbd.sh
# after fence.sh, with gateways A and B running as processes; uses rbd.sh's helpers).
# docs/gateways.md "Upgrading gateways".
#
#  14a. each gateway process stopped by SIGTERM while fio writes with verify: it drains
#       first (the other gateway takes its groups over), then comes back as a systemd
#       unit of the installed package, nvmf-target@gw-a / @gw-b (the same files)
#  14b. the operator's way, on A: drain, ok-to-stop, `dpkg -i` of a newer package (A
#       restarts and stays drained; B, the only path left, is not restarted and the
#       upgrade says so), undrain: I/O back through A
#  14c. one `dpkg -i` of a newer package with both gateways serving: the package restarts
#       A, then B, each draining first
# Each under fio with crc32c verify on the multipath head: no error, no verify failure, the
# longest write (the longest pause) bounded; the host saw each gateway's path inaccessible
# before its controller went (paths.sh: a stop without a drain fails there), and its
# kernel log shows nothing but the restarted paths' reconnects.
# Packages: build/debian (VERSION), build/debian/upgrade (+lab1), upgrade2 (+lab2),
# built by run-rbd-tests (lab_packages).

unit_of() { echo "nvmf-target@gw-${1,,}.service"; }
pid_of() { systemctl show -p MainPID --value "$(unit_of "$1")"; }
unit_log() { # GATEWAY [SINCE]: its unit's journal since SINCE (epoch seconds; default: the
    # start of these steps)
    journalctl -q -o cat -u "$(unit_of "$1")" --since "@${2:-$UPGRADE_T0}"
}
# fio on the head for SECONDS, writes verified as they go (the backlog) and at the end.
fio_for() { # NAME SECONDS
    fio --name="$1" --filename="/dev/$HEAD" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
        --iodepth=16 --size=32M --time_based --runtime="$2" --verify=crc32c --verify_backlog=256 \
        --verify_fatal=1 --verify_dump=0 --verify_state_save=0 --output-format=json \
        >"/tmp/fio-$1.json" 2>"/tmp/fio-$1.err" &
    FIOPID=$!
}
deb_of() { ls "build/debian/$1"nvmf-target_*_amd64.deb 2>/dev/null | head -n 1; }
# dpkg -i of PACKAGE_DIR's package (build/debian/PACKAGE_DIR), output in /tmp/dpkg-NAME.log
# (its lines about the targets printed), with ENV... set.
dpkg_upgrade() { # NAME PACKAGE_DIR [ENV...]
    local name=$1 deb t; deb=$(deb_of "$2"); shift 2
    t=$(date +%s%N)
    env "$@" dpkg -i "$deb" >"/tmp/dpkg-$name.log" 2>&1 || { cat "/tmp/dpkg-$name.log"; upgrade_fail "dpkg -i $deb"; }
    info "dpkg -i $(basename "$deb") took $(( ($(date +%s%N) - t) / 1000000 )) ms:"
    grep "^\(nvmf-target:\|  \)" "/tmp/dpkg-$name.log" | sed 's/^/    /'
}
# The result of fio NAME, printed and kept for the summary as ROW.
fio_row() { # NAME ROW
    fio_wait "$1"
    info "fio: error $FIO_ERR, ${FIO_VERIFIED_MIB} MiB verified, longest write ${FIO_MAX_S} s"
    UPGRADE_ROWS+=("$2: fio error $FIO_ERR, verify failures 0, longest write ${FIO_MAX_S} s")
}
upgrade_fail() {
    for g in A B; do echo "--- $(unit_of $g) (last 20 lines)"; unit_log "$g" | tail -n 20; done
    fail "$*"
}
declare -a UPGRADE_ROWS=()

UPGRADE_T0=$(date +%s)
for d in "" upgrade/ upgrade2/; do
    [ -n "$(deb_of "$d")" ] || fail "no package in build/debian/$d (run-rbd-tests builds them)"
done
dpkg -i "$(deb_of "")" >/tmp/dpkg-base.log 2>&1 || { cat /tmp/dpkg-base.log; fail "dpkg -i of the package"; }
for g in A B; do cp "/tmp/gw-$g.toml" "/etc/nvmf-target/gw-${g,,}.toml"; done

step "14a. SIGTERM drains each gateway first under fio verify; each comes back as a systemd unit"
CA=$(ctrl_at 4420) CB=$(ctrl_at 4421)
kmsg_mark
fio_for stopdrain 40
sleep 3
for g in A B; do
    c=$(ctrl_at "${GWPORT[$g]}") || fail "no controller through gateway $g"
    path_watch "/tmp/stop-$g-paths.txt" "$c"
    t=$(date +%s%N) rc=0
    # The gateway's log is appended to for the whole run (earlier stops wrote the same
    # lines): only what this stop logs counts.
    n0=$(wc -l <"/tmp/gw-$g.log")
    kill -TERM "${GWPID[$g]}"; wait "${GWPID[$g]}" || rc=$?; GWPID[$g]=
    ms=$(( ($(date +%s%N) - t) / 1000000 ))
    tail -n +$((n0 + 1)) "/tmp/gw-$g.log" >"/tmp/gw-$g.stop.log"
    [ $rc = 0 ] || { tail -20 "/tmp/gw-$g.stop.log"; fail "gateway $g exited with status $rc"; }
    grep -q "stopping: draining first" "/tmp/gw-$g.stop.log" || { tail -20 "/tmp/gw-$g.stop.log"; fail "gateway $g did not drain before this stop"; }
    info "gateway $g stopped by SIGTERM in $ms ms: $(grep -oE 'drained .* in [0-9.]+ s' "/tmp/gw-$g.stop.log" | tail -n 1 | sed 's/: ANA.*//')"
    systemctl start "$(unit_of $g)" || upgrade_fail "systemctl start $(unit_of $g)"
    # B gives the groups back once it hears from A: then it drains (A serves).
    wait_state 30 4420 "live optimized"; wait_state 30 4421 "live non-optimized"
    path_watch_stop
    path_drained "/tmp/stop-$g-paths.txt" "$c"
done
fio_row stopdrain "stop (drains first), A then B"
# A stop that drains first is one the host does not notice: no write waits (a stop that
# did not drain leaves the host's I/O to time out and fail over: seconds).
awk -v m="$FIO_MAX_S" 'BEGIN { exit !(m < 3) }' || fail "a write waited ${FIO_MAX_S} s across the draining stops (goal < 3 s)"
E=$(mp_errors "$CA" "$CB"); [ -z "$E" ] || { echo "$E"; fail "errors in the host's kernel log across the stops (other than the stopped paths' reconnects)"; }

step "14b. drain A, ok-to-stop, dpkg -i (A restarts drained; B left running), undrain"
kmsg_mark
APID=$(pid_of A) BPID=$(pid_of B)
fio_for upgrade1 60
sleep 3
path_watch /tmp/up1-paths.txt "$CA"
"$TARGET_BIN" drain --socket /tmp/gw-A.sock >/tmp/drain.txt 2>&1 || { cat /tmp/drain.txt; upgrade_fail "nvmf-target drain at A"; }
info "drain at A: $(cat /tmp/drain.txt)"
wait_state 15 4420 "live inaccessible"; wait_state 15 4421 "live optimized"
R=$(stop_check A); info "ok-to-stop at A: exit $R: $(said A)"
[ "$R" = 0 ] || upgrade_fail "ok-to-stop refused A once drained (exit $R)"
dpkg_upgrade up1 upgrade/ NVMF_UPGRADE_WAIT=4
[ "$(pid_of A)" != "$APID" ] || upgrade_fail "the upgrade did not restart A"
[ "$(pid_of B)" = "$BPID" ] || upgrade_fail "the upgrade restarted B, the only gateway serving"
grep -q "$(unit_of B) keeps running the old version" /tmp/dpkg-up1.log || upgrade_fail "the upgrade did not say B was left running"
unit_log A | grep -q "started drained" || upgrade_fail "A did not start drained"
path_watch_stop
path_drained /tmp/up1-paths.txt "$CA"
wait_state 30 4420 "live inaccessible"
"$TARGET_BIN" undrain --socket /tmp/gw-A.sock | sed 's/^/    /'
wait_state 15 4420 "live optimized"; wait_state 15 4421 "live non-optimized"
fio_row upgrade1 "drain A, dpkg -i, undrain"
A0=$(gw_writes A)
fio_bg undrained 4M; fio_wait undrained
[ "$(gw_writes A)" -gt "$A0" ] || upgrade_fail "I/O did not return to A once undrained"
E=$(mp_errors "$CA"); [ -z "$E" ] || { echo "$E"; fail "errors in the host's kernel log across A's upgrade (other than A's reconnects)"; }

step "14c. one dpkg -i with both gateways serving: A, then B, each drained, restarted"
kmsg_mark
APID=$(pid_of A) BPID=$(pid_of B)
fio_for upgrade2 75
sleep 3
UP2_T0=$(date +%s)
path_watch /tmp/up2-paths.txt "$CA" "$CB"
dpkg_upgrade up2 upgrade2/
[ "$(pid_of A)" != "$APID" ] && [ "$(pid_of B)" != "$BPID" ] || upgrade_fail "the upgrade did not restart both gateways"
for g in A B; do
    unit_log "$g" "$UP2_T0" | grep -q "stopping: draining first" || upgrade_fail "gateway $g did not drain before this upgrade's restart"
done
wait_state 30 4420 "live optimized"; wait_state 30 4421 "live non-optimized"
path_watch_stop
for c in "$CA" "$CB"; do path_drained /tmp/up2-paths.txt "$c"; done
fio_row upgrade2 "dpkg -i, both serving (A then B restarted)"
E=$(mp_errors "$CA" "$CB"); [ -z "$E" ] || { echo "$E"; fail "errors in the host's kernel log across the pair's upgrade (other than the restarted paths' reconnects)"; }
info "installed: $(dpkg-query -W -f '${Version}' nvmf-target); A pid $(pid_of A), B pid $(pid_of B)"
