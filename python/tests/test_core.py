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


def _acceptor(fast):
    served = Services()
    served.add("ADD3", lambda a, b, c: [a, b, c], "(int8 a, uint16 b, int64 c)", "(int8 a, uint16 b, int64 c)")
    served.add("MIX_", lambda a, s: [a, s], "(int32 a, string s)", "(int32 a, string s)")
    children = Services()
    children.add("ADD3", lambda a, b, c: [a, b, c], "(int8 a, uint16 b, int64 c)", "(int8 a, uint16 b, int64 c)")
    server = Core("acceptor", "s", served, lambda kind, name: children, 4)
    if not fast:
        server.session.fast_args = None
    client = Core("initiator", "c")
    server.start()
    client.start()
    pump(client, server)
    return server


def test_fast_argument_reading_answers_as_the_general_path():
    """A call whose body is exactly its integer arguments is read in one step (Core._fast_args);
    every frame below gets, byte for byte, the answers and events the general path gives."""
    from courier_rpc.wire import CALL, CLOSE, SEND, T_BOOL, T_I8, T_I32, T_I64, T_U16, enc_item, frame
    good = enc_item(T_I8, -5) + enc_item(T_U16, 65535) + enc_item(T_I64, -2**63)
    frames = [
        frame(CALL, good, b"ADD3", 1),
        frame(CALL, good[:-1], b"ADD3", 2),                       # truncated: 11
        frame(CALL, good + enc_item(T_I8, 1), b"ADD3", 3),         # an item too many
        frame(CALL, enc_item(T_I32, -5) + good[2:], b"ADD3", 4),   # another width, same length off
        frame(CALL, enc_item(T_BOOL, 1) + good[2:], b"ADD3", 5),   # a bool where an int8 goes
        frame(CALL, bytes([0x7F]) + good[1:], b"ADD3", 6),         # a bad tag
        frame(CALL, good, b"ADD3", 0),                            # transaction id 0: 24
        frame(CALL, good, b"ADD3", 7, flags=1),                   # flags: 6
        frame(CALL, good, b"ADD3", 8, ctx=2),                     # a child that is not open
        frame(CALL, good, b"NONE", 9),                            # no such service
        frame(CALL, enc_item(T_I32, 1) + enc_item(T_I32, 2), b"MIX_", 10),
        frame(SEND, good, b"ADD3"),
        frame(CALL, good, b"AD\x013", 11),                        # a bad token
        frame(CLOSE),
        frame(CALL, good, b"ADD3", 12),                           # after the close completed: nothing
    ]
    fast, general = _acceptor(True), _acceptor(False)
    seen = []
    for f in frames:
        got = []
        for core in (fast, general):
            incoming = core.feed(f)
            args = [list(inc.args) for inc in incoming]
            run_incoming(incoming)
            got.append((args, core.output(), core.state, core.session.calls_unanswered))
        assert got[0] == got[1], f
        seen.append(got[0])
    assert seen[0][0] == [[-5, 65535, -2**63]] and seen[0][2] == "open"
    assert [s[0] for s in seen[1:7]] == [[]] * 6 and seen[11][0] == [[-5, 65535, -2**63]]  # the send
    assert seen[-1][2] == "closed" and general.session.spoiled_frames == fast.session.spoiled_frames > 0


def test_fast_argument_reading_keeps_the_values():
    server = _acceptor(True)
    from courier_rpc.wire import CALL, T_I8, T_I64, T_U16, enc_item, frame
    body = enc_item(T_I8, -128) + enc_item(T_U16, 7) + enc_item(T_I64, 2**63 - 1)
    incoming = server.feed(frame(CALL, body, b"ADD3", 1))
    assert [inc.args for inc in incoming] == [[-128, 7, 2**63 - 1]]
    assert incoming[0].ev.items is None and incoming[0].ev.args == [-128, 7, 2**63 - 1]
