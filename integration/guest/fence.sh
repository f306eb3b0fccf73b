# fence.sh: fenced failover of RBD images served by two gateways (sourced by rbd.sh after
# its step 11, with gateways A and B of $NQN2 running; uses its gw_* helpers). docs/fencing.md.
#
# A "ghost write": the host writes P1 through gateway A (optimized) while A's packets to
# the cluster are delayed (netem, DELAY_S, on A's sockets only: A runs in a net_cls cgroup
# that a tc filter on lo sends to a netem band); A is stopped (SIGSTOP) while P1 is on its
# way; the host fails over to B, which must own the image to write: it asks A, which does
# not answer, so B blocklists A's cluster connection and takes the image over; P1 (retried
# by the host) and then P2 are written through B; A is resumed and its delayed P1 reaches
# the OSD. With fencing the OSD refuses it: the region reads P2 through both gateways and
# through krbd, and A, fenced, reconnects and serves again (its first write takes the
# image back from B by hand-over). With fencing off (nsid 3), P1 lands over P2: the test
# shows that it does. The partition round freezes A's RDMA threads instead (cgroup v2
# freezer): A is cut off from the host but not from the cluster.
#
# Namespaces added to $NQN2 for this part (ANA groups 2 and 3, same states as group 1):
#   nsid 2: rbd/disk3, the image's default features (exclusive-lock, object-map, ...)
#   nsid 3: rbd/disk4, layering only, fencing = false
# nsid 1 (rbd/disk2, layering only) is the one of the steps before.
DELAY_S=${FENCE_DELAY_S:-40}
ROUNDS=${FENCE_ROUNDS:-1}
REGION_KB=128   # one command (MDTS 128 KiB)
NETCLS=/tmp/netcls
declare -a FENCE_ROWS=()

fence_setup() {
    modprobe sch_netem && modprobe cls_cgroup || fail "netem or cls_cgroup missing in the guest kernel"
    mkdir -p "$NETCLS"
    mountpoint -q "$NETCLS" || mount -t cgroup -o net_cls net_cls "$NETCLS" || fail "mounting the net_cls cgroup"
    mkdir -p "$NETCLS/gwa"
    echo 0x00010004 >"$NETCLS/gwa/net_cls.classid"
    # Band 4 (1:4) takes only what the cgroup filter classifies there: gateway A's packets.
    tc qdisc replace dev lo root handle 1: prio bands 4 priomap 1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1
    tc qdisc replace dev lo parent 1:4 handle 40: netem delay 0ms limit 100000
    tc filter replace dev lo parent 1: protocol ip prio 10 handle 1: cgroup
}
netem_delay() { tc qdisc change dev lo parent 1:4 handle 40: netem delay "$1" limit 100000; }
# Starts gateway A (again) with its sockets in the net_cls cgroup.
gw_up_a() {
    bash -c "echo \$\$ >$NETCLS/gwa/tasks; NO_COLOR=1 exec \"$TARGET_BIN\" --config /tmp/gw-A.toml" >>/tmp/gw-A.log 2>&1 &
    GWPID[A]=$!
    PORT=${GWPORT[A]} wait_discovery "gateway A"
}
fence_conf() { # NAME ANA_STATE
    gw_conf "$1" "$2"
    sed -i "s/^ana = { 1 = \"$2\" }/ana = { 1 = \"$2\", 2 = \"$2\", 3 = \"$2\" }/" "/tmp/gw-$1.toml"
    cat >>"/tmp/gw-$1.toml" <<TOML
[[subsystem.namespace]]
nsid = 2
backend = "rbd"
pool = "rbd"
image = "disk3"
ana_group = 2
[[subsystem.namespace]]
nsid = 3
backend = "rbd"
pool = "rbd"
image = "disk4"
ana_group = 3
fencing = false
TOML
}
ownership() { # NAME NSID -> "role holder"
    "$TARGET_BIN" status --json --socket "/tmp/gw-$1.sock" 2>/dev/null | python3 -c 'import json,sys
s=json.load(sys.stdin)
for x in s["subsystems"]:
    for n in x["namespaces"]:
        if n["nsid"] == int(sys.argv[1]):
            o = n.get("ownership")
            print(o["role"] + " " + o["holder"] + " acq=%d rel=%d fenced_peer=%d" % (o["acquired"], o["released"], o["fenced_peer"]) if o else "none")' "$2"
}
gw_addr() { # NAME NSID -> the gateway's cluster address for that namespace
    "$TARGET_BIN" status --json --socket "/tmp/gw-$1.sock" 2>/dev/null | python3 -c 'import json,sys
s=json.load(sys.stdin)
print(next((n.get("ownership") or {}).get("address", "-") for x in s["subsystems"] for n in x["namespaces"] if n["nsid"] == int(sys.argv[1])))' "$2"
}
# read REGION through: head | krbd | A | B (a gateway, by our initiator) -> file
region_read() { # HOW NSID OUT
    local off_blocks=$((REGION_OFF / BS))
    case $1 in
        head) dd if="$(ns_dev "$NQN2" "$2")" of="$3" bs=${REGION_KB}k count=1 skip=$((REGION_OFF / (REGION_KB * 1024))) iflag=direct status=none ;;
        krbd) local m
              m=$(rbd map "rbd/${FENCE_IMAGE[$2]}" --read-only) || return 1
              dd if="$m" of="$3" bs=${REGION_KB}k count=1 skip=$((REGION_OFF / (REGION_KB * 1024))) iflag=direct status=none
              rbd unmap "$m" ;;
        # Through one gateway: our initiator, a controller of its own on that port.
        A|B) build/release/nvmf-initiator read -a "$IP" -s "${GWPORT[$1]}" -n "$NQN2" --nsid "$2" -q "$(hostnqn 9)" -I "$(hostid 9)" \
                 --start-block "$off_blocks" -z $((REGION_KB * 1024)) -d "$3" 2>/tmp/passthru.err ;;
    esac
}
# What the region holds now, by every way of reading it: "p2 p2 p2 p2" etc.
region_seen() { # NSID
    local how out=() f
    for how in head A B krbd; do
        f=/tmp/region.$how
        rm -f "$f"
        for _ in $(seq 20); do region_read "$how" "$1" "$f" 2>/dev/null && [ -s "$f" ] && break; sleep 1; done
        if cmp -s "$f" /tmp/p2; then out+=("$how=P2")
        elif cmp -s "$f" /tmp/p1; then out+=("$how=P1")
        else out+=("$how=other($(stat -c %s "$f" 2>/dev/null || echo none)B$(head -c 60 /tmp/passthru.err 2>/dev/null | tr ' \n' '_.'))"); fi
    done
    echo "${out[*]}"
}
ana_of() { # PORT NSID -> the ANA state of the path through PORT to namespace NSID
    local c p
    c=$(ctrl_at "$1") || { echo gone; return 0; }
    p=$(ls -d /sys/class/nvme/"$c"/nvme*c*n"$2" 2>/dev/null | head -1)
    cat "$p/ana_state" 2>/dev/null || echo '?'
}
wait_a_serving() { # NSID [OLD_ADDRESS]: A reconnected to the cluster (a new address, when
    # given) and its path is optimized again (and B, which served the group optimized while
    # A was cut off, gave it back)
    local i
    for i in $(seq 150); do
        [[ $(ownership A "$1") =~ ^(owner|standby|none) ]] && [[ $(path_state 4420) =~ "live optimized" ]] &&
            [[ $(ana_of 4421 "$1") == non-optimized ]] &&
            { [ -z "${2:-}" ] || [ "$(gw_addr A "$1")" != "$2" ]; } && return 0
        sleep 0.4
    done
    return 1
}

# One round: "NSIDS" KIND (stop|freeze) EXPECT (fenced|ghost). Every namespace of NSIDS gets
# its P1 through A at once; A is cut off once.
ghost_round() {
    local kind=$2 expect=$3 n t0 tp seen a0 i w0 rc rejoin tw wrote_p2
    local -a ns=($1)
    local -A dev=() addr0=() ddp=() p1_s=()
    REGION_OFF=$(( (RANDOM % 64) * REGION_KB * 1024 ))
    local seek=$((REGION_OFF / (REGION_KB * 1024)))
    head -c $((REGION_KB * 1024)) /dev/urandom >/tmp/p1
    head -c $((REGION_KB * 1024)) /dev/urandom >/tmp/p2
    kmsg_mark
    wait_state 30 4420 "live optimized"
    local ca; ca=$(ctrl_at 4420)
    for n in "${ns[@]}"; do
        dev[$n]=$(ns_dev "$NQN2" "$n") || fail "no head for nsid $n"
        # The head writes through A (optimized for every group): A owns the image.
        for i in $(seq 30); do
            w0=$(gw_writes A)
            dd if=/dev/urandom of="${dev[$n]}" bs=4k count=1 seek=$((REGION_OFF / 4096 + 100)) oflag=direct status=none
            [ "$(gw_writes A)" -gt "$w0" ] && break
            [ "$i" = 30 ] && { grep -H . /sys/block/nvme*c*n"$n"/ana_state; fail "writes to nsid $n do not go through A"; }
            sleep 1
        done
        [[ $(ownership A "$n") == owner* ]] || [ "$expect" = ghost ] || fail "A does not own nsid $n before the round: $(ownership A "$n")"
        addr0[$n]=$(gw_addr A "$n")
    done
    netem_delay "${DELAY_S}s"
    tp=$SECONDS
    for n in "${ns[@]}"; do
        timeout 180 dd if=/tmp/p1 of="${dev[$n]}" bs=${REGION_KB}k count=1 seek=$seek oflag=direct status=none 2>"/tmp/dd-p1.$n.err" &
        ddp[$n]=$!
    done
    sleep 3
    for n in "${ns[@]}"; do
        kill -0 "${ddp[$n]}" 2>/dev/null || fail "nsid $n: P1 completed at once: A's cluster traffic is not delayed"
    done
    if [ "$kind" = stop ]; then kill -STOP "${GWPID[A]}"; else freeze_a 1; fi
    t0=$SECONDS
    for n in "${ns[@]}"; do
        rc=0; wait "${ddp[$n]}" || rc=$?
        p1_s[$n]=$((SECONDS - t0))
        [ $rc = 0 ] || { cat "/tmp/dd-p1.$n.err"; fail "nsid $n: the write of P1 failed on the host after A was cut off ($kind)"; }
    done
    for n in "${ns[@]}"; do
        timeout 180 dd if=/tmp/p2 of="${dev[$n]}" bs=${REGION_KB}k count=1 seek=$seek oflag=direct status=none \
            || fail "nsid $n: the write of P2 through B failed"
    done
    wrote_p2=$((SECONDS - tp))
    if [ "$kind" = stop ]; then kill -CONT "${GWPID[A]}"; else freeze_a 0; fi
    # A's delayed packets (P1) reach the OSD DELAY_S after they left A.
    sleep $(( tp + DELAY_S + 4 - SECONDS > 0 ? tp + DELAY_S + 4 - SECONDS : 0 ))
    netem_delay 0ms
    for n in "${ns[@]}"; do
        tw=$SECONDS
        if [ "$expect" = fenced ]; then
            wait_a_serving "$n" "${addr0[$n]}" || info "A is not serving nsid $n again: $(ownership A "$n"), path $(path_state 4420)"
        else
            wait_a_serving "$n" || true
        fi
        rejoin=$((SECONDS - tw))
        seen=$(region_seen "$n")
        FENCE_ROWS+=("nsid $n ($kind, expect $expect): P1 done ${p1_s[$n]} s after A was cut off (the I/O pause), P2 written at +$wrote_p2 s (P1's packets land at +$DELAY_S s); A serving again $rejoin s after that; region: $seen; A: $(ownership A "$n"); B: $(ownership B "$n")")
        info "${FENCE_ROWS[-1]}"
        if [ "$expect" = fenced ]; then
            [ "$seen" = "head=P2 A=P2 B=P2 krbd=P2" ] || fail "nsid $n: the region does not read P2 everywhere: $seen"
            # A serves again: a write through the head (A optimized) takes the image back.
            a0=$(gw_writes A)
            timeout 180 dd if=/tmp/p2 of="${dev[$n]}" bs=${REGION_KB}k count=1 seek=$seek oflag=direct status=none \
                || fail "nsid $n: writing through A after it rejoined failed"
            [ "$(gw_writes A)" -gt "$a0" ] || fail "nsid $n: the write after A rejoined did not go through A"
            [[ $(ownership A "$n") == owner* ]] || fail "A does not own nsid $n after a write through it: $(ownership A "$n")"
        else
            [[ $seen == *P1* ]] || fail "nsid $n without fencing: the delayed write did not land ($seen): this round shows nothing"
        fi
    done
    # The host saw no I/O error at all: P1 was retried through B, P2 written through B, and
    # A, cut off and then slow to reach the cluster, is not sure of its copies of the
    # reservation states until it reads them again: it sends every command to another path
    # (ANA Inaccessible, a path error the host does not count as a retry) and reports the
    # group inaccessible meanwhile, so that no read waits on it until the host gives up.
    # Only A's own path may time out and reset (it was cut off); B's path and the head show
    # nothing.
    E=$(kmsg_errors | grep -v "nvme $ca: " || true)
    [ -z "$E" ] || { echo "$E"; fail "errors in the host's kernel log in the round, other than on A's path ($ca)"; }
    info "commands A sent to another path so far (ANA Inaccessible): $(ana_refused A)"
}
ana_refused() { # NAME -> the gateway's count of commands answered ANA Inaccessible
    curl -sf "http://127.0.0.1:${GWMETRICS[$1]}/metrics" |
        awk '/^nvmf_target_failed_commands_total\{.*status="ANA_INACCESSIBLE"/ { v += $2 } END { print v + 0 }'
}
# freeze_a 1|0: A's RDMA threads (workers, posters, listener) stop or run again; its
# cluster threads (librados, ownership) run on: cut off from the host, not from Ceph.
freeze_a() {
    local cg=/sys/fs/cgroup/gw-a t
    if [ ! -d $cg/io ]; then
        mkdir -p $cg
        echo "${GWPID[A]}" >$cg/cgroup.procs
        mkdir -p $cg/io
        echo threaded >$cg/io/cgroup.type
    fi
    if [ "$1" = 1 ]; then
        for t in /proc/"${GWPID[A]}"/task/*; do
            case $(cat "$t/comm") in nvmf-worker*|nvmf-post*|nvmf-listen*) echo "${t##*/}" >$cg/io/cgroup.threads ;; esac
        done
    fi
    echo "$1" >$cg/io/cgroup.freeze
}

step "13. fenced failover: ghost writes (A's cluster traffic delayed ${DELAY_S} s, A stopped, the host fails over to B)"
fence_setup
rbd create rbd/disk3 --size ${SIZE_MB}M
rbd create rbd/disk4 --size ${SIZE_MB}M --image-feature layering
declare -A FENCE_IMAGE=([1]=disk2 [2]=disk3 [3]=disk4)
info "rbd/disk3 features: $(rbd info rbd/disk3 --format json | python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["features"]))')"
# A restarts inside the net_cls cgroup, both with namespaces 2 and 3.
fence_conf A optimized; fence_conf B non-optimized
kill -HUP "${GWPID[B]}"
for _ in $(seq 50); do [ "$(ownership B 3)" = none ] && break; sleep 0.2; done
[ "$(ownership B 3)" = none ] || { tail -5 /tmp/gw-B.log; fail "gateway B did not take the namespaces of this part (reload)"; }
gw_stop A
gw_up_a
wait_state 60 4420 "live optimized"
for n in 2 3; do
    for _ in $(seq 100); do ns_dev "$NQN2" $n >/dev/null && break; sleep 0.2; done
    ns_dev "$NQN2" $n >/dev/null || fail "namespace $n of $NQN2 did not appear"
done
for r in $(seq "$ROUNDS"); do
    info "round $r: nsid 1 (layering only) and nsid 2 (default features) at once"
    ghost_round "1 2" stop fenced
done
step "13b. the same with A cut off from the host only (its RDMA threads frozen), not from Ceph"
ghost_round 1 freeze fenced
step "13c. the same without fencing (nsid 3, fencing = false): the delayed write lands"
ghost_round 3 stop ghost
grep -hE "fencing it|took the image over|was fenced|reopened on a new|inaccessible here changed|lost the watch|current again" /tmp/gw-A.log /tmp/gw-B.log | sed "s/^/    /" | tail -n 24
# What a Prometheus scrape of each gateway says about it.
fencing_events() { # NAME IMAGE EVENT -> the counter's value (0 when absent)
    curl -sf "http://127.0.0.1:${GWMETRICS[$1]}/metrics" | grep '^nvmf_target_fencing_events_total{' |
        grep -F "event=\"$3\"" | grep -F "image=\"rbd/$2\"" | awk '{ v += $2 } END { print v + 0 }'
}
for g in A B; do
    info "gateway $g scraped: $(curl -sf "http://127.0.0.1:${GWMETRICS[$g]}/metrics" | grep '^nvmf_target_fencing_events_total' | sed 's/nvmf_target_fencing_events_total//' | tr '\n' ' ')"
done
for img in disk2 disk3; do
    [ "$(fencing_events B $img fenced_peer)" -ge 1 ] || fail "B's metrics count no fencing of A for rbd/$img"
    [ "$(fencing_events A $img recovered)" -ge 1 ] || fail "A's metrics count no recovery from fencing for rbd/$img"
    [ "$(fencing_events A $img acquired)" -ge 1 ] || fail "A's metrics count no acquisition of rbd/$img"
done
[ "$(fencing_events B disk4 fenced_peer)" = 0 ] || fail "B's metrics count fencing for rbd/disk4 (fencing = false)"
for row in "${FENCE_ROWS[@]}"; do info "$row"; done
tc qdisc del dev lo root 2>/dev/null || true
