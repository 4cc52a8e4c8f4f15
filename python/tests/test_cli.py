"""python -m courier_rpc call|list against courier-call: the same server, the same arguments, the
same output on stdout and the same exit status."""

import os
import subprocess
import sys

import pytest
from conftest import program

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

CASES = {
    "courier-calc-server": [
        ["--list"], ["--list", "--json"], ["ADD_", "2", "3"], ["--json", "DIV_", "7", "2"], ["DIV_", "1", "0"],
        ["--json", "DIV_", "1", "0"], ["ADD_", "1", "x"], ["ADD_", "1"], ["ADD_", "2147483648", "1"],
        ["NOPE", "1"], ["ADD"], ["--send", "NOTE", "hello"], ["NOTE", "-5"], ["$SVC"],
        ["--timeout", "0.2", "SLOW", "1000", "1"], ["--context", "c", "ADD_", "1", "2"], [],
        ["--list", "ADD_"], ["--bogus"],
    ],
    "courier-echo-server": [
        ["ECHO", "true", "-5", "300", "70000", "-9", "255", "65535", "4000000000", "1", "1.5", "-2.25", "hi",
         "0a0b", "[1,2]", "[0,0]", "[[1,2]]"],
        ["--json", "ECHO", "0", "-128", "-32768", "-2147483648", "-9223372036854775808", "0", "0", "0",
         "18446744073709551615", "0.1", "1e300", "x y", "", "[]", "[1.5,-0]", "[]"],
        ["--list"], ["HELO"],
        ["ECHO", "true", "-5", "300", "70000", "-9", "256", "65535", "4000000000", "1", "1.5", "-2.25", "hi",
         "0a0b", "[1,2]", "[0,0]", "[[1,2]]"],
        ["ECHO", "true", "-5", "300", "70000", "-9", "255", "65535", "4000000000", "1", "1.5", "-2.25", "hi",
         "0a0", "[1,2]", "[0,0]", "[[1,2]]"],
    ],
    "courier-services-server": [
        ["--list", "--json"], ["HELO", "world"], ["ELST", "i32:1", "str:two", "list:[f64:3.5,bool:true]", "f32:0.1",
                                                  "u64:18446744073709551615", "bin:00ff"],
        ["ELST", "1"], ["ELST", "q:1"], ["--json", "SUM_", "[1,2,3]"], ["MUL_", "4611686018427387904", "4"],
        ["--context", "mine", "NAME"], ["--context", "mine", "--list"], ["--context", "mine", "CNT_"],
        ["BACK"],
    ],
}


def start(cmd):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=PYTHON_DIR))


def finish(p):
    try:
        out, err = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, out.decode(), err.decode()


def run(cmd):
    return finish(start(cmd))


# Every case over uds; over pipe and tcp, the first three of each server, which succeed (the
# transport changes nothing else in the program, and courier-call over pipe takes 2 s to exit
# after a failure: it waits for its server before it closes the connection).
@pytest.mark.parametrize("transport", ["pipe", "uds", "tcp"])
@pytest.mark.parametrize("server", sorted(CASES))
def test_same_as_courier_call(serve, server, transport):
    courier_call = program("courier-call")
    _, where = serve(server, transport)
    cases = CASES[server] if transport == "uds" else CASES[server][:3]
    for args in cases:
        words = args + where if where[0] == "@" else where + args  # options before the call's words
        # both at once: the run's time is the slower one's
        cpp, py = start([courier_call] + words), start([sys.executable, "-m", "courier_rpc", "call"] + words)
        cpp, py = finish(cpp), finish(py)
        assert (py[0], py[1]) == (cpp[0], cpp[1]), "courier-call %s: C++ %r, Python %r" % (args, cpp, py)
        assert bool(py[2]) == bool(cpp[2]), (args, cpp, py)  # a message on stderr exactly when it has one


def test_list_subcommand(serve):
    _, where = serve("courier-calc-server", "pipe")
    rc, out, _ = run([sys.executable, "-m", "courier_rpc", "list"] + where)
    assert rc == 0 and out.startswith("ADD_ (int32 a, int32 b) -> int32  a + b\n")


def test_unreachable(tmp_path):
    where = ["--uds", "--file", str(tmp_path / "none.sock")]
    rc, out, err = run([sys.executable, "-m", "courier_rpc", "call", "ADD_", "1", "2"] + where)
    assert rc == 3 and "cannot reach" in err and out == ""
