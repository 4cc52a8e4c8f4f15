"""python -m courier_rpc.bench [--quick] [--sec S] [--bin-dir DIR]: the package's figures in one run,
each beside a plain Python socket echo's round trip over uds with messages of the same size:

  (a) a blocking call (ADD_) over uds to the C++ calc example server;
  (b) asyncio calls per second with 64 in flight on one connection, to the same server;
  (c) the Python server (courier_rpc.perf_services) answering the C++ `courier-perf --send-and-wait`,
      with the Python blocking client against the same server, and the C++ client against the C++
      courier-perf-server for reference.

Latencies are the best of five slices, taken in turns with slices of the echo, so that each ratio
compares figures measured under the same load (other work on the machine only ever adds time);
courier-perf's slices are runs of its own, each giving its mean.

The C++ programs are looked up in --bin-dir, then $COURIER_BIN_DIR (a build: its top, examples/ or
src/net/), then $PATH; a figure whose program is missing is skipped with a line that says so.
"""

import argparse
import asyncio
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import courier_rpc
from courier_rpc.transport import start_server, stop_process

TARGET_RATIO = 3.0
TARGET_RATE = 25000
CALL_BYTES = 42  # ADD_'s call frame: a 32-byte header and two int32 items


def find_program(name, bin_dir):
    for top in (bin_dir, os.environ.get("COURIER_BIN_DIR")):
        if top:
            for sub in ("", "examples", os.path.join("src", "net")):
                path = os.path.join(top, sub, name)
                if os.access(path, os.X_OK) and os.path.isfile(path):
                    return path
    return shutil.which(name)


class Process:
    """A server process on a uds socket in a private folder; stopped and removed on exit."""

    def __init__(self, command, folder, name):
        self.file = os.path.join(folder, name + ".sock")
        self.proc, _ = start_server(list(command) + ["--uds", "--file", self.file], command[0])

    def stop(self):
        stop_process(self.proc, 5)
        self.proc.stderr.close()


ECHO_SERVER = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
if os.path.exists(sys.argv[1]):
    os.unlink(sys.argv[1])
s.bind(sys.argv[1]); s.listen(1)
sys.stderr.write("serving on uds\n"); sys.stderr.flush()
c, _ = s.accept()
while True:
    d = c.recv(65536)
    if not d:
        break
    c.sendall(d)
"""


class Echo:
    """A plain blocking Python socket echo over uds: a server process that sends back what it
    reads, and a client that sends `size` bytes and reads them back (no time-out on the socket, so
    one system call each way, the least a round trip takes)."""

    def __init__(self, folder, size=CALL_BYTES):
        path = os.path.join(folder, "echo.sock")
        self.proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, path], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if (not select.select([self.proc.stderr], [], [], 10)[0]
                or b"serving" not in os.read(self.proc.stderr.fileno(), 256)):
            self.stop()
            raise RuntimeError("the echo server did not start")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.sock.settimeout(None)
        self.msg, self.size = bytes(size), size

    def once(self):
        self.sock.sendall(self.msg)
        got = 0
        while got < self.size:
            got += len(self.sock.recv(65536))

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stderr.close()


def best_of(fns, seconds, slices=5):
    """Microseconds per call of each fn: the best of `slices` slices each, the functions taking
    turns slice by slice (after a warm-up), so that each ratio compares figures taken under the
    same load. The best, because other work on the machine only ever adds time."""
    for fn in fns:
        end = time.perf_counter() + seconds / 10
        while time.perf_counter() < end:
            fn()
    best = [None] * len(fns)
    for _ in range(slices):
        for i, fn in enumerate(fns):
            us = _slice(fn, seconds / slices / len(fns))
            best[i] = us if best[i] is None else min(best[i], us)
    return best


def _slice(fn, seconds):
    n, t0 = 0, time.perf_counter()
    end = t0 + seconds
    while True:
        for _ in range(50):
            fn()
        n += 50
        t = time.perf_counter()
        if t >= end:
            return (t - t0) / n * 1e6


async def in_flight_rate(uds, seconds, depth=64):
    conn = await courier_rpc.aio.connect(uds=uds, timeout=10)
    try:
        add = conn.service("ADD_")
        count = 0
        stop = asyncio.get_running_loop().time() + seconds

        async def worker(i):
            nonlocal count
            loop = asyncio.get_running_loop()
            while loop.time() < stop:
                if await add(i, 1) != i + 1:
                    raise RuntimeError("ADD_ answered a wrong sum")
                count += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(depth)))
        return count / (time.perf_counter() - t0)
    finally:
        await conn.close()


def courier_perf_rate(perf, uds, seconds):
    r = subprocess.run([perf, "--send-and-wait", "--sec", str(seconds), "--uds", "--file", uds], capture_output=True,
                       text=True, timeout=seconds + 30)
    m = re.search(r"--send-and-wait\s+(\d+)", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError("courier-perf failed (%d): %s" % (r.returncode, (r.stderr or r.stdout).strip()))
    return float(m.group(1))


def perf_against_echo(perf, uds, echo, seconds, slices=5):
    """courier-perf --send-and-wait's microseconds a call, the best of `slices` runs, taking turns
    with slices of the echo; and the echo's best."""
    best_echo = best_perf = None
    for _ in range(slices):
        e = _slice(echo.once, seconds / slices / 2)
        us = 1e6 / courier_perf_rate(perf, uds, max(0.05, seconds / slices / 2))
        best_echo = e if best_echo is None else min(best_echo, e)
        best_perf = us if best_perf is None else min(best_perf, us)
    return best_echo, best_perf


def verdict(ok):
    return "met" if ok else "MISSED"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m courier_rpc.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="each figure briefly (0.2 s): a smoke run")
    p.add_argument("--sec", type=float, help="seconds each figure runs (default 2)")
    p.add_argument("--bin-dir", help="a Courier build, or the folder of its programs")
    o = p.parse_args(argv)
    seconds = o.sec if o.sec else (0.2 if o.quick else 2.0)
    if seconds <= 0:
        p.error("--sec is a positive number of seconds")
    calc = find_program("courier-calc-server", o.bin_dir)
    perf = find_program("courier-perf", o.bin_dir)
    perf_server = find_program("courier-perf-server", o.bin_dir)
    out = sys.stdout
    folder = tempfile.mkdtemp(prefix="courier-bench-")
    procs = []
    line = "%-62s %8.1f us  %5.2fx the echo's %.1f us%s\n"
    try:
        echo = Echo(folder)
        procs.append(echo)
        if calc is None:
            out.write("(a), (b): skipped: courier-calc-server not found (--bin-dir or COURIER_BIN_DIR)\n")
        else:
            server = Process([calc], folder, "calc")
            procs.append(server)
            with courier_rpc.connect(uds=server.file, timeout=10) as conn:
                add = conn.service("ADD_")
                e, call = best_of([echo.once, lambda: add(2, 3)], seconds)
            out.write(line % ("(a) blocking call ADD_ to the C++ calc server, uds", call, call / e, e,
                              "  (target <= %gx: %s)" % (TARGET_RATIO, verdict(call / e <= TARGET_RATIO))))
            rate = asyncio.run(in_flight_rate(server.file, seconds))
            out.write("%-62s %8.0f calls/s  (target >= %d: %s)\n" % (
                "(b) asyncio, 64 calls in flight on one connection, same server", rate, TARGET_RATE,
                verdict(rate >= TARGET_RATE)))
        py_server = Process([sys.executable, "-m", "courier_rpc", "serve", "courier_rpc.perf_services", "--silent"],
                            folder, "pyperf")
        procs.append(py_server)
        if perf is None:
            out.write("(c) skipped: courier-perf not found; the Python client drives the Python server below\n")
        else:
            e, us = perf_against_echo(perf, py_server.file, echo, seconds)
            out.write(line % ("(c) courier-perf --send-and-wait to the Python server, uds", us, us / e, e,
                              "  (target <= %gx: %s)" % (TARGET_RATIO, verdict(us / e <= TARGET_RATIO))))
        with courier_rpc.connect(uds=py_server.file, timeout=10) as conn:
            add5 = conn.service("ADD5")
            e, call = best_of([echo.once, lambda: add5(1, 2, 3, 4, 5)], seconds)
        out.write(line % ("    the Python blocking client (ADD5) to the Python server", call, call / e, e, ""))
        if perf is not None and perf_server is not None:
            cpp = Process([perf_server], folder, "cppperf")
            procs.append(cpp)
            e, us = perf_against_echo(perf, cpp.file, echo, seconds)
            out.write(line % ("    courier-perf --send-and-wait to courier-perf-server (C++)", us, us / e, e, ""))
        elif perf is not None:
            out.write("    (the C++ pair skipped: courier-perf-server not found)\n")
    finally:
        for proc in procs:
            proc.stop()
        shutil.rmtree(folder, ignore_errors=True)
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
