"""python -m courier_rpc.bench [--quick] [--sec S] [--bin-dir DIR]: the package's figures in one run,
each beside a plain Python socket echo's round trip over uds with messages of the same size:

  (a) a blocking call (ADD_) over uds to the C++ calc example server;
  (b) asyncio calls per second with 64 in flight on one connection, to the same server;
  (c) the Python server (courier_rpc.perf_services) answering the C++ `courier-perf --send-and-wait`,
      with the Python blocking client against the same server, and the C++ client against the C++
      courier-perf-server for reference.

Latencies are the best of five slices of each figure's time (other work on the machine only adds
time); courier-perf's figure is its own mean over the whole time.

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
        self.proc = subprocess.Popen(list(command) + ["--uds", "--file", self.file], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        line = b""
        while b"serving on" not in line:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stderr], [], [], left)[0]:
                self.stop()
                raise RuntimeError("%s did not start within 10 s" % command[0])
            chunk = os.read(self.proc.stderr.fileno(), 256)
            if not chunk:
                self.stop()
                raise RuntimeError("%s exited: %s" % (command[0], line.decode(errors="replace")))
            line += chunk

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
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


def echo_round_trip(folder, seconds, size=CALL_BYTES):
    """Microseconds per round trip of `size` bytes through a plain blocking Python socket echo
    server over uds (another process), as the blocking client's call waits: send, then receive."""
    path = os.path.join(folder, "echo.sock")
    proc = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, path], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        if not select.select([proc.stderr], [], [], 10)[0] or b"serving" not in os.read(proc.stderr.fileno(), 256):
            raise RuntimeError("the echo server did not start")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(path)
        msg = bytes(size)

        def once():
            s.sendall(msg)
            got = 0
            while got < size:
                got += len(s.recv(65536))

        return timed(once, seconds)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


def timed(fn, seconds, slices=5):
    """Microseconds per fn(): the best of `slices` slices of `seconds` in all (after a warm-up of a
    tenth of that). The best, because on a shared machine other work only ever adds time, and
    every latency in the run is taken the same way."""
    end = time.perf_counter() + seconds / 10
    while time.perf_counter() < end:
        fn()
    best = None
    for _ in range(slices):
        n, t0 = 0, time.perf_counter()
        end = t0 + seconds / slices
        while True:
            for _ in range(50):
                fn()
            n += 50
            t = time.perf_counter()
            if t >= end:
                break
        us = (t - t0) / n * 1e6
        best = us if best is None else min(best, us)
    return best


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
    missing = []
    folder = tempfile.mkdtemp(prefix="courier-bench-")
    procs = []
    try:
        echo = echo_round_trip(folder, seconds)
        out.write("echo: plain Python socket echo over uds, %d bytes each way     %8.1f us a round trip\n"
                  % (CALL_BYTES, echo))
        if calc is None:
            missing.append("courier-calc-server")
            out.write("(a), (b): skipped: courier-calc-server not found (--bin-dir or COURIER_BIN_DIR)\n")
        else:
            server = Process([calc], folder, "calc")
            procs.append(server)
            with courier_rpc.connect(uds=server.file, timeout=10) as conn:
                add = conn.service("ADD_")
                call = timed(lambda: add(2, 3), seconds)
            out.write("(a) blocking call ADD_ to the C++ calc server over uds         %8.1f us a call  %5.2fx echo"
                      "  (target <= %gx: %s)\n" % (call, call / echo, TARGET_RATIO, verdict(call / echo <= TARGET_RATIO)))
            rate = asyncio.run(in_flight_rate(server.file, seconds))
            out.write("(b) asyncio, 64 calls in flight on one connection, same server %8.0f calls/s"
                      "  (target >= %d: %s)\n" % (rate, TARGET_RATE, verdict(rate >= TARGET_RATE)))
        py_server = Process([sys.executable, "-m", "courier_rpc", "serve", "courier_rpc.perf_services", "--silent"],
                            folder, "pyperf")
        procs.append(py_server)
        if perf is None:
            missing.append("courier-perf")
            out.write("(c) skipped courier-perf (not found); the Python client drives the Python server instead\n")
        else:
            rate = courier_perf_rate(perf, py_server.file, seconds)
            us = 1e6 / rate
            out.write("(c) courier-perf --send-and-wait to the Python server, uds     %8.1f us a call  %5.2fx echo"
                      "  (target <= %gx: %s)  %.0f calls/s\n" % (us, us / echo, TARGET_RATIO,
                                                               verdict(us / echo <= TARGET_RATIO), rate))
        with courier_rpc.connect(uds=py_server.file, timeout=10) as conn:
            add5 = conn.service("ADD5")
            call = timed(lambda: add5(1, 2, 3, 4, 5), seconds)
        out.write("    Python blocking client, ADD5 to the Python server, uds       %8.1f us a call  %5.2fx echo\n"
                  % (call, call / echo))
        if perf is not None and perf_server is not None:
            cpp = Process([perf_server], folder, "cppperf")
            procs.append(cpp)
            rate = courier_perf_rate(perf, cpp.file, seconds)
            out.write("    courier-perf --send-and-wait to courier-perf-server (C++)   %8.1f us a call  %5.2fx echo"
                      "  %.0f calls/s\n" % (1e6 / rate, 1e6 / rate / echo, rate))
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
