import faulthandler
import os
import re
import shutil
import sys
import tempfile

import pytest

# The tests run against the package in this tree, installed or not.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from courier_rpc.transport import start_server, stop_process  # noqa: E402 (after the path above)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
VECTORS = os.path.join(REPO, "tests", "vectors")
BIN_DIR = os.environ.get("COURIER_BIN_DIR")
WATCHDOG_S = 30  # no single test may hang the run: past this, every thread's stack is printed and it exits


@pytest.fixture(autouse=True)
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


def program(name):
    """A Courier program of the build COURIER_BIN_DIR names (its top, or the folder of the programs)."""
    if not BIN_DIR:
        pytest.skip("COURIER_BIN_DIR is not set: point it at a Courier build (with the examples and courier-call)")
    for sub in ("", "examples", os.path.join("src", "net")):
        path = os.path.join(BIN_DIR, sub, name)
        if os.access(path, os.X_OK):
            return path
    pytest.skip("%s is not in the build at COURIER_BIN_DIR=%s" % (name, BIN_DIR))


PYTHON_DIR = os.path.join(REPO, "python")
PY_EXAMPLES = os.path.join(PYTHON_DIR, "examples")


def python_env():
    """The environment of a child process, with this tree's package importable (Python servers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


class Server:
    """An example server serving uds or tcp for one test; stopped (and its socket file removed)
    when the test ends."""

    def __init__(self, name, transport, extra=(), command=None):
        self.dir = tempfile.mkdtemp(prefix="courier-py-")
        args = list(command) if command else [program(name)]
        if transport == "uds":
            self.file = os.path.join(self.dir, "s.sock")
            args += ["--uds", "--file", self.file]
        else:
            args += ["--tcp", "--port", "0"]
        try:
            self.proc, line = start_server(args + list(extra), name, env=python_env())
        except RuntimeError:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        m = re.search(rb"serving on tcp [^ ]*:(\d+)", line)
        self.port = int(m.group(1)) if m else None
        self.transport = transport

    def endpoint(self):
        return {"uds": self.file} if self.transport == "uds" else {"port": self.port}

    def cli_args(self):
        return ["--uds", "--file", self.file] if self.transport == "uds" else ["--tcp", "--port", str(self.port)]

    def stop(self):
        stop_process(self.proc, 5)
        self.proc.stderr.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def serve():
    """serve(name, transport, extra) -> (connect kwargs, CLI transport args): a pipe endpoint
    starts the server itself; uds and tcp start one for the test."""
    started = []

    def start(name, transport, extra=()):
        if transport == "pipe":
            path = program(name)
            return {"pipe": [path] + list(extra)}, ["@", path] + list(extra)
        s = Server(name, transport, extra)
        started.append(s)
        return s.endpoint(), s.cli_args()

    yield start
    for s in started:
        s.stop()
