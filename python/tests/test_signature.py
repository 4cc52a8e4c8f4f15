"""Signatures (docs/protocol.md section 15): parsing, arguments checked before encoding, replies
read against the result."""

import pytest

from courier_rpc import ArgumentError, Signature
from courier_rpc.signature import parse_arguments, parse_result
from courier_rpc.wire import Int32, ProtocolError, UInt8, check_body, encode_values

MOVE = "(record(float64 x, float64 y) to, int32 steps)"


def test_parse_and_print_round_trip():
    for text in ["()", "(int32 a, int32 b)", MOVE, "(list of 3 uint8 rgb, list of list of string)",
                 "(binary, bool flag, record() empty)"]:
        fields = parse_arguments(text)
        from courier_rpc.signature import fields_text
        assert fields_text(fields) == text
    assert parse_arguments("") is None  # declared none: not the same as ()
    assert parse_result("int32")[1] is True and parse_result("()") == ([], False)


@pytest.mark.parametrize("bad", ["(int32", "(int33 a)", "int32", "(int32 a,int32 b)", "(list of -1 int8)"])
def test_bad_signatures(bad):
    with pytest.raises(ValueError):
        parse_arguments(bad)


def test_arguments_encoded_like_the_spec_says():
    # section 7's example: MOVE(point to, int32 steps) sends list, float64 x, float64 y, end, int32 steps
    sig = Signature("MOVE", 1, MOVE, "()", "")
    body = bytearray()
    sig.encode([(1.5, -2.0), 3], body)
    assert bytes(body) == bytes(encode_values([[1.5, -2.0], Int32(3)]))
    body2 = bytearray()
    sig.encode([{"x": 1.5, "y": -2}, 3], body2)
    assert body2 == body


@pytest.mark.parametrize("args,message", [
    ([(1.5, "y"), 3], r"argument 1 \(to\) of MOVE.*field y: str 'y' is not of type float64"),
    ([(1.5,), 3], r"\(1 fields, not 2\)"),
    ([(1.5, 2.0), 2**31], r"argument 2 \(steps\).*out of range"),
    ([(1.5, 2.0), True], r"bool True is not of type int32"),
    ([(1.5, 2.0)], r"MOVE.* takes 2 arguments"),
])
def test_arguments_refused_with_the_place(args, message):
    sig = Signature("MOVE", 1, MOVE, "()", "")
    with pytest.raises(ArgumentError, match=message):
        sig.encode(args, bytearray())
    assert issubclass(ArgumentError, TypeError)


def test_result_read_against_the_signature():
    sig = Signature("PNT_", 1, "()", "(float64 x, float64 y)", "")
    r = sig.read_result(check_body(bytes(encode_values([1.0, 2.0]))))
    assert (r.x, r.y) == (1.0, 2.0) and r == (1.0, 2.0)
    for items, code in [([1.0], 19), ([1.0, 2.0, 3.0], 20), ([1.0, "2"], 18)]:
        with pytest.raises(ProtocolError) as e:
            sig.read_result(check_body(bytes(encode_values(items))))
        assert e.value.code == code
    fixed = Signature("RGB_", 1, "()", "list of 3 uint8", "")
    assert fixed.read_result(check_body(bytes(encode_values([[UInt8(1), UInt8(2), UInt8(3)]])))) == [1, 2, 3]
    for items, code in [([UInt8(1)] * 4, 20), ([UInt8(1)] * 2, 19), ([1, 2, 3], 18)]:
        with pytest.raises(ProtocolError) as e:
            fixed.read_result(check_body(bytes(encode_values([items]))))
        assert e.value.code == code
    assert Signature("NONE", 0, "()", "()", "").read_result([]) is None


def test_integer_fast_path_matches_the_general_path():
    """Integer-only signatures take a struct: the same bytes, the same refusals, the same reading."""
    from courier_rpc.signature import encode_arguments
    from courier_rpc.wire import check_body, ProtocolError
    sig = Signature("MIX_", 1, "(int8 a, uint16 b, int32 c, int64 d, uint64 e)", "int32", "")
    values = (-128, 65535, -2**31, 2**63 - 1, 2**64 - 1)
    fast, general = bytearray(), bytearray()
    sig.encode(values, fast)
    encode_arguments(sig.argument_fields, values, general, "MIX_")
    assert fast == general
    for bad in ((True, 0, 0, 0, 0), (0, -1, 0, 0, 0), (0, 0, 1.0, 0, 0), (128, 0, 0, 0, 0), (0, 0, 0, 0)):
        with pytest.raises(ArgumentError):
            sig.encode(bad, bytearray())
    assert sig.read_arguments(check_body(bytes(fast))) == list(values)
    with pytest.raises(ProtocolError) as e:  # a tag that differs: the general path names the fault
        sig.read_arguments(check_body(bytes(fast[:-9]) + b"\x05" + bytes(8)))
    assert e.value.code == 18
    assert sig.read_result(check_body(b"\x04\x07\x00\x00\x00")) == 7
    with pytest.raises(ProtocolError):
        sig.read_result(check_body(b"\x05" + bytes(8)))


def test_result_encoding_fast_and_general():
    sig = Signature("ONE_", 1, "()", "int32", "")
    out = bytearray()
    sig.encode_result(7, out)
    assert bytes(out) == b"\x04\x07\x00\x00\x00"
    for bad in (True, 2**31, 1.0, "7"):
        with pytest.raises(ArgumentError):
            sig.encode_result(bad, bytearray())
    pair = Signature("TWO_", 1, "()", "(int32 a, string b)", "")
    out = bytearray()
    pair.encode_result((1, "x"), out)
    assert check_body(bytes(out)) == [(4, 1), (12, b"x")]
    none = Signature("NONE", 0, "()", "()", "")
    out = bytearray()
    none.encode_result(None, out)
    assert out == b""
