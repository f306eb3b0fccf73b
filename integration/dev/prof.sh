#!/bin/bash
# Developer profile (runs in the guest): perf record of the whole guest while fio runs each
# of JOBS against nvmet-rdma, then against our target (build/release/nvmf-target), then
# against SPDK's nvmf_tgt when a build of it is there (see guest/spdk.sh; SPDK=0: not). Reports
# (per command, per symbol, our workers' symbols with and without children) and the raw
# perf data go to build/prof/<target>-<job>-*.txt on the host.
# The lab image has no perf: make a copy with it, once, as root:
#   cp -a /var/tmp/nvmf-lab /var/tmp/nvmf-lab-perf
#   LAB_EXTRA_PKGS=linux-perf integration/lab/build-image /var/tmp/nvmf-lab-perf
# then: NVMF_LAB_DIR=/var/tmp/nvmf-lab-perf integration/lab/run-guest -t 900 \
#         -e JOBS="qd1r:randread:1:4k r64k:read:8:64k" . integration/dev/prof.sh
# JOBS: name:rw:iodepth:bs ... ; DEV=nullb (default) or ram; RT seconds per job (8).
# The guest's clock: run-guest with LAB_APPEND="clocksource=tsc tsc=reliable", as integration/bench
# boots it (Linux 6.1 under TCG otherwise reads hpet: a system call per clock read).
# TRANSPORT=rdma (default), tcp, or tls (NVMe/TCP with TLS 1.3: the current-host image with
# perf, tlshd on the host side, kTLS on both; SPDK stays out of tcp and tls).
# OURS="name:binary ...": our builds to profile, each in its phase (default ours:build/release/
# nvmf-target); NVMET=0 skips nvmet. ROUNDS: how many times the phases repeat (1).
# CALLERS="sym ...": also who calls each kernel symbol, per command (<target>-<job>-callers.txt;
# kernel symbols resolve only in the boot that recorded them, KASLR).
set -uo pipefail
IP=$LAB_IP; NQN=nqn.2026-11.io.nvmf-lab:bench; RT=${RT:-8}
DEV=${DEV:-nullb}
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource) (avail: $(cat /sys/devices/system/clocksource/clocksource0/available_clocksource))"
TR=${TRANSPORT:-rdma}
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma nvme-tcp nvmet-tcp
NVMET_TRTYPE=rdma; CONN=(-t rdma); OURS_FORM=(); TLSKEY=
case $TR in
 rdma) ;;
 tcp) NVMET_TRTYPE=tcp; CONN=(-t tcp); OURS_FORM=(--transport tcp) ;;
 tls) NVMET_TRTYPE=tcp; NVMET_TSAS=tls1.3; CONN=(-t tcp --tls)
   # tlshd links the .nvme keyring when it starts: after nvme-tcp made it.
   modprobe tls && systemctl restart tlshd || { echo "TRANSPORT=tls: no tls module or tlshd"; exit 1; }
   [ -s /etc/nvme/hostnqn ] || nvme gen-hostnqn >/etc/nvme/hostnqn
   TLSKEY=$(nvme gen-tls-key --hostnqn="$(cat /etc/nvme/hostnqn)" --subsysnqn=$NQN --insert 2>/dev/null | grep -o 'NVMeTLSkey-1:0[12]:[^ ]*:' | head -n 1)
   [ -n "$TLSKEY" ] || { echo "TRANSPORT=tls: nvme gen-tls-key --insert failed"; exit 1; } ;;
 *) echo "TRANSPORT must be rdma, tcp or tls"; exit 2 ;;
esac
case $DEV in
 # Filled once: brd allocates a page on its first write (see guest/bench.sh).
 ram) modprobe brd rd_nr=1 rd_size=262144; BDEV=/dev/ram0
      dd if=/dev/zero of=$BDEV bs=1M count=256 oflag=direct status=none ;;
 nullb) modprobe null_blk nr_devices=1 memory_backed=1 gb=1 bs=512 queue_mode=2; BDEV=/dev/nullb0 ;;
esac
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
PORT=4420
fail() { echo "FAIL: $*" >&2; exit 1; }
. integration/guest/nvmet.sh
. integration/guest/spdk.sh
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo "$d"; return; }; sleep 0.1; done; }
OUT=/lab/build/prof; JOBS=${JOBS:-"qd1r:randread:1:4k qd32r:randread:32:4k qd32w:randwrite:32:4k r64k:read:8:64k"}; mkdir -p $OUT
fiojob() { # tgt name rw qd [bs]
  local d; d=$(devof)
  perf record -a -g -F 499 -o /tmp/p.data -- fio --name=b --filename="$d" --direct=1 --ioengine=libaio --rw=$3 --bs=${5:-4k} \
      --iodepth=$4 --runtime=$RT --time_based --output-format=terse >/tmp/f.txt 2>/dev/null
  local ios; ios=$(awk -F';' '{print $6+$47}' /tmp/f.txt)
  echo "PROF $1 $2 ios=$ios iops=$(awk -F';' '{print $8+$49}' /tmp/f.txt)"
  perf report -i /tmp/p.data --no-children -n --sort comm,dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -30 > $OUT/$1-$2-comm.txt
  perf report -i /tmp/p.data --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -70 > $OUT/$1-$2-sym.txt
  local own=nvmf-worker-0,nvmf-worker-1; [ "${1#spdk}" != "$1" ] && own=reactor_$(( $(nproc) - 1 ))
  perf report -i /tmp/p.data --no-children --comm "$own" --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60 > $OUT/$1-$2-worker-sym.txt
  perf report -i /tmp/p.data --children --comm "$own" --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -80 > $OUT/$1-$2-worker-children.txt
  local s
  for s in ${CALLERS:-}; do
    echo "=== $s"
    perf report -i /tmp/p.data --no-children --symbols="$s" --sort comm --stdio -G 2>/dev/null | grep -v '^#' | grep -v '^$' | head -80
  done > $OUT/$1-$2-callers.txt
  cp /tmp/p.data $OUT/$1-$2.data
  cat $OUT/$1-$2-comm.txt | head -20
}
runjobs() { # target
  local j name rw qd bs
  for j in $JOBS; do IFS=: read -r name rw qd bs <<<"$j"; fiojob "$1" "$name" "$rw" "$qd" "$bs"; done
}
for round in $(seq "${ROUNDS:-1}"); do
  if [ "${NVMET:-1}" != 0 ]; then
    nvmet_export $NQN "$BDEV"; nvme connect "${CONN[@]}" -a "$IP" -s 4420 -n $NQN >/dev/null
    runjobs nvmet$round
    nvme disconnect -n $NQN >/dev/null; nvmet_unexport $NQN
  fi
  for o in ${OURS:-ours:build/release/nvmf-target}; do
    if [ "$TR" = tls ]; then
      { printf '[[listener]]\ntransport = "tcp"\naddress = "%s"\nport = 4420\nsecure = "required"\n' "$IP"
        printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n' $NQN
        printf '[[subsystem.namespace]]\npath = "%s"\n' "$BDEV"
        printf '[[host]]\nnqn = "%s"\ntls_key = "%s"\n' "$(cat /etc/nvme/hostnqn)" "$TLSKEY"; } >/tmp/prof-target.toml
      "${o#*:}" --config /tmp/prof-target.toml --log-level warn >/tmp/t.log 2>&1 &
    else
      "${o#*:}" --listen "$IP:4420" --nqn $NQN --namespace "$BDEV" "${OURS_FORM[@]}" --log-level warn >/tmp/t.log 2>&1 &
    fi
    TP=$!; sleep 1
    nvme connect "${CONN[@]}" -a "$IP" -s 4420 -n $NQN >/dev/null
    runjobs "${o%%:*}$round"
    nvme disconnect -n $NQN >/dev/null; kill $TP; wait $TP
  done
  if [ "$TR" = rdma ] && spdk_ready >/dev/null && spdk_start; then
    nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null
    runjobs spdk$round
    nvme disconnect -n $NQN >/dev/null; spdk_stop
  fi
done
echo "PROF DONE: build/prof/"
