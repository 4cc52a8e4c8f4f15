"""The whole calc interface (examples/calc/calc_api.hpp) served from Python, with the C++ server's
answers to bad input, so the typed C++ courier-calc-client can run its checks against it."""
import asyncio

import courier_rpc

INT32 = (-2**31, 2**31 - 1)
server = courier_rpc.Server(name="py-full-calc")
notes = [0]


def checked(value, what):
    if not INT32[0] <= value <= INT32[1]:
        raise courier_rpc.CourierError(270, "overflow: %s does not fit in int32" % what)
    return value


@server.service("ADD_", "(int32 a, int32 b)", "int32", "a + b")
def add(a, b):
    return checked(a + b, "the sum")


@server.service("DIV_", "(int32 a, int32 b)", "int32", "a / b; b == 0 is an ERROR (invalid_argument)")
def divide(a, b):
    if b == 0:
        raise courier_rpc.CourierError(270, "divide by zero")
    q = abs(a) // abs(b)
    return checked(q if (a < 0) == (b < 0) else -q, "the quotient")


@server.service("SLOW", "(int32 delay_ms, int32 value)", "int32", "replies value after delay_ms")
async def slow(delay_ms, value):
    if delay_ms < 0:
        raise courier_rpc.CourierError(270, "a negative delay")
    await asyncio.sleep(delay_ms / 1000)
    return value


@server.service("SQR_", "(int32 x)", "int32", "x * x")
def square(x):
    return checked(x * x, "the square")


@server.service("NOTE", "(string text)", "()", "one-way: the server counts notes")
def note(text):
    notes[0] += 1


@server.service("NSEE", "()", "int32", "how many notes arrived so far")
def notes_seen():
    return notes[0]


if __name__ == "__main__":
    raise SystemExit(server.run())
