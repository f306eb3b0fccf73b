# common.sh: the prologue of the guest test scripts, sourced first (after set -euo
# pipefail): timed step headers, info lines, fail(), and an ERR trap naming the line.
T0=$(date +%s%N)
step() { printf '\n=== [%6.1fs] %s\n' "$(( ($(date +%s%N) - T0) / 1000000 ))e-3" "$*"; }
info() { echo "    $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }   # stderr: also seen from inside $(...)
trap 'rc=$?; echo "FAIL: command failed (exit $rc) at line $LINENO: $BASH_COMMAND"' ERR
