#!/bin/bash
# bench.sh: the kernel host runs fio against nvmet and against our target in one boot,
# each target alone in its phase, ROUNDS rounds, INSIDE the lab guest. Prints one line per
# (round, target, pattern) and a table of medians with ratios ours/nvmet.
# Patterns: 4k QD1 and QD32 randread/randwrite, 64k QD8 read/write, 4k QD32 70/30 mix.
# "cpu_us" is the whole guest's CPU time per I/O (host and target side together; the same
# host work for every target); "target_cpu_us" the target process's (all its threads; none
# for nvmet, whose work runs in kernel threads and softirqs it shares with the host side);
# "fio_cpu_us" fio's (all its threads) and "ceph_cpu_us" the Ceph daemons'; a last table
# splits each target's guest CPU per I/O into these and the rest (the kernel). With
# DEV=rbd each run first waits (up to 30 s) for the OSD to go quiet.
# OURS_SPINS="0 200" runs our target once per --poll-spin-us value (targets ours-spinN),
# for tuning the busy-poll window; OURS_CEPH_ARGS="--a=b ..." once more per value, with
# CEPH_ARGS set (librados options, for DEV=rbd; several options in one value separated by
# commas: "--a=1,--b=2"). OURS_BINS="build/a build/b" runs each of these target binaries
# instead of TARGET_BIN (targets ours-<file name>): two builds compared in one boot (with
# OURS_SPINS as well: each binary once per value). OURS_CONFIGS="workers=1 srq=off,workers=1"
# runs our target from a configuration file once per value, with those [target] keys
# (TOML values, comma-separated; targets ours-<keys>; not with DEV=rbd). INTERLEAVE=1 (default) runs each pattern
# against every target in turn (a target is set up per pattern); INTERLEAVE=0 gives each
# target one phase per round for all patterns. Either way, even rounds reverse the order
# of the targets.
# SPDK's nvmf_tgt joins as a third target (target "spdk": one reactor on the last vCPU, RDMA
# transport, an AIO bdev on the same device, configured by its rpc.py; guest/spdk.sh) when
# a build of it is in $SPDK_DIR (default build/spdk: bin/nvmf_tgt, lib/, scripts/rpc.py,
# python/; SPDK is not part of this project and not built by it) and its libraries load in
# the guest; otherwise the run says why and goes on without it. SPDK=0 leaves it out. Its
# reactor polls without pause: "cpu_us" and "target_cpu_us" count it whole.
# BENCH_TRANSPORT=tcp: every target over NVMe/TCP (nvmet-tcp, our TCP listener, SPDK's TCP
# transport; the kernel's nvme-tcp host) instead of RDMA.
# BENCH_TRANSPORT=all (in the current-host image: integration/bench picks it): every
# transport in one boot, one after the other: RDMA, NVMe/TCP, and NVMe/TCP with TLS 1.3
# (nvmet and ours each, SPDK too over RDMA and TCP where built); each transport's tables,
# then one table of every transport: ours against its anchor (nvmet on the same
# transport, SPDK where it ran), IOPS ratio, p99, CPU per I/O. The default patterns then
# add 128k QD32 reads and writes (where TLS trailed).
# BENCH_TLS=1 (with BENCH_TRANSPORT=tcp, in the current-host image: integration/bench picks
# it): nvmet and ours each twice, in plain TCP and with TLS 1.3 required (targets nvmet-tls,
# ours-tls; a PSK from nvme gen-tls-key, the host connects with --tls, kTLS on both sides);
# a last table shows TLS against plain for each. SPDK stays out (its TLS is userspace).
# With DEV=rbd, fio's own rbd engine runs the patterns on the image as one more "target"
# (fio-rbd: librbd in fio, no fabric, librbd's cache off as in a gateway): the ceiling a
# gateway can reach. FIO_RBD=0: not.
set -uo pipefail
: >/tmp/bench.txt
IP=${LAB_IP:?}; NQN=nqn.2026-11.io.nvmf-lab:bench; RT=${RT:-10}; ROUNDS=${ROUNDS:-2}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
PATTERNS_SET=${PATTERNS:-}
PATTERNS=${PATTERNS:-"rr4k-qd1:randread:4k:1 rw4k-qd1:randwrite:4k:1 rr4k-qd32:randread:4k:32 rw4k-qd32:randwrite:4k:32 r64k-qd8:read:64k:8 w64k-qd8:write:64k:8 mix4k-qd32:randrw:4k:32"}
# DEV=ram (default): brd, 256 MiB. DEV=nullb: null_blk, memory-backed (keeps data), 1 GiB.
# brd in 6.1 cannot take I/O without blocking (no NOWAIT), so io_uring runs each of its
# I/Os on an io-wq thread; null_blk can. DEV=rbd: an RBD image (256 MiB, written once in
# full) on a one-node Ceph cluster in the guest (guest/ceph.sh): nvmet exports it mapped
# with krbd, ours through librbd (4k QD32 and 64k QD8 unless PATTERNS says otherwise).
DEV=${DEV:-ram}
OURS_NS=
TR=${BENCH_TRANSPORT:-rdma}
case $TR in rdma|tcp|all) ;; *) echo "BENCH_TRANSPORT must be rdma, tcp or all"; exit 2 ;; esac
TLS=${BENCH_TLS:-0}
if [ "$TR" = all ]; then
  TRANSPORTS="rdma tcp"; TLS=1
  [ -n "$PATTERNS_SET" ] || PATTERNS="$PATTERNS r128k-qd32:read:128k:32 w128k-qd32:write:128k:32"
else
  TRANSPORTS=$TR
fi
echo "transport: $TR$([ "$TLS" = 1 ] && echo ", TCP plain and with TLS 1.3")"
if [ "$TLS" = 1 ]; then
  [ "$TR" != rdma ] || { echo "BENCH_TLS=1 is for BENCH_TRANSPORT=tcp or all"; exit 2; }
  # tlshd links the .nvme keyring when it starts: after nvme-tcp made it.
  modprobe -a tls nvme-tcp && systemctl restart tlshd || { echo "BENCH_TLS: no tls module or tlshd (the current-host image has them)"; exit 1; }
  [ -s /etc/nvme/hostnqn ] || nvme gen-hostnqn >/etc/nvme/hostnqn
  HOSTNQN=$(cat /etc/nvme/hostnqn)
  TLSKEY=$(nvme gen-tls-key --hostnqn="$HOSTNQN" --subsysnqn=$NQN --insert 2>/dev/null | grep -o 'NVMeTLSkey-1:0[12]:[^ ]*:' | head -n 1)
  [ -n "$TLSKEY" ] || { echo "BENCH_TLS: nvme gen-tls-key --insert failed"; exit 1; }
fi
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma nvme-tcp nvmet-tcp
case $DEV in
  # brd allocates (and zeroes) a page the first time it is written: filled once here, so
  # that the first target to write in a boot does not pay for the others.
  ram) modprobe brd rd_nr=1 rd_size=262144; BDEV=/dev/ram0
       dd if=/dev/zero of=$BDEV bs=1M count=256 oflag=direct status=none ;;
  nullb) modprobe null_blk nr_devices=1 memory_backed=1 gb=1 bs=512 queue_mode=2 || exit 1; BDEV=/dev/nullb0 ;;
  rbd)
    fail() { echo "FAIL: $*"; exit 1; }
    . integration/guest/ceph.sh
    ceph_up >/dev/null
    rbd create rbd/bench --size 256M --image-feature layering
    modprobe rbd; BDEV=$(rbd map rbd/bench)
    fio --name=fill --filename="$BDEV" --direct=1 --ioengine=libaio --rw=write --bs=1M --iodepth=4 \
        --size=256M --output-format=terse >/dev/null
    OURS_NS=rbd:rbd/bench
    PATTERNS=${PATTERNS_SET:-"rr4k-qd32:randread:4k:32 rw4k-qd32:randwrite:4k:32 r64k-qd8:read:64k:8 w64k-qd8:write:64k:8"}
    echo "rbd/bench: 256 MiB written in full; nvmet exports $BDEV (krbd), ours rbd:rbd/bench (librbd)" ;;
  *) echo "DEV must be ram, nullb or rbd"; exit 2 ;;
esac
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
echo "backing device: $BDEV ($(cat /sys/block/$(basename $BDEV)/queue/nowait 2>/dev/null | sed 's/^/nowait=/'))"
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
C=/sys/kernel/config/nvmet; mountpoint -q $C || mount -t configfs none /sys/kernel/config
. integration/guest/spdk.sh
spdk_phase() { # round patterns
  spdk_start || return
  TPID=$SPDK_PID
  nvme connect -t "$TR" -a "$IP" -s 4420 -n $NQN >/dev/null && PATTERNS=$2 runfio "$1" spdk
  nvme disconnect -n $NQN >/dev/null
  spdk_stop; TPID=
}
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
# The CPU ticks of the target's process (all its threads; $TPID, empty for nvmet, whose
# work runs in kernel threads and softirqs shared with the host side: no column for it).
# A process's CPU ticks (utime + stime, all its threads), 0 once it is gone.
pid_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
proc_ticks() { if [ -n "${TPID:-}" ]; then pid_ticks "$TPID"; else echo 0; fi; }
# The CPU ticks of a shell's finished children (fio, all its threads, once it ended).
child_ticks() { awk '{print $16 + $17}' "/proc/$1/stat"; }
# Waits (up to 30 s) until the OSD uses less than 10 % of a CPU: an OSD finishes the work
# a phase of writes left it (deferred writes, compaction) in the next phase otherwise,
# which then pays for it (seen: half the IOPS after a fast writer). The monitor and the
# manager keep busy on their own and are not waited for.
ceph_settle() {
  local i a b osd; osd=$(pgrep -x ceph-osd | head -1); [ -n "$osd" ] || return 0
  for i in $(seq 30); do a=$(pid_ticks "$osd"); sleep 1; b=$(pid_ticks "$osd")
    [ $((b - a)) -lt $(($(getconf CLK_TCK) / 10)) ] && return; done
  echo "the OSD is still busy after 30 s (pattern $name)" >&2
}
# The CPU ticks of the Ceph daemons (monitor, manager, OSD; DEV=rbd), 0 without them.
ceph_ticks() { local t=0 p; for p in $(pgrep '^ceph-'); do t=$((t + $(pid_ticks "$p"))); done; echo $t; }
# Our target's worker wakeups and busy seconds (all workers), and the seconds and count of
# its commands from arrival to response (request_duration_seconds), from its /metrics; 0 for nvmet.
engine_stats() {
  curl -s --max-time 2 http://127.0.0.1:9469/metrics 2>/dev/null |
    awk '/^nvmf_target_worker_wakeups_total/ {w += $2} /^nvmf_target_worker_busy_seconds_total/ {b += $2}
         /^nvmf_target_request_duration_seconds_sum/ {s += $2} /^nvmf_target_request_duration_seconds_count/ {c += $2}
         END {printf "%d %.6f %.6f %d", w, b, s, c}'
}
devof() { for _ in $(seq 50); do d=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -n "$d" ] && { echo "$d"; return; }; sleep 0.1; done; }
runfio() { # round target
  local p name rw bs qd t0 t1 io
  # fio's own rbd engine on the image (no fabric, no target): what a gateway could reach.
  # librbd's cache off, as a gateway runs it (with fio's defaults it absorbs writes: 2.4x
  # the IOPS of the same writes uncached, in one boot).
  local envs=()
  if [ "$2" = fio-rbd ]; then io=(--ioengine=rbd --clientname=admin --pool=rbd --rbdname=bench); envs=(CEPH_ARGS=--rbd_cache=false)
  else io=(--filename="$(devof)" --direct=1 --ioengine=libaio); fi
  for p in $PATTERNS; do
    IFS=: read -r name rw bs qd <<<"$p"
    [ "$DEV" = rbd ] && ceph_settle
    t0=$(cpu_ticks); p0=$(proc_ticks); e0=$(ceph_ticks); read -r w0 b0 s0 c0 < <(engine_stats)
    rm -f /tmp/b.json
    me=$BASHPID; f0=$(child_ticks $me)
    env "${envs[@]}" fio --name=b "${io[@]}" --rw="$rw" --rwmixread=70 --bs="$bs" \
        --iodepth="$qd" --runtime="$RT" --time_based --output-format=json --output=/tmp/b.json >/dev/null 2>&1 ||
        { echo "fio failed: target $2 pattern $name (round $1); no row" >&2; continue; }
    f1=$(child_ticks $me); t1=$(cpu_ticks); p1=$(proc_ticks); e1=$(ceph_ticks); read -r w1 b1 s1 c1 < <(engine_stats)
 BTR=$TR python3 - "$1" "$2" "$name" "$t0" "$t1" "$(getconf CLK_TCK)" "${w0:-0}" "${w1:-0}" "${b0:-0}" "${b1:-0}" \
        "${s0:-0}" "${s1:-0}" "${c0:-0}" "${c1:-0}" "$p0" "$p1" "$e0" "$e1" "$f0" "$f1" <<'PY'
import json, sys
rnd, tgt, name, t0, t1, hz, w0, w1, b0, b1, s0, s1, c0, c1, p0, p1, e0, e1, f0, f1 = sys.argv[1:]
j = json.load(open('/tmp/b.json'))['jobs'][0]
ios = iops = 0; p50 = p99 = 0.0
for k in ('read', 'write'):
    x = j[k]
    if x['total_ios'] == 0: continue
    ios += x['total_ios']; iops += x['iops']
    pc = x['clat_ns'].get('percentile', {})
    p50 = max(p50, pc.get('50.000000', 0) / 1000); p99 = max(p99, pc.get('99.000000', 0) / 1000)
cpu = (int(t1) - int(t0)) / int(hz) * 1e6 / max(ios, 1)
# fio's own CPU, all its threads (with fio-rbd, librbd's too).
eng = f" fio_cpu_us={(int(f1) - int(f0)) / int(hz) * 1e6 / max(ios, 1):.1f}"
if int(e1) > int(e0):
    eng += f" ceph_cpu_us={(int(e1) - int(e0)) / int(hz) * 1e6 / max(ios, 1):.1f}"
if int(p1) > 0:
    eng += f" target_cpu_us={(int(p1) - int(p0)) / int(hz) * 1e6 / max(ios, 1):.1f}"
if float(w1) > 0:
    eng += f" wakeups_per_io={(float(w1) - float(w0)) / max(ios, 1):.2f} worker_busy_us_per_io={(float(b1) - float(b0)) * 1e6 / max(ios, 1):.1f}"
    # Mean time inside the target, capsule arrival to response posted: the rest of the
    # host's latency is the wire (soft-RoCE) and the host.
    eng += f" target_lat_us={(float(s1) - float(s0)) * 1e6 / max(int(c1) - int(c0), 1):.0f} host_lat_us={j['read']['clat_ns']['mean'] / 1000 if j['read']['total_ios'] else j['write']['clat_ns']['mean'] / 1000:.0f}"
print(f"BENCH round={rnd} transport={__import__('os').environ['BTR']} target={tgt} pattern={name} iops={iops:.0f} p50_us={p50:.0f} p99_us={p99:.0f} cpu_us={cpu:.1f}{eng}")
PY
  done | tee -a /tmp/bench.txt
}
kernel_up() { # [TSAS]
  mkdir $C/subsystems/$NQN; echo 1 >$C/subsystems/$NQN/attr_allow_any_host
  mkdir $C/subsystems/$NQN/namespaces/1; echo -n $BDEV >$C/subsystems/$NQN/namespaces/1/device_path; echo 1 >$C/subsystems/$NQN/namespaces/1/enable
  mkdir $C/ports/1; echo "$TR" >$C/ports/1/addr_trtype; echo ipv4 >$C/ports/1/addr_adrfam; echo "$IP" >$C/ports/1/addr_traddr; echo 4420 >$C/ports/1/addr_trsvcid
  [ -z "${1:-}" ] || echo "$1" >$C/ports/1/addr_tsas
  ln -s $C/subsystems/$NQN $C/ports/1/subsystems/$NQN
}
kernel_down() {
  rm $C/ports/1/subsystems/$NQN; rmdir $C/ports/1; echo 0 >$C/subsystems/$NQN/namespaces/1/enable
  rmdir $C/subsystems/$NQN/namespaces/1 $C/subsystems/$NQN
}
# One phase: one target (nvmet, or a variant of ours) serving, alone, for the patterns in $3.
phase() { # round variant patterns
  local v=$2 args=() envs=() label=ours bin=$TARGET_BIN tls=()
  local form=(--listen "$IP:4420" --nqn $NQN --namespace "${OURS_NS:-$BDEV}")
  # (Builds older than the TCP transport have no --transport: RDMA needs none.)
  [ "$TR" = rdma ] || form+=(--transport "$TR")
  if [ "$v" = spdk ]; then spdk_phase "$1" "$3"; return; fi
  if [ "$v" = fio-rbd ]; then PATTERNS=$3 runfio "$1" fio-rbd; return; fi
  if [ "$v" = nvmet ] || [ "$v" = nvmet-tls ]; then
    [ "$v" = nvmet ] || tls=(--tls)
    kernel_up "${tls:+tls1.3}"; nvme connect -t "$TR" -a "$IP" -s 4420 -n $NQN "${tls[@]}" >/dev/null && PATTERNS=$3 runfio "$1" "$v"
    nvme disconnect -n $NQN >/dev/null; kernel_down; return
  fi
  case $v in
    bin:*@*) bin=${v#bin:}; bin=${bin%@*}; label=ours-$(basename "$bin")-spin${v##*@}
             [ "${v##*@}" = default ] || args=(--poll-spin-us "${v##*@}") ;;
    bin:*) bin=${v#bin:}; label=ours-$(basename "$bin") ;;
    spin:default) ;;
    spin:*) args=(--poll-spin-us "${v#spin:}"); label=ours-spin${v#spin:} ;;
    cfg:*) [ "$DEV" != rbd ] || { echo "OURS_CONFIGS: not with DEV=rbd"; return; }
           label=ours-$(tr -dc 'a-z0-9_=,' <<<"${v#cfg:}" | tr '=,' '-+' | cut -c1-40)
           { echo "[target]"; tr ',' '\n' <<<"${v#cfg:}"
             printf '[[listener]]\ntransport = "%s"\naddress = "%s"\nport = 4420\n' "$TR" "$IP"
             printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n' $NQN
             printf '[[subsystem.namespace]]\npath = "%s"\n' "${OURS_NS:-$BDEV}"; } >/tmp/bench-target.toml
           form=(--config /tmp/bench-target.toml) ;;
    tls) label=ours-tls; tls=(--tls)
         { printf '[[listener]]\ntransport = "tcp"\naddress = "%s"\nport = 4420\nsecure = "required"\n' "$IP"
           printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n' $NQN
           printf '[[subsystem.namespace]]\npath = "%s"\n' "${OURS_NS:-$BDEV}"
           printf '[[host]]\nnqn = "%s"\ntls_key = "%s"\n' "$HOSTNQN" "$TLSKEY"; } >/tmp/bench-target.toml
         form=(--config /tmp/bench-target.toml) ;;
    ceph:*) envs=("CEPH_ARGS=${v//,/ }"); envs[0]=${envs[0]/ceph:/}
            label=ours-$(tr -dc 'a-z0-9_=,' <<<"${v#ceph:}" | tr '=,' '-+' | cut -c1-40) ;;
  esac
  env "${envs[@]}" "$bin" "${form[@]}" --log-level warn "${args[@]}" >/tmp/t.log 2>&1 &
  TP=$!; TPID=$TP
  # It listens once its namespaces are open (an RBD image takes seconds in a busy guest).
  local i; for i in $(seq 30); do
    sleep 1; nvme connect -t "$TR" -a "$IP" -s 4420 -n $NQN "${tls[@]}" >/dev/null 2>&1 && break
    kill -0 $TP 2>/dev/null || break
  done
  [ -n "$(devof)" ] && PATTERNS=$3 runfio "$1" "$label"; nvme disconnect -n $NQN >/dev/null
  local wq; wq=$(grep -l '^iou-' /proc/$TP/task/*/comm 2>/dev/null | wc -l)
  [ "$wq" = 0 ] || echo "io_uring io-wq threads of the target after the run: $wq"
  kill $TP; wait $TP; TPID=; grep -v INFO /tmp/t.log | head -5
}
# Every target of transport $TR, ROUNDS rounds.
bench_transport() {
  variants=(nvmet)
  [ -n "${OURS_BINS:-}" ] || for spin in ${OURS_SPINS:-default}; do variants+=("spin:$spin"); done
  for b in ${OURS_BINS:-}; do
    if [ -n "${OURS_SPINS:-}" ]; then for spin in $OURS_SPINS; do variants+=("bin:$b@$spin"); done
    else variants+=("bin:$b"); fi
  done
  for ca in ${OURS_CEPH_ARGS:-}; do variants+=("ceph:$ca"); done
  for c in ${OURS_CONFIGS:-}; do variants+=("cfg:$c"); done
  [ "$TLS" = 1 ] && [ "$TR" = tcp ] && variants+=(nvmet-tls tls)
  [ "$DEV" = rbd ] && [ "${FIO_RBD:-1}" != 0 ] && variants+=(fio-rbd)
  if [ "$DEV" = rbd ]; then echo "SPDK: not with DEV=rbd (no rbd bdev in the build this bench expects)"
  elif [ "$TLS" = 1 ] && [ "$TRANSPORTS" = tcp ]; then echo "SPDK: not with BENCH_TLS=1"
  elif spdk_ready; then variants+=(spdk); fi
  for r in $(seq "$ROUNDS"); do
    # Even rounds run the targets in reverse order, so neither always goes first.
    order=("${variants[@]}"); [ $((r % 2)) = 0 ] && for ((i = ${#variants[@]} - 1, j = 0; i >= 0; i--, j++)); do order[j]=${variants[i]}; done
    if [ -n "${INTERLEAVE:-1}" ] && [ "${INTERLEAVE:-1}" != 0 ]; then
      # Each pattern against every target in turn: the two runs of a pair are seconds
      # apart, not a whole phase (TCG's speed drifts by 10-20 % within a boot).
      for p in $PATTERNS; do for v in "${order[@]}"; do phase "$r" "$v" "$p"; done; done
    else
      for v in "${order[@]}"; do phase "$r" "$v" "$PATTERNS"; done
    fi
  done
}
for TR in $TRANSPORTS; do
  [ "$TRANSPORTS" = "$TR" ] || echo "=== transport $TR$([ "$TR" = tcp ] && [ "$TLS" = 1 ] && echo ", plain and TLS 1.3")"
  bench_transport
done
python3 - <<'PY'
import statistics as st
by_tr = {}
for line in open('/tmp/bench.txt'):
    if not line.startswith('BENCH'): continue
    kv = dict(x.split('=') for x in line.split()[1:])
    by_tr.setdefault(kv.get('transport', 'rdma'), {}).setdefault((kv['pattern'], kv['target']), []).append(kv)
def med_of(rows, p, t, k):
    return st.median(float(r.get(k, 0)) for r in rows.get((p, t), [{k: 0}]))
def paired_of(rows, p, o, a):
    """o/a IOPS of each round (the two runs of a round are a pair)."""
    k = {r['round']: float(r['iops']) for r in rows.get((p, a), [])}
    return [float(r['iops']) / k[r['round']] for r in rows.get((p, o), []) if k.get(r['round'])]
def tables(rows):
    pats = []
    for (p, _) in rows:
        if p not in pats: pats.append(p)
    med = lambda p, t, k: st.median(float(r.get(k, 0)) for r in rows.get((p, t), [{k: 0}]))
    def paired(p, o):
        """ours/nvmet IOPS of each round (the two runs of a round are a pair)."""
        k = {r['round']: float(r['iops']) for r in rows.get((p, 'nvmet'), [])}
        return [float(r['iops']) / k[r['round']] for r in rows.get((p, o), []) if k.get(r['round'])]
    variants = []
    for (_, t) in rows:
        if t != 'nvmet' and t not in variants: variants.append(t)
    for o in variants:
        print()
        print(f"| pattern | nvmet IOPS | {o} IOPS | {o}/nvmet | paired ratios (min-max) | nvmet p50 / p99 us | {o} p50 / p99 us | p99 {o}/nvmet | guest CPU us/IO nvmet / {o} | {o} process CPU us/IO |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for p in pats:
            ki, oi = med(p, 'nvmet', 'iops'), med(p, o, 'iops')
            kp, op = med(p, 'nvmet', 'p99_us'), med(p, o, 'p99_us')
            pr = paired(p, o)
            prs = f"{st.median(pr):.2f} ({min(pr):.2f}-{max(pr):.2f})" if pr else "-"
            print(f"| {p} | {ki:.0f} | {oi:.0f} | {oi / ki if ki else 0:.2f} | {prs} | {med(p, 'nvmet', 'p50_us'):.0f} / {kp:.0f} | "
                  f"{med(p, o, 'p50_us'):.0f} / {op:.0f} | {op / kp if kp else 0:.2f} | "
                  f"{med(p, 'nvmet', 'cpu_us'):.0f} / {med(p, o, 'cpu_us'):.0f} | {med(p, o, 'target_cpu_us'):.0f} |")
    if any(t == 'spdk' for (_, t) in rows):
        for o in variants:
            if o == 'spdk': continue
            print()
            print(f"| pattern | spdk IOPS | {o} IOPS | {o}/spdk paired (min-max) | p99 {o}/spdk | guest CPU us/IO spdk / {o} | process CPU us/IO spdk / {o} |")
            print("|---|---|---|---|---|---|---|")
            for p in pats:
                k = {r['round']: float(r['iops']) for r in rows.get((p, 'spdk'), [])}
                pr = [float(r['iops']) / k[r['round']] for r in rows.get((p, o), []) if k.get(r['round'])]
                prs = f"{st.median(pr):.2f} ({min(pr):.2f}-{max(pr):.2f})" if pr else "-"
                sp = med(p, 'spdk', 'p99_us')
                print(f"| {p} | {med(p, 'spdk', 'iops'):.0f} | {med(p, o, 'iops'):.0f} | {prs} | "
                      f"{med(p, o, 'p99_us') / sp if sp else 0:.2f} | {med(p, 'spdk', 'cpu_us'):.0f} / {med(p, o, 'cpu_us'):.0f} | "
                      f"{med(p, 'spdk', 'target_cpu_us'):.0f} / {med(p, o, 'target_cpu_us'):.0f} |")
    # Where each target's guest CPU per I/O goes: fio (the host's application; with fio-rbd,
    # librbd as well), the target's process, the Ceph daemons, and the rest (kernel: the
    # host's NVMe and RDMA stack, soft-RoCE, nvmet and krbd, softirqs).
    print()
    print("| pattern | target | guest CPU us/IO | fio | target process | Ceph daemons | rest (kernel) |")
    print("|---|---|---|---|---|---|---|")
    for p in pats:
        for t in ['nvmet'] + variants:
            if (p, t) not in rows: continue
            g, f, tp, c = (med(p, t, k) for k in ('cpu_us', 'fio_cpu_us', 'target_cpu_us', 'ceph_cpu_us'))
            print(f"| {p} | {t} | {g:.0f} | {f:.0f} | {tp:.0f} | {c:.0f} | {g - f - tp - c:.0f} |")
    # TLS against plain TCP, each target against itself (BENCH_TLS=1).
    if any(t == 'nvmet-tls' for (_, t) in rows):
        print()
        print("| pattern | nvmet IOPS plain / TLS | nvmet TLS/plain | ours IOPS plain / TLS | ours TLS/plain | ours-tls/nvmet-tls | guest CPU us/IO TLS nvmet / ours |")
        print("|---|---|---|---|---|---|---|")
        for p in pats:
            kp, kt, op, ot = (med(p, t, 'iops') for t in ('nvmet', 'nvmet-tls', 'ours', 'ours-tls'))
            r = lambda a, b: f"{a / b:.2f}" if b else "-"
            print(f"| {p} | {kp:.0f} / {kt:.0f} | {r(kt, kp)} | {op:.0f} / {ot:.0f} | {r(ot, op)} | {r(ot, kt)} | "
                  f"{med(p, 'nvmet-tls', 'cpu_us'):.0f} / {med(p, 'ours-tls', 'cpu_us'):.0f} |")

for tr, rows in by_tr.items():
    if len(by_tr) > 1:
        print()
        print(f"### {tr}")
    tables(rows)
# Every transport in one table: ours against each anchor that ran on it (BENCH_TRANSPORT=all).
if len(by_tr) > 1:
    print()
    print("### every transport: ours against its anchor")
    print()
    print("| transport | pattern | anchor | anchor IOPS | ours IOPS | ours/anchor paired (min-max) | p99 ours/anchor | guest CPU us/IO anchor / ours | ours process CPU us/IO |")
    print("|---|---|---|---|---|---|---|---|---|")
    for tr, rows in by_tr.items():
        targets = {t for (_, t) in rows}
        pairs = [(tr, 'nvmet', 'ours')]
        if 'spdk' in targets: pairs.append((tr, 'spdk', 'ours'))
        if 'nvmet-tls' in targets: pairs.append(('tls', 'nvmet-tls', 'ours-tls'))
        pats = []
        for (p, _) in rows:
            if p not in pats: pats.append(p)
        for (name, a, o) in pairs:
            for p in pats:
                if (p, a) not in rows or (p, o) not in rows: continue
                m = lambda t, k: med_of(rows, p, t, k)
                pr = paired_of(rows, p, o, a)
                prs = f"{st.median(pr):.2f} ({min(pr):.2f}-{max(pr):.2f})" if pr else "-"
                ap = m(a, 'p99_us')
                print(f"| {name} | {p} | {a} | {m(a, 'iops'):.0f} | {m(o, 'iops'):.0f} | {prs} | "
                      f"{m(o, 'p99_us') / ap if ap else 0:.2f} | {m(a, 'cpu_us'):.0f} / {m(o, 'cpu_us'):.0f} | {m(o, 'target_cpu_us'):.0f} |")
rows = next(iter(by_tr.values()), {})
n = len(next(iter(rows.values()), []))
print(f"(medians of {n} rounds, {__import__('os').environ.get('RT', '10')} s each; paired: median of the per-round ratios)")
PY
echo BENCH DONE
