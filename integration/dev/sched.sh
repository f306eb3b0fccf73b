#!/bin/bash
# Developer trace (runs in the guest): who runs, who waits and how long the vCPUs sit idle
# while fio runs 4k at queue depth QD (32) against nvmet-rdma, then against our target
# (build/release/nvmf-target, quick form), then against SPDK's nvmf_tgt when a build of it
# is there (see guest/spdk.sh; SPDK=0 leaves it out), in one boot. `perf sched` records 3 s from the
# middle of each 9 s run; per target and pattern build/sched/<target>-<rw>-lat.txt (the
# longest waits for a CPU) and -summary.txt (run time and switches per task, idle per CPU).
# Needs the perf image (see integration/dev/prof.sh):
#   NVMF_LAB_DIR=/var/tmp/nvmf-lab-perf integration/lab/run-guest -t 600 . integration/dev/sched.sh
# RWS="randread randwrite" (default), QD=32, DEV=nullb (default: null_blk) or ram (brd).
set -uo pipefail
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:bench; QD=${QD:-32}
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma
if [ "${DEV:-nullb}" = ram ]; then modprobe brd rd_nr=1 rd_size=262144; BDEV=/dev/ram0
else modprobe null_blk nr_devices=1 memory_backed=1 gb=1 bs=512 queue_mode=2; BDEV=/dev/nullb0; fi
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
PORT=4420
fail() { echo "FAIL: $*" >&2; exit 1; }
. integration/guest/nvmet.sh
OUT=/lab/build/sched; mkdir -p $OUT
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo "$d"; return; }; sleep 0.1; done; }
job() { # target rw
  local d f; d=$(devof)
  fio --name=b --filename="$d" --direct=1 --ioengine=libaio --rw="$2" --bs=4k --iodepth="$QD" \
      --runtime=9 --time_based --output-format=terse >/tmp/f.txt 2>/dev/null &
  f=$!; sleep 3
  perf sched record -a -o /tmp/s.data -- sleep 3 >/dev/null 2>&1
  wait $f
  echo "SCHED $1 $2 qd=$QD iops=$(awk -F';' '{print $8+$49}' /tmp/f.txt)"
  perf sched latency -i /tmp/s.data --sort max 2>/dev/null | head -25 > "$OUT/$1-$2-lat.txt"
  perf sched timehist -i /tmp/s.data -s 2>/dev/null | sed -n '/Runtime summary/,$p' > "$OUT/$1-$2-summary.txt"
  grep -E 'fio\[|nvmf-|reactor|ksoftirqd|kworker/.:.H|iou-|CPU  ' "$OUT/$1-$2-summary.txt"
}
RWS=${RWS:-"randread randwrite"}
nvmet_export $NQN "$BDEV"; nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null
for rw in $RWS; do job nvmet "$rw"; done
nvme disconnect -n $NQN >/dev/null; nvmet_unexport $NQN
build/release/nvmf-target --listen "$IP:4420" --nqn $NQN --namespace "$BDEV" --log-level warn >/tmp/t.log 2>&1 &
TP=$!; sleep 1
nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null
for rw in $RWS; do job ours "$rw"; done
nvme disconnect -n $NQN >/dev/null; kill $TP; wait $TP
. integration/guest/spdk.sh
if spdk_ready && spdk_start; then
  nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null
  for rw in $RWS; do job spdk "$rw"; done
  nvme disconnect -n $NQN >/dev/null; spdk_stop
fi
echo "SCHED DONE: build/sched/"
