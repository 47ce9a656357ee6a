#!/usr/bin/env python3
"""A publisher in another language: shardsub's wire format (WIRE_FORMAT.md)
from its exported files, over RESP on plain sockets, standard library only.

    publish.py --node HOST:PORT --wire DIR --partitions P \
               --prefix NAME --channels C --messages M

It checks itself against DIR/vectors.tsv, reads the cluster's slot owners
with CLUSTER SLOTS, and sends M messages ("<seq>") to each of the channels
NAME:0 .. NAME:C-1 with SPUBLISH to the owner of each channel's slot,
pipelined per node, in order per channel. The last line says what it did:
"published N channels C zero-receivers Z". Exit status 1 on any failure.
"""

import argparse
import socket
import sys

MASK = (1 << 64) - 1


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & MASK
    return h


def fmix64(h):
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK
    h ^= h >> 33
    return h


def channel_hash(data):
    return fmix64(fnv1a64(data))


def jump(key, buckets):
    buckets = max(buckets, 1)
    b, j = -1, 0
    while j < buckets:
        b = j
        key = (key * 2862933555777941789 + 1) & MASK
        j = int((b + 1) * (float(1 << 31) / float((key >> 33) + 1)))
    return b


def shard_of(data, n):
    return jump(channel_hash(data), n)


def worker_of(data, n):
    return jump(fmix64(channel_hash(data) ^ 0x9E3779B97F4A7C15), n)


def crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def key_slot(key):
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16(key) % 16384


def load_tags(path):
    tags = []
    with open(path, encoding="ascii") as f:
        for line in f:
            if line.startswith("#"):
                continue
            p, slot, tag = line.rstrip("\n").split("\t")
            assert int(p) == len(tags), f"{path}: partition {p} out of order"
            tags.append((int(slot), tag.encode()))
    return tags


class Partitions:
    def __init__(self, tags):
        self.tags = tags

    def partition_of(self, channel):
        return (channel_hash(channel) * len(self.tags)) >> 64

    def server_name(self, channel):
        return b"{" + self.tags[self.partition_of(channel)][1] + b"}." + channel


def self_check(wire_dir):
    """Every column of vectors.tsv, and every table slot, recomputed."""
    parts = Partitions(load_tags(f"{wire_dir}/tags-128.tsv"))
    for slot, tag in parts.tags:
        if key_slot(b"{" + tag + b"}.x") != slot:
            raise SystemExit(f"tag {tag!r}: slot {slot} is not its key slot")
    n = 0
    with open(f"{wire_dir}/vectors.tsv", encoding="ascii") as f:
        for line in f:
            if line.startswith("#"):
                continue
            cols = line.rstrip("\n").split("\t")
            ch = bytes.fromhex(cols[0])
            got = [
                cols[0],
                f"{channel_hash(ch):016x}",
                str(parts.partition_of(ch)),
                parts.server_name(ch).hex(),
                str(key_slot(parts.server_name(ch))),
                str(shard_of(ch, 3)),
                str(shard_of(ch, 10)),
                str(worker_of(ch, 4)),
            ]
            if got != cols:
                raise SystemExit(f"vector mismatch for {ch!r}: {got} != {cols}")
            n += 1
    print(f"self-check: {n} vectors and {len(parts.tags)} tags agree")


class Resp:
    """A minimal RESP2 client: commands as arrays of bulk strings."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=10)
        self.buf = b""

    @staticmethod
    def encode(*args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def send(self, data):
        self.sock.sendall(data)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            raise RuntimeError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def call(self, *args):
        self.send(self.encode(*args))
        return self.reply()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--node", required=True)
    ap.add_argument("--wire", required=True)
    ap.add_argument("--partitions", type=int, default=128)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--channels", type=int, required=True)
    ap.add_argument("--messages", type=int, required=True)
    a = ap.parse_args()
    self_check(a.wire)
    parts = Partitions(load_tags(f"{a.wire}/tags-{a.partitions}.tsv"))
    host, port = a.node.rsplit(":", 1)
    seed = Resp(host, int(port))
    owner = {}
    for entry in seed.call("CLUSTER", "SLOTS"):
        start, end, primary = entry[0], entry[1], entry[2]
        for s in range(start, end + 1):
            owner[s] = (primary[0].decode(), primary[1])
    conns, per_node = {}, {}
    for i in range(a.channels):
        name = parts.server_name(f"{a.prefix}:{i}".encode())
        node = owner[key_slot(name)]
        per_node.setdefault(node, []).append(name)
    published = zero = 0
    for node, names in per_node.items():
        c = conns.setdefault(node, Resp(*node))
        # Message k of every channel before message k+1 of any: in order
        # per channel, pipelined in one write per node.
        batch = [Resp.encode("SPUBLISH", n, str(k)) for k in range(a.messages) for n in names]
        c.send(b"".join(batch))
        for _ in batch:
            receivers = c.reply()
            published += 1
            zero += receivers == 0
    print(f"published {published} channels {a.channels} zero-receivers {zero}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
