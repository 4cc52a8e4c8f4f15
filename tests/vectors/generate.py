#!/usr/bin/env python3
"""Writes the golden vectors (*.hex and *.txt) from the definitions below.

This is a second, independent implementation of docs/protocol.md (it shares no code with the C++ codec),
so the C++ test that checks every vector both ways also checks that the spec alone is enough to speak
the protocol. Run it only when the format or the set of vectors changes on purpose:
    python3 tests/vectors/generate.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

KINDS = {"handshake": 1, "send": 2, "call": 3, "reply": 4, "error": 5, "context_open": 6,
         "context_close": 7, "ping": 8, "pong": 9, "close": 10}
TAGS = {"bool": 0x01, "int8": 0x02, "int16": 0x03, "int32": 0x04, "int64": 0x05, "uint8": 0x06,
        "uint16": 0x07, "uint32": 0x08, "uint64": 0x09, "float32": 0x0a, "float64": 0x0b,
        "string": 0x0c, "binary": 0x0d, "list": 0x0e, "end": 0x0f}
FMT = {"int8": "<b", "int16": "<h", "int32": "<i", "int64": "<q", "uint8": "<B", "uint16": "<H",
       "uint32": "<I", "uint64": "<Q", "float32": "<f", "float64": "<d"}
NULL = b"\0\0\0\0"


def quote(b):
    out = '"'
    for c in b:
        if c in (0x22, 0x5c):
            out += "\\" + chr(c)
        elif 0x20 <= c <= 0x7e:
            out += chr(c)
        else:
            out += "\\x%02x" % c
    return out + '"'


def float_bytes(fmt, text):
    if text.startswith("nan:0x"):
        bits = int(text[6:], 16)
        return struct.pack("<I" if fmt == "<f" else "<Q", bits)
    if text == "nan":
        return struct.pack("<I", 0x7fc00000) if fmt == "<f" else struct.pack("<Q", 0x7ff8000000000000)
    return struct.pack(fmt, float(text))


def encode_item(item):
    """item: (type, value) with value as the text form for numbers; returns (bytes, text, comment)."""
    t, v = item[0], item[1] if len(item) > 1 else None
    tag = bytes([TAGS[t]])
    if t in ("list", "end"):
        return tag, t, t
    if t == "bool":
        text = "bool " + ("true" if v else "false")
        return tag + bytes([1 if v else 0]), text, text
    if t in ("float32", "float64"):
        return tag + float_bytes(FMT[t], v), t + " " + v, t + " " + v
    if t in FMT:
        return tag + struct.pack(FMT[t], v), "%s %d" % (t, v), "%s %d" % (t, v)
    if t == "string":
        raw = v.encode("utf-8") if isinstance(v, str) else v
        return tag + struct.pack("<I", len(raw)) + raw, "string " + quote(raw), "string, length %d: %s" % (len(raw), quote(raw))
    if t == "binary":
        return tag + struct.pack("<I", len(v)) + v, "binary 0x" + v.hex(), "binary, length %d" % len(v)
    raise ValueError(t)


def frame(kind, token, txn, ctx, items):
    body, lines, notes = b"", [], []
    depth = 0
    for it in items:
        b, text, note = encode_item(it)
        if it[0] == "end":
            depth -= 1
        lines.append("  " * (depth + 1) + text)
        notes.append((b, note))
        if it[0] == "list":
            depth += 1
        body += b
    header = (b"COUR" + bytes([1, 32, KINDS[kind], 0]) + struct.pack("<I", len(body)) + token +
              struct.pack("<QQ", txn, ctx))
    text = "%s token=%s txn=%d ctx=%d\n" % (kind, quote(token), txn, ctx) + "".join(l + "\n" for l in lines)
    hexl = ["# " + text.splitlines()[0],
            "%-40s # magic \"COUR\"" % "43 4f 55 52",
            "%-40s # version 1" % "01",
            "%-40s # header length 32" % "20",
            "%-40s # kind %s (%d)" % ("%02x" % KINDS[kind], kind, KINDS[kind]),
            "%-40s # flags" % "00",
            "%-40s # body length %d" % (struct.pack("<I", len(body)).hex(" "), len(body)),
            "%-40s # token %s" % (token.hex(" "), quote(token)),
            "%-40s # transaction id %d" % (struct.pack("<Q", txn).hex(" "), txn),
            "%-40s # context id %d" % (struct.pack("<Q", ctx).hex(" "), ctx)]
    for b, note in notes:
        hexl.append("%-40s # %s" % (b.hex(" "), note))
    return header + body, text, hexl


GOOD = {
    "call_add": [("call", b"ADD_", 1, 0, [("int32", 1), ("int32", 2), ("int32", 3), ("int32", 4), ("int32", 5)])],
    # A well-formed frame that does not fit its definition, ADD_(int32 x5): two items after the last
    # argument. A receiver reading it against ADD_ reports trailing_items (docs/protocol.md section 7).
    "call_add_trailing_items": [("call", b"ADD_", 1, 0, [
        ("int32", 1), ("int32", 2), ("int32", 3), ("int32", 4), ("int32", 5), ("float64", "2.5"), ("int32", 6)])],
    "send_integers": [("send", b"INTS", 0, 0, [
        ("bool", True), ("bool", False),
        ("int8", -128), ("int8", 127), ("int16", -32768), ("int16", 32767),
        ("int32", -2147483648), ("int32", 2147483647), ("int64", -9223372036854775808), ("int64", 9223372036854775807),
        ("uint8", 255), ("uint16", 65535), ("uint32", 4294967295), ("uint64", 18446744073709551615),
        ("int32", -1), ("uint64", 0)])],
    "send_floats": [("send", b"FLTS", 0, 0, [
        ("float32", "1.5"), ("float32", "-0"), ("float32", "inf"), ("float32", "-inf"), ("float32", "nan"),
        ("float32", "3.4028235e+38"), ("float64", "0.1"), ("float64", "-2.5e+300"), ("float64", "5e-324"),
        ("float64", "nan"), ("float64", "nan:0xfff0000000000001"), ("float64", "-inf")])],
    "send_strings": [("send", b"STRS", 0, 0, [
        ("string", ""), ("string", "hello"), ("string", "gr\u00fc\u00df \u20ac \U0001F600"),
        ("string", "quote \" backslash \\ newline \n tab \t nul \0"),
        ("binary", b""), ("binary", bytes([0x00, 0xff, 0x80, 0x7f]))])],
    "call_nested_lists": [("call", b"TREE", 9, 0, [
        ("int32", 1), ("list",), ("string", "a"), ("list",), ("int8", -1), ("end",), ("list",), ("end",), ("end",),
        ("list",), ("end",), ("bool", True)])],
    "reply": [("reply", b"ADD_", 1, 0, [("int64", 15)])],
    "error_reply": [("error", b"ADD_", 1, 0, [("uint32", 256), ("string", "no service ADD_")])],
    "handshake": [("handshake", NULL, 0, 0, [
        ("uint8", 1), ("uint8", 1), ("uint64", 0), ("uint32", 16777216), ("string", "client-42")])],
    # The handshake with items 6 and 7 (max items, max depth), as Courier sends it.
    "handshake_limits": [("handshake", NULL, 0, 0, [
        ("uint8", 1), ("uint8", 1), ("uint64", 0), ("uint32", 16777216), ("string", "server-7"),
        ("uint32", 1048576), ("uint32", 32)])],
    # The handshake with item 8, the nonce: a random number per connection, which lets a peer recognize
    # its own handshake read back from a transport that echoes.
    "handshake_nonce": [("handshake", NULL, 0, 0, [
        ("uint8", 1), ("uint8", 1), ("uint64", 0), ("uint32", 16777216), ("string", "client-42"),
        ("uint32", 1048576), ("uint32", 32), ("uint64", 0x5ca1ab1e0ddba11)])],
    # 32 nested empty lists: exactly the default depth limit, accepted (33 is nesting_too_deep).
    "nesting_at_limit": [("call", b"DEEP", 3, 0, [("list",)] * 32 + [("end",)] * 32)],
    # A ping with a body: the pong carries the same transaction id and the body unchanged.
    "ping_with_body": [
        ("ping", NULL, 5, 0, [("uint64", 1234567), ("string", "t")]),
        ("pong", NULL, 5, 0, [("uint64", 1234567), ("string", "t")])],
    # The ERROR frames of the connection state machine (section 11): a refused call, a spoiled send.
    "error_shutdown": [("error", b"ADD_", 4, 0, [("uint32", 260), ("string", "ADD_: the connection is closing")])],
    "error_connection": [("error", NULL, 0, 0, [("uint32", 13), ("string", "send ECHO: invalid UTF-8")])],
    # A server that will not serve a connection (at its connection limit, out of descriptors, stopping)
    # sends this as its first frame, instead of its handshake, and closes: always code 260, the reason
    # in the text (docs/protocol.md section 11).
    "refused_at_capacity": [("error", NULL, 0, 0, [("uint32", 260), ("string", "too many connections (limit 64)")])],
    "context_open_close": [
        ("context_open", b"CHLD", 1, 1, [("string", "worker")]),
        ("reply", b"CHLD", 1, 1, []),
        ("call", b"WORK", 2, 1, [("string", "job")]),
        ("context_close", NULL, 3, 1, []),
        ("reply", NULL, 3, 1, [])],
    # Service reflection (docs/protocol.md section 15): the call, and a reply describing two services.
    "reflection": [
        ("call", b"$SVC", 1, 0, []),
        ("reply", b"$SVC", 1, 0, [("list",), ("string", "ADD_"), ("uint8", 1), ("string", "(int32 a, int32 b)"),
                                  ("string", "int32"), ("string", "a + b"), ("end",),
                                  ("list",), ("string", "NOTE"), ("uint8", 0), ("string", "(string text)"),
                                  ("string", "()"), ("string", ""), ("end",)])],
    "ping_pong_close": [
        ("ping", NULL, 77, 0, []),
        ("pong", NULL, 77, 0, []),
        ("close", NULL, 0, 0, [("string", "bye")])],
}

HEADER_OK = "43 4f 55 52 01 20 03 00"  # magic, version 1, header length 32, kind call, flags 0


def bad_header(body_len, token="41 44 44 5f", head=HEADER_OK):
    return [head + "  # magic, version, header length, kind, flags",
            struct.pack("<I", body_len).hex(" ") + "  # body length %d" % body_len,
            token + "  # token",
            "01 00 00 00 00 00 00 00  # transaction id 1",
            "00 00 00 00 00 00 00 00  # context id 0"]


# name: (expected error, hex lines, what is wrong)
BAD = {
    "bad_magic": ("bad_magic", ["43 4f 55 58 01 20 03 00  # magic \"COUX\""] + bad_header(0)[1:], "wrong magic"),
    "bad_version": ("unsupported_version", bad_header(0, head="43 4f 55 52 02 20 03 00"), "version 2"),
    "bad_header_length": ("bad_header_length", bad_header(0, head="43 4f 55 52 01 28 03 00"), "header length 40"),
    "bad_flags": ("bad_flags", bad_header(0, head="43 4f 55 52 01 20 03 01"), "a reserved flag bit"),
    "unknown_kind": ("unknown_kind", bad_header(0, head="43 4f 55 52 01 20 0b 00"), "kind 11"),
    "bad_token": ("bad_token", bad_header(0, token="41 44 00 5f"), "a NUL byte in a call's token"),
    "frame_too_large": ("frame_too_large", bad_header(0xffffffff), "body length 4 GiB - 1, past the default limit"),
    "truncated_header": ("truncated", bad_header(0)[:2], "only 12 of 32 header bytes"),
    "truncated_body": ("truncated", bad_header(5) + ["04 01 00  # int32 with 2 of its 4 bytes"], "body shorter than its length"),
    "unknown_type_tag": ("unknown_type_tag", bad_header(2) + ["10 00  # tag 0x10"], "tag 0x10"),
    "length_past_end": ("length_past_end", bad_header(7) + ["0c 05 00 00 00 61 62  # string of length 5 with 2 bytes"],
                        "a string longer than the body"),
    "invalid_bool": ("invalid_bool", bad_header(2) + ["01 02  # bool 2"], "bool byte 2"),
    "invalid_utf8": ("invalid_utf8", bad_header(7) + ["0c 02 00 00 00 c0 af  # overlong \"/\""], "overlong UTF-8"),
    "unterminated_list": ("unterminated_list", bad_header(3) + ["0e 0e 0f  # list list end"], "a list never closed"),
    "unbalanced_list_end": ("unbalanced_list_end", bad_header(1) + ["0f  # end"], "an end with no list"),
    "nesting_too_deep": ("nesting_too_deep", bad_header(66) + [" ".join(["0e"] * 33) + "  # 33 lists",
                                                               " ".join(["0f"] * 33) + "  # 33 ends"],
                         "33 nested lists, one past the default limit of 32"),
}


# ---- Conversation transcripts (tests/vectors/transcripts/, format in tests/vectors/README.md) ----
# The engine under test announces this handshake (name "engine", the default limits).
ENGINE_HS = ("handshake", NULL, 0, 0, [("uint8", 1), ("uint8", 1), ("uint64", 0), ("uint32", 16777216),
                                        ("string", "engine"), ("uint32", 1048576), ("uint32", 32)])
PEER_HS = ("handshake", NULL, 0, 0, [("uint8", 1), ("uint8", 1), ("uint64", 0), ("uint32", 16777216),
                                      ("string", "peer"), ("uint32", 1048576), ("uint32", 32)])
PEER_HS5 = ("handshake", NULL, 0, 0, [("uint8", 1), ("uint8", 1), ("uint64", 0), ("uint32", 65536),
                                       ("string", "old-peer")])


def err(code, txn=0, token=NULL, text="*"):
    """An ERROR frame the engine writes; text "*" matches any text (texts are for people)."""
    return ("error", token, txn, 0, [("uint32", code), ("string", text)])


def call(txn, token=b"ADD_", items=(("int32", 1), ("int32", 2))):
    return ("call", token, txn, 0, list(items))


OPEN_ACC = [("!", "start"), ("<", ENGINE_HS), (">", PEER_HS), ("=", "open")]


def with_children(hs, n):
    """A handshake that announces n child contexts (item 9, behind a zero nonce as item 8)."""
    return ("handshake", NULL, 0, 0, hs[4] + [("uint64", 0), ("uint32", n)])


def open_children(n, peer_children=0):
    """Open, with the engine accepting n children from the peer (and the peer accepting peer_children)."""
    peer = with_children(PEER_HS, peer_children) if peer_children else PEER_HS
    engine = with_children(ENGINE_HS, n) if n else ENGINE_HS
    return [("max_children", n), ("!", "start"), ("<", engine), (">", peer), ("=", "open")]


def child_open(ctx, txn, token=b"CHLD", name="worker"):
    return ("context_open", token, txn, ctx, [("string", name)] if name else [])


def child_close(ctx, txn):
    return ("context_close", NULL, txn, ctx, [])


def err_in(code, ctx, txn, token=NULL, text="*"):
    """An ERROR with a transaction id, answering a request or call in context ctx."""
    return ("error", token, txn, ctx, [("uint32", code), ("string", text)])


ACCEPTED_CHILD_1 = [(">", child_open(1, 1)), ("^", "context_open ctx=1 kind=CHLD name=worker"),
                    ("<", ("reply", b"CHLD", 1, 1, []))]
OPEN_INI = [("!", "start"), ("<", ENGINE_HS), (">", PEER_HS), ("=", "open")]

# A raw header: call ADD_ txn 3, with the given body length and kind/flags bytes.
def raw_header(body_len, kind=3, flags=0, txn=3, token=b"ADD_", ctx=0):
    return (b"COUR" + bytes([1, 32, kind, flags]) + struct.pack("<I", body_len) + token +
            struct.pack("<QQ", txn, ctx))


TRANSCRIPTS = {
    "handshake_acceptor": ("acceptor: writes its handshake at once, open when the peer's arrives", "acceptor",
                           OPEN_ACC),
    "handshake_initiator_late": ("initiator: the peer's handshake and a call arrive in one read", "initiator", [
        ("!", "start"), ("<", ENGINE_HS), ("=", "handshaking"),
        (">>", [PEER_HS, call(1)]), ("^", "call txn=1"), ("=", "open"), ("?", "calls_unanswered", 1)]),
    "handshake_five_items": ("a handshake without items 6 and 7: the peer accepts the default limits",
                             "acceptor", [
        ("!", "start"), ("<", ENGINE_HS), (">", PEER_HS5), ("=", "open"),
        ("?", "agreed_max_frame_size", 65536), ("?", "agreed_max_items", 1048576), ("?", "agreed_max_depth", 32)]),
    "handshake_extra_items": ("items after the seventh are ignored", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4] + [("string", "future"), ("list",), ("end",)])), ("=", "open")]),
    "handshake_nonce": ("a peer's handshake with a nonce (item 8) other than ours: accepted", "acceptor", [
        ("nonce", 7), ("!", "start"), ("<", ("handshake", NULL, 0, 0, ENGINE_HS[4] + [("uint64", 7)])),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4] + [("uint64", 8)])), ("=", "open")]),
    "handshake_reflected": ("our own handshake read back (the other end echoes, as /bin/cat does): its nonce is "
                            "ours, fatal bad_handshake", "initiator", [
        ("nonce", 7), ("!", "start"), ("<", ("handshake", NULL, 0, 0, ENGINE_HS[4] + [("uint64", 7)])),
        (">", ("handshake", NULL, 0, 0, ENGINE_HS[4] + [("uint64", 7)])),
        ("<", err(22, text="the peer's handshake is our own, reflected (the other end echoes what it reads)")),
        ("=", "failed"), ("?", "failure", 22)]),
    "handshake_echoed_without_nonce": ("without nonces a reflected handshake cannot be told from the peer's: "
                                       "it is accepted, as before item 8", "initiator", [
        ("!", "start"), ("<", ENGINE_HS), (">", ENGINE_HS), ("=", "open")]),
    "first_frame_not_handshake": ("a call before the handshake: fatal bad_handshake", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS), (">", call(1)), ("<", err(22)), ("=", "failed"), ("?", "failure", 22)]),
    "refused_by_peer": ("the peer's handshake, then an ERROR with transaction id 0: it refuses the connection; "
                        "nothing is answered", "initiator", [
        ("!", "start"), ("<", ENGINE_HS),
        (">>", [PEER_HS, ("error", NULL, 0, 0, [("uint32", 260), ("string", "server stopping")])]),
        ("=", "failed"), ("?", "failure", 260)]),
    "refused_before_handshake": ("an ERROR with transaction id 0 as the first frame: the connection is refused",
                                 "initiator", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("error", NULL, 0, 0, [("uint32", 260), ("string", "server stopping")])),
        ("=", "failed"), ("?", "failure", 260)]),
    "refused_at_capacity": ("a server at its connection limit refuses with 260 as its first frame, no handshake: "
                            "the connection fails with the server's code, nothing is answered", "initiator", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("error", NULL, 0, 0, [("uint32", 260), ("string", "too many connections (limit 64)")])),
        ("=", "failed"), ("?", "failure", 260)]),
    "second_handshake_spoiled": ("a second handshake, spoiled too: still fatal unexpected_frame", "acceptor",
                                 OPEN_ACC + [
        (">", ("handshake", NULL, 0, 0, [("string", b"\xff")])), ("<", err(23)), ("=", "failed")]),
    "context_none_accepted": ("a peer that announces no children (no item 9) refuses every context_open with "
                              "274; the calls and the close behind it are for a context that is not open (258); "
                              "none reaches the owner", "acceptor", OPEN_ACC + [
        (">>", [child_open(1, 1), ("call", b"WORK", 2, 1, [("string", "job")]), child_close(1, 3)]),
        ("<", err_in(274, 1, 1, b"CHLD", "context_open 1: this peer accepts no child contexts")),
        ("<", err_in(258, 1, 2, b"WORK", "call WORK: context 1 is not open")),
        ("<", err_in(258, 1, 3, text="context_close: context 1 is not open")),
        ("=", "open"), ("?", "calls_unanswered", 0), ("?", "unknown_context_frames", 2),
        ("?", "contexts_refused", 1), ("?", "children", 0)]),
    "context_open_accepted": ("the peer opens child 1 and calls in it in the same read: the owner accepts the "
                              "child, the reply answers the open, the call and a send reach the owner with their "
                              "context", "acceptor", open_children(4) + [
        (">>", [child_open(1, 1), ("call", b"WORK", 2, 1, [("string", "job")]),
                ("send", b"LOG_", 0, 1, [("string", "x")])]),
        ("^", "context_open ctx=1 kind=CHLD name=worker"), ("<", ("reply", b"CHLD", 1, 1, [])),
        ("^", "call txn=2 ctx=1"), ("^", "send txn=0 ctx=1"),
        ("?", "children", 1), ("?", "contexts_opened", 1), ("?", "calls_unanswered", 1),
        ("!", "reply_sent 1"), ("?", "calls_unanswered", 0), ("?", "children", 1), ("?", "usable 1", 1),
        (">", ("context_open", NULL, 3, 3, [])), ("^", "context_open ctx=3 kind=- name="),
        ("<", ("reply", NULL, 3, 3, [])), ("?", "children", 2)]),
    "context_open_refused": ("the owner does not serve the kind of child asked for: 256 answers the open, and "
                             "what was sent behind it is for a context that is not open", "acceptor",
                             [("refuse", "NOPE")] + open_children(4) + [
        (">>", [child_open(1, 1, b"NOPE", ""), ("call", b"WORK", 2, 1, []), ("send", b"LOG_", 0, 1, []),
                child_close(1, 3)]),
        ("^", "context_open ctx=1 kind=NOPE name="),
        ("<", err_in(256, 1, 1, b"NOPE", "context_open 1: no child service NOPE")),
        ("<", err_in(258, 1, 2, b"WORK")), ("<", err(258, token=b"LOG_", text="send LOG_: context 1 is not open")),
        ("<", err_in(258, 1, 3)),
        ("?", "children", 0), ("?", "contexts_refused", 1), ("?", "calls_unanswered", 0), ("=", "open")]),
    "context_open_checks": ("context_open with transaction id 0 (24), for context 0, for an id of the "
                            "acceptor's parity, for an open child (25), with a name that is not a string (18) or "
                            "longer than 255 bytes (270); none reaches the owner; a name of 255 bytes is accepted",
                            "acceptor", open_children(4) + [
        (">", child_open(1, 0)), ("<", err(24, text="context_open: transaction id 0")),
        (">", child_open(0, 1)), ("<", err_in(25, 0, 1, b"CHLD", "context_open 0: context 0 is the parent context")),
        (">", child_open(2, 2)), ("<", err_in(25, 2, 2, b"CHLD", "context_open 2: the initiator opens odd ids")),
        (">", child_open(1, 3)), ("^", "context_open ctx=1 kind=CHLD name=worker"),
        ("<", ("reply", b"CHLD", 3, 1, [])),
        (">", child_open(1, 4)), ("<", err_in(25, 1, 4, b"CHLD", "context_open 1: already open")),
        (">", ("context_open", b"CHLD", 5, 3, [("int32", 7)])),
        ("<", err_in(18, 3, 5, b"CHLD", "context_open 3: the name must be a string")),
        (">", ("context_open", b"CHLD", 6, 3, [("string", "n" * 256)])),
        ("<", err_in(270, 3, 6, b"CHLD", "context_open 3: a name longer than 255 bytes")),
        (">", ("context_open", b"CHLD", 7, 3, [("string", "n" * 255)])),
        ("^", "context_open ctx=3 kind=CHLD name=" + "n" * 255), ("<", ("reply", b"CHLD", 7, 3, [])),
        ("?", "children", 2), ("?", "contexts_refused", 5), ("=", "open")]),
    "context_limit": ("at the limit (1) a further open gets 274; once the child's close is complete, the "
                      "next open is accepted", "acceptor", open_children(1) + ACCEPTED_CHILD_1 + [
        (">", child_open(3, 2)),
        ("<", err_in(274, 3, 2, b"CHLD", "context_open 3: this peer's limit of open child contexts (1) is reached")),
        (">", child_close(1, 3)), ("^", "context_closing ctx=1"), ("<", ("reply", NULL, 3, 1, [])),
        ("^", "context_ended ctx=1"), ("?", "children", 0),
        (">", child_open(3, 4)), ("^", "context_open ctx=3 kind=CHLD name=worker"),
        ("<", ("reply", b"CHLD", 4, 3, [])), ("?", "children", 1)]),
    "context_close_by_peer": ("the peer closes child 1 with a call in it unanswered: a call behind the close is "
                              "for a context that is not open, the close is answered after the last call, then "
                              "the child has ended", "acceptor", open_children(4) + ACCEPTED_CHILD_1 + [
        (">>", [("call", b"WORK", 2, 1, []), child_close(1, 3)]),
        ("^", "call txn=2 ctx=1"), ("^", "context_closing ctx=1"), ("?", "calls_unanswered", 2),
        ("?", "usable 1", 0),
        (">", ("call", b"WORK", 4, 1, [])), ("<", err_in(258, 1, 4, b"WORK", "call WORK: context 1 is not open")),
        ("!", "reply_sent 1"), ("<", ("reply", NULL, 3, 1, [])), ("^", "context_ended ctx=1"),
        ("?", "calls_unanswered", 0), ("?", "children", 0), ("=", "open")]),
    "context_open_by_us": ("we open child 1 at a peer that accepts children and call in it; the peer calls in "
                           "it too; we close it: a call crossing our close gets 260, and the child ends once our "
                           "close is answered and the peer's call answered", "initiator", open_children(0, 2) + [
        ("?", "agreed_max_child_contexts", 2),
        ("!", "open_context 5 CHLD worker"), ("^", "opened ctx=1"), ("<", child_open(1, 5)),
        ("?", "calls_outstanding", 1), ("?", "usable 1", 1),
        (">", ("reply", b"CHLD", 5, 1, [])), ("^", "reply txn=5 ctx=1"), ("?", "calls_outstanding", 0),
        (">", ("call", b"ADD_", 7, 1, [])), ("^", "call txn=7 ctx=1"),
        ("!", "close_context 1 9"), ("^", "close_context true"), ("<", child_close(1, 9)), ("?", "usable 1", 0),
        (">", ("call", b"ADD_", 8, 1, [])), ("<", err_in(260, 1, 8, b"ADD_", "call ADD_: context 1 is closing")),
        (">", ("reply", NULL, 9, 1, [])), ("^", "reply txn=9 ctx=1"), ("?", "children", 1),
        ("!", "reply_sent 1"), ("^", "context_ended ctx=1"), ("?", "children", 0)]),
    "context_open_past_peer_limit": ("the peer accepts one child: a second open_context writes nothing and "
                                     "returns 0; so does one at a peer that announced none", "initiator",
                                     open_children(0, 1) + [
        ("!", "open_context 1 - "), ("^", "opened ctx=1"), ("<", ("context_open", NULL, 1, 1, [])),
        ("!", "open_context 2 - "), ("^", "opened ctx=0"),
        ("!", "close_context 3 3"), ("^", "close_context false")]),
    "context_open_spoiled": ("a context_open whose name is not UTF-8: answered with 13 and its ids, like a "
                             "spoiled call; the child is not open", "acceptor", open_children(4) + [
        (">", ("context_open", b"CHLD", 4, 1, [("string", b"\xc0\xaf")])),
        ("<", err_in(13, 1, 4, b"CHLD")), ("?", "children", 0), ("?", "contexts_refused", 1), ("=", "open")]),
    "context_answer_spoiled": ("spoiled answers to our open and to our close are taken as replies: the child "
                               "stays open, then the close is complete", "initiator", open_children(0, 2) + [
        ("!", "open_context 5 CHLD worker"), ("^", "opened ctx=1"), ("<", child_open(1, 5)),
        ("raw>", raw_header(1, kind=4, txn=5, token=b"CHLD", ctx=1) + bytes([0x0f])), ("<", err(17)),
        ("^", "bad_reply txn=5 17"), ("?", "usable 1", 1), ("?", "calls_outstanding", 0),
        ("!", "close_context 1 6"), ("^", "close_context true"), ("<", child_close(1, 6)),
        ("raw>", raw_header(1, kind=4, txn=6, token=NULL, ctx=1) + bytes([0x0f])), ("<", err(17)),
        ("^", "bad_reply txn=6 17"), ("^", "context_ended ctx=1"), ("?", "children", 0)]),
    "context_close_simultaneous": ("both close child 1 at once: each answers the other's close, and the child "
                                   "ends when our close is answered", "acceptor", open_children(4) + ACCEPTED_CHILD_1 + [
        ("!", "close_context 1 6"), ("^", "close_context true"), ("<", child_close(1, 6)),
        (">", child_close(1, 3)), ("^", "context_closing ctx=1"), ("<", ("reply", NULL, 3, 1, [])),
        ("?", "children", 1),
        (">", ("reply", NULL, 6, 1, [])), ("^", "reply txn=6 ctx=1"), ("^", "context_ended ctx=1"),
        ("?", "children", 0)]),
    "context_close_checks": ("context_close with transaction id 0 (24), for context 0 (25), for a child not "
                             "open and for one whose close already arrived (258)", "acceptor",
                             open_children(4) + ACCEPTED_CHILD_1 + [
        (">", child_close(1, 0)), ("<", err(24, text="context_close: transaction id 0")),
        (">", child_close(0, 2)), ("<", err_in(25, 0, 2, text="context_close 0: the parent context ends with close")),
        (">", child_close(7, 3)), ("<", err_in(258, 7, 3, text="context_close: context 7 is not open")),
        (">", ("call", b"WORK", 4, 1, [])), ("^", "call txn=4 ctx=1"),
        (">", child_close(1, 5)), ("^", "context_closing ctx=1"),
        (">", child_close(1, 6)), ("<", err_in(258, 1, 6, text="context_close: context 1 is not open")),
        ("!", "reply_sent 1"), ("<", ("reply", NULL, 5, 1, [])), ("^", "context_ended ctx=1"), ("=", "open")]),
    "context_after_close": ("after the peer's close, a context_open and a context_close are refused with 260; "
                            "our close waits for the call unanswered in the child", "acceptor",
                            open_children(4) + ACCEPTED_CHILD_1 + [
        (">", ("call", b"WORK", 2, 1, [])), ("^", "call txn=2 ctx=1"),
        (">", ("close", NULL, 0, 0, [])), ("=", "open"),
        (">", child_open(3, 4)), ("<", err_in(260, 3, 4, b"CHLD", "context_open 3: the connection is closing")),
        (">", child_close(1, 5)), ("<", err_in(260, 1, 5, text="context_close 1: the connection is closing")),
        ("!", "reply_sent 1"), ("<", ("close", NULL, 0, 0, [])), ("=", "closed")]),
    "handshake_children": ("item 9 behind a zero nonce announces the peer's limit of children; one of another "
                           "type is ignored", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS), (">", with_children(PEER_HS, 16)), ("=", "open"),
        ("?", "agreed_max_child_contexts", 16)]),
    "handshake_children_wrong_type": ("a ninth item that is not uint32 is ignored: the peer accepts no children",
                                      "acceptor", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4] + [("uint64", 0), ("string", "16")])), ("=", "open"),
        ("?", "agreed_max_child_contexts", 0)]),
    "call_unknown_context": ("a call and a send for a context that is not open: 258 no_such_context, the call's "
                             "with its transaction id, token and context id, the send's with transaction id 0; "
                             "neither reaches the owner, and the connection goes on", "acceptor", OPEN_ACC + [
        (">", ("call", b"ADD_", 7, 5, [("int32", 1), ("int32", 2)])),
        ("<", ("error", b"ADD_", 7, 5, [("uint32", 258), ("string", "call ADD_: context 5 is not open")])),
        (">", ("send", b"LOG_", 0, 5, [("string", "x")])),
        ("<", err(258, token=b"LOG_", text="send LOG_: context 5 is not open")),
        ("=", "open"), ("?", "calls_unanswered", 0), ("?", "unknown_context_frames", 2),
        (">", call(8)), ("^", "call txn=8"), ("?", "calls_unanswered", 1)]),
    "reply_in_child_context": ("replies and errors answer our calls: handed to the owner whatever their context "
                               "id", "initiator", OPEN_INI + [
        ("!", "call_sent"), ("!", "call_sent"),
        (">", ("reply", b"GET_", 3, 9, [("int64", 15)])), ("^", "reply txn=3 ctx=9"),
        (">", ("error", b"GET_", 4, 9, [("uint32", 256), ("string", "no service GET_")])), ("^", "error txn=4 ctx=9"),
        ("?", "calls_outstanding", 0)]),
    "peer_no_such_context": ("the peer answers a send of ours with 258 and transaction id 0: a report about one "
                             "frame, not the end of the connection", "initiator", OPEN_INI + [
        (">", ("error", NULL, 0, 0, [("uint32", 258), ("string", "send LOG_: context 5 is not open")])),
        ("=", "open")]),
    "garbage_first": ("bytes that are not the protocol: fatal bad_magic, reported from the first bytes",
                      "acceptor", [
        ("!", "start"), ("<", ENGINE_HS), ("raw>", b"GET / HTTP/1.1\r\n"), ("<", err(3)), ("=", "failed"),
        ("?", "failure", 3)]),
    "second_handshake": ("a second handshake: fatal unexpected_frame", "acceptor", OPEN_ACC + [
        (">", PEER_HS), ("<", err(23)), ("=", "failed"), ("?", "failure", 23)]),
    "handshake_spoiled_body": ("a handshake whose body is not well-formed (bad UTF-8 name): fatal bad_handshake",
                               "acceptor", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4][:4] + [("string", b"\xc0\xaf")] + PEER_HS[4][5:])),
        ("<", err(22)), ("=", "failed")]),
    "handshake_missing_items": ("a handshake with three items: fatal bad_handshake", "initiator", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, [("uint8", 1), ("uint8", 1), ("uint64", 0)])),
        ("<", err(22)), ("=", "failed")]),
    "handshake_wrong_item_type": ("item 6 present but not uint32: fatal bad_handshake", "initiator", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4][:5] + [("uint64", 1048576), ("uint32", 32)])),
        ("<", err(22)), ("=", "failed")]),
    "handshake_small_limits": ("a peer announcing less than the minimum depth: fatal bad_handshake", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4][:6] + [("uint32", 8)])), ("<", err(22)), ("=", "failed")]),
    "version_mismatch": ("no common version: fatal unsupported_version with both ranges", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, [("uint8", 2), ("uint8", 3)] + PEER_HS[4][2:])),
        ("<", err(4, text="no common protocol version: we speak 1..1, peer speaks 2..3")), ("=", "failed"),
        ("?", "failure", 4)]),
    "handshake_timeout": ("a peer that connects and never speaks: bad_handshake after 10 s", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS), ("!", "tick 9999"), ("=", "handshaking"), ("!", "tick 10000"),
        ("<", err(22, text="no handshake in time")), ("=", "failed")]),
    "ping_pong": ("a ping is answered at once with a pong of the same id and body", "acceptor", OPEN_ACC + [
        (">", ("ping", NULL, 5, 0, [("uint64", 1234567), ("string", "t")])),
        ("<", ("pong", NULL, 5, 0, [("uint64", 1234567), ("string", "t")])), ("=", "open")]),
    "keepalive": ("silence: a ping every 10 s, the peer dead after 30 s", "initiator", OPEN_INI + [
        ("!", "tick 9999"), ("!", "tick 10000"), ("<", ("ping", NULL, 1, 0, [])),
        ("!", "tick 20000"), ("<", ("ping", NULL, 2, 0, [])),
        ("!", "tick 30000"), ("=", "failed"), ("?", "failure", 272)]),
    "keepalive_answered": ("a pong is traffic: the silence counts from the last byte received; the late tick at "
                           "30 s sent one ping, so the peer is dead once a second unanswered ping has waited an "
                           "interval", "initiator", OPEN_INI + [
        ("!", "tick 10000"), ("<", ("ping", NULL, 1, 0, [])), (">", ("pong", NULL, 1, 0, [])),
        ("!", "tick 19999"), ("!", "tick 30000"), ("<", ("ping", NULL, 2, 0, [])), ("=", "open"),
        ("!", "tick 39999"), ("=", "open"), ("!", "tick 40000"), ("<", ("ping", NULL, 3, 0, [])), ("=", "open"),
        ("!", "tick 49999"), ("=", "open"), ("!", "tick 50000"), ("=", "failed"), ("?", "failure", 272)]),
    "keepalive_stall": ("a stall of ours (stopped from 10 s to 50 s) is not the peer's silence: the late tick "
                        "pings, the answer keeps the peer alive, and only pings really sent and unanswered make "
                        "it dead", "initiator", OPEN_INI + [
        ("!", "tick 10000"), ("<", ("ping", NULL, 1, 0, [])), (">", ("pong", NULL, 1, 0, [])),
        ("!", "tick 50000"), ("<", ("ping", NULL, 2, 0, [])), ("=", "open"), (">", ("pong", NULL, 2, 0, [])),
        ("!", "tick 59999"), ("=", "open"), ("!", "tick 60000"), ("<", ("ping", NULL, 3, 0, [])),
        ("!", "tick 70000"), ("<", ("ping", NULL, 4, 0, [])), ("=", "open"),
        ("!", "tick 79999"), ("=", "open"), ("!", "tick 80000"), ("=", "failed"), ("?", "failure", 272)]),
    "keepalive_late_timer": ("a timer that fires late does not move the later pings: they are due at whole "
                             "intervals of silence", "initiator", OPEN_INI + [
        ("!", "tick 10099"), ("<", ("ping", NULL, 1, 0, [])),
        ("!", "tick 20000"), ("<", ("ping", NULL, 2, 0, [])),
        ("!", "tick 29999"), ("=", "open"), ("!", "tick 30000"), ("=", "failed"), ("?", "failure", 272)]),
    "calls_and_replies": ("application frames reach the owner; the owner answers calls", "acceptor", OPEN_ACC + [
        (">>", [call(1), ("send", b"LOG_", 0, 0, [("string", "x")]), call(2)]),
        ("^", "call txn=1"), ("^", "send txn=0"), ("^", "call txn=2"), ("?", "calls_unanswered", 2),
        ("!", "reply_sent"), ("!", "reply_sent"), ("?", "calls_unanswered", 0),
        (">", ("reply", b"GET_", 7, 0, [("int64", 15)])), ("^", "reply txn=7"),
        (">", ("error", b"GET_", 8, 0, [("uint32", 256), ("string", "no service GET_")])), ("^", "error txn=8")]),
    "close_by_us": ("we close: a crossing call gets 260, pings are answered, the peer's close completes it",
                    "acceptor", OPEN_ACC + [
        (">", call(1)), ("^", "call txn=1"),
        ("!", "close bye"), ("<", ("close", NULL, 0, 0, [("string", "bye")])), ("=", "closing"),
        (">", call(2)), ("<", err(260, txn=2, token=b"ADD_")),
        (">", ("send", b"LOG_", 0, 0, [])), ("?", "dropped_sends", 1),
        (">", ("ping", NULL, 9, 0, [])), ("<", ("pong", NULL, 9, 0, [])),
        (">", ("close", NULL, 0, 0, [])), ("=", "closing"),
        ("!", "reply_sent"), ("=", "closed")]),
    "close_by_peer": ("the peer closes: we answer its calls, then close; the answer to our own call still "
                      "arrives, then the close is complete", "initiator", OPEN_INI + [
        ("!", "call_sent"), ("?", "calls_outstanding", 1),
        (">", call(1)), ("^", "call txn=1"),
        (">", ("close", NULL, 0, 0, [("string", "done")])), ("=", "open"), ("?", "peer_closing", 1),
        ("!", "reply_sent"), ("<", ("close", NULL, 0, 0, [])), ("=", "closing"),
        (">", ("reply", b"GET_", 5, 0, [])), ("^", "reply txn=5"), ("=", "closed")]),
    "close_by_peer_idle": ("the peer closes with nothing outstanding: our close answers at once", "acceptor",
                           OPEN_ACC + [
        (">", ("close", NULL, 0, 0, [])), ("<", ("close", NULL, 0, 0, [])), ("=", "closed")]),
    "bytes_after_close": ("frames behind a close that completed are ignored: nothing is answered, nothing handed "
                          "over", "acceptor", OPEN_ACC + [
        (">", ("close", NULL, 0, 0, [])), ("<", ("close", NULL, 0, 0, [])), ("=", "closed"),
        (">>", [call(1), ("ping", NULL, 4, 0, [])]), ("=", "closed")]),
    "close_simultaneous": ("both close at once; our call crossed the peer's close and gets 260; then closed",
                           "initiator", OPEN_INI + [
        ("!", "call_sent"), ("!", "close"), ("<", ("close", NULL, 0, 0, [])), ("=", "closing"),
        (">", ("close", NULL, 0, 0, [])), ("=", "closing"),
        (">", err(260, txn=1, token=b"ADD_", text="ADD_: the connection is closing")), ("^", "error txn=1"),
        ("=", "closed")]),
    "close_eof_after_closes": ("both closes exchanged, then end of stream with a call of ours unanswered: closed "
                               "(the owner fails that call with 272)", "acceptor", OPEN_ACC + [
        ("!", "call_sent"), ("!", "close"), ("<", ("close", NULL, 0, 0, [])), (">", ("close", NULL, 0, 0, [])),
        ("=", "closing"), ("!", "eof"), ("=", "closed")]),
    "close_timeout": ("we closed and the peer never answers: failed after 10 s", "initiator", OPEN_INI + [
        ("!", "tick 1000"), ("!", "close"), ("<", ("close", NULL, 0, 0, [])), ("!", "tick 10999"),
        ("=", "closing"), ("!", "tick 11000"), ("=", "failed"), ("?", "failure", 272)]),
    "eof_without_close": ("end of stream without close: abortive, 272", "acceptor", OPEN_ACC + [
        ("!", "eof"), ("=", "failed"), ("?", "failure", 272)]),
    "eof_mid_frame": ("end of stream inside a frame: truncated", "acceptor", OPEN_ACC + [
        ("raw>", raw_header(10)[:20]), ("!", "eof"), ("=", "failed"), ("?", "failure", 2)]),
    "spoiled_call": ("a call with a bad body: ERROR with its transaction id, the connection goes on", "acceptor",
                     OPEN_ACC + [
        ("raw>", raw_header(2) + bytes([0x01, 0x02])), ("<", err(12, txn=3, token=b"ADD_")), ("=", "open"),
        ("?", "spoiled_frames", 1),
        (">", call(4)), ("^", "call txn=4")]),
    "spoiled_send": ("a send with a bad body: ERROR with transaction id 0, the connection goes on", "acceptor",
                     OPEN_ACC + [
        (">", ("send", b"ECHO", 0, 0, [("string", b"\xc0\xaf")])), ("<", err(13, token=b"ECHO")), ("=", "open")]),
    "spoiled_reply": ("a reply with a bad body: ERROR with transaction id 0, the owner fails the call", "initiator",
                      OPEN_INI + [
        ("raw>", raw_header(1, kind=4, txn=9) + bytes([0x0f])), ("<", err(17)), ("^", "bad_reply txn=9 17"),
        ("=", "open")]),
    "unknown_kind": ("a frame of unknown kind: ERROR with transaction id 0, skipped", "acceptor", OPEN_ACC + [
        ("raw>", raw_header(0, kind=11, txn=0)), ("<", err(7)), ("=", "open")]),
    "call_txn_zero": ("a call with transaction id 0: ERROR bad_transaction_id with transaction id 0", "acceptor",
                      OPEN_ACC + [
        (">", call(0)), ("<", err(24, token=b"ADD_")), ("=", "open"), ("?", "calls_unanswered", 0)]),
    "duplicate_txn": ("two calls with the same id: the receiver does not track ids, both reach the owner",
                      "acceptor", OPEN_ACC + [
        (">", call(6)), ("^", "call txn=6"), (">", call(6)), ("^", "call txn=6"), ("?", "calls_unanswered", 2)]),
    "frame_too_large": ("a header announcing more than the limit: fatal frame_too_large, the body is not read",
                        "acceptor", OPEN_ACC + [
        ("raw>", raw_header(16777216 - 31)), ("<", err(9)), ("=", "failed"), ("?", "failure", 9)]),
    "first_frame_too_large": ("before the handshake nothing over 4096 bytes is accepted: a first frame whose "
                              "header announces 4097 is fatal frame_too_large, from the header alone", "acceptor", [
        ("!", "start"), ("<", ENGINE_HS), ("raw>", raw_header(4097 - 32, kind=1, txn=0, token=NULL)), ("<", err(9)),
        ("=", "failed"), ("?", "failure", 9)]),
    "first_frame_at_limit": ("a first frame of exactly 4096 bytes is accepted (a handshake with a long name)",
                             "acceptor", [
        ("!", "start"), ("<", ENGINE_HS),
        (">", ("handshake", NULL, 0, 0, PEER_HS[4][:4] + [("string", "n" * (4096 - 65))] + PEER_HS[4][5:])),
        ("=", "open")]),
    "peer_fatal_error": ("the peer reports a fatal error: we fail, and write nothing", "initiator", OPEN_INI + [
        (">", ("error", NULL, 0, 0, [("uint32", 9), ("string", "frame too large")])), ("=", "failed"),
        ("?", "failure", 9)]),
    "peer_nonfatal_error": ("the peer reports a spoiled send of ours: informational", "initiator", OPEN_INI + [
        (">", ("error", NULL, 0, 0, [("uint32", 13), ("string", "send ECHO: invalid UTF-8")])), ("=", "open")]),
}


def frame_line(prefix, f):
    b, text, _ = frame(*f)
    return "%s %s  # %s" % (prefix, b.hex(" "), text.splitlines()[0]), b


def write_transcripts():
    tdir = os.path.join(HERE, "transcripts")
    os.makedirs(tdir, exist_ok=True)
    for old in os.listdir(tdir):
        if old.endswith(".txt"):
            os.remove(os.path.join(tdir, old))
    for name, (what, role, steps) in TRANSCRIPTS.items():
        lines = ["# " + what, "role " + role]
        for st in steps:
            op = st[0]
            if op in (">", "<"):
                lines.append(frame_line(op, st[1])[0])
            elif op == ">>":
                data, notes = b"", []
                for f in st[1]:
                    line, b = frame_line(">", f)
                    data += b
                    notes.append(line.split("# ", 1)[1])
                lines.append("> %s  # in one read: %s" % (data.hex(" "), "; ".join(notes)))
            elif op == "raw>":
                lines.append("> %s  # raw bytes" % st[1].hex(" "))
            elif op == "!":
                lines.append("! " + st[1])
            elif op == "=":
                lines.append("= " + st[1])
            elif op == "^":
                lines.append("^ " + st[1])
            elif op == "?":
                lines.append("? %s %d" % (st[1], st[2]))
            elif op == "nonce":
                lines.append("nonce %d" % st[1])
            elif op == "max_children":
                lines.append("max_children %d" % st[1])
            elif op == "refuse":
                lines.append("refuse " + st[1])
            else:
                raise ValueError(op)
        with open(os.path.join(tdir, name + ".txt"), "w") as out:
            out.write("\n".join(lines) + "\n")


def main():
    for old in os.listdir(HERE):
        if old.endswith(".hex") or old.endswith(".txt"):
            os.remove(os.path.join(HERE, old))
    for name, frames in GOOD.items():
        text, hexl = "", []
        for f in frames:
            _, t, h = frame(*f)
            text += t
            hexl += h + [""]
        with open(os.path.join(HERE, name + ".hex"), "w") as out:
            out.write("\n".join(hexl).rstrip("\n") + "\n")
        with open(os.path.join(HERE, name + ".txt"), "w") as out:
            out.write(text)
    for name, (err, lines, why) in BAD.items():
        with open(os.path.join(HERE, name + ".hex"), "w") as out:
            out.write("# malformed: %s\n" % why + "\n".join(lines) + "\n")
        with open(os.path.join(HERE, name + ".txt"), "w") as out:
            out.write("error %s\n" % err)
    write_transcripts()


if __name__ == "__main__":
    main()
