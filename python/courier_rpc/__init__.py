"""courier_rpc: the Courier wire protocol (docs/protocol.md) in Python, standard library only."""

from .wire import (Float32, Float64, Int8, Int16, Int32, Int64, ProtocolError, UInt8, UInt16, UInt32,
                   UInt64, error_name)

__version__ = "0.1.0"
