#!/bin/bash
# bench-rbd-images.sh: many RBD images behind one gateway, INSIDE the lab guest (one-node
# Ceph). For each count N of IMAGE_COUNTS ("1 4 16"): our target serves images 1..N as
# namespaces 1..N of one subsystem (one ANA group: one cluster connection), and the kernel
# host runs fio with one job per namespace, the queue depth QD (32) split among them (so
# the host asks the same of every N); then fio's own rbd engine does the same on the same
# images (librbd in fio, no fabric: the anchor), with librbd's cache off as a gateway runs
# it (rbd_cache = false; FIO_RBD_CACHE=1 adds fio-rbd-cache, librbd's defaults). Each row:
# aggregate IOPS, guest CPU per I/O, the target process's CPU per I/O (fio's for fio-rbd),
# and our process's threads and resident memory while serving N images. The question (SPDK's RBD bdev loses IOPS as
# bdevs are added, spdk#3547): does the aggregate fall as images are added, and what does
# an image cost? Then our target serves N RAM disks (brd, the images' size) the same way
# (ours-ram): the fabric and the queue core without librbd, so the table splits our CPU per
# I/O into the fabric's part and librbd's (ours - ours-ram), the latter against fio-rbd
# (RAM_PHASE=0: not). RATE_IOPS=N holds every run at N IOPS in all (fio's rate_iops,
# split among the jobs): CPU per I/O compared at one load, not at each target's own
# (a slower target wakes more often per I/O). ROUNDS (2) rounds, RT (10) s per run;
# PATTERNS as in bench.sh (default 4k QD32 random read and write).
set -uo pipefail
IP=${LAB_IP:?}; NQN=nqn.2026-11.io.nvmf-lab:bench-images; RT=${RT:-10}; ROUNDS=${ROUNDS:-2}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
COUNTS=${IMAGE_COUNTS:-"1 4 16"}; QD=${QD:-32}; MB=${IMAGE_MB:-32}
PATTERNS=${PATTERNS:-"rr4k:randread:4k rw4k:randwrite:4k"}
fail() { echo "FAIL: $*"; exit 1; }
. integration/guest/ceph.sh
ceph_up >/dev/null
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma rbd
RAM=${RAM_PHASE:-1}
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
MAX=0; for n in $COUNTS; do [ "$n" -gt $MAX ] && MAX=$n; done
for i in $(seq "$MAX"); do
    rbd create "rbd/img$i" --size "${MB}M" --image-feature layering || fail "rbd create img$i"
    d=$(rbd map "rbd/img$i") || fail "rbd map img$i"
    fio --name=fill --filename="$d" --direct=1 --ioengine=libaio --rw=write --bs=1M --iodepth=4 \
        --size="${MB}M" --output-format=terse >/dev/null || fail "filling img$i"
    rbd unmap "$d"
done
echo "images rbd/img1..img$MAX: $MB MiB each, written in full; queue depth $QD split among them${RATE_IOPS:+; $RATE_IOPS IOPS in all}"
if [ "$RAM" = 1 ]; then
    modprobe brd rd_nr="$MAX" rd_size=$((MB * 1024)) || fail "modprobe brd"
    for i in $(seq "$MAX"); do
        fio --name=fill --filename="/dev/ram$((i - 1))" --direct=1 --ioengine=libaio --rw=write --bs=1M \
            --iodepth=4 --size="${MB}M" --output-format=terse >/dev/null || fail "filling ram$((i - 1))"
    done
    echo "RAM disks /dev/ram0..ram$((MAX - 1)): $MB MiB each, written in full (ours-ram)"
fi
pid_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
child_ticks() { awk '{print $16 + $17}' "/proc/$1/stat"; }
cpu_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
ceph_settle() {
    local a b osd; osd=$(pgrep -x ceph-osd | head -1); [ -n "$osd" ] || return 0
    for _ in $(seq 30); do a=$(pid_ticks "$osd"); sleep 1; b=$(pid_ticks "$osd")
        [ $((b - a)) -lt $(($(getconf CLK_TCK) / 10)) ] && return; done
}
# run ROUND TARGET N: one fio per pattern, N jobs (namespace devices or images).
run() {
    local p name rw bs jobs=() i qd=$((QD / $3)) t0 t1 p0 p1 f0 f1 me devs rate=()
    [ $qd -ge 1 ] || qd=1
    [ -n "${RATE_IOPS:-}" ] && rate=(--rate_iops=$((RATE_IOPS / $3)))
    if [ "${2#ours}" != "$2" ]; then
        mapfile -t devs < <(ls /dev/nvme*n* 2>/dev/null | grep -E 'n[0-9]+$' | sort -V)
        [ "${#devs[@]}" = "$3" ] || { echo "ours: ${#devs[@]} namespace devices, expected $3" >&2; return; }
        for i in $(seq "$3"); do jobs+=(--name="j$i" --filename="${devs[$((i - 1))]}" --direct=1 --ioengine=libaio); done
    else
        for i in $(seq "$3"); do jobs+=(--name="j$i" --ioengine=rbd --clientname=admin --pool=rbd --rbdname="img$i"); done
    fi
    local envs=(); [ "$2" = fio-rbd ] && envs=(CEPH_ARGS=--rbd_cache=false)
    for p in $PATTERNS; do
        IFS=: read -r name rw bs <<<"$p"
        ceph_settle
        me=$BASHPID; f0=$(child_ticks $me); t0=$(cpu_ticks); p0=0; [ -n "${TPID:-}" ] && p0=$(pid_ticks "$TPID")
        env "${envs[@]}" fio --rw="$rw" --bs="$bs" --iodepth=$qd "${rate[@]}" --runtime="$RT" --time_based --group_reporting \
            --output-format=json --output=/tmp/bi.json "${jobs[@]}" >/dev/null 2>&1 ||
            { echo "fio failed: $2 N=$3 $name" >&2; continue; }
        f1=$(child_ticks $me); t1=$(cpu_ticks); p1=0; [ -n "${TPID:-}" ] && p1=$(pid_ticks "$TPID")
        local threads=- rss=-
        if [ -n "${TPID:-}" ]; then
            threads=$(awk '/^Threads:/ {print $2}' "/proc/$TPID/status")
            rss=$(awk '/^VmRSS:/ {print int($2 / 1024)}' "/proc/$TPID/status")
        fi
        python3 - "$1" "$2" "$3" "$name" "$t0" "$t1" "$p0" "$p1" "$f0" "$f1" "$(getconf CLK_TCK)" "$threads" "$rss" <<'PY'
import json, sys
rnd, tgt, n, name, t0, t1, p0, p1, f0, f1, hz, threads, rss = sys.argv[1:]
j = json.load(open('/tmp/bi.json'))['jobs'][0]
ios = sum(j[k]['total_ios'] for k in ('read', 'write')); iops = sum(j[k]['iops'] for k in ('read', 'write'))
us = lambda a, b: (int(b) - int(a)) / int(hz) * 1e6 / max(ios, 1)
own = us(p0, p1) if tgt.startswith('ours') else us(f0, f1)
print(f"IMAGES round={rnd} target={tgt} images={n} pattern={name} iops={iops:.0f} cpu_us={us(t0, t1):.0f} "
      f"process_cpu_us={own:.0f} threads={threads} rss_mib={rss}")
PY
    done | tee -a /tmp/images.txt
}
ours() { # ROUND N [ram]: images 1..N through librbd, or RAM disks 0..N-1
    local i
    { printf '[[listener]]\ntransport = "rdma"\naddress = "%s"\nport = 4420\n' "$IP"
      printf '[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n' $NQN
      for i in $(seq "$2"); do
          if [ "${3:-}" = ram ]; then
              printf '[[subsystem.namespace]]\nnsid = %d\npath = "/dev/ram%d"\n' "$i" $((i - 1))
          else
              printf '[[subsystem.namespace]]\nnsid = %d\nbackend = "rbd"\npool = "rbd"\nimage = "img%d"\n' "$i" "$i"
          fi
      done; } >/tmp/images.toml
    "$TARGET_BIN" --config /tmp/images.toml --log-level warn >/tmp/ti.log 2>&1 &
    TPID=$!
    for _ in $(seq 60); do
        sleep 1; nvme connect -t rdma -a "$IP" -s 4420 -n $NQN >/dev/null 2>&1 && break
        kill -0 $TPID 2>/dev/null || break
    done
    for _ in $(seq 100); do [ "$(ls /dev/nvme*n* 2>/dev/null | grep -cE 'n[0-9]+$')" = "$2" ] && break; sleep 0.2; done
    run "$1" "ours${3:+-$3}" "$2"
    nvme disconnect -n $NQN >/dev/null
    kill $TPID; wait $TPID; TPID=; grep -v INFO /tmp/ti.log | head -5
}
: >/tmp/images.txt
for r in $(seq "$ROUNDS"); do
    for n in $COUNTS; do
        # Even rounds reverse the order of the two.
        if [ $((r % 2)) = 1 ]; then ours "$r" "$n"; run "$r" fio-rbd "$n"
        else run "$r" fio-rbd "$n"; ours "$r" "$n"; fi
        [ "${FIO_RBD_CACHE:-0}" = 1 ] && run "$r" fio-rbd-cache "$n"
        [ "$RAM" = 1 ] && ours "$r" "$n" ram
    done
done
echo
echo "medians over $ROUNDS round(s): aggregate IOPS, process CPU µs per I/O (ours: the target, librbd included; fio-rbd: fio with librbd), ours / fio-rbd"
[ "$RAM" = 1 ] && echo "ours-ram: the same namespaces on RAM disks (no librbd); ours - ours-ram: what librbd and its hand-off cost in our process, against fio-rbd (fio and librbd)"
python3 - <<'PY'
import re, statistics
rows = [dict(re.findall(r'(\w+)=(\S+)', l)) for l in open('/tmp/images.txt') if l.startswith('IMAGES')]
keys = sorted({(r['pattern'], int(r['images'])) for r in rows})
def med(t, p, n, k):
    v = [float(r[k]) for r in rows if r['target'] == t and r['pattern'] == p and int(r['images']) == n]
    return statistics.median(v) if v else 0
last = lambda p, n, k: next((r[k] for r in reversed(rows) if r['target'] == 'ours' and r['pattern'] == p and int(r['images']) == n), '-')
ram = any(r['target'] == 'ours-ram' for r in rows)
head = "| pattern | images | ours IOPS | fio-rbd IOPS | ours/fio-rbd | process CPU µs/IO ours / fio-rbd | ratio |"
if ram:
    head += " ours-ram IOPS | ours-ram CPU µs/IO | ours - ours-ram | / fio-rbd |"
print(head + " ours threads | ours RSS MiB |")
print("|---" * (head.count("|") + 1) + "|")
for p, n in keys:
    oi, fi = med('ours', p, n, 'iops'), med('fio-rbd', p, n, 'iops')
    oc, fc = med('ours', p, n, 'process_cpu_us'), med('fio-rbd', p, n, 'process_cpu_us')
    line = f"| {p} | {n} | {oi:.0f} | {fi:.0f} | {oi / fi if fi else 0:.2f} | {oc:.0f} / {fc:.0f} | {oc / fc if fc else 0:.2f} |"
    if ram:
        ri, rc = med('ours-ram', p, n, 'iops'), med('ours-ram', p, n, 'process_cpu_us')
        line += f" {ri:.0f} | {rc:.0f} | {oc - rc:.0f} | {(oc - rc) / fc if fc else 0:.2f} |"
    print(line + f" {last(p, n, 'threads')} | {last(p, n, 'rss_mib')} |")
PY
