#!/usr/bin/env python3
"""A second, independent implementation of the Courier connection state machine.

Written from docs/protocol.md (and the transcript format of tests/vectors/README.md) alone, without
reading the C++ engine or generate.py, to test that the specification suffices. Standard library only.

    spec_peer.py [VECTORS_DIR]

replays every transcript of VECTORS_DIR/transcripts/ against `Session` (whole reads, then byte by
byte), decodes every golden vector VECTORS_DIR/*.hex against its .txt and encodes each well-formed
.txt back to the .hex bytes. Exit status 0 when all
agree; otherwise each disagreement is printed with both sides decoded.
"""

import math
import os
import struct
import sys

# ---------------------------------------------------------------------------------------------------
# Constants (sections 2, 3, 7, 9, 10, 13)

MAGIC = b"COUR"
HEADER = 32

KINDS = {1: "handshake", 2: "send", 3: "call", 4: "reply", 5: "error", 6: "context_open",
         7: "context_close", 8: "ping", 9: "pong", 10: "close"}
HANDSHAKE, SEND, CALL, REPLY, ERROR, CONTEXT_OPEN, CONTEXT_CLOSE, PING, PONG, CLOSE = range(1, 11)

ERRC = {2: "truncated", 3: "bad_magic", 4: "unsupported_version", 5: "bad_header_length",
        6: "bad_flags", 7: "unknown_kind", 8: "bad_token", 9: "frame_too_large",
        10: "unknown_type_tag", 11: "length_past_end", 12: "invalid_bool", 13: "invalid_utf8",
        14: "nesting_too_deep", 15: "too_many_items", 16: "unterminated_list",
        17: "unbalanced_list_end", 18: "type_mismatch", 19: "no_more_items", 20: "trailing_items",
        21: "token_mismatch", 22: "bad_handshake", 23: "unexpected_frame", 24: "bad_transaction_id",
        25: "bad_context_id"}
CODE = {name: code for code, name in ERRC.items()}
FATAL = {2, 3, 4, 5, 9, 22, 23}
NONFATAL_PROTOCOL = {6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 24, 25}
NO_SUCH_SERVICE, NO_SUCH_CONTEXT, REQUEST_TIMEOUT, SYSTEM_SHUTDOWN = 256, 258, 259, 260
CONNECTION_LOST, PROTOCOL_ERROR, TOO_MANY_CONTEXTS = 272, 273, 274
ZERO_TOKEN = b"\0\0\0\0"

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
DEFAULT_MAX_ITEMS = 1 << 20
DEFAULT_MAX_DEPTH = 32
MIN_MAX_FRAME, MIN_MAX_ITEMS, MIN_MAX_DEPTH = 65536, 65536, 32
MAX_FIRST_FRAME = 4096

# item tags
T_BOOL, T_I8, T_I16, T_I32, T_I64, T_U8, T_U16, T_U32, T_U64, T_F32, T_F64, T_STR, T_BIN, T_LIST, T_END = range(1, 16)
TAG_NAMES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
             8: "uint32", 9: "uint64", 10: "float32", 11: "float64", 12: "string", 13: "binary",
             14: "list", 15: "end"}
FIXED = {T_BOOL: "<B", T_I8: "<b", T_I16: "<h", T_I32: "<i", T_I64: "<q", T_U8: "<B", T_U16: "<H",
         T_U32: "<I", T_U64: "<Q", T_F32: "<f", T_F64: "<d"}


class ProtocolError(Exception):
    def __init__(self, code, text=""):
        super().__init__(ERRC.get(code, str(code)) + (": " + text if text else ""))
        self.code = code
        self.text = text


# ---------------------------------------------------------------------------------------------------
# Items (section 7)

def utf8_ok(b):
    """Strict UTF-8 (RFC 3629, Unicode table 3-7): Python's decoder is exactly that."""
    try:
        b.decode("utf-8", "strict")
        return True
    except UnicodeDecodeError:
        return False


def check_body(body, max_items=DEFAULT_MAX_ITEMS, max_depth=DEFAULT_MAX_DEPTH):
    """Section 7 'well-formed body' and section 9 check order; raises ProtocolError on the first
    fault in byte order. Returns the items as a tree: list of (tag, value) with lists as
    (T_LIST, [children])."""
    pos, n = 0, len(body)
    count = 0
    root = []
    stack = [root]
    while pos < n:
        tag = body[pos]
        pos += 1
        if tag == 0 or tag > T_END:
            raise ProtocolError(10, "tag 0x%02x" % tag)
        if tag == T_END:
            if len(stack) == 1:
                raise ProtocolError(17)
            stack.pop()
            continue  # end markers are not counted (section 10)
        if tag == T_LIST:
            depth = len(stack)  # lists open once this tag has been read
            if depth > max_depth:
                raise ProtocolError(14)
            count += 1
            if count > max_items:
                raise ProtocolError(15)
            lst = []
            stack[-1].append((T_LIST, lst))
            stack.append(lst)
            continue
        if tag in (T_STR, T_BIN):
            if pos + 4 > n:
                raise ProtocolError(11)
            (ln,) = struct.unpack_from("<I", body, pos)
            pos += 4
            if ln > n - pos:
                raise ProtocolError(11)
            val = bytes(body[pos:pos + ln])
            pos += ln
            if tag == T_STR and not utf8_ok(val):
                raise ProtocolError(13)
        else:
            fmt = FIXED[tag]
            size = struct.calcsize(fmt)
            if pos + size > n:
                raise ProtocolError(11)
            if tag == T_F32 or tag == T_F64:
                val = bytes(body[pos:pos + size])  # keep the bit pattern (no canonicalizing)
            else:
                (val,) = struct.unpack_from(fmt, body, pos)
            pos += size
            if tag == T_BOOL and val not in (0, 1):
                raise ProtocolError(12)
        count += 1
        if count > max_items:
            raise ProtocolError(15)
        stack[-1].append((tag, val))
    if len(stack) != 1:
        raise ProtocolError(16)
    return root


def enc_item(tag, val):
    if tag in (T_STR, T_BIN):
        if isinstance(val, str):
            val = val.encode()
        return bytes([tag]) + struct.pack("<I", len(val)) + val
    return bytes([tag]) + struct.pack(FIXED[tag], val)


def frame(kind, body=b"", token=b"\0\0\0\0", txn=0, ctx=0, version=1, flags=0):
    return (MAGIC + bytes([version, HEADER, kind, flags]) + struct.pack("<I", len(body)) + token
            + struct.pack("<QQ", txn, ctx) + body)


def error_frame(code, text, token=b"\0\0\0\0", txn=0, ctx=0):
    return frame(ERROR, enc_item(T_U32, code) + enc_item(T_STR, text), token, txn, ctx)


def parse_header(h):
    (blen,) = struct.unpack_from("<I", h, 8)
    txn, ctx = struct.unpack_from("<QQ", h, 16)
    return {"version": h[4], "hlen": h[5], "kind": h[6], "flags": h[7], "blen": blen,
            "token": bytes(h[12:16]), "txn": txn, "ctx": ctx}


def token_ok(tok):
    return all(0x20 <= b <= 0x7E for b in tok)


def check_frame(hdr, body, max_items, max_depth):
    """The checks that need the whole frame, in section 9's order: kind, flags, token, body."""
    if hdr["kind"] not in KINDS:
        raise ProtocolError(7, "kind %d" % hdr["kind"])
    if hdr["flags"] != 0:
        raise ProtocolError(6)
    if hdr["kind"] in (SEND, CALL) and not token_ok(hdr["token"]):
        raise ProtocolError(8)
    return check_body(body, max_items, max_depth)


def typed(items, types):
    """Read a checked body against a definition (section 7, typed messages)."""
    if len(items) < len(types):
        for i, (tag, _) in enumerate(items):
            if tag != types[i]:
                raise ProtocolError(18, "item %d: %s, expected %s" % (i + 1, TAG_NAMES[tag], TAG_NAMES[types[i]]))
        raise ProtocolError(19)
    for i, t in enumerate(types):
        if items[i][0] != t:
            raise ProtocolError(18, "item %d: %s, expected %s" % (i + 1, TAG_NAMES[items[i][0]], TAG_NAMES[t]))
    if len(items) > len(types):
        raise ProtocolError(20)
    return [v for _, v in items]


# ---------------------------------------------------------------------------------------------------
# The session (sections 6, 8, 9, 11, 12, 13), sans I/O

class Child:
    """A child context as this end sees it (section 6), from its open until its close is complete."""

    def __init__(self, cid, mine):
        self.id = cid
        self.mine = mine              # we opened it (it counts against the peer's limit, not ours)
        self.unanswered = 0           # calls received in it that the owner has not answered yet
        self.our_close_txn = None     # our context_close, once sent
        self.our_close_answered = False
        self.peer_close_txn = None    # the peer's context_close, once arrived
        self.peer_close_token = ZERO_TOKEN
        self.peer_close_answered = False

    def closing(self):
        return self.our_close_txn is not None or self.peer_close_txn is not None


def tag_ctx(ctx):
    return " ctx=%d" % ctx if ctx else ""


def kind_text(token):
    return "-" if token == ZERO_TOKEN else token.decode("latin-1")


class Session:
    """One end of a connection. Feed it bytes (`receive`), time (`tick`), end of stream (`eof`) and
    owner actions (`close`, `call_sent`, `reply_sent`, `open_context`, `close_context`); it appends
    the frames it writes to `self.written` and what its owner observes to `self.handed`, as the text
    of the transcripts' `^` lines (`call txn=2 ctx=1`, `context_open ctx=1 kind=CHLD name=worker`...)."""

    def __init__(self, role, name="engine", max_frame=DEFAULT_MAX_FRAME, max_items=DEFAULT_MAX_ITEMS,
                 max_depth=DEFAULT_MAX_DEPTH, handshake_timeout=10000, ping_interval=10000,
                 close_timeout=10000):
        self.role = role
        self.name = name
        self.nonce = 0  # section 8, item 8: 0 = none (not sent)
        self.max_children = 0  # section 6 / 8 item 9: children the peer may open at once; 0 = not sent
        self.refused_kinds = set()  # the owner serves no child of these kinds (tokens)
        self.max_frame, self.max_items, self.max_depth = max_frame, max_items, max_depth
        self.handshake_timeout = handshake_timeout
        self.ping_interval = ping_interval
        self.close_timeout = close_timeout
        self.state = "handshaking"
        self.buf = bytearray()
        self.written = []
        self.handed = []
        self.now = 0
        self.last_rx = 0
        self.last_ping = 0
        self.last_ping_counted = 0
        self.unanswered = 0  # keepalive pings sent since the last byte received
        self.next_ping_id = 1
        self.close_sent_at = None
        self.sent_close = False
        self.peer_closing = False
        self.failure = 0
        self.failure_text = ""
        self.version = 1
        self.agreed_max_frame_size = 0
        self.agreed_max_items = 0
        self.agreed_max_depth = 0
        self.agreed_max_child_contexts = 0
        self.calls_unanswered = 0   # calls (any context) and the peer's context_close requests unanswered
        self.calls_outstanding = 0  # our calls and our context requests not answered yet
        self.dropped_sends = 0
        self.refused_calls = 0
        self.spoiled_frames = 0
        self.unknown_context_frames = 0
        # section 6: children, by id, until their close is complete here (or our open is refused)
        self.kids = {}
        self.requests = {}  # our context requests awaiting their answer: txn -> ("open" | "close", ctx)
        self.next_child_id = 1 if role == "initiator" else 2  # section 6, ids by parity
        self.contexts_opened = 0   # children the peer opened that were accepted
        self.contexts_refused = 0  # context_open requests of the peer answered with an error

    # -- observables -------------------------------------------------------------------------------
    @property
    def children(self):
        return len(self.kids)

    def usable(self, ctx):
        """Whether calls and sends may go out in context `ctx` now."""
        if not self._open_for_calls():
            return False
        if ctx == 0:
            return True
        c = self.kids.get(ctx)
        return c is not None and not c.closing()

    def _open_for_calls(self):
        # section 11: no new call, send or request once we sent close or received the peer's
        return self.state == "open" and not self.sent_close and not self.peer_closing

    # -- owner side ----------------------------------------------------------------------------------
    def start(self):
        body = (enc_item(T_U8, 1) + enc_item(T_U8, 1) + enc_item(T_U64, 0)
                + enc_item(T_U32, self.max_frame) + enc_item(T_STR, self.name)
                + enc_item(T_U32, self.max_items) + enc_item(T_U32, self.max_depth))
        if self.nonce or self.max_children:
            body += enc_item(T_U64, self.nonce)  # item 9 is read only behind a uint64 item 8
        if self.max_children:
            body += enc_item(T_U32, self.max_children)
        self.written.append(frame(HANDSHAKE, body))

    def close(self, reason=None):
        if self.state != "open" or self.sent_close:
            return
        self._send_close(reason)
        self._maybe_closed()

    def call_sent(self):
        self.calls_outstanding += 1

    def reply_sent(self, ctx=0):
        c = self.kids.get(ctx) if ctx else None
        if c is not None and c.unanswered > 0:
            c.unanswered -= 1
        if self.calls_unanswered > 0:
            self.calls_unanswered -= 1
        if c is not None:
            self._child_progress(c)
        self._after_answer()

    def open_context(self, txn, token, name=b""):
        """Section 6: open a child; returns its id, or 0 when none may be opened now (nothing sent)."""
        mine = sum(1 for c in self.kids.values() if c.mine)
        if not self._open_for_calls() or mine >= self.agreed_max_child_contexts or txn == 0:
            self.handed.append("opened ctx=0")
            return 0
        cid = self.next_child_id
        self.next_child_id += 2
        body = enc_item(T_STR, name) if name else b""
        self.written.append(frame(CONTEXT_OPEN, body, token, txn, cid))
        self.kids[cid] = Child(cid, mine=True)
        self.requests[txn] = ("open", cid)
        self.calls_outstanding += 1
        self.handed.append("opened ctx=%d" % cid)
        return cid

    def close_context(self, cid, txn):
        """Section 6: close child `cid` in order; False when it is not open here, already closed by
        us or being closed by the peer (nothing sent)."""
        c = self.kids.get(cid)
        if c is None or c.closing() or not self._open_for_calls() or txn == 0:
            self.handed.append("close_context false")
            return False
        self.written.append(frame(CONTEXT_CLOSE, b"", ZERO_TOKEN, txn, cid))
        c.our_close_txn = txn
        self.requests[txn] = ("close", cid)
        self.calls_outstanding += 1
        self.handed.append("close_context true")
        return True

    def eof(self):
        if self.state in ("closed", "failed"):
            return
        if self.buf:
            self._fail(2, "truncated: the stream ended inside a frame")
        elif self.sent_close and self.peer_closing:
            self.state = "closed"  # outstanding calls fail with 272 (owner's side)
        else:
            self._fail(CONNECTION_LOST, "end of stream without close")

    def tick(self, ms):
        self.now = ms
        if self.state == "handshaking":
            if self.now >= self.handshake_timeout:
                self._fatal(22, "no handshake in time")
            return
        if self.state in ("closed", "failed"):
            return
        if self.ping_interval:
            # Section 12: dead after three intervals of silence once two pings really sent went
            # unanswered, the last for a whole interval (from when it was due, if it went out within
            # the 100 ms timer tolerance); in closing, silence alone.
            silent = self.now - self.last_rx >= 3 * self.ping_interval
            answered_for = self.now - self.last_ping_counted >= self.ping_interval
            if silent and (self.state == "closing" or (self.unanswered >= 2 and answered_for)):
                self._fail(CONNECTION_LOST, "peer dead: nothing received")
                return
        if self.state == "closing":
            if self.now - self.close_sent_at >= self.close_timeout:
                self._fail(CONNECTION_LOST, "close timed out")
            return
        due = self._next_ping_due()
        if self.ping_interval and self.unanswered < 2 and self.now >= due:
            self.written.append(frame(PING, txn=self.next_ping_id))
            self.next_ping_id += 1
            self.last_ping = self.now
            self.last_ping_counted = due if self.now - due <= 100 else self.now
            self.unanswered += 1

    def _next_ping_due(self):
        """Section 12: pings are due at whole intervals after the last byte received."""
        if self.last_ping < self.last_rx:
            return self.last_rx + self.ping_interval
        pinged = (self.last_ping - self.last_rx) // self.ping_interval
        return self.last_rx + self.ping_interval * (pinged + 1)

    # -- receiving ---------------------------------------------------------------------------------
    def receive(self, data):
        if self.state in ("closed", "failed"):
            return
        if data:
            self.last_rx = self.now
            self.unanswered = 0
        self.buf += data
        while self.state not in ("closed", "failed"):
            b = self.buf
            # bad_magic as soon as one of the first four bytes differs (section 9, allowed early)
            k = min(4, len(b))
            if b[:k] != MAGIC[:k]:
                self._fatal(3, "not a Courier frame")
                return
            if len(b) < HEADER:
                return
            hdr = parse_header(b)
            if hdr["version"] != self.version:
                self._fatal(4, "version %d, expected %d" % (hdr["version"], self.version))
                return
            if hdr["hlen"] != HEADER:
                self._fatal(5, "header length %d" % hdr["hlen"])
                return
            # sections 8 and 10: until the peer's handshake is accepted, no frame over 4096 bytes
            limit = min(self.max_frame, MAX_FIRST_FRAME) if self.state == "handshaking" else self.max_frame
            if HEADER + hdr["blen"] > limit:
                self._fatal(9, "frame of %d bytes, limit %d" % (HEADER + hdr["blen"], limit))
                return
            total = HEADER + hdr["blen"]
            if len(b) < total:
                return
            raw = bytes(b[:total])
            del b[:total]
            self._frame(hdr, raw)

    def _frame(self, hdr, raw):
        body = raw[HEADER:]
        kind, txn, ctx, token = hdr["kind"], hdr["txn"], hdr["ctx"], hdr["token"]
        if self.state == "handshaking":
            self._first_frame(hdr, body)
            return
        # after the handshake: another handshake is unexpected, well-formed or not (section 8)
        if kind == HANDSHAKE:
            self._fatal(23, "second handshake")
            return
        try:
            items = check_frame(hdr, body, self.max_items, self.max_depth)
            # state checks last (section 9): a call or a context request with transaction id 0
            if kind in (CALL, CONTEXT_OPEN, CONTEXT_CLOSE) and txn == 0:
                raise ProtocolError(24, "%s: transaction id 0" % KINDS[kind])
            if kind == ERROR and txn == 0:
                code, text = typed(items, [T_U32, T_STR])
        except ProtocolError as e:
            self._spoiled(hdr, e)
            return
        if kind == CONTEXT_OPEN:
            self._context_open(hdr, items)
            return
        if kind == CONTEXT_CLOSE:
            self._context_close(hdr)
            return
        if kind in (CALL, SEND) and ctx != 0:
            c = self.kids.get(ctx)
            # section 6: a child that is not open, or whose context_close arrived, is not open
            if c is None or c.peer_close_txn is not None:
                self.unknown_context_frames += 1
                what = "%s %s" % (KINDS[kind], token.decode("latin-1"))
                if kind == CALL:
                    self.written.append(error_frame(NO_SUCH_CONTEXT, "%s: context %d is not open" % (what, ctx),
                                                    token, txn, ctx))
                else:
                    self.written.append(error_frame(NO_SUCH_CONTEXT, "%s: context %d is not open" % (what, ctx),
                                                    token))
                return
            # section 6: behind our context_close, a call is refused with 260 and a send dropped
            if c.our_close_txn is not None:
                if kind == CALL:
                    self.refused_calls += 1
                    self.written.append(error_frame(SYSTEM_SHUTDOWN, "call %s: context %d is closing"
                                                    % (token.decode("latin-1"), ctx), token, txn, ctx))
                else:
                    self.dropped_sends += 1
                return
        if kind == SEND:
            if self.sent_close or self.peer_closing:
                self.dropped_sends += 1
                return
            self.handed.append("send txn=%d%s" % (txn, tag_ctx(ctx)))
        elif kind == CALL:
            if self.sent_close or self.peer_closing:
                self.refused_calls += 1
                self.written.append(error_frame(SYSTEM_SHUTDOWN, "%s: the connection is closing"
                                                % token.decode("latin-1"), token, txn, ctx))
                return
            self.calls_unanswered += 1
            if ctx:
                self.kids[ctx].unanswered += 1
            self.handed.append("call txn=%d%s" % (txn, tag_ctx(ctx)))
        elif kind in (REPLY, ERROR) and txn != 0:
            self.handed.append("%s txn=%d%s" % (KINDS[kind], txn, tag_ctx(ctx)))
            self._answered(txn, refused=(kind == ERROR))
        elif kind == ERROR:  # transaction id 0: about the connection (section 9)
            if code in NONFATAL_PROTOCOL or code == NO_SUCH_CONTEXT:
                return  # information about a spoiled frame of ours; never answered
            self._fail(code, "peer: " + text.decode("utf-8"))
        elif kind == PING:
            self.written.append(raw[:6] + bytes([PONG]) + raw[7:])
        elif kind == PONG:
            pass
        elif kind == CLOSE:
            if self.peer_closing:
                return  # a second close is ignored
            self.peer_closing = True
            self._after_answer()

    def _answered(self, txn, refused):
        """A reply or error (or a spoiled one) for one of our calls or requests arrived."""
        if self.calls_outstanding > 0:
            self.calls_outstanding -= 1
        req = self.requests.pop(txn, None)
        if req is not None:
            what, cid = req
            c = self.kids.get(cid)
            if c is not None and c.mine and what == "open" and refused:
                self._end_child(c)  # a refused child was never open (section 6)
            elif c is not None and what == "close" and c.our_close_txn == txn:
                c.our_close_answered = True
                self._child_progress(c)
        self._maybe_closed()

    # -- child contexts (section 6) ------------------------------------------------------------------
    def _context_open(self, hdr, items):
        txn, cid, token = hdr["txn"], hdr["ctx"], hdr["token"]
        own_parity = 1 if self.role == "initiator" else 0

        def refuse(code, text):
            self.contexts_refused += 1
            self.written.append(error_frame(code, "context_open %d: %s" % (cid, text), token, txn, cid))

        # the body: empty or one string, the child's name (section 6)
        if items and items[0][0] != T_STR:
            refuse(18, "the name must be a string")
            return
        if len(items) > 1:
            refuse(20, "the body holds more than the name")
            return
        name = items[0][1] if items else b""
        if len(name) > 255:
            refuse(270, "a name longer than 255 bytes")
            return
        if cid == 0:
            refuse(25, "context 0 is the parent context")
        elif cid % 2 == own_parity:
            refuse(25, "the %s opens %s ids" % ("initiator" if own_parity == 0 else "acceptor",
                                                "odd" if own_parity == 0 else "even"))
        elif cid in self.kids:
            refuse(25, "already open")
        elif self.sent_close or self.peer_closing:
            refuse(SYSTEM_SHUTDOWN, "the connection is closing")
        elif sum(1 for c in self.kids.values() if not c.mine) + 1 > self.max_children:
            refuse(TOO_MANY_CONTEXTS, "this peer's limit of open child contexts (%d) is reached" % self.max_children)
        else:
            # the owner decides whether it serves this kind of child
            self.handed.append("context_open ctx=%d kind=%s name=%s"
                               % (cid, kind_text(token), name.decode("utf-8")))
            if token in self.refused_kinds:
                refuse(NO_SUCH_SERVICE, "no child service %s" % kind_text(token))
                return
            self.kids[cid] = Child(cid, mine=False)
            self.contexts_opened += 1
            self.written.append(frame(REPLY, b"", token, txn, cid))

    def _context_close(self, hdr):
        txn, cid, token = hdr["txn"], hdr["ctx"], hdr["token"]
        c = self.kids.get(cid)
        if cid == 0:
            self.written.append(error_frame(25, "context_close 0: the parent context ends with close",
                                            token, txn, cid))
        elif c is None or c.peer_close_txn is not None:
            self.unknown_context_frames += 1
            self.written.append(error_frame(NO_SUCH_CONTEXT, "context_close: context %d is not open" % cid,
                                            token, txn, cid))
        elif self.sent_close or self.peer_closing:
            self.written.append(error_frame(SYSTEM_SHUTDOWN, "context_close %d: the connection is closing" % cid,
                                            token, txn, cid))
        else:
            c.peer_close_txn, c.peer_close_token = txn, token
            self.calls_unanswered += 1  # answered once every call received in the child is
            self.handed.append("context_closing ctx=%d" % cid)
            self._child_progress(c)

    def _child_progress(self, c):
        """Answer the peer's context_close once every call in the child is answered; end the child
        once its close is complete here (section 6)."""
        if c.unanswered:
            return
        if c.peer_close_txn is not None and not c.peer_close_answered:
            self.written.append(frame(REPLY, b"", c.peer_close_token, c.peer_close_txn, c.id))
            c.peer_close_answered = True
            if self.calls_unanswered > 0:
                self.calls_unanswered -= 1
        if not c.closing():
            return
        if c.our_close_txn is not None and not c.our_close_answered:
            return
        self._end_child(c)

    def _end_child(self, c):
        del self.kids[c.id]
        self.handed.append("context_ended ctx=%d" % c.id)

    def _spoiled(self, hdr, e):
        self.spoiled_frames += 1
        kind, txn, ctx, token = hdr["kind"], hdr["txn"], hdr["ctx"], hdr["token"]
        text = e.text or ERRC[e.code]
        if kind in (CALL, CONTEXT_OPEN, CONTEXT_CLOSE) and txn != 0:
            # a call is answered with its ids (section 9); a context request is answered like a call
            # (section 6: exactly one reply or error with its transaction id, token and context id)
            if kind == CONTEXT_OPEN:
                self.contexts_refused += 1
            self.written.append(error_frame(e.code, text, token, txn, ctx))
            return
        self.written.append(error_frame(e.code, text, token if kind in (SEND, CALL) else ZERO_TOKEN, 0, 0))
        if kind in (REPLY, ERROR) and txn != 0:
            self.handed.append("bad_reply txn=%d %d" % (txn, e.code))  # the owner is told the id and the fault
            # the answer is lost: the call completes with 273; a context request's answer is taken
            # as a reply (section 6, "Answers to requests")
            self._answered(txn, refused=False)

    def _first_frame(self, hdr, body):
        try:
            items = check_frame(hdr, body, self.max_items, self.max_depth)
        except ProtocolError as e:
            self._fatal(22, "first frame: " + str(e))
            return
        if hdr["kind"] == ERROR and hdr["txn"] == 0:
            try:
                code, text = typed(items, [T_U32, T_STR])
            except ProtocolError as e:
                self._fatal(22, "first frame: error frame: " + str(e))
                return
            self._fail(code, "peer refused: " + text.decode("utf-8"))
            return
        if hdr["kind"] != HANDSHAKE:
            self._fatal(22, "first frame is a %s" % KINDS[hdr["kind"]])
            return
        vals = [v for _, v in items]
        tags = [t for t, _ in items]
        want = [T_U8, T_U8, T_U64, T_U32, T_STR]
        if len(items) < 5 or tags[:5] != want:
            self._fatal(22, "handshake items 1..5 missing or of other types")
            return
        for i in (5, 6):
            if len(items) > i and tags[i] != T_U32:
                self._fatal(22, "handshake item %d is not uint32" % (i + 1))
                return
        lo, hi, _caps, mframe = vals[:4]
        mitems = vals[5] if len(items) > 5 else DEFAULT_MAX_ITEMS
        mdepth = vals[6] if len(items) > 6 else DEFAULT_MAX_DEPTH
        if lo == 0 or lo > hi:
            self._fatal(22, "bad version range %d..%d" % (lo, hi))
            return
        # item 8, the nonce, when it is a uint64 (an eighth item of another type is ignored)
        item8 = len(items) > 7 and tags[7] == T_U64
        nonce = vals[7] if item8 else 0
        if nonce and nonce == self.nonce:
            self._fatal(22, "our own handshake, reflected")
            return
        # item 9, the peer's limit of our children: a uint32 read only behind a uint64 item 8
        mchildren = vals[8] if item8 and len(items) > 8 and tags[8] == T_U32 else 0
        if mframe < MIN_MAX_FRAME or mitems < MIN_MAX_ITEMS or mdepth < MIN_MAX_DEPTH:
            self._fatal(22, "limits below the minimums")
            return
        own_lo, own_hi = 1, 1
        version = min(own_hi, hi)
        if version < max(own_lo, lo):
            self._fatal(4, "no common protocol version: we speak %d..%d, peer speaks %d..%d"
                        % (own_lo, own_hi, lo, hi))
            return
        self.version = version
        self.agreed_max_frame_size, self.agreed_max_items, self.agreed_max_depth = mframe, mitems, mdepth
        self.agreed_max_child_contexts = mchildren
        self.state = "open"
        self.last_rx = self.now
        self.last_ping = self.last_ping_counted = self.now

    # -- closing -----------------------------------------------------------------------------------
    def _send_close(self, reason=None):
        body = enc_item(T_STR, reason) if reason is not None else b""
        self.written.append(frame(CLOSE, body))
        self.sent_close = True
        self.close_sent_at = self.now
        self.state = "closing"

    def _after_answer(self):
        if self.state == "open" and self.peer_closing and self.calls_unanswered == 0 and not self.sent_close:
            self._send_close()
        self._maybe_closed()

    def _maybe_closed(self):
        # the connection's close waits for every call and request in every context (section 6)
        if (self.state == "closing" and self.sent_close and self.peer_closing
                and self.calls_unanswered == 0 and self.calls_outstanding == 0):
            self.state = "closed"

    def _fatal(self, code, text):
        self.written.append(error_frame(code, text))
        self._fail(code, text)

    def _fail(self, code, text):
        self.state = "failed"
        self.failure = code
        self.failure_text = text


# ---------------------------------------------------------------------------------------------------
# Printing (tests/vectors/README.md text form)

def quote(b):
    out = []
    for c in b:
        if c == 0x22:
            out.append('\\"')
        elif c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c <= 0x7E:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return '"' + "".join(out) + '"'


def shortest(x, is32):
    """Shortest decimal that reads back to the same value, formatted as C++ to_chars does:
    %f or %e style, whichever is shorter (fixed on a tie)."""
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    if is32:
        for p in range(1, 18):
            s = "%.*e" % (p - 1, x)
            try:
                if struct.unpack("<f", struct.pack("<f", float(s)))[0] == x:
                    break
            except OverflowError:  # rounded past the largest float32
                continue
    else:
        # repr is the shortest round-trip form; rewrite it with exactly its digits in %e style
        s = "%.*e" % (len(_digits(repr(x))) - 1, x)
    mant, exp = s.split("e")
    exp = int(exp)
    neg = mant.startswith("-")
    digits = mant.lstrip("-").replace(".", "").rstrip("0") or "0"
    sci = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + "e" + ("-" if exp < 0 else "+") + "%02d" % abs(exp)
    if exp >= 0:
        if len(digits) <= exp + 1:
            fixed = digits + "0" * (exp + 1 - len(digits))
        else:
            fixed = digits[:exp + 1] + "." + digits[exp + 1:]
    else:
        fixed = "0." + "0" * (-exp - 1) + digits
    r = fixed if len(fixed) <= len(sci) else sci
    return ("-" if neg else "") + r


def _digits(s):
    m = s.lstrip("-").split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return m or "0"


def fmt_float(raw):
    if len(raw) == 4:
        (bits,) = struct.unpack("<I", raw)
        (x,) = struct.unpack("<f", raw)
        quiet = 0x7FC00000
    else:
        (bits,) = struct.unpack("<Q", raw)
        (x,) = struct.unpack("<d", raw)
        quiet = 0x7FF8000000000000
    if math.isnan(x):
        return "nan" if bits == quiet else "nan:0x%x" % bits
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return shortest(x, len(raw) == 4)


def print_items(items, indent, out):
    for tag, val in items:
        pad = "  " * indent
        if tag == T_LIST:
            out.append(pad + "list")
            print_items(val, indent + 1, out)
            out.append(pad + "end")
        elif tag == T_BOOL:
            out.append(pad + "bool " + ("true" if val else "false"))
        elif tag in (T_F32, T_F64):
            out.append(pad + TAG_NAMES[tag] + " " + fmt_float(val))
        elif tag == T_STR:
            out.append(pad + "string " + quote(val))
        elif tag == T_BIN:
            out.append(pad + "binary 0x" + val.hex())
        else:
            out.append(pad + "%s %d" % (TAG_NAMES[tag], val))


def print_frame(raw):
    """Decoded text form of one complete frame (for reports); never raises."""
    if len(raw) < HEADER:
        return "(%d raw bytes: %s)" % (len(raw), raw.hex(" "))
    hdr = parse_header(raw)
    line = '%s token=%s txn=%d ctx=%d' % (KINDS.get(hdr["kind"], "kind%d" % hdr["kind"]),
                                          quote(hdr["token"]), hdr["txn"], hdr["ctx"])
    if raw[:4] != MAGIC or hdr["version"] != 1 or hdr["hlen"] != HEADER or hdr["flags"]:
        line += " [header: %s]" % raw[:8].hex(" ")
    body = raw[HEADER:]
    out = [line]
    try:
        print_items(check_body(body), 1, out)
    except ProtocolError as e:
        out.append("  (body %s: %s)" % (ERRC.get(e.code), body.hex(" ")))
    return "\n".join(out)


def decode_stream(data):
    """Golden-vector decoder: frames back to back with the default limits; returns (texts, error)."""
    texts = []
    pos = 0
    while pos < len(data):
        rest = data[pos:]
        k = min(4, len(rest))
        if rest[:k] != MAGIC[:k]:
            return texts, "bad_magic"
        if len(rest) < HEADER:
            return texts, "truncated"
        hdr = parse_header(rest)
        if hdr["version"] != 1:
            return texts, "unsupported_version"
        if hdr["hlen"] != HEADER:
            return texts, "bad_header_length"
        if HEADER + hdr["blen"] > DEFAULT_MAX_FRAME:
            return texts, "frame_too_large"
        if len(rest) < HEADER + hdr["blen"]:
            return texts, "truncated"
        raw = rest[:HEADER + hdr["blen"]]
        try:
            items = check_frame(hdr, raw[HEADER:], DEFAULT_MAX_ITEMS, DEFAULT_MAX_DEPTH)
        except ProtocolError as e:
            return texts, ERRC[e.code]
        out = ['%s token=%s txn=%d ctx=%d' % (KINDS[hdr["kind"]], quote(hdr["token"]), hdr["txn"], hdr["ctx"])]
        print_items(items, 1, out)
        texts.extend(out)
        pos += len(raw)
    return texts, None


def unquote(s):
    """The inverse of quote(): text between the quotes to bytes."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if s[i + 1] == "x":
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
                continue
            out.append(ord(s[i + 1]))
            i += 2
            continue
        out.append(ord(c))
        i += 1
    return bytes(out)


def parse_float(text, is32):
    fmt, ifmt = ("<f", "<I") if is32 else ("<d", "<Q")
    if text.startswith("nan:0x"):
        return struct.pack(ifmt, int(text[6:], 16))
    if text == "nan":
        return struct.pack(ifmt, 0x7FC00000 if is32 else 0x7FF8000000000000)
    return struct.pack(fmt, float(text))


def encode_text(lines):
    """Golden-vector encoder: the README's text form back to bytes."""
    out = b""
    kind = head = body = None

    def flush():
        nonlocal out
        if head is not None:
            out += frame(kind, body, head["token"], head["txn"], head["ctx"])

    for line in lines:
        if not line.startswith(" "):
            flush()
            name, rest = line.split(" ", 1)
            kind = {v: k for k, v in KINDS.items()}[name]
            tok_end = rest.index('" txn=')
            token = unquote(rest[len('token="'):tok_end])
            txn, ctx = (int(f.split("=")[1]) for f in rest[tok_end + 2:].split())
            head = {"token": token, "txn": txn, "ctx": ctx}
            body = b""
            continue
        item = line.strip()
        name, _, val = item.partition(" ")
        tag = {v: k for k, v in TAG_NAMES.items()}[name]
        if tag in (T_LIST, T_END):
            body += bytes([tag])
        elif tag == T_BOOL:
            body += bytes([tag, 1 if val == "true" else 0])
        elif tag in (T_F32, T_F64):
            body += bytes([tag]) + parse_float(val, tag == T_F32)
        elif tag == T_STR:
            body += enc_item(tag, unquote(val[1:-1]))
        elif tag == T_BIN:
            body += enc_item(tag, bytes.fromhex(val[2:]))
        else:
            body += enc_item(tag, int(val))
    flush()
    return out


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
    w = 0  # written frames matched so far
    h = 0  # handed-over frames matched so far

    def drained(n):
        if w < len(sess.written):
            raise Mismatch("line %d: the peer wrote a frame the transcript does not list:\n%s"
                           % (n, indent(print_frame(sess.written[w]))))
        if h < len(sess.handed):
            raise Mismatch("line %d: the owner observed '%s', not listed" % (n, sess.handed[h]))

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
            if h >= len(sess.handed):
                raise Mismatch("line %d: expected the owner to observe '%s', it observed nothing" % (n, exp))
            if sess.handed[h] != exp:
                raise Mismatch("line %d: expected the owner to observe '%s', it observed '%s'"
                               % (n, exp, sess.handed[h]))
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
                sess.open_context(int(words[1]), parse_kind(words[2]), name)
            elif cmd == "close_context":
                sess.close_context(int(words[1]), int(words[2]))
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
