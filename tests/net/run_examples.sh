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

for name in calc echo; do
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

# Servers stop on SIGTERM and remove their socket files.
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do timeout 10 tail --pid="$p" -f /dev/null || { echo "run_examples: a server did not stop"; exit 1; }; done
pids=()
if ls "$work"/*.sock >/dev/null 2>&1; then
  echo "run_examples: a socket file was left behind"
  exit 1
fi
echo "run_examples: all passed"
