"""The Python server (courier_rpc.Server) called by the C++ courier-call and courier-perf and by the
Python clients, over uds, tcp and pipe; its reflection read the way the C++ servers' is."""

import asyncio
import os
import subprocess
import sys

import pytest
from conftest import PY_EXAMPLES, Server, program, python_env

import courier_rpc

CALC = [sys.executable, os.path.join(PY_EXAMPLES, "calc_server.py")]
PERF = [sys.executable, "-m", "courier_rpc", "serve", "courier_rpc.perf_services"]


@pytest.fixture
def py_serve(monkeypatch):
    """py_serve(command, transport, extra) -> (connect kwargs, courier-call transport args)."""
    started = []
    monkeypatch.setenv("PYTHONPATH", python_env()["PYTHONPATH"])  # for pipe servers this process starts

    def start(command, transport, extra=()):
        if transport == "pipe":
            return {"pipe": list(command) + list(extra)}, ["@"] + list(command) + list(extra)
        s = Server(None, transport, extra, command=command)
        started.append(s)
        return s.endpoint(), s.cli_args()

    yield start
    for s in started:
        s.stop()


def courier_call(args, timeout=20):
    r = subprocess.run([program("courier-call")] + args, capture_output=True, text=True, timeout=timeout,
                       env=python_env())
    return r.returncode, r.stdout, r.stderr


@pytest.mark.parametrize("transport", ["uds", "tcp", "pipe"])
def test_courier_call_calls_the_python_server(py_serve, transport):
    _, where = py_serve(CALC, transport)
    if transport == "pipe":  # courier-call wants its options before the @
        call = lambda *a: courier_call(list(a) + where)
    else:
        call = lambda *a: courier_call(where + list(a))
    assert call("ADD_", "2", "3")[:2] == (0, "5\n")
    assert call("DIV_", "-7", "2")[:2] == (0, "-3\n")
    rc, out, err = call("DIV_", "1", "0")
    assert rc == 1 and "ERROR 270" in err and "divide by zero" in err
    rc, _, err = call("ADD_", "2147483647", "1")  # the result does not fit its signature
    assert rc == 1 and "ERROR 257" in err
    rc, _, err = call("NOPE")
    assert rc == 2 and "no service NOPE" in err
    rc, _, err = call("ADD_", "1", "x")
    assert rc == 2
    rc, out, _ = call("--context", "c", "CNT_")
    assert (rc, out) == (0, "1\n")


def test_reflection_reads_like_the_cpp_calc_server(py_serve, serve):
    _, py = py_serve(CALC, "uds")
    _, cpp = serve("courier-calc-server", "uds")
    rc, py_list, _ = courier_call(py + ["--list"])
    assert rc == 0
    rc, cpp_list, _ = courier_call(cpp + ["--list"])
    assert rc == 0
    # the example declares ADD_ and DIV_ with the C++ calc server's signatures and descriptions
    for line in py_list.splitlines():
        assert line in cpp_list.splitlines()
    assert [line.split()[0] for line in py_list.splitlines()] == ["ADD_", "DIV_"]
    rc, out, _ = courier_call(py + ["--context", "c", "--list", "--json"])
    assert rc == 0 and '"CNT_"' in out and "ADD_" not in out


@pytest.mark.parametrize("transport", ["uds", "pipe"])
def test_courier_perf_measures_the_python_server(py_serve, transport):
    """The C++ perf client: calls waited for, 64 in flight, one-way sends counted by the session,
    children opened and closed, a typed echo compared item by item."""
    _, where = py_serve(PERF, transport, ["--silent"])
    r = subprocess.run([program("courier-perf"), "--send-and-wait", "--send-and-callback", "--send", "--child",
                        "--bfl", "--sec", "0.2"] + where, capture_output=True, text=True, timeout=25, env=python_env())
    assert r.returncode == 0, r.stderr
    for test in ("send-and-wait", "send-and-callback", "send", "child", "bfl"):
        assert "--" + test + " " in r.stdout


@pytest.mark.parametrize("transport", ["uds", "tcp", "pipe"])
def test_frames_larger_than_one_read_both_ways(py_serve, transport):
    """The server reads at most 64 KiB at a time (server.READ_SIZE): a call of several megabytes
    arrives in many reads, and its echo, larger than the socket's buffer, is written completely;
    calls before and after it on the connection are answered as usual."""
    ep, _ = py_serve(PERF, transport, ["--silent"])
    big = bytes(range(256)) * (3 * 4096 + 7)  # 3 MiB and some: never a multiple of a read
    with courier_rpc.connect(timeout=20, **ep) as conn:
        assert conn.call("BFL_", 1, 2) == [1, 2]
        for _ in range(2):
            assert conn.call("BFL_", big, "tail") == [big, "tail"]
        assert conn.call("BFL_", 3) == [3]


@pytest.mark.parametrize("transport", ["uds", "tcp", "pipe"])
def test_python_client_calls_the_python_server(py_serve, transport):
    ep, _ = py_serve(CALC, transport)
    with courier_rpc.connect(timeout=10, **ep) as conn:
        assert conn.ADD_(2, 3) == 5
        assert str(conn.services()["ADD_"]) == "ADD_ (int32 a, int32 b) -> int32  a + b"
        with pytest.raises(courier_rpc.CourierError) as e:
            conn.DIV_(1, 0)
        assert (e.value.code, e.value.text) == (270, "divide by zero")
        with pytest.raises(courier_rpc.ArgumentError):
            conn.ADD_(2**31, 0)  # refused by the reflected signature before anything is sent
        a, b = conn.open_context("a"), conn.open_context("b")
        assert [a.CNT_(), a.CNT_(), b.CNT_(), a.CNT_()] == [1, 2, 1, 3]  # a counter per child
        a.close()
        b.close()


def test_asyncio_client_many_in_flight_on_the_python_server(py_serve):
    ep, _ = py_serve(PERF, "uds")

    async def go():
        conn = await courier_rpc.aio.connect(timeout=10, **ep)
        try:
            sums = await asyncio.gather(*(conn.ADD5(1, 2, 3, 4, i) for i in range(500)))
            assert sums == [10 + i for i in range(500)]
            for i in range(100):
                conn.ADD5.send(1, 2, 3, 4, 5)
            assert await conn.SNT_() == 600  # the session counts every ADD5 it took, in order
            echoed = await conn.call("BFL_", courier_rpc.Int8(-1), courier_rpc.Float32(0.5), "x", b"\0", [1, [2]])
            assert echoed == [-1, 0.5, "x", b"\0", [1, [2]]]
        finally:
            await conn.close()

    asyncio.run(asyncio.wait_for(go(), 20))


def test_coroutine_services_and_children_in_process():
    """A server in this process's event loop: coroutine handlers run concurrently (a slow one does
    not hold the next call), a child factory per kind, unknown kinds refused with 256."""
    server = courier_rpc.Server(name="inproc")

    @server.service("SLOW", "(int32 ms, int32 value)", "int32")
    async def slow(ms, value):
        await asyncio.sleep(ms / 1000)
        return value

    @server.service("FAIL", "()", "()")
    async def fail():
        raise courier_rpc.CourierError(70001, "mine")

    @server.child("KIDS")
    def kids(name):
        s = courier_rpc.Services()
        s.add("NAME", lambda: name, "()", "string")
        return s

    async def go():
        host, port = await server.serve_tcp("127.0.0.1", 0)
        conn = await courier_rpc.aio.connect(port=port, timeout=10)
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            assert await asyncio.gather(conn.SLOW(300, 1), conn.SLOW(10, 2)) == [1, 2]
            assert loop.time() - t0 < 0.6
            with pytest.raises(courier_rpc.CourierError) as e:
                await conn.FAIL()
            assert (e.value.code, e.value.text) == (70001, "mine")
            child = await conn.open_context("first", kind="KIDS")
            assert await child.NAME() == "first"
            await child.close()
            with pytest.raises(courier_rpc.CourierError) as e:
                await conn.open_context("x", kind="NONE")
            assert e.value.code == 256
            assert server.connections == 1
        finally:
            await conn.close()
            await server.close()

    asyncio.run(asyncio.wait_for(go(), 20))


def test_serve_refuses_bad_options_and_targets():
    def serve(*args):
        return subprocess.run([sys.executable, "-m", "courier_rpc", "serve"] + list(args), capture_output=True,
                              text=True, timeout=20, env=python_env())
    assert serve().returncode == 2
    assert serve(os.path.join(PY_EXAMPLES, "nope.py")).returncode == 2
    assert serve("courier_rpc.wire").returncode == 2  # no Server in it
    r = serve(os.path.join(PY_EXAMPLES, "calc_server.py"), "--uds")
    assert r.returncode == 2 and "--file" in r.stderr
    r = serve(os.path.join(PY_EXAMPLES, "calc_server.py"), "--max-frame", "100", "--tcp", "--port", "0")
    assert r.returncode == 2
    # a pipe server whose stdin is not a socket says so and exits
    r = subprocess.run(CALC, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=20, env=python_env())
    assert r.returncode == 3 and "not a socket" in r.stderr


def test_orderly_stop_answers_calls_in_flight_and_removes_the_socket_file(tmp_path):
    """server.close(): the listener goes, the socket file with it; a call in flight is still
    answered, a new one refused (section 11), then the connection ends."""
    server = courier_rpc.Server(name="stopping")

    @server.service("SLOW", "(int32 ms)", "int32")
    async def slow(ms):
        await asyncio.sleep(ms / 1000)
        return ms

    path = str(tmp_path / "s.sock")

    async def go():
        await server.serve_uds(path)
        assert oct(os.stat(path).st_mode & 0o777) == "0o600"
        conn = await courier_rpc.aio.connect(uds=path, timeout=10)
        try:
            in_flight = asyncio.ensure_future(conn.SLOW(300))
            await asyncio.sleep(0.1)
            closing = asyncio.ensure_future(server.close(grace=5))
            await asyncio.sleep(0.05)
            assert not os.path.exists(path)
            assert await in_flight == 300
            await closing
            assert server.connections == 0
            with pytest.raises(courier_rpc.CourierError) as e:
                await conn.SLOW(1)
            assert e.value.code in (260, 272)
        finally:
            await conn.close()

    asyncio.run(asyncio.wait_for(go(), 20))


def test_a_live_servers_socket_is_not_taken_over(py_serve, tmp_path):
    ep, _ = py_serve(CALC, "uds")
    r = subprocess.run(CALC + ["--uds", "--file", ep["uds"]], capture_output=True, text=True, timeout=20,
                       env=python_env())
    assert r.returncode == 3 and "already serves" in r.stderr
    with courier_rpc.connect(timeout=10, **ep) as conn:  # the first server still serves it
        assert conn.ADD_(1, 1) == 2


@pytest.mark.parametrize("transport", ["uds", "pipe"])
def test_the_typed_cpp_calc_client_against_a_python_calc(py_serve, transport):
    """courier-calc-client, an actor_ref<calc::api> over the network, runs its checks (a call, an
    ERROR, an overflow, a time-out and the late answer dropped, a callback, one-way sends in order)
    against the calc interface served from Python."""
    script = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "full_calc_server.py")]
    _, where = py_serve(script, transport)
    r = subprocess.run([program("courier-calc-client")] + where, capture_output=True, text=True, timeout=30,
                       env=python_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "passed: 0 failure(s)" in r.stdout


def test_max_in_flight_stops_reading_until_handlers_finish():
    """With max_in_flight=4, a fifth coroutine call is not read while four wait: it stays in the
    socket (the client's flow control), and runs once they finish."""
    server = courier_rpc.Server(name="bounded", max_in_flight=4)
    running, peak = [0], [0]

    async def go():
        release = asyncio.Event()

        @server.service("WAIT", "(int32 i)", "int32")
        async def wait(i):
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            try:
                await release.wait()
            finally:
                running[0] -= 1
            return i

        _host, port = await server.serve_tcp("127.0.0.1", 0)
        conn = await courier_rpc.aio.connect(port=port, timeout=10)
        try:
            calls = []
            for i in range(10):  # one write each, so each is a read of its own at the server
                calls.append(asyncio.ensure_future(conn.WAIT(i)))
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)
            assert peak[0] == 4 and running[0] == 4
            release.set()
            assert await asyncio.gather(*calls) == list(range(10))
            assert peak[0] <= 4
        finally:
            await conn.close()
            await server.close()

    asyncio.run(asyncio.wait_for(go(), 20))
