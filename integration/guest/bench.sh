#!/bin/bash
# bench.sh: the kernel host runs fio against nvmet-rdma and against our target in one boot,
# each target alone in its phase, ROUNDS rounds, INSIDE the lab guest. Prints one line per
# (round, target, pattern) and a table of medians with ratios ours/nvmet.
# Patterns: 4k QD1 and QD32 randread/randwrite, 64k QD8 read/write, 4k QD32 70/30 mix.
# "cpu_us" is the whole guest's CPU time per I/O (host and target side together; the same
# host work for both targets).
set -uo pipefail
: >/tmp/bench.txt
IP=${LAB_IP:?}; NQN=nqn.2026-11.io.nvmf-lab:bench; RT=${RT:-10}; ROUNDS=${ROUNDS:-2}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
PATTERNS=${PATTERNS:-"rr4k-qd1:randread:4k:1 rw4k-qd1:randwrite:4k:1 rr4k-qd32:randread:4k:32 rw4k-qd32:randwrite:4k:32 r64k-qd8:read:64k:8 w64k-qd8:write:64k:8 mix4k-qd32:randrw:4k:32"}
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma; modprobe brd rd_nr=1 rd_size=262144
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
C=/sys/kernel/config/nvmet; mountpoint -q $C || mount -t configfs none /sys/kernel/config
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo "$d"; return; }; sleep 0.1; done; }
runfio() { # round target
  local d; d=$(devof); local p name rw bs qd t0 t1
  for p in $PATTERNS; do
    IFS=: read -r name rw bs qd <<<"$p"
    t0=$(cpu_ticks)
    fio --name=b --filename="$d" --direct=1 --ioengine=libaio --rw="$rw" --rwmixread=70 --bs="$bs" \
        --iodepth="$qd" --runtime="$RT" --time_based --output-format=json --output=/tmp/b.json >/dev/null 2>&1
    t1=$(cpu_ticks)
    python3 - "$1" "$2" "$name" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
rnd, tgt, name, t0, t1, hz = sys.argv[1:]
j = json.load(open('/tmp/b.json'))['jobs'][0]
ios = iops = 0; p50 = p99 = 0.0
for k in ('read', 'write'):
    x = j[k]
    if x['total_ios'] == 0: continue
    ios += x['total_ios']; iops += x['iops']
    pc = x['clat_ns'].get('percentile', {})
    p50 = max(p50, pc.get('50.000000', 0) / 1000); p99 = max(p99, pc.get('99.000000', 0) / 1000)
cpu = (int(t1) - int(t0)) / int(hz) * 1e6 / max(ios, 1)
print(f"BENCH round={rnd} target={tgt} pattern={name} iops={iops:.0f} p50_us={p50:.0f} p99_us={p99:.0f} cpu_us={cpu:.1f}")
PY
  done | tee -a /tmp/bench.txt
}
kernel_up() {
  mkdir $C/subsystems/$NQN; echo 1 >$C/subsystems/$NQN/attr_allow_any_host
  mkdir $C/subsystems/$NQN/namespaces/1; echo -n /dev/ram0 >$C/subsystems/$NQN/namespaces/1/device_path; echo 1 >$C/subsystems/$NQN/namespaces/1/enable
  mkdir $C/ports/1; echo rdma >$C/ports/1/addr_trtype; echo ipv4 >$C/ports/1/addr_adrfam; echo "$IP" >$C/ports/1/addr_traddr; echo 4420 >$C/ports/1/addr_trsvcid
  ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
}
kernel_down() {
  rm $C/ports/1/subsystems/$NQN; rmdir $C/ports/1; echo 0 >$C/subsystems/$NQN/namespaces/1/enable
  rmdir $C/subsystems/$NQN/namespaces/1 $C/subsystems/$NQN
}
for r in $(seq "$ROUNDS"); do
  kernel_up; nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null && runfio "$r" nvmet; nvme disconnect -n $NQN >/dev/null; kernel_down
  "$TARGET_BIN" --listen "$IP:4420" --nqn $NQN --namespace /dev/ram0 --log-level warn >/tmp/t.log 2>&1 &
  TP=$!; sleep 1
  nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null && runfio "$r" ours; nvme disconnect -n $NQN >/dev/null
  kill $TP; wait $TP; grep -v INFO /tmp/t.log | head -5
done
python3 - <<'PY'
import statistics as st
rows = {}
for line in open('/tmp/bench.txt'):
    if not line.startswith('BENCH'): continue
    kv = dict(x.split('=') for x in line.split()[1:])
    rows.setdefault((kv['pattern'], kv['target']), []).append(kv)
pats = []
for (p, _) in rows:
    if p not in pats: pats.append(p)
med = lambda p, t, k: st.median(float(r[k]) for r in rows.get((p, t), [{k: 0}]))
print()
print("| pattern | nvmet IOPS | ours IOPS | ours/nvmet | nvmet p50 / p99 us | ours p50 / p99 us | p99 ours/nvmet | guest CPU us/IO nvmet / ours |")
print("|---|---|---|---|---|---|---|---|")
for p in pats:
    ki, oi = med(p, 'nvmet', 'iops'), med(p, 'ours', 'iops')
    kp, op = med(p, 'nvmet', 'p99_us'), med(p, 'ours', 'p99_us')
    print(f"| {p} | {ki:.0f} | {oi:.0f} | {oi / ki if ki else 0:.2f} | {med(p, 'nvmet', 'p50_us'):.0f} / {kp:.0f} | "
          f"{med(p, 'ours', 'p50_us'):.0f} / {op:.0f} | {op / kp if kp else 0:.2f} | "
          f"{med(p, 'nvmet', 'cpu_us'):.0f} / {med(p, 'ours', 'cpu_us'):.0f} |")
n = len(next(iter(rows.values()), []))
print(f"(medians of {n} rounds, {__import__('os').environ.get('RT', '10')} s each)")
PY
echo BENCH DONE
