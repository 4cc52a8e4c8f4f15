"""courier-perf-server's services (src/net/perf/perf_protocol.hpp) served from Python, so the C++
`courier-perf` can measure a Python server:

    python -m courier_rpc serve courier_rpc.perf_services --uds --file /tmp/py-perf.sock
    courier-perf --send-and-wait --uds --file /tmp/py-perf.sock
"""

from .core import Services
from .server import Server

FIVE = "(int32 a, int32 b, int32 c, int32 d, int32 e)"

server = Server(name="courier-rpc-perf-server")


def _common(table):
    table.add("NOTH", lambda: None, "()", "", "does nothing: the cost of a call alone")


@server.session
def session():
    """A session per connection, with its own count of one-way ADD5 (SNT_)."""
    table = Services()
    taken = [0]
    _common(table)

    def add_five(a, b, c, d, e):
        taken[0] += 1  # counted for a send; a call's count is never read
        return a + b + c + d + e

    table.add("ADD5", add_five, FIVE, "int32", "their sum; one-way, counted (SNT_)")
    table.add("SNT_", lambda: taken[0], "()", "int64", "the one-way ADD5 this session has taken")
    table.add("BFL_", lambda *items: items, "", "", "echoes its items back, whatever they are")
    return table


_children = Services()
_common(_children)
_children.add("ADD5", lambda a, b, c, d, e: a + b + c + d + e, FIVE, "int32", "their sum")


@server.child()
def child(name):
    return _children  # the children keep no state: one table serves them all
