#!/usr/bin/env python3
"""An llmtrace producer in plain Python (stdlib only): a toy engine that
streams its requests' lifecycle to `llmtrace collect` in the binary encoding
of transport (doc.go), or as JSON lines with --json.

    llmtrace collect -listen unix:/tmp/llmtrace.sock &
    python3 producer.py unix:/tmp/llmtrace.sock 5 [--json] [--token-file FILE]

A collector started with -token-file (or $LLMTRACE_COLLECTOR_TOKEN) wants
its token in the HELLO from TCP producers: --token-file FILE, else the same
variable. The encoder is the first 35 lines below; the rest is the toy
engine."""
import json, os, socket, struct, sys, time

KINDS = ("ARRIVED INPUT_PROCESSED QUEUED PREFILLING PREEMPTED DECODING DETOKENIZED FINISHED "
         "REMOTE_KV_WAIT REMOTE_KV_READY ENCODING ENCODED").split()
FIELDS = {"num_prompt_tokens": 0x01, "num_computed_tokens": 0x02, "num_cached_tokens": 0x03,
          "num_new_tokens": 0x04, "busy_ns": 0x05, "num_output_tokens": 0x06, "num_remote_tokens": 0x07,
          "kv_bytes": 0x08, "num_draft_tokens": 0x09, "num_accepted_tokens": 0x0A, "num_items": 0x0B,
          "num_encoder_tokens": 0x0C, "encoder_cache_hit": 0x0D, "model": 0x40, "operation": 0x41,
          "scope": 0x42, "finish_reason": 0x43, "error_type": 0x44, "pd_role": 0x46, "kv_source": 0x47,
          "kv_status": 0x48, "lora_adapter": 0x49}
SIDES = {None: 0, "frontend": 1, "engine": 2}

def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))

def string(s):
    b = s.encode()
    return uvarint(len(b)) + b

def frame(ftype, body):  # [u32 length][u8 type][body]
    return struct.pack(">IB", len(body) + 1, ftype) + body

def hello(name, token=""):  # the clock anchor: wall and monotonic clock at one instant
    body = uvarint(time.time_ns()) + uvarint(time.monotonic_ns()) + string(name)
    if token:
        body += b"\x40" + string(token)  # field 0x40: the collector's token
    return b"LLMT\x01" + frame(0x01, body)

def update(kind, rid, side=None, **fields):  # times travel on the monotonic clock
    body = bytes([KINDS.index(kind) + 1, SIDES[side] | 0x04]) + uvarint(time.monotonic_ns()) + string(rid)
    for k, v in fields.items():
        f = FIELDS[k]
        body += bytes([f]) + (uvarint(v) if f < 0x40 else string(v))
    return frame(0x02, body)

# The same in JSON lines: one object per line, mono_ts in seconds.
def hello_json(name, token=""):
    d = {"type": "HELLO", "producer": name, "wall_ts": time.time_ns() / 1e9, "mono_ts": time.monotonic_ns() / 1e9}
    if token:
        d["token"] = token
    return json.dumps(d).encode() + b"\n"

def update_json(kind, rid, side=None, **fields):
    d = {"request_id": rid, "type": kind, "mono_ts": time.monotonic_ns() / 1e9}
    if side:
        d["side"] = side
    d.update(fields)
    return json.dumps(d).encode() + b"\n"

def connect(addr):
    net, _, where = addr.partition(":")
    if net == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(where)
    else:
        host, _, port = where.rpartition(":")
        s = socket.create_connection((host, int(port)))
    return s

def token(argv):
    if "--token-file" in argv:
        with open(argv[argv.index("--token-file") + 1]) as f:
            return f.readline().strip()
    return os.environ.get("LLMTRACE_COLLECTOR_TOKEN", "").strip()

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--token-file" in sys.argv:
        args.remove(sys.argv[sys.argv.index("--token-file") + 1])
    addr, n = args[0], int(args[1]) if len(args) > 1 else 3
    use_json = "--json" in sys.argv
    h, u = (hello_json, update_json) if use_json else (hello, update)
    s = connect(addr)
    s.sendall(h("toy-python-engine", token(sys.argv)))
    for i in range(n):
        rid = "py-%d" % i
        s.sendall(u("ARRIVED", rid, model="toy-llm", operation="chat"))
        time.sleep(0.001)
        s.sendall(u("INPUT_PROCESSED", rid, num_prompt_tokens=100 + i))
        s.sendall(u("QUEUED", rid))
        time.sleep(0.002)
        s.sendall(u("PREFILLING", rid, num_computed_tokens=100 + i, num_cached_tokens=16))
        for _ in range(4):
            time.sleep(0.003)
            s.sendall(u("DECODING", rid) + u("DETOKENIZED", rid, num_new_tokens=1))
        s.sendall(u("FINISHED", rid, side="engine", finish_reason="length"))
        s.sendall(u("FINISHED", rid, finish_reason="length"))
    s.close()

if __name__ == "__main__":
    main()
