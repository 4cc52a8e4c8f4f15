"""python -m courier_rpc call|list: courier-call (docs/guide/tools.md) in Python, with its options,
its output and its exit statuses.

    python -m courier_rpc list [transport options] [--json]
    python -m courier_rpc call [transport options] [--json] [--send] [--context NAME] TOKEN ARG...
    ... @ server-program args...          (pipe: starts the server)
"""

import argparse
import json
import math
import re
import sys

from .client import connect, parse_services
from .core import CourierError
from .signature import ArgumentError, read_fields
from .wire import (CONNECTION_LOST, ERRC, INT_CLASSES, INT_RANGES, REFLECTION_TOKEN, REQUEST_TIMEOUT, T_BIN,
                   T_BOOL, T_F32, T_F64, T_LIST, T_STR, TAGS, Float32, Float64, ProtocolError, as_token,
                   float_value, to_python)

EXIT_OK, EXIT_ERROR_REPLY, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_REFUSED, EXIT_TIMEOUT, EXIT_LOST = range(7)

EXIT_HELP = """Exit status: 0 the call was answered (or --list printed); 1 the server answered with an ERROR
(code and text printed); 2 bad options or arguments; 3 the server cannot be reached; 4 the
handshake failed or the server refused the connection; 5 no answer within --timeout; 6 the
connection broke or the peer broke the protocol.
Arguments are converted by the service's signature (--list shows it). A service without one
takes typed arguments: bool:true i8: i16: i32: i64: u8: u16: u32: u64: f32: f64: str: bin:HEX
list:[i32:1,str:x]. Lists and records are written [a,b,...]."""

# The C++ texts of the runtime codes, which courier-call prints beside the code.
RUNTIME_TEXTS = {256: "no such service", 257: "handler failed", 258: "no such context", 259: "request timed out",
                 260: "actor system shut down", 261: "actor stopped", 262: "blocking call would deadlock",
                 263: "stopped by request", 264: "empty actor reference",
                 265: "reply promise dropped without a reply", 266: "mailbox full",
                 267: "no actor registered under that name", 268: "actor does not implement the interface",
                 269: "name already registered", 270: "invalid argument", 271: "parent actor stopped",
                 272: "connection lost", 273: "protocol error", 274: "too many child contexts"}

PREFIXES = {"bool": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
            "u16": "uint16", "u32": "uint32", "u64": "uint64", "f32": "float32", "f64": "float64"}
WITH_VALUE = {"--file", "--host", "--port", "--timeout", "--name", "--buffersize", "--max-frame", "--debug",
              "--context", "--keepalive"}


class Failure(Exception):
    def __init__(self, status, text):
        super().__init__(text)
        self.status, self.text = status, text


def error_text(code):
    if 0 < code < 256:
        return ERRC.get(code, "unknown")
    if code < 65536:
        return RUNTIME_TEXTS.get(code, "unknown courier error")
    return "application error"


# ---- arguments from text ---------------------------------------------------------------------------

def split_list(text):
    """'[a,b,[c,d]]' into its top-level elements; None when the brackets do not match."""
    if len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    text = text[1:-1]
    if not text:
        return []
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        return None
    parts.append(text[start:])
    return parts


_SIGNED = re.compile(r"-?[0-9]+\Z")
_UNSIGNED = re.compile(r"[0-9]+\Z")


def scalar_value(tag, text):
    """A scalar written as text, as courier-call reads it; None when it is not one."""
    if tag == T_BOOL:
        return {"true": True, "1": True, "false": False, "0": False}.get(text)
    if tag in (T_F32, T_F64):
        if "_" in text or text != text.strip():
            return None
        try:
            return float(text)
        except ValueError:
            return None
    lo, hi = INT_RANGES[tag]
    if not (_SIGNED if lo < 0 else _UNSIGNED).match(text):
        return None
    v = int(text)
    return v if lo <= v <= hi else None


def hex_bytes(text):
    if len(text) % 2 or not re.fullmatch(r"[0-9a-fA-F]*", text):
        return None
    return bytes.fromhex(text)


def typed_value(t, text):
    """Text to the Python value of type `t` (then encoded and checked by the signature)."""
    expected = "'%s' is not of type %s" % (text, t)
    if t.kind == "scalar":
        v = scalar_value(t.tag, text)
        if v is None:
            raise ArgumentError(expected)
        return v
    if t.kind == "string":
        return text
    if t.kind == "binary":
        b = hex_bytes(text)
        if b is None:
            raise ArgumentError(expected + " (hex digits, two per byte)")
        return b
    parts = split_list(text)
    if parts is None:
        raise ArgumentError(expected + " (written [a,b,...])")
    if t.kind == "list":
        if t.count and len(parts) != t.count:
            raise ArgumentError(expected + " (%d elements, not %d)" % (len(parts), t.count))
        return [typed_value(t.element, p) for p in parts]
    if len(parts) != len(t.fields):
        raise ArgumentError(expected + " (%d fields, not %d)" % (len(parts), len(t.fields)))
    return [typed_value(ft, p) for (ft, _), p in zip(t.fields, parts)]


def prefixed_value(text):
    """An argument with its type prefix (a service without a signature): i32:2, list:[...]."""
    if ":" not in text:
        raise ArgumentError("'%s' has no type prefix (the service declares no signature): write i32:%s, str:%s, ..."
                            % (text, text, text))
    prefix, value = text.split(":", 1)
    if prefix in PREFIXES:
        tag = TAGS[PREFIXES[prefix]]
        v = scalar_value(tag, value)
        if v is None:
            raise ArgumentError("'%s' is not of type %s" % (value, PREFIXES[prefix]))
        if tag == T_BOOL:
            return v
        if tag == T_F32:
            return Float32(v)
        if tag == T_F64:
            return Float64(v)
        return INT_CLASSES[tag](v)
    if prefix == "str":
        return value
    if prefix == "bin":
        b = hex_bytes(value)
        if b is None:
            raise ArgumentError("'%s' is not binary (hex digits, two per byte)" % value)
        return b
    if prefix == "list":
        parts = split_list(value)
        if parts is None:
            raise ArgumentError("'%s' is not a list (written [i32:1,str:x])" % value)
        return [prefixed_value(p) for p in parts]
    raise ArgumentError("unknown type prefix '%s' (bool i8 i16 i32 i64 u8 u16 u32 u64 f32 f64 str bin list)" % prefix)


# ---- printing ---------------------------------------------------------------------------------------

def json_item(tag, val):
    """A reply item as courier-call's JSON: lists as arrays, binary as hex, NaN and infinities as
    null (JSON has none)."""
    if tag == T_LIST:
        return [json_item(t, v) for t, v in val]
    if tag == T_BOOL:
        return bool(val)
    if tag == T_STR:
        return val.decode("utf-8")
    if tag == T_BIN:
        return val.hex()
    if tag in (T_F32, T_F64):
        x = float_value(tag, val)
        return None if math.isnan(x) or math.isinf(x) else x
    return val


def item_text(item):
    """One item as courier-call prints it: strings bare, lists as [a, b], the rest as JSON."""
    if isinstance(item, str):
        return item
    if isinstance(item, list):
        return "[" + ", ".join(item_text(i) for i in item) + "]"
    return json.dumps(item)


def dumps(value, indent=None):
    if indent:
        return json.dumps(value, indent=indent, sort_keys=True, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


# ---- the command -----------------------------------------------------------------------------------

def take_call_words(argv):
    """The call's words (TOKEN ARG...) run from the first word that is not an option (or an
    option's value) up to '@'; they are taken out before the options are parsed, so that '-5'
    stays an argument. Returns (words, the options, the pipe command or None)."""
    words, rest = [], []
    i = 0
    while i < len(argv) and argv[i] != "@":
        a = argv[i]
        if words or (a and not a.startswith("-")):
            words.append(a)
        else:
            rest.append(a)
            if a in WITH_VALUE and i + 1 < len(argv):
                i += 1
                rest.append(argv[i])
        i += 1
    command = argv[i + 1:] if i < len(argv) else None
    return words, rest, command


def parser(prog):
    p = argparse.ArgumentParser(prog=prog, description="Transport options: --pipe (the default: @ server args...), "
                                "--uds --file PATH, --tcp [--host H] --port P",
                                epilog="After the options: TOKEN ARG... (the service and its arguments).\n" + EXIT_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pipe", action="store_true", help="talk over a socket pair to a child process (the default)")
    g.add_argument("--uds", action="store_true", help="talk over a Unix-domain socket (needs --file)")
    g.add_argument("--tcp", action="store_true", help="talk over TCP (needs --port)")
    p.add_argument("--file", metavar="PATH", help="uds: the socket file")
    p.add_argument("--host", metavar="HOST", default="127.0.0.1", help="tcp: host name or address")
    p.add_argument("--port", metavar="PORT", type=int, help="tcp: the port")
    p.add_argument("--timeout", metavar="SEC", type=float, default=10.0,
                   help="time-out in seconds for connect, handshake and calls (default 10)")
    p.add_argument("--keepalive", metavar="MS", type=int, default=0, help="ping a silent peer every MS milliseconds")
    p.add_argument("--name", metavar="NAME", default="courier-call", help="the name this program gives itself")
    p.add_argument("--buffersize", metavar="N", type=int, default=0, help="accepted for courier-call's syntax; unused")
    p.add_argument("--max-frame", metavar="N", type=int, default=0, help="the largest frame accepted, in bytes")
    p.add_argument("--debug", metavar="N", type=int, default=0, help="accepted for courier-call's syntax; unused")
    p.add_argument("--silent", action="store_true", help="accepted for courier-call's syntax; unused")
    p.add_argument("--list", action="store_true", help="list the server's services: token, signature, description")
    p.add_argument("--json", action="store_true", help="print the reply (or the list) as JSON")
    p.add_argument("--send", action="store_true", help="send one-way (END): no reply is awaited")
    p.add_argument("--context", metavar="NAME", default="", help="open a child context of this name first and call in it")
    return p


class _UsageError(Exception):
    pass


def run(argv, prog="courier_rpc", out=sys.stdout, err=sys.stderr, listing=False):
    words, rest, command = take_call_words(argv)
    p = parser(prog)
    p.error = lambda message: (_ for _ in ()).throw(_UsageError(message))
    try:
        opts = p.parse_args(rest)
    except _UsageError as e:
        err.write("%s: %s\nRun '%s --help' to see the options.\n" % (prog, e, prog))
        return EXIT_USAGE
    except SystemExit as e:  # --help
        return e.code or 0

    def usage(text):
        err.write("%s: %s\nRun '%s --help' to see the options.\n" % (prog, text, prog))
        return EXIT_USAGE

    if opts.file and not opts.uds:
        return usage("--file requires --uds")
    if opts.uds and not opts.file:
        return usage("--uds needs --file PATH")
    if opts.tcp and opts.port is None:
        return usage("--tcp needs --port P")
    if opts.port is not None and not opts.tcp:
        return usage("--port requires --tcp")
    if command is not None and (opts.uds or opts.tcp):
        return usage("'@ server...' starts a pipe server; it does not go with --%s" % ("uds" if opts.uds else "tcp"))
    if opts.timeout <= 0:
        return usage("--timeout must be a number greater than 0")
    if command is not None and not command:
        return usage("'@' must be followed by the server program")
    if opts.max_frame and not 65536 <= opts.max_frame <= 0xFFFFFFFF:
        return usage("--max-frame: 65536 to 4294967295")

    reflection_called = len(words) == 1 and words[0] == "$SVC"
    list_ = opts.list or listing or reflection_called
    if not list_ and not words:
        err.write("%s: name a service (TOKEN ARG...) or ask for --list\n" % prog)
        return EXIT_USAGE
    if list_ and words and not reflection_called:
        err.write("%s: --list takes no TOKEN or arguments\n" % prog)
        return EXIT_USAGE
    if words and len(words[0]) != 4:
        err.write("%s: a token has four characters, not '%s'\n" % (prog, words[0]))
        return EXIT_USAGE

    def fail(f):
        if opts.json:
            out.write(dumps({"failure": {"status": f.status, "text": f.text}}) + "\n")
        err.write("%s: %s\n" % (prog, f.text))
        return f.status

    if not (opts.uds or opts.tcp or command):
        return fail(Failure(EXIT_UNREACHABLE, "cannot reach pipe: no server command (usage: client [options] @ server "
                            "args...)"))
    if opts.uds:
        where = {"uds": opts.file}
        described = "uds %s" % opts.file
    elif opts.tcp:
        where = {"tcp": (opts.host, opts.port)}
        described = "tcp %s:%d" % (opts.host, opts.port)
    else:
        where = {"pipe": command}
        described = "pipe %s" % " ".join(command)
    try:
        conn = connect(**where, name=opts.name, timeout=opts.timeout, keepalive=opts.keepalive / 1000.0,
                       max_frame=opts.max_frame or None)
    except OSError as e:
        return fail(Failure(EXIT_UNREACHABLE, "cannot reach %s: %s" % (described, e.strerror or e)))
    except CourierError as e:
        status = EXIT_TIMEOUT if e.code == REQUEST_TIMEOUT else EXIT_REFUSED
        return fail(Failure(status, e.text if e.code in (CONNECTION_LOST, REQUEST_TIMEOUT)
                            else "the handshake failed: ERROR %d (%s): %s" % (e.code, e.name, e.text)))
    try:
        return _session(conn, opts, words, list_, out, err, prog, fail)
    except Failure as f:
        return fail(f)
    except CourierError as e:
        return fail(Failure(EXIT_TIMEOUT if e.code == REQUEST_TIMEOUT else EXIT_LOST, e.text))
    finally:
        conn.close(timeout=0.5)  # as courier-call: a late answer is not waited for long


def _session(conn, opts, words, list_, out, err, prog, fail):
    caller = conn
    if opts.context:
        try:
            caller = conn.open_context(opts.context)
        except CourierError as e:
            if e.code == 274 and conn.peer_limits["max_child_contexts"] == 0:
                raise Failure(EXIT_REFUSED, "--context %s: the server accepts no child contexts (it announced none)"
                              % opts.context)
            if e.code in (CONNECTION_LOST, REQUEST_TIMEOUT, 273):
                raise
            err.write("%s: --context %s: the server refused the child context: ERROR %d (%s): %s\n"
                      % (prog, opts.context, e.code, error_text(e.code), e.text))
            return EXIT_ERROR_REPLY

    services = None
    listed_error = None
    try:
        raw = caller._roundtrip(REFLECTION_TOKEN, b"", None, lambda items: items)
        services = parse_services([_plain(i) for i in raw])
    except CourierError as e:
        if e.code in (CONNECTION_LOST, REQUEST_TIMEOUT):
            raise
        listed_error = e.text if e.code != 273 else "a malformed service list"
    if list_:
        if services is None:
            raise Failure(EXIT_ERROR_REPLY, "the server does not describe its services: " + listed_error)
        if opts.json:
            out.write(dumps([{"token": s.token, "kind": "call" if s.returns == 1 else "one-way",
                              "arguments": s.arguments, "result": s.result, "description": s.description}
                             for s in services.values()], indent=2) + "\n")
        else:
            for s in services.values():
                line = "%s %s -> %s" % (s.token, s.arguments or "(?)", s.result or "?")
                if s.description:
                    line += "  " + s.description
                out.write(line + "\n")
        return EXIT_OK

    tok, args = words[0], words[1:]
    known = services.get(tok) if services is not None else None
    values = []
    if known is not None and known.arguments:
        fields = known.argument_fields
        if len(args) != len(fields):
            raise Failure(EXIT_USAGE, "%s takes %d argument(s), %s; %d given" % (tok, len(fields), known.arguments, len(args)))
        for i, ((t, _), a) in enumerate(zip(fields, args)):
            try:
                values.append(typed_value(t, a))
            except ArgumentError as e:
                raise Failure(EXIT_USAGE, "argument %d of %s%s: %s" % (i + 1, tok, known.arguments, e))
    else:
        if services is not None and known is None:
            raise Failure(EXIT_USAGE, "the server has no service %s (courier-call --list shows them)" % tok)
        for i, a in enumerate(args):
            try:
                values.append(prefixed_value(a))
            except ArgumentError as e:
                raise Failure(EXIT_USAGE, "argument %d: %s" % (i + 1, e))
    try:
        token = as_token(tok)
    except ValueError:
        raise Failure(EXIT_USAGE, "a token is four printable ASCII characters")
    body = bytearray()
    try:
        if known is not None and known.arguments:
            known.encode(values, body)
        else:
            body = conn._core_encode(values)
    except (ArgumentError, OverflowError, ValueError) as e:
        raise Failure(EXIT_USAGE, str(e))
    if opts.send:
        caller._send(token, body)
        return EXIT_OK
    try:
        items = caller._roundtrip(token, body, None, lambda items: items)
    except CourierError as e:
        if e.code in (CONNECTION_LOST, REQUEST_TIMEOUT) or (e.code == 273 and "spoiled" in e.text):
            raise
        if opts.json:
            out.write(dumps({"error": {"code": e.code, "name": error_text(e.code), "text": e.text}}) + "\n")
        err.write("%s: %s answered ERROR %d (%s): %s\n" % (prog, tok, e.code, error_text(e.code), e.text))
        return EXIT_ERROR_REPLY
    # A call built from the signature is read against it too (docs/protocol.md section 15).
    if known is not None and known.result_shape is not None:
        try:
            read_fields(known.result_shape[0], items, "the reply")
        except ProtocolError as e:
            raise Failure(EXIT_LOST, "the reply does not match %s's result %s: %s" % (tok, known.result, e.text))
    result = [json_item(t, v) for t, v in items]
    if opts.json:
        out.write(dumps({"token": tok, "result": result}) + "\n")
    else:
        for item in result:
            out.write(item_text(item) + "\n")
    return EXIT_OK


def _plain(item):
    return to_python([item])[0]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    prog = "python -m courier_rpc"
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write("usage: %s call|list [options] [TOKEN ARG...] [@ server-program args...]\n"
                         "       %s serve SCRIPT.py|MODULE[:NAME] [--uds --file F | --tcp --port P | --pipe]\n\n%s\n"
                         % (prog, prog, EXIT_HELP))
        return EXIT_OK if argv else EXIT_USAGE
    sub, rest = argv[0], argv[1:]
    if sub == "serve":
        return serve(rest, prog="%s serve" % prog)
    if sub not in ("call", "list"):
        sys.stderr.write("%s: the first word is call, list or serve, not '%s'\n" % (prog, sub))
        return EXIT_USAGE
    return run(rest, prog="%s %s" % (prog, sub), listing=(sub == "list"))


def load_server(target):
    """The courier_rpc.Server that `target` defines: a script's path or a module's name, with
    `:NAME` for the variable (else the one Server it holds)."""
    import importlib
    import importlib.util
    import os
    from .server import Server
    where, _, attr = target.partition(":") if not os.path.exists(target) else (target, "", "")
    if where.endswith(".py") or os.path.sep in where:
        if not os.path.isfile(where):
            raise Failure(EXIT_USAGE, "no script %s" % where)
        spec = importlib.util.spec_from_file_location("courier_served", where)
        module = importlib.util.module_from_spec(spec)
        sys.modules["courier_served"] = module
        spec.loader.exec_module(module)  # under another name than __main__: its run() stays unrun
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise Failure(EXIT_USAGE, "cannot import %s: %s" % (where, e))
    if attr:
        found = getattr(module, attr, None)
        if not isinstance(found, Server):
            raise Failure(EXIT_USAGE, "%s has no courier_rpc.Server named %s" % (where, attr))
        return found
    servers = [v for v in vars(module).values() if isinstance(v, Server)]
    if len(servers) != 1:
        raise Failure(EXIT_USAGE, "%s defines %s courier_rpc.Server: name the one to serve (%s:NAME)"
                      % (where, "no" if not servers else "more than one", where))
    return servers[0]


def serve(argv, prog):
    if not argv or argv[0].startswith("-"):
        sys.stderr.write("usage: %s SCRIPT.py|MODULE[:NAME] [--uds --file F | --tcp --port P | --pipe] [options]\n"
                         % prog)
        return EXIT_OK if argv and argv[0] in ("-h", "--help") else EXIT_USAGE
    try:
        server = load_server(argv[0])
    except Failure as f:
        sys.stderr.write("%s: %s\n" % (prog, f.text))
        return f.status
    return server.run(argv[1:])
