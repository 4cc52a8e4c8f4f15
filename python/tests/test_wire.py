"""The codec: items and frames both ways, the spec's limits and faults, and the golden vectors."""

import math
import os
import struct

import pytest
from conftest import VECTORS

from courier_rpc import wire
from courier_rpc.textform import decode_stream, encode_text
from courier_rpc.wire import (Float32, Int8, Int32, UInt8, UInt64, ProtocolError, check_body, decode_items,
                              encode_values)


def roundtrip(*values):
    return decode_items(bytes(encode_values(values)))


def test_plain_values_roundtrip():
    values = [True, False, -5, 2**63 - 1, 1.5, "héllo", b"\x00\xff", [1, [2, "x"], []]]
    assert roundtrip(*values) == values


def test_widths_by_class():
    body = bytes(encode_values([Int8(-1), UInt8(255), Int32(7), UInt64(2**64 - 1), Float32(0.1)]))
    tags = [t for t, _ in check_body(body)]
    assert tags == [wire.T_I8, wire.T_U8, wire.T_I32, wire.T_U64, wire.T_F32]
    got = decode_items(body)
    assert got[:4] == [-1, 255, 7, 2**64 - 1]
    assert got[4] == struct.unpack("<f", struct.pack("<f", 0.1))[0]


@pytest.mark.parametrize("cls,bad", [(Int8, 128), (Int8, -129), (UInt8, -1), (UInt8, 256), (Int32, 2**31)])
def test_width_range_checked(cls, bad):
    with pytest.raises(OverflowError):
        cls(bad)


def test_plain_int_past_int64_refused():
    with pytest.raises(OverflowError):
        encode_values([2**63])


def test_unencodable_value():
    with pytest.raises(TypeError):
        encode_values([None])
    with pytest.raises(UnicodeEncodeError):
        encode_values(["\ud800"])


def test_nan_bit_pattern_kept():
    raw = struct.pack("<d", float("nan"))[:-1] + b"\x7f"
    items = check_body(bytes([wire.T_F64]) + raw)
    assert items == [(wire.T_F64, raw)]
    assert math.isnan(decode_items(bytes([wire.T_F64]) + raw)[0])


@pytest.mark.parametrize("body,code", [
    (b"\x00", 10),                          # unknown tag
    (b"\x04\x01\x00", 11),                  # int32 past the end
    (b"\x01\x02", 12),                      # bool 2
    (b"\x0c\x01\x00\x00\x00\xff", 13),      # bad UTF-8
    (b"\x0e" * 33 + b"\x0f" * 33, 14),      # 33 nested lists
    (b"\x0e", 16),                          # unterminated
    (b"\x0f", 17),                          # end without list
])
def test_body_faults(body, code):
    with pytest.raises(ProtocolError) as e:
        check_body(body)
    assert e.value.code == code


def test_first_fault_in_byte_order():
    with pytest.raises(ProtocolError) as e:
        check_body(b"\x01\x05\x00")  # invalid bool before the unknown tag
    assert e.value.code == 12


def test_depth_limit_exact():
    check_body(b"\x0e" * 32 + b"\x0f" * 32)
    with pytest.raises(ValueError):
        encode_values([[[[[1]]]]], max_depth=3)  # one item: four lists deep
    encode_values([[[[1]]]], max_depth=3)


def test_item_limit():
    check_body(b"\x01\x00" * 10, max_items=10)
    with pytest.raises(ProtocolError) as e:
        check_body(b"\x01\x00" * 11, max_items=10)
    assert e.value.code == 15


def test_frame_header_roundtrip():
    f = wire.frame(wire.CALL, b"\x04\x02\x00\x00\x00", b"ADD_", 7, 3)
    h = wire.parse_header(f)
    assert (h["kind"], h["token"], h["txn"], h["ctx"], h["blen"]) == (wire.CALL, b"ADD_", 7, 3, 5)
    assert f[:4] == b"COUR" and len(f) == 37


def test_error_names():
    assert wire.error_name(13) == "invalid_utf8"
    assert wire.error_name(270) == "invalid_argument"
    assert wire.error_name(70000) == "application_error"


def _vectors():
    return sorted(f[:-4] for f in os.listdir(VECTORS) if f.endswith(".hex"))


def _hex(path):
    with open(path) as f:
        return bytes.fromhex("".join("".join(l.split("#", 1)[0].split()) for l in f))


@pytest.mark.parametrize("name", _vectors())
def test_golden_vector(name):
    data = _hex(os.path.join(VECTORS, name + ".hex"))
    with open(os.path.join(VECTORS, name + ".txt")) as f:
        want = [l.rstrip("\n") for l in f if l.strip()]
    texts, err = decode_stream(data)
    if len(want) == 1 and len(want[0].split()) == 2 and want[0].startswith("error "):
        assert err == want[0].split()[1]
    else:
        assert err is None and texts == want
        assert encode_text(want) == data
