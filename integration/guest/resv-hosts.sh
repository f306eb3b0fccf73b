# resv-hosts.sh: hosts that speak for themselves to one subsystem (sourced by resv.sh and
# rbd.sh). Each "host" is a controller of its own host NQN and host ID, written to
# /dev/nvme-fabrics; every command goes through that controller's character device
# (nvme-cli resv-*, io-passthru, get-log), whatever the multipath head does.
# Needs: IP, PORT, SUB, fail (common.sh); io needs BS (the block size) and /tmp/block.
# TR: the transport (rdma, the default, or tcp); it may differ per call (TR=tcp connect ...).
hostnqn() { echo "nqn.2014-08.org.nvmexpress:uuid:0000000$1-2026-4000-8000-00000000000$1"; }
hostid() { echo "0000000$1-2026-4000-8000-00000000000$1"; }
declare -A DEV
# connect NAME N [extra options]: controller NAME is host N's; sets DEV[NAME] (/dev/nvmeX)
connect() {
    local opts reply
    opts="transport=${TR:-rdma},traddr=$IP,trsvcid=$PORT,nqn=$SUB,hostnqn=$(hostnqn "$2"),hostid=$(hostid "$2"),nr_io_queues=1${3:+,$3}"
    reply=$(python3 -c 'import os,sys
fd = os.open("/dev/nvme-fabrics", os.O_RDWR)
os.write(fd, sys.argv[1].encode())
print(os.read(fd, 256).decode().strip())' "$opts") || fail "${WHO:-host}: connect $1 (host $2) refused"
    [[ $reply =~ instance=([0-9]+) ]] || fail "${WHO:-host}: connect $1: reply $reply"
    DEV[$1]=/dev/nvme${BASH_REMATCH[1]}
    for _ in $(seq 100); do
        [ "$(cat "/sys/class/nvme/nvme${BASH_REMATCH[1]}/state" 2>/dev/null)" = live ] && return 0
        sleep 0.1
    done
    fail "${WHO:-host}: $1 not live"
}
# status-of: an nvme-cli command -> "000", the status (SCT << 8 | SC, hex), or "host:..."
st() {
    local out rc=0 hex
    out=$(timeout 60 "$@" 2>&1 >/dev/null) || rc=$?
    [ $rc = 0 ] && { echo 000; return; }
    hex=$(grep -oE 'NVMe status: .*\((0x[0-9a-fA-F]+)\)' <<<"$out" | grep -oE '0x[0-9a-fA-F]+' | tail -n1) || true
    [ -n "$hex" ] && { printf '%03x\n' $(( hex & 0x7ff )); return; }
    echo "host:$(tr '\n' ' ' <<<"$out" | cut -c1-40 | tr ' ' '_')"
}
reg() { st nvme resv-register "${DEV[$1]}" -n 1 --nrkey="$2" --rrega="${3:-0}" --crkey="${4:-0}" ${5:+--iekey}; }
acq() { st nvme resv-acquire "${DEV[$1]}" -n 1 --crkey="$2" --prkey="${5:-0}" --rtype="$3" --racqa="${4:-0}"; }
rel() { st nvme resv-release "${DEV[$1]}" -n 1 --crkey="$2" --rtype="$3" --rrela="${4:-0}"; }
# report CTRL: "gen=G rtype=T regctl=N ptpls=P [cntlid/rcsts/host/rkey...]" (extended structure)
report() {
    nvme resv-report "${DEV[$1]}" -n 1 --eds --numd=1023 -b >/tmp/report.bin 2>/tmp/report.err ||
        { echo "status:$(st nvme resv-report "${DEV[$1]}" -n 1 --eds --numd=1023)"; return; }
    python3 - /tmp/report.bin <<'EOF'
import struct, sys
b = open(sys.argv[1], "rb").read()
gen, rtype, n = struct.unpack_from("<IBH", b, 0)
out = [f"gen={gen}", f"rtype={rtype}", f"regctl={n}", f"ptpls={b[9]}"]
for i in range(n):
    o = 64 + 64 * i
    if len(b) < o + 64:
        break
    cntlid, rcsts = struct.unpack_from("<HB", b, o)
    rkey, = struct.unpack_from("<Q", b, o + 8)
    out.append(f"{cntlid:#x}/{rcsts}/h{b[o + 31]}/{rkey:#x}")
print("_".join(out))
EOF
}
# notice CTRL: the next Reservation Notification log page: "count/type/available/nsid"
notice() {
    nvme get-log "${DEV[$1]}" --log-id=0x80 --log-len=64 -b >/tmp/notice.bin 2>/dev/null || { echo failed; return; }
    python3 -c 'import struct,sys; b=open(sys.argv[1],"rb").read(); c,t,a=struct.unpack_from("<QBB",b,0); n,=struct.unpack_from("<I",b,12); print(f"{c}/{t}/{a}/{n}")' /tmp/notice.bin
}
# io CTRL OP: one block through the controller: read, write, flush, zeroes, dsm
io() {
    local d=${DEV[$1]}
    case $2 in
        read) st nvme io-passthru "$d" --namespace-id=1 --opcode=0x02 --data-len="$BS" --read --cdw10=8 ;;
        write) st nvme io-passthru "$d" --namespace-id=1 --opcode=0x01 --data-len="$BS" --write --input-file=/tmp/block --cdw10=8 ;;
        flush) st nvme io-passthru "$d" --namespace-id=1 --opcode=0x00 ;;
        zeroes) st nvme io-passthru "$d" --namespace-id=1 --opcode=0x08 --cdw10=16 ;;
        dsm) st nvme io-passthru "$d" --namespace-id=1 --opcode=0x09 --cdw10=0 --cdw11=4 --data-len=16 --write --input-file=/tmp/range ;;
    esac
}
