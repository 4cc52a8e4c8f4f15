"""The server: services written in Python, served over a Unix socket, TCP or a pipe (stdin).

    server = courier_rpc.Server(name="calc")

    @server.service("ADD_", "(int32 a, int32 b)", "int32", "a + b")
    def add(a, b):
        return a + b

    server.run()        # the C++ servers' options: --uds --file F, --tcp --port P, or a pipe (default)

Each connection is a session (the acceptor's Core) with a task of its own that runs its timers
(handshake time-out, keepalive, dead peer, close time-out) and ends it. Plain handlers run as
their call arrives; a coroutine handler runs in a task, and while `max_in_flight` of them wait the
connection stops reading, so a client that calls faster than the handlers answer is held back by
the transport's flow control instead of the server's memory. So is one that never reads its
answers: past `outbound_high_water` bytes unwritten the connection stops reading too, and the
keepalive ends it once it answers no ping.
"""

import argparse
import asyncio
import os
import signal
import socket
import stat
import sys

from .core import Core, CourierError, Services
from .wire import SYSTEM_SHUTDOWN, error_frame

TICK = 0.05  # the session timers' resolution: the spec lets a time-out expire up to 100 ms late
READ_SIZE = 64 * 1024  # the most one receive takes (below glibc's 128 KiB mmap threshold)


class Server:
    """Services for every connection's parent context, child contexts by kind, the spec's limits
    and time-outs (seconds here; None for a limit: the protocol's default)."""

    def __init__(self, services=None, name="courier-rpc-server", *, max_children=None, handshake_timeout=10.0,
                 keepalive=10.0, close_timeout=10.0, max_frame=None, max_items=None, max_depth=None,
                 max_in_flight=4096, max_connections=0, outbound_high_water=8 * 1024 * 1024, max_memory=0,
                 silent=False):
        self.services = services if services is not None else Services()
        self.name = name
        self.max_children = max_children
        self.handshake_timeout, self.keepalive, self.close_timeout = handshake_timeout, keepalive, close_timeout
        self.max_frame, self.max_items, self.max_depth = max_frame, max_items, max_depth
        self.max_in_flight = max_in_flight
        self.max_connections = max_connections
        self.outbound_high_water = outbound_high_water
        self.max_memory = max_memory  # bytes of frames still arriving, all connections together; 0: no bound
        self.held = 0  # what the connections hold now
        self.silent = silent
        self._session_factory = None
        self._children = {}  # kind ("" for the default kind) -> factory(name) -> Services
        self._connections = set()
        self._listeners = []
        self._uds_files = []
        self.refused_connections = 0

    # -- declaring ------------------------------------------------------------------------------------
    def service(self, token, arguments="", result="", description=""):
        """Decorator: `fn` serves `token` in every connection's parent context."""
        return self.services.service(token, arguments, result, description)

    def session(self, factory):
        """Decorator: `factory()` makes the parent context's Services for each new connection (state
        of its own per connection); it replaces the shared `services`."""
        self._session_factory = factory
        return factory

    def child(self, kind=""):
        """Decorator: `factory(name)` makes the Services of a child context of `kind` (a token; ""
        for the default kind) each time a peer opens one; None refuses it (256)."""
        def register(factory):
            self._children[kind] = factory
            return factory
        return register

    def _child_services(self, kind, name):
        factory = self._children.get(kind)
        return factory(name) if factory is not None else None

    # -- serving --------------------------------------------------------------------------------------
    def _new_core(self):
        services = self._session_factory() if self._session_factory is not None else self.services
        children = self._child_services if self._children else None
        max_children = self.max_children if self.max_children is not None else (64 if self._children else 0)
        return Core("acceptor", self.name, services, children, max_children, ping_interval=self.keepalive,
                    handshake_timeout=self.handshake_timeout, close_timeout=self.close_timeout,
                    max_frame=self.max_frame, max_items=self.max_items, max_depth=self.max_depth)

    def _protocol(self):
        return _Connection(self)

    async def serve_tcp(self, host="127.0.0.1", port=0):
        """Listens on tcp; returns the (host, port) it serves on (port 0: any free port)."""
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(self._protocol, host, port, reuse_address=True)
        self._listeners.append(listener)
        return listener.sockets[0].getsockname()[:2]

    async def serve_uds(self, path):
        """Listens on a Unix socket at `path`, owner-only (0600). A stale socket file is replaced;
        a live server's is not taken over. The file appears only once the server listens."""
        path = os.fspath(path)
        if os.path.lexists(path):
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise OSError("%s exists and is not a socket" % path)
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.settimeout(1.0)
                probe.connect(path)
                raise OSError("a server already serves on %s" % path)
            except (ConnectionRefusedError, FileNotFoundError):
                os.unlink(path)  # stale: nobody listens
            finally:
                probe.close()
        # bound under a private name, then linked into place: a client that sees the file can connect
        private = "%s.%d.tmp" % (path, os.getpid())
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            if os.path.lexists(private):
                os.unlink(private)
            sock.bind(private)
            sock.listen(128)
            os.link(private, path)
        except BaseException:
            sock.close()
            raise
        finally:
            os.umask(old)
            if os.path.lexists(private):
                os.unlink(private)
        listener = await asyncio.get_running_loop().create_unix_server(self._protocol, sock=sock)
        self._listeners.append(listener)
        self._uds_files.append((path, os.stat(path).st_ino))
        return path

    async def serve_socket(self, sock):
        """Serves one connected socket (a pipe's end): returns once its connection ended."""
        conn = _Connection(self)
        await asyncio.get_running_loop().connect_accepted_socket(lambda: conn, sock)
        await conn.finished()

    async def close(self, grace=2.0):
        """Stops listening and closes every connection in order (section 11), waiting up to `grace`
        seconds for the calls in flight; then drops what is left."""
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        for path, ino in self._uds_files:
            try:
                if os.stat(path).st_ino == ino:
                    os.unlink(path)
            except OSError:
                pass
        self._uds_files.clear()
        conns = list(self._connections)
        for c in conns:
            c.close("the server stops")
        if conns:
            await asyncio.wait([asyncio.ensure_future(c.finished()) for c in conns], timeout=grace)
        for c in conns:
            c.abort()

    @property
    def connections(self):
        return len(self._connections)

    def log(self, text):
        if not self.silent:
            sys.stderr.write("%s: %s\n" % (self.name, text))
            sys.stderr.flush()

    def run(self, argv=None):
        """Serves by the C++ servers' options (`--uds --file F`, `--tcp [--host H] --port P`, a pipe
        by default) until SIGINT or SIGTERM, or over a pipe until its connection ends. Returns the
        exit status."""
        opts = parse_options(self, argv)
        if isinstance(opts, int):
            return opts
        try:
            return asyncio.run(self._main(opts))
        except KeyboardInterrupt:
            return 0

    async def _main(self, opts):
        loop = asyncio.get_running_loop()
        if opts.transport == "pipe":
            try:
                sock = _stdin_socket()
            except OSError as e:
                sys.stderr.write("%s: %s\n" % (self.name, e))
                return 3
            await self.serve_socket(sock)
            return 0
        try:
            if opts.transport == "uds":
                where = "uds " + await self.serve_uds(opts.file)
            else:
                host, port = await self.serve_tcp(opts.host, opts.port)
                where = "tcp %s:%d" % (host, port)
        except OSError as e:
            sys.stderr.write("%s: cannot serve: %s\n" % (self.name, e))
            return 3
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        sys.stderr.write("%s: serving on %s\n" % (self.name, where))
        sys.stderr.flush()
        await stop.wait()
        await self.close()
        return 0


def _stdin_socket():
    """The pipe transport: fds 0 and 1 are one end of a socket pair (section 1). The connection
    gets a socket of its own, and fd 1 is pointed at stderr, so that a handler's print() cannot
    write into the stream and the peer sees its end once the connection closes."""
    try:
        sock = socket.socket(fileno=os.dup(0))
    except OSError:
        raise OSError("stdin is not a socket: start a pipe server from a Courier client "
                      "(courier-call ... @ program args), or serve --uds or --tcp") from None
    if sock.type != socket.SOCK_STREAM:
        sock.detach()
        raise OSError("stdin is not a stream socket")
    sys.stdout.flush()
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    return sock


class _Connection(asyncio.Protocol):
    """One connection's session: bytes in and out through the event loop, the protocol's timers in
    a task of its own."""

    def __init__(self, server):
        self.server = server
        self.core = None
        self.transport = None
        self.loop = asyncio.get_running_loop()
        self.tasks = set()   # coroutine handlers running
        self.paused = set()  # why reading is paused: "in flight", "writing"
        self.refused = False
        self.reported = False
        self.timers = None
        self.held = 0  # bytes of a frame still arriving, counted in server.held
        self._done = self.loop.create_future()

    def finished(self):
        return asyncio.shield(self._done)

    # -- the transport's side -------------------------------------------------------------------------
    def connection_made(self, transport):
        self.transport = transport
        srv = self.server
        if srv.max_connections and len(srv._connections) >= srv.max_connections:
            # section 9: a refusal is an ERROR as the first frame; nothing else is read
            srv.refused_connections += 1
            self.refused = True
            transport.write(error_frame(SYSTEM_SHUTDOWN, "too many connections"))
            transport.close()
            return
        srv._connections.add(self)
        self.core = srv._new_core()
        transport.set_write_buffer_limits(high=srv.outbound_high_water)
        if hasattr(transport, "max_size"):
            # The selector transport receives with recv(max_size), 256 KiB by default: a buffer that
            # large is mmap'ed, mremap'ed and munmap'ed by the C library on every read (strace: the
            # three calls once per call answered), about as much time as the call's own work. 64 KiB
            # reads come from the heap; a frame larger than that arrives in several reads.
            transport.max_size = READ_SIZE
        self.core.start()
        self._flush()
        self.timers = self.loop.create_task(self._timers())  # held: the loop keeps tasks only weakly

    def data_received(self, data):
        core = self.core
        if core is None or core.ended:
            return
        incoming = core.feed(data)
        self._count_held()
        if incoming:
            self._run(incoming)
        self._flush()

    def _count_held(self):
        """Section 10: the server may bound the memory all connections hold for frames still
        arriving; the connection whose frame would pass it ends with a fatal ERROR 260."""
        held = len(self.core.session.buf) if not self.core.ended else 0
        srv = self.server
        grew = held > self.held
        srv.held += held - self.held
        self.held = held
        if grew and srv.max_memory and srv.held > srv.max_memory:
            self.core.session._fatal(SYSTEM_SHUTDOWN, "the server's receive memory (%d bytes for frames still "
                                     "arriving) is spent: try later" % srv.max_memory)
            srv.held -= self.held
            self.held = 0

    def eof_received(self):
        if self.core is not None and not self.core.ended:
            self._run(self.core.eof())
            self._flush()
        return False

    def connection_lost(self, exc):
        if self.core is not None and not self.core.ended:
            self.core.eof()
        self._end()

    def pause_writing(self):
        self._pause("writing")

    def resume_writing(self):
        self._resume("writing")

    # -- the session's side ---------------------------------------------------------------------------
    def _run(self, incoming):
        for inc in incoming:
            svc = inc.service
            try:
                result = svc.fn(*inc.args)
            except Exception as e:
                inc.failed(e)
                continue
            if svc.is_async:
                task = self.loop.create_task(self._finish(inc, result))
                self.tasks.add(task)
                if len(self.tasks) >= self.server.max_in_flight:
                    self._pause("in flight")
            else:
                inc.done(result)

    async def _finish(self, inc, coro):
        try:
            result = await coro
        except asyncio.CancelledError:
            raise
        except Exception as e:
            inc.failed(e)
        else:
            inc.done(result)
        finally:
            self.tasks.discard(asyncio.current_task())
            if len(self.tasks) <= self.server.max_in_flight // 2:
                self._resume("in flight")
        self._flush()

    def _pause(self, why):
        if not self.paused and self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()
        self.paused.add(why)

    def _resume(self, why):
        if why in self.paused:
            self.paused.discard(why)
            if not self.paused and self.transport is not None and not self.transport.is_closing():
                self.transport.resume_reading()

    def _flush(self):
        core = self.core
        data = core.output()
        t = self.transport
        if data and not t.is_closing():
            t.write(data)
        if core.ended and not t.is_closing():
            self._report()
            if core.session.state == "failed" and core.session.timed_out:
                t.abort()  # a dead peer reads nothing: what waits for it is dropped
            else:
                t.close()  # what was written still goes out first

    def _report(self):
        if self.reported:
            return
        self.reported = True
        s = self.core.session
        # a peer that broke the protocol or timed out is worth a line; one that just went away is not
        if s.state == "failed" and (s.failure < 256 or s.timed_out):
            self.server.log("a connection ended: %s (code %d)" % (s.failure_text, s.failure))

    async def _timers(self):
        while not self._done.done():
            await asyncio.sleep(TICK)
            if self.core.ended:
                self._flush()
                break
            incoming = self.core.tick()
            if incoming:
                self._run(incoming)
            self._flush()
        # An ended session's last frames go out before the transport closes, but a peer that reads
        # nothing would hold them (and the connection) for ever: it gets the close time-out.
        if not self._done.done():
            try:
                await asyncio.wait_for(self.finished(), self.server.close_timeout)
            except asyncio.TimeoutError:
                self.abort()

    def close(self, reason):
        """Orderly close (section 11): calls in flight are answered, new ones refused."""
        if self.core is not None and self.core.state == "open":
            self.core.close(reason)
            self._flush()

    def abort(self):
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def _end(self):
        self.server._connections.discard(self)
        self.server.held -= self.held
        self.held = 0
        if self.core is not None:
            self._report()
        for task in list(self.tasks):
            task.cancel()  # nobody can receive their answers any more
        if not self._done.done():
            self._done.set_result(None)


def parse_options(server, argv=None, prog=None):
    """The C++ servers' options (docs/guide/tools.md) applied to `server`: the parsed options, or an
    exit status (2) for bad ones."""
    p = argparse.ArgumentParser(prog=prog or os.path.basename(sys.argv[0]),
                                description="Serve %s's services over a pipe (the default), uds or tcp." % server.name)
    t = p.add_mutually_exclusive_group()
    t.add_argument("--pipe", dest="transport", action="store_const", const="pipe",
                   help="serve the socket pair on stdin (the default: a client names this program after @)")
    t.add_argument("--uds", dest="transport", action="store_const", const="uds", help="serve a Unix socket (--file)")
    t.add_argument("--tcp", dest="transport", action="store_const", const="tcp", help="serve tcp (--port)")
    p.add_argument("--file", help="uds: the socket file")
    p.add_argument("--host", default="127.0.0.1", help="tcp: the address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="tcp: the port (0: any free port)")
    p.add_argument("--timeout", type=float, help="seconds a client has for its handshake (default 10)")
    p.add_argument("--keepalive", type=float, help="ping a silent peer every MS milliseconds (0: never; default 10000)")
    p.add_argument("--name", help="the name in the handshake and the logs")
    p.add_argument("--max-frame", type=int, help="the largest frame accepted (65536 to 4294967295)")
    p.add_argument("--max-connections", type=int, help="connections served at once (0: no limit)")
    p.add_argument("--max-memory", type=int, help="bytes all connections may hold for frames still arriving "
                   "(0: no bound); a frame that does not fit ends its connection with ERROR 260")
    p.add_argument("--max-children", type=int, help="child contexts a peer may have open at once")
    p.add_argument("--max-in-flight", type=int, help="coroutine calls running per connection before it stops reading")
    p.add_argument("--silent", action="store_true", help="log nothing but errors")
    try:
        o = p.parse_args(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    o.transport = o.transport or "pipe"
    problem = None
    if o.transport == "uds" and not o.file:
        problem = "--uds needs --file"
    elif o.transport == "tcp" and o.port is None:
        problem = "--tcp needs --port"
    elif o.transport != "uds" and o.file:
        problem = "--file goes with --uds"
    elif o.port is not None and not 0 <= o.port <= 65535:
        problem = "--port is 0 to 65535"
    elif o.max_frame is not None and not 65536 <= o.max_frame <= 0xFFFFFFFF:
        problem = "--max-frame is 65536 to 4294967295"
    elif o.timeout is not None and o.timeout <= 0:
        problem = "--timeout is a positive number of seconds"
    elif o.keepalive is not None and o.keepalive < 0:
        problem = "--keepalive is 0 or more milliseconds"
    elif any(v is not None and v < 0 for v in (o.max_connections, o.max_in_flight, o.max_children, o.max_memory)):
        problem = "a limit is 0 or more"
    if problem:
        p.print_usage(sys.stderr)
        sys.stderr.write("%s: error: %s\n" % (p.prog, problem))
        return 2
    if o.timeout is not None:
        server.handshake_timeout = o.timeout
    if o.keepalive is not None:
        server.keepalive = o.keepalive / 1000.0
    if o.name:
        server.name = o.name
    if o.max_frame is not None:
        server.max_frame = o.max_frame
    if o.max_connections is not None:
        server.max_connections = o.max_connections
    if o.max_children is not None:
        server.max_children = o.max_children
    if o.max_memory is not None:
        server.max_memory = o.max_memory
    if o.max_in_flight:
        server.max_in_flight = o.max_in_flight
    server.silent = server.silent or o.silent
    return o


__all__ = ["CourierError", "Server", "Services", "parse_options"]
