"""The asyncio client against the example servers, over pipe, uds and tcp."""

import asyncio
import time

import pytest

import courier_rpc as c
from courier_rpc import aio


@pytest.fixture(params=["pipe", "uds", "tcp"])
def transport(request):
    return request.param


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_many_calls_in_flight(serve, transport):
    ep, _ = serve("courier-calc-server", transport)

    async def main():
        async with await aio.connect(**ep, timeout=5) as conn:
            assert await conn.ADD_(2, 3) == 5
            # SLOW answers after the fast ones though it was called first: answers match by id
            slow = asyncio.ensure_future(conn.SLOW(200, 7))
            fast = await asyncio.gather(*(conn.ADD_(i, i) for i in range(256)))
            assert fast == [2 * i for i in range(256)] and not slow.done()
            assert await slow == 7
            assert await conn.call("SQR_", c.Int32(9)) == [81]
            with pytest.raises(c.CourierError) as e:
                await conn.DIV_(1, 0)
            assert e.value.code == 270
            with pytest.raises(TypeError):
                conn.ADD_("2", 3)  # checked at once, before anything is sent
            t = time.monotonic()
            with pytest.raises(c.CourierError) as e:
                await conn.SLOW(300, 1, timeout=0.05)
            assert e.value.code == 259 and time.monotonic() - t < 0.25
            assert await conn.ADD_(1, 1) == 2
            cancelled = asyncio.ensure_future(conn.SLOW(100, 2))
            await asyncio.sleep(0.01)
            cancelled.cancel()
            await asyncio.sleep(0.5)  # both late answers arrive, nobody waits for them
            assert conn.dropped_replies == 2
        assert conn.state == "closed"

    run(main())


def test_contexts_and_callbacks(serve, transport):
    ep, _ = serve("courier-services-server", transport)
    mine = c.Services()

    @mine.service("NAME", "()", "string")
    async def name():
        await asyncio.sleep(0.01)
        return "async pytest"

    async def main():
        async with await aio.connect(**ep, timeout=5, services=mine) as conn:
            assert await conn.BACK() == "hello, async pytest, I called you back"
            a, b = await asyncio.gather(conn.open_context("a"), conn.open_context("b"))
            assert await asyncio.gather(a.CNT_(), a.CNT_(), b.CNT_()) == [1, 2, 1]
            assert await b.NAME() == "b"
            await a.close()
            with pytest.raises(c.CourierError) as e:
                await a.call("CNT_")
            assert e.value.code == 258
            await b.close()

    run(main())


def test_keepalive_answered_while_idle(serve, transport):
    ep, _ = serve("courier-calc-server", transport, ["--keepalive", "100"])

    async def main():
        async with await aio.connect(**ep, timeout=5, keepalive=0) as conn:
            await asyncio.sleep(0.8)
            assert conn.state == "open" and await conn.ADD_(1, 2) == 3

    run(main())


def test_refused_and_lost():
    async def main():
        with pytest.raises(c.CourierError) as e:
            await aio.connect("@", "cat", timeout=2)
        assert e.value.code == 22
        with pytest.raises(c.CourierError) as e:
            await aio.connect("@", "sh", "-c", "exit 4", timeout=2)
        assert e.value.code == 272 and "exited with status 4" in e.value.text

    run(main())


def test_server_killed_fails_calls_in_flight(serve):
    ep, _ = serve("courier-calc-server", "pipe")

    async def main():
        conn = await aio.connect(**ep, timeout=5)
        call = asyncio.ensure_future(conn.SLOW(2000, 1))
        await asyncio.sleep(0.1)
        conn._child.proc.kill()
        with pytest.raises(c.CourierError) as e:
            await call
        assert e.value.code == 272 and "SIGKILL" in e.value.text
        await conn.close()

    run(main())
