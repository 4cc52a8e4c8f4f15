"""Service signatures (docs/protocol.md section 15): parsed from their text, used to build a call's
items from Python values (checked before anything is sent) and to read a reply against them."""

import collections
import keyword
import re
import struct

from .wire import (INT_RANGES, T_BIN, T_BOOL, T_F32, T_F64, T_LIST, T_STR, TAG_NAMES, TAGS, ProtocolError,
                   float_value)

_SCALARS = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32",
            "float64"}
_PACK = {T_F32: struct.Struct("<f"), T_F64: struct.Struct("<d")}
_U32 = struct.Struct("<I")
_INT_PACK = {tag: struct.Struct(fmt) for tag, fmt in
             {2: "<b", 3: "<h", 4: "<i", 5: "<q", 6: "<B", 7: "<H", 8: "<I", 9: "<Q"}.items()}


def _all_integers(fields):
    """(a struct writing tag and value of each field, the tags) when every field is an integer."""
    if not fields:
        return None
    fmt = "<"
    for t, _name in fields:
        if t.kind != "scalar" or t.tag not in _INT_PACK:
            return None
        fmt += "B" + _INT_PACK[t.tag].format[1:]
    return struct.Struct(fmt), tuple(t.tag for t, _name in fields)


class ArgumentError(TypeError):
    """A value that does not fit the service's signature; nothing was sent."""


class Type:
    """One type of the grammar: kind is 'scalar' (tag), 'string', 'binary', 'list' (element,
    count: 0 = any number) or 'record' (fields: [(Type, name)])."""

    __slots__ = ("kind", "tag", "element", "count", "fields", "_tuple")

    def __init__(self, kind, tag=0, element=None, count=0, fields=None):
        self.kind, self.tag, self.element, self.count = kind, tag, element, count
        self.fields = fields if fields is not None else []
        self._tuple = None

    def __str__(self):
        if self.kind == "scalar":
            return TAG_NAMES[self.tag]
        if self.kind in ("string", "binary"):
            return self.kind
        if self.kind == "list":
            return "list of " + ("%d " % self.count if self.count else "") + str(self.element)
        return "record" + fields_text(self.fields)

    def tuple_type(self):
        """Records read back as named tuples when every field has a usable name, else tuples."""
        if self._tuple is None:
            names = [n for _, n in self.fields]
            ok = (names and all(n and n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_")
                                for n in names) and len(set(names)) == len(names))
            self._tuple = collections.namedtuple("record", names) if ok else tuple
        return self._tuple


def fields_text(fields):
    return "(" + ", ".join(str(t) + (" " + n if n else "") for t, n in fields) + ")"


class _Parser:
    _word = re.compile(r"[A-Za-z0-9_]+")

    def __init__(self, text):
        self.text, self.at = text, 0

    def fail(self, what):
        raise ValueError("signature %r: %s at offset %d" % (self.text, what, self.at))

    def eat(self, s):
        if self.text.startswith(s, self.at):
            self.at += len(s)
            return True
        return False

    def word(self):
        m = self._word.match(self.text, self.at)
        if not m:
            return ""
        self.at = m.end()
        return m.group(0)

    def type(self):
        if self.eat("list of "):
            count = 0
            m = re.compile(r"[0-9]+ ").match(self.text, self.at)
            if m:
                count = int(m.group(0))
                self.at = m.end()
            return Type("list", element=self.type(), count=count)
        if self.eat("record"):
            return Type("record", fields=self.fields())
        name = self.word()
        if name in _SCALARS:
            return Type("scalar", tag=TAGS[name])
        if name in ("string", "binary"):
            return Type(name)
        self.fail("unknown type %r" % name)

    def fields(self):
        if not self.eat("("):
            self.fail("'(' expected")
        out = []
        if self.eat(")"):
            return out
        while True:
            t = self.type()
            name = self.word() if self.eat(" ") else ""
            out.append((t, name))
            if self.eat(")"):
                return out
            if not self.eat(", "):
                self.fail("', ' or ')' expected")


def parse_arguments(text):
    """An arguments signature to its fields [(Type, name)]; None for the empty signature (the
    service declared none)."""
    if text == "":
        return None
    p = _Parser(text)
    fields = p.fields()
    if p.at != len(text):
        p.fail("text after the signature")
    return fields


def parse_result(text):
    """A result signature: None (declared none), or (fields, single) where single tells a result
    of one type (one item) from one in parentheses (that many items)."""
    if text == "":
        return None
    p = _Parser(text)
    if text.startswith("("):
        fields = p.fields()
        single = False
    else:
        fields = [(p.type(), "")]
        single = True
    if p.at != len(text):
        p.fail("text after the signature")
    return fields, single


# ---- Python values to items, checked --------------------------------------------------------------

def encode_arguments(fields, values, out, what):
    """Appends `values`, one per field, to bytearray `out`; ArgumentError names the first that does
    not fit (nothing of it reaches the wire: the caller sends `out` only when this returns)."""
    if len(values) != len(fields):
        raise ArgumentError("%s takes %d argument%s %s, %d given"
                            % (what, len(fields), "" if len(fields) == 1 else "s", fields_text(fields), len(values)))
    for i, ((t, name), v) in enumerate(zip(fields, values)):
        _encode(t, v, out, (what, i, name))


def _where(path):
    """The text of a place in the arguments, built only for an error: (what, index, name)
    followed by (', element %d' | ', field %s') steps."""
    what, i, name = path[:3]
    return "argument %d%s of %s" % (i + 1, " (%s)" % name if name else "", what) + "".join(path[3:])


def _bad(where, t, v, why=""):
    raise ArgumentError("%s: %s %r is not of type %s%s" % (_where(where), type(v).__name__, v, t, why))


def _encode(t, v, out, where):
    k = t.kind
    if k == "scalar":
        tag = t.tag
        if tag == T_BOOL:
            if not isinstance(v, bool):
                _bad(where, t, v)
            out += bytes((T_BOOL, 1 if v else 0))
        elif tag in (T_F32, T_F64):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                _bad(where, t, v)
            out.append(tag)
            try:
                out += _PACK[tag].pack(v)
            except OverflowError:
                _bad(where, t, v, " (out of range)")
        else:
            if isinstance(v, bool) or not isinstance(v, int):
                _bad(where, t, v)
            lo, hi = INT_RANGES[tag]
            if not lo <= v <= hi:
                _bad(where, t, v, " (out of range %d..%d)" % (lo, hi))
            out.append(tag)
            out += _INT_PACK[tag].pack(v)
    elif k == "string":
        if not isinstance(v, str):
            _bad(where, t, v)
        try:
            b = v.encode("utf-8")
        except UnicodeEncodeError:
            _bad(where, t, v, " (not valid UTF-8: a lone surrogate)")
        out.append(T_STR)
        out += _U32.pack(len(b))
        out += b
    elif k == "binary":
        if not isinstance(v, (bytes, bytearray, memoryview)):
            _bad(where, t, v)
        b = bytes(v)
        out.append(T_BIN)
        out += _U32.pack(len(b))
        out += b
    elif k == "list":
        if isinstance(v, (str, bytes, bytearray, dict)) or not isinstance(v, (list, tuple)):
            _bad(where, t, v)
        if t.count and len(v) != t.count:
            _bad(where, t, v, " (%d elements, not %d)" % (len(v), t.count))
        out.append(T_LIST)
        for j, e in enumerate(v):
            _encode(t.element, e, out, where + (", element %d" % (j + 1),))
        out.append(0x0F)
    else:  # record: a sequence of its fields in order, or a mapping by field name
        if isinstance(v, dict):
            names = [n for _, n in t.fields]
            if set(v) != set(names):
                _bad(where, t, v, " (fields %s)" % ", ".join(names))
            v = [v[n] for n in names]
        elif isinstance(v, (str, bytes, bytearray)) or not isinstance(v, (list, tuple)):
            _bad(where, t, v)
        if len(v) != len(t.fields):
            _bad(where, t, v, " (%d fields, not %d)" % (len(v), len(t.fields)))
        out.append(T_LIST)
        for j, ((ft, fname), e) in enumerate(zip(t.fields, v)):
            _encode(ft, e, out, where + (", field %s" % (fname or j + 1),))
        out.append(0x0F)


# ---- items read against a signature ---------------------------------------------------------------

def read_fields(fields, items, what="the body"):
    """Checked items (wire.check_body) read against `fields`: their Python values, or
    ProtocolError 18 type_mismatch, 19 no_more_items or 20 trailing_items (section 7)."""
    if len(items) > len(fields):
        raise ProtocolError(20, "%d item%s left over after the last field of %s"
                            % (len(items) - len(fields), "" if len(items) - len(fields) == 1 else "s", what))
    out = []
    for i, (t, _name) in enumerate(fields):
        if i >= len(items):
            raise ProtocolError(19, "%s ends after %d of %d items" % (what, len(items), len(fields)))
        out.append(_read(t, items[i]))
    return out


def _read(t, item):
    tag, val = item
    k = t.kind
    if k == "scalar":
        if tag != t.tag:
            raise ProtocolError(18, "a %s where a %s belongs" % (TAG_NAMES[tag], TAG_NAMES[t.tag]))
        if tag == T_BOOL:
            return bool(val)
        if tag in (T_F32, T_F64):
            return float_value(tag, val)
        return val
    if k == "string":
        if tag != T_STR:
            raise ProtocolError(18, "a %s where a string belongs" % TAG_NAMES[tag])
        return val.decode("utf-8")
    if k == "binary":
        if tag != T_BIN:
            raise ProtocolError(18, "a %s where a binary belongs" % TAG_NAMES[tag])
        return val
    if tag != T_LIST:
        raise ProtocolError(18, "a %s where a list belongs (%s)" % (TAG_NAMES[tag], t))
    if k == "list":
        if t.count and len(val) > t.count:
            raise ProtocolError(20, "a list of %d elements where %d belong" % (len(val), t.count))
        if t.count and len(val) < t.count:
            raise ProtocolError(19, "a list of %d elements where %d belong" % (len(val), t.count))
        return [_read(t.element, e) for e in val]
    return t.tuple_type()(*read_fields(t.fields, val, "a record"))


class Signature:
    """A service as reflection describes it: token, whether it returns a result, its arguments
    and result signatures (as text and parsed) and its description."""

    def __init__(self, token, returns, arguments, result, description):
        self.token, self.returns = token, returns
        self.arguments, self.result, self.description = arguments, result, description
        self.argument_fields = parse_arguments(arguments)
        self.result_shape = parse_result(result)
        if self.result_shape is not None and not self.result_shape[1]:
            self._result_type = Type("record", fields=self.result_shape[0])
        # Integers only (the common case, calc's ADD_): one struct writes the arguments, and the
        # items are read by comparing their tags; anything else, or a value that does not fit,
        # takes the general path (which names the fault).
        self._result_what = "the result of %s" % token
        self._int_args = _all_integers(self.argument_fields)
        self._int_result = (_all_integers(self.result_shape[0]) if self.result_shape is not None
                            and self.result_shape[1] else None)

    def encode(self, values, out):
        ints = self._int_args
        if ints is not None and len(values) == len(ints[1]):
            packer, tags = ints
            try:
                for v in values:
                    if v.__class__ is bool:
                        raise struct.error("a bool")
                out += packer.pack(*[x for pair in zip(tags, values) for x in pair])
                return
            except struct.error:
                pass
        if self.argument_fields is None:
            raise ArgumentError("%s declares no signature: call it with conn.call(%r, ...) and typed values"
                                % (self.token, self.token))
        encode_arguments(self.argument_fields, values, out, "%s%s" % (self.token, self.arguments))

    def encode_result(self, value, out):
        """A handler's result written by the result signature (a server's answer): the one value of
        a single type, a sequence for several fields, None for ()."""
        ints = self._int_result
        if ints is not None and value.__class__ is not bool:
            try:
                out += ints[0].pack(ints[1][0], value)
                return
            except struct.error:
                pass  # the general path names the fault
        fields, single = self.result_shape
        values = [value] if single else ([] if not fields and value is None else list(value))
        encode_arguments(fields, values, out, self._result_what)

    def read_arguments(self, items):
        """A call's items read against the arguments (read_fields, with the integers' fast path)."""
        ints = self._int_args
        if ints is not None and len(items) == len(ints[1]) and all(
                item[0] == tag for item, tag in zip(items, ints[1])):
            return [item[1] for item in items]
        return read_fields(self.argument_fields, items, "the call")

    def read_result(self, items):
        """The reply's items (a checked tree) as the result: None for (), the one value of a
        single type, a (named) tuple for several; raises ProtocolError when they do not match."""
        if self._int_result is not None and len(items) == 1 and items[0][0] == self._int_result[1][0]:
            return items[0][1]
        if self.result_shape is None:
            from .wire import to_python
            return to_python(items)
        fields, single = self.result_shape
        values = read_fields(fields, items, "the reply")
        if single:
            return values[0]
        if not fields:
            return None
        return self._result_type.tuple_type()(*values)

    def __str__(self):
        return "%s %s -> %s%s" % (self.token, self.arguments or "(?)", self.result or "?",
                                  "  " + self.description if self.description else "")

    def __repr__(self):
        return "<Signature %s>" % self
