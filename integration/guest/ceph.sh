# ceph.sh: sourced by guest scripts that need a Ceph cluster. Needs IP and fail().
#   ceph_up        a one-node cluster in this guest: one monitor, one manager, one OSD on
#                  memstore (RAM), pools of size 1, no cephx, and the pool "rbd" initialised
#                  for RBD; about 50 s under TCG. /etc/ceph/ceph.conf points at it.
#   ceph_down      stops its daemons
# (From the lab's examples/ceph-single-node.sh.) CEPH_MEMSTORE_BYTES sizes the OSD's store.
# ceph_setup CMD...: one idempotent cluster-setup command (ceph or rbd), retried: a monitor
# still settling under TCG sometimes refuses the CLI ("Error EPERM: problem getting command
# descriptions from mon"), seen once in CI right after the monitor had accepted a command.
ceph_setup() {
    local try
    for try in 1 2 3 4 5 6; do
        timeout 60 "$@" 2>/tmp/ceph-setup.err && return 0
        echo "$* (attempt $try): $(cat /tmp/ceph-setup.err)" >&2
        sleep 2
    done
    fail "$* failed 6 times: $(cat /tmp/ceph-setup.err)"
}
ceph_up() {
    local fsid osd_uuid id
    command -v ceph-mon >/dev/null || fail "ceph-mon missing in the guest image (rebuild: integration/lab/build-image)"
    fsid=$(cat /proc/sys/kernel/random/uuid)
    rm -rf /var/lib/ceph/mon/ceph-lab /var/lib/ceph/osd/ceph-0 /var/lib/ceph/mgr/ceph-lab
    mkdir -p /etc/ceph /var/lib/ceph/mon/ceph-lab /var/lib/ceph/osd/ceph-0 /var/lib/ceph/mgr/ceph-lab \
        /var/run/ceph /var/log/ceph
    cat >/etc/ceph/ceph.conf <<CONF
[global]
fsid = $fsid
mon initial members = lab
mon host = $IP
public network = ${IP%.*}.0/24
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon warn on pool no redundancy = false
mon data avail crit = 1
osd crush chooseleaf type = 0
osd objectstore = memstore
osd crush update on start = false
osd class update on start = false
memstore device bytes = ${CEPH_MEMSTORE_BYTES:-1610612736}
osd memory target = 939524096
ms bind ipv6 = false
CONF
    monmaptool --create --add lab "$IP" --fsid "$fsid" /tmp/monmap >/dev/null
    ceph-mon --mkfs -i lab --monmap /tmp/monmap
    ceph-mon -i lab
    for _ in $(seq 60); do timeout 10 ceph -s >/dev/null 2>&1 && break; sleep 1; done
    ceph-mgr -i lab
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    id=$(ceph_setup ceph osd create "$osd_uuid")
    ceph-osd -i "$id" --mkfs --osd-uuid "$osd_uuid" >/tmp/osd-mkfs.log 2>&1 \
        || { tail -5 /tmp/osd-mkfs.log; fail "ceph-osd --mkfs failed"; }
    ceph_setup ceph osd crush add-bucket lab host >/dev/null
    ceph_setup ceph osd crush move lab root=default >/dev/null
    ceph_setup ceph osd crush add "osd.$id" 1.0 host=lab >/dev/null
    ceph-osd -i "$id" 2>/tmp/osd.err || { cat /tmp/osd.err; fail "ceph-osd failed to start"; }
    for _ in $(seq 90); do ceph osd stat 2>/dev/null | grep -q '1 up' && break; sleep 1; done
    ceph_setup ceph osd pool create rbd 16 16 >/dev/null
    ceph osd pool set rbd size 1 --yes-i-really-mean-it >/dev/null 2>&1 || true
    ceph_setup rbd pool init rbd
    for _ in $(seq 90); do
        ceph -s 2>/dev/null | grep -q 'active+clean' && ! ceph -s | grep -qE 'creating|peering|unknown' && break
        sleep 1
    done
    ceph -s 2>/dev/null | grep -q 'active+clean' || { ceph -s; fail "the Ceph cluster did not become clean"; }
}
ceph_down() {
    pkill -x ceph-osd 2>/dev/null; pkill -x ceph-mgr 2>/dev/null; pkill -x ceph-mon 2>/dev/null
    return 0
}
