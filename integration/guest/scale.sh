#!/bin/bash
# scale.sh: many hosts against one target, INSIDE the lab guest (booted with 8 vCPUs so the
# kernel host opens 8 I/O queues per controller). Run by integration/run-scale-tests.
#
# Per target (TARGETS="own" by default; "own kernel" for the side-by-side table):
#   - HOSTS hosts (distinct host NQN and host ID) each connect one controller, written to
#     /dev/nvme-fabrics (nvme-cli refuses a second controller to the same address);
#   - the kernel's native multipath joins them into one namespace with HOSTS paths;
#     iopolicy round-robin; fio randwrite with crc32c verify over the multipath device;
#   - idle CPU over IDLE_S seconds with everything connected;
#   - CYCLES connect/disconnect cycles of all hosts: RSS, fds and threads before/after;
#   - the host's kernel log must show no I/O error, reset or timeout.
# Own target only (asserted): every controller connects, fio verifies, VmPin <= the
# configured max_pinned_memory, threads <= workers + 4 + posters (one per 4 workers, for
# software RDMA devices: send_offload = "auto"), idle CPU < 10 % of a core (the
# goal, < 2 %, is reported), no growth over the cycles.
# Output: "SCALE target=... key=value ..." lines, then "SCALE PASS" (last line).
set -uo pipefail

IP=${LAB_IP:?LAB_IP not set (run this inside the lab guest)}
TARGETS=${TARGETS:-own}
HOSTS=${HOSTS:-16}
CYCLES=${CYCLES:-3}
IDLE_S=${IDLE_S:-10}
FIO_SIZE=${FIO_SIZE:-8M}
BUDGET_MIB=${BUDGET_MIB:-192}
TARGET_BIN=${TARGET_BIN:-build/release/nvmf-target}
NQN=nqn.2026-11.io.nvmf-lab:scale
CFG=/sys/kernel/config/nvmet
TPID=
FAILS=0

say() { echo "    $*"; }
step() { echo; echo "=== $*"; }
bad() { echo "FAIL: $*"; FAILS=$((FAILS + 1)); }

step "setup: soft-RoCE, nvme-rdma, nvmet-rdma, a 512 MiB RAM disk ($(nproc) vCPUs)"
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma nvmet nvmet-rdma || exit 1
modprobe brd rd_nr=1 rd_size=524288 || exit 1
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null || true
mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
cat /sys/module/nvme_core/parameters/multipath 2>/dev/null | sed 's/^/    nvme_core multipath: /'

hostid() { printf '5ca1e000-2026-4000-8000-%012d' "$1"; }

start_own() {
    cat >/tmp/scale.toml <<EOF
[target]
max_pinned_memory = "${BUDGET_MIB}M"
${EXTRA_TARGET:-}
[metrics]
enabled = false
[[listener]]
address = "$IP"
[[subsystem]]
nqn = "$NQN"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
path = "/dev/ram0"
EOF
    "$TARGET_BIN" --config /tmp/scale.toml --log-level warn >/tmp/scale-target.log 2>&1 &
    TPID=$!
    for _ in $(seq 100); do nvme discover -t rdma -a "$IP" -s 4420 >/dev/null 2>&1 && return 0; sleep 0.2; done
    bad "own target did not come up"; cat /tmp/scale-target.log; return 1
}

start_kernel() {
    local s=$CFG/subsystems/$NQN
    mkdir -p "$s/namespaces/1" && echo 1 >"$s/attr_allow_any_host"
    echo -n /dev/ram0 >"$s/namespaces/1/device_path" && echo 1 >"$s/namespaces/1/enable"
    mkdir -p $CFG/ports/1
    echo rdma >$CFG/ports/1/addr_trtype; echo ipv4 >$CFG/ports/1/addr_adrfam
    echo "$IP" >$CFG/ports/1/addr_traddr; echo 4420 >$CFG/ports/1/addr_trsvcid
    ln -s "$s" "$CFG/ports/1/subsystems/$NQN"
}

stop_target() { # our target must exit cleanly on SIGTERM
    local rc=0
    if [ -n "$TPID" ]; then
        kill "$TPID"; wait "$TPID" 2>/dev/null || rc=$?; TPID=
        [ $rc = 0 ] || { tail -n 20 /tmp/scale-target.log | sed 's/^/    target: /'; bad "own: the target exited with status $rc on SIGTERM"; }
    fi
    if [ -d $CFG/ports/1 ]; then
        rm -f "$CFG/ports/1/subsystems/$NQN"; rmdir $CFG/ports/1
        echo 0 >"$CFG/subsystems/$NQN/namespaces/1/enable"
        rmdir "$CFG/subsystems/$NQN/namespaces/1" "$CFG/subsystems/$NQN"
    fi
}

connect_all() { # -> number of hosts whose connect succeeded
    local ok=0
    for i in $(seq "$HOSTS"); do
        if echo "transport=rdma,traddr=$IP,trsvcid=4420,nqn=$NQN,hostnqn=nqn.2026-11.io.nvmf-lab:scale-host-$i,hostid=$(hostid "$i")" \
            >/dev/nvme-fabrics 2>/tmp/connect.err; then ok=$((ok + 1)); fi
    done
    echo $ok
}

ctrls() { # live controllers of the subsystem and their I/O queues
    local n=0 q=0 c
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
        [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
        n=$((n + 1))
        q=$((q + $(cat "$c/queue_count" 2>/dev/null || echo 1) - 1))
    done
    echo "$n $q"
}

head_dev() {
    local c s
    for c in /sys/class/nvme-subsystem/nvme-subsys*; do
        [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
        echo round-robin >"$c/iopolicy" 2>/dev/null
        for s in "$c"/nvme*n*; do [ -e "$s" ] && { echo "/dev/$(basename "$s")"; return; }; done
    done
}

# Threads of the process, without the kernel's io_uring workers (iou-wrk-*, which the
# kernel starts for operations that would block, and ends when idle).
user_threads() { grep -L '^iou-' /proc/"$1"/task/*/comm 2>/dev/null | wc -l; }
iowq_threads() { grep -l '^iou-' /proc/"$1"/task/*/comm 2>/dev/null | wc -l; }
proc_val() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
cpu_ticks() { # all CPUs' busy ticks
    awk '/^cpu / {print $2 + $3 + $4 + $7 + $8}' /proc/stat
}
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

run_target() { # own | kernel
    local t=$1 M n q dev fio_rc verify pin threads posters=- rss0 fd0 th0 rss1 fd1 th1 idle_sys idle_proc hz
    step "[$t] $HOSTS hosts connect"
    stop_target
    sync; echo 3 >/proc/sys/vm/drop_caches
    local mem0 mem1 per_q; mem0=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    if [ "$t" = own ]; then start_own || return; else start_kernel; fi
    M=$(dmesg | wc -l)
    local ok; ok=$(connect_all)
    sleep 2
    read -r n q < <(ctrls)
    mem1=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
    per_q=$(awk -v a="$mem0" -v b="$mem1" -v q="$((q + n))" 'BEGIN {printf "%.2f", (a - b) / 1024 / (q > 0 ? q : 1)}')
    say "connect accepted for $ok of $HOSTS hosts; live controllers $n, I/O queues $q"
    say "MemAvailable dropped by $(( (mem0 - mem1) / 1024 )) MiB: $per_q MiB per queue (host side and target start included)"
    dev=$(head_dev)
    say "multipath device: ${dev:-none}, iopolicy $(cat /sys/class/nvme-subsystem/nvme-subsys*/iopolicy 2>/dev/null | head -1)"
    pin=-; threads=-
    if [ "$t" = own ]; then
        pin=$(( $(proc_val "$TPID" VmPin) / 1024 ))
        threads=$(user_threads "$TPID")
        posters=$(grep -l '^nvmf-post' /proc/"$TPID"/task/*/comm 2>/dev/null | wc -l)
        say "target: VmPin ${pin} MiB, threads $threads (+ $(iowq_threads "$TPID") io_uring io-wq), RSS $(( $(proc_val "$TPID" VmRSS) / 1024 )) MiB"
    fi
    step "[$t] idle for ${IDLE_S}s with every host connected"
    hz=$(getconf CLK_TCK)
    local s0 p0; s0=$(cpu_ticks); p0=$([ -n "$TPID" ] && proc_ticks "$TPID" || echo 0)
    sleep "$IDLE_S"
    idle_sys=$(awk -v a="$s0" -v b="$(cpu_ticks)" -v hz="$hz" -v s="$IDLE_S" 'BEGIN {printf "%.1f", (b - a) * 100 / hz / s}')
    idle_proc=-
    [ -n "$TPID" ] && idle_proc=$(awk -v a="$p0" -v b="$(proc_ticks "$TPID")" -v hz="$hz" -v s="$IDLE_S" 'BEGIN {printf "%.1f", (b - a) * 100 / hz / s}')
    say "CPU while idle: whole guest ${idle_sys}% of a core, target process ${idle_proc}%"
    step "[$t] fio randwrite + crc32c verify over the multipath device (4 jobs x $FIO_SIZE)"
    fio_rc=1
    if [ -n "$dev" ]; then
        fio --name=scale --filename="$dev" --direct=1 --ioengine=libaio --rw=randwrite --bs=4k \
            --iodepth=16 --numjobs=4 --size="$FIO_SIZE" --offset_increment="$FIO_SIZE" \
            --verify=crc32c --verify_state_save=0 --do_verify=1 --verify_fatal=1 --group_reporting \
            --output=/tmp/scale-fio-$t.txt >/dev/null 2>&1
        fio_rc=$?
        grep -E 'err=|IOPS=' /tmp/scale-fio-$t.txt | head -3 | sed 's/^/    fio: /'
    fi
    verify=$([ $fio_rc = 0 ] && echo ok || echo FAILED)
    local errs; errs=$(dmesg | tail -n +$((M + 1)) | grep -ciE 'I/O Error|reset|timeout|failed' || true)
    dmesg | tail -n +$((M + 1)) | grep -iE 'I/O Error|reset|timeout|failed' | head -5 | sed 's/^/    dmesg: /'
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    sleep 1
    step "[$t] $CYCLES connect/disconnect cycles of all hosts"
    if [ -n "$TPID" ]; then
        rss0=$(proc_val "$TPID" VmRSS); fd0=$(ls "/proc/$TPID/fd" | wc -l); th0=$(user_threads "$TPID")
    fi
    local c okc=0
    for c in $(seq "$CYCLES"); do
        [ "$(connect_all)" = "$HOSTS" ] && okc=$((okc + 1))
        nvme disconnect -n "$NQN" >/dev/null 2>&1
    done
    sleep 4
    local growth=-
    if [ -n "$TPID" ]; then
        rss1=$(proc_val "$TPID" VmRSS); fd1=$(ls "/proc/$TPID/fd" | wc -l); th1=$(user_threads "$TPID")
        growth="rss_kib=$((rss1 - rss0)),fds=$((fd1 - fd0)),threads=$((th1 - th0))"
        say "after $CYCLES cycles: RSS ${rss0} -> ${rss1} KiB, fds $fd0 -> $fd1, threads $th0 -> $th1"
    fi
    # Workers whose SRQ had to be shared beyond what it covers (the budget had no room for
    # a queue's own receives; said once per worker and device).
    local overcommit=-
    [ "$t" = own ] && overcommit=$(grep -c 'shared receive queue is overcommitted' /tmp/scale-target.log || true)
    echo "SCALE target=$t controllers=$n/$HOSTS io_queues=$q mem_per_queue_mib=$per_q verify=$verify pinned_mib=$pin threads=$threads posters=$posters idle_cpu_pct=$idle_proc guest_idle_cpu_pct=$idle_sys cycles_ok=$okc/$CYCLES growth=$growth dmesg_errors=$errs srq_overcommitted_workers=$overcommit"
    if [ "$t" = own ]; then
        [ "$n" = "$HOSTS" ] || bad "own: $n of $HOSTS controllers connected"
        [ "$q" -ge $((HOSTS * $(nproc))) ] || bad "own: only $q I/O queues"
        [ "$verify" = ok ] || bad "own: fio verify failed"
        [ "$pin" -le "$BUDGET_MIB" ] || bad "own: VmPin $pin MiB over the budget $BUDGET_MIB MiB"
        [ "$posters" -le $(( ($(nproc) + 3) / 4 )) ] || bad "own: $posters poster threads (workers: $(nproc))"
        [ "$threads" -le $(( $(nproc) + 4 + posters )) ] || bad "own: $threads threads (workers: $(nproc), posters: $posters)"
        # The goal is < 2 % of a core (a benchmark figure, noisy under TCG); the test fails
        # on what a spinning or busy-looping worker would show.
        awk -v c="$idle_proc" 'BEGIN {exit !(c < 2.0)}' && say "idle CPU goal (< 2 % of a core) met" \
            || say "NOTE idle CPU ${idle_proc}% of a core: above the 2 % goal"
        awk -v c="$idle_proc" 'BEGIN {exit !(c < 10.0)}' || bad "own: idle CPU ${idle_proc}% of a core (workers spinning?)"
        [ "$errs" = 0 ] || bad "own: $errs error lines in the host's kernel log"
        [ "$okc" = "$CYCLES" ] || bad "own: $okc of $CYCLES cycles connected every host"
        [ $((fd1 - fd0)) -le 2 ] || bad "own: fds grew by $((fd1 - fd0)) over the cycles"
        [ $((th1 - th0)) -le 0 ] || bad "own: threads grew by $((th1 - th0)) over the cycles"
        [ $((rss1 - rss0)) -le 8192 ] || bad "own: RSS grew by $((rss1 - rss0)) KiB over the cycles"
        kill -0 "$TPID" 2>/dev/null || bad "own: the target died"
        if grep -E 'ERROR|panicked' /tmp/scale-target.log | head -5 | sed 's/^/    target: /' | grep .; then
            bad "own: the target logged errors or panicked (above)"
        fi
    fi
    stop_target
}

# Pinned-memory exhaustion (own target): without shared receive queues every queue pair
# pins its own receive buffers (~1 MiB at depth 128). A budget that fits the workers and
# about two hosts: further hosts are refused with the NVMe/RDMA reject "no resources",
# and the target keeps serving the hosts it took.
budget_phase() {
    local workers_mib=$(( $(nproc) * 12 )) n q dev
    step "[own] pinned budget: srq = off, max_pinned_memory = $((workers_mib + 20)) MiB, 4 hosts"
    stop_target
    BUDGET_MIB=$((workers_mib + 20))
    EXTRA_TARGET='srq = "off"' start_own || return
    local saved=$HOSTS; HOSTS=4
    local ok; ok=$(connect_all)
    HOSTS=$saved
    read -r n q < <(ctrls)
    local rejects; rejects=$(grep -c 'pinned-memory budget is spent' /tmp/scale-target.log)
    local pin=$(( $(proc_val "$TPID" VmPin) / 1024 ))
    say "hosts connected: $ok of 4 (live controllers $n, I/O queues $q); VmPin $pin MiB of $BUDGET_MIB; 'budget is spent' refusals logged: $rejects"
    grep -m2 'budget is spent' /tmp/scale-target.log | sed 's/^/    target: /'
    dev=$(head_dev)
    if [ -n "$dev" ] && dd if="$dev" of=/dev/null bs=1M count=16 iflag=direct 2>/dev/null; then
        say "a connected host still reads 16 MiB"
    else
        bad "budget: connected hosts cannot read"
    fi
    echo "SCALE budget hosts_connected=$ok/4 pinned_mib=$pin budget_mib=$BUDGET_MIB refusals=$rejects"
    [ "$ok" -ge 1 ] && [ "$ok" -lt 4 ] || bad "budget: expected some but not all of 4 hosts to connect, got $ok"
    [ "$rejects" -ge 1 ] || bad "budget: no 'budget is spent' refusal in the target log"
    [ "$pin" -le "$BUDGET_MIB" ] || bad "budget: VmPin $pin MiB over the budget $BUDGET_MIB MiB"
    kill -0 "$TPID" 2>/dev/null || bad "budget: the target died"
    nvme disconnect -n "$NQN" >/dev/null 2>&1
    stop_target
}

for t in $TARGETS; do run_target "$t"; done
budget_phase
if [ "$FAILS" = 0 ]; then echo "SCALE PASS"; else echo "SCALE FAIL ($FAILS)"; exit 1; fi
