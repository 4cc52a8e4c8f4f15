"""A calculator served from Python (a pipe server by default; --uds --file F or --tcp --port P):
    courier-call ADD_ 2 3 @ python3 calc_server.py
    courier-call --context c CNT_ @ python3 calc_server.py"""
import courier_rpc

server = courier_rpc.Server(name="py-calc-server")


@server.service("ADD_", "(int32 a, int32 b)", "int32", "a + b")
def add(a, b):
    return a + b


@server.service("DIV_", "(int32 a, int32 b)", "int32", "a / b; b == 0 is an ERROR (invalid_argument)")
def divide(a, b):
    if b == 0:
        raise courier_rpc.CourierError(270, "divide by zero")
    return int(a / b)  # C++ truncates toward zero


@server.child()  # each child context the client opens counts its own calls
def counter(name):
    calls = courier_rpc.Services()
    count = [0]

    @calls.service("CNT_", "()", "int64", "how many times CNT_ was called in this context")
    def cnt():
        count[0] += 1
        return count[0]
    return calls


if __name__ == "__main__":
    raise SystemExit(server.run())
