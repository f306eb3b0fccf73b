#!/usr/bin/env python3
"""Writes the kept seed corpus of each fuzz target (fuzz/seeds/<target>/): valid inputs
that reach deep (a Connect that succeeds, an Identify on an enabled controller, a
normal request life), from which libFuzzer mutates. Run from anywhere; rewrites the
seeds it makes and leaves other files there alone."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OPEN = b"nqn.2026-11.io.fuzz:open"
HOST = b"nqn.2026-11.io.fuzz:host"


def cmd(opc, nsid=0, cdw=None, sgl=None, flags=0x40, fctype=None, cid=1):
    b = bytearray(64)
    b[0] = opc
    b[1] = flags
    struct.pack_into("<HI", b, 2, cid, nsid)
    if fctype is not None:
        b[4] = fctype
    for n, v in (cdw or {}).items():
        struct.pack_into("<I", b, 4 * n, v)
    if sgl is not None:
        b[24:40] = sgl
    return bytes(b)


def keyed(length, key=0x1234, invalidate=False, addr=0x10000):
    return struct.pack("<Q", addr) + length.to_bytes(3, "little") + struct.pack("<I", key) + bytes([0x4F if invalidate else 0x40])


def in_capsule(length, offset=0):
    return struct.pack("<QI", offset, length) + bytes(3) + bytes([0x01])


def connect(qid, sqsize, kato=5000, recfmt=0):
    c = bytearray(cmd(0x7F, fctype=0x01, sgl=keyed(1024)))
    struct.pack_into("<HHHHI", c, 40, recfmt, qid, sqsize, 0, kato)
    return bytes(c)


def connect_data(cntlid=0xFFFF, sub=OPEN, host=HOST):
    d = bytearray(1024)
    d[0:16] = b"fuzz-host-id-001"
    struct.pack_into("<H", d, 16, cntlid)
    d[256:256 + len(sub)] = sub
    d[512:512 + len(host)] = host
    return bytes(d)


def prop(set_, offset, value=0, eight=False):
    c = bytearray(cmd(0x7F, fctype=0x00 if set_ else 0x04, sgl=keyed(0)))
    c[40] = 1 if eight else 0
    struct.pack_into("<I", c, 44, offset)
    struct.pack_into("<Q", c, 48, value)
    return bytes(c)


def cm_req(recfmt, qid, hrqsize, hsqsize):
    return struct.pack("<HHHH", recfmt, qid, hrqsize, hsqsize) + bytes(24)


def dsm_range(slba, nlb):
    return struct.pack("<IIQ", 0, nlb, slba)


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


read8 = cmd(0x02, nsid=1, cdw={10: 16, 12: 7}, sgl=keyed(8 * 4096, invalidate=True))
write1 = cmd(0x01, nsid=1, cdw={10: 0, 12: 0}, sgl=in_capsule(4096))
identify = cmd(0x06, cdw={10: 1}, sgl=keyed(4096))
smart = cmd(0x02, nsid=0xFFFFFFFF, cdw={10: 2 | (127 << 16)}, sgl=keyed(512))
ana_log = cmd(0x02, cdw={10: 0x0C | (1023 << 16)}, sgl=keyed(4096))
disc_log = cmd(0x02, cdw={10: 0x70 | (1023 << 16)}, sgl=keyed(4096))
nqueues = cmd(0x09, cdw={10: 7, 11: 0x00030003}, sgl=keyed(0))
aer = cmd(0x0C, sgl=keyed(0))
ka = cmd(0x18, sgl=keyed(0))
cc_en = (6 << 16) | (4 << 20) | 1

# wire: one of each format
write("wire", "command-read", read8)
write("wire", "completion", struct.pack("<IIHHHH", 1, 0, 5, 31, 7, 0x4002 << 1))
write("wire", "cm-request", cm_req(0, 1, 128, 127))
write("wire", "connect-data", connect_data())
write("wire", "identify-ns", struct.pack("<QQQ", 1 << 18, 1 << 18, 1 << 18) + bytes(101) + bytes([0]) + bytes(2) + bytes(4096 - 128 - 4) + bytes(4))
write("wire", "ana-log", struct.pack("<QHxxxxxx", 3, 1) + struct.pack("<IIQB", 1, 1, 3, 1) + bytes(15) + struct.pack("<I", 1))
# cm_request
write("cm_request", "admin", cm_req(0, 0, 32, 31))
write("cm_request", "io", cm_req(0, 3, 128, 127))
# data_plan: command + in-capsule bytes that arrived
write("data_plan", "read-keyed-invalidate", read8 + struct.pack("<I", 0))
write("data_plan", "write-in-capsule", write1 + struct.pack("<I", 4096))
# connect: cm qid, cm hsqsize, command, data
write("connect", "admin", bytes([0]) + struct.pack("<H", 31) + connect(0, 31) + connect_data())
write("connect", "closed-subsystem", bytes([0]) + struct.pack("<H", 31) + connect(0, 31) + connect_data(sub=b"nqn.2026-11.io.fuzz:closed"))
write("connect", "discovery", bytes([0]) + struct.pack("<H", 31) + connect(0, 31, kato=0) + connect_data(sub=b"nqn.2014-08.org.nvmexpress.discovery"))
# admin: flags, then (command, 2-byte length, data)*
def admin(*cmds):
    out = b""
    for c, n, data in cmds:
        out += c + struct.pack("<H", n) + data
    return out
write("admin", "identify-logs-features", bytes([0]) + admin((identify, 4096, b""), (smart, 512, b""), (ana_log, 4096, b""), (nqueues, 0, b""), (aer, 0, b""), (ka, 0, b"")))
write("admin", "enable-by-property", bytes([1]) + admin((prop(True, 0x14, cc_en), 0, b""), (prop(False, 0x1C), 0, b""), (identify, 4096, b""), (prop(True, 0x14, cc_en | (1 << 14)), 0, b"")))
write("admin", "discovery-log", bytes([2]) + admin((disc_log, 4096, b""), (identify, 4096, b"")))
# io: command, sgl length, data
write("io", "read", read8 + struct.pack("<I", 8 * 4096))
write("io", "dsm-deallocate", cmd(0x09, nsid=1, cdw={10: 1, 11: 4}, sgl=keyed(4096)) + struct.pack("<I", 4096) + dsm_range(100, 8) + dsm_range(200, 4))
write("io", "write-zeroes-fua-512", cmd(0x08, nsid=5, cdw={10: 8, 12: (1 << 30) | 15}, sgl=keyed(0)) + struct.pack("<I", 0))
# lifecycle: arrival flags, events (see model::Ev::from_byte)
write("lifecycle", "write-by-read", bytes([0x03, 0, 1, 2, 3, 12, 4, 7, 8, 11]))
write("lifecycle", "read-then-disconnect", bytes([0x01, 0, 3, 9, 12, 4, 11]))
# config_reload: the example configuration, then one with a namespace more
etc = os.path.join(HERE, "..", "..", "etc", "nvmf-target.toml")
with open(etc, "rb") as f:
    example = f.read()
quick = b"""[target]
workers = 2

[[listener]]
address = "10.0.0.1:4420"

[[subsystem]]
nqn = "nqn.2026-11.io.fuzz:open"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = "null"
size = "1G"
"""
write("config_reload", "example", example + b"\0" + example)
write("config_reload", "quick-grow", quick + b"\0" + quick.replace(b'size = "1G"', b'size = "2G"'))
# auth: policy byte, then frames (raw) or XOR noise (honest host, bit 3)
negotiate = bytes([0, 0, 0, 0, 1, 0, 0, 1]) + bytes([1, 0, 3, 6]) + bytes([1, 2, 3]) + bytes(27) + bytes([0, 1, 2, 3, 4, 5]) + bytes(24)
write("auth", "negotiate-then-receive", bytes([0]) + bytes([0]) + struct.pack("<H", len(negotiate)) + negotiate + bytes([1]) + struct.pack("<H", 4096))
write("auth", "honest-host", bytes([8]))
write("auth", "honest-host-bidirectional-2048", bytes([8 | 4 | 2 | 1]))
# reservation: ptpl byte, then [host][opcode pick 0 reg/1 acq/2 rel][cdw10][crkey][key2] records
def resv(host, pick, cdw10, crkey=0, key2=0):
    return bytes([host, pick]) + struct.pack("<IQQ", cdw10, crkey, key2)
write("reservation", "register-acquire-preempt-release", bytes([1]) + resv(0, 0, 3 << 30, 0, 1) + resv(1, 0, 0, 0, 2) + resv(0, 1, 1 << 8, 1) + resv(1, 1, 1 | 2 << 8, 2, 1) + resv(1, 2, 2 << 8, 2) + resv(2, 2, 1, 3))
write("reservation", "all-registrants", bytes([0]) + resv(0, 0, 0, 0, 5) + resv(1, 0, 0, 0, 6) + resv(0, 1, 6 << 8, 5) + resv(1, 1, 2 | 1 << 8, 6, 0) + resv(0, 0, 1, 5))
# queue: [op] records (op & 7: 0 connect admin, 1 connect I/O, 2 enable, 3/4 raw capsule
# [64 bytes][n][n*32 bytes of in-capsule data], 5 run, 6 clock, 7 disconnect; bit 7: I/O queue)
IOQ = 0x80
read_keyed = cmd(0x02, nsid=1, cdw={12: 7}, sgl=keyed(4096, key=1, addr=0, invalidate=True), cid=100)
write_capsule = cmd(0x01, nsid=1, cdw={10: 16, 12: 7}, sgl=in_capsule(4096), cid=101)
write_keyed = cmd(0x01, nsid=5, cdw={10: 64, 12: 15}, sgl=keyed(8192, key=2, addr=4096), cid=102)
flush = cmd(0x00, nsid=1, sgl=keyed(0), cid=103)
aer = cmd(0x0C, sgl=keyed(0), cid=104)
setup_q = bytes([0, 2, 5, 1, 5])
write("queue", "read-write-flush", setup_q + bytes([IOQ | 3]) + read_keyed + bytes([0]) + bytes([IOQ | 3]) + write_capsule + bytes([128]) + bytes(range(256)) * 16 + bytes([IOQ | 3]) + write_keyed + bytes([0]) + bytes([IOQ | 3]) + flush + bytes([0, 5]))
write("queue", "aer-then-keep-alive-expiry", setup_q + bytes([3]) + aer + bytes([0, 5, 6 | (100 << 3) & 0x78, 6 | 0x78, 5]))
write("queue", "disconnect-mid-io", setup_q + bytes([IOQ | 3]) + write_keyed + bytes([0]) + bytes([IOQ | 7, 5]))
