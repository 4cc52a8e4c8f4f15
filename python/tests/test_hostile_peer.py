"""The client against a peer that breaks the protocol or stops: a clear CourierError in bounded
time, never a hang."""

import os
import sys
import time

import pytest

import courier_rpc as c
from courier_rpc import aio

FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_server.py")


def fake(mode):
    return ("@", sys.executable, FAKE, mode)


@pytest.mark.parametrize("mode,code", [("garbage", 3), ("huge_first_frame", 9)])
def test_first_frame_faults(mode, code):
    with pytest.raises(c.CourierError) as e:
        c.connect(*fake(mode), timeout=5)
    assert e.value.code == code


def test_no_handshake_in_time():
    t = time.monotonic()
    with pytest.raises(c.CourierError) as e:
        c.connect(*fake("silent"), timeout=0.5)
    assert e.value.code == 259 and 0.5 <= time.monotonic() - t < 3


def test_spoiled_and_mismatched_replies():
    with c.connect(*fake("bad_reply"), timeout=5) as conn:
        with pytest.raises(c.CourierError) as e:
            conn.call("ECHO", "x")
        assert e.value.name == "protocol_error" and "invalid_utf8" in e.value.text
        sig = c.Signature("ADD_", 1, "(int32 a, int32 b)", "int32", "")
        with pytest.raises(c.CourierError) as e:
            c.Bound(conn, sig)(2, 3)
        assert e.value.code == 273 and "type_mismatch" in e.value.text


def test_peer_that_never_reads():
    conn = c.connect(*fake("never_reads"), timeout=1)
    t = time.monotonic()
    with pytest.raises(c.CourierError) as e:
        for _ in range(64):  # far more than the socket buffers hold
            conn.call("BIG_", b"\0" * (1 << 20), timeout=0.05)
    assert e.value.code in (259, 272)
    with pytest.raises(c.CourierError) as e:
        conn.call("BIG_", b"\0" * (1 << 20))
    assert e.value.code == 272 and "does not read" in str(e.value)
    assert time.monotonic() - t < 8
    conn.close(timeout=0.5)


def test_frames_over_the_peers_limit_are_not_sent():
    with c.connect(*fake("small_frames"), timeout=5) as conn:
        assert conn.peer_limits["max_frame"] == 65536
        assert conn.call("ECHO", "x" * 60000) == ["x" * 60000]
        with pytest.raises(c.CourierError) as e:
            conn.call("ECHO", "x" * 70000)
        assert e.value.code == 270 and "larger than the peer accepts" in e.value.text
        assert conn.call("ECHO", 1) == [1]  # nothing was sent: the connection goes on


def test_async_first_frame_fault():
    import asyncio

    async def main():
        with pytest.raises(c.CourierError) as e:
            await aio.connect(*fake("garbage"), timeout=5)
        assert e.value.code == 3

    asyncio.run(main())


def test_server_opens_a_child_on_the_client():
    opened, reported = [], []

    def child_services(kind, name):
        opened.append((kind, name))
        s = c.Services()
        s.add("TWIC", lambda x: 2 * x, "(int64 x)", "int64", "doubles")
        return s

    mine = c.Services()
    mine.add("DONE", reported.append, "(string what)", "()")
    with c.connect(*fake("opens_child"), timeout=5, services=mine, child_services=child_services,
                   max_children=1) as conn:
        deadline = time.monotonic() + 5
        while not reported and time.monotonic() < deadline:
            time.sleep(0.01)
    assert opened == [("WORK", "job-1")]
    # The fake's answers as it printed them, [kind, txn, items...], by transaction id: answers may
    # come in any order (the spoiled call 4 is answered at once, call 3 after its handler ran).
    got = sorted(eval(reported[0]), key=lambda a: a[1])
    assert got[0] == ["reply", 1]  # the open
    assert got[1] == ["reply", 2, ["TWIC", 1, "(int64 x)", "int64", "doubles"]]  # $SVC in the child
    assert got[2] == ["reply", 3, 42]
    assert got[3][:3] == ["error", 4, 18]  # a string where the signature has an int64: type_mismatch
    assert got[4][:3] == ["error", 5, 256]  # the parent context does not serve TWIC
    assert got[5] == ["reply", 6]  # the close
    assert conn.state == "closed"
