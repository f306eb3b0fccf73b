#!/usr/bin/env python3
"""nvmet-save.py FILE: write the kernel target's configuration (configfs) as the JSON
that `nvmetcli save FILE` writes, for `nvmf-target import-nvmetcli`.

Stand-in for nvmetcli, which is packaged neither in Debian (bookworm/trixie) nor on
PyPI, and whose upstream the lab and CI machines cannot reach. Same format: every
node dumps its writable `<group>_<attr>` files per attribute group (values stripped),
`enable` where the node has one, then its own keys; json.dumps(sort_keys=True,
indent=2) and a newline. If nvmetcli is installed, daemon.sh uses it instead.
"""
import json
import os
import stat
import sys

CFS = "/sys/kernel/config/nvmet"


def groups(path, names):
    d = {}
    for g in names:
        a = {}
        for f in sorted(os.listdir(path)):
            full = os.path.join(path, f)
            if not f.startswith(g + "_") or not os.path.isfile(full):
                continue
            if not os.stat(full).st_mode & stat.S_IWUSR:
                continue
            with open(full, encoding="utf-8") as fh:
                a[f.split("_", 1)[1]] = fh.read().strip()
        d[g] = a
    en = os.path.join(path, "enable")
    if os.path.isfile(en):
        with open(en, encoding="utf-8") as fh:
            d["enable"] = int(fh.read().strip())
    return d


def subdirs(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def namespace(sub, nsid):
    p = os.path.join(CFS, "subsystems", sub, "namespaces", nsid)
    d = groups(p, ["device", "ana", "resv"])
    d["nsid"] = int(nsid)
    with open(os.path.join(p, "ana_grpid"), encoding="utf-8") as fh:
        d["ana_grpid"] = int(fh.read().strip())
    return d


def subsystem(nqn):
    p = os.path.join(CFS, "subsystems", nqn)
    d = groups(p, ["attr"])
    d["nqn"] = nqn
    d["namespaces"] = [namespace(nqn, n) for n in sorted(subdirs(os.path.join(p, "namespaces")), key=int)]
    d["allowed_hosts"] = subdirs(os.path.join(p, "allowed_hosts"))
    return d


def port(pid):
    p = os.path.join(CFS, "ports", pid)
    d = groups(p, ["addr", "param"])
    d["portid"] = int(pid)
    d["subsystems"] = subdirs(os.path.join(p, "subsystems"))
    d["ana_groups"] = []
    for g in subdirs(os.path.join(p, "ana_groups")):
        a = groups(os.path.join(p, "ana_groups", g), ["ana"])
        a["grpid"] = int(g)
        d["ana_groups"].append(a)
    d["referrals"] = []
    for r in subdirs(os.path.join(p, "referrals")):
        a = groups(os.path.join(p, "referrals", r), ["addr"])
        a["name"] = r
        d["referrals"].append(a)
    return d


def host(nqn):
    d = groups(os.path.join(CFS, "hosts", nqn), ["dhchap"])
    d["nqn"] = nqn
    return d


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: nvmet-save.py FILE")
    root = groups(CFS, ["discovery"])
    root["subsystems"] = [subsystem(s) for s in subdirs(os.path.join(CFS, "subsystems"))]
    root["ports"] = [port(p) for p in sorted(subdirs(os.path.join(CFS, "ports")), key=int)]
    root["hosts"] = [host(h) for h in subdirs(os.path.join(CFS, "hosts"))]
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        fh.write(json.dumps(root, sort_keys=True, indent=2) + "\n")


main()
