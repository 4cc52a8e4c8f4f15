"""Two cores, an initiator and an acceptor, talking in memory: the owner's side of the protocol in
both roles (what a Python server builds on), without sockets."""

import pytest

from courier_rpc import CourierError, Services
from courier_rpc.client import parse_services
from courier_rpc.core import Core
from courier_rpc.wire import to_python


def run_incoming(incoming):
    for inc in incoming:
        try:
            result = inc.service.fn(*inc.args)
        except Exception as e:
            inc.failed(e)
        else:
            inc.done(result)


def pump(a, b):
    """Moves bytes both ways and runs the handlers until neither side has anything to say."""
    for _ in range(100):
        moved = False
        for src, dst in ((a, b), (b, a)):
            data = src.output()
            if data:
                run_incoming(dst.feed(data))
                moved = True
        if not moved:
            return
    raise AssertionError("the cores never went quiet")


@pytest.fixture
def pair():
    served = Services()
    served.add("ADD_", lambda x, y: x + y, "(int32 a, int32 b)", "int32", "a + b")
    served.add("PNT_", lambda: (1.5, -2.0), "()", "(float64 x, float64 y)", "a point")
    served.add("APPE", lambda: (_ for _ in ()).throw(CourierError(70001, "mine")), "()", "()", "")
    served.add("BOOM", lambda: 1 / 0, "()", "int32", "")
    served.add("BADR", lambda: "not an int", "()", "int32", "")
    served.add("ANY_", lambda *items: items, "", "", "echoes, no signature")  # a tuple: several items

    def child(kind, name):
        if kind:
            return None
        s = Services()
        s.add("WHO_", lambda: name, "()", "string")
        return s

    server = Core("acceptor", "server", served, child, max_children=2)
    client = Core("initiator", "client")
    server.start()
    client.start()
    pump(client, server)
    assert client.state == server.state == "open"
    return client, server


def call(client, server, token, body=b"", ctx=0, read=to_python):
    got = []
    client.call(token, bytes(body), ctx, lambda v, e: got.append((v, e)), read)
    pump(client, server)
    assert len(got) == 1
    value, exc = got[0]
    if exc is not None:
        raise exc
    return value


def test_reflection_and_calls_both_roles(pair):
    client, server = pair
    sigs = parse_services(call(client, server, b"$SVC"))
    assert list(sigs) == ["ADD_", "PNT_", "APPE", "BOOM", "BADR", "ANY_"]
    assert sigs["ADD_"].returns == 1 and sigs["APPE"].returns == 0
    body = bytearray()
    sigs["ADD_"].encode([2, 40], body)
    assert call(client, server, b"ADD_", body, read=sigs["ADD_"].read_result) == 42
    p = call(client, server, b"PNT_", read=sigs["PNT_"].read_result)
    assert (p.x, p.y) == (1.5, -2.0)
    assert call(client, server, b"ANY_", client.encode([1, "x", [True]])) == [1, "x", [True]]


@pytest.mark.parametrize("token,body,code", [
    (b"APPE", b"", 70001),        # the handler's own CourierError, application code
    (b"BOOM", b"", 257),          # a handler that raised: handler_failed
    (b"BADR", b"", 257),          # a result that does not fit the signature
    (b"NOPE", b"", 256),          # no such service
    (b"ADD_", b"\x04\x01\x00\x00\x00", 19),  # one argument of two: no_more_items
    (b"ADD_", b"\x05" + bytes(8) + b"\x04" + bytes(4), 18),  # an int64 where an int32 belongs
])
def test_errors_reach_the_caller(pair, token, body, code):
    client, server = pair
    with pytest.raises(CourierError) as e:
        call(client, server, token, body)
    assert e.value.code == code


def test_child_contexts_and_orderly_close(pair):
    client, server = pair
    assert client.session.agreed_max_child_contexts == 2  # announced by the server's handshake
    opened = []
    cid = client.open_context(b"\0\0\0\0", "kid", None, lambda c, e: opened.append((c, e)))
    pump(client, server)
    assert opened == [(cid, None)] and cid == 1
    assert call(client, server, b"WHO_", ctx=cid) == ["kid"]
    with pytest.raises(CourierError) as e:
        call(client, server, b"ADD_", ctx=cid)  # the parent's services are not the child's
    assert e.value.code == 256
    refused = []
    client.open_context(b"LOGS", "x", None, lambda c, e: refused.append(e))
    pump(client, server)
    assert refused[0].code == 256
    closed = []
    client.close_context(cid, lambda v, e: closed.append(e))
    pump(client, server)
    assert closed == [None] and cid not in server.tables
    client.close("done")
    pump(client, server)
    assert client.state == server.state == "closed"
