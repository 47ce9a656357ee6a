#!/usr/bin/env python3
"""A publisher in another language: shardsub's wire format, written from
WIRE_FORMAT.md alone, over RESP on plain sockets, standard library only.

    wire_publish.py --wire DIR
    wire_publish.py --wire DIR --node HOST:PORT --partitions P \
                    --prefix NAME --channels C --messages M

It computes the tag tables itself and checks itself against every file in
DIR (shardcore/wire: tags-P.tsv, vectors*.tsv, every column: placements,
kept names and raw prefixes, history keys, the header and envelope bytes
and what a subscriber strips), and each history script's SHA-1 against
its file (src/history) and its text in WIRE_FORMAT.md; without --node
that is all it does. Then it reads the cluster's slot owners
with CLUSTER SLOTS, and sends M messages ("<seq>") to each of the channels
NAME:0 .. NAME:C-1 with SPUBLISH to the owner of each channel's slot,
pipelined per node, in order per channel. The last line says what it did:
"published N channels C zero-receivers Z". Exit status 1 on any failure.
"""

import argparse
import hashlib
import itertools
import os
import re
import socket
import struct
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


def _crc16_table():
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
        table.append(crc)
    return table


CRC16_TABLE = _crc16_table()


def crc16(data):
    """CRC16-XMODEM (polynomial 0x1021, init 0, no reflection, no final xor)."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ CRC16_TABLE[(crc >> 8) ^ b]
    return crc


def key_slot(key):
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16(key) % 16384


ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SLOT_TAGS = []


def slot_tags():
    """Slot -> tag: the first alphanumeric string, by length (1, 2, 3) and
    then in ALPHABET order, whose key slot is that slot."""
    if not _SLOT_TAGS:
        tags, missing = [None] * 16384, 16384
        for length in (1, 2, 3):
            for combo in itertools.product(ALPHABET, repeat=length):
                tag = bytes(combo)
                slot = crc16(tag) % 16384
                if tags[slot] is None:
                    tags[slot] = tag
                    missing -= 1
            if missing == 0:
                break
        assert missing == 0
        _SLOT_TAGS.extend(tags)
    return _SLOT_TAGS


class Partitions:
    """P partitions: partition k's slot is floor((2k + 1) * 16384 / (2P)),
    its tag that slot's tag."""

    def __init__(self, count):
        assert 1 <= count <= 16384, count
        tags = slot_tags()
        self.slots = [(2 * k + 1) * 16384 // (2 * count) for k in range(count)]
        self.tags = [tags[s] for s in self.slots]

    def partition_of(self, channel):
        return (channel_hash(channel) * len(self.tags)) >> 64

    def server_name(self, channel):
        return b"{" + self.tags[self.partition_of(channel)] + b"}." + channel


def history_keys(base):
    """The stream and meta hash keys of a recoverable channel's base."""
    return base + b":history", base + b":history-meta"


def history_header(epoch, offset):
    """What the publish script writes before the payload."""
    return b"\0SH1%d.%d\n" % (epoch, offset)


def envelope(sent_us):
    """The lag envelope: magic, then the publish time (u64, little-endian)."""
    return b"\0SS1" + struct.pack("<Q", sent_us)


HEADER = re.compile(rb"\0SH1([0-9]{1,20})\.([0-9]{1,20})\n")


def strip_header(payload):
    """A valid header's (epoch, offset) and what follows it, or None."""
    m = HEADER.match(payload)
    if m is None:
        return None
    epoch, offset = int(m.group(1)), int(m.group(2))
    if epoch > MASK or offset > MASK:
        return None
    return (epoch, offset), payload[m.end():]


def strip_envelope(payload):
    """The envelope's publish time and what follows it, or None."""
    if len(payload) < 12 or not payload.startswith(b"\0SS1"):
        return None
    return struct.unpack("<Q", payload[4:12])[0], payload[12:]


def rows(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                yield line.rstrip("\n").split("\t")


def expect(got, want, what):
    if got != want:
        raise SystemExit(f"{what}: computed {got} != file {want}")


def self_check(wire_dir):
    """Every exported table and every column of the vector files,
    recomputed from WIRE_FORMAT.md alone."""
    tables = 0
    for name in sorted(os.listdir(wire_dir)):
        if name.startswith("tags-") and name.endswith(".tsv"):
            parts = Partitions(int(name[5:-4]))
            want = list(rows(f"{wire_dir}/{name}"))
            got = [[str(k), str(s), t.decode()] for k, (s, t) in enumerate(zip(parts.slots, parts.tags))]
            expect(got, want, name)
            tables += 1
    p128 = Partitions(128)
    n = 0
    for cols in rows(f"{wire_dir}/vectors.tsv"):
        ch = bytes.fromhex(cols[0])
        got = [
            cols[0],
            f"{channel_hash(ch):016x}",
            str(p128.partition_of(ch)),
            p128.server_name(ch).hex(),
            str(key_slot(p128.server_name(ch))),
            str(shard_of(ch, 3)),
            str(shard_of(ch, 10)),
            str(worker_of(ch, 4)),
        ]
        expect(got, cols, f"vectors.tsv {ch!r}")
        n += 1
    cache = {}
    for cols in rows(f"{wire_dir}/vectors-partitions.tsv"):
        ch, count = bytes.fromhex(cols[0]), int(cols[1])
        parts = cache.setdefault(count, Partitions(count))
        k = parts.partition_of(ch)
        name = parts.server_name(ch)
        got = [cols[0], str(count), str(k), parts.tags[k].decode(), str(parts.slots[k]),
               name.hex(), str(key_slot(name))]
        expect(got, cols, f"vectors-partitions.tsv {ch!r} P={count}")
        n += 1
    for cols in rows(f"{wire_dir}/vectors-shards.tsv"):
        ch, count = bytes.fromhex(cols[0]), int(cols[1])
        got = [cols[0], str(count), str(shard_of(ch, count)), str(worker_of(ch, count))]
        expect(got, cols, f"vectors-shards.tsv {ch!r} N={count}")
        n += 1
    n += check_kept_names(wire_dir)
    n += check_history(wire_dir)
    print(f"self-check: {n} vectors and {tables} tag tables agree")


def check_kept_names(wire_dir):
    """Partitions off, and raw prefixes beside P partitions."""
    n = 0
    for cols in rows(f"{wire_dir}/vectors-kept.tsv"):
        ch = bytes.fromhex(cols[0])
        got = [cols[0], ch.hex(), str(key_slot(ch)), str(key_slot(ch))]
        expect(got, cols, f"vectors-kept.tsv {ch!r}")
        n += 1
    for cols in rows(f"{wire_dir}/vectors-raw.tsv"):
        ch, count = bytes.fromhex(cols[0]), int(cols[1])
        raws = [bytes.fromhex(r) for r in cols[2].split(",")]
        parts = Partitions(count)
        kept = any(ch.startswith(r) for r in raws)
        name = ch if kept else parts.server_name(ch)
        lane = count + key_slot(ch) if kept else parts.partition_of(ch)
        got = [cols[0], str(count), cols[2], str(int(kept)), str(lane), name.hex(),
               str(key_slot(name))]
        expect(got, cols, f"vectors-raw.tsv {ch!r} P={count} raw={raws!r}")
        n += 1
    return n


def check_history(wire_dir):
    """History keys, the bytes before a payload, what a subscriber strips,
    and the scripts' SHA-1 (of each file, and of its text in
    WIRE_FORMAT.md)."""
    n = 0
    for cols in rows(f"{wire_dir}/vectors-history-keys.tsv"):
        ch, count = bytes.fromhex(cols[0]), int(cols[1])
        base = ch if count == 0 else Partitions(count).server_name(ch)
        stream, meta = history_keys(base)
        got = [cols[0], str(count), base.hex(), stream.hex(), str(key_slot(stream)),
               meta.hex(), str(key_slot(meta))]
        expect(got, cols, f"vectors-history-keys.tsv {ch!r} P={count}")
        n += 1
    for cols in rows(f"{wire_dir}/vectors-payloads.tsv"):
        app = bytes.fromhex(cols[2])
        inner = app if cols[1] == "-" else envelope(int(cols[1])) + app
        if cols[0] == "-":
            wire = inner
        else:
            epoch, offset = (int(x) for x in cols[0].split("."))
            wire = history_header(epoch, offset) + inner
        expect([cols[0], cols[1], cols[2], wire.hex()], cols, f"vectors-payloads.tsv {cols[:3]}")
        n += 1
    for cols in rows(f"{wire_dir}/vectors-strip.tsv"):
        recoverable, enveloped, msg = cols[0] == "1", cols[1] == "1", bytes.fromhex(cols[2])
        at, sent, rest = "-", "-", msg
        h = strip_header(rest) if recoverable else None
        if h is not None:
            at, rest = f"{h[0][0]}.{h[0][1]}", h[1]
        e = strip_envelope(rest) if enveloped else None
        if e is not None:
            sent, rest = str(e[0]), e[1]
        expect(cols[:3] + [at, sent, rest.hex()], cols, f"vectors-strip.tsv {cols[:3]}")
        n += 1
    root = os.path.normpath(os.path.join(wire_dir, "..", ".."))
    with open(os.path.join(root, "WIRE_FORMAT.md"), encoding="utf-8") as f:
        doc = f.read()
    blocks = re.findall(r"^```lua\n(.*?)^```$", doc, re.M | re.S)
    scripts = list(rows(f"{wire_dir}/vectors-scripts.tsv"))
    expect(len(blocks), len(scripts), "lua blocks in WIRE_FORMAT.md")
    for (name, sha), text in zip(scripts, blocks):
        with open(os.path.join(root, "src", "history", name), "rb") as f:
            body = f.read()
        expect(hashlib.sha1(body).hexdigest(), sha, f"SHA-1 of src/history/{name}")
        expect(hashlib.sha1(text.encode()).hexdigest(), sha, f"SHA-1 of {name} in WIRE_FORMAT.md")
        expect(sha in doc, True, f"{name}'s SHA-1 named in WIRE_FORMAT.md")
        n += 1
    return n


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
    ap.add_argument("--node")
    ap.add_argument("--wire", required=True)
    ap.add_argument("--partitions", type=int, default=128)
    ap.add_argument("--prefix")
    ap.add_argument("--channels", type=int)
    ap.add_argument("--messages", type=int)
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--names", nargs="+", help="print where these channels live")
    a = ap.parse_args()
    self_check(a.wire)
    if a.names:
        # The lines of shardcore's wire_name example.
        parts = Partitions(a.partitions)
        print(f"# P = {a.partitions}, N = {a.servers}: channel, partition, tag, slot, "
              "server name, shard")
        for c in a.names:
            ch = c.encode()
            k = parts.partition_of(ch)
            print(f"{c}\t{k}\t{parts.tags[k].decode()}\t{parts.slots[k]}\t"
                  f"{parts.server_name(ch).decode()}\t{shard_of(ch, a.servers)}")
    if a.node is None:
        return 0
    if a.prefix is None or a.channels is None or a.messages is None:
        ap.error("--node needs --prefix, --channels and --messages")
    parts = Partitions(a.partitions)
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
