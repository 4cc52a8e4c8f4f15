"""A misbehaving pipe server for the client's tests: started as `client @ python fake_server.py MODE`,
it holds the connection on fd 0 and does what MODE says."""

import os
import select
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from courier_rpc.wire import (CALL, CLOSE, HANDSHAKE, HEADER, REPLY, T_STR, T_U8, T_U32, T_U64, enc_item,  # noqa: E402
                              frame, parse_header)

sock = socket.socket(fileno=os.dup(0))
os.close(1)  # stray output must not reach the stream (docs/protocol.md section 1)
os.dup2(2, 1)


def handshake(max_frame=16 << 20):
    body = (enc_item(T_U8, 1) + enc_item(T_U8, 1) + enc_item(T_U64, 0) + enc_item(T_U32, max_frame)
            + enc_item(T_STR, "fake") + enc_item(T_U32, 1 << 20) + enc_item(T_U32, 32))
    return frame(HANDSHAKE, body)


def read_frame(kind=None):
    """The next frame (of `kind`: others are skipped, such as the client's reports of our faults)."""
    while True:
        h, raw = _read_one()
        if kind is None or h["kind"] == kind:
            return h, raw


def _read_one():
    buf = b""
    while len(buf) < HEADER:
        buf += _recv(HEADER - len(buf))
    h = parse_header(buf)
    while len(buf) < HEADER + h["blen"]:
        buf += _recv(HEADER + h["blen"] - len(buf))
    return h, buf


def _recv(n):
    data = sock.recv(n)
    if not data:
        raise EOFError
    return data


mode = sys.argv[1]
if mode == "garbage":
    sock.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
elif mode == "huge_first_frame":
    sock.sendall(frame(HANDSHAKE, b"")[:8] + (1 << 20).to_bytes(4, "little") + bytes(20))
elif mode == "silent":
    pass
elif mode == "bad_reply":
    sock.sendall(handshake())
    read_frame()  # the client's handshake
    h, _ = read_frame(CALL)
    sock.sendall(frame(REPLY, b"\x0c\x02\x00\x00\x00\xc3\x28", h["token"], h["txn"], h["ctx"]))  # bad UTF-8
    h, _ = read_frame(CALL)  # the next call: answered with items of another type than the signature's
    sock.sendall(frame(REPLY, enc_item(T_STR, "five"), h["token"], h["txn"], h["ctx"]))
elif mode == "never_reads":
    sock.sendall(handshake())
elif mode == "opens_child":
    # A server that opens a child context on its client, reflects and calls the client's services
    # there, and reports what it got to the client's DONE service: the package's session in the
    # acceptor's role (one state machine, both roles).
    from courier_rpc.session import Session
    from courier_rpc.wire import encode_values, to_python

    sess = Session("acceptor", name="fake")
    sess.start()
    got = []
    step = "handshake"
    while sess.state not in ("closed", "failed"):
        for f in sess.written:
            sock.sendall(f)
        sess.written.clear()
        data = sock.recv(65536)
        if not data:
            sess.eof()
            break
        sess.receive(data)
        for ev in sess.events:
            if ev.what in ("reply", "error"):
                got.append([ev.what, ev.txn] + to_python(ev.items))
        sess.events.clear()
        if step == "handshake" and sess.state == "open":
            cid = sess.open_context(1, b"WORK", b"job-1")
            sess.send_call(b"$SVC", b"", 2, cid)
            sess.send_call(b"TWIC", encode_values([21]), 3, cid)
            sess.send_call(b"TWIC", encode_values(["x"]), 4, cid)
            sess.send_call(b"TWIC", encode_values([1]), 5, 0)  # not served in the parent context
            sess.close_context(cid, 6)
            step = "calls"
        elif step == "calls" and len(got) == 6:
            sess.send_call(b"DONE", encode_values([repr(got)]), 7, 0)
            step = "done"
        elif step == "done" and len(got) == 7:
            sess.close("done")
    for f in sess.written:
        sock.sendall(f)
elif mode == "small_frames":
    sock.sendall(handshake(max_frame=65536))
    read_frame()
    while True:
        h, raw = read_frame()
        if h["kind"] == CALL:
            sock.sendall(frame(REPLY, raw[HEADER:], h["token"], h["txn"], h["ctx"]))
        elif h["kind"] == CLOSE:
            sock.sendall(frame(CLOSE))
            break
if mode == "never_reads":
    # Reads nothing, but sees the client hang up (POLLRDHUP comes with unread bytes still queued).
    p = select.poll()
    p.register(sock, select.POLLRDHUP)
    p.poll(30000)
    sys.exit(0)
# The rest of the conversation: a close is answered with ours; the end of the stream ends us.
sock.settimeout(30)
try:
    while True:
        h, _ = read_frame()
        if h["kind"] == CLOSE:
            sock.sendall(frame(CLOSE))
except (ConnectionError, OSError, EOFError):
    pass
