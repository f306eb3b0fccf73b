# spdk.sh (sourced in the guest): SPDK's nvmf_tgt as a benchmark peer. SPDK is not part of
# this project and nothing here builds it: a build of it is looked for in $SPDK_DIR (default
# build/spdk: bin/nvmf_tgt, lib/, scripts/rpc.py, python/). Callers set NQN, IP and BDEV.

SPDK_DIR=${SPDK_DIR:-build/spdk}

# Whether nvmf_tgt can run here (says why not); reserves its hugepages.
spdk_ready() {
  [ "${SPDK:-1}" != 0 ] || return 1
  [ -x "$SPDK_DIR/bin/nvmf_tgt" ] && [ -e "$SPDK_DIR/scripts/rpc.py" ] ||
    { echo "SPDK: no nvmf_tgt build in $SPDK_DIR (bin/nvmf_tgt, lib/, scripts/rpc.py, python/): SPDK not in this run"; return 1; }
  local missing
  missing=$(LD_LIBRARY_PATH=$SPDK_DIR/lib ldd "$SPDK_DIR/bin/nvmf_tgt" | awk '/not found/ {print $1}' | tr '\n' ' ')
  [ -z "$missing" ] || { echo "SPDK: nvmf_tgt lacks libraries in this guest ($missing): SPDK not in this run"; return 1; }
  # Its memory: 2 MiB hugepages (the VM has no 1 GiB ones).
  echo 384 >/proc/sys/vm/nr_hugepages
  mountpoint -q /dev/hugepages || mount -t hugetlbfs nodev /dev/hugepages
  echo "SPDK: $SPDK_DIR/bin/nvmf_tgt ($(LD_LIBRARY_PATH=$SPDK_DIR/lib "$SPDK_DIR/bin/nvmf_tgt" --version 2>/dev/null | head -1 || true)), $(awk '/HugePages_Total/ {print $2}' /proc/meminfo) hugepages"
}

# Starts nvmf_tgt with one reactor on the last vCPU, the transport $TR (rdma, the default,
# or tcp), an AIO bdev on
# $BDEV in subsystem $NQN (any host) listening on $IP:4420; SPDK_PID is its pid. Fails
# (nvmf_tgt stopped, its log's tail printed) if configuring it fails.
spdk_start() {
  local core=$(( $(nproc) - 1 )) rpc="python3 $SPDK_DIR/scripts/rpc.py -r 100"
  LD_LIBRARY_PATH=$SPDK_DIR/lib "$SPDK_DIR/bin/nvmf_tgt" -m "[$core]" -u >/tmp/spdk.log 2>&1 &
  SPDK_PID=$!
  if $rpc nvmf_create_transport -t "${TR:-rdma}" >/dev/null && $rpc bdev_aio_create "$BDEV" Aio0 512 >/dev/null &&
     $rpc nvmf_create_subsystem "$NQN" -a -s SPDK00000000000001 >/dev/null &&
     $rpc nvmf_subsystem_add_ns "$NQN" Aio0 >/dev/null &&
     $rpc nvmf_subsystem_add_listener "$NQN" -t "${TR:-rdma}" -a "$IP" -s 4420 -f ipv4 >/dev/null; then
    return 0
  fi
  echo "SPDK: configuring nvmf_tgt failed:"; tail -n 5 /tmp/spdk.log
  spdk_stop; return 1
}

spdk_stop() { kill "$SPDK_PID" 2>/dev/null; wait "$SPDK_PID" 2>/dev/null; SPDK_PID=; }
