#!/usr/bin/env python3
"""Where the vCPUs idle, from a scheduler trace (integration/dev/rxe-split.sh, TRACE=1).

For each file (`perf script -F cpu,time,event,trace,comm,pid` of sched_switch, wake-ups,
timers and interrupts): idle per CPU; the time every CPU idled at once (a pipeline that
waits: a timer, a sleeping thread) and what ended it; the time one CPU idled while
another ran (the work serialized on one CPU) and what ran then; which task ended each
CPU's idle periods; CPU time per task (kworkers by name, their workqueue suffix dropped).

    python3 integration/dev/idle-split.py build/prof/sched-*.txt
"""
import collections
import re
import sys

LINE = re.compile(r"^\s*(.+?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)$")
NEXT = re.compile(r"next_comm=(.+?) next_pid=(\d+)")


def task(comm):
    """A task's name, a kworker's without the workqueue it last served."""
    return re.sub(r"[-+][a-z]+$", "", comm) if comm.startswith("kworker") else comm


def cause(name, trace):
    for key in ("function", "name", "action", "comm"):
        m = re.search(key + r"=(\S+)", trace)
        if m:
            return f"{name} {m.group(1)}"
    return name


def split(path):
    events = []
    with open(path) as f:
        for line in f:
            m = LINE.match(line)
            if m:
                events.append((float(m.group(4)), int(m.group(3)), m.group(5), m.group(6)))
    events.sort(key=lambda e: e[0])
    if not events:
        print(f"== {path}: no events")
        return
    ncpu = 1 + max(e[1] for e in events)
    span = events[-1][0] - events[0][0]
    idle = [False] * ncpu
    running = ["?"] * ncpu
    idle_since = [None] * ncpu
    idle_total = [0.0] * ncpu
    all_since = None
    all_idle = 0.0
    all_ends = collections.Counter()
    one_idle = collections.Counter()
    busy = collections.Counter()
    ended_by = collections.Counter()
    ended_n = collections.Counter()
    last = events[0][0]
    for t, cpu, name, trace in events:
        dt = t - last
        last = t
        for c in range(ncpu):
            if not idle[c]:
                busy[running[c]] += dt
                if any(idle[o] for o in range(ncpu) if o != c):
                    one_idle[running[c]] += dt
        if all_since is not None:
            all_idle += t - all_since
            all_ends[cause(name, trace)] += 1
            all_since = None
        if name != "sched:sched_switch":
            continue
        m = NEXT.search(trace)
        comm, pid = m.group(1), int(m.group(2))
        if pid == 0:
            idle[cpu], idle_since[cpu] = True, t
            if all(idle):
                all_since = t
        else:
            if idle[cpu] and idle_since[cpu] is not None:
                idle_total[cpu] += t - idle_since[cpu]
                ended_by[task(comm)] += t - idle_since[cpu]
                ended_n[task(comm)] += 1
            idle[cpu] = False
        running[cpu] = task(comm)
    ms = 1e3
    print(f"== {path}: {span * ms:.1f} ms")
    print("  idle per CPU: " + ", ".join(f"{x / span * 100:.1f} %" for x in idle_total))
    print(f"  every CPU idle at once: {all_idle * ms:.1f} ms; ended by:")
    for k, n in all_ends.most_common(6):
        print(f"    {n:6d}  {k}")
    print(f"  one CPU idle while another ran, what ran ({sum(one_idle.values()) * ms:.1f} ms):")
    for k, v in one_idle.most_common(8):
        print(f"    {v * ms:8.1f} ms  {k}")
    print("  idle periods ended by (the task run next):")
    for k, v in ended_by.most_common(8):
        print(f"    {ended_n[k]:6d}  {v * ms:8.1f} ms  mean {v / ended_n[k] * 1e6:6.1f} us  {k}")
    print("  CPU per task:")
    for k, v in busy.most_common(12):
        print(f"    {v * ms:8.1f} ms  {k}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        split(p)
