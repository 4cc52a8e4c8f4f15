#!/usr/bin/env bash
# The chat example across processes, over uds and tcp: three clients and a deliberately slow one
# in one room. Each fast client hears every line of the other two, in each sender's order, before
# the slow one has read its share (it holds up no one); the slow one still gets every line; a
# client that dies is announced to the room; SIGTERM stops the server cleanly (exit 0, socket file
# gone).
#   run_chat.sh <directory of the example programs>
set -euo pipefail
bin=$1
work=$(mktemp -d /tmp/courier-chat.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "run_chat: $*" >&2
  for f in "$work"/*.out "$work"/*.err; do [ -f "$f" ] && { echo "-- $f" >&2; tail -n 5 "$f" >&2; }; done
  exit 1
}
lines_in() { grep -c '^\[lobby\]' "$1" || true; }

echo "== the chat's sessions share its rooms: it runs with --pool, and refuses the other modes with why"
for mode in thread fork spawn; do
  status=0
  "$bin/courier-chat-server" --$mode --uds --file "$work/refused.sock" 2>"$work/refused.err" || status=$?
  [ "$status" -eq 2 ] || fail "--$mode: exit status $status, not 2"
  grep -q -- "--$mode is not supported (this program runs with --pool)" "$work/refused.err" || fail "--$mode: $(cat "$work/refused.err")"
done

lines=40  # per fast client
for transport in uds tcp; do
  echo "== chat over $transport"
  if [ "$transport" = uds ]; then
    "$bin/courier-chat-server" --uds --file "$work/chat.sock" 2>"$work/server.err" &
  else
    "$bin/courier-chat-server" --tcp --host 127.0.0.1 --port 0 2>"$work/server.err" &
  fi
  server=$!
  pids+=("$server")
  for _ in $(seq 1 100); do grep -qs "serving on" "$work/server.err" && break; sleep 0.05; done
  grep -qs "serving on" "$work/server.err" || fail "the server did not start"
  if [ "$transport" = uds ]; then
    where=(--uds --file "$work/chat.sock")
  else
    line=$(grep "serving on" "$work/server.err")
    where=(--tcp --host 127.0.0.1 --port "${line##*:}")
  fi
  client=("$bin/courier-chat-client" "${where[@]}")  # not a function: $! must be the client itself

  # The slow one takes 50 ms over each line: 3 x 40 lines take it 6 s.
  "${client[@]}" --nick slow --slow-ms 50 --expect $((2 * lines + lines)) --timeout 60 >"$work/slow.out" 2>"$work/slow.err" &
  slow=$!
  pids+=("$slow")
  fast=()
  for nick in ann bob cat; do
    "${client[@]}" --nick "$nick" --say "$lines" --members 4 --expect $((2 * lines)) --timeout 30 >"$work/$nick.out" 2>"$work/$nick.err" &
    fast+=($!)
  done
  for p in "${fast[@]}"; do wait "$p" || fail "a fast client did not hear every line"; done
  slow_so_far=$(lines_in "$work/slow.out")
  [ "$slow_so_far" -lt $((3 * lines)) ] || fail "the slow client had read all its lines before the fast ones were done"
  for nick in ann bob cat; do
    [ "$(lines_in "$work/$nick.out")" -eq $((2 * lines)) ] || fail "$nick heard $(lines_in "$work/$nick.out") lines"
    grep -q "\] $nick: " "$work/$nick.out" && fail "$nick heard its own lines"
    for other in ann bob cat; do
      [ "$other" = "$nick" ] && continue
      grep "\] $other: " "$work/$nick.out" | sed 's/.* line //' >"$work/order"
      seq 1 "$lines" | cmp -s - "$work/order" || fail "$nick heard $other's lines out of order"
    done
  done
  wait "$slow" || fail "the slow client lost lines"
  echo "   fast clients done while the slow one had read $slow_so_far of $((3 * lines)); it then got them all"

  # A client that dies is announced to those still in the room.
  "${client[@]}" --nick watcher --until "doomed left" --expect 0 --timeout 20 >"$work/watcher.out" 2>&1 &
  watcher=$!
  for _ in $(seq 1 100); do grep -qs "^joined lobby" "$work/watcher.out" && break; sleep 0.05; done
  "${client[@]}" --nick doomed --expect 1000 --timeout 30 >"$work/doomed.out" 2>&1 &
  doomed=$!
  pids+=("$doomed")
  for _ in $(seq 1 100); do grep -qs "doomed joined" "$work/watcher.out" && break; sleep 0.05; done
  kill -KILL "$doomed"
  wait "$doomed" 2>/dev/null || true
  wait "$watcher" || fail "the room was not told that doomed left"
  grep "doomed left" "$work/watcher.out"

  kill -TERM "$server"
  status=0
  wait "$server" || status=$?
  [ "$status" -eq 0 ] || fail "the server exited with $status after SIGTERM"
  [ ! -e "$work/chat.sock" ] || fail "the socket file is still there"
done
echo "run_chat: ok"
