#!/bin/bash
# Developer repro (runs in the guest): perf randread with windows against nvmet, N times.
set -uo pipefail
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:init; CFG=/sys/kernel/config/nvmet
INI=build/release/nvmf-initiator
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvmet nvmet-rdma; modprobe brd rd_nr=1 rd_size=262144
rdma link add rxe0 type rxe netdev eth0
if [ "${TGT:-kernel}" = own ]; then
  NO_COLOR=1 build/release/nvmf-target --listen $IP:4420 --nqn $NQN --namespace /dev/ram0 >/tmp/t.log 2>&1 &
  sleep 2
else
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
mkdir $CFG/subsystems/$NQN; echo 1 >$CFG/subsystems/$NQN/attr_allow_any_host
mkdir $CFG/subsystems/$NQN/namespaces/1
echo -n /dev/ram0 >$CFG/subsystems/$NQN/namespaces/1/device_path
echo 1 >$CFG/subsystems/$NQN/namespaces/1/enable
mkdir -p $CFG/ports/1; echo rdma >$CFG/ports/1/addr_trtype; echo ipv4 >$CFG/ports/1/addr_adrfam
echo $IP >$CFG/ports/1/addr_traddr; echo 4420 >$CFG/ports/1/addr_trsvcid
ln -s $CFG/subsystems/$NQN $CFG/ports/1/subsystems/$NQN
fi
sleep 1
for i in $(seq ${N:-8}); do
  echo "--- run $i (${RW:-randread})"
  RUST_LOG=${RUST_LOG:-info} timeout 60 $INI perf -a $IP -n $NQN --windows ${WIN:-mw} --rw ${RW:-randread} --bs 4k --qd ${QD:-32} --time ${T:-10} --size 256M --json ${EXTRA:-} 2>/tmp/p.txt >/tmp/j.txt
  rc=$?
  tail -1 /tmp/p.txt; cat /tmp/j.txt | head -c 120; echo
  if [ $rc != 0 ]; then echo "FAILED rc=$rc"; cat /tmp/p.txt | tail -20; dmesg | grep -v "speed is unknown" | tail -40; [ -f /tmp/t.log ] && tail -20 /tmp/t.log; exit 1; fi
done
dmesg | grep -iE 'nvme|rdma|rxe' | tail -10
echo FLAKE-DONE
