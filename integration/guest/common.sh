# common.sh: the prologue of the guest test scripts, sourced first (after set -euo
# pipefail): timed step headers, info lines, fail(), an ERR trap naming the line, and
# own_down: stops our target started in the background as $TPID (log in $TLOG) with
# SIGTERM and fails, with the log's tail, unless it exits cleanly; controllers_of HOSTNQN:
# how many controllers our running target ($TARGET_BIN status) has for that host.
T0=$(date +%s%N)
step() { printf '\n=== [%6.1fs] %s\n' "$(( ($(date +%s%N) - T0) / 1000000 ))e-3" "$*"; }
info() { echo "    $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }   # stderr: also seen from inside $(...)
trap 'rc=$?; echo "FAIL: command failed (exit $rc) at line $LINENO: $BASH_COMMAND"' ERR
own_down() {
    [ -n "$TPID" ] || return 0
    kill -TERM "$TPID" 2>/dev/null || true
    local rc=0; wait "$TPID" || rc=$?; TPID=
    [ $rc = 0 ] || { sed 's/^/    target: /' "$TLOG" | tail -n 30; fail "our target exited with status $rc"; }
}
controllers_of() { # HOSTNQN -> how many controllers our target has for it
    "$TARGET_BIN" status --json | python3 -c 'import json,sys; st=json.load(sys.stdin); print(sum(1 for s in st["subsystems"] for c in s["controllers"] if c["host_nqn"] == sys.argv[1]))' "$1"
}
