#!/bin/bash
# Side-by-side 4k QD32 randread/randwrite: kernel nvmet vs our target (several spin settings), one boot.
set -uo pipefail
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:bench; RT=${RT:-8}
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma; modprobe brd rd_nr=1 rd_size=262144
rdma link add rxe0 type rxe netdev eth0
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo $d; return; }; sleep 0.1; done; }
runfio() { # name
  local d; d=$(devof)
  for rw in randread randwrite; do
    fio --name=$rw --filename=$d --direct=1 --ioengine=libaio --rw=$rw --bs=4k --iodepth=32 --runtime=$RT --time_based --output-format=terse --terse-version=3 --output=/tmp/$1-$rw.t >/dev/null
    awk -F';' -v n="$1" -v rw=$rw '/^3;/ {printf "%-14s %-10s IOPS=%s\n", n, rw, ($8>0?$8:$49)}' /tmp/$1-$rw.t
  done
}
C=/sys/kernel/config/nvmet; mountpoint -q $C || mount -t configfs none /sys/kernel/config
mkdir $C/subsystems/$NQN; echo 1 >$C/subsystems/$NQN/attr_allow_any_host
mkdir $C/subsystems/$NQN/namespaces/1; echo -n /dev/ram0 >$C/subsystems/$NQN/namespaces/1/device_path; echo 1 >$C/subsystems/$NQN/namespaces/1/enable
mkdir $C/ports/1; echo rdma >$C/ports/1/addr_trtype; echo ipv4 >$C/ports/1/addr_adrfam; echo $IP >$C/ports/1/addr_traddr; echo 4420 >$C/ports/1/addr_trsvcid
ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
nvme connect -t rdma -a $IP -s 4420 -n $NQN >/dev/null && runfio kernel; nvme disconnect -n $NQN >/dev/null
rm $C/ports/1/subsystems/$NQN; rmdir $C/ports/1; echo 0 >$C/subsystems/$NQN/namespaces/1/enable; rmdir $C/subsystems/$NQN/namespaces/1 $C/subsystems/$NQN
for spin in ${SPINS:-0 20 200}; do
  ./build/release/nvmf-target --listen $IP:4420 --nqn $NQN --namespace /dev/ram0 --poll-spin-us $spin --log-level warn >/tmp/t$spin.log 2>&1 &
  TP=$!; sleep 1
  nvme connect -t rdma -a $IP -s 4420 -n $NQN >/dev/null && runfio own-spin$spin; nvme disconnect -n $NQN >/dev/null
  kill $TP; wait $TP; cat /tmp/t$spin.log | grep -v INFO | head -5
done
