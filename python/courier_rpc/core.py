"""The owner's side of a connection, shared by the blocking and the asyncio clients (and meant for a
server too): transaction ids, calls waiting for their answers, the services this end serves in each
context, reflection, and how the session's failures reach the application. No I/O: the clients move
the bytes and provide the waiting."""

import inspect
import os
import time

from .session import Session
from .signature import ArgumentError, Signature
from .wire import (CONNECTION_LOST, DEFAULT_MAX_DEPTH, ERRC, HANDLER_FAILED, HEADER, INVALID_ARGUMENT,
                   NO_SUCH_CONTEXT, NO_SUCH_SERVICE, PROTOCOL_ERROR, REFLECTION_TOKEN, SYSTEM_SHUTDOWN,
                   T_STR, T_U32, TOO_MANY_CONTEXTS, UInt8, ProtocolError, as_token, check_body,
                   encode_values, error_name, to_python, to_typed, typed)


class CourierError(Exception):
    """A call, a request or a connection that failed: `code` and `name` as docs/protocol.md section 9
    numbers and names them (259 request_timeout for a call's own time-out, 272 connection_lost for a
    connection that ended, 273 protocol_error for a peer that broke the protocol), `text` the
    peer's or this end's explanation."""

    def __init__(self, code, text="", token=None):
        self.code = code
        self.name = error_name(code)
        self.text = text
        self.token = token
        super().__init__("%sERROR %d (%s)%s" % ("%s answered " % token if token else "", code, self.name,
                                              ": " + text if text else ""))


class Service:
    __slots__ = ("token", "fn", "signature", "returns", "is_async")

    def __init__(self, token, fn, arguments, result, description, returns):
        self.token = token.decode("latin-1")
        self.fn = fn
        self.signature = Signature(self.token, int(returns), arguments, result, description)
        self.returns = returns
        self.is_async = inspect.iscoroutinefunction(fn)


class Services:
    """The services one end serves in one context, by token, in the order they were added (the
    order reflection lists them). A handler takes the call's arguments as Python values (read
    against `arguments` when the service declares it) and returns its result (encoded by `result`
    when declared; a tuple for a result of several fields)."""

    def __init__(self):
        self._by_token = {}

    def add(self, token, fn, arguments="", result="", description="", returns=None):
        tok = as_token(token)
        if tok.startswith(b"$"):
            raise ValueError("tokens that start with $ are reserved for the protocol's own services")
        if returns is None:
            returns = result != "()"
        self._by_token[tok] = Service(tok, fn, arguments, result, description, returns)
        return fn

    def service(self, token, arguments="", result="", description=""):
        """Decorator form of add()."""
        return lambda fn: self.add(token, fn, arguments, result, description)

    def get(self, token):
        return self._by_token.get(token)

    def reflect(self):
        """The $SVC reply's items (section 15)."""
        return [[s.token, UInt8(1 if s.returns else 0), s.signature.arguments, s.signature.result,
                 s.signature.description] for s in self._by_token.values()]

    def __len__(self):
        return len(self._by_token)


NO_SERVICES = Services()


def _answer_items(items):
    return to_python(items)


class Incoming:
    """A call or send of the peer for the owner to run: `service.fn(*args)`, then `done(result)` or
    `failed(exc)` answers it (nothing is answered for a send)."""

    __slots__ = ("core", "ev", "service", "args")

    def __init__(self, core, ev, service, args):
        self.core, self.ev, self.service, self.args = core, ev, service, args

    def done(self, result):
        ev = self.ev
        if ev.what != "call":
            return
        sig = self.service.signature
        body = bytearray()
        try:
            if sig.result_shape is None:
                values = [] if result is None else list(result) if isinstance(result, tuple) else [result]
                encode_values(values, body)
            else:
                sig.encode_result(result, body)
        except (TypeError, ValueError, OverflowError) as e:
            self.core.session.answer(ev.txn, ev.token, ev.ctx, code=HANDLER_FAILED, text=str(e))
            return
        self.core.session.answer(ev.txn, ev.token, ev.ctx, body)

    def failed(self, exc):
        ev = self.ev
        if ev.what != "call":
            return
        if isinstance(exc, CourierError):
            code, text = exc.code, exc.text
        else:
            code, text = HANDLER_FAILED, "%s: %s" % (type(exc).__name__, exc)
        self.core.session.answer(ev.txn, ev.token, ev.ctx, code=code, text=text)


class CoreView:
    """What a connection (blocking or asyncio) tells of its Core, `self._core`."""

    @property
    def state(self):
        """handshaking, open, closing (a close was sent), closed or failed (docs/protocol.md section 11)."""
        return self._core.state

    @property
    def peer_limits(self):
        s = self._core.session
        return {"max_frame": s.agreed_max_frame_size, "max_items": s.agreed_max_items,
                "max_depth": s.agreed_max_depth, "max_child_contexts": s.agreed_max_child_contexts}

    @property
    def dropped_replies(self):
        """Answers that came for calls nobody waited for any more (timed out or cancelled)."""
        return self._core.dropped_replies


class Core:
    def __init__(self, role, name, services=None, child_services=None, max_children=0,
                 ping_interval=10.0, handshake_timeout=10.0, close_timeout=10.0,
                 max_frame=None, max_items=None, max_depth=None):
        kw = {}
        if max_frame:
            kw["max_frame"] = max_frame
        if max_items:
            kw["max_items"] = max_items
        if max_depth:
            kw["max_depth"] = max_depth
        self.session = Session(role, name=name, handshake_timeout=int(handshake_timeout * 1000),
                               ping_interval=int(ping_interval * 1000), close_timeout=int(close_timeout * 1000),
                               **kw)
        self.session.nonce = int.from_bytes(os.urandom(8), "little") | 1
        self.child_services = child_services
        self.session.max_children = max_children if child_services is not None else 0
        self.session.accept_child = self._accept_child
        self.session.fast_args = self._fast_args
        self.tables = {0: services if services is not None else NO_SERVICES}
        self.next_txn = 1
        self.pending = {}  # txn -> (complete(value, exc), read(items) -> value)
        self.dropped_replies = 0
        self._t0 = time.monotonic()

    # -- time and bytes -------------------------------------------------------------------------------
    def now_ms(self):
        return int((time.monotonic() - self._t0) * 1000)

    def start(self):
        self.session.now = self.now_ms()
        self.session.start()

    def output(self):
        w = self.session.written
        if not w:
            return b""
        data = w[0] if len(w) == 1 else b"".join(w)
        w.clear()
        return data

    def feed(self, data):
        """Bytes from the peer; returns the incoming calls and sends for the owner to run, in order."""
        self.session.receive(data, self.now_ms())
        return self._handle()

    def tick(self):
        self.session.tick(self.now_ms())
        return self._handle()

    def eof(self):
        self.session.eof()
        return self._handle()

    @property
    def state(self):
        return self.session.state

    @property
    def ended(self):
        return self.session.state in ("closed", "failed")

    def failure(self):
        """The error that ends what still waits on a connection that ended."""
        s = self.session
        if s.state == "closed":
            return CourierError(CONNECTION_LOST, "the connection is closed")
        if s.state == "handshaking":
            return CourierError(CONNECTION_LOST, "the connection is not open yet")
        if 0 < s.failure < 256:
            return CourierError(PROTOCOL_ERROR, "%s: %s" % (ERRC.get(s.failure, s.failure), s.failure_text))
        if s.failure == CONNECTION_LOST:
            return CourierError(CONNECTION_LOST, s.failure_text)
        return CourierError(CONNECTION_LOST, "%s (code %d, %s)" % (s.failure_text, s.failure, error_name(s.failure)))

    def handshake_failure(self):
        """The error of a connection that never opened: the peer's code when it refused."""
        s = self.session
        if s.state == "failed":
            return CourierError(s.failure, s.failure_text)
        return CourierError(CONNECTION_LOST, "the connection ended during the handshake")

    # -- our calls ------------------------------------------------------------------------------------
    def _check_usable(self, ctx, token=None):
        s = self.session
        if s.state in ("closed", "failed"):
            raise self.failure()
        if s.state == "handshaking":
            raise CourierError(CONNECTION_LOST, "the connection is not open yet")
        if s.sent_close or s.peer_closing:
            raise CourierError(SYSTEM_SHUTDOWN, "not sent: the connection is closing", token)
        if not s.usable(ctx):
            raise CourierError(NO_SUCH_CONTEXT, "context %d is not open" % ctx, token)

    def encode(self, values):
        return encode_values(values, max_depth=self.session.agreed_max_depth or DEFAULT_MAX_DEPTH)

    def _check_limits(self, body, token):
        s = self.session
        if HEADER + len(body) > s.agreed_max_frame_size:
            raise CourierError(INVALID_ARGUMENT, "a frame of %d bytes is larger than the peer accepts (%d)"
                               % (HEADER + len(body), s.agreed_max_frame_size), token)
        if len(body) > s.agreed_max_items:  # every item takes a byte at least: only then can there be too many
            try:
                check_body(bytes(body), s.agreed_max_items, s.agreed_max_depth)
            except ProtocolError as e:
                raise CourierError(INVALID_ARGUMENT, "the peer would refuse the call: %s" % e, token)

    def call(self, token, body, ctx, complete, read=_answer_items):
        """Writes a call; `complete(value, exc)` runs once its answer came (or the connection ended).
        Returns the transaction id."""
        tok_text = token.decode("latin-1")
        self._check_usable(ctx, tok_text)
        self._check_limits(body, tok_text)
        txn = self.next_txn
        self.next_txn += 1
        self.session.send_call(token, body, txn, ctx)
        self.pending[txn] = (complete, read, tok_text)
        return txn

    def send(self, token, body, ctx):
        tok_text = token.decode("latin-1")
        self._check_usable(ctx, tok_text)
        self._check_limits(body, tok_text)
        self.session.send_call(token, body, 0, ctx)

    def give_up(self, txn):
        """The caller stopped waiting (its time-out): a late answer is dropped and counted."""
        self.pending.pop(txn, None)

    def open_context(self, kind, name, services, complete):
        self._check_usable(0)
        s = self.session
        mine = sum(1 for c in s.kids.values() if c.mine)
        if mine >= s.agreed_max_child_contexts:
            raise CourierError(TOO_MANY_CONTEXTS, "the peer accepts %s child contexts" %
                               ("no" if s.agreed_max_child_contexts == 0 else
                                "at most %d open" % s.agreed_max_child_contexts))
        txn = self.next_txn
        self.next_txn += 1
        cid = s.open_context(txn, kind, name.encode("utf-8"))
        self.tables[cid] = services if services is not None else NO_SERVICES

        def opened(value, exc):
            if exc is not None:
                self.tables.pop(cid, None)
            complete(cid, exc)

        self.pending[txn] = (opened, _answer_items, None)
        return cid

    def close_context(self, cid, complete):
        self._check_usable(0)
        txn = self.next_txn
        self.next_txn += 1
        if not self.session.close_context(cid, txn):
            raise CourierError(NO_SUCH_CONTEXT, "context %d is not open (or already closing)" % cid)
        self.pending[txn] = (complete, _answer_items, None)

    def close(self, reason="done"):
        self.session.close(reason)

    # -- what the session hands over ------------------------------------------------------------------
    def _handle(self):
        s = self.session
        incoming = []
        if s.events:
            events, s.events = s.events, []
            for ev in events:
                w = ev.what
                if w == "reply" or w == "error" or w == "bad_reply":
                    self._answered(ev)
                elif w == "call" or w == "send":
                    inc = self._incoming(ev)
                    if inc is not None:
                        incoming.append(inc)
                elif w == "context_ended":
                    self.tables.pop(ev.ctx, None)
        if s.state in ("closed", "failed") and self.pending:
            err = self.failure()
            pending, self.pending = self.pending, {}
            for complete, _read, tok in pending.values():
                complete(None, CourierError(err.code, err.text, tok))
        return incoming

    def _answered(self, ev):
        entry = self.pending.pop(ev.txn, None)
        if entry is None:
            self.dropped_replies += 1  # an answer nobody waits for (section 5)
            return
        complete, read, tok = entry
        if ev.what == "bad_reply":
            complete(None, CourierError(PROTOCOL_ERROR, "the answer was spoiled: %s" % error_name(ev.code), tok))
        elif ev.what == "error":
            try:
                code, text = typed(ev.items, [T_U32, T_STR])
                complete(None, CourierError(code, text.decode("utf-8"), tok))
            except ProtocolError as e:
                complete(None, CourierError(PROTOCOL_ERROR, "an ERROR answer that is not code and text: %s" % e, tok))
        else:
            try:
                value = read(ev.items)
            except ProtocolError as e:
                complete(None, CourierError(PROTOCOL_ERROR, "the reply does not match the result: %s" % e, tok))
                return
            complete(value, None)

    def _incoming(self, ev):
        """A call or send of the peer: answers what needs no handler (reflection, unknown services,
        arguments that do not fit) and returns the rest as Incoming."""
        s = self.session
        table = self.tables.get(ev.ctx, NO_SERVICES)
        if ev.token == REFLECTION_TOKEN:
            if ev.what == "call":
                s.answer(ev.txn, ev.token, ev.ctx, encode_values(table.reflect()))
            return None
        svc = table.get(ev.token)
        if svc is None:
            if ev.what == "call":
                s.answer(ev.txn, ev.token, ev.ctx, code=NO_SUCH_SERVICE,
                         text="no service %s" % ev.token.decode("latin-1"))
            return None
        if ev.args is not None:
            return Incoming(self, ev, svc, ev.args)
        try:
            args = (to_typed(ev.items) if svc.signature.argument_fields is None
                    else svc.signature.read_arguments(ev.items))
        except ProtocolError as e:
            # A call read against its definition that does not fit is a spoiled frame (section 7)
            if ev.what == "call":
                s.answer(ev.txn, ev.token, ev.ctx, code=e.code, text=e.text)
            return None
        return Incoming(self, ev, svc, args)

    def _fast_args(self, token, body):
        """A call in the parent context to a service whose arguments are all integers, its body
        exactly their tags and values: the arguments read with one struct (what check_body and
        read_arguments give for it); None for anything else, which takes the general path."""
        svc = self.tables[0]._by_token.get(token)
        if svc is None:
            return None
        ints = svc.signature._int_args
        if ints is None:
            return None
        packer, tags = ints
        if len(body) != packer.size or len(tags) > self.session.max_items:
            return None
        vals = packer.unpack_from(body)
        if vals[0::2] != tags:
            return None
        return list(vals[1::2])

    def _accept_child(self, cid, kind, name):
        kind_text = "" if kind == b"\0\0\0\0" else kind.decode("latin-1")
        table = self.child_services(kind_text, name.decode("utf-8")) if self.child_services else None
        if table is None:
            return (NO_SUCH_SERVICE, "no child context of kind %s here" % (kind_text or "(default)"))
        self.tables[cid] = table
        return None


__all__ = ["ArgumentError", "CourierError", "Core", "Services"]
