#!/usr/bin/env bash
# courier-call end to end: --list, calls with arguments converted by the reflected signature, JSON,
# one-way sends, errors and their exit codes, against the calc and echo servers over pipe, uds and tcp.
#   courier_call_test.sh <courier-call> <directory of the example programs>
set -euo pipefail
call=$1
bin=$2
work=$(mktemp -d /tmp/courier-call-test.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
failures=0

# expect <exit status> <expected stdout, exactly> <args...>
expect() {
  local want_status=$1 want_out=$2
  shift 2
  local out status=0
  out=$(timeout 30 "$call" "$@" 2>"$work/stderr") || status=$?
  if [[ $status != "$want_status" || $out != "$want_out" ]]; then
    echo "FAIL courier-call $*: exit $status (want $want_status), stdout:" >&2
    printf '%s\n' "$out" >&2
    echo "want:" >&2
    printf '%s\n' "$want_out" >&2
    echo "stderr:" >&2
    cat "$work/stderr" >&2
    failures=$((failures + 1))
  else
    echo "ok   courier-call $*"
  fi
}

# expect_error <exit status> <text the stderr must contain> <args...>
expect_error() {
  local want_status=$1 want_text=$2
  shift 2
  local status=0
  timeout 30 "$call" "$@" >/dev/null 2>"$work/stderr" || status=$?
  if [[ $status != "$want_status" ]] || ! grep -qF -- "$want_text" "$work/stderr"; then
    echo "FAIL courier-call $*: exit $status (want $want_status), stderr:" >&2
    cat "$work/stderr" >&2
    echo "(wanted it to contain: $want_text)" >&2
    failures=$((failures + 1))
  else
    echo "ok   courier-call $* -> $want_status"
  fi
}

start_server() {  # name, program, args...
  local name=$1 program=$2
  shift 2
  "$bin/courier-$program-server" "$@" >/dev/null 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 100); do
    if grep -qs "serving on" "$work/$name.err"; then return 0; fi
    sleep 0.05
  done
  echo "courier_call_test: $name server did not start:" >&2
  cat "$work/$name.err" >&2
  return 1
}

start_server calc-uds calc --uds --file "$work/calc.sock"
start_server calc-tcp calc --tcp --port 0
tcp_port=$(sed -n 's/.*serving on tcp [^:]*:\([0-9]*\).*/\1/p' "$work/calc-tcp.err" | head -1)
start_server echo-uds echo --uds --file "$work/echo.sock"

calc_list='ADD_ (int32 a, int32 b) -> int32  a + b
DIV_ (int32 a, int32 b) -> int32  a / b; b == 0 is an ERROR (invalid_argument)
SLOW (int32 delay_ms, int32 value) -> int32  replies value after delay_ms
SQR_ (int32 x) -> int32  x * x, answered by another actor
NOTE (string text) -> ()  one-way: the server counts notes
NSEE () -> int32  how many notes arrived so far'

for where in "pipe" "uds" "tcp"; do
  case $where in
    pipe) pre=(); post=(@ "$bin/courier-calc-server") ;;
    uds) pre=(--uds --file "$work/calc.sock"); post=() ;;
    tcp) pre=(--tcp --port "$tcp_port"); post=() ;;
  esac
  echo "== calc over $where"
  expect 0 "$calc_list" "${pre[@]}" --list "${post[@]}"
  expect 0 "$calc_list" "${pre[@]}" '$SVC' "${post[@]}"  # reflection is a service of every server
  expect 0 "5" "${pre[@]}" --keepalive 500 ADD_ 2 3 "${post[@]}"  # an option's value is not the token
  expect 0 "5" "${pre[@]}" ADD_ 2 3 "${post[@]}"
  expect 0 "-7" "${pre[@]}" ADD_ -10 3 "${post[@]}"
  expect 0 '{"result":[49],"token":"SQR_"}' "${pre[@]}" --json SQR_ 7 "${post[@]}"
  expect_error 1 "DIV_ answered ERROR 270" "${pre[@]}" DIV_ 1 0 "${post[@]}"
  expect 1 '{"error":{"code":270,"name":"invalid argument","text":"divide by zero"}}' "${pre[@]}" --json DIV_ 1 0 "${post[@]}"
  expect_error 2 "'x' is not of type int32" "${pre[@]}" ADD_ 2 x "${post[@]}"
  expect_error 2 "ADD_ takes 2 argument(s), (int32 a, int32 b); 1 given" "${pre[@]}" ADD_ 2 "${post[@]}"
  expect_error 2 "the server has no service XXXX" "${pre[@]}" XXXX 1 "${post[@]}"
  expect_error 5 "no answer within 300 ms" "${pre[@]}" --timeout 0.3 SLOW 3000 1 "${post[@]}"
done

echo "== a call refused after the connection opened leaves a pipe server to end by itself (not killed)"
# The server runs under a shell that records how it ended: a server still running when
# courier-call reaps it is killed with the shell, and nothing is recorded.
rm -f "$work/pipe-server-ended"
expect_error 2 "'x' is not of type int32" ADD_ 2 x @ sh -c '"$0"; echo "$?" >"$1"' "$bin/courier-calc-server" "$work/pipe-server-ended"
[ -s "$work/pipe-server-ended" ] || { echo "FAIL: the pipe server did not end on its own after a refused call"; failures=$((failures + 1)); }

echo "== option errors: the unknown option named first, one line and a pointer to --help"
expect_error 2 "unknown option or argument: --udss" --udss --file "$work/calc.sock" --list
for program in "$call" "$bin/courier-calc-server"; do
  [ "$("$program" --bogus 2>&1 | wc -l)" -eq 2 ] || { echo "FAIL: $program printed more than two lines for an option error"; exit 1; }
done

echo "== one-way sends reach the server (uds): NSEE counts them"
before=$("$call" --uds --file "$work/calc.sock" NSEE)
expect 0 "" --uds --file "$work/calc.sock" --send NOTE one
expect 0 "" --uds --file "$work/calc.sock" --send NOTE two
expect 0 "$((before + 2))" --uds --file "$work/calc.sock" NSEE

echo "== echo: every item type, converted by the signature"
expect 0 "true
-5
300
70000
-9
255
65535
4000000000
18446744073709551615
1.5
-2.25
héllo
0a0b
[1, 2, 3]
[1.5, 2.0]
[[0.0, 0.0], [1.0, 1.5]]" --uds --file "$work/echo.sock" ECHO true -5 300 70000 -9 255 65535 4000000000 18446744073709551615 1.5 -2.25 héllo 0a0b '[1,2,3]' '[1.5,2]' '[[0,0],[1,1.5]]'
expect 0 '{"result":[false,0,0,0,0,0,0,0,0,0.0,0.0,"","",[],[0.0,0.0],[]],"token":"ECHO"}' --json --uds --file "$work/echo.sock" ECHO false 0 0 0 0 0 0 0 0 0 0 "" "" '[]' '[0,0]' '[]'
expect_error 2 "'300' is not of type int8" --uds --file "$work/echo.sock" ECHO true 300 0 0 0 0 0 0 0 0 0 x "" '[]' '[0,0]' '[]'
expect_error 2 "is not of type record(float64 x, float64 y) (1 fields, not 2)" --uds --file "$work/echo.sock" ECHO true 0 0 0 0 0 0 0 0 0 0 x "" '[]' '[0]' '[]'
expect_error 2 "(hex digits, two per byte)" --uds --file "$work/echo.sock" ECHO true 0 0 0 0 0 0 0 0 0 0 x 0g '[]' '[0,0]' '[]'

echo "== the libmsgque-style server: dynamic services, over pipe and uds"
services_list='HELO (string name) -> string  says hello
ELST (?) -> ?  echoes its items back, whatever they are
BACK () -> string  calls the client'"'"'s NAME service back and greets it by that name
SUM_ (list of int64 values) -> int64  adds them up
MUL_ (int64 a, int64 b) -> int64  multiplies; an overflow is an ERROR
HOWM () -> int64  how many hellos were said'
expect 0 "$services_list" --list @ "$bin/courier-services-server"
expect 0 "hello, world" HELO world @ "$bin/courier-services-server"
expect 0 "1
two
[3.5, true]" ELST i32:1 str:two 'list:[f64:3.5,bool:true]' @ "$bin/courier-services-server"
expect 0 '{"result":[7,"00ff"],"token":"ELST"}' --json ELST u64:7 bin:00ff @ "$bin/courier-services-server"
expect 0 "6" SUM_ '[1,2,3]' @ "$bin/courier-services-server"
expect 0 "42" MUL_ 6 7 @ "$bin/courier-services-server"
expect_error 1 "MUL_: the product overflows int64" MUL_ 4611686018427387904 2 @ "$bin/courier-services-server"
# BACK calls its client back; courier-call serves nothing, so the server's call fails, and so BACK.
expect_error 1 "courier-call serves nothing" BACK @ "$bin/courier-services-server"
expect_error 2 "'x' is not of type int64" SUM_ '[1,x]' @ "$bin/courier-services-server"
expect 0 "CNT_ () -> int64  counts its calls, in this child context only
NAME () -> string  this child context's name" --context mine --list @ "$bin/courier-services-server"
expect 0 "1" --context mine CNT_ @ "$bin/courier-services-server"
expect 0 "mine" --context mine NAME @ "$bin/courier-services-server"
expect_error 4 "--context x: the server accepts no child contexts" --context x ADD_ 1 2 @ "$bin/courier-calc-server"
start_server services-uds services --uds --file "$work/services.sock"
start_server services-tcp services --tcp --port 0
services_port=$(sed -n 's/.*serving on tcp [^:]*:\([0-9]*\).*/\1/p' "$work/services-tcp.err" | head -1)
expect 0 "theirs" --uds --file "$work/services.sock" --context theirs NAME
expect 0 "1" --tcp --port "$services_port" --context again CNT_
expect 0 "hello, a" --uds --file "$work/services.sock" HELO a
expect 0 "hello, b" --uds --file "$work/services.sock" HELO b
expect 0 "2" --uds --file "$work/services.sock" HOWM

echo "== servers that misbehave (tests/net/fake_call_server.py, over pipe)"
fake="$(dirname "$0")/fake_call_server.py"
if command -v python3 >/dev/null; then
expect_error 6 "the reply does not match ADD_'s result int32: a string where a int32 belongs" ADD_ 2 3 @ python3 "$fake" mismatch
expect 0 "7
x
[1, y]" ANY_ i32:7 str:x 'list:[u8:1,str:y]' @ python3 "$fake" noreflect
expect_error 2 "'7' has no type prefix (the service declares no signature)" ANY_ 7 @ python3 "$fake" noreflect
expect_error 2 "unknown type prefix 'int'" ANY_ int:7 @ python3 "$fake" noreflect
expect_error 1 "the server does not describe its services: no service \$SVC" --list @ python3 "$fake" noreflect
else
  echo "skipped: no python3 for the fake servers"
fi

echo "== connection failures have their own exit codes"
expect_error 3 "cannot reach uds $work/nobody.sock" --uds --file "$work/nobody.sock" ADD_ 1 2
expect_error 4 "reflected" ADD_ 1 2 @ /bin/cat
# A server that exits at once: its exit status, whether the end showed on a read or on a write.
for _ in 1 2 3 4 5; do expect_error 4 "server process exited with status 1" ADD_ 1 2 @ /bin/false; done
expect_error 2 "name a service (TOKEN ARG...) or ask for --list" --uds --file "$work/calc.sock"
expect_error 2 "--list takes no TOKEN" --uds --file "$work/calc.sock" --list ADD_

if [[ $failures != 0 ]]; then
  echo "courier_call_test: $failures failure(s)" >&2
  exit 1
fi
echo "courier_call_test: all passed"
