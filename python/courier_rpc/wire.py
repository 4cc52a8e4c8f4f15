"""The wire format of docs/protocol.md: frames (sections 2-4), items (section 7), error codes
(section 9) and limits (section 10). Pure functions over bytes; no I/O."""

import struct

MAGIC = b"COUR"
HEADER = 32
VERSION = 1

KINDS = {1: "handshake", 2: "send", 3: "call", 4: "reply", 5: "error", 6: "context_open",
         7: "context_close", 8: "ping", 9: "pong", 10: "close"}
KIND_CODES = {name: code for code, name in KINDS.items()}
HANDSHAKE, SEND, CALL, REPLY, ERROR, CONTEXT_OPEN, CONTEXT_CLOSE, PING, PONG, CLOSE = range(1, 11)

# Protocol error codes (1..255): the numbers never change (section 9).
ERRC = {2: "truncated", 3: "bad_magic", 4: "unsupported_version", 5: "bad_header_length",
        6: "bad_flags", 7: "unknown_kind", 8: "bad_token", 9: "frame_too_large",
        10: "unknown_type_tag", 11: "length_past_end", 12: "invalid_bool", 13: "invalid_utf8",
        14: "nesting_too_deep", 15: "too_many_items", 16: "unterminated_list",
        17: "unbalanced_list_end", 18: "type_mismatch", 19: "no_more_items", 20: "trailing_items",
        21: "token_mismatch", 22: "bad_handshake", 23: "unexpected_frame", 24: "bad_transaction_id",
        25: "bad_context_id"}
CODE = {name: code for code, name in ERRC.items()}
FATAL = {2, 3, 4, 5, 9, 22, 23}
NONFATAL_PROTOCOL = {6, 7, 8, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 24, 25}

# Runtime error codes (256..65535, section 9).
RUNTIME_ERRC = {256: "no_such_service", 257: "handler_failed", 258: "no_such_context",
                259: "request_timeout", 260: "system_shutdown", 261: "actor_stopped",
                262: "would_deadlock", 263: "stopped_by_request", 264: "empty_reference",
                265: "broken_promise", 266: "mailbox_full", 267: "name_not_found",
                268: "interface_mismatch", 269: "name_taken", 270: "invalid_argument",
                271: "parent_stopped", 272: "connection_lost", 273: "protocol_error",
                274: "too_many_contexts"}
NO_SUCH_SERVICE, HANDLER_FAILED, NO_SUCH_CONTEXT, REQUEST_TIMEOUT, SYSTEM_SHUTDOWN = 256, 257, 258, 259, 260
INVALID_ARGUMENT, CONNECTION_LOST, PROTOCOL_ERROR, TOO_MANY_CONTEXTS = 270, 272, 273, 274

ZERO_TOKEN = b"\0\0\0\0"
REFLECTION_TOKEN = b"$SVC"

DEFAULT_MAX_FRAME = 16 * 1024 * 1024
DEFAULT_MAX_ITEMS = 1 << 20
DEFAULT_MAX_DEPTH = 32
MIN_MAX_FRAME, MIN_MAX_ITEMS, MIN_MAX_DEPTH = 65536, 65536, 32
MAX_FIRST_FRAME = 4096

# item tags
T_BOOL, T_I8, T_I16, T_I32, T_I64, T_U8, T_U16, T_U32, T_U64, T_F32, T_F64, T_STR, T_BIN, T_LIST, T_END = range(1, 16)
TAG_NAMES = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
             8: "uint32", 9: "uint64", 10: "float32", 11: "float64", 12: "string", 13: "binary",
             14: "list", 15: "end"}
TAGS = {name: tag for tag, name in TAG_NAMES.items()}
FIXED = {T_BOOL: "<B", T_I8: "<b", T_I16: "<h", T_I32: "<i", T_I64: "<q", T_U8: "<B", T_U16: "<H",
         T_U32: "<I", T_U64: "<Q", T_F32: "<f", T_F64: "<d"}
_PACKERS = {tag: struct.Struct(fmt) for tag, fmt in FIXED.items()}
INT_RANGES = {T_I8: (-2**7, 2**7 - 1), T_I16: (-2**15, 2**15 - 1), T_I32: (-2**31, 2**31 - 1),
              T_I64: (-2**63, 2**63 - 1), T_U8: (0, 2**8 - 1), T_U16: (0, 2**16 - 1),
              T_U32: (0, 2**32 - 1), T_U64: (0, 2**64 - 1)}
_HEADER = struct.Struct("<4sBBBBI4sQQ")
_U32 = struct.Struct("<I")


def error_name(code):
    """The spec's name of an error code; application codes (65536 and up) have none of the spec's."""
    if code in ERRC:
        return ERRC[code]
    if code in RUNTIME_ERRC:
        return RUNTIME_ERRC[code]
    if code >= 65536:
        return "application_error"
    return "code_%d" % code


class ProtocolError(Exception):
    """A fault of section 9 found in bytes (a frame, a body) or while reading a body against a
    definition; `code` is the protocol error number."""

    def __init__(self, code, text=""):
        super().__init__(error_name(code) + (": " + text if text else ""))
        self.code = code
        self.text = text


# ---------------------------------------------------------------------------------------------------
# Items (section 7)

def utf8_ok(b):
    """Strict UTF-8 (RFC 3629, Unicode table 3-7): Python's decoder is exactly that."""
    try:
        b.decode("utf-8", "strict")
        return True
    except UnicodeDecodeError:
        return False


def check_body(body, max_items=DEFAULT_MAX_ITEMS, max_depth=DEFAULT_MAX_DEPTH):
    """Section 7 'well-formed body' and section 9 check order; raises ProtocolError on the first
    fault in byte order. Returns the items as a tree: list of (tag, value) with lists as
    (T_LIST, [children]); floats keep their bytes (every bit pattern is valid, NaNs included)."""
    pos, n = 0, len(body)
    count = 0
    root = []
    stack = [root]
    while pos < n:
        tag = body[pos]
        pos += 1
        if tag == 0 or tag > T_END:
            raise ProtocolError(10, "tag 0x%02x at offset %d" % (tag, pos - 1))
        if tag == T_END:
            if len(stack) == 1:
                raise ProtocolError(17, "offset %d" % (pos - 1))
            stack.pop()
            continue  # end markers are not counted (section 10)
        if tag == T_LIST:
            depth = len(stack)  # lists open once this tag has been read
            if depth > max_depth:
                raise ProtocolError(14, "depth %d, limit %d" % (depth, max_depth))
            count += 1
            if count > max_items:
                raise ProtocolError(15, "limit %d" % max_items)
            lst = []
            stack[-1].append((T_LIST, lst))
            stack.append(lst)
            continue
        if tag == T_STR or tag == T_BIN:
            if pos + 4 > n:
                raise ProtocolError(11, "offset %d" % (pos - 1))
            (ln,) = _U32.unpack_from(body, pos)
            pos += 4
            if ln > n - pos:
                raise ProtocolError(11, "offset %d" % (pos - 5))
            val = bytes(body[pos:pos + ln])
            pos += ln
            if tag == T_STR and not utf8_ok(val):
                raise ProtocolError(13, "offset %d" % (pos - ln - 5))
        else:
            packer = _PACKERS[tag]
            size = packer.size
            if pos + size > n:
                raise ProtocolError(11, "offset %d" % (pos - 1))
            if tag == T_F32 or tag == T_F64:
                val = bytes(body[pos:pos + size])  # keep the bit pattern (no canonicalizing)
            else:
                (val,) = packer.unpack_from(body, pos)
            pos += size
            if tag == T_BOOL and val not in (0, 1):
                raise ProtocolError(12, "offset %d" % (pos - 2))
        count += 1
        if count > max_items:
            raise ProtocolError(15, "limit %d" % max_items)
        stack[-1].append((tag, val))
    if len(stack) != 1:
        raise ProtocolError(16)
    return root


def enc_item(tag, val):
    """One scalar, string or binary item (strings may be given as bytes, already UTF-8)."""
    if tag == T_STR or tag == T_BIN:
        if isinstance(val, str):
            val = val.encode()
        return bytes([tag]) + _U32.pack(len(val)) + val
    return bytes([tag]) + _PACKERS[tag].pack(val)


def frame(kind, body=b"", token=ZERO_TOKEN, txn=0, ctx=0, version=VERSION, flags=0):
    return _HEADER.pack(MAGIC, version, HEADER, kind, flags, len(body), token, txn, ctx) + body


def error_frame(code, text, token=ZERO_TOKEN, txn=0, ctx=0):
    return frame(ERROR, enc_item(T_U32, code) + enc_item(T_STR, text), token, txn, ctx)


def parse_header(h):
    _magic, version, hlen, kind, flags, blen, token, txn, ctx = _HEADER.unpack_from(h, 0)
    return {"version": version, "hlen": hlen, "kind": kind, "flags": flags, "blen": blen,
            "token": token, "txn": txn, "ctx": ctx}


_PRINTABLE = bytes(range(0x20, 0x7F))


def token_ok(tok):
    # deleting the printable bytes leaves nothing of a good token (one C call, on every call received)
    return len(tok) == 4 and not tok.translate(None, _PRINTABLE)


def check_frame(hdr, body, max_items, max_depth):
    """The checks that need the whole frame, in section 9's order: kind, flags, token, body."""
    if hdr["kind"] not in KINDS:
        raise ProtocolError(7, "kind %d" % hdr["kind"])
    if hdr["flags"] != 0:
        raise ProtocolError(6)
    if hdr["kind"] in (SEND, CALL) and not token_ok(hdr["token"]):
        raise ProtocolError(8)
    return check_body(body, max_items, max_depth)


def typed(items, types):
    """Read a checked body against a flat definition of item tags (section 7, typed messages)."""
    if len(items) < len(types):
        for i, (tag, _) in enumerate(items):
            if tag != types[i]:
                raise ProtocolError(18, "item %d: %s, expected %s" % (i + 1, TAG_NAMES[tag], TAG_NAMES[types[i]]))
        raise ProtocolError(19)
    for i, t in enumerate(types):
        if items[i][0] != t:
            raise ProtocolError(18, "item %d: %s, expected %s" % (i + 1, TAG_NAMES[items[i][0]], TAG_NAMES[t]))
    if len(items) > len(types):
        raise ProtocolError(20)
    return [v for _, v in items]


def as_token(token):
    """A token given as str or bytes, checked: four printable ASCII bytes (section 4)."""
    tok = token.encode("latin-1") if isinstance(token, str) else bytes(token)
    if not token_ok(tok):
        raise ValueError("a token is four printable ASCII characters, not %r" % (token,))
    return tok


# ---------------------------------------------------------------------------------------------------
# Python values <-> items. Integers have no width in Python: a plain int travels as int64, a plain
# float as float64; the classes below name another wire type (and check the range when made).

class _IntItem(int):
    tag = T_I64

    def __new__(cls, value=0):
        v = int.__new__(cls, value)
        lo, hi = INT_RANGES[cls.tag]
        if not lo <= v <= hi:
            raise OverflowError("%d is out of range for %s (%d..%d)" % (v, TAG_NAMES[cls.tag], lo, hi))
        return v

    def __repr__(self):
        return "%s(%d)" % (type(self).__name__, int(self))


class Int8(_IntItem):
    tag = T_I8


class Int16(_IntItem):
    tag = T_I16


class Int32(_IntItem):
    tag = T_I32


class Int64(_IntItem):
    tag = T_I64


class UInt8(_IntItem):
    tag = T_U8


class UInt16(_IntItem):
    tag = T_U16


class UInt32(_IntItem):
    tag = T_U32


class UInt64(_IntItem):
    tag = T_U64


class Float32(float):
    """A float sent as float32 (rounded to it when encoded)."""
    tag = T_F32

    def __repr__(self):
        return "Float32(%r)" % float(self)


class Float64(float):
    tag = T_F64


INT_CLASSES = {c.tag: c for c in (Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64)}


def encode_values(values, out=None, max_depth=DEFAULT_MAX_DEPTH):
    """Python values to item bytes: bool, int (int64), the classes above, float (float64), str,
    bytes-like (binary), list or tuple (list). Appends to `out` (a bytearray) and returns it."""
    if out is None:
        out = bytearray()
    for v in values:
        _encode_value(v, out, 0, max_depth)
    return out


def _encode_value(v, out, depth, max_depth):
    if isinstance(v, bool):
        out += bytes((T_BOOL, 1 if v else 0))
    elif isinstance(v, int):
        tag = getattr(v, "tag", T_I64)
        if tag == T_I64 and not -2**63 <= v < 2**63:
            raise OverflowError("%d does not fit an int64; name its type (UInt64(%d))" % (v, v))
        out.append(tag)
        out += _PACKERS[tag].pack(v)
    elif isinstance(v, float):
        tag = getattr(v, "tag", T_F64)
        out.append(tag)
        out += _PACKERS[tag].pack(v)
    elif isinstance(v, str):
        b = v.encode("utf-8")  # raises on lone surrogates: a string item is well-formed UTF-8
        out.append(T_STR)
        out += _U32.pack(len(b))
        out += b
    elif isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        out.append(T_BIN)
        out += _U32.pack(len(b))
        out += b
    elif isinstance(v, (list, tuple)):
        if depth + 1 > max_depth:
            raise ValueError("lists nested deeper than %d (the peer's limit)" % max_depth)
        out.append(T_LIST)
        for e in v:
            _encode_value(e, out, depth + 1, max_depth)
        out.append(T_END)
    else:
        raise TypeError("no Courier item type for %s %r" % (type(v).__name__, v))


def float_value(tag, raw):
    return struct.unpack("<f" if tag == T_F32 else "<d", raw)[0]


def to_python(items):
    """A checked items tree (check_body) to Python values: lists as lists, strings as str,
    binary as bytes, floats as float."""
    out = []
    for tag, val in items:
        if tag == T_LIST:
            out.append(to_python(val))
        elif tag == T_BOOL:
            out.append(bool(val))
        elif tag == T_STR:
            out.append(val.decode("utf-8"))
        elif tag == T_F32 or tag == T_F64:
            out.append(float_value(tag, val))
        else:
            out.append(val)
    return out


def to_typed(items):
    """Like to_python, but integers and floats keep their item types (Int32, Float32, ...: ints and
    floats that encode_values writes back as the same types), so a value sent back is the item that came."""
    out = []
    for tag, val in items:
        if tag == T_LIST:
            out.append(to_typed(val))
        elif tag == T_BOOL:
            out.append(bool(val))
        elif tag == T_STR:
            out.append(val.decode("utf-8"))
        elif tag == T_F32:
            out.append(Float32(float_value(tag, val)))
        elif tag == T_F64:
            out.append(Float64(float_value(tag, val)))
        elif tag == T_BIN:
            out.append(val)
        else:
            out.append(INT_CLASSES[tag](val))
    return out


def decode_items(body, max_items=DEFAULT_MAX_ITEMS, max_depth=DEFAULT_MAX_DEPTH):
    """A body's items as Python values (raises ProtocolError when it is not well-formed)."""
    return to_python(check_body(body, max_items, max_depth))


def count_items(items):
    """Items (lists included, end markers not) and the deepest nesting of a checked tree."""
    n, deepest = 0, 0
    todo = [(items, 0)]
    while todo:
        lst, depth = todo.pop()
        deepest = max(deepest, depth)
        for tag, val in lst:
            n += 1
            if tag == T_LIST:
                todo.append((val, depth + 1))
    return n, deepest
