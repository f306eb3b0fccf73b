#!/bin/bash
# daemon.sh: the target run as an operator runs it. Runs INSIDE the lab guest
# (integration/run-daemon-tests), systemd is PID 1, cwd /lab = project root, as root.
#
#   1. check-config on broken configurations: exit 2 and the expected message each; a
#      file with several errors names every one
#   1b. worker_cpus: one worker pinned to the CPU listed, polling without pause
#      (poll_spin_us = 1000000) yet idle at < 10 % of a CPU with nothing to do; a CPU not
#      there is refused as a configuration error (exit 78; check-config 2)
#   2. install exactly as the README says (its install block, run verbatim: dpkg -i of the
#      package, enable --now; no drop-in); man pages render, bash completes; the shipped
#      config serves nothing (no listener: nothing accepts on the port, discovery fails)
#      and the package is debhelper's (md5sums verify, Depends from the libraries, units
#      under /usr/lib, keys/ 0700, the unit's UMask, ProtectProc, system call filter)
#      and says so in status, StatusText and the journal; with the test's configuration
#      `systemctl restart` returns only after the listener accepts (first discover works);
#      a non-root user is refused
#   3. the kernel host connects (its connect in the journal as fields: MESSAGE_ID,
#      SUBSYSTEM, HOST, CNTLID, PEER); a real Prometheus scrapes /metrics during fio; its query
#      API returns non-zero read and write rates; `promtool check metrics` passes; the
#      shipped alert rules pass `promtool check rules` and `promtool test rules`
#   4. `systemctl reload`: an added file and an added block device (a disk not named
#      when the unit started) appear on the connected host (same controller, no
#      reconnect, namespace-changed AEN); `nvmf-target status --json` lists the host's
#      NQN under its subsystem; a reload the daemon cannot apply (metrics address)
#      and a broken file are refused, the old config serves; a reload that takes the
#      host's access away (host list, removed subsystem) disconnects its controller and
#      refuses it until access is restored;
#      a removed namespace disappears; an added/removed subsystem enters/leaves discovery;
#      a killed daemon is restarted (Restart=on-failure) and the host reconnects; a
#      reservation the host took (PTPL set, as the Linux host registers) is still held;
#      `subsystem|namespace|host|listener|controller list` (table and --json) show what
#      the host sees (its controller, namespace 3's path, size and the host's NGUID), and
#      so do the gauges on /metrics (healthy, ANA state and drained per listener, namespace
#      info and size); failed commands by subsystem, namespace and status (a made-up nsid
#      is no label); [metrics] latency_buckets applied by a reload
#   4g. live changes (`nvmf-target namespace|host|subsystem|controller ...`) with the host
#      connected: a namespace added live appears without a reconnect and its writes land;
#      a removed host is disconnected and refused; a disconnected controller reconnects;
#      a subsystem enters and leaves discovery; the file keeps its comments and every
#      change through a restart; bad changes (missing path, nsid taken, file edited by
#      hand) exit 2 with the reason and change nothing (an invalid value 65, a file edited
#      since it was loaded 75, a usage error 64; the man pages list them); a TCP listener added live takes a
#      second path of the host and, removed under fio verify, drains it first (no error);
#      with [discovery] mdns, avahi-browse finds each listener's discovery service; a
#      disk renamed to its /dev/disk/by-id name (reload) keeps its NGUID and UUID on the
#      host: same block device, no new one, no "identifiers changed", writes land; a
#      subsystem taken off the RDMA listener (`subsystem listener del`) leaves its
#      discovery log and a Connect there is refused as nvmet refuses it (same kernel
#      message, nvmet in this boot); through TCP it connects; taken off that one under a
#      host: refused without --force, with it the controller goes; put back, it returns
#      (4b also: each line reaches the journal at its level; `journalctl -p err` shows the refusal)
#   5. `systemctl stop` while fio and an acknowledged-writes logger run: fio sees errors
#      but no verify failure; after a restart every acknowledged block reads back; the
#      journal shows a clean shutdown. `systemctl restart` under fio: no error at all;
#      5d: `dpkg -i` of a newer package under fio with verify: the upgrade restarts the
#      daemon, no I/O error, no verify failure, the longest pause printed; under a
#      policy-rc.d that forbids (101), another upgrade installs and restarts nothing
#   6. kernel target configured via configfs, saved as nvmetcli JSON (nvmetcli if
#      installed, else integration/guest/nvmet-save.py), imported with
#      `nvmf-target import-nvmetcli`, served by our target: same data; a subsystem nvmet
#      linked to its TCP port only is on the imported TCP listener only
#   7. integration/demo on a machine with an RDMA device (the guest's soft-RoCE): it
#      serves the kernel host on that device directly
#   7b. an invalid configuration: the start fails once (exit 78), no restart loop
#   8. `dpkg -r` stops the daemon and removes binaries and unit, keeping the configuration;
#      `dpkg --purge` removes the configuration and the state
# Test 2 installs the Debian package (packaging/build-deb, built by run-daemon-tests) as
# the README says, and checks its man pages and completions.
# Output: "=== [t] step" lines, "FAIL: ..." on failure (with the journal), last line
# "DAEMON PASS" on success.
set -euo pipefail

IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
IF=${LAB_IF:-eth0}
PORT=4420
BIN_SRC=${TARGET_BIN:-build/release/nvmf-target}
BIN=/usr/sbin/nvmf-target
NQN=nqn.2026-11.io.nvmf-lab:daemon
KNQN=nqn.2026-11.io.nvmf-lab:from-nvmet
NQN_ADDED=nqn.2026-11.io.nvmf-lab:added-by-reload
CONF=/etc/nvmf-target/nvmf-target.toml
NS2_FILE=/var/tmp/daemon-ns2.img
METRICS=http://127.0.0.1:9469/metrics
PROM=http://127.0.0.1:9090
CFG=/sys/kernel/config/nvmet
OUT=${E2E_OUT:-/lab/integration/out}
. integration/guest/common.sh
PASSED=0
PROM_PID= FG_PID=


journal() { journalctl -u nvmf-target -b --no-pager -o cat "$@"; }
cleanup() {
    local rc=$?
    set +eE; trap - ERR
    [ -n "$FG_PID" ] && kill "$FG_PID" 2>/dev/null
    [ -n "$PROM_PID" ] && kill "$PROM_PID" 2>/dev/null
    for n in "$NQN" "$KNQN"; do nvme disconnect -n "$n" >/dev/null 2>&1; done
    if [ $PASSED = 0 ]; then
        echo "--- systemctl status"; systemctl status nvmf-target --no-pager -l 2>&1 | tail -n 20
        echo "--- journal of nvmf-target (last 80 lines)"; journal | tail -n 80
        echo "--- dmesg (nvme/rdma, last 30 lines)"; dmesg | grep -iE 'nvme|rdma|rxe' | tail -n 30
    fi
    systemctl stop nvmf-target >/dev/null 2>&1
    if mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ]; then journal >"$OUT/daemon-journal.log" 2>&1; fi
    [ $rc = 0 ] || echo "DAEMON FAILED (exit $rc) after $(( ($(date +%s%N) - T0) / 1000000000 ))s"
    exit $rc
}
trap cleanup EXIT

# --- host-side device lookup ----------------------------------------------------------
ctrl_of() { # live rdma controller (nvmeX) of subsystem $1
    local c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
        echo "${c##*/}"; return 0
    done
    return 1
}
ns_of() { # block device of nsid $2 of subsystem $1
    local s n
    for s in /sys/class/nvme-subsystem/*/ /sys/class/nvme/*/; do
        [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        for n in "$s"nvme*n*; do
            [[ ${n##*/} =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/${n##*/}" ] || continue
            [ "$(cat "/sys/block/${n##*/}/nsid" 2>/dev/null)" = "$2" ] && { echo "${n##*/}"; return 0; }
        done
    done
    return 1
}
wait_for() { # SECONDS DESCRIPTION COMMAND...: poll every 0.2 s
    local t=$1 what=$2; shift 2
    for _ in $(seq $(( t * 5 ))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    fail "$what: not within $t s"
}
connect() { # NQN: connect with short loss timeouts (so I/O fails soon after a stop)
    nvme connect -t rdma -a "$IP" -s "$PORT" -n "$1" --ctrl-loss-tmo=15 --reconnect-delay=1 \
        || fail "nvme connect $1 failed"
    wait_for 30 "live controller of $1" ctrl_of "$1"
    wait_for 30 "namespace 1 of $1" ns_of "$1" 1
}
metric() { # NAME{labels} -> value in our /metrics (0 if absent)
    curl -sf "$METRICS" | awk -v m="$1" 'index($0, m) == 1 { v = $NF } END { print v + 0 }'
}
promq() { # PromQL -> scalar (first sample)
    curl -sf "$PROM/api/v1/query" --data-urlencode "query=$1" |
        python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)'
}
. integration/guest/kmsg.sh   # kmsg_check: no I/O error, reset or timeout in the kernel log
. integration/guest/paths.sh  # path_drained: the host saw a path drained before it went
status_json() { # nvmf-target status --json, validated as JSON
    "$BIN" status --json >/tmp/status.json || fail "nvmf-target status --json failed"
    python3 -m json.tool /tmp/status.json >/dev/null || fail "status --json is not JSON: $(head -c 300 /tmp/status.json)"
}
write_conf() { # extra namespace TOML appended to the subsystem
    cat >"$CONF" <<EOF
# written by integration/guest/daemon.sh
[metrics]
address = "127.0.0.1:9469"

[[listener]]
address = "$IP"
port = $PORT

[[subsystem]]
nqn = "$NQN"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
path = "/dev/ram0"
$1
EOF
}

# =====================================================================================
step "setup: soft-RoCE on $IF, brd (/dev/ram0..2, 128 MiB each), nvme-rdma"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma
rdma link show | grep -q "netdev $IF\b" || rdma link add rxe0 type rxe netdev "$IF"
[ -e /sys/module/brd ] || modprobe brd rd_nr=3 rd_size=131072
for d in 0 1 2; do [ -b /dev/ram$d ] || fail "/dev/ram$d missing (brd loaded with other parameters?)"; done
truncate -s 64M "$NS2_FILE"
[ -x "$BIN_SRC" ] || fail "$BIN_SRC missing (cargo build --release -p nvmf-target on the host)"
info "$(systemctl --version | head -1), $(prometheus --version 2>&1 | head -1)"

# =====================================================================================
step "test 1: check-config on broken configurations"
BAD=/tmp/bad.toml
GOOD_CONF="[[listener]]
address = \"$IP\"
[[subsystem]]
nqn = \"$NQN\"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
path = \"/dev/ram0\""
check_bad() { # DESCRIPTION EXPECTED-SUBSTRING (file in $BAD; env in CHECK_ENV)
    local out rc=0
    out=$(env ${CHECK_ENV:-} "$BIN_SRC" check-config "$BAD" 2>&1) || rc=$?
    [ $rc = 2 ] || fail "check-config ($1): exit $rc, expected 2: $out"
    grep -qF -- "$2" <<<"$out" || fail "check-config ($1): expected '$2' in: $out"
    info "ok  $1: $out"
}
echo "$GOOD_CONF" >"$BAD"
out=$("$BIN_SRC" check-config "$BAD") || fail "check-config of a good file failed: $out"
info "ok  good file: $out"
rm -f /tmp/missing.toml
cp "$BAD" /tmp/good.toml
BAD=/tmp/missing.toml check_bad "missing file" "/tmp/missing.toml: no such file"
printf '%s\n[[listener\n' "$GOOD_CONF" >"$BAD"; check_bad "TOML syntax" "TOML parse error"
sed 's/^nsid = 1$/nsid = 1\nspeed = 9/' /tmp/good.toml >"$BAD"; check_bad "unknown field" "unknown field \`speed\`"
sed "s/^nqn = .*/nqn = \"disk1\"/" /tmp/good.toml >"$BAD"; check_bad "bad NQN" "subsystem[0].nqn: 'disk1' must start with 'nqn.'"
sed 's|/dev/ram0|/dev/nonexistent9|' /tmp/good.toml >"$BAD"; check_bad "missing device" "subsystem[0].namespace[0].path: /dev/nonexistent9"
printf '%s\n[[subsystem.namespace]]\nnsid = 1\npath = "/dev/ram1"\n' "$GOOD_CONF" >"$BAD"; check_bad "duplicate nsid" "subsystem[0].namespace[1].nsid: 1 is used twice"
# A subsystem no host may reach is valid (nvmet, SPDK and ceph-nvmeof allow it), warned of.
sed 's/^allow_any_host = true$/allow_any_host = false/' /tmp/good.toml >"$BAD"
out=$("$BIN_SRC" check-config "$BAD" 2>&1) || fail "check-config (no hosts): refused, not a warning: $out"
grep -qF "warning: subsystem[0].hosts: no host may connect" <<<"$out" || fail "check-config (no hosts): no warning in: $out"
"$BIN_SRC" check-config --json "$BAD" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["ok"] and d["warnings"][0]["field"] == "subsystem[0].hosts", d' \
    || fail "check-config --json (no hosts): no warning"
info "ok  no hosts: $(tail -1 <<<"$out")"
printf '[metrics]\naddress = "localhost"\n%s\n' "$GOOD_CONF" >"$BAD"; check_bad "metrics address" "metrics.address: 'localhost' is not ADDRESS:PORT"
printf '%s\n' "$GOOD_CONF" | sed "s/^address = .*/address = \"10.0.2\"/" >"$BAD"; check_bad "listener address" "listener[0].address: '10.0.2' is not an IPv4 or IPv6 address"
cp /tmp/good.toml "$BAD"; CHECK_ENV=NVMF_TARGET_TARGET__POLL_SPIN_US=fast check_bad "environment override" "poll_spin_us"
printf '[target]\nworkers = 0\n[[subsystem]]\nnqn = "disk1"\nallow_any_host = true\n[[subsystem.namespace]]\npath = "/dev/ram0"\n' >"$BAD"
check_bad "bad NQN and no workers" "subsystem[0].nqn: 'disk1' must start with 'nqn.'"
check_bad "bad NQN and no workers" "target.workers: 0 is out of range"
rc=0; "$BIN_SRC" check-config --json "$BAD" >/tmp/check.json || rc=$?
[ $rc = 2 ] || fail "check-config --json of a bad file: exit $rc"
python3 -c 'import json; d = json.load(open("/tmp/check.json")); assert d["ok"] is False and {e["field"] for e in d["errors"]} >= {"target.workers", "subsystem[0].nqn"}, d' \
    || fail "check-config --json: $(cat /tmp/check.json)"
"$BIN_SRC" check-config --json /tmp/good.toml | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d == {"ok": True, "listeners": 1, "subsystems": 1, "namespaces": 1}, d' \
    || fail "check-config --json of a good file"
info "ok  check-config --json: every error with its file and field; a good file's counts"
printf '[target]\nworker_cpus = "1,1"\n%s\n' "$GOOD_CONF" >"$BAD"; check_bad "worker CPU twice" "target.worker_cpus: CPU 1 is listed twice"

step "test 1b: worker_cpus pins one worker to each CPU listed; a CPU the process may not use is refused"
# Its own port and state directory, no control socket: the package is not installed yet.
pinned_conf() { printf '[target]\nworker_cpus = %s\npoll_spin_us = 1000000\nstate_dir = "/tmp/pinned-state"\n[control]\nenabled = false\n%s\n' "$1" "$GOOD_CONF" | sed "s/^address = .*/&\nport = 4439/" >/tmp/pinned.toml; }
# The highest CPU this shell may use, and one past the last CPU there is.
LAST=$(awk '/^Cpus_allowed_list/ {n = split($2, r, /[,-]/); print r[n]}' /proc/self/status)
NONE=$(( $(nproc --all) ))
pinned_conf "$LAST"
"$BIN_SRC" --config /tmp/pinned.toml --log-level info >/tmp/pinned.log 2>&1 &
FG_PID=$!
# A worker given a CPU starts only once it runs there, before "engine started".
for _ in $(seq 150); do kill -0 $FG_PID 2>/dev/null && ! grep -q "engine started" /tmp/pinned.log || break; sleep 0.1; done
pins=$(for t in /proc/$FG_PID/task/*; do c=$(cat $t/comm 2>/dev/null); case $c in nvmf-worker-*) echo "$c:$(awk '/^Cpus_allowed_list/ {print $2}' $t/status)";; esac; done | sort | tr '\n' ' ')
# Polling without pause is for while I/O flows: idle (past the first second), the worker
# sleeps through its waits' timeouts rather than polling a second after each. Measured
# from 3 s after "ready": the listener's device reaches the worker up to ~1 s after it
# in the lab, and the worker then polls its second.
for _ in $(seq 150); do grep -q "nvmf-target ready" /tmp/pinned.log && break; sleep 0.1; done
sleep 3
t0=$(awk '{print $14 + $15}' /proc/$FG_PID/stat); sleep 4; t1=$(awk '{print $14 + $15}' /proc/$FG_PID/stat)
idle_pct=$(( (t1 - t0) * 100 / $(getconf CLK_TCK) / 4 ))
kill $FG_PID 2>/dev/null || true; wait $FG_PID 2>/dev/null || true; FG_PID=
[ "$pins" = "nvmf-worker-0:$LAST " ] || { cat /tmp/pinned.log; fail "worker_cpus = $LAST: workers and their CPUs '$pins', expected one worker on CPU $LAST"; }
grep -q "worker_cpus=$LAST" /tmp/pinned.log || { cat /tmp/pinned.log; fail "the log does not say the workers' CPUs"; }
[ "$idle_pct" -lt 10 ] || { cat /tmp/pinned.log; fail "worker_cpus = $LAST, poll_spin_us = 1000000, idle: the target used ${idle_pct}% of a CPU (a wait's timeout restarted polling?)"; }
info "ok  worker_cpus = $LAST: $pins; idle ${idle_pct}% of a CPU"
pinned_conf "$NONE"
rc=0; timeout 20 "$BIN_SRC" --config /tmp/pinned.toml >/tmp/pinned.log 2>&1 || rc=$?
[ $rc = 78 ] || { cat /tmp/pinned.log; fail "worker_cpus = $NONE (no such CPU): exit $rc, expected 78 (a configuration refused)"; }
grep -q "target.worker_cpus: CPU(s) $NONE are not among the CPUs this process may run on" /tmp/pinned.log \
    || { cat /tmp/pinned.log; fail "worker_cpus = $NONE: the error does not name the CPU"; }
rc=0; "$BIN_SRC" check-config /tmp/pinned.toml >/dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "check-config with worker_cpus = $NONE: exit $rc, expected 2"
info "ok  worker_cpus = $NONE (not a CPU here): exit 78, check-config 2: $(grep -o 'target.worker_cpus: CPU.*may run on' /tmp/pinned.log | head -1)"
rm -rf /tmp/pinned.toml /tmp/pinned.log /tmp/pinned-state

# =====================================================================================
step "test 2: install as the README says (its install block, verbatim): the shipped config serves nothing"
# The block between <!-- install --> and <!-- /install --> in README.md, as typed.
sed -n '/^<!-- install -->$/,/^<!-- \/install -->$/p' README.md | grep '^    ' | sed 's/^    //' >/tmp/install.sh
[ -s /tmp/install.sh ] || fail "no <!-- install --> block in README.md"
sed 's/^/    README: /' /tmp/install.sh
grep -q "service.d\|systemd-devices" /tmp/install.sh && fail "the README's install still needs a drop-in"
[ -e /etc/nvmf-target/nvmf-target.toml ] && fail "a config is already installed"
t=$(date +%s%N)
bash -euxo pipefail /tmp/install.sh 2>&1 | sed 's/^/    /' || fail "the README's install commands failed"
info "install + enable --now returned after $(( ($(date +%s%N) - t) / 1000000 )) ms"
# The unit as systemd reads it: any complaint about it fails (other units' lines are shown).
VERIFY=$(systemd-analyze verify /lib/systemd/system/nvmf-target.service 2>&1) || { echo "$VERIFY" | sed 's/^/    verify: /'; fail "systemd-analyze verify failed on the unit"; }
[ -n "$VERIFY" ] && echo "$VERIFY" | sed 's/^/    verify: /'
grep -q 'nvmf-target' <<<"$VERIFY" && fail "systemd-analyze verify complains about the unit (above)"
VERIFY=$(systemd-analyze verify nvmf-target@lab.service 2>&1) || { echo "$VERIFY" | sed 's/^/    verify: /'; fail "systemd-analyze verify failed on the template unit"; }
grep -q 'nvmf-target' <<<"$VERIFY" && { echo "$VERIFY" | sed 's/^/    verify: /'; fail "systemd-analyze verify complains about the template unit"; }
[ "$(systemctl is-active nvmf-target)" = active ] || fail "unit not active after the README's install (shipped config)"
[ "$(dpkg-query -W -f '${Status}' nvmf-target)" = "install ok installed" ] || fail "the package is not installed"
dpkg-query -W -f '    package: ${Package} ${Version}, ${Installed-Size} KiB\n' nvmf-target
# Built by debhelper: checksums that verify, Depends from the binaries' libraries, the
# units under /usr/lib, a changelog, a copyright naming the crates linked in, the key
# directory root's only. (Lintian passed it on the build machine: run-daemon-tests.)
[ -s /var/lib/dpkg/info/nvmf-target.md5sums ] || fail "the package has no md5sums"
# (The lab image's dpkg leaves out /usr/share/doc but for copyright files: those are
# "missing" by design; the changelog is read from the package itself.)
V=$(dpkg --verify nvmf-target 2>&1 | grep -v "^missing  *\(c \)\? */usr/share/doc/nvmf-target/" || true)
[ -z "$V" ] || fail "dpkg --verify nvmf-target: $V"
DEB=$(ls build/debian/nvmf-target_*_amd64.deb | head -n 1)
DEPS=$(dpkg-query -W -f '${Depends}' nvmf-target)
grep -q "libibverbs1 (>= " <<<"$DEPS" && grep -q "librdmacm1 (>= " <<<"$DEPS" \
    || fail "Depends does not come from the binaries' libraries: $DEPS"
for u in nvmf-target.service nvmf-target@.service; do
    dpkg -L nvmf-target | grep -qx "/usr/lib/systemd/system/$u" || fail "the package does not ship $u under /usr/lib/systemd/system"
done
dpkg -L nvmf-target | grep -q '^/lib/' && fail "the package ships files under /lib: $(dpkg -L nvmf-target | grep '^/lib/' | head -n 3)"
dpkg-deb --fsys-tarfile "$DEB" | tar -xO ./usr/share/doc/nvmf-target/changelog.gz | zcat | head -n 1 |
    grep -q "^nvmf-target (" || fail "the package has no changelog"
grep -qE "^ tracing [0-9.]+: MIT" /usr/share/doc/nvmf-target/copyright || fail "the copyright file does not name the crates linked in"
[ "$(stat -c '%a %U' /etc/nvmf-target/keys)" = "700 root" ] || fail "/etc/nvmf-target/keys is $(stat -c '%a %U' /etc/nvmf-target/keys), not 700 root"
for p in "UMask=0077" "ProtectProc=invisible" "RestartPreventExitStatus=78"; do
    [ "$(systemctl show -p "${p%%=*}" --value nvmf-target)" = "${p#*=}" ] || fail "the unit's ${p%%=*} is '$(systemctl show -p "${p%%=*}" --value nvmf-target)', not ${p#*=}"
done
systemctl show -p SystemCallFilter --value nvmf-target | grep -qw io_uring_enter || fail "the unit's system call filter does not allow io_uring"
info "debhelper's package: md5sums verify, Depends: $DEPS; units in /usr/lib; keys/ 0700; UMask, ProtectProc, SystemCallFilter, RestartPreventExitStatus set"
# The configuration is the administrator's (and live changes'), created from the example:
# no package owns it, so no upgrade asks about it (test 5d).
! grep -qx /etc/nvmf-target/nvmf-target.toml /var/lib/dpkg/info/nvmf-target.conffiles 2>/dev/null || fail "the configuration is a conffile"
cmp -s /etc/nvmf-target/nvmf-target.toml /usr/share/nvmf-target/nvmf-target.toml || fail "the configuration was not created from the example"
# It may hold host keys: root's only.
[ "$(stat -c %a /etc/nvmf-target/nvmf-target.toml)" = 600 ] \
    || fail "the configuration is installed $(stat -c %a /etc/nvmf-target/nvmf-target.toml), not 600"
MANW=$(MANWIDTH=100 man -P cat nvmf-target 2>&1) || fail "man nvmf-target: $MANW"
grep -q "namespace" <<<"$MANW" || fail "man nvmf-target does not list its commands"
MANW=$(MANWIDTH=100 man -P cat nvmf-target-namespace-add 2>&1) || fail "man nvmf-target-namespace-add: $MANW"
grep -q -- "--rbd-pool" <<<"$MANW" || fail "man nvmf-target-namespace-add lacks its options"
grep -q "EXIT STATUS" <<<"$MANW" && grep -q "Invalid request" <<<"$MANW" \
    || fail "man nvmf-target-namespace-add has no EXIT STATUS section"
MANW=$(MANWIDTH=100 man -P cat 5 nvmf-target.toml 2>&1) || fail "man 5 nvmf-target.toml: $MANW"
grep -q "max_pinned_memory" <<<"$MANW" || fail "man 5 nvmf-target.toml lacks the settings"
MANW=$(MANWIDTH=100 man -P cat nvmf-initiator 2>&1) || fail "man nvmf-initiator: $MANW"
info "man pages render: nvmf-target(8), nvmf-target-namespace-add(8), nvmf-target.toml(5), nvmf-initiator(8)"
COMP=$(bash -c '. /usr/share/bash-completion/completions/nvmf-target
    f=$(complete -p nvmf-target | sed -n "s/.*-F \([^ ]*\).*/\1/p")
    COMP_WORDS=(nvmf-target names); COMP_CWORD=1; COMP_LINE="nvmf-target names"; COMP_POINT=${#COMP_LINE}
    "$f" nvmf-target names nvmf-target; echo "${COMPREPLY[@]}"' 2>&1) || fail "bash completion: $COMP"
[ "$COMP" = namespace ] || fail "bash completion of 'nvmf-target names' gave '$COMP'"
for f in _nvmf-target:/usr/share/zsh/vendor-completions /usr/share/fish/vendor_completions.d/nvmf-target.fish \
         /usr/share/nvmf-target/grafana/nvmf-target.json /usr/share/nvmf-target/prometheus/nvmf-target-alerts.yml; do
    case $f in *:*) f=${f#*:}/${f%%:*} ;; esac
    [ -s "$f" ] || fail "the package lacks $f"
done
info "bash completes 'nvmf-target names' to '$COMP'; zsh and fish completions, the Grafana board and alert rules installed"
[ "$(systemctl is-enabled nvmf-target)" = enabled ] || fail "unit not enabled"
# The shipped file: no listener, no subsystem. Nothing accepts a host; the daemon says so.
"$BIN" check-config /etc/nvmf-target/nvmf-target.toml >/tmp/check.txt 2>&1 || { cat /tmp/check.txt; fail "check-config of the shipped file"; }
sed 's/^/    check-config: /' /tmp/check.txt
grep -q "warning: listener: no \[\[listener\]\]" /tmp/check.txt || fail "check-config does not warn that the shipped file serves nothing"
ss -Hltn | grep -q ":$PORT\b" && fail "something accepts TCP connections on port $PORT with the shipped configuration: $(ss -Hltnp | grep ":$PORT\b")"
if nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1; then
    cat /tmp/discover.txt; fail "the shipped configuration answers discovery over RDMA at $IP:$PORT"
fi
"$BIN" status | sed 's/^/    status: /'
"$BIN" status | grep -q "serving nothing yet: no listener and no subsystem configured" || fail "status does not say the daemon serves nothing"
status=$(systemctl show -p StatusText --value nvmf-target)
info "StatusText: $status"
grep -q "^serving nothing yet" <<<"$status" || fail "StatusText does not say the daemon serves nothing"
journal | grep -q "serving nothing yet" || fail "the journal does not say the daemon serves nothing"
journal | grep "serving nothing yet" | tail -n 1 | sed 's/^/    journal: /'
status_json
python3 -c 'import json; st = json.load(open("/tmp/status.json")); assert st["format"] == 1 and st["listeners"] == [] and st["subsystems"] == [], st' \
    || fail "status --json of the shipped configuration: $(head -c 300 /tmp/status.json)"
info "the shipped configuration: active, nothing accepted on port $PORT (TCP or RDMA), status and the journal say it serves nothing"
[ "$(stat -c %a /run/nvmf-target)" = 700 ] && [ "$(stat -c %a /run/nvmf-target/control.sock)" = 600 ] \
    || fail "control socket permissions: $(stat -c '%n %a' /run/nvmf-target /run/nvmf-target/control.sock)"
cp "$BIN" /tmp/nvmf-target-nobody && chmod 0755 /tmp/nvmf-target-nobody
if setpriv --reuid=65534 --regid=65534 --clear-groups /tmp/nvmf-target-nobody status --socket /run/nvmf-target/control.sock >/tmp/st-nobody.txt 2>&1; then
    fail "a non-root user read the status: $(head -n 3 /tmp/st-nobody.txt)"
fi
info "non-root user refused: $(cat /tmp/st-nobody.txt)"
# The test's configuration; a restart returns only once the listener accepts.
write_conf ""
systemctl restart nvmf-target || fail "systemctl restart with the test configuration failed"
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 \
    || { cat /tmp/discover.txt; fail "first nvme discover right after 'systemctl restart' failed: READY=1 came before the listener accepted"; }
grep -q "subnqn: *$NQN" /tmp/discover.txt || fail "discovery does not list $NQN"
info "first discover right after the restart: ok"
status=$(systemctl show -p StatusText --value nvmf-target)
info "StatusText: $status"
grep -q "serving 1 subsystem(s), 1 namespace(s)" <<<"$status" || fail "unexpected StatusText"
wd=$(systemctl show -p WatchdogUSec --value nvmf-target)
[ "$wd" = 30s ] || fail "WatchdogUSec=$wd, expected 30s"
lim=$(systemctl show -p LimitMEMLOCK --value nvmf-target)
[ "$lim" = infinity ] || fail "LimitMEMLOCK=$lim"
info "WatchdogUSec=$wd LimitMEMLOCK=$lim"

# =====================================================================================
step "test 3: kernel host connects; Prometheus scrapes during fio"
connect "$NQN"
CTRL=$(ctrl_of "$NQN"); NS1=/dev/$(ns_of "$NQN" 1)
CNTLID=$(cat /sys/class/nvme/$CTRL/cntlid)
info "controller /dev/$CTRL (cntlid $CNTLID), namespace 1 = $NS1"
mkdir -p /tmp/prom-data
cat >/tmp/prom.yml <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: nvmf-target
    static_configs:
      - targets: ['127.0.0.1:9469']
EOF
prometheus --config.file=/tmp/prom.yml --storage.tsdb.path=/tmp/prom-data \
    --web.listen-address=127.0.0.1:9090 >/tmp/prometheus.log 2>&1 &
PROM_PID=$!
wait_for 60 "Prometheus ready" curl -sf "$PROM/-/ready"
fio --name=prom --filename="$NS1" --direct=1 --ioengine=libaio --rw=randrw --bs=4k --iodepth=8 \
    --size=32M --time_based --runtime=15 --output=/tmp/fio-prom.log || { cat /tmp/fio-prom.log; fail "fio failed"; }
grep -E '^ *(read|write): IOPS=' /tmp/fio-prom.log | sed 's/^ */    fio: /'
sleep 2
up=$(promq 'up{job="nvmf-target"}')
[ "$up" = 1 ] || fail "Prometheus target not up ($up); $(tail -n 5 /tmp/prometheus.log)"
for op in read write; do
    r=$(promq "sum(rate(nvmf_target_requests_total{op=\"$op\"}[20s]))")
    b=$(promq "sum(rate(nvmf_target_bytes_total{op=\"$op\"}[20s]))")
    info "Prometheus: $op rate $r req/s, $b B/s"
    python3 -c "import sys; sys.exit(0 if float('$r') > 0 and float('$b') > 0 else 1)" \
        || fail "Prometheus shows no $op rate"
done
p99=$(promq 'histogram_quantile(0.99, sum by (le) (rate(nvmf_target_request_duration_seconds_bucket{op="read"}[20s])))')
info "Prometheus: read p99 latency $p99 s"
curl -sf "$METRICS" >/tmp/metrics.txt
promtool check metrics </tmp/metrics.txt || fail "promtool check metrics failed"
info "promtool check metrics: ok ($(grep -vc '^#' /tmp/metrics.txt) samples)"
rules_ok=0
(cd /usr/share/nvmf-target/prometheus && promtool check rules nvmf-target-alerts.yml && promtool test rules nvmf-target-alerts.test.yml) \
    >/tmp/promtool.txt 2>&1 || rules_ok=$?
sed 's/^/    promtool: /' /tmp/promtool.txt
[ $rules_ok = 0 ] || fail "the shipped alert rules fail promtool check/test rules"
grep -E '^nvmf_target_(controllers|queues|connects_total|build_info)' /tmp/metrics.txt | sed 's/^/    /'
[ "$(metric "nvmf_target_controllers{subsystem=\"$NQN\",transport=\"rdma\"}")" = 1 ] || fail "controllers gauge is not 1"
kill "$PROM_PID"; wait "$PROM_PID" 2>/dev/null || true; PROM_PID=
kmsg_check "tests 2-3 (start, connect, fio under Prometheus)"

# =====================================================================================
step "test 4: systemctl reload adds a file and a new disk (host sees both, no reconnect); status lists the host"
echo "reload-test-ns2" | dd of="$NS2_FILE" conv=notrunc status=none
echo "reload-test-ram2" | dd of=/dev/ram2 oflag=direct bs=512 conv=sync status=none
write_conf "[[subsystem.namespace]]
nsid = 2
path = \"$NS2_FILE\"
[[subsystem.namespace]]
nsid = 3
path = \"/dev/ram2\"
[[subsystem]]
nqn = \"$NQN_ADDED\"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
backend = \"null\"
size = \"64M\""
systemctl reload nvmf-target || fail "systemctl reload failed"
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 || { cat /tmp/discover.txt; fail "discover after reload"; }
grep -q "subnqn: *$NQN_ADDED" /tmp/discover.txt || fail "the added subsystem is not in the discovery log"
info "discovery lists the added subsystem $NQN_ADDED"
wait_for 30 "namespace 2 on the connected host" ns_of "$NQN" 2
wait_for 30 "namespace 3 (/dev/ram2, a disk the unit was not started with) on the connected host" ns_of "$NQN" 3
NS2=/dev/$(ns_of "$NQN" 2); NS3=/dev/$(ns_of "$NQN" 3)
[ "$(ctrl_of "$NQN")" = "$CTRL" ] && [ "$(cat /sys/class/nvme/$CTRL/cntlid)" = "$CNTLID" ] \
    || fail "the host reconnected (controller changed)"
head -c 15 "$NS2" | grep -q "reload-test-ns2" || fail "namespace 2 does not read the file's data"
dd if="$NS3" bs=4096 count=1 iflag=direct status=none | head -c 16 | grep -q "reload-test-ram2" \
    || fail "namespace 3 does not read /dev/ram2's data"
dd if=/dev/urandom of=/tmp/ns3.bin bs=1M count=4 status=none
dd if=/tmp/ns3.bin of="$NS3" bs=1M oflag=direct status=none || fail "writing namespace 3 failed"
cmp -n $((4 << 20)) /tmp/ns3.bin /dev/ram2 || fail "/dev/ram2 does not hold what the host wrote to namespace 3"
info "namespace 2 = $NS2 (file), namespace 3 = $NS3 (/dev/ram2, read and written) on the same controller /dev/$CTRL (cntlid $CNTLID)"
journal | grep -E "namespaces changed|configuration reloaded" | sed 's/^/    journal: /'
journal | grep -q "controllers_notified=1" || fail "no controller was sent the namespace-changed event"
info "async events: $(metric "nvmf_target_async_events_total{subsystem=\"$NQN\",type=\"ns_changed\"}")"
HOSTNQN=$(cat /sys/class/nvme/$CTRL/hostnqn)
"$BIN" status | sed 's/^/    status: /'
status_json
python3 - "$NQN" "$HOSTNQN" "$CNTLID" "$IP" <<'EOF' || fail "status --json does not list the connected host under $NQN"
import json, sys
nqn, host, cntlid, ip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
st = json.load(open("/tmp/status.json"))
s = [x for x in st["subsystems"] if x["nqn"] == nqn]
assert s, "subsystem %s missing" % nqn
s = s[0]
c = [x for x in s["controllers"] if x["host_nqn"] == host]
assert c, "host %s not among %s" % (host, [x["host_nqn"] for x in s["controllers"]])
c = c[0]
assert c["cntlid"] == cntlid, c
assert c["host_address"].startswith(ip + ":"), c
assert c["ready"] and c["queues"] == 1 + len(c["io_queues"]) and c["io_queues"], c
assert c["reads"] > 0 and c["bytes_read"] > 0 and c["writes"] > 0 and c["bytes_written"] >= 4 << 20, c
assert c["keep_alive_ms"] > 0, c
ns = {n["nsid"]: n for n in s["namespaces"]}
assert ns[3]["path"] == "/dev/ram2" and ns[3]["backend"] == "block" and ns[3]["size_bytes"] == 128 << 20, ns[3]
assert ns[2]["backend"] == "file", ns[2]
print("    status --json: host %s is controller %d of %s from %s, %d I/O queues, %d reads / %d writes" % (
    host, c["cntlid"], nqn, c["host_address"], len(c["io_queues"]), c["reads"], c["writes"]))
EOF
# The operator's lists (tables, and --json for scripts): what the host sees, as it sees it.
for k in subsystem namespace host listener controller; do
    "$BIN" $k list >/tmp/list.txt || fail "nvmf-target $k list failed"
    sed 's/^/    '"$k"' list: /' /tmp/list.txt
    "$BIN" $k list --json >/tmp/list-$k.json || fail "nvmf-target $k list --json failed"
done
python3 - "$NQN" "$HOSTNQN" "$CNTLID" "$IP:$PORT" "$(tr -d - </sys/block/${NS3#/dev/}/nguid)" <<'EOF' || fail "the lists do not show what the host sees"
import json, sys
nqn, host, cntlid, at, nguid3 = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
load = lambda k: json.load(open("/tmp/list-%s.json" % k))
subs = {s["nqn"]: s for s in load("subsystem")}
assert subs[nqn]["controllers"] == 1 and subs[nqn]["namespaces"] == 3, subs[nqn]
ns = {(n["subsystem"], n["nsid"]): n for n in load("namespace")}
n3 = ns[(nqn, 3)]
assert n3["path"] == "/dev/ram2" and n3["size_bytes"] == 128 << 20 and n3["nguid"] == nguid3, (n3, nguid3)
hosts = [h for h in load("host") if h["subsystem"] == nqn]
assert hosts == [{"subsystem": nqn, "host": None, "any": True, "controllers": 1}], hosts
assert [l["name"] for l in load("listener")] == ["rdma:" + at], load("listener")
c = [c for c in load("controller") if c["subsystem"] == nqn]
assert len(c) == 1 and c[0]["host_nqn"] == host and c[0]["cntlid"] == cntlid, c
EOF
rc=0; "$BIN" namespace list -n nqn.2026-11.io.nvmf-lab:nope >/dev/null 2>&1 || rc=$?
[ $rc = 2 ] || fail "namespace list of an unknown subsystem: exit $rc (expected 2)"
# What dashboards read: the state gauges (as status says), failed commands by namespace
# (a host's made-up nsid is no label), the latency buckets a reload chooses.
kmsg_mark
NSZE=$(( $(cat /sys/block/${NS1#/dev/}/size) * 512 / $(cat /sys/block/${NS1#/dev/}/queue/logical_block_size) ))
nvme read "$NS1" -s "$NSZE" -c 0 -z 512 -d /tmp/past-end.bin >/dev/null 2>&1 && fail "a read past the end of namespace 1 succeeded"
nvme ns-descs "/dev/$CTRL" -n 77 >/dev/null 2>&1 && fail "the descriptors of namespace 77 (none) were read"
kmsg_mark   # the host's own log of the two failed passthrough commands
curl -sf "$METRICS" >/tmp/metrics.txt || fail "scrape"
python3 - "$NQN" "$IP:$PORT" "$(tr -d - </sys/block/${NS3#/dev/}/nguid)" <<'PY' || fail "/metrics does not show what the host sees (above)"
import re, sys
nqn, at, nguid3 = sys.argv[1:]
series = {}
for line in open("/tmp/metrics.txt"):
    m = re.match(r'^(\w+)\{(.*)\} (\S+)$', line.strip()) or re.match(r'^(\w+)() (\S+)$', line.strip())
    if m:
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        series.setdefault(m.group(1), []).append((labels, float(m.group(3))))
def find(name, **want):
    return [v for l, v in series.get(name, []) if all(l.get(k) == w for k, w in want.items())]
assert find("nvmf_target_healthy") == [1.0], series.get("nvmf_target_healthy")
assert find("nvmf_target_ana_state", listener="rdma:" + at, group="1", state="optimized") == [1.0], series.get("nvmf_target_ana_state")
assert find("nvmf_target_listener_drained", listener="rdma:" + at) == [0.0], series.get("nvmf_target_listener_drained")
info = find("nvmf_target_namespace_info", subsystem=nqn, nsid="3", backend="block", path="/dev/ram2", nguid=nguid3)
assert info == [1.0], [l for l, _ in series.get("nvmf_target_namespace_info", [])]
assert find("nvmf_target_namespace_size_bytes", subsystem=nqn, nsid="3") == [128 << 20], series.get("nvmf_target_namespace_size_bytes")
assert find("nvmf_target_failed_commands_total", subsystem=nqn, nsid="1", status="LBA_RANGE")[0] >= 1, series.get("nvmf_target_failed_commands_total")
assert find("nvmf_target_failed_commands_total", subsystem=nqn, nsid="", status="INVALID_NS")[0] >= 1, series.get("nvmf_target_failed_commands_total")
assert not find("nvmf_target_failed_commands_total", nsid="77"), "a host's made-up nsid became a label"
b = sorted(float(l["le"]) for l, _ in series["nvmf_target_request_duration_seconds_bucket"] if l.get("subsystem") == nqn and l.get("nsid") == "1" and l.get("op") == "read")
assert len(b) == 23, b
print("    /metrics: healthy 1; rdma:%s group 1 optimized, not drained; namespace 3 = /dev/ram2 (NGUID %s, 128 MiB); LBA_RANGE on nsid 1 and INVALID_NS on none counted; 22 latency buckets + Inf" % (at, nguid3))
PY
sed -i 's/^address = "127.0.0.1:9469"$/address = "127.0.0.1:9469"\nlatency_buckets = [0.001, 0.1]/' "$CONF"
systemctl reload nvmf-target || fail "systemctl reload with [metrics] latency_buckets"
BUCKETS=$(curl -sf "$METRICS" | grep -F "nvmf_target_request_duration_seconds_bucket{nsid=\"1\",op=\"read\",subsystem=\"$NQN\",le=" | sed 's/.*le="\([^"]*\)".*/\1/' | tr '\n' ' ')
[ "$BUCKETS" = "0.001024 0.131072 +Inf " ] || fail "with latency_buckets = [0.001, 0.1] the histogram shows bounds '$BUCKETS'"
sed -i '/^latency_buckets = /d' "$CONF"
systemctl reload nvmf-target || fail "systemctl reload without latency_buckets"
info "latency_buckets = [0.001, 0.1] (reload): read latency of namespace 1 in buckets $BUCKETS"

step "test 4b: a reload the daemon cannot apply (changed metrics address) is refused; the old config keeps serving"
refused_before=$(metric 'nvmf_target_config_reloads_total{result="refused"}')
write_conf "[[subsystem.namespace]]
nsid = 2
path = \"$NS2_FILE\"
[[subsystem.namespace]]
nsid = 3
path = \"/dev/ram2\""
sed -i 's/^address = "127.0.0.1:9469"$/address = "127.0.0.1:9470"/' "$CONF"
systemctl reload nvmf-target || fail "systemctl reload failed"
wait_for 20 "'reload refused' in the journal" bash -c "journalctl -u nvmf-target -b -o cat | grep -q 'reload refused'"
journal | grep 'reload refused' | tail -n 1 | sed 's/^/    journal: /'
journal | grep 'reload refused' | tail -n 1 | grep -q 'metrics.address cannot change' || fail "refusal does not name the metrics address"
sleep 1
[ "$(metric 'nvmf_target_config_reloads_total{result="refused"}')" -gt "$refused_before" ] || fail "refused reload not counted"
dd if="$NS1" of=/dev/null bs=4k count=256 iflag=direct status=none || fail "namespace 1 unreadable after a refused reload"
ns_of "$NQN" 2 >/dev/null || fail "namespace 2 gone after a refused reload"
[ "$(systemctl is-active nvmf-target)" = active ] || fail "unit not active after a refused reload"
info "still serving namespaces 1-3; StatusText: $(systemctl show -p StatusText --value nvmf-target)"
# The journal's own fields (native protocol), named as the metric labels are: a connect
# is found by its MESSAGE_ID, and by SUBSYSTEM, HOST, CNTLID and PEER.
journalctl -u nvmf-target -b -o json MESSAGE_ID=64fb856328274f8dad5413c5fdfe4eb5 SUBSYSTEM="$NQN" \
    >/tmp/jconnect.json || fail "journalctl MESSAGE_ID=... SUBSYSTEM=... failed"
python3 - "$NQN" "$HOSTNQN" "$CNTLID" "$IP" <<'PY' || fail "the journal does not hold the host's connect as fields"
import json, sys
nqn, host, cntlid, ip = sys.argv[1:]
es = [json.loads(l) for l in open("/tmp/jconnect.json") if l.strip()]
es = [e for e in es if e.get("CNTLID") == cntlid]
assert es, "no connect entry of controller %s" % cntlid
e = es[-1]
assert e["SUBSYSTEM"] == nqn and e["HOST"] == host and ip in e["PEER"], e
assert e["PRIORITY"] == "6" and e["SYSLOG_IDENTIFIER"] == "nvmf-target", e
assert "controller connected" in e["MESSAGE"] and "message_id" not in e["MESSAGE"], e["MESSAGE"]
assert e["_SYSTEMD_UNIT"] == "nvmf-target.service", e
print("    journal fields of the connect: " + ", ".join("%s=%s" % (k, e[k]) for k in ("SUBSYSTEM", "HOST", "CNTLID", "PEER", "MESSAGE_ID")))
PY
# Severity reaches the journal: the refusal is an error, "namespace ready" is not.
journal -p err | grep -q 'reload refused.*error=' || fail "journalctl -p err does not show the refused reload (with its error field)"
journal -p err | grep -q 'namespace ready' && fail "info lines reach the journal as errors"
journal -p warning | grep -q 'namespace ready' && fail "info lines reach the journal as warnings"
journal -p info | grep -q 'namespace ready' || fail "info lines are missing from the journal"
info "journalctl -p err: $(journal -p err | grep 'reload refused' | tail -n 1)"

kmsg_check "tests 4-4b (reloads adding a file and a disk, a refused reload)"
step "test 4c: a broken file fails 'systemctl reload' (check-config) and changes nothing"
echo "this is [not toml" >>"$CONF"
if systemctl reload nvmf-target 2>/tmp/reload.err; then fail "systemctl reload of a broken file succeeded"; fi
journal | grep -m1 "configuration refused" | sed 's/^/    journal: /' || fail "no 'configuration refused' in the journal"
[ "$(systemctl is-active nvmf-target)" = active ] || fail "unit not active after a broken reload"

step "test 4d: systemctl reload removes namespaces 2 and 3"
write_conf ""
systemctl reload nvmf-target || fail "systemctl reload failed"
wait_for 30 "namespace 2 gone from the host" bash -c "! [ -b $NS2 ]"
wait_for 30 "namespace 3 gone from the host" bash -c "! [ -b $NS3 ]"
[ "$(ctrl_of "$NQN")" = "$CTRL" ] || fail "the host reconnected"
info "namespace 2 removed; namespace 1 still on /dev/$CTRL"
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 || fail "discover after reload"
grep -q "subnqn: *$NQN_ADDED" /tmp/discover.txt && fail "the removed subsystem is still in the discovery log"
info "the removed subsystem left the discovery log"

kmsg_check "tests 4c-4d (a broken reload, namespaces removed)"
step "test 4f: a reload that takes the host's access away disconnects its controller (as nvmet)"
HOSTNQN=$(cat /sys/class/nvme/$CTRL/hostnqn)
host_on_target() { # NQN -> true if status --json lists $HOSTNQN under subsystem NQN
    "$BIN" status --json | python3 -c 'import json,sys; st=json.load(sys.stdin); sys.exit(0 if any(c["host_nqn"] == sys.argv[2] for s in st["subsystems"] if s["nqn"] == sys.argv[1] for c in s["controllers"]) else 1)' "$1" "$HOSTNQN"
}
host_live() { grep -qx live "/sys/class/nvme/$CTRL/state"; }
host_dropped() { ! host_on_target "$NQN"; }
host_not_live() { ! host_live; }
host_on_target "$NQN" || fail "status does not list the host before the test"
for variant in host subsystem; do
    write_conf ""
    if [ $variant = host ]; then
        sed -i 's/^allow_any_host = true$/hosts = ["nqn.2026-11.io.nvmf-lab:someone-else"]/' "$CONF"
        what="the host is no longer in the subsystem's hosts"
    else
        sed -i "s/^nqn = \"$NQN\"\$/nqn = \"$NQN_ADDED\"/" "$CONF"
        what="the subsystem is removed"
    fi
    systemctl reload nvmf-target || fail "systemctl reload ($what) failed"
    wait_for 15 "the target to drop the host's controller ($what)" host_dropped
    wait_for 15 "the host to see its controller lost ($what)" host_not_live
    info "$what: the target dropped the controller; host state $(cat /sys/class/nvme/$CTRL/state)"
    sleep 2
    host_live && fail "the host got back in although $what"
    write_conf ""
    systemctl reload nvmf-target || fail "systemctl reload (access restored) failed"
    wait_for 30 "the host to reconnect once access is restored" host_live
    info "access restored: the host reconnected by itself (/dev/$CTRL live)"
done
journal | grep -E "no longer allowed|controllers are disconnected" | tail -n 2 | sed 's/^/    journal: /'
NS1=/dev/$(ns_of "$NQN" 1)
kmsg_mark   # losing and regaining access logs reconnects by design

step "test 4g: live changes over the control socket, kept in the file; a bad one changes nothing"
write_conf ""
sed -i '1a # a comment the live changes must keep' "$CONF"
systemctl reload nvmf-target || fail "systemctl reload (baseline for live changes) failed"
wait_for 30 "the host live before live changes" host_live
live() { # nvmf-target ARGS... (prints its output indented; fails the test if it fails)
    local out
    out=$("$BIN" "$@" 2>&1) || fail "nvmf-target $*: $out"
    sed 's/^/    live: /' <<<"$out"
}
refused() { # EXPECTED-SUBSTRING nvmf-target-ARGS...: exit 2 (or $EXPECT), the reason, file and target unchanged
    local want=$1 out rc=0 before want_rc=${EXPECT:-2}; shift
    before=$(md5sum <"$CONF")
    out=$("$BIN" "$@" 2>&1) || rc=$?
    [ $rc = "$want_rc" ] || fail "nvmf-target $* : exit $rc (expected $want_rc): $out"
    grep -qF -- "$want" <<<"$out" || fail "nvmf-target $* : expected '$want' in: $out"
    [ "$(md5sum <"$CONF")" = "$before" ] || fail "nvmf-target $* was refused but changed $CONF"
    info "refused as expected: $* -> $out"
}
echo "live-added-ram2" | dd of=/dev/ram2 oflag=direct bs=512 conv=sync status=none
live namespace add --subsystem "$NQN" --path /dev/ram2
[ "$(stat -c %a "$CONF")" = 600 ] || fail "a live change left $CONF $(stat -c %a "$CONF"), not 600"
wait_for 30 "namespace 2 (added live) on the connected host" ns_of "$NQN" 2
ctrl_of "$NQN" | grep -qx "$CTRL" || fail "the host reconnected for a namespace added live"
NS2=/dev/$(ns_of "$NQN" 2)
dd if="$NS2" bs=4096 count=1 iflag=direct status=none | head -c 15 | grep -q "live-added-ram2" || fail "the live namespace does not read /dev/ram2"
dd if=/dev/urandom of=/tmp/live.bin bs=1M count=2 status=none
dd if=/tmp/live.bin of="$NS2" bs=1M oflag=direct status=none || fail "writing the live namespace failed"
cmp -n $((2 << 20)) /tmp/live.bin /dev/ram2 || fail "/dev/ram2 does not hold what the host wrote to the live namespace"
info "namespace 2 added live: $NS2 on the same controller /dev/$CTRL, written data landed on /dev/ram2"
kmsg_check "test 4g (a namespace added live, read and written)"
grep -q '^# a comment the live changes must keep' "$CONF" || fail "the live change lost the file's comments"
grep -q 'path = "/dev/ram2"' "$CONF" || fail "the live change is not in $CONF"
"$BIN" config show >/tmp/config-show.txt || fail "nvmf-target config show failed"
grep -q 'path = "/dev/ram2"' /tmp/config-show.txt || fail "config show does not show the live namespace"
info "$CONF keeps its comments and the change; config show: $(grep -c . /tmp/config-show.txt) lines"
# A disk renamed to its /dev/disk/by-id name is the same namespace to the host: its
# identifiers derive from the disk's WWID, not the path's spelling (scsi_debug: a SCSI
# disk with a WWID and udev's by-id links). Under the path-derived identity the host
# logged "identifiers changed" and dropped the namespace.
modprobe scsi_debug dev_size_mb=32 || fail "modprobe scsi_debug"
udevadm settle
SD=
for d in /sys/block/sd*; do grep -q scsi_debug "$d/device/model" 2>/dev/null && SD=${d##*/}; done
[ -n "$SD" ] || fail "no scsi_debug disk appeared"
BYID=
for l in /dev/disk/by-id/wwn-*; do [ "$(readlink -f "$l")" = "/dev/$SD" ] && BYID=$l; done
[ -n "$BYID" ] || fail "udev made no /dev/disk/by-id/wwn-* link for /dev/$SD"
live namespace add --subsystem "$NQN" --nsid 9 --path "/dev/$SD"
wait_for 30 "namespace 9 (/dev/$SD) on the connected host" ns_of "$NQN" 9
NS9=$(ns_of "$NQN" 9)
NGUID9=$(cat "/sys/block/$NS9/nguid"); UUID9=$(cat "/sys/block/$NS9/uuid")
HEADS=$(ls /sys/block | grep -c '^nvme')
status_json
python3 - "$NQN" "$NGUID9" "$UUID9" <<'PY' || fail "status --json does not show the identifiers the host sees"
import json, sys
nqn, nguid, uuid = sys.argv[1:]
ns = [n for s in json.load(open("/tmp/status.json"))["subsystems"] if s["nqn"] == nqn
      for n in s["namespaces"] if n["nsid"] == 9][0]
assert ns["nguid"] == nguid.replace("-", ""), (ns["nguid"], nguid)
assert ns["uuid"] == uuid, (ns["uuid"], uuid)
PY
kmsg_mark
sed -i "s|path = \"/dev/$SD\"|path = \"$BYID\"|" "$CONF"
grep -qF "path = \"$BYID\"" "$CONF" || fail "the rename did not reach $CONF"
systemctl reload nvmf-target || fail "systemctl reload (the disk's by-id name) failed"
status_json
grep -qF "\"path\": \"$BYID\"" /tmp/status.json || fail "status does not show namespace 9 at $BYID after the reload"
dd if=/dev/urandom of=/tmp/ns9.bin bs=1M count=2 status=none
dd if=/tmp/ns9.bin of="/dev/$NS9" bs=1M oflag=direct status=none || fail "writing namespace 9 after its rename failed"
cmp -n $((2 << 20)) /tmp/ns9.bin "/dev/$SD" || fail "/dev/$SD does not hold what the host wrote after the rename"
[ "$(ns_of "$NQN" 9)" = "$NS9" ] || fail "namespace 9 is $(ns_of "$NQN" 9) after the rename, was $NS9"
[ "$(cat "/sys/block/$NS9/nguid")" = "$NGUID9" ] || fail "the host's NGUID of namespace 9 changed: $NGUID9 -> $(cat "/sys/block/$NS9/nguid")"
[ "$(cat "/sys/block/$NS9/uuid")" = "$UUID9" ] || fail "the host's UUID of namespace 9 changed"
[ "$(ls /sys/block | grep -c '^nvme')" = "$HEADS" ] || fail "the rename made the host add a block device: $(ls /sys/block | grep '^nvme' | tr '\n' ' ')"
journal | grep -q "nsids=\[9\]" || fail "the reload did not tell the host namespace 9 changed"
if dmesg | grep -E "identifiers changed|IDs don't match|duplicate IDs" >&2; then fail "the host saw new identifiers"; fi
kmsg_check "test 4g (/dev/$SD renamed to $BYID)"
ctrl_of "$NQN" | grep -qx "$CTRL" || fail "the host reconnected for the rename"
info "/dev/$SD renamed to $BYID: the host keeps $NS9 (NGUID $NGUID9), written through after the reload"
live namespace del --subsystem "$NQN" --nsid 9 --force
wait_for 30 "namespace 9 gone from the host" bash -c "! ls /sys/block/$NS9 >/dev/null 2>&1"
# Resize, live: hosts read the new size at once (namespace-changed event, no reconnect);
# writes past the old end land; a namespace never shrinks; a block device sets its own
# size; a null namespace's size is kept in the file.
host_bytes() { echo $(( $(cat "/sys/block/$1/size") * 512 )); }
host_size_is() { [ "$(host_bytes "$1")" = "$2" ]; }
RS_FILE=/var/tmp/resize.img
rm -f "$RS_FILE"; truncate -s 8M "$RS_FILE"
live namespace add -n "$NQN" --nsid 10 --path "$RS_FILE"
wait_for 30 "namespace 10 (an 8 MiB file) on the connected host" ns_of "$NQN" 10
NS10=$(ns_of "$NQN" 10)
[ "$(host_bytes "$NS10")" = $((8 << 20)) ] || fail "the host sees namespace 10 at $(host_bytes "$NS10") bytes, not 8 MiB"
kmsg_mark
live namespace resize -n "$NQN" --nsid 10 --size 24M
wait_for 10 "the host reads namespace 10 at 24 MiB" host_size_is "$NS10" $((24 << 20))
[ "$(stat -c %s "$RS_FILE")" = $((24 << 20)) ] || fail "the file did not grow to 24 MiB"
dd if=/dev/urandom of=/tmp/rs.bin bs=1M count=2 status=none
dd if=/tmp/rs.bin of="/dev/$NS10" bs=1M seek=20 oflag=direct status=none || fail "writing past namespace 10's old end failed"
cmp -i 0:$((20 << 20)) -n $((2 << 20)) /tmp/rs.bin "$RS_FILE" \
    || fail "the file does not hold what the host wrote past the old end"
EXPECT=2 refused "only grows" namespace resize -n "$NQN" --nsid 10 --size 16M
EXPECT=2 refused "already" namespace resize -n "$NQN" --nsid 10 --size 24M
EXPECT=65 refused "multiple of the block size" namespace resize -n "$NQN" --nsid 10 --size 25000000
EXPECT=2 refused "block device" namespace resize -n "$NQN" --nsid 2 --size 256M
# Grown by the operator (as lvextend or rbd resize would), then told without --size.
truncate -s 32M "$RS_FILE"
live namespace resize -n "$NQN" --nsid 10
wait_for 10 "the host reads namespace 10 at 32 MiB" host_size_is "$NS10" $((32 << 20))
live namespace add -n "$NQN" --nsid 11 --null 16M
wait_for 30 "namespace 11 (null) on the connected host" ns_of "$NQN" 11
NS11=$(ns_of "$NQN" 11)
live namespace resize -n "$NQN" --nsid 11 --size 64M
wait_for 10 "the host reads namespace 11 at 64 MiB" host_size_is "$NS11" $((64 << 20))
grep -A3 '^nsid = 11' "$CONF" | grep -q 'size = "64M"' || fail "the null namespace's new size is not in $CONF"
ctrl_of "$NQN" | grep -qx "$CTRL" || fail "the host reconnected for a resize"
[ "$(ns_of "$NQN" 10)" = "$NS10" ] || fail "namespace 10 is another block device after its resize"
journal | grep "namespace resized" | tail -n 2 | sed 's/^/    journal: /'
journal | grep "namespace resized" | grep -q "nsid=10.*controllers_notified=1" || fail "the journal shows no namespace-changed notice for the resize"
kmsg_check "test 4g (namespaces resized live)"
dmesg | grep -E "$NS10: detected capacity change" | tail -n 1 | sed 's/^/    kernel: /'
info "namespace 10 (file) 8 -> 24 -> 32 MiB and 11 (null) 16 -> 64 MiB on $CTRL, no reconnect; shrink, same size and a block device refused"
live namespace del -n "$NQN" --nsid 10 --force
live namespace del -n "$NQN" --nsid 11 --force
wait_for 30 "namespaces 10 and 11 gone from the host" bash -c "! ls /sys/block/$NS10 /sys/block/$NS11 >/dev/null 2>&1"
rm -f "$RS_FILE"
# ANA state per listener, live: the host's path follows (ANA change event), the file keeps it.
ana_path() { cat /sys/class/nvme/"$CTRL"/nvme*c*n1/ana_state 2>/dev/null | head -n 1; }
live listener ana --listener "rdma:$IP:$PORT" --group 1 --state non-optimized
wait_for 15 "the host's path non-optimized" bash -c "[ \"\$(cat /sys/class/nvme/$CTRL/nvme*c*n1/ana_state 2>/dev/null | head -n 1)\" = non-optimized ]"
grep -q 'ana = { 1 = "non-optimized" }' "$CONF" || fail "the listener's ANA state is not in $CONF: $(grep -n ana "$CONF")"
live listener ana --group 1 --state optimized
wait_for 15 "the host's path optimized again" bash -c "[ \"\$(cat /sys/class/nvme/$CTRL/nvme*c*n1/ana_state 2>/dev/null | head -n 1)\" = optimized ]"
info "listener ana: group 1 non-optimized then optimized at $IP:$PORT; the host's path followed ($(ana_path)), the file holds it"
refused "no listener at 10.9.9.9:4420" listener ana --listener 10.9.9.9:4420 --group 1 --state optimized
refused "no listener at tcp:$IP:$PORT" listener ana --listener "tcp:$IP:$PORT" --group 1 --state optimized
EXPECT=65 refused "is not [rdma:|tcp:]ADDRESS:PORT" listener ana --listener eth0 --group 1 --state optimized
EXPECT=65 refused "is not an ANA state" listener ana --group 1 --state fastest
refused "/nonexistent/disk" namespace add --subsystem "$NQN" --path /nonexistent/disk
refused "has a namespace 2 already" namespace add --subsystem "$NQN" --nsid 2 --null 1M
# A usage error has its own status (64), apart from a refusal (2) and an invalid value (65).
rc=0; "$BIN" namespace add --subsystem "$NQN" --no-such-option >/dev/null 2>&1 || rc=$?
[ $rc = 64 ] || fail "a usage error exited $rc (expected 64)"
refused "no subsystem 'nqn.2026-11.io.nvmf-lab:nope'" host add --subsystem nqn.2026-11.io.nvmf-lab:nope --host-nqn "$HOSTNQN"
ns_of "$NQN" 2 >/dev/null && ! ns_of "$NQN" 3 >/dev/null || fail "a refused change changed the host's namespaces"
# The file edited by hand and not reloaded: changes wait for the reload.
cp "$CONF" /tmp/conf.keep; echo "# edited by hand" >>"$CONF"
EXPECT=75 refused "was edited since the daemon loaded it" namespace add --subsystem "$NQN" --null 1M
cp /tmp/conf.keep "$CONF"
# Host access: listed hosts only; a removed host is disconnected and refused.
OTHER=nqn.2026-11.io.nvmf-lab:someone-else
live host add --subsystem "$NQN" --host-nqn "$HOSTNQN"
live host add --subsystem "$NQN" --host-nqn "$OTHER"
live host del --subsystem "$NQN" --host-nqn '*'
sleep 1; host_live || fail "a listed host lost its connection when access narrowed to listed hosts"
live host del --subsystem "$NQN" --host-nqn "$OTHER"
# The last listed host: allowed (the emergency of a compromised host), warned of.
live host del --subsystem "$NQN" --host-nqn "$HOSTNQN"
wait_for 15 "the target to drop the removed host" host_dropped
wait_for 15 "the host to see its controller lost" host_not_live
sleep 2; host_live && fail "a removed host got back in"
"$BIN" status | grep -qF "no host may connect" || fail "status does not say no host may connect"
wait_for 10 "the journal to warn that no host may connect" bash -c \
    "journalctl -u nvmf-target -b -o cat | grep -qF 'no host may connect to $NQN'"
info "host del of the last host: the host was disconnected and is refused; status and journal say so"
live host add --subsystem "$NQN" --host-nqn "$HOSTNQN"
wait_for 30 "the host to reconnect once added back" host_live
# A controller disconnected: the host reconnects as a new controller (its admin queue
# connects again; the controller id may be the same, the lowest free one, as with nvmet).
C1=$(cat /sys/class/nvme/$CTRL/cntlid)
ADMIN_CONNECTS="nvmf_target_connects_total{subsystem=\"$NQN\",transport=\"rdma\",type=\"admin\"}"
A0=$(metric "$ADMIN_CONNECTS")
"$BIN" controller disconnect --subsystem "$NQN" --cntlid "$C1" --json >/tmp/disc.json || fail "controller disconnect failed"
python3 -c 'import json,sys; d=json.load(open("/tmp/disc.json")); assert "disconnected" in d["summary"], d' || fail "controller disconnect --json: $(cat /tmp/disc.json)"
admin_reconnected() { [ "$(metric "$ADMIN_CONNECTS")" -gt "$A0" ] && host_live; }
wait_for 30 "the host to reconnect after controller disconnect" admin_reconnected
info "controller $C1 disconnected; the host reconnected (controller $(cat /sys/class/nvme/$CTRL/cntlid))"
refused "has no controller 999" controller disconnect --subsystem "$NQN" --cntlid 999
# A subsystem added and removed, in discovery. The host keeps a persistent discovery
# controller: the target tells it the log changed (Discovery Log Page Change event),
# and nvme-cli's udev rule (70-nvmf-autoconnect.rules: NVME_AEN=0x70f002) runs
# `nvme connect-all` through it, which connects the new subsystem with no command here.
nvme discover -t rdma -a "$IP" -s "$PORT" --persistent >/dev/null 2>&1 || fail "nvme discover --persistent"
DCTRL=
for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = nqn.2014-08.org.nvmexpress.discovery ] && DCTRL=${c##*/}
done
[ -n "$DCTRL" ] || fail "no persistent discovery controller on the host"
udevadm monitor --kernel --property --subsystem-match=nvme >/tmp/uevents.txt 2>&1 &
UDEVMON=$!
sleep 1
live subsystem add --subsystem "$NQN_ADDED" --allow-any-host
live namespace add --subsystem "$NQN_ADDED" --null 64M
wait_for 30 "the host connected $NQN_ADDED by itself (discovery log change event, udev, connect-all)" ctrl_of "$NQN_ADDED"
kill "$UDEVMON" 2>/dev/null; wait "$UDEVMON" 2>/dev/null || true
grep -q "NVME_AEN=0x70f002" /tmp/uevents.txt || fail "the host's kernel sent no discovery log change uevent: $(grep NVME_ /tmp/uevents.txt | sort -u | tr '\n' ' ')"
info "persistent discovery controller $DCTRL: the host got the discovery log change event (uevent NVME_AEN=0x70f002) and connected $NQN_ADDED by itself (/dev/$(ctrl_of "$NQN_ADDED"))"
journal | grep "discovery log changed" | tail -n 1 | sed 's/^/    journal: /'
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 || fail "discover after subsystem add"
grep -q "subnqn: *$NQN_ADDED" /tmp/discover.txt || fail "a subsystem added live is not in discovery"
[ "$(metric "nvmf_target_controllers{subsystem=\"$NQN_ADDED\",transport=\"rdma\"}")" = 1 ] || fail "no controller series for the subsystem added live"
# The host connect-all connected is on it: removing it needs --force (nothing changes without).
refused "$NQN_ADDED is in use: 1 host(s) connected ($HOSTNQN); --force removes it anyway" subsystem del --subsystem "$NQN_ADDED"
live subsystem del --subsystem "$NQN_ADDED" --force
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 || fail "discover after subsystem del"
grep -q "subnqn: *$NQN_ADDED" /tmp/discover.txt && fail "a subsystem removed live is still in discovery"
wait_for 30 "the removed subsystem's series gone from /metrics" bash -c "! curl -sf $METRICS | grep -qF '$NQN_ADDED'"
nvme disconnect -n "$NQN_ADDED" >/dev/null 2>&1 || true
nvme disconnect -d "$DCTRL" >/dev/null 2>&1 || true
info "subsystem added live entered discovery (a host connected), and left it and /metrics when removed"
# A referral (a peer gateway's discovery service) in the file, reloaded: listed in the log.
printf '[[referral]]\ntransport = "tcp"\naddress = "10.0.2.16"\nport = 8009\n' >>"$CONF"
systemctl reload nvmf-target || fail "systemctl reload with a referral"
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 || fail "discover with a referral"
grep -B8 -A4 "traddr: *10.0.2.16" /tmp/discover.txt | grep -qi "referral" \
    || { cat /tmp/discover.txt; fail "the discovery log does not list the referral"; }
info "the discovery log lists the referral: $(grep -B8 -A4 "traddr: *10.0.2.16" /tmp/discover.txt | grep -E "subtype|trtype|trsvcid" | tr -s ' ' | tr '\n' ' ')"
sed -i '/^\[\[referral\]\]$/,$d' "$CONF"
systemctl reload nvmf-target || fail "systemctl reload without the referral"
# Listeners live: a TCP listener added beside the RDMA one; the host connects a second
# path through it (nvme-tcp, same host, one multipath namespace); removed under fio
# verify, it drains first (its path non-optimized, then inaccessible: the host's I/O
# moves to the RDMA path), then its controller is disconnected. No I/O error.
kmsg_mark   # the host del and controller disconnect above reconnect by design
# mDNS (TP 8009), turned on by a reload: avahi-browse finds a discovery service per
# listener (RDMA: _nvme-disc._udp, p=roce; TCP: _nvme-disc._tcp, p=tcp) at its address,
# and loses one when its listener goes.
systemctl start avahi-daemon || fail "avahi-daemon did not start"
printf '[discovery]\nmdns = true\n' >>"$CONF"
systemctl reload nvmf-target || fail "systemctl reload with [discovery] mdns = true"
mdns_has() { # TYPE P: avahi-browse resolves our discovery service of that type
    # grep -c reads to the end: no early exit that pipefail would count against it.
    avahi-browse -rpt "$1" 2>/dev/null | grep '^=' | grep -F ";$IP;$PORT;" | grep -cF "\"p=$2\"" >/dev/null
}
wait_for 30 "avahi-browse finds the RDMA discovery service (_nvme-disc._udp, p=roce)" mdns_has _nvme-disc._udp roce
avahi-browse -rpt _nvme-disc._udp 2>/dev/null | grep '^=' | head -n 2 | sed 's/^/    avahi-browse: /'
mdns_has _nvme-disc._tcp tcp && fail "a TCP discovery service is advertised with no TCP listener"
modprobe nvme-tcp
live listener add --transport tcp --address "$IP" --port "$PORT"
wait_for 30 "avahi-browse finds the TCP discovery service (_nvme-disc._tcp, p=tcp)" mdns_has _nvme-disc._tcp tcp
avahi-browse -rpt _nvme-disc._tcp 2>/dev/null | grep '^=' | head -n 2 | sed 's/^/    avahi-browse: /'
grep -A3 '^transport = "tcp"' "$CONF" | grep -q "port = $PORT" || fail "the TCP listener is not in $CONF"
nvme discover -t tcp -a "$IP" -s "$PORT" >/tmp/discover-tcp.txt 2>&1 || { cat /tmp/discover-tcp.txt; fail "discover through the listener added live"; }
grep -B6 "subnqn: *$NQN\$" /tmp/discover-tcp.txt | grep -q "trtype: *tcp" || { cat /tmp/discover-tcp.txt; fail "the discovery log lists no TCP entry for $NQN"; }
nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN" --ctrl-loss-tmo=5 --reconnect-delay=1 >/dev/null || fail "nvme connect -t tcp"
tcp_ctrl() { local c; for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] && [ "$(cat "$c/transport")" = tcp ] && [ "$(cat "$c/state")" = live ] && { echo "${c##*/}"; return 0; }
done; return 1; }
wait_for 30 "a live TCP controller of $NQN" tcp_ctrl
TCTRL=$(tcp_ctrl)
[ "$(ls -d /sys/class/nvme/"$TCTRL"/nvme*c*n1 2>/dev/null | wc -l)" = 1 ] || fail "the TCP path is not a path of the multipath namespace"
info "TCP listener added live: /dev/$TCTRL is a second path of $NS1"
# A listener that cannot bind is refused and changes nothing.
refused "10.9.9.9:4420 (tcp)" listener add --transport tcp --address 10.9.9.9
refused "no listener at 10.9.9.9:4420 (rdma)" listener del --address 10.9.9.9
# Both paths optimized: round-robin sends I/O down the TCP path too (numa, the default,
# keeps to one), and its controller's writes must grow before it is removed.
SUBSYS_DIR=
for s in /sys/class/nvme-subsystem/*/; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] && SUBSYS_DIR=$s
done
[ -n "$SUBSYS_DIR" ] || fail "no nvme-subsystem of $NQN"
echo round-robin >"$SUBSYS_DIR/iopolicy" || fail "iopolicy round-robin refused ($SUBSYS_DIR)"
ctrl_sum() { # FIELD TRANSPORT: the sum of FIELD over the host's controllers on TRANSPORT
    status_json
    python3 -c 'import json,sys
st = json.load(open("/tmp/status.json"))
print(sum(c[sys.argv[2]] for s in st["subsystems"] for c in s["controllers"]
          if c["transport"] == sys.argv[3] and c["host_nqn"] == sys.argv[1]))' "$HOSTNQN" "$1" "$2"
}
tcp_writes() { ctrl_sum writes tcp; }
# One listener drained by its name: its path goes inaccessible on the host, the RDMA
# path stays optimized and takes the writes; undrain brings it back.
tcp_ana() { cat /sys/class/nvme/"$TCTRL"/nvme*c*n1/ana_state 2>/dev/null | head -n 1; }
tcp_ana_is() { [ "$(tcp_ana)" = "$1" ]; }
wait_for 10 "the TCP path optimized" tcp_ana_is optimized
live drain --listener "tcp:$IP:$PORT" --timeout 20
wait_for 10 "the drained TCP path inaccessible on the host" tcp_ana_is inaccessible
[ "$(metric "nvmf_target_listener_drained{listener=\"tcp:$IP:$PORT\"}")" = 1 ] && [ "$(metric "nvmf_target_listener_drained{listener=\"rdma:$IP:$PORT\"}")" = 0 ] \
    || fail "nvmf_target_listener_drained does not show tcp:$IP:$PORT (only) drained: $(curl -sf "$METRICS" | grep '^nvmf_target_listener_drained')"
[ "$(metric "nvmf_target_ana_state{group=\"1\",listener=\"tcp:$IP:$PORT\",state=\"inaccessible\"}")" = 1 ] \
    || fail "nvmf_target_ana_state does not show group 1 inaccessible at tcp:$IP:$PORT: $(curl -sf "$METRICS" | grep '^nvmf_target_ana_state')"
[ "$(ana_path)" = optimized ] || fail "draining tcp:$IP:$PORT took the RDMA path to $(ana_path)"
W0=$(tcp_writes)
dd if=/dev/urandom of="$NS1" bs=4k count=256 oflag=direct status=none || fail "writes with the TCP path drained failed"
[ "$(tcp_writes)" = "$W0" ] || fail "the drained TCP listener took $(( $(tcp_writes) - W0 )) writes"
live undrain
wait_for 10 "the TCP path optimized after undrain" tcp_ana_is optimized
for id in d7cdd33af4a34438b8ebd5bf500f2814:draining ff7e17b2fea44af68d48aca8cb945271:drained 2122c9c05981410da3232a294e7084fe:undrained; do
    journalctl -u nvmf-target -b -o cat MESSAGE_ID="${id%%:*}" | grep -q "${id#*:}" || fail "no '${id#*:}' entry with MESSAGE_ID ${id%%:*} in the journal"
done
info "drain --listener tcp:$IP:$PORT: that path inaccessible on the host, the RDMA one optimized and written; undrain restored it"
W0=$(tcp_writes)
# The RDMA path answers every command it gets across the removal: the host would retry a
# failed one on the other path and show nothing.
RDMA_ERR0=$(ctrl_sum errors rdma)
fio --name=ldel --filename="$NS1" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=8 \
    --size=32M --time_based --runtime=14 --verify=crc32c --verify_fatal=1 --verify_backlog=64 \
    --output=/tmp/fio-ldel.log &
FIO_LDEL=$!
sleep 3
W1=$(tcp_writes)
[ "$W1" -gt $((W0 + 100)) ] || fail "the TCP path carried no I/O before its removal ($W0 -> $W1 writes): the removal would prove nothing"
info "the TCP path carried $((W1 - W0)) writes in 3 s before its removal (iopolicy round-robin)"
# The host's own view of the removed path (paths.sh): drained first, it goes inaccessible
# while still live.
path_watch /tmp/ldel-paths.txt "$TCTRL"
T_DEL=$(date +%s%N)
live listener del --transport tcp --address "$IP" --port "$PORT" >/tmp/ldel.txt
cat /tmp/ldel.txt
info "listener del answered after $(( ($(date +%s%N) - T_DEL) / 1000000 )) ms"
grep -q "drained first" /tmp/ldel.txt || fail "listener del did not drain its controller first"
wait "$FIO_LDEL" || { cat /tmp/fio-ldel.log; fail "fio failed while the TCP listener was removed"; }
grep -qE 'err= *0' /tmp/fio-ldel.log || { cat /tmp/fio-ldel.log; fail "fio reported errors across listener del"; }
grep -E '^ *write: IOPS=' /tmp/fio-ldel.log | sed 's/^ */    fio: /'
[ "$(ctrl_sum errors rdma)" = "$RDMA_ERR0" ] || fail "the RDMA path answered commands with errors across the removal ($RDMA_ERR0 -> $(ctrl_sum errors rdma))"
grep -q '^transport = "tcp"' "$CONF" && fail "the removed listener is still in $CONF"
journal | grep "listener removed" | tail -n 1 | sed 's/^/    journal: /'
journal | grep "listener removed" | tail -n 1 | grep -q "$HOSTNQN" || fail "the journal does not name the controller the removal disconnected"
wait_for 20 "the TCP path gone on the host" bash -c "! [ \"\$(cat /sys/class/nvme/$TCTRL/state 2>/dev/null)\" = live ]"
path_watch_stop
path_drained /tmp/ldel-paths.txt "$TCTRL"
nvme disconnect -d "$TCTRL" >/dev/null 2>&1 || true
host_live || fail "the RDMA path did not survive the TCP listener's removal"
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/discover.txt 2>&1 || fail "discover after listener del"
grep -q "trtype: *tcp" /tmp/discover.txt && fail "the discovery log still lists the removed TCP listener"
mdns_gone() { # the TCP service no longer resolves, while avahi answers (the RDMA one does)
    mdns_has _nvme-disc._udp roce && ! mdns_has _nvme-disc._tcp tcp
}
wait_for 20 "the TCP discovery service withdrawn from mDNS" mdns_gone
mdns_has _nvme-disc._udp roce || fail "the RDMA discovery service went with the TCP listener"
info "mDNS: avahi-browse found _nvme-disc._udp (p=roce) and, while the TCP listener lived, _nvme-disc._tcp (p=tcp) at $IP:$PORT"
# An RDMA listener on another port, added and removed with no host on it: at once.
live listener add --address "$IP" --port 4421
nvme discover -t rdma -a "$IP" -s 4421 >/tmp/discover.txt 2>&1 || fail "discover through an RDMA listener added live"
grep -q "trsvcid: *4421" /tmp/discover.txt || fail "the discovery log does not list port 4421"
live listener del --address "$IP" --port 4421
nvme discover -t rdma -a "$IP" -s 4421 >/dev/null 2>&1 && fail "the removed RDMA listener still answers"
info "listener add|del: TCP removed under fio (error 0, drained first), RDMA on port 4421 added and removed"
# Only the removed TCP path's own reconnects may fail (its listener is gone: connection
# refused, then the host gives up); no I/O error or timeout, on any path.
if kmsg_errors_but "$TCTRL" | grep -c . >/dev/null; then
    kmsg_errors_but "$TCTRL" | head -n 20 | sed 's/^/    kernel: /'
    fail "the host's kernel log shows errors other than the removed path's reconnects"
fi
kmsg_mark
# Listeners per subsystem, as nvmet links subsystems to ports: a subsystem taken off the
# RDMA listener is not in that listener's discovery log, and a Connect there is refused as
# nvmet refuses one for a subsystem its port does not link (the host's kernel says the same
# of both, nvmet in this boot on other ports); through the TCP listener it connects. Taken
# off that one too while the host is connected: refused without --force; with it the
# controller goes and the host's reconnects are refused; put back, the host reconnects.
NQN_L=nqn.2026-11.io.nvmf-lab:per-listener
KNQN_L=nqn.2026-11.io.nvmf-lab:kernel-per-listener
modprobe -a nvme-tcp nvmet nvmet-rdma
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
# nvmet listens on a port once a subsystem is linked to it: port 7 (4430) links another.
for n in "$KNQN_L" "$KNQN_L-other"; do
    mkdir "$CFG/subsystems/$n"
    echo 1 >"$CFG/subsystems/$n/attr_allow_any_host"
done
for p in 7 8; do
    mkdir "$CFG/ports/$p"
    echo rdma >"$CFG/ports/$p/addr_trtype"; echo ipv4 >"$CFG/ports/$p/addr_adrfam"
    echo "$IP" >"$CFG/ports/$p/addr_traddr"; echo $((4423 + p)) >"$CFG/ports/$p/addr_trsvcid"
done
ln -s "$CFG/subsystems/$KNQN_L-other" "$CFG/ports/7/subsystems/$KNQN_L-other"
ln -s "$CFG/subsystems/$KNQN_L" "$CFG/ports/8/subsystems/$KNQN_L"   # on port 8 (4431) only
kmsg_mark
nvme connect -t rdma -a "$IP" -s 4430 -n "$KNQN_L" >/tmp/kconnect.txt 2>&1 && fail "nvmet let a host connect through a port its subsystem is not linked to"
KMSG=$(kmsg_window | grep -o 'Connect .*' | sed "s/$KNQN_L/NQN/" | tail -n 1)
rm "$CFG/ports/8/subsystems/$KNQN_L" "$CFG/ports/7/subsystems/$KNQN_L-other"
rmdir "$CFG/ports/7" "$CFG/ports/8" "$CFG/subsystems/$KNQN_L" "$CFG/subsystems/$KNQN_L-other"
[ -n "$KMSG" ] || fail "the host's kernel said nothing of nvmet's refusal: $(cat /tmp/kconnect.txt)"
live listener add --transport tcp --address "$IP" --port "$PORT"
live subsystem add --subsystem "$NQN_L" --allow-any-host
live namespace add --subsystem "$NQN_L" --null 64M
live subsystem listener del --subsystem "$NQN_L" --listener "rdma:$IP:$PORT"
grep -qF "listeners = [\"tcp:$IP:$PORT\"]" "$CONF" || fail "$CONF does not put $NQN_L on the TCP listener only: $(grep -F listeners "$CONF")"
"$BIN" status | grep -qF "on listeners tcp:$IP:$PORT" || fail "status does not show $NQN_L on the TCP listener only"
refused "is on every listener already" subsystem listener add --subsystem "$NQN" --listener "$IP:$PORT"
nvme discover -t rdma -a "$IP" -s "$PORT" >/tmp/d-rdma.txt 2>&1 || fail "discovery through the RDMA listener"
nvme discover -t tcp -a "$IP" -s "$PORT" >/tmp/d-tcp.txt 2>&1 || fail "discovery through the TCP listener"
# The log lists every listener's entries, whichever a host reads it through (nvmet: only
# the port's own): $NQN_L only at the TCP listener, in both.
for f in /tmp/d-rdma.txt /tmp/d-tcp.txt; do
    python3 - "$NQN_L" "$f" <<'PY' || fail "the discovery log ($f) does not list $NQN_L at the TCP listener only"
import re, sys
entries = [e for e in open(sys.argv[2]).read().split("=====Discovery Log Entry") if re.search(r"subnqn: *" + re.escape(sys.argv[1]) + r"\s", e)]
assert len(entries) == 1 and re.search(r"trtype: *tcp", entries[0]), entries
PY
done
kmsg_mark
before=$(metric 'nvmf_target_connect_rejections_total{reason="not_on_listener"}')
nvme connect -t rdma -a "$IP" -s "$PORT" -n "$NQN_L" >/tmp/connect.txt 2>&1 && fail "a host connected to $NQN_L through the RDMA listener it is not on"
OURS=$(kmsg_window | grep -o 'Connect .*' | sed "s/$NQN_L/NQN/" | tail -n 1)
[ "$OURS" = "$KMSG" ] || fail "the host's kernel says '$OURS' of our refusal, '$KMSG' of nvmet's"
[ "$(metric 'nvmf_target_connect_rejections_total{reason="not_on_listener"}')" -gt "$before" ] || fail "the refusal was not counted (reason not_on_listener)"
info "a Connect through the RDMA listener is refused as nvmet refuses it: $OURS"
nvme connect -t tcp -a "$IP" -s "$PORT" -n "$NQN_L" --ctrl-loss-tmo=60 --reconnect-delay=1 >/dev/null || fail "connect to $NQN_L through the TCP listener"
wait_for 30 "live controller of $NQN_L" ctrl_of "$NQN_L"
wait_for 30 "namespace 1 of $NQN_L" ns_of "$NQN_L" 1
LCTRL=$(ctrl_of "$NQN_L")
[ "$(cat /sys/class/nvme/$LCTRL/transport)" = tcp ] || fail "$LCTRL is not over TCP"
dd if="/dev/$(ns_of "$NQN_L" 1)" of=/dev/null bs=1M count=4 iflag=direct status=none || fail "reading $NQN_L through the TCP listener"
refused "is in use through tcp:$IP:$PORT" subsystem listener del --subsystem "$NQN_L" --listener "tcp:$IP:$PORT"
before=$(metric 'nvmf_target_connect_rejections_total{reason="not_on_listener"}')
live subsystem listener del --subsystem "$NQN_L" --listener "tcp:$IP:$PORT" --force
wait_for 15 "the host's controller of $NQN_L no longer live" bash -c "! grep -qx live /sys/class/nvme/$LCTRL/state"
journal | grep -q "the subsystem left the listener the host connected through" || fail "the journal does not say why the controller went"
wait_for 30 "a reconnect of the host refused (not_on_listener)" bash -c \
    "[ \"\$(curl -sf $METRICS | awk '/^nvmf_target_connect_rejections_total\\{reason=\"not_on_listener\"\\}/ {print \$NF}')\" -gt $before ]"
"$BIN" status | grep -qF "on no listener" || fail "status does not show $NQN_L on no listener"
live subsystem listener add --subsystem "$NQN_L" --listener "tcp:$IP:$PORT"
wait_for 30 "the host reconnected to $NQN_L by itself" bash -c "grep -qx live /sys/class/nvme/$LCTRL/state"
info "taken off the TCP listener (--force) the controller went and reconnects were refused; put back, $LCTRL reconnected"
nvme disconnect -n "$NQN_L" >/dev/null
live subsystem del --subsystem "$NQN_L"
live listener del --transport tcp --address "$IP" --port "$PORT"
kmsg_mark   # the controller taken off its listener reconnects by design
systemctl stop avahi-daemon
journal | grep "live change" | sed 's/^/    journal: /'
[ "$(metric 'nvmf_target_control_changes_total{method="namespace_add",result="ok"}')" -ge 2 ] || fail "live changes not counted"
[ "$(metric 'nvmf_target_control_changes_total{method="namespace_add",result="refused"}')" -ge 3 ] || fail "refused live changes not counted"
# Restart: every change kept.
systemctl restart nvmf-target || fail "systemctl restart after live changes failed"
wait_for 30 "the host back after the restart" host_live
wait_for 30 "namespace 2 after the restart" ns_of "$NQN" 2
status_json
python3 - "$NQN" "$HOSTNQN" <<'EOF' || fail "the restarted daemon does not serve the live changes"
import json, sys
st = json.load(open("/tmp/status.json"))
s = [x for x in st["subsystems"] if x["nqn"] == sys.argv[1]][0]
assert sorted(n["nsid"] for n in s["namespaces"]) == [1, 2], s["namespaces"]
assert all(x["nqn"] != "nqn.2026-11.io.nvmf-lab:added-by-reload" for x in st["subsystems"])
print("    after the restart: namespaces", [n["nsid"] for n in s["namespaces"]], "host connected:", [c["host_nqn"] for c in s["controllers"]])
EOF
write_conf ""
systemctl reload nvmf-target || fail "systemctl reload (back to the test configuration) failed"
wait_for 30 "namespace 2 gone" bash -c "! [ -b $NS2 ]"
NS1=/dev/$(ns_of "$NQN" 1)
kmsg_mark   # host del and controller disconnect make the host reconnect by design

step "test 4e: Restart=on-failure brings a killed daemon back, its reservation kept (PTPL)"
# As the Linux host registers (CPTPL "set"): the state is synced under the unit's
# StateDirectory before the command completes, and the killed daemon's successor has it.
nvme resv-register "$NS1" --nrkey=0xabc --rrega=0 --cptpl=3 >/dev/null || fail "resv-register"
nvme resv-acquire "$NS1" --crkey=0xabc --rtype=1 >/dev/null || fail "resv-acquire"
ls /var/lib/nvmf-target/reservations/*.json >/dev/null 2>&1 || fail "no reservation state under the StateDirectory"
info "state file: $(ls /var/lib/nvmf-target/reservations/)"
pid=$(systemctl show -p MainPID --value nvmf-target)
systemctl kill -s KILL nvmf-target
wait_for 30 "a new daemon process" bash -c "[ \"\$(systemctl show -p MainPID --value nvmf-target)\" != 0 ] && [ \"\$(systemctl show -p MainPID --value nvmf-target)\" != $pid ] && [ \"\$(systemctl is-active nvmf-target)\" = active ]"
info "killed pid $pid; restarted as pid $(systemctl show -p MainPID --value nvmf-target) (NRestarts=$(systemctl show -p NRestarts --value nvmf-target))"
wait_for 30 "the host reconnected to the restarted daemon" bash -c "grep -qx live /sys/class/nvme/$CTRL/state"
info "the host reconnected by itself: /dev/$CTRL is live again"
nvme resv-report "$NS1" --eds -b >/tmp/report.bin || fail "resv-report after the restart"
python3 - /tmp/report.bin <<'EOF' || fail "the reservation did not survive the restart"
import struct, sys
b = open(sys.argv[1], "rb").read()
gen, rtype, n = struct.unpack_from("<IBH", b, 0)
rkey, = struct.unpack_from("<Q", b, 64 + 8)
print(f"    after the restart: generation {gen}, type {rtype}, {n} registrant(s), key {rkey:#x}, PTPLS {b[9]}")
sys.exit(0 if (rtype, n, rkey, b[9]) == (1, 1, 0xabc, 1) else 1)
EOF
nvme resv-release "$NS1" --crkey=0xabc --rtype=1 >/dev/null || fail "resv-release"
nvme resv-register "$NS1" --crkey=0xabc --rrega=1 >/dev/null || fail "resv-register (unregister)"

# =====================================================================================
step "test 5: systemctl stop while fio and an acknowledged-writes logger run"
cat >/tmp/ackwriter.py <<'EOF'
import hashlib, mmap, os, sys
def block(seq):
    head = b"ACK %016d " % seq
    body = hashlib.sha256(head).digest() * 128
    return (head + body)[:4096]
mode, dev, start, count, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
buf = mmap.mmap(-1, 4096)
if mode == "write":
    fd = os.open(dev, os.O_WRONLY | os.O_DIRECT)
    with open(log, "w", buffering=1) as ack:
        for seq in range(count):
            buf.seek(0); buf.write(block(seq))
            try:
                os.pwrite(fd, buf, start + seq * 4096)
            except OSError as e:
                print("writer stopped at seq %d: %s" % (seq, e)); sys.exit(0)
            ack.write("%d\n" % seq)
    print("writer finished all %d blocks" % count)
else:
    fd = os.open(dev, os.O_RDONLY | os.O_DIRECT)
    acked = [int(x) for x in open(log)]
    bad = 0
    for seq in acked:
        os.preadv(fd, [buf], start + seq * 4096)
        if buf[:4096] != block(seq):
            bad += 1
            if bad < 5: print("acknowledged block %d is not what was written" % seq)
    print("%d acknowledged blocks checked, %d bad" % (len(acked), bad))
    sys.exit(1 if bad or not acked else 0)
EOF
ACK_START=$(( 32 * 1024 * 1024 )); ACK_COUNT=$(( 96 * 1024 * 1024 / 4096 ))
fio --name=stop --filename="$NS1" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
    --size=32M --time_based --runtime=120 --verify=crc32c --verify_backlog=256 --verify_fatal=1 \
    --verify_dump=0 --verify_state_save=0 --output=/tmp/fio-stop.log &
FIO_PID=$!
python3 /tmp/ackwriter.py write "$NS1" $ACK_START $ACK_COUNT /tmp/acked.txt >/tmp/ackwriter.log 2>&1 &
ACK_PID=$!
sleep 6
info "acknowledged so far: $(wc -l </tmp/acked.txt) blocks; in flight: $(metric 'nvmf_target_requests_in_flight{')"
t=$(date +%s%N); STOP_SINCE=$(date +%s)
systemctl stop nvmf-target || fail "systemctl stop failed"
info "systemctl stop took $(( ($(date +%s%N) - t) / 1000000 )) ms"
[ "$(systemctl show -p ExecMainStatus --value nvmf-target)" = 0 ] || fail "exit status $(systemctl show -p ExecMainStatus --value nvmf-target)"
[ "$(systemctl show -p Result --value nvmf-target)" = success ] || fail "unit result $(systemctl show -p Result --value nvmf-target)"
fio_rc=0; wait $FIO_PID || fio_rc=$?
wait $ACK_PID || true
info "fio exit $fio_rc: $(grep -m1 -oE 'err= *[0-9]+[^)]*' /tmp/fio-stop.log || true)"
sed 's/^/    /' /tmp/ackwriter.log
[ $fio_rc != 0 ] || grep -qE 'err= *[1-9]' /tmp/fio-stop.log || fail "fio saw no error although the target stopped"
if grep -iE 'verify.*(bad|fail)|crc32c.*fail|bad magic' /tmp/fio-stop.log; then fail "fio found a corrupt block"; fi
# From this stop on only: an earlier restart wrote the same lines.
journal --since "@$STOP_SINCE" | grep -E "shutting down|in-flight I/O|backends flushed|stopped cleanly|STATS" | sed 's/^/    journal: /'
journal --since "@$STOP_SINCE" | grep -q "stopped cleanly" || fail "the journal does not show a clean shutdown of this stop"
journal --since "@$STOP_SINCE" | grep -q "in-flight I/O drained" || fail "this stop did not drain the in-flight I/O"

step "test 5b: restart, reconnect, every acknowledged block reads back"
wait_for 45 "controller of $NQN gone after ctrl-loss-tmo" bash -c "! grep -qx '$NQN' /sys/class/nvme/*/subsysnqn 2>/dev/null"
systemctl start nvmf-target || fail "systemctl start (restart) failed"
connect "$NQN"
NS1=/dev/$(ns_of "$NQN" 1)
kmsg_mark   # the stop (test 5) and the controller loss above log I/O errors by design
python3 /tmp/ackwriter.py check "$NS1" $ACK_START $ACK_COUNT /tmp/acked.txt | sed 's/^/    /'
[ "${PIPESTATUS[0]}" = 0 ] || fail "acknowledged writes were lost or corrupted"
fio --name=verify --filename="$NS1" --direct=1 --ioengine=libaio --rw=read --bs=4k --iodepth=16 --size=32M \
    --output=/tmp/fio-read.log >/dev/null || { cat /tmp/fio-read.log; fail "reading the fio region failed"; }

kmsg_check "test 5b (reconnect, acknowledged writes read back)"
step "test 5c: systemctl restart under fio with verify: the host resends held I/O, no error"
fio --name=restart --filename="$NS1" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
    --size=32M --time_based --runtime=25 --verify=crc32c --verify_backlog=256 --verify_fatal=1 \
    --verify_dump=0 --verify_state_save=0 --output=/tmp/fio-restart.log &
FIO_PID=$!
sleep 6
t=$(date +%s%N)
systemctl restart nvmf-target || fail "systemctl restart failed"
info "systemctl restart took $(( ($(date +%s%N) - t) / 1000000 )) ms"
fio_rc=0; wait $FIO_PID || fio_rc=$?
grep -E '^ *write: IOPS=|err=' /tmp/fio-restart.log | sed 's/^ */    fio: /'
[ $fio_rc = 0 ] && ! grep -qE 'err= *[1-9]' /tmp/fio-restart.log \
    || { cat /tmp/fio-restart.log; fail "fio saw errors across systemctl restart"; }
info "fio ran through the restart without an error or a verify failure"

step "test 5d: dpkg -i of a newer package under fio with verify: no error, the longest pause printed"
UPGRADE=$(ls build/debian/upgrade/nvmf-target_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$UPGRADE" ] || fail "no upgrade package in build/debian/upgrade (run-daemon-tests builds it)"
OLDV=$(dpkg-query -W -f '${Version}' nvmf-target); OLDPID=$(systemctl show -p MainPID --value nvmf-target)
UCTRL=$(ctrl_of "$NQN") || fail "no live controller of $NQN before the upgrade"
kmsg_mark
fio --name=upgrade --filename="$NS1" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 \
    --size=32M --time_based --runtime=25 --verify=crc32c --verify_backlog=256 --verify_fatal=1 \
    --verify_dump=0 --verify_state_save=0 --output-format=json --output=/tmp/fio-upgrade.json &
FIO_PID=$!
sleep 6
# The file holds live changes and differs from the example, and the newer package's example
# differs from this one's: unattended (no terminal), the upgrade must not ask and must keep
# the file as it is.
CONF_SUM=$(sha256sum </etc/nvmf-target/nvmf-target.toml)
cmp -s /etc/nvmf-target/nvmf-target.toml /usr/share/nvmf-target/nvmf-target.toml && fail "the configuration has no change of its own: the upgrade would prove nothing"
t=$(date +%s%N); SINCE=$(date +%s)
dpkg -i "$UPGRADE" </dev/null >/tmp/dpkg-upgrade.log 2>&1 || { cat /tmp/dpkg-upgrade.log; fail "dpkg -i of the newer package failed (unattended)"; }
info "dpkg -i $(basename "$UPGRADE") took $(( ($(date +%s%N) - t) / 1000000 )) ms:"
grep "^nvmf-target:" /tmp/dpkg-upgrade.log | sed 's/^/    /'
fio_rc=0; wait $FIO_PID || fio_rc=$?
read -r U_ERR U_WIOPS U_MAXW U_MAXR < <(python3 -c 'import json,sys
j=json.load(open(sys.argv[1]))["jobs"][0]
print(j["error"], int(j["write"]["iops"]), "%.2f" % (j["write"]["lat_ns"]["max"] / 1e9), "%.2f" % (j["read"]["lat_ns"]["max"] / 1e9))' \
    /tmp/fio-upgrade.json) || fail "fio gave no result across the upgrade (exit $fio_rc)"
NEWV=$(dpkg-query -W -f '${Version}' nvmf-target); NEWPID=$(systemctl show -p MainPID --value nvmf-target)
info "upgrade $OLDV -> $NEWV under fio: exit $fio_rc, error $U_ERR, write IOPS $U_WIOPS; longest pause: write ${U_MAXW} s, read ${U_MAXR} s (goal < 3 s)"
# Where the pause went: the daemon's stop and start, the host's reconnect.
{ journalctl -o short-precise -u nvmf-target --since "@$SINCE" |
      grep -E "shutting down|in-flight I/O|stopped cleanly|Stopping|Starting|started namespaces_ms|nvmf-target ready|Started"
  journalctl -o short-precise -k --since "@$SINCE" | grep -E "nvme|NVMe"; } | sort -k3,3 | sed 's/^/    /' 
UPGRADE_ROW="single target, dpkg -i $OLDV -> $NEWV: fio error $U_ERR (exit $fio_rc), verify failures 0, longest write ${U_MAXW} s"
[ "$fio_rc" = 0 ] && [ "$U_ERR" = 0 ] || fail "fio saw errors or verify failures across the upgrade"
# The goal is 3 s; under TCG the pause measured 1.9 and 2.8 s in two boots, so the lab
# enforces 4 s (an upgrade that does not drain pauses I/O for the host's reconnect and
# timeouts: 10 s and more).
awk -v w="$U_MAXW" -v r="$U_MAXR" 'BEGIN { exit !(w < 4 && r < 4) }' \
    || fail "an I/O paused ${U_MAXW} s (write) / ${U_MAXR} s (read) across the upgrade (goal < 3 s, lab bound 4 s)"
[ "$NEWV" != "$OLDV" ] || fail "the package version did not change ($OLDV)"
[ "$NEWPID" != "$OLDPID" ] && [ "$(systemctl is-active nvmf-target)" = active ] \
    || fail "the upgrade did not restart the daemon (pid $OLDPID -> $NEWPID, $(systemctl is-active nvmf-target))"
grep -q "restarting nvmf-target.service" /tmp/dpkg-upgrade.log || fail "the upgrade did not say it restarted the daemon"
grep -qi "configuration file" /tmp/dpkg-upgrade.log && { cat /tmp/dpkg-upgrade.log; fail "the upgrade asked about the configuration"; }
[ "$(sha256sum </etc/nvmf-target/nvmf-target.toml)" = "$CONF_SUM" ] || fail "the upgrade changed /etc/nvmf-target/nvmf-target.toml"
grep -q "^# example of $NEWV" /usr/share/nvmf-target/nvmf-target.toml || fail "the newer package's example is not installed"
ls /etc/nvmf-target/*.dpkg-* 2>/dev/null && fail "the upgrade left dpkg's copies beside the configuration"
info "unattended upgrade: no question, the configuration (live changes) kept, the example replaced"
# policy-rc.d honoured: where it forbids (101: a chroot, an image build, a hold), an
# upgrade installs but restarts nothing.
UPGRADE2=$(ls build/debian/upgrade2/nvmf-target_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$UPGRADE2" ] || fail "no second upgrade package in build/debian/upgrade2"
PID2=$(systemctl show -p MainPID --value nvmf-target)
printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d
dpkg -i "$UPGRADE2" </dev/null >/tmp/dpkg-policy.log 2>&1 || { rm -f /usr/sbin/policy-rc.d; cat /tmp/dpkg-policy.log; fail "dpkg -i under a policy-rc.d that forbids failed"; }
rm -f /usr/sbin/policy-rc.d
grep "^nvmf-target:" /tmp/dpkg-policy.log | sed 's/^/    /'
[ "$(dpkg-query -W -f '${Version}' nvmf-target)" != "$NEWV" ] || fail "the second upgrade did not install"
[ "$(systemctl show -p MainPID --value nvmf-target)" = "$PID2" ] || fail "the upgrade restarted the daemon although policy-rc.d forbids it"
grep -q "policy-rc.d forbids restarting nvmf-target.service" /tmp/dpkg-policy.log || fail "the upgrade did not say policy-rc.d kept the daemon running"
info "policy-rc.d exit 101: $(dpkg-query -W -f '${Version}' nvmf-target) installed, the daemon (pid $PID2) not restarted"
# Held I/O is resent after the reconnect: the host's log shows the reconnect and nothing
# else (no timeout, no failed command).
E=$(kmsg_errors_but "$UCTRL")
[ -z "$E" ] || { echo "$E"; fail "errors in the host's kernel log across the upgrade (other than $UCTRL's reconnect)"; }
settle; nvme disconnect -n "$NQN" >/dev/null
systemctl stop nvmf-target

# =====================================================================================
kmsg_mark   # a restart makes the host reconnect (error recovery) by design
step "test 6: kernel target config saved as nvmetcli JSON, imported, served by us"
modprobe -a nvmet nvmet-rdma nvmet-tcp nvme-tcp
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
head -c $(( 4 * 1024 * 1024 )) /dev/urandom | dd of=/dev/ram1 bs=1M oflag=direct status=none
want=$(head -c $(( 4 * 1024 * 1024 )) /dev/ram1 | sha256sum | cut -d' ' -f1)
mkdir "$CFG/subsystems/$KNQN"
echo 1 >"$CFG/subsystems/$KNQN/attr_allow_any_host"
mkdir "$CFG/subsystems/$KNQN/namespaces/1"
echo -n /dev/ram1 >"$CFG/subsystems/$KNQN/namespaces/1/device_path"
echo 1 >"$CFG/subsystems/$KNQN/namespaces/1/enable"
mkdir "$CFG/ports/1"
echo rdma >"$CFG/ports/1/addr_trtype"; echo ipv4 >"$CFG/ports/1/addr_adrfam"
echo "$IP" >"$CFG/ports/1/addr_traddr"; echo "$PORT" >"$CFG/ports/1/addr_trsvcid"
ln -s "$CFG/subsystems/$KNQN" "$CFG/ports/1/subsystems/$KNQN"
# A second subsystem, on a TCP port only (nvmet's port link: the import carries it).
KNQN2=$KNQN-tcp
head -c $(( 8 * 1024 * 1024 )) /dev/urandom >/var/tmp/daemon-k2.img
want2=$(head -c $(( 1024 * 1024 )) /var/tmp/daemon-k2.img | sha256sum | cut -d' ' -f1)
mkdir "$CFG/subsystems/$KNQN2"
echo 1 >"$CFG/subsystems/$KNQN2/attr_allow_any_host"
mkdir "$CFG/subsystems/$KNQN2/namespaces/1"
echo -n /var/tmp/daemon-k2.img >"$CFG/subsystems/$KNQN2/namespaces/1/device_path"
echo 1 >"$CFG/subsystems/$KNQN2/namespaces/1/enable"
mkdir "$CFG/ports/2"
echo tcp >"$CFG/ports/2/addr_trtype"; echo ipv4 >"$CFG/ports/2/addr_adrfam"
echo "$IP" >"$CFG/ports/2/addr_traddr"; echo "$PORT" >"$CFG/ports/2/addr_trsvcid"
ln -s "$CFG/subsystems/$KNQN2" "$CFG/ports/2/subsystems/$KNQN2"
if command -v nvmetcli >/dev/null; then
    nvmetcli save /tmp/nvmet.json; info "saved with nvmetcli"
else
    python3 integration/guest/nvmet-save.py /tmp/nvmet.json; info "saved with nvmet-save.py (nvmetcli not installed)"
fi
sed 's/^/    /' /tmp/nvmet.json | head -n 60
# tear the kernel target down (as 'nvmetcli clear')
rm "$CFG/ports/1/subsystems/$KNQN"; rmdir "$CFG/ports/1"
echo 0 >"$CFG/subsystems/$KNQN/namespaces/1/enable"; rmdir "$CFG/subsystems/$KNQN/namespaces/1" "$CFG/subsystems/$KNQN"
rm "$CFG/ports/2/subsystems/$KNQN2"; rmdir "$CFG/ports/2"
echo 0 >"$CFG/subsystems/$KNQN2/namespaces/1/enable"; rmdir "$CFG/subsystems/$KNQN2/namespaces/1" "$CFG/subsystems/$KNQN2"
"$BIN" import-nvmetcli /tmp/nvmet.json >/tmp/imported.toml 2>/tmp/import-notes.txt || { cat /tmp/import-notes.txt; fail "import-nvmetcli failed"; }
sed 's/^/    notes: /' /tmp/import-notes.txt
sed 's/^/    /' /tmp/imported.toml
"$BIN" check-config /tmp/imported.toml | sed 's/^/    /'
grep -qF "listeners = [\"tcp:$IP:$PORT\"]" /tmp/imported.toml || fail "the import does not put $KNQN2 on the TCP listener only"
grep -qF "listeners = [\"rdma:$IP:$PORT\"]" /tmp/imported.toml || fail "the import does not put $KNQN on the RDMA listener only"
NO_COLOR=1 "$BIN" --config /tmp/imported.toml >/tmp/imported.log 2>&1 &
FG_PID=$!
wait_for 30 "imported target answers discovery" nvme discover -t rdma -a "$IP" -s "$PORT"
connect "$KNQN"
got=$(head -c $(( 4 * 1024 * 1024 )) "/dev/$(ns_of "$KNQN" 1)" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "imported namespace reads different data"
info "the imported namespace serves the data the kernel target exported (sha256 ${got:0:16}…)"
settle; nvme disconnect -n "$KNQN" >/dev/null
kmsg_check "test 6 (imported configuration)"
nvme connect -t rdma -a "$IP" -s "$PORT" -n "$KNQN2" >/dev/null 2>&1 && fail "$KNQN2 connected through the RDMA listener (nvmet linked it to its TCP port only)"
kmsg_mark   # the refused Connect logs "failed to connect queue" by design
nvme connect -t tcp -a "$IP" -s "$PORT" -n "$KNQN2" --ctrl-loss-tmo=15 >/dev/null || fail "connect to $KNQN2 through the imported TCP listener"
wait_for 30 "namespace 1 of $KNQN2" ns_of "$KNQN2" 1
got=$(head -c $(( 1024 * 1024 )) "/dev/$(ns_of "$KNQN2" 1)" | sha256sum | cut -d' ' -f1)
[ "$got" = "$want2" ] || fail "$KNQN2's imported namespace reads different data"
info "$KNQN2 (nvmet: TCP port only) is on the imported TCP listener only, with its data"
settle; nvme disconnect -n "$KNQN2" >/dev/null
kill -TERM "$FG_PID"; wait "$FG_PID" || fail "imported target exited with an error: $(tail -n 5 /tmp/imported.log)"
FG_PID=

# =====================================================================================
kmsg_check "test 6 (imported configuration)"
step "test 7: integration/demo on a machine with an RDMA device (this guest's soft-RoCE)"
SKIP_BUILD=1 FIO_RUNTIME=3 integration/demo >/tmp/demo.log 2>&1 || { tail -n 40 /tmp/demo.log; fail "integration/demo failed"; }
grep -q "RDMA device on $IF ($IP): the demo runs on it" /tmp/demo.log || { head -n 5 /tmp/demo.log; fail "the demo did not take the RDMA-device path"; }
grep -q "^DEMO OK" /tmp/demo.log || fail "no DEMO OK"
grep -q "1 GiB disk /var/tmp/nvmf-demo.img" /tmp/demo.log || fail "the demo did not use a file of its own"
[ -e /var/tmp/nvmf-demo.img ] && fail "the demo left its disk behind"
grep -E "RDMA device on|IOPS=|controller 1 host|namespace 1" /tmp/demo.log | sed 's/^/    demo: /'

# =====================================================================================
step "test 7b: an invalid configuration fails the start once (exit 78): no restart loop"
cp "$CONF" /tmp/conf.good
echo 'listener = = "broken"' >>"$CONF"
R0=$(systemctl show -p NRestarts --value nvmf-target)
systemctl start nvmf-target 2>/dev/null && fail "the unit started with an invalid configuration"
sleep 6   # three RestartSec= periods
R1=$(systemctl show -p NRestarts --value nvmf-target)
[ "$R1" = "$R0" ] || fail "systemd restarted the daemon $((R1 - R0)) time(s) in 6 s for an invalid configuration (a restart loop)"
[ "$(systemctl show -p ExecMainStatus --value nvmf-target)" = 78 ] || fail "the daemon exited $(systemctl show -p ExecMainStatus --value nvmf-target) for an invalid configuration, not 78"
[ "$(systemctl is-active nvmf-target)" = failed ] || fail "the unit is $(systemctl is-active nvmf-target), not failed"
journal | grep -F "$CONF" | tail -n 1 | sed 's/^/    journal: /'
info "invalid configuration: exit 78, the unit failed, $((R1 - R0)) restarts in 6 s"
cp /tmp/conf.good "$CONF"
systemctl reset-failed nvmf-target

step "test 8: dpkg -r stops and removes the package, keeping the configuration; --purge removes it"
systemctl start nvmf-target || fail "systemctl start before dpkg -r"
wait_for 30 "the daemon active" bash -c "[ \"\$(systemctl is-active nvmf-target)\" = active ]"
dpkg -r nvmf-target >/tmp/dpkg-r.log 2>&1 || { cat /tmp/dpkg-r.log; fail "dpkg -r failed"; }
[ "$(systemctl is-active nvmf-target 2>/dev/null)" != active ] || fail "the daemon still runs after dpkg -r"
pgrep -x nvmf-target >/dev/null && fail "an nvmf-target process is left after dpkg -r"
for f in /usr/sbin/nvmf-target /usr/bin/nvmf-initiator /lib/systemd/system/nvmf-target.service; do
    [ -e "$f" ] && fail "$f is left after dpkg -r"
done
[ -e "$CONF" ] || fail "dpkg -r removed the configuration (only --purge may)"
[ "$(systemctl is-enabled nvmf-target 2>/dev/null)" = enabled ] && fail "the unit is still enabled after dpkg -r"
info "dpkg -r: daemon stopped, binaries and unit gone, $CONF kept"
dpkg --purge nvmf-target >/tmp/dpkg-purge.log 2>&1 || { cat /tmp/dpkg-purge.log; fail "dpkg --purge failed"; }
[ -e /etc/nvmf-target ] && fail "/etc/nvmf-target is left after dpkg --purge: $(ls -A /etc/nvmf-target)"
[ -e /var/lib/nvmf-target ] && fail "/var/lib/nvmf-target is left after dpkg --purge"
dpkg-query -W nvmf-target >/dev/null 2>&1 && [ "$(dpkg-query -W -f '${Status}' nvmf-target)" != "unknown ok not-installed" ] \
    && fail "dpkg still knows the package: $(dpkg-query -W -f '${Status}' nvmf-target)"
info "dpkg --purge: configuration and state gone"
info "$UPGRADE_ROW"

PASSED=1
echo
echo "DAEMON PASS"
