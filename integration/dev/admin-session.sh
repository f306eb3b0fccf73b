#!/bin/bash
# admin-session.sh (runs in the guest): an administrator's session at the prompt, for the
# record: the Debian package installed, the daemon started, a kernel host connected, live
# changes with the host's view after each, a restart, the journal's error line, removal.
# Build the package first (packaging/build-deb), then:
#   integration/lab/run-guest -t 600 . integration/dev/admin-session.sh
# Not a test (integration/guest/daemon.sh checks all of it); the output is the transcript.
set -uo pipefail
IP=${LAB_IP:?}; NQN=nqn.2026-11.io.example:disk1
modprobe -a rdma_rxe ib_uverbs rdma_ucm nvme-rdma
modprobe brd rd_nr=3 rd_size=65536
rdma link add rxe0 type rxe netdev "${LAB_IF:-eth0}" 2>/dev/null
run() { echo "# $*"; "$@" 2>&1 | sed 's/^/  /'; echo; }
host_view() { # what the host sees
    echo "# (host) nvme list-subsys; lsblk"
    nvme list-subsys 2>&1 | sed 's/^/  /'
    lsblk -dno NAME,SIZE /dev/nvme*n* 2>/dev/null | sed 's/^/  /'
    echo
}
run dpkg -i build/debian/nvmf-target_*_amd64.deb
run grep -E '^(address|nqn|path|allow_any_host)' /etc/nvmf-target/nvmf-target.toml
run systemctl enable --now nvmf-target
run nvmf-target status
run nvme connect -t rdma -a "$IP" -n "$NQN" --ctrl-loss-tmo=30 --reconnect-delay=1
sleep 2; host_view
HOSTNQN=$(cat /etc/nvme/hostnqn)
run nvmf-target namespace add --subsystem "$NQN" --path /dev/ram1
sleep 2; host_view
run nvmf-target namespace add --subsystem "$NQN" --path /dev/sdz9
run nvmf-target host add --subsystem "$NQN" --host-nqn "$HOSTNQN"
run nvmf-target host add --subsystem "$NQN" --host-nqn nqn.2026-11.io.example:db2
run nvmf-target host del --subsystem "$NQN" --host-nqn '*'
host_view
run nvmf-target host del --subsystem "$NQN" --host-nqn "$HOSTNQN"
sleep 3; host_view
echo "# (host) dmesg | tail -2"; dmesg | grep nvme | tail -2 | sed 's/^/  /'; echo
run nvmf-target host add --subsystem "$NQN" --host-nqn "$HOSTNQN"
sleep 3; host_view
CNTLID=$(cat /sys/class/nvme/nvme0/cntlid)
run nvmf-target controller disconnect --subsystem "$NQN" --cntlid "$CNTLID"
sleep 3; echo "# (host) dmesg | tail -3"; dmesg | grep nvme | tail -3 | sed 's/^/  /'; echo
run nvmf-target namespace del --subsystem "$NQN" --nsid 2 --json
sleep 2; host_view
run nvmf-target namespace add --subsystem "$NQN" --path /dev/ram2 --nsid 2
run systemctl restart nvmf-target
sleep 4; host_view
run nvmf-target config show
sed -i 's/^port = 4420/port = 4421/' /etc/nvmf-target/nvmf-target.toml
run systemctl reload nvmf-target
sleep 1
run journalctl -u nvmf-target -b -p err -o cat
echo "# journalctl -u nvmf-target -b -p warning -o cat | grep refused"
journalctl -u nvmf-target -b -p warning -o cat | grep refused | sed 's/^/  /'; echo
run nvme disconnect -n "$NQN"
run dpkg -r nvmf-target
run systemctl is-active nvmf-target
run ls /etc/nvmf-target
run dpkg --purge nvmf-target
run ls /etc/nvmf-target
