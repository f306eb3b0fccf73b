# paths.sh: sourced by the guest scripts. The host's own view of a path while a target
# drains it: a drain shows on the host as the path's ANA state leaving optimized while
# its controller is still live (the host moves its I/O to the other paths), before the
# controller goes. A stop or removal without a drain passes every other check (multipath
# requeues the path's I/O onto the others, with no error), but its path stays as it was
# until its controller goes.
#   path_watch FILE CTRL...   sample each controller's state and its path's ANA state
#                             every 100 ms into FILE, in the background ($PATH_WATCH)
#   path_watch_stop
#   path_drained FILE CTRL    fail unless CTRL was live, then inaccessible while still live
#                             (seen in at least one sample), before its controller first
#                             left live (prints what the host saw, and for how long). The
#                             drain holds it a quiet second, of which the host's own
#                             reaction (event, log page) takes part: 0.5-1.4 s were seen.
# Needs: fail() from the sourcing script.
PATH_WATCH=
path_watch() { # FILE CTRL...
    local file=$1; shift
    (
        set +e
        while :; do
            t=$(date +%s%N)
            for c in "$@"; do
                printf '%s %s %s %s\n' "$t" "$c" "$(cat "/sys/class/nvme/$c/state" 2>/dev/null || echo gone)" \
                    "$(cat /sys/class/nvme/"$c"/nvme*c*n1/ana_state 2>/dev/null | head -n 1 || true)"
            done
            sleep 0.1
        done
    ) >"$file" 2>/dev/null &
    PATH_WATCH=$!
}
path_watch_stop() {
    [ -n "$PATH_WATCH" ] || return 0
    kill "$PATH_WATCH" 2>/dev/null || true
    wait "$PATH_WATCH" 2>/dev/null || true
    PATH_WATCH=
}
path_drained() { # FILE CTRL
    python3 - "$1" "$2" <<'PY' || fail "the host's path $2 was not drained before its controller went (what the host saw: above)"
import sys
rows = [l.split() for l in open(sys.argv[1])]
rows = [(int(r[0]), r[2], r[3] if len(r) > 3 else "?") for r in rows if len(r) >= 3 and r[1] == sys.argv[2]]
live = []
for t, st, ana in rows:
    if st != "live":
        if live:
            break
        continue
    live.append((t, ana))
seen = [a for _, a in live]
print(f"    the host's view of {sys.argv[2]} while live: " +
      " -> ".join(a for i, a in enumerate(seen) if i == 0 or seen[i - 1] != a))
assert live, "never live"
assert len(live) < len(rows), "its controller never left live"
# The last run of inaccessible samples before the controller left.
start = None
for t, a in live:
    if a != "inaccessible":
        start = None
    elif start is None:
        start = t
end = live[-1][0]
assert live[-1][1] == "inaccessible" and start is not None, "it was not inaccessible when its controller went"
held = (end - start) / 1e9
print(f"    inaccessible for {held:.1f} s while live, then its controller went")
PY
}
