#!/bin/bash
# Developer smoke test (runs in the guest): rxe, brd, our target, discover, connect, dd verify, short fio.
set -uo pipefail
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:quick
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma; modprobe brd rd_nr=1 rd_size=262144
rdma link add rxe0 type rxe netdev eth0
./build/release/nvmf-target --listen $IP:4420 --nqn $NQN --namespace /dev/ram0 --log-level ${LOG:-debug} >/tmp/t.log 2>&1 &
TP=$!
sleep 1
timeout 30 nvme discover -t rdma -a $IP -s 4420; echo "discover rc=$?"
timeout 30 nvme connect -t rdma -a $IP -s 4420 -n $NQN; echo "connect rc=$?"
sleep 1
nvme list
DEV=$(ls /dev/nvme*n1 2>/dev/null | head -1); echo "dev=$DEV"
if [ -n "$DEV" ]; then
  head -c 8M /dev/urandom >/tmp/p
  timeout 60 dd if=/tmp/p of=$DEV bs=128k oflag=direct status=none; echo "dd w rc=$?"
  timeout 60 dd if=$DEV of=/tmp/r bs=128k count=64 iflag=direct status=none; echo "dd r rc=$?"
  cmp /tmp/p /tmp/r && echo "CMP OK"
  timeout 60 fio --name=v --filename=$DEV --direct=1 --ioengine=libaio --rw=randwrite --bs=4k --iodepth=16 --size=16M --verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 --output=/tmp/f.log; echo "fio rc=$?"; grep -E "IOPS|err" /tmp/f.log | head -5
  timeout 30 fio --name=r --filename=$DEV --direct=1 --ioengine=libaio --rw=randread --bs=4k --iodepth=32 --runtime=5 --time_based --output=/tmp/r.log; grep IOPS /tmp/r.log
fi
timeout 20 nvme disconnect -n $NQN
kill $TP; sleep 1
dmesg | grep -i nvme | tail -15
echo "--- target log"; tail -60 /tmp/t.log
