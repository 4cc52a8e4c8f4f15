"""The three transports of docs/protocol.md: a Unix socket, TCP, and pipe (a socket pair to a
server started as a child process, section 1)."""

import os
import select
import signal
import socket
import subprocess
import time


class Endpoint:
    """Where a connection goes: uds (file), tcp (host, port) or pipe (command: the server program
    and its arguments)."""

    def __init__(self, kind, file=None, host="127.0.0.1", port=None, command=None):
        self.kind, self.file, self.host, self.port = kind, file, host, port
        self.command = list(command) if command else None

    def __str__(self):
        if self.kind == "uds":
            return "uds %s" % self.file
        if self.kind == "tcp":
            return "tcp %s:%s" % (self.host, self.port)
        return "pipe %s" % " ".join(self.command)


def endpoint_from(target=(), uds=None, tcp=None, host=None, port=None, pipe=None):
    """connect()'s ways of naming an endpoint: ("@", program, args...), uds=PATH, tcp=(host, port)
    or host=/port=, pipe=[program, args...]."""
    given = [x is not None for x in (uds, tcp, port, pipe)].count(True) + (1 if target else 0)
    if given != 1:
        raise ValueError("name one endpoint: connect('@', program, args...), connect(uds=PATH), "
                         "connect(tcp=(HOST, PORT)) or connect(port=PORT), connect(pipe=[program, args...])")
    if target:
        if target[0] != "@" or len(target) < 2:
            raise ValueError("a positional endpoint is '@' and the server program: connect('@', 'server', 'args')")
        return Endpoint("pipe", command=[str(a) for a in target[1:]])
    if pipe is not None:
        if isinstance(pipe, str):
            pipe = [pipe]
        if not pipe:
            raise ValueError("pipe= names the server program")
        return Endpoint("pipe", command=[str(a) for a in pipe])
    if uds is not None:
        return Endpoint("uds", file=os.fspath(uds))
    if tcp is not None:
        h, p = tcp
        return Endpoint("tcp", host=h, port=int(p))
    return Endpoint("tcp", host=host or "127.0.0.1", port=int(port))


class Child:
    """A pipe server process: its exit status, for the text of a connection that ended."""

    def __init__(self, proc):
        self.proc = proc

    def describe(self, wait=0.2):
        try:
            rc = self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            return None
        if rc < 0:
            try:
                return "killed by signal %s" % signal.Signals(-rc).name
            except ValueError:
                return "killed by signal %d" % -rc
        return "exited with status %d" % rc

    def reap(self, grace=2.0):
        """After the connection closed: the server exits by itself once its stream ends; one that
        does not within `grace` seconds is terminated, then killed."""
        try:
            self.proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            pass
        stop_process(self.proc, 1.0)


def start_server(args, name, timeout=10.0, env=None):
    """Starts a server that says where it serves on stderr once it listens ("serving on uds PATH",
    "serving on tcp HOST:PORT"): its Popen (stderr a pipe) and that line. A server that exits or
    says nothing of the kind within `timeout` seconds is stopped, and RuntimeError names it."""
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + timeout
    said = b""
    while not (b"serving on" in said and said.endswith(b"\n")):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stderr], [], [], left)[0]:
            why = "did not say where it serves within %g s" % timeout
        elif not (chunk := os.read(proc.stderr.fileno(), 1)):
            why = "exited: " + said.decode(errors="replace")
        else:
            said += chunk
            continue
        stop_process(proc, 5)
        proc.stderr.close()
        raise RuntimeError("%s %s" % (name, why))
    return proc, said


def stop_process(proc, grace):
    """Terminates `proc` if it still runs; kills it when it has not exited `grace` seconds later."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_pipe_server(command):
    """Starts a pipe server on a socket pair: our end of it (blocking) and the server's Child."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # The server takes fds 0 and 1 as its connection (docs/protocol.md section 1); its stderr
        # stays ours, for its messages.
        proc = subprocess.Popen(command, stdin=theirs.fileno(), stdout=theirs.fileno(), close_fds=True)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return ours, Child(proc)


def open_socket(ep, timeout):
    """A connected socket (blocking) and the Child of a pipe server, or OSError."""
    if ep.kind == "pipe":
        return start_pipe_server(ep.command)
    if ep.kind == "uds":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(timeout)
            s.connect(ep.file)
            s.settimeout(None)
        except BaseException:
            s.close()
            raise
        return s, None
    deadline = time.monotonic() + timeout
    s = socket.create_connection((ep.host, ep.port), timeout=max(0.001, deadline - time.monotonic()))
    s.settimeout(None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s, None
