"""The blocking client against the example servers, over pipe, uds and tcp."""

import math
import threading
import time

import pytest

import courier_rpc as c

TRANSPORTS = ["pipe", "uds", "tcp"]


@pytest.fixture(params=TRANSPORTS)
def transport(request):
    return request.param


def test_calc(serve, transport):
    ep, _ = serve("courier-calc-server", transport)
    with c.connect(**ep, timeout=5) as conn:
        assert conn.state == "open"
        assert conn.ADD_(2, 3) == 5
        assert conn.ADD_(-2**31, 2**31 - 1) == -1
        assert conn.call("ADD_", c.Int32(20), c.Int32(22)) == [42]
        assert conn.SQR_(12) == 144
        sigs = conn.services()
        assert list(sigs)[:2] == ["ADD_", "DIV_"]
        assert sigs["ADD_"].arguments == "(int32 a, int32 b)" and sigs["ADD_"].result == "int32"
        with pytest.raises(c.CourierError) as e:
            conn.DIV_(7, 0)
        assert (e.value.code, e.value.name) == (270, "invalid_argument") and e.value.text
        assert conn.DIV_(7, 2) == 3
    assert conn.state == "closed"


def test_arguments_checked_before_sending(serve, transport):
    ep, _ = serve("courier-calc-server", transport)
    with c.connect(**ep, timeout=5) as conn:
        before = conn.NSEE()
        with pytest.raises(c.ArgumentError, match=r"argument 1 \(text\) of NOTE.*not of type string"):
            conn.NOTE.send(5)
        with pytest.raises(TypeError, match="out of range"):
            conn.ADD_(2**31, 1)
        with pytest.raises(TypeError, match="takes 2 arguments"):
            conn.ADD_(1)
        with pytest.raises(TypeError, match="not of type int32"):
            conn.ADD_(1.5, 1)
        assert conn.NSEE() == before  # the refused send never went out
        conn.NOTE.send("counted")
        assert conn.NSEE() == before + 1  # calls of one service run in order after sends (section 5)


def test_raw_call_gets_the_servers_type_error(serve):
    ep, _ = serve("courier-calc-server", "pipe")
    with c.connect(**ep, timeout=5) as conn:
        with pytest.raises(c.CourierError) as e:
            conn.call("ADD_", 2, 3)  # plain ints travel as int64; ADD_ takes int32
        assert e.value.name == "type_mismatch"
        with pytest.raises(c.CourierError) as e:
            conn.call("NOPE")
        assert e.value.code == 256
        with pytest.raises(AttributeError):
            conn.NOPE


def test_call_timeout_and_late_answer(serve, transport):
    ep, _ = serve("courier-calc-server", transport)
    with c.connect(**ep, timeout=5) as conn:
        t = time.monotonic()
        with pytest.raises(c.CourierError) as e:
            conn.SLOW(400, 1, timeout=0.1)
        assert e.value.code == 259 and time.monotonic() - t < 0.35
        assert conn.ADD_(1, 1) == 2  # the connection goes on; the late answer will be dropped
        time.sleep(0.5)
        assert conn.SLOW(0, 9) == 9
        assert conn.dropped_replies == 1


def test_echo_every_type(serve, transport):
    ep, _ = serve("courier-echo-server", transport)
    args = (True, -128, -32768, -2**31, -2**63, 255, 65535, 2**32 - 1, 2**64 - 1, 1.5, -2.25,
            "héllo \x00 wörld", b"\x00\x01\xfe", [1, -2, 3], (0.5, -0.5), [(1.0, 2.0), {"x": 3.0, "y": 4.0}])
    with c.connect(**ep, timeout=5) as conn:
        got = conn.ECHO(*args)
        assert got.flag is True and got.u64 == 2**64 - 1 and got.i64 == -2**63
        assert got.f32 == 1.5 and got.text == args[11] and got.blob == args[12]
        assert got.where == (0.5, -0.5) and got.where.x == 0.5
        assert [tuple(p) for p in got.path] == [(1.0, 2.0), (3.0, 4.0)]
        assert tuple(got)[:11] == args[:11]
        f32 = conn.ECHO(*((False,) + args[1:9] + (0.1,) + args[10:])).f32
        assert f32 != 0.1 and math.isclose(f32, 0.1, rel_tol=1e-7)  # float32 on the wire


def test_services_and_child_contexts(serve, transport):
    ep, _ = serve("courier-services-server", transport)
    with c.connect(**ep, timeout=5) as conn:
        assert conn.HELO("world") == "hello, world"
        assert conn.SUM_([1, 2, 3, 2**40]) == 6 + 2**40
        with pytest.raises(c.CourierError, match="overflows"):
            conn.MUL_(2**62, 4)
        # ELST declares no signature: raw items, widths by class, come back as they went
        sent = [c.Int8(-1), c.UInt16(7), "two", [c.Float32(3.5), True], b"\xff"]
        assert conn.call("ELST", *sent) == [-1, 7, "two", [3.5, True], b"\xff"]
        with pytest.raises(TypeError, match="declares no signature"):
            conn.ELST(1)
        with conn.open_context("first") as a, conn.open_context("second") as b:
            assert a.id % 2 == 1 and b.id % 2 == 1 and a.id != b.id  # the initiator's ids are odd
            assert list(a.services()) == ["CNT_", "NAME"]
            assert [a.CNT_(), a.CNT_(), b.CNT_(), a.CNT_()] == [1, 2, 1, 3]
            assert (a.NAME(), b.NAME()) == ("first", "second")
        with pytest.raises(c.CourierError) as e:
            a.CNT_()
        assert e.value.code == 258  # closed: not open any more
        with pytest.raises(c.CourierError) as e:
            conn.open_context("x", kind="LOGS")
        assert e.value.code == 256
        assert conn.HOWM() >= 1


def test_server_calls_the_client_back(serve, transport):
    ep, _ = serve("courier-services-server", transport)
    mine = c.Services()
    called = []

    @mine.service("NAME", "()", "string", "who calls")
    def name():
        called.append(threading.current_thread().name)
        return "pytest"

    with c.connect(**ep, timeout=5, services=mine) as conn:
        assert conn.BACK() == "hello, pytest, I called you back"
        assert called == ["courier-rpc services"]
    with c.connect(**ep, timeout=5) as conn:  # serving nothing: the server's call gets 256
        with pytest.raises(c.CourierError, match="no service NAME|256"):
            conn.BACK()


def test_keepalive_answered_while_idle(serve, transport):
    # The server pings after 100 ms of silence and gives up after 300 ms without an answer:
    # only the reader thread's pongs keep this idle connection alive.
    ep, _ = serve("courier-calc-server", transport, ["--keepalive", "100"])
    with c.connect(**ep, timeout=5, keepalive=0) as conn:
        time.sleep(0.8)
        assert conn.state == "open"
        assert conn.ADD_(1, 2) == 3


def test_many_threads_share_a_connection(serve):
    ep, _ = serve("courier-calc-server", "uds")
    with c.connect(**ep, timeout=5) as conn:
        results = {}

        def work(k):
            results[k] = [conn.ADD_(k, i) for i in range(50)]

        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert results == {k: [k + i for i in range(50)] for k in range(8)}


def test_unreachable_and_refused(tmp_path):
    with pytest.raises(OSError):
        c.connect(uds=str(tmp_path / "none.sock"), timeout=1)
    with pytest.raises(OSError):
        c.connect("@", str(tmp_path / "no-such-program"), timeout=1)
    # A transport that echoes what it reads hands us our own handshake: refused (section 8, nonce)
    with pytest.raises(c.CourierError) as e:
        c.connect("@", "cat", timeout=2)
    assert e.value.code == 22
    with pytest.raises(c.CourierError) as e:
        c.connect("@", "sh", "-c", "exit 3", timeout=2)
    assert e.value.code == 272 and "exited with status 3" in e.value.text


def test_pipe_server_exits_after_close(serve):
    ep, _ = serve("courier-calc-server", "pipe")
    conn = c.connect(**ep, timeout=5)
    proc = conn._child.proc
    assert conn.ADD_(1, 1) == 2
    conn.close()
    assert conn.state == "closed" and proc.poll() == 0
    with pytest.raises(c.CourierError) as e:
        conn.ADD_(1, 1)
    assert e.value.code == 272


def test_server_stopping_closes_in_order(serve):
    ep, _ = serve("courier-calc-server", "pipe")
    conn = c.connect(**ep, timeout=5)
    conn._child.proc.terminate()  # the server sends close, answers what it has, and ends
    deadline = time.monotonic() + 5
    while conn.state == "open" and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(c.CourierError) as e:
        conn.ADD_(1, 1)
    assert e.value.code in (260, 272)
    conn.close()
    assert conn.state == "closed"


def test_dropped_connection_is_collected_and_closed(serve):
    import gc
    ep, _ = serve("courier-calc-server", "pipe")
    conn = c.connect(**ep, timeout=5)
    assert conn.ADD_(1, 2) == 3
    proc = conn._child.proc
    del conn
    gc.collect()
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is not None  # the server saw its stream end and exited
