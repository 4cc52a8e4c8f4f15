#!/usr/bin/env python3
"""Replays the golden vectors and transcripts through the Python package `courier_rpc` (python/).

The package's codec and connection state machine (courier_rpc.wire, courier_rpc.session) were
written from docs/protocol.md alone, without reading the C++ engine or generate.py, to test that
the specification suffices; replaying through the package itself keeps the shipped implementation
and this test the same code. Standard library only.

    spec_peer.py [VECTORS_DIR]

replays every transcript of VECTORS_DIR/transcripts/ against `Session` (whole reads, then byte by
byte), decodes every golden vector VECTORS_DIR/*.hex against its .txt and encodes each well-formed
.txt back to the .hex bytes. Exit status 0 when all
agree; otherwise each disagreement is printed with both sides decoded.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from courier_rpc.session import Session  # noqa: E402
from courier_rpc.textform import decode_stream, encode_text, print_frame, unquote  # noqa: E402
from courier_rpc.wire import (ERRC, ERROR, HEADER, T_I32, T_STR, T_U32, ZERO_TOKEN,  # noqa: E402
                              ProtocolError, check_body, parse_header, typed)


# ---------------------------------------------------------------------------------------------------
# Replayer

def parse_hex(s):
    return bytes.fromhex("".join(s.split("#", 1)[0].split()))


def parse_kind(text):
    """A child's kind in a transcript: four characters, or `-` for the zero token."""
    if text == "-":
        return ZERO_TOKEN
    kind = unquote(text)
    if len(kind) != 4:
        raise Mismatch("a kind has four bytes (or is -): %r" % text)
    return kind


def frames_equal(expected, actual):
    """A written frame matches: bytes exact, except that an `error` frame's text is never compared.
    Texts are informative (section 9): a transcript's texts are the C++ engine's, which only the C++
    replay compares; another implementation need only agree on the code, the token and the ids."""
    if expected == actual:
        return True
    if len(expected) < HEADER or len(actual) < HEADER or expected[6] != ERROR or actual[6] != ERROR:
        return False
    try:
        e_items = typed(check_body(expected[HEADER:]), [T_U32, T_STR])
        a_items = typed(check_body(actual[HEADER:]), [T_U32, T_STR])
    except ProtocolError:
        return False
    he, ha = parse_header(expected), parse_header(actual)
    same = all(he[f] == ha[f] for f in ("version", "hlen", "kind", "flags", "token", "txn", "ctx"))
    return same and e_items[0] == a_items[0]


class Mismatch(Exception):
    pass


def replay(path, bytewise=False):
    lines = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            s = line.rstrip("\n")
            if s.startswith("#") or not s.strip():
                continue
            lines.append((n, s))
    role = lines[0][1].split()[1]
    sess = Session(role)
    handed = []  # what the owner observed: the session's events, and the results of its actions
    w = 0  # written frames matched so far
    h = 0  # handed-over frames matched so far

    def observe():
        handed.extend(e.text() for e in sess.events)
        sess.events.clear()

    def drained(n):
        observe()
        if w < len(sess.written):
            raise Mismatch("line %d: the peer wrote a frame the transcript does not list:\n%s"
                           % (n, indent(print_frame(sess.written[w]))))
        if h < len(handed):
            raise Mismatch("line %d: the owner observed '%s', not listed" % (n, handed[h]))

    for n, s in lines[1:]:
        op, _, rest = s.partition(" ")
        if op == "nonce":
            sess.nonce = int(rest)
            continue
        if op == "max_children":
            sess.max_children = int(rest)
            continue
        if op == "refuse":
            sess.refused_kinds.add(parse_kind(rest.strip()))
            continue
        if op in (">", "!"):
            drained(n)
        if op == ">":
            data = parse_hex(rest)
            if bytewise:
                for i in range(len(data)):
                    sess.receive(data[i:i + 1])
            else:
                sess.receive(data)
        elif op == "<":
            exp = parse_hex(rest)
            if w >= len(sess.written):
                raise Mismatch("line %d: expected the engine to write\n%s\nbut the peer wrote nothing (state %s)"
                               % (n, indent(print_frame(exp)), sess.state))
            act = sess.written[w]
            if not frames_equal(exp, act):
                raise Mismatch("line %d: frame differs\n  transcript:\n%s\n  peer:\n%s"
                               % (n, indent(print_frame(exp), 4), indent(print_frame(act), 4)))
            w += 1
        elif op == "^":
            exp = " ".join(rest.split())
            observe()
            if h >= len(handed):
                raise Mismatch("line %d: expected the owner to observe '%s', it observed nothing" % (n, exp))
            if handed[h] != exp:
                raise Mismatch("line %d: expected the owner to observe '%s', it observed '%s'"
                               % (n, exp, handed[h]))
            h += 1
        elif op == "=":
            if sess.state != rest.strip():
                raise Mismatch("line %d: state: transcript %s, peer %s" % (n, rest.strip(), sess.state))
        elif op == "?":
            name, *args, val = rest.split()
            got = getattr(sess, name)
            if args:  # an observable with an argument: `? usable <ctx> <0|1>`
                got = got(*(int(a) for a in args))
                name = " ".join([name] + args)
            got = int(got) if isinstance(got, bool) else got
            if got != int(val):
                raise Mismatch("line %d: %s: transcript %s, peer %s" % (n, name, val, got))
        elif op == "!":
            args = rest.split(" ", 1)
            cmd = args[0]
            words = rest.split()
            if cmd == "start":
                sess.start()
            elif cmd == "tick":
                sess.tick(int(args[1]))
            elif cmd == "close":
                sess.close(args[1] if len(args) > 1 else None)
            elif cmd == "call_sent":
                sess.call_sent()
            elif cmd == "reply_sent":
                sess.reply_sent(int(words[1]) if len(words) > 1 else 0)
            elif cmd == "open_context":
                name = " ".join(words[3:]).encode()
                cid = sess.open_context(int(words[1]), parse_kind(words[2]), name)
                observe()
                handed.append("opened ctx=%d" % cid)
            elif cmd == "close_context":
                ok = sess.close_context(int(words[1]), int(words[2]))
                observe()
                handed.append("close_context %s" % ("true" if ok else "false"))
            elif cmd == "eof":
                sess.eof()
            else:
                raise Mismatch("line %d: unknown action %r" % (n, s))
        else:
            raise Mismatch("line %d: unknown line %r" % (n, s))
    drained("end")


# Vectors read against a definition (section 7, typed messages; tests/vectors/README.md): the vector,
# its service's argument types, and what the reading gives (None: it fits).
TYPED = [
    ("call_add", [T_I32] * 5, None),
    ("call_add_trailing_items", [T_I32] * 5, "trailing_items"),
]


def check_typed(root):
    failed = 0
    for name, types, want in TYPED:
        with open(os.path.join(root, name + ".hex")) as f:
            data = b"".join(parse_hex(l) for l in f)
        got = None
        try:
            typed(check_body(data[HEADER:]), types)
        except ProtocolError as e:
            got = ERRC[e.code]
        if got == want:
            print("pass typed vector %s" % name)
        else:
            failed += 1
            print("FAIL typed vector %s: expected %s, got %s" % (name, want, got))
    return failed


def indent(text, k=4):
    return "\n".join(" " * k + l for l in text.split("\n"))


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    tdir = os.path.join(root, "transcripts")
    failed = 0
    names = sorted(f for f in os.listdir(tdir) if f.endswith(".txt"))
    for name in names:
        for bytewise in (False, True):
            try:
                replay(os.path.join(tdir, name), bytewise)
            except Mismatch as e:
                failed += 1
                print("FAIL transcript %s%s: %s" % (name, " (byte by byte)" if bytewise else "", e))
                break
        else:
            print("pass transcript %s" % name)
    vectors = sorted(f[:-4] for f in os.listdir(root) if f.endswith(".hex"))
    for v in vectors:
        with open(os.path.join(root, v + ".hex")) as f:
            data = b"".join(parse_hex(l) for l in f)
        with open(os.path.join(root, v + ".txt")) as f:
            want = [l.rstrip("\n") for l in f if l.strip()]
        texts, err = decode_stream(data)
        if len(want) == 1 and len(want[0].split()) == 2 and want[0].startswith("error "):
            ok = err == want[0].split()[1]
            got = "error %s" % err
        else:
            ok = err is None and texts == want
            got = "\n".join(texts) + ("\nerror %s" % err if err else "")
            encoded = encode_text(want)
            if ok and encoded != data:
                ok = False
                got = "encoding the .txt gives other bytes:\n%s\n  instead of\n%s" % (encoded.hex(" "), data.hex(" "))
        if ok:
            print("pass vector %s" % v)
        else:
            failed += 1
            print("FAIL vector %s:\n  expected:\n%s\n  decoded:\n%s" % (v, indent("\n".join(want)), indent(got)))
    failed += check_typed(root)
    print("%d transcripts, %d vectors, %d failed" % (len(names), len(vectors), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
