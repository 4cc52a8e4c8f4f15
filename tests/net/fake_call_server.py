#!/usr/bin/env python3
"""A pipe server for courier_call_test.sh that misbehaves on purpose, written from docs/protocol.md.
  fake_call_server.py mismatch     $SVC says ADD_ returns an int32; ADD_ replies with a string
  fake_call_server.py noreflect    $SVC is not served (256); every other call is echoed back
It serves the socket pair on its stdin, as a pipe server does (section 1)."""
import os
import socket
import struct
import sys

sock = socket.socket(fileno=os.dup(0))
buf = b""


def frame(kind, token, txn, ctx, body):
    return b"COUR" + bytes([1, 32, kind, 0]) + struct.pack("<I", len(body)) + token + struct.pack("<QQ", txn, ctx) + body


def string(s):
    b = s.encode()
    return b"\x0c" + struct.pack("<I", len(b)) + b


def next_frame():
    global buf
    while True:
        if len(buf) >= 32:
            n = struct.unpack_from("<I", buf, 8)[0]
            if len(buf) >= 32 + n:
                f, buf = buf[:32 + n], buf[32 + n:]
                return f[6], f[12:16], struct.unpack_from("<Q", f, 16)[0], struct.unpack_from("<Q", f, 24)[0], f[32:]
        chunk = sock.recv(65536)
        if not chunk:
            sys.exit(0)
        buf += chunk


mode = sys.argv[1]
hello = (b"\x06\x01" b"\x06\x01" b"\x09" + struct.pack("<Q", 0) + b"\x08" + struct.pack("<I", 1 << 24) + string("fake") +
         b"\x08" + struct.pack("<I", 1 << 20) + b"\x08" + struct.pack("<I", 32))
sock.sendall(frame(1, b"\0\0\0\0", 0, 0, hello))
next_frame()  # the client's handshake
while True:
    kind, token, txn, ctx, body = next_frame()
    if kind == 10:  # close
        sock.sendall(frame(10, b"\0\0\0\0", 0, 0, b""))
        sys.exit(0)
    if kind != 3:
        continue
    if token == b"$SVC":
        if mode == "noreflect":
            sock.sendall(frame(5, token, txn, ctx, b"\x08" + struct.pack("<I", 256) + string("no service $SVC")))
        else:
            entry = (b"\x0e" + string("ADD_") + b"\x06\x01" + string("(int32 a, int32 b)") + string("int32") + string("") +
                     b"\x0f")
            sock.sendall(frame(4, token, txn, ctx, entry))
    elif mode == "mismatch":
        sock.sendall(frame(4, token, txn, ctx, string("five")))
    else:
        sock.sendall(frame(4, token, txn, ctx, body))
