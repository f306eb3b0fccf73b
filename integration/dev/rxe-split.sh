#!/bin/bash
# Developer split (runs in the guest): per target, for each of JOBS against nvmet-rdma then
# our target (OURS="name:binary ...", default ours:build/release/nvmf-target; OURS_ARGS
# appended), on brd: fio's IOPS, the guest's CPU split from /proc/stat (idle and iowait
# apart) and soft-RoCE's own counters (packets, retries, RNR: rxe0's hw_counters that
# moved). TRACE=1 (the perf image, see integration/dev/prof.sh) also records 1 s of
# scheduler switches, wake-ups, timers and interrupts from the 3rd second of each job into
# build/prof/sched-<target>-<job>.txt; integration/dev/idle-split.py reads them (idle per
# CPU, both CPUs idle at once, what runs while one idles, CPU per task).
#   LAB_APPEND="clocksource=tsc tsc=reliable" integration/lab/run-guest -t 800 \
#     -e JOBS="w:randwrite:32:4k" -e TRACE=1 . integration/dev/rxe-split.sh
# JOBS: name:rw:iodepth:bs ...; ROUNDS (1); RT seconds per job (8).
set -uo pipefail
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:bench; RT=${RT:-8}
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma; modprobe brd rd_nr=1 rd_size=262144; PORT=4420
BDEV=/dev/ram0; dd if=/dev/zero of=$BDEV bs=1M count=256 oflag=direct status=none
mkdir -p build/prof
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
fail() { echo "FAIL: $*" >&2; exit 1; }
. integration/guest/nvmet.sh
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo "$d"; return; }; sleep 0.1; done; }
C=/sys/class/infiniband/rxe0/ports/1/hw_counters
snap() { for f in $C/*; do echo "$(basename $f) $(cat $f)"; done; }
job() { # name rw qd bs
  local d; d=$(devof); snap >/tmp/c0; local s0; s0=$(head -1 /proc/stat)
  if [ -n "${TRACE:-}" ]; then
    ( sleep 3
      perf record -q -a -o /tmp/s.data -e sched:sched_switch -e sched:sched_wakeup \
        -e timer:hrtimer_expire_entry -e irq_vectors:local_timer_entry \
        -e irq_vectors:call_function_single_entry -e irq_vectors:reschedule_entry \
        -e irq:softirq_entry -e irq:irq_handler_entry -- sleep 1 >/dev/null 2>&1
      perf script -i /tmp/s.data -F cpu,time,event,trace,comm,pid >build/prof/sched-$1.txt 2>/dev/null ) &
    TRP=$!
  fi
  fio --name=b --filename="$d" --direct=1 --ioengine=libaio --rw=$2 --bs=$4 --iodepth=$3 --runtime=$RT --time_based --output-format=terse >/tmp/f.txt 2>/dev/null
  local s1; s1=$(head -1 /proc/stat); snap >/tmp/c1
  [ -n "${TRACE:-}" ] && wait $TRP
  echo "JOB $1 $2 qd=$3 iops=$(awk -F';' '{print $8+$49}' /tmp/f.txt)"
  python3 - "$s0" "$s1" <<'P'
import sys
a=[int(x) for x in sys.argv[1].split()[1:]]; b=[int(x) for x in sys.argv[2].split()[1:]]
d=[y-x for x,y in zip(a,b)]; t=sum(d)
names="user nice system idle iowait irq softirq steal".split()
print("  cpu%: "+" ".join(f"{n}={100*v/t:.1f}" for n,v in zip(names,d)))
P
  join /tmp/c0 /tmp/c1 | awk '$3-$2!=0{printf "  %s=%d", $1, $3-$2} END{print ""}'
}
for r in $(seq ${ROUNDS:-1}); do
  nvmet_export $NQN "$BDEV"; nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null
  for j in ${JOBS:-w:randwrite:32:4k}; do IFS=: read -r n rw qd bs <<<"$j"; job nvmet-$n $rw $qd $bs; done
  nvme disconnect -n $NQN >/dev/null; nvmet_unexport $NQN
  for o in ${OURS:-ours:build/release/nvmf-target}; do
    ${o#*:} --listen "$IP:4420" --nqn $NQN --namespace "$BDEV" ${OURS_ARGS:-} --log-level warn >/tmp/t.log 2>&1 &
    TP=$!; sleep 1
    nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null
    for j in ${JOBS:-w:randwrite:32:4k}; do IFS=: read -r n rw qd bs <<<"$j"; job ${o%%:*}-$n $rw $qd $bs; done
    nvme disconnect -n $NQN >/dev/null; kill $TP; wait $TP
  done
done
dmesg | grep -i "rxe\|nvme" | tail -5
