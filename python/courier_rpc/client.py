"""The blocking client: one connection, safe to share between threads.

A thread that waits for an answer reads the socket itself while no other thread does (so a call
costs one round trip and no hand-over between threads); the threads waiting meanwhile are woken
by the reader when their answers come. A background thread takes over the reading while no call
has been made for a while: it answers the peer's pings (an idle connection stays alive), runs the
protocol's timers (handshake, keepalive, close) and sees the peer's calls. Those calls of the
services this client serves go to a worker thread, which runs them one at a time in arrival order
(section 5's order of running) without stopping the reading.
"""

import queue
import select
import socket
import struct
import threading
import time
import weakref

from .core import CourierError, Core, CoreView
from .signature import Signature
from .transport import endpoint_from, open_socket
from .wire import CONNECTION_LOST, REFLECTION_TOKEN, REQUEST_TIMEOUT, ZERO_TOKEN, PROTOCOL_ERROR, as_token, to_python

TICK = 0.05  # the timers' granularity (section 12 allows 100 ms late, never early)


class _Waiter:
    __slots__ = ("done", "value", "exc")

    def __init__(self):
        self.done = False
        self.value = self.exc = None

    def complete(self, value, exc):  # runs with the connection's lock held
        self.value, self.exc, self.done = value, exc, True


def parse_services(items):
    """A $SVC reply's values (section 15) to {token: Signature}, in the server's order."""
    out = {}
    for entry in items:
        if (not isinstance(entry, list) or len(entry) < 5 or not isinstance(entry[0], str)
                or not isinstance(entry[1], int) or not all(isinstance(x, str) for x in entry[2:5])):
            raise CourierError(PROTOCOL_ERROR, "a malformed service list: %r" % (entry,))
        try:
            out[entry[0]] = Signature(entry[0], entry[1], entry[2], entry[3], entry[4])
        except ValueError as e:
            raise CourierError(PROTOCOL_ERROR, "service %s: %s" % (entry[0], e))
    return out


class Bound:
    """A service called by its reflected signature: `conn.ADD_(2, 3)`; `.send(...)` sends one-way."""

    def __init__(self, caller, signature):
        self._caller, self.signature = caller, signature
        self._token = as_token(signature.token)

    def __call__(self, *args, timeout=None):
        body = bytearray()
        self.signature.encode(args, body)  # ArgumentError here: nothing was sent
        return self._caller._roundtrip(self._token, body, timeout, self.signature.read_result)

    def send(self, *args):
        body = bytearray()
        self.signature.encode(args, body)
        self._caller._send(self._token, body)

    def __repr__(self):
        return "<service %s>" % self.signature


class _Caller:
    """Calls in one context: the connection's parent context (Connection) or a child (Context)."""

    _ctx = 0

    def call(self, token, *items, timeout=None):
        """Calls `token` with `items` (Python values: int is int64, float float64, or the width
        classes Int32(...), UInt8(...), Float32(...)...) and returns the reply's items as a list.
        Raises CourierError: the ERROR the server answered, 259 when no answer came within
        `timeout` seconds (default: the connection's), 272 when the connection ended."""
        return self._roundtrip(as_token(token), self._conn._core_encode(items), timeout, to_python)

    def send(self, token, *items):
        """Sends one-way (no answer: a failure of the service is not reported)."""
        self._send(as_token(token), self._conn._core_encode(items))

    def services(self, refresh=False, timeout=None):
        """What the peer serves in this context, from reflection ($SVC): {token: Signature}."""
        if self._services is None or refresh:
            self._services = parse_services(self._roundtrip(REFLECTION_TOKEN, b"", timeout, to_python))
        return self._services

    def service(self, token):
        """The service `token` called by its signature (for tokens that are not attribute names)."""
        sig = self.services().get(token)
        if sig is None:
            raise KeyError("the peer serves no %s here (it serves %s)" % (token, ", ".join(self.services()) or "nothing"))
        return Bound(self, sig)

    def __getattr__(self, name):
        if len(name) != 4 or name.startswith("__"):
            raise AttributeError(name)
        sig = self.services().get(name)
        if sig is None:
            raise AttributeError("the peer serves no %s here (it serves %s)" % (name, ", ".join(self.services()) or "nothing"))
        return Bound(self, sig)

    def _roundtrip(self, token, body, timeout, read):
        return self._conn._exchange(token, body, self._ctx, timeout, read)

    def _send(self, token, body):
        self._conn._send_frame(token, body, self._ctx)


class Context(_Caller):
    """A child context (docs/protocol.md section 6): calls in it are served by what the peer made
    for it. Close it with close() or a with block; it ends with the connection anyway."""

    def __init__(self, conn, cid, name):
        self._conn, self._ctx, self.name = conn, cid, name
        self._services = None

    @property
    def id(self):
        return self._ctx

    def close(self, timeout=None):
        """Closes the child in order: returns once the peer answered every call made in it."""
        self._conn._close_context(self._ctx, timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._conn._core.session.usable(self._ctx):
            self.close()


class Connection(_Caller, CoreView):
    """A client connection. Use connect() to make one."""

    def __init__(self, endpoint, name="courier-rpc", timeout=10.0, keepalive=10.0, services=None,
                 child_services=None, max_children=0, max_frame=None):
        self._services = None
        self.endpoint = endpoint
        self.timeout = timeout
        self._core = Core("initiator", name, services, child_services, max_children, ping_interval=keepalive,
                          handshake_timeout=timeout, close_timeout=timeout, max_frame=max_frame)
        self._lock = threading.Lock()  # guards the core, the socket's writing and the fields below
        self._answered = threading.Condition(self._lock)  # waiting threads: an answer came, or the reading is free
        # The background reader's own: never notified, it looks every tick (waking it on every read
        # made each call twice as slow, the two threads taking the lock and the GIL in turn).
        self._idle = threading.Condition(self._lock)
        self._reading = False  # a thread is reading the socket (outside the lock)
        self._waiting = 0      # threads waiting for an answer
        self._last_call = 0.0
        self._work = None
        self._shut = False
        self._sock, self._child = None, None
        self._sock, self._child = open_socket(endpoint, timeout)
        # A blocking socket whose waits the kernel bounds (SO_RCVTIMEO, SO_SNDTIMEO): a receive is
        # one system call, where a socket with a Python time-out, or a poll, takes two.
        self._sock.setblocking(True)
        self._recv_wait = None
        self._set_recv_wait(TICK)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, _timeval(TICK))
        self._next_tick = 0.0
        with self._lock:
            self._core.start()
            self._flush()
        # The thread holds the connection weakly: a connection nobody holds any more is collected,
        # and its __del__ closes it.
        self._background = threading.Thread(target=_read_while_idle, args=(weakref.ref(self),),
                                            name="courier-rpc reader", daemon=True)
        self._background.start()
        self._wait_until(lambda: self._core.state != "handshaking", timeout + 1.0)
        if self._core.state not in ("open", "closing"):
            if self._core.ended and not self._core.session.timed_out:
                err = self._core.handshake_failure()
            else:
                err = CourierError(REQUEST_TIMEOUT, "no handshake within %g s" % timeout)
            text = self._with_exit_status(err.text)  # before the shutdown stops the server
            self._shutdown()
            raise CourierError(err.code, text)

    @property
    def _conn(self):  # a property, not an attribute: no reference cycle keeps a dropped connection alive
        return self

    # -- the public rest ------------------------------------------------------------------------------
    def open_context(self, name="", kind=None, services=None, timeout=None):
        """Opens a child context and waits for the peer's answer; `kind` names the kind of child
        (a token; None for the default), `services` what this end serves in it (a Services)."""
        w = _Waiter()
        with self._lock:
            cid = self._core.open_context(as_token(kind) if kind else ZERO_TOKEN, name, services, w.complete)
            self._flush()
        self._wait(w, timeout, "the answer to context_open")
        return Context(self, cid, name)

    def close(self, timeout=None):
        """Orderly close (section 11): waits until every call in flight was answered both ways and
        the peer closed too (or `timeout`), then closes the transport and reaps a pipe server."""
        with self._lock:
            if self._core.state == "open":
                self._core.close("done")
                self._flush()
        self._wait_until(lambda: self._core.ended, self.timeout if timeout is None else timeout)
        self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._shutdown()
        except Exception:
            pass

    # -- inside ---------------------------------------------------------------------------------------
    def _core_encode(self, items):
        return self._core.encode(items)

    def _exchange(self, token, body, ctx, timeout, read):
        w = _Waiter()
        try:
            with self._lock:
                txn = self._core.call(token, body, ctx, w.complete, read)
                self._flush()
        except CourierError as e:
            raise self._lost(e)
        return self._wait(w, timeout, "answer", txn)

    def _lost(self, e):
        """A pipe server's exit status goes into the text of a connection that ended (section 11)."""
        if e.code == CONNECTION_LOST and self._child is not None and "server process" not in e.text:
            e.text = self._with_exit_status(e.text)
            e.args = (str(CourierError(e.code, e.text, e.token)),)
        return e

    def _wait(self, w, timeout, what, txn=None):
        t = self.timeout if timeout is None else timeout
        if not self._wait_until(lambda: w.done, t):
            with self._lock:
                if txn is not None:
                    self._core.give_up(txn)
                done = w.done
            if not done:
                raise CourierError(REQUEST_TIMEOUT, "no %s within %g s" % (what, t))
        if w.exc is not None:
            raise self._lost(w.exc)
        return w.value

    def _wait_until(self, ready, timeout):
        """Waits until ready() (checked with the lock held) or `timeout` seconds; reads the socket
        itself whenever no other thread does. Returns ready()."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._waiting += 1
            try:
                while not ready():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    if not self._reading and self._sock is not None:
                        self._read_once(min(left, TICK))
                    else:
                        self._answered.wait(min(left, TICK))
                return True
            finally:
                self._waiting -= 1
                self._last_call = time.monotonic()

    def _read_once(self, wait):
        """With the lock held: reads what arrives within `wait` seconds (the lock released
        meanwhile), feeds it, writes the answers, runs the timers; then wakes the waiting threads."""
        self._reading = True
        sock = self._sock
        self._lock.release()
        data = None
        broken = False
        try:
            if sock.fileno() < 0:
                raise ValueError("closed")
            self._set_recv_wait(wait)
            try:
                data = sock.recv(262144)  # waits `wait` at most (SO_RCVTIMEO)
            except (BlockingIOError, InterruptedError, socket.timeout):
                pass
            except OSError:
                data = b""
        except (OSError, ValueError):  # the socket was closed under us
            broken = True
        finally:
            self._lock.acquire()
            self._reading = False
        try:
            if broken:
                if not self._core.ended:
                    self._core.session._fail(CONNECTION_LOST, "the socket was closed")
                incoming = self._core.tick()
            elif data is None:
                incoming = self._core.tick()
            elif data:
                incoming = self._core.feed(data)
                # the timers run each tick, not on every read: a call's answer does not need them
                now = time.monotonic()
                if now >= self._next_tick:
                    self._next_tick = now + TICK
                    incoming += self._core.tick()
            else:
                incoming = self._core.eof()
            self._flush()
            if incoming:
                self._dispatch(incoming)
            if self._core.ended:
                self._end()
        finally:
            self._answered.notify_all()

    def _set_recv_wait(self, wait):
        # set again only when it changes: near a deadline, not on every call
        wait = max(0.001, wait)
        if self._recv_wait is None or abs(wait - self._recv_wait) > 0.001:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _timeval(wait))
            self._recv_wait = wait

    def _end(self):
        """The close is complete, or the connection failed: the transport closes now (section 11)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._work is not None:
            self._work.put(None)

    def _send_frame(self, token, body, ctx):
        with self._lock:
            self._core.send(token, body, ctx)
            self._flush()

    def _close_context(self, cid, timeout):
        w = _Waiter()
        with self._lock:
            self._core.close_context(cid, w.complete)
            self._flush()
        try:
            self._wait(w, timeout, "the answer to context_close")
        except CourierError as e:
            if e.code != 258:  # the peer had ended it already: closed all the same
                raise

    def _flush(self):
        """Writes what the session queued (the caller holds the lock)."""
        data = self._core.output()
        if not data or self._sock is None:
            return
        view = memoryview(data)
        deadline = None
        try:
            while view:
                try:
                    view = view[self._sock.send(view):]
                except BlockingIOError:
                    # A peer that stops reading cannot stop this end forever: `timeout` at most.
                    if deadline is None:
                        deadline = time.monotonic() + self.timeout
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([], [self._sock], [], left)[1]:
                        raise socket.timeout()
        except OSError as e:
            why = "the peer does not read (no write within %g s)" % self.timeout if isinstance(e, socket.timeout) \
                else "the connection broke while writing: %s" % e
            self._core.session._fail(CONNECTION_LOST, why)
            self._core.tick()  # fails what waits
            self._answered.notify_all()

    def _dispatch(self, incoming):
        if self._work is None:
            self._work = queue.Queue()
            threading.Thread(target=self._serve_loop, name="courier-rpc services", daemon=True).start()
        for inc in incoming:
            self._work.put(inc)

    def _serve_loop(self):
        while True:
            inc = self._work.get()
            if inc is None:
                return
            try:
                result = inc.service.fn(*inc.args)
                if inc.service.is_async:
                    import asyncio  # only for coroutine handlers: asyncio costs 40 ms to import
                    result = asyncio.run(result)
            except Exception as e:  # the handler's failure is the caller's ERROR 257 (or its CourierError)
                with self._lock:
                    inc.failed(e)
                    self._flush()
                continue
            with self._lock:
                inc.done(result)
                self._flush()

    def _shutdown(self):
        if self._shut:
            return
        self._shut = True
        with self._lock:
            if self._sock is not None:
                if not self._core.ended:
                    self._core.session._fail(CONNECTION_LOST, "closed by this end")
                    self._core.tick()
                try:
                    self._sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                if not self._reading:
                    self._end()
            self._answered.notify_all()
        if threading.current_thread() is not self._background and self._background.is_alive():
            self._background.join(2.0)
        with self._lock:
            self._end()
        if self._child is not None:
            self._child.reap()

    def _with_exit_status(self, text):
        if self._child is None:
            return text
        status = self._child.describe(0.2)
        return text + ("; server process " + status if status else "")


def _timeval(seconds):
    return struct.pack("@ll", int(seconds), int((seconds - int(seconds)) * 1e6))


def _read_while_idle(ref):
    """The background reader: reads while no thread waits for an answer and none has for a tick."""
    while True:
        conn = ref()
        if conn is None:
            return
        with conn._lock:
            if conn._sock is None:
                return
            if conn._reading or conn._waiting or time.monotonic() - conn._last_call < TICK:
                conn._idle.wait(TICK)
            else:
                conn._read_once(TICK)
        del conn


def connect(*target, uds=None, tcp=None, host=None, port=None, pipe=None, name="courier-rpc", timeout=10.0,
            keepalive=10.0, services=None, child_services=None, max_children=0, max_frame=None):
    """Connects to a Courier server and completes the handshake.

        connect("@", "courier-calc-server")          pipe: starts the server on a socket pair
        connect(uds="/tmp/calc.sock")                 a Unix socket
        connect(tcp=("127.0.0.1", 4567)), connect(port=4567)

    `timeout` (seconds) bounds the connect, the handshake, each call (unless the call names its
    own), each write and the close. `keepalive` is the ping interval (0: no pings). `services`
    (a Services) is what this client serves to the server in the parent context; `child_services`
    (kind, name) -> Services or None, with `max_children`, lets the server open child contexts here.
    Raises OSError when the server cannot be reached and CourierError when the handshake fails
    or the server refuses the connection."""
    ep = endpoint_from(target, uds, tcp, host, port, pipe)
    return Connection(ep, name=name, timeout=timeout, keepalive=keepalive, services=services,
                      child_services=child_services, max_children=max_children, max_frame=max_frame)
