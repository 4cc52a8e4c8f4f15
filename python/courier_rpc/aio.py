"""The asyncio client: `await conn.call(...)`, any number of calls in flight on one connection
(each has its transaction id; answers come in any order).

    conn = await courier_rpc.aio.connect("@", "courier-calc-server")
    print(await conn.ADD_(2, 3))
    print(await asyncio.gather(*(conn.ADD_(i, 1) for i in range(64))))
    await conn.close()

The same core as the blocking client (courier_rpc.core); the event loop does the I/O, a timer
runs the protocol's timers, and the peer's calls of the services this client serves run one at a
time in arrival order in a task of their own (a coroutine handler is awaited there).
"""

import asyncio

from .client import parse_services
from .core import CourierError, Core, CoreView
from .transport import endpoint_from, start_pipe_server
from .wire import CONNECTION_LOST, NO_SUCH_SERVICE, REFLECTION_TOKEN, REQUEST_TIMEOUT, ZERO_TOKEN, as_token, to_python

TICK = 0.05


class AsyncBound:
    """A service called by its reflected signature: `await conn.ADD_(2, 3)`."""

    def __init__(self, caller, signature):
        self._caller, self.signature = caller, signature

    def __call__(self, *args, timeout=None):
        body = bytearray()
        self.signature.encode(args, body)  # ArgumentError at once: nothing was sent
        return self._caller._conn._exchange(as_token(self.signature.token), body, self._caller._ctx, timeout,
                                            self.signature.read_result)

    def send(self, *args):
        body = bytearray()
        self.signature.encode(args, body)
        self._caller._conn._send_frame(as_token(self.signature.token), body, self._caller._ctx)

    def __repr__(self):
        return "<service %s>" % self.signature


class _AsyncCaller:
    _ctx = 0
    _services = None

    def call(self, token, *items, timeout=None):
        """A coroutine: the reply's items as a list (see Connection.call of the blocking client)."""
        return self._conn._exchange(as_token(token), self._conn._core.encode(items), self._ctx, timeout, to_python)

    def send(self, token, *items):
        self._conn._send_frame(as_token(token), self._conn._core.encode(items), self._ctx)

    async def services(self, refresh=False, timeout=None):
        """What the peer serves in this context ($SVC): {token: Signature}; {} when it does not say."""
        if self._services is None or refresh:
            try:
                items = await self._conn._exchange(REFLECTION_TOKEN, b"", self._ctx, timeout, to_python)
                self._services = parse_services(items)
            except CourierError as e:
                if e.code != NO_SUCH_SERVICE:
                    raise
                self._services = {}
        return self._services

    def service(self, token):
        if self._services is None:
            raise RuntimeError("the services are not known yet: await services() first")
        sig = self._services.get(token)
        if sig is None:
            raise KeyError("the peer serves no %s here (it serves %s)" % (token, ", ".join(self._services) or "nothing"))
        return AsyncBound(self, sig)

    def __getattr__(self, name):
        if len(name) != 4 or name.startswith("__") or self._services is None:
            raise AttributeError(name)
        sig = self._services.get(name)
        if sig is None:
            raise AttributeError("the peer serves no %s here (it serves %s)" % (name, ", ".join(self._services) or "nothing"))
        return AsyncBound(self, sig)


class AsyncContext(_AsyncCaller):
    """A child context (docs/protocol.md section 6)."""

    def __init__(self, conn, cid, name):
        self._conn, self._ctx, self.name = conn, cid, name

    @property
    def id(self):
        return self._ctx

    async def close(self, timeout=None):
        fut = self._conn._loop.create_future()
        self._conn._core.close_context(self._ctx, _completer(fut))
        self._conn._flush()
        try:
            await self._conn._wait(fut, timeout, "the answer to context_close")
        except CourierError as e:
            if e.code != 258:
                raise

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if self._conn._core.session.usable(self._ctx):
            await self.close()


def _completer(fut):
    def complete(value, exc):
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)
    return complete


class _Protocol(asyncio.Protocol):
    def __init__(self, conn):
        self.conn = conn

    def connection_made(self, transport):
        self.conn._transport = transport

    def data_received(self, data):
        self.conn._after(self.conn._core.feed(data))

    def eof_received(self):
        self.conn._after(self.conn._core.eof())
        return False

    def connection_lost(self, exc):
        if not self.conn._core.ended:
            self.conn._after(self.conn._core.eof())
        self.conn._transport_closed.set()


class AsyncConnection(_AsyncCaller, CoreView):
    """A client connection on an asyncio event loop. Use courier_rpc.aio.connect() to make one."""

    def __init__(self, core, timeout, child):
        self._conn = self
        self._core = core
        self.timeout = timeout
        self._child = child
        self._loop = asyncio.get_running_loop()
        self._transport = None
        self._opened = self._loop.create_future()
        self._ended = asyncio.Event()
        self._transport_closed = asyncio.Event()
        self._timer = None
        self._flush_scheduled = False
        self._work = None
        self._server_task = None

    # -- calls ----------------------------------------------------------------------------------------
    async def _exchange(self, token, body, ctx, timeout, read):
        fut = self._loop.create_future()
        try:
            txn = self._core.call(token, body, ctx, _completer(fut), read)
        except CourierError as e:
            raise await self._lost(e)
        self._flush_soon()
        return await self._wait(fut, timeout, "answer", txn)

    async def _wait(self, fut, timeout, what, txn=None):
        # A timer, not asyncio.wait_for: wait_for makes a task per call, which halves the calls a
        # connection carries per second.
        t = self.timeout if timeout is None else timeout

        def expire():
            if not fut.done():
                if txn is not None:
                    self._core.give_up(txn)
                fut.set_exception(CourierError(REQUEST_TIMEOUT, "no %s within %g s" % (what, t)))

        timer = self._loop.call_later(t, expire)
        try:
            return await fut
        except CourierError as e:
            raise await self._lost(e)
        except asyncio.CancelledError:
            if txn is not None:
                self._core.give_up(txn)  # its answer, if one comes, is dropped and counted
            raise
        finally:
            timer.cancel()

    def _send_frame(self, token, body, ctx):
        try:
            self._core.send(token, body, ctx)
        except CourierError as e:
            if e.code == CONNECTION_LOST and self._child is not None:
                status = self._child.describe(0)  # a send does not wait: the status if known now
                if status:
                    e.text += "; server process " + status
                    e.args = (str(CourierError(e.code, e.text, e.token)),)
            raise
        self._flush()

    async def open_context(self, name="", kind=None, services=None, timeout=None, reflect=True):
        """Opens a child context; with `reflect`, its services are fetched, so that attribute calls
        (`await ctx.CNT_()`) work."""
        fut = self._loop.create_future()
        cid = self._core.open_context(as_token(kind) if kind else ZERO_TOKEN, name, services, _completer(fut))
        self._flush()
        await self._wait(fut, timeout, "the answer to context_open")
        ctx = AsyncContext(self, cid, name)
        if reflect:
            await ctx.services(timeout=timeout)
        return ctx

    async def close(self, timeout=None):
        """Orderly close (section 11); then the transport closes and a pipe server is reaped."""
        if self._core.state == "open":
            self._core.close("done")
            self._flush()
        try:
            await asyncio.wait_for(self._ended.wait(), self.timeout if timeout is None else timeout)
        except asyncio.TimeoutError:
            pass
        self._shutdown()
        if self._child is not None:
            await self._loop.run_in_executor(None, self._child.reap)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    # -- inside ---------------------------------------------------------------------------------------
    async def _lost(self, e):
        """A pipe server's exit status goes into the text of a connection that ended; the server
        exits at once when its stream ended, so a short wait (off the loop) finds it."""
        if e.code == CONNECTION_LOST and self._child is not None and "server process" not in e.text:
            status = await self._loop.run_in_executor(None, self._child.describe, 0.5)
            if status:
                e.text += "; server process " + status
                e.args = (str(CourierError(e.code, e.text, e.token)),)
        return e

    def _flush_soon(self):
        """Calls made in one turn of the loop leave in one write."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self):
        self._flush_scheduled = False
        data = self._core.output()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _after(self, incoming):
        self._flush()
        if self._core.state != "handshaking" and not self._opened.done():
            self._opened.set_result(None)
        if incoming:
            if self._work is None:
                self._work = asyncio.Queue()
                self._server_task = self._loop.create_task(self._serve())
            for inc in incoming:
                self._work.put_nowait(inc)
        if self._core.ended:
            self._ended.set()
            if not self._opened.done():
                self._opened.set_result(None)
            self._shutdown()

    def _tick(self):
        self._timer = None
        if self._core.ended:
            return
        self._after(self._core.tick())
        if not self._core.ended:
            self._timer = self._loop.call_later(TICK, self._tick)

    async def _serve(self):
        while True:
            inc = await self._work.get()
            try:
                result = inc.service.fn(*inc.args)
                if inc.service.is_async:
                    result = await result
            except Exception as e:
                inc.failed(e)
            else:
                inc.done(result)
            self._flush()

    def _shutdown(self):
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()
        if self._server_task is not None and not self._server_task.done() and self._core.ended:
            self._server_task.cancel()


async def connect(*target, uds=None, tcp=None, host=None, port=None, pipe=None, name="courier-rpc", timeout=10.0,
                  keepalive=10.0, services=None, child_services=None, max_children=0, max_frame=None, reflect=True):
    """Connects (the arguments of courier_rpc.connect) and completes the handshake; with `reflect`,
    fetches the server's services too, so that `await conn.ADD_(2, 3)` works."""
    ep = endpoint_from(target, uds, tcp, host, port, pipe)
    loop = asyncio.get_running_loop()
    core = Core("initiator", name, services, child_services, max_children, ping_interval=keepalive,
                handshake_timeout=timeout, close_timeout=timeout, max_frame=max_frame)
    child = None
    if ep.kind == "pipe":
        ours, child = start_pipe_server(ep.command)
    conn = AsyncConnection(core, timeout, child)
    try:
        if ep.kind == "pipe":
            await loop.create_unix_connection(lambda: _Protocol(conn), sock=ours)
        elif ep.kind == "uds":
            await asyncio.wait_for(loop.create_unix_connection(lambda: _Protocol(conn), ep.file), timeout)
        else:
            transport, _ = await asyncio.wait_for(loop.create_connection(lambda: _Protocol(conn), ep.host, ep.port),
                                                  timeout)
    except asyncio.TimeoutError:
        raise TimeoutError("cannot reach %s within %g s" % (ep, timeout)) from None
    except BaseException:
        if child is not None:
            child.proc.kill()
            child.proc.wait()
        raise
    core.start()
    conn._flush()
    conn._timer = loop.call_later(TICK, conn._tick)
    try:
        await asyncio.wait_for(asyncio.shield(conn._opened), timeout + 1.0)
    except asyncio.TimeoutError:
        pass
    if core.state not in ("open", "closing"):
        if core.ended and not core.session.timed_out:
            err = core.handshake_failure()
        else:
            err = CourierError(REQUEST_TIMEOUT, "no handshake within %g s" % timeout)
        err = await conn._lost(err)
        await conn.close(0)
        raise err
    if reflect:
        await conn.services()
    return conn
