# nvmet.sh: sourced by guest scripts that run the kernel target and ours side by side
# (fs.sh, hostile.sh, tcp.sh). Needs IP, PORT and fail() from the sourcing script;
# NVMET_TRTYPE (rdma, or tcp) is the transport of the port and of discovery; NVMET_TSAS
# (tls1.3), when set, the port's security (set before the port is enabled).
#   nvmet_export NQN PATH...   the kernel target (configfs) exports PATHs as nsid 1..n
#                              of NQN, open to any host, on IP:PORT (port 1)
#   nvmet_unexport NQN         tears that down
#   wait_discovery WHAT        up to 20 s for a discovery answer on IP:PORT
#   ns_dev NQN NSID            /dev/nvmeXnY of the namespace (multipath head or disk)
#   live_ctrl NQN              sets CTRL (a live controller of NQN) and NS (its namespace
#                              1), waiting up to 20 s; fails if there is none
NVMET_CFG=/sys/kernel/config/nvmet
NVMET_TRTYPE=${NVMET_TRTYPE:-rdma}
nvmet_export() {
    local nqn=$1 id=0 p; shift
    modprobe -a nvmet "nvmet-$NVMET_TRTYPE"
    mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config
    mkdir "$NVMET_CFG/subsystems/$nqn"
    echo 1 >"$NVMET_CFG/subsystems/$nqn/attr_allow_any_host"
    for p in "$@"; do
        id=$((id + 1))
        mkdir "$NVMET_CFG/subsystems/$nqn/namespaces/$id"
        echo -n "$p" >"$NVMET_CFG/subsystems/$nqn/namespaces/$id/device_path"
        echo 1 >"$NVMET_CFG/subsystems/$nqn/namespaces/$id/enable"
    done
    mkdir "$NVMET_CFG/ports/1"
    echo "$NVMET_TRTYPE" >"$NVMET_CFG/ports/1/addr_trtype"; echo ipv4 >"$NVMET_CFG/ports/1/addr_adrfam"
    echo "$IP" >"$NVMET_CFG/ports/1/addr_traddr"; echo "$PORT" >"$NVMET_CFG/ports/1/addr_trsvcid"
    if [ -n "${NVMET_TSAS:-}" ]; then
        echo "$NVMET_TSAS" >"$NVMET_CFG/ports/1/addr_tsas" || fail "nvmet: addr_tsas $NVMET_TSAS refused"
    fi
    ln -s "$NVMET_CFG/subsystems/$nqn" "$NVMET_CFG/ports/1/subsystems/$nqn"
}
nvmet_unexport() {
    local nqn=$1 n
    [ -d "$NVMET_CFG/subsystems/$nqn" ] || return 0
    rm -f "$NVMET_CFG/ports/1/subsystems/$nqn"; rmdir "$NVMET_CFG/ports/1" 2>/dev/null || true
    for n in "$NVMET_CFG/subsystems/$nqn"/namespaces/*/; do
        [ -d "$n" ] || continue
        echo 0 >"$n/enable"; rmdir "$n"
    done
    rmdir "$NVMET_CFG/subsystems/$nqn"
}
wait_discovery() {
    local try
    for try in $(seq 40); do
        nvme discover -t "$NVMET_TRTYPE" -a "$IP" -s "$PORT" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    fail "$1 does not answer discovery on $IP:$PORT"
}
ns_dev() {
    local s n
    for s in /sys/class/nvme-subsystem/*/ /sys/class/nvme/*/; do
        [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$1" ] || continue
        for n in "$s"nvme*n*; do
            [[ ${n##*/} =~ ^nvme[0-9]+n[0-9]+$ ]] && [ -b "/dev/${n##*/}" ] || continue
            [ "$(cat "/sys/block/${n##*/}/nsid" 2>/dev/null)" = "$2" ] && { echo "/dev/${n##*/}"; return 0; }
        done
    done
    return 1
}
live_ctrl() {
    local c
    CTRL= NS=
    for _ in $(seq 100); do
        for c in /sys/class/nvme/nvme*; do
            [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$1" ] && [ "$(cat "$c/state")" = live ] && CTRL=${c##*/}
        done
        [ -n "$CTRL" ] && NS=$(ns_dev "$1" 1) && break
        sleep 0.2
    done
    [ -n "$CTRL" ] && [ -n "$NS" ] || fail "no live controller with namespace 1 of $1"
}
