"""The connection state machine of docs/protocol.md (sections 6, 8, 9, 11, 12, 13), without I/O.

`Session` is one end of a connection, either role: its owner feeds it bytes (`receive`), time
(`tick`) and end of stream (`eof`), and tells it what it does (`close`, `send_call`, `answer`,
`open_context`, `close_context`). The session appends the frames to write to `written` and what the
owner must act on to `events`. A client and a server share it; tests/vectors/spec_peer.py replays
the transcripts of tests/vectors/transcripts/ through it.
"""

from .wire import (CALL, CLOSE, CONNECTION_LOST, CONTEXT_CLOSE, CONTEXT_OPEN, DEFAULT_MAX_DEPTH,
                   DEFAULT_MAX_FRAME, DEFAULT_MAX_ITEMS, ERRC, ERROR, HANDSHAKE, HEADER, KINDS, MAGIC,
                   MAX_FIRST_FRAME, MIN_MAX_DEPTH, MIN_MAX_FRAME, MIN_MAX_ITEMS, NO_SUCH_CONTEXT,
                   NO_SUCH_SERVICE, NONFATAL_PROTOCOL, PING, PONG, REPLY, SEND, SYSTEM_SHUTDOWN,
                   T_STR, T_U8, T_U32, T_U64, TOO_MANY_CONTEXTS, ZERO_TOKEN, ProtocolError,
                   check_frame, enc_item, error_frame, frame, typed, _HEADER)


class Event:
    """What the session hands its owner: `what` is call, send, reply, error (answers with a
    non-zero transaction id), bad_reply (a spoiled answer: `code` names the fault),
    context_open (the peer opened child `ctx`: kind `token`, `name`), context_closing (the peer
    closes child `ctx`) or context_ended (child `ctx` ended here). `items` is the checked items
    tree of wire.check_body."""

    __slots__ = ("what", "txn", "ctx", "token", "items", "code", "name", "args")

    def __init__(self, what, txn=0, ctx=0, token=ZERO_TOKEN, items=None, code=0, name=b"", args=None):
        self.what, self.txn, self.ctx, self.token = what, txn, ctx, token
        self.items, self.code, self.name = items, code, name
        self.args = args  # a call's arguments, already read by the owner's fast_args (items is None then)

    def text(self):
        """The event as a transcript's `^` line (tests/vectors/README.md)."""
        if self.what in ("call", "send", "reply", "error"):
            return "%s txn=%d%s" % (self.what, self.txn, tag_ctx(self.ctx))
        if self.what == "bad_reply":
            return "bad_reply txn=%d %d" % (self.txn, self.code)
        if self.what == "context_open":
            return "context_open ctx=%d kind=%s name=%s" % (self.ctx, kind_text(self.token),
                                                           self.name.decode("utf-8"))
        return "%s ctx=%d" % (self.what, self.ctx)

    def __repr__(self):
        return "Event(%s)" % self.text()


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
    """One end of a connection. Feed it bytes (`receive`), time (`tick`, in milliseconds on the
    owner's clock), end of stream (`eof`) and owner actions (`close`, `send_call`, `answer`,
    `open_context`, `close_context`); it appends the frames it writes to `self.written` and what its
    owner must act on to `self.events` (Event). `accept_child(id, kind, name)` decides a child the peer
    opens that passed every check: None accepts it, a (code, text) pair refuses it."""

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
        self.events = []
        self.accept_child = self._accept_unless_refused
        # fast_args(token, body): the owner's reading of a call in the parent context whose body is
        # exactly the layout of integers its service declares (the arguments, a list), or None for
        # the general path. Such a body passes check_body by construction, to the same items.
        self.fast_args = None
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
        self.timed_out = False  # the failure was one of section 13's time-outs
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

    def _accept_unless_refused(self, cid, kind, name):
        if kind in self.refused_kinds:
            return (NO_SUCH_SERVICE, "no child service %s" % kind_text(kind))
        return None

    def send_call(self, token, body, txn, ctx=0):
        """Writes a call (txn != 0) or a send (txn 0) with item bytes `body`; False when no call may
        go out in `ctx` now (section 11: after a close; section 6: a child not open), nothing written."""
        if not self.usable(ctx):
            return False
        self.written.append(frame(CALL if txn else SEND, bytes(body), token, txn, ctx))
        if txn:
            self.calls_outstanding += 1
        return True

    def answer(self, txn, token, ctx, body=b"", code=None, text=""):
        """Answers the peer's call `txn`: a reply with item bytes `body`, or an error `code`."""
        if self.state in ("closed", "failed"):
            return
        if code is None:
            self.written.append(frame(REPLY, bytes(body), token, txn, ctx))
        else:
            self.written.append(error_frame(code, text, token, txn, ctx))
        self.reply_sent(ctx)

    def ping(self, txn):
        """An application ping (section 12); False when none may go out now."""
        if self.state != "open" or self.sent_close:
            return False
        self.written.append(frame(PING, b"", ZERO_TOKEN, txn))
        return True

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
            return 0
        cid = self.next_child_id
        self.next_child_id += 2
        body = enc_item(T_STR, name) if name else b""
        self.written.append(frame(CONTEXT_OPEN, body, token, txn, cid))
        self.kids[cid] = Child(cid, mine=True)
        self.requests[txn] = ("open", cid)
        self.calls_outstanding += 1
        return cid

    def close_context(self, cid, txn):
        """Section 6: close child `cid` in order; False when it is not open here, already closed by
        us or being closed by the peer (nothing sent)."""
        c = self.kids.get(cid)
        if c is None or c.closing() or not self._open_for_calls() or txn == 0:
            return False
        self.written.append(frame(CONTEXT_CLOSE, b"", ZERO_TOKEN, txn, cid))
        c.our_close_txn = txn
        self.requests[txn] = ("close", cid)
        self.calls_outstanding += 1
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
                self.timed_out = True
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
                self.timed_out = True
                self._fail(CONNECTION_LOST, "peer dead: nothing received")
                return
        if self.state == "closing":
            if self.now - self.close_sent_at >= self.close_timeout:
                self.timed_out = True
                self._fail(CONNECTION_LOST, "close timed out")
            return
        if not self.ping_interval:
            return  # keepalive disabled (section 13)
        due = self._next_ping_due()
        if self.unanswered < 2 and self.now >= due:
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
    def receive(self, data, now=None):
        if now is not None:
            self.now = now
        if self.state in ("closed", "failed"):
            return
        if data:
            self.last_rx = self.now
            self.unanswered = 0
        # Frames are read in place, from `data` itself when nothing was left over: a read that
        # holds whole frames (the usual case) is not copied into the buffer.
        if self.buf:
            self.buf += data
            b = self.buf
        else:
            b = data
        pos, n = 0, len(b)
        try:
            while self.state not in ("closed", "failed"):
                left = n - pos
                if left < 4:
                    # bad_magic as soon as one of the first four bytes differs (section 9, allowed early)
                    if b[pos:n] != MAGIC[:left]:
                        self._fatal(3, "not a Courier frame")
                    return
                if b[pos:pos + 4] != MAGIC:
                    self._fatal(3, "not a Courier frame")
                    return
                if left < HEADER:
                    return
                _magic, version, hlen, kind, flags, blen, token, txn, ctx = _HEADER.unpack_from(b, pos)
                if version != self.version:
                    self._fatal(4, "version %d, expected %d" % (version, self.version))
                    return
                if hlen != HEADER:
                    self._fatal(5, "header length %d" % hlen)
                    return
                # sections 8 and 10: until the peer's handshake is accepted, no frame over 4096 bytes
                limit = min(self.max_frame, MAX_FIRST_FRAME) if self.state == "handshaking" else self.max_frame
                total = HEADER + blen
                if total > limit:
                    self._fatal(9, "frame of %d bytes, limit %d" % (total, limit))
                    return
                if left < total:
                    return
                raw = b[pos:pos + total]
                pos += total
                self._frame({"version": version, "hlen": hlen, "kind": kind, "flags": flags, "blen": blen,
                             "token": token, "txn": txn, "ctx": ctx}, raw)
        finally:
            if pos < n and self.state not in ("closed", "failed"):
                self.buf = bytearray(b[pos:]) if b is not self.buf or pos else self.buf
            else:
                self.buf = bytearray()

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
        if (kind == CALL and ctx == 0 and txn != 0 and hdr["flags"] == 0 and self.fast_args is not None
                and not self.sent_close and not self.peer_closing):
            # the common call: the owner's service reads it in one step (the token is one it serves,
            # so a good one; the body is well-formed by its layout); anything else takes the checks below
            args = self.fast_args(token, body)
            if args is not None:
                self.calls_unanswered += 1
                self.events.append(Event("call", txn, 0, token, None, args=args))
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
            self.events.append(Event("send", txn, ctx, token, items))
        elif kind == CALL:
            if self.sent_close or self.peer_closing:
                self.refused_calls += 1
                self.written.append(error_frame(SYSTEM_SHUTDOWN, "%s: the connection is closing"
                                                % token.decode("latin-1"), token, txn, ctx))
                return
            self.calls_unanswered += 1
            if ctx:
                self.kids[ctx].unanswered += 1
            self.events.append(Event("call", txn, ctx, token, items))
        elif kind in (REPLY, ERROR) and txn != 0:
            self.events.append(Event(KINDS[kind], txn, ctx, token, items))
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
            self.events.append(Event("context_open", txn, cid, token, name=name))
            refused = self.accept_child(cid, token, name)
            if refused is not None:
                refuse(*refused)
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
            self.events.append(Event("context_closing", txn, cid))
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
        self.events.append(Event("context_ended", 0, c.id))

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
            self.events.append(Event("bad_reply", txn, ctx, token, code=e.code))  # the owner is told the id and the fault
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
