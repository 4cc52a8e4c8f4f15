"""The text form of frames and items of tests/vectors/README.md: frames printed for people and
reports, and the golden vectors' text read back into bytes."""

import math
import struct

from .wire import (DEFAULT_MAX_DEPTH, DEFAULT_MAX_FRAME, DEFAULT_MAX_ITEMS, ERRC, HEADER, KINDS, MAGIC,
                   T_BIN, T_BOOL, T_END, T_F32, T_F64, T_LIST, T_STR, TAG_NAMES, ProtocolError,
                   check_body, check_frame, enc_item, frame, parse_header)


def quote(b):
    out = []
    for c in b:
        if c == 0x22:
            out.append('\\"')
        elif c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c <= 0x7E:
            out.append(chr(c))
        else:
            out.append("\\x%02x" % c)
    return '"' + "".join(out) + '"'


def shortest(x, is32):
    """Shortest decimal that reads back to the same value, formatted as C++ to_chars does:
    %f or %e style, whichever is shorter (fixed on a tie)."""
    if x == 0:
        return "-0" if math.copysign(1, x) < 0 else "0"
    if is32:
        for p in range(1, 18):
            s = "%.*e" % (p - 1, x)
            try:
                if struct.unpack("<f", struct.pack("<f", float(s)))[0] == x:
                    break
            except OverflowError:  # rounded past the largest float32
                continue
    else:
        # repr is the shortest round-trip form; rewrite it with exactly its digits in %e style
        s = "%.*e" % (len(_digits(repr(x))) - 1, x)
    mant, exp = s.split("e")
    exp = int(exp)
    neg = mant.startswith("-")
    digits = mant.lstrip("-").replace(".", "").rstrip("0") or "0"
    sci = digits[0] + ("." + digits[1:] if len(digits) > 1 else "") + "e" + ("-" if exp < 0 else "+") + "%02d" % abs(exp)
    if exp >= 0:
        if len(digits) <= exp + 1:
            fixed = digits + "0" * (exp + 1 - len(digits))
        else:
            fixed = digits[:exp + 1] + "." + digits[exp + 1:]
    else:
        fixed = "0." + "0" * (-exp - 1) + digits
    r = fixed if len(fixed) <= len(sci) else sci
    return ("-" if neg else "") + r


def _digits(s):
    m = s.lstrip("-").split("e")[0].replace(".", "").lstrip("0").rstrip("0")
    return m or "0"


def fmt_float(raw):
    if len(raw) == 4:
        (bits,) = struct.unpack("<I", raw)
        (x,) = struct.unpack("<f", raw)
        quiet = 0x7FC00000
    else:
        (bits,) = struct.unpack("<Q", raw)
        (x,) = struct.unpack("<d", raw)
        quiet = 0x7FF8000000000000
    if math.isnan(x):
        return "nan" if bits == quiet else "nan:0x%x" % bits
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return shortest(x, len(raw) == 4)


def print_items(items, indent, out):
    for tag, val in items:
        pad = "  " * indent
        if tag == T_LIST:
            out.append(pad + "list")
            print_items(val, indent + 1, out)
            out.append(pad + "end")
        elif tag == T_BOOL:
            out.append(pad + "bool " + ("true" if val else "false"))
        elif tag in (T_F32, T_F64):
            out.append(pad + TAG_NAMES[tag] + " " + fmt_float(val))
        elif tag == T_STR:
            out.append(pad + "string " + quote(val))
        elif tag == T_BIN:
            out.append(pad + "binary 0x" + val.hex())
        else:
            out.append(pad + "%s %d" % (TAG_NAMES[tag], val))


def print_frame(raw):
    """Decoded text form of one complete frame (for reports); never raises."""
    if len(raw) < HEADER:
        return "(%d raw bytes: %s)" % (len(raw), raw.hex(" "))
    hdr = parse_header(raw)
    line = '%s token=%s txn=%d ctx=%d' % (KINDS.get(hdr["kind"], "kind%d" % hdr["kind"]),
                                          quote(hdr["token"]), hdr["txn"], hdr["ctx"])
    if raw[:4] != MAGIC or hdr["version"] != 1 or hdr["hlen"] != HEADER or hdr["flags"]:
        line += " [header: %s]" % raw[:8].hex(" ")
    body = raw[HEADER:]
    out = [line]
    try:
        print_items(check_body(body), 1, out)
    except ProtocolError as e:
        out.append("  (body %s: %s)" % (ERRC.get(e.code), body.hex(" ")))
    return "\n".join(out)


def decode_stream(data):
    """Golden-vector decoder: frames back to back with the default limits; returns (texts, error)."""
    texts = []
    pos = 0
    while pos < len(data):
        rest = data[pos:]
        k = min(4, len(rest))
        if rest[:k] != MAGIC[:k]:
            return texts, "bad_magic"
        if len(rest) < HEADER:
            return texts, "truncated"
        hdr = parse_header(rest)
        if hdr["version"] != 1:
            return texts, "unsupported_version"
        if hdr["hlen"] != HEADER:
            return texts, "bad_header_length"
        if HEADER + hdr["blen"] > DEFAULT_MAX_FRAME:
            return texts, "frame_too_large"
        if len(rest) < HEADER + hdr["blen"]:
            return texts, "truncated"
        raw = rest[:HEADER + hdr["blen"]]
        try:
            items = check_frame(hdr, raw[HEADER:], DEFAULT_MAX_ITEMS, DEFAULT_MAX_DEPTH)
        except ProtocolError as e:
            return texts, ERRC[e.code]
        out = ['%s token=%s txn=%d ctx=%d' % (KINDS[hdr["kind"]], quote(hdr["token"]), hdr["txn"], hdr["ctx"])]
        print_items(items, 1, out)
        texts.extend(out)
        pos += len(raw)
    return texts, None


def unquote(s):
    """The inverse of quote(): text between the quotes to bytes."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            if s[i + 1] == "x":
                out.append(int(s[i + 2:i + 4], 16))
                i += 4
                continue
            out.append(ord(s[i + 1]))
            i += 2
            continue
        out.append(ord(c))
        i += 1
    return bytes(out)


def parse_float(text, is32):
    fmt, ifmt = ("<f", "<I") if is32 else ("<d", "<Q")
    if text.startswith("nan:0x"):
        return struct.pack(ifmt, int(text[6:], 16))
    if text == "nan":
        return struct.pack(ifmt, 0x7FC00000 if is32 else 0x7FF8000000000000)
    return struct.pack(fmt, float(text))


def encode_text(lines):
    """Golden-vector encoder: the README's text form back to bytes."""
    out = b""
    kind = head = body = None

    def flush():
        nonlocal out
        if head is not None:
            out += frame(kind, body, head["token"], head["txn"], head["ctx"])

    for line in lines:
        if not line.startswith(" "):
            flush()
            name, rest = line.split(" ", 1)
            kind = {v: k for k, v in KINDS.items()}[name]
            tok_end = rest.index('" txn=')
            token = unquote(rest[len('token="'):tok_end])
            txn, ctx = (int(f.split("=")[1]) for f in rest[tok_end + 2:].split())
            head = {"token": token, "txn": txn, "ctx": ctx}
            body = b""
            continue
        item = line.strip()
        name, _, val = item.partition(" ")
        tag = {v: k for k, v in TAG_NAMES.items()}[name]
        if tag in (T_LIST, T_END):
            body += bytes([tag])
        elif tag == T_BOOL:
            body += bytes([tag, 1 if val == "true" else 0])
        elif tag in (T_F32, T_F64):
            body += bytes([tag]) + parse_float(val, tag == T_F32)
        elif tag == T_STR:
            body += enc_item(tag, unquote(val[1:-1]))
        elif tag == T_BIN:
            body += enc_item(tag, bytes.fromhex(val[2:]))
        else:
            body += enc_item(tag, int(val))
    flush()
    return out
