#pragma once
/// @file
/// What configures a connection and what it counts: connection_config (limits, time-outs,
/// buffers, back-pressure marks) and connection_stats.
///
/// Thread-safety: value types.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "courier/net/log.hpp"
#include "courier/wire/format.hpp"

namespace courier::net {

/// What a connection may use and how far it lets the other side run ahead.
struct connection_config {
  /// Our name in the handshake (for the peer's logs).
  std::string name = "courier";
  /// Frame size, item count and depth we accept (announced in the handshake).
  wire::limits limits{};
  /// The size of a receive block (a frame larger than this gets a block of its own size), and
  /// the most a turn reads before it lets other actors run.
  std::size_t read_chunk = 64 * 1024;
  std::size_t read_budget = 256 * 1024;
  /// Receive blocks of read_chunk bytes a connection may hold while messages still view them
  /// (string_ref fields handed to actors): beyond it the connection stops reading until one is
  /// free, so handlers that keep views bound its memory (read_chunk * max_read_blocks).
  std::size_t max_read_blocks = 64;
  /// Server: stop reading the socket while this many calls (and one-way sends, counted in
  /// batches) wait for the served actor, so TCP flow control reaches the client. Client: the most
  /// calls in flight; a request beyond it fails at once with errc::mailbox_full.
  std::size_t max_in_flight = 4096;
  /// The most child contexts the peer may have open on this connection at once (announced in the
  /// handshake; docs/protocol.md section 6). Served only where a service table makes children
  /// (service_table::children); 0: the peer opens none (its context_open gets 274).
  std::uint32_t max_child_contexts = 0;
  /// Client: while more than this many bytes wait for the socket (the peer reads too slowly), the
  /// connection's mailbox refuses new sends and requests at the call, as a full bounded mailbox
  /// does: `send` returns false (a dead letter with reason mailbox_full), `try_send` returns
  /// send_result::full, a request fails at once with errc::mailbox_full. It takes them again once
  /// a write brings the bytes waiting down to half this mark. What it accepted before goes on the
  /// wire. Server: stop reading while this many bytes of replies wait for the socket.
  std::size_t outbound_high_water = 8 * 1024 * 1024;
  /// Client: bounds the connection actor's mailbox. A sender faster than the connection is then
  /// refused at the call as above, and the client holds at most this many messages plus
  /// outbound_high_water bytes (plus one turn's messages, the connection's own overshoot: what the
  /// mailbox accepted before the mark was passed is still written). 16,384: more than a hundred
  /// turns (config::throughput) of slack, so a sender the connection keeps up with is never
  /// refused, and for messages up to 512 bytes what it may hold is at most the mark again (8 MiB).
  /// 0: unbounded, which cannot refuse at the call: a one-way send taken from the mailbox above
  /// the mark is then dropped (a dead letter, counted in client_connection::refused_sends) and a
  /// request fails with errc::mailbox_full.
  std::size_t mailbox_capacity = 16 * 1024;
  /// A peer that has not completed the handshake by then is disconnected.
  std::chrono::milliseconds handshake_timeout{10'000};
  /// Server: when the connection was accepted, where that was before the connection starts (a
  /// session server's acceptor hands it to a thread or a process): the handshake time-out counts
  /// from then. Default: from the connection's start.
  std::chrono::steady_clock::time_point accepted_at{};
  /// Client: whether connect() and adopt(), called from a plain thread of a threaded system, wait
  /// for the handshake (so a refused or mismatched server is their error). false: they return
  /// the ref at once, and the first call fails with the handshake's error if it fails; calls made
  /// meanwhile are sent once it is accepted.
  bool wait_for_handshake = true;
  /// Client: how long connect() may take to reach the server (the handshake then has its own time).
  std::chrono::milliseconds connect_timeout{10'000};
  /// SO_SNDBUF and SO_RCVBUF of the connection's socket, in bytes (0: the kernel's defaults).
  std::size_t socket_buffer_size = 0;
  /// Server (serve()): connections served at once on this endpoint; one more gets ERROR 260
  /// ("too many connections") as its first frame and is closed. 0: no limit.
  std::size_t max_connections = 0;
  /// Server (serve()): receive memory in bytes that all connections of this endpoint together may
  /// hold for frames still arriving, beyond the one block of read_chunk bytes each connection holds
  /// while it lives (an idle connection takes none of it). A frame's block grows with the bytes
  /// received, never ahead of them, and counts at its size; a connection whose frame would pass the
  /// budget is ended with a fatal ERROR 260 that says so. A session server (server.hpp) keeps one
  /// budget per process. 0: no limit.
  std::size_t max_receive_memory = 0;
  /// Server: a connection (a session) whose peer made no call or send for this long is closed in
  /// order, and its session told so. Keepalive pings do not count. 0: never.
  std::chrono::milliseconds idle_timeout{0};
  /// Where the connection's diagnostics go (log.hpp): opened, ended and why, refusals, protocol
  /// errors, with the peer's address. Null: nowhere. config_from() sets the tools' (spdlog).
  std::shared_ptr<const log_hook> log;
  /// Keepalive: a ping after this much silence; the peer is dead after `dead_after_intervals`
  /// intervals without a byte (docs/protocol.md). 0 turns keepalive off.
  std::chrono::milliseconds ping_interval{10'000};
  std::uint32_t dead_after_intervals = 3;
  /// After our close, the peer's close must come within this time.
  std::chrono::milliseconds close_timeout{10'000};
};

/// What a connection counts that its user may want to know: node::counters(ref) reads them, from
/// any thread, while the connection is alive.
struct connection_counters {
  /// One-way sends the connection accepted into its mailbox but did not put on the wire because it
  /// was closing or lost (or, with an unbounded mailbox only, because its outbound buffer was above
  /// outbound_high_water: a bounded mailbox refuses those at the call instead). A send has no
  /// reply to fail: each is also reported to the system's dead-letter hook (reason stopped, or
  /// mailbox_full), as a local refusal is.
  std::uint64_t refused_sends = 0;
  /// One-way sends that could not be encoded within the limits the peer announced (a string past
  /// its frame size); each is also a dead letter with reason invalid_argument (a request fails with
  /// errc::invalid_argument instead).
  std::uint64_t encode_failures = 0;
  /// The most bytes that waited for the socket at the end of a turn: with a bounded mailbox, at
  /// most outbound_high_water plus what the mailbox accepted before it refused (mailbox_capacity
  /// messages) and one turn's messages.
  std::size_t outbound_peak = 0;
};

/// Counters a connection keeps (read by its actor; tests and the benchmark print them).
struct connection_stats {
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  std::uint64_t reads = 0;
  std::uint64_t writes = 0;
  std::uint64_t dropped_replies = 0;  // replies (or errors) for no call waiting: late or unknown
  std::uint64_t refused_sends = 0;    // one-way sends accepted and then refused: closing or lost (or above the
                                      // outbound mark with an unbounded mailbox); each also a dead letter
  std::uint64_t bytes_moved = 0;      // bytes of partial frames moved to another block or its front
  std::uint64_t read_blocks = 0;      // receive blocks allocated (steady state: no growth)
  std::uint64_t read_stalls = 0;      // reads put off because every block was still in use
};

}  // namespace courier::net
