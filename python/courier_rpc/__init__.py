"""courier_rpc: call and serve Courier services from Python (docs/protocol.md), standard library only.

    import courier_rpc
    with courier_rpc.connect("@", "courier-calc-server") as conn:
        print(conn.ADD_(2, 3))                # 5: typed from the server's reflected signature
        print(conn.call("ADD_", courier_rpc.Int32(2), courier_rpc.Int32(3)))   # [5]
"""

from .client import Bound, Connection, Context, connect
from .core import CourierError, Services
from .signature import ArgumentError, Signature
from .wire import (Float32, Float64, Int8, Int16, Int32, Int64, ProtocolError, UInt8, UInt16, UInt32,
                   UInt64, error_name)

__version__ = "0.1.0"

__all__ = ["ArgumentError", "Bound", "Connection", "Context", "CourierError", "Float32", "Float64", "Int8",
           "Int16", "Int32", "Int64", "ProtocolError", "Server", "Services", "Signature", "UInt8", "UInt16", "UInt32",
           "UInt64", "connect", "error_name"]


def __getattr__(name):
    # courier_rpc.aio and courier_rpc.Server without importing asyncio for every blocking user (it costs 40 ms)
    import importlib
    if name == "aio":
        return importlib.import_module(".aio", __name__)
    if name == "Server":
        return importlib.import_module(".server", __name__).Server
    raise AttributeError("module 'courier_rpc' has no attribute %r" % name)
