#!/usr/bin/env bash
# The examples across real processes: the calc and echo clients against their servers over pipe
# (the client starts the server), uds and tcp, with the same client code; only the options change.
#   run_examples.sh <directory of the example programs>
set -euo pipefail
bin=$1
work=$(mktemp -d /tmp/courier-examples.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts a server in the background and waits for its "serving on ..." line (in $work/<name>.err).
start_server() {  # name (the log is $work/<name>.err), program, args...
  local name=$1 program=$2
  shift 2
  "$bin/courier-$program-server" "$@" >/dev/null 2>"$work/$name.err" &
  pids+=($!)
  for _ in $(seq 1 100); do
    if grep -qs "serving on" "$work/$name.err"; then
      return 0
    fi
    sleep 0.05
  done
  echo "run_examples: $name server did not start:" >&2
  cat "$work/$name.err" >&2
  return 1
}

for name in calc echo services; do
  echo "== $name over pipe"
  timeout 60 "$bin/courier-$name-client" --timeout 10 @ "$bin/courier-$name-server"

  echo "== $name over uds"
  start_server "$name-uds" "$name" --uds --file "$work/$name.sock"
  timeout 60 "$bin/courier-$name-client" --uds --file "$work/$name.sock" --timeout 10

  echo "== $name over tcp"
  start_server "$name-tcp" "$name" --tcp --host 127.0.0.1 --port 0
  line=$(grep "serving on" "$work/$name-tcp.err")
  port=${line##*:}
  timeout 60 "$bin/courier-$name-client" --tcp --host 127.0.0.1 --port "$port" --timeout 10
done

# Options change what they say. --debug 1: the server logs each connection's start and end.
echo "== options: --debug, --timeout"
start_server debug calc --uds --file "$work/debug.sock" --debug 1
timeout 60 "$bin/courier-calc-client" --uds --file "$work/debug.sock" --timeout 10 >/dev/null
for _ in $(seq 1 100); do grep -qs "ended" "$work/debug.err" && break; sleep 0.05; done
grep -q "info: server connection with uds pid .* ('calc-client') open" "$work/debug.err" || { echo "run_examples: --debug 1 logged no open"; cat "$work/debug.err"; exit 1; }
grep -q "info: server connection with .* ended: " "$work/debug.err" || { echo "run_examples: --debug 1 logged no end"; cat "$work/debug.err"; exit 1; }
# --timeout 0.5 on a server: a client that connects and never speaks is dropped after 0.5 s.
start_server quick calc --tcp --host 127.0.0.1 --port 0 --timeout 0.5
line=$(grep "serving on" "$work/quick.err")
port=${line##*:}
started=$(date +%s%N)
exec 3<>"/dev/tcp/127.0.0.1/$port"
timeout 5 cat <&3 >/dev/null || true
exec 3<&-
elapsed_ms=$(( ($(date +%s%N) - started) / 1000000 ))
if [ "$elapsed_ms" -ge 3000 ]; then
  echo "run_examples: a server with --timeout 0.5 held a silent client for $elapsed_ms ms"
  exit 1
fi
# --timeout 1 on a client: a server that never answers the handshake fails it within about 1 s.
start_server silent calc --uds --file "$work/silent.sock"
kill -STOP "${pids[-1]}"
started=$(date +%s%N)
if timeout 10 "$bin/courier-calc-client" --uds --file "$work/silent.sock" --timeout 1 >/dev/null 2>"$work/client.err"; then
  echo "run_examples: a client reached a stopped server"; exit 1
fi
elapsed_ms=$(( ($(date +%s%N) - started) / 1000000 ))
kill -CONT "${pids[-1]}"
grep -q "no handshake" "$work/client.err" || { echo "run_examples: the client did not say it timed out:"; cat "$work/client.err"; exit 1; }
if [ "$elapsed_ms" -ge 4000 ]; then
  echo "run_examples: a client with --timeout 1 waited $elapsed_ms ms for a handshake"
  exit 1
fi

# A server whose stderr is a pipe nobody reads still serves (SIGPIPE is ignored: it died at its
# "serving on" line).
# (perl makes the pipe and closes its read end before the server starts: no race with the line.)
perl -e 'pipe(my $r, my $w) or die; close $r; open(STDERR, ">&", $w) or die; exec @ARGV or die' \
  "$bin/courier-calc-server" --uds --file "$work/nostderr.sock" >/dev/null &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$work/nostderr.sock" ] && break; sleep 0.05; done
sleep 0.2
timeout 60 "$bin/courier-calc-client" --uds --file "$work/nostderr.sock" --timeout 10 >/dev/null ||
  { echo "run_examples: a server with a closed stderr stopped serving"; exit 1; }

# Servers stop on SIGTERM and remove their socket files.
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do timeout 10 tail --pid="$p" -f /dev/null || { echo "run_examples: a server did not stop"; exit 1; }; done
pids=()
if ls "$work"/*.sock >/dev/null 2>&1; then
  echo "run_examples: a socket file was left behind"
  exit 1
fi
echo "run_examples: all passed"
