# kmsg.sh: sourced by the guest scripts. The host's kernel log must show no I/O error,
# reset, timeout or error recovery where a test expects none: tools hide failures
# (mke2fs ignores a failed discard, a retried command looks like success), the kernel
# log does not.
#   kmsg_mark          start a window (also done when this file is sourced)
#   kmsg_window        the kernel log's lines since the mark
#   kmsg_check WHAT    fail (with the lines) if the window shows errors; start a new one
#   kmsg_errors        the error lines of the window
#   kmsg_errors_but CTRL...  the same without those controllers' own reconnect lines (a
#                      path whose target went away on purpose: error recovery, reconnect
#                      attempts refused, removal); a timeout or I/O error on them still counts
# The mark is a line written to the kernel log, and its time stamp is the window's start:
# the log's clock (sched_clock) and /proc/uptime's drift apart under TCG, by seconds,
# and a window started from uptime missed what the host printed just after the mark.
# Needs: fail() from the sourcing script.
# A failed command's line names its status ("I/O Error (sct 0x0 / sc 0x2)", or with
# CONFIG_NVME_VERBOSE_ERRORS the status's name: "Invalid Field in Command (sct 0x0 / sc
# 0x2)"); the block layer's names its kind ("I/O error, dev", "critical medium error, dev",
# "reservation conflict error, dev" on newer kernels).
KMSG_PAT='I/O Error|I/O error|\(sct 0x|error, dev |timeout|[Rr]eset|error recovery|Reconnecting|failed to|EXT4-fs error|XFS .*(error|[Cc]orrupt|[Ss]hutdown)|Buffer I/O|blk_update_request|critical'
KMSG_SEQ=0
kmsg_mark() {
    local tag="lab-kmsg-mark $$.$((KMSG_SEQ += 1))"
    echo "$tag" >/dev/kmsg
    KMSG_MARK=$(dmesg | awk -v tag="$tag" 'index($0, tag) { ts = $0; sub(/^\[ */, "", ts); sub(/\].*/, "", ts); t = ts } END { print t + 0 }')
}
kmsg_window() {
    dmesg | awk -v t="$KMSG_MARK" '{ ts = $0; sub(/^\[ */, "", ts); sub(/\].*/, "", ts); if (ts + 0 > t + 0) print }'
}
kmsg_errors() { kmsg_window | kmsg_but_readahead | grep -E "$KMSG_PAT" || true; }
# A readahead through the multipath head is fail-fast (REQ_RAHEAD brings REQ_FAILFAST_*):
# a path error on it (ANA Inaccessible: sct 0x3) completes it with an error instead of a
# failover, and the page cache reads the block again when it is needed. Such a read's two
# lines (the NVMe status, the block layer's "I/O error ... (READ) flags" with RAHEAD,
# 0x80000) are dropped; any other error stays.
kmsg_but_readahead() {
    python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
ra = set()
for l in lines:
    m = re.search(r"I/O error, dev (nvme\w+), sector (\d+) op 0x0:\(READ\) flags 0x([0-9a-f]+)", l)
    if m and int(m.group(3), 16) & 0x80000:
        ra.add((m.group(1), int(m.group(2))))
for l in lines:
    m = re.search(r"(nvme\w+): (?:Read|I/O Cmd)\(0x2\) @ LBA (\d+), \d+ blocks, .*\(sct 0x3 / sc 0x[0-9a-f]+\)", l)
    if m and any(d == m.group(1) for d, _ in ra):
        continue
    m = re.search(r"I/O error, dev (nvme\w+), sector (\d+) op 0x0:\(READ\) flags", l)
    if m and (m.group(1), int(m.group(2))) in ra:
        continue
    print(l)
'
}
kmsg_errors_but() { # CTRL...
    local c re=
    for c in "$@"; do re+="${re:+|}$c"; done
    kmsg_errors | grep -vE "($re): (starting error recovery|Reconnecting in|failed to connect socket|failed to connect queue|Failed reconnect attempt|Removing ctrl|Deleting controller|Removing controller|[Rr]econnect|rdma connection establishment failed|Connect rejected)" || true
}
kmsg_check() { # WHAT
    local e
    e=$(kmsg_errors)
    if [ -n "$e" ]; then
        echo "--- the host's kernel log during $1:"
        echo "$e" | head -n 20 | sed 's/^/    kernel: /'
        fail "the host's kernel log shows I/O errors, resets or timeouts during $1"
    fi
    kmsg_mark
}
# Before a planned disconnect: udev's probe of a new namespace (blkid reads its last
# blocks) fails as "Buffer I/O error ... async page read" if the device goes away under
# it. That is the host's own teardown race, with any target: let udev finish first.
settle() { udevadm settle -t 10 >/dev/null 2>&1 || true; }
kmsg_mark
