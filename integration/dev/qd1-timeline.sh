#!/bin/bash
# Developer trace (runs in the guest): where a 4k QD1 I/O spends its time, for nvmet-rdma and
# for our target (build/release/nvmf-target, quick form, OURS_ARGS appended), in one boot.
# kprobes on rxe_cq_post (with the CQ), ib_uverbs_comp_handler, rxe_rcv, rxe_post_send, and
# the host's nvme_setup_cmd / nvme_complete_rq, 3 s of randwrite and randread each; raw
# traces go to build/qd1/<target>-<rw>.txt, then integration/dev/qd1-timeline.py prints per
# target the median of each segment: A setup -> host post, B -> first packet received,
# C -> the target's receive completion, D -> the target's response post, E -> completion at
# the host, T in all, and which tasks and CPUs did C and D.
#   integration/lab/run-guest -t 400 . integration/dev/qd1-timeline.sh
#   python3 integration/dev/qd1-timeline.py build/qd1/*.txt
set -u
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:bench
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma
modprobe null_blk nr_devices=1 memory_backed=1 gb=1 bs=512 queue_mode=2
BDEV=/dev/nullb0
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
T=/sys/kernel/tracing; mountpoint -q $T || mount -t tracefs none $T
PORT=4420
fail() { echo "FAIL: $*" >&2; exit 1; }
. integration/guest/nvmet.sh
mkdir -p /lab/build/qd1
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo "$d"; return; }; sleep 0.1; done; }
echo 'p:rxecq rxe_cq_post cq=%di' > $T/kprobe_events
echo 'p:uvcomp ib_uverbs_comp_handler cq=%di' >> $T/kprobe_events
echo 'p:rxerecv rxe_rcv' >> $T/kprobe_events
echo 'p:rxepost rxe_post_send qp=%di' >> $T/kprobe_events
echo 20000 > $T/buffer_size_kb
run() { # label
  local d; d=$(devof)
  fio --name=w --filename=$d --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=1 --runtime=2 --time_based >/dev/null 2>&1
  for rw in randwrite randread; do
    echo > $T/trace
    for e in kprobes/rxecq kprobes/uvcomp kprobes/rxerecv kprobes/rxepost nvme/nvme_setup_cmd nvme/nvme_complete_rq; do echo 1 > $T/events/$e/enable; done
    fio --name=x --filename=$d --direct=1 --ioengine=libaio --rw=$rw --bs=4k --iodepth=1 --runtime=3 --time_based --output-format=terse --terse-version=3 | awk -F';' '{print "'$1' '$rw' r_iops="$8" w_iops="$49}'
    echo 0 > $T/events/enable
    cp $T/trace /lab/build/qd1/$1-$rw.txt
  done
}
nvmet_export $NQN $BDEV; nvme connect -t rdma -a $IP -s 4420 -n $NQN >/dev/null; run nvmet; nvme disconnect -n $NQN >/dev/null; nvmet_unexport $NQN
NO_COLOR=1 build/release/nvmf-target --listen "$IP:4420" --nqn $NQN --namespace $BDEV --log-level warn ${OURS_ARGS:-} >/tmp/t.log 2>&1 &
TP=$!; sleep 1
nvme connect -t rdma -a $IP -s 4420 -n $NQN >/dev/null; run ours; nvme disconnect -n $NQN >/dev/null
kill $TP; wait $TP
ls -la /lab/build/qd1/
