#include "courier/net/server.hpp"

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "courier/net/signals.hpp"
#include "courier/net/transport.hpp"
#include "start_modes/runner.hpp"

namespace courier::net {

const char* to_string(start_mode mode) noexcept {
  switch (mode) {
    case start_mode::thread: return "thread";
    case start_mode::fork: return "fork";
    case start_mode::spawn: return "spawn";
    case start_mode::pool: break;
  }
  return "pool";
}

int run_server(int argc, const char* const* argv, const server_program& program, const detail::serve_callback& serve) {
  constexpr auto kind = program_kind::server;
  bool pool_mode = false, thread_mode = false, fork_mode = false, spawn_mode = false;
  detail::kept_runners kept{program.kept_threads, program.kept_processes};
  std::size_t workers = 0;
  const auto add_workers = [&](CLI::App& app) {
    return app
        .add_option("--workers", workers,
                    "Worker threads of the pool that serves the sessions (1 to 64; default one per CPU). Fewer "
                    "than the CPUs leave them to other programs on the machine, its clients among them" +
                        std::string(program.offers_start_modes ? "; implies --pool" : ""))
        ->check(CLI::Range(std::size_t{1}, std::size_t{64}))
        ->type_name("N");
  };
  extra_options extra = [&, own = program.extra](CLI::App& app) {
    add_workers(app);
    if (own) own(app);
  };
  if (program.offers_start_modes) {
    extra = [&, own = program.extra](CLI::App& app) {
      const auto unless_supported = [&](start_mode m) {
        return program.supported_modes.contains(m) ? std::string() : std::string(" (not supported by this program)");
      };
      auto* pool = app.add_flag("--pool", pool_mode,
                                "Sessions on the shared workers of this process, sharing all it holds (the default on "
                                "uds and tcp; over pipe, without it, the one session runs on the main thread)" +
                                    unless_supported(start_mode::pool));
      auto* thread = app.add_flag("--thread", thread_mode,
                                  "A thread per session with a system of its own, for handlers that block; sessions "
                                  "share only what the process holds outside the systems (uds and tcp)" +
                                      unless_supported(start_mode::thread));
      auto* forked = app.add_flag(
          "--fork", fork_mode,
          "A process per session, forked; sessions share nothing (uds and tcp)" + unless_supported(start_mode::fork));
      auto* spawned = app.add_flag("--spawn", spawn_mode,
                                   "A process per session, this program started again; sessions share nothing (uds "
                                   "and tcp)" +
                                       unless_supported(start_mode::spawn));
      const std::vector<CLI::Option*> modes{pool, thread, forked, spawned};
      for (auto* a : modes)
        for (auto* b : modes)
          if (a != b) a->excludes(b);
      add_workers(app)->excludes(thread)->excludes(forked)->excludes(spawned);
      app.add_option("--kept-threads", kept.threads,
                     "--thread: threads whose session ended that wait for the next (0: each ends with its session)")
          ->needs(thread)
          ->default_val(program.kept_threads);
      app.add_option("--kept-processes", kept.processes,
                     "--fork: processes whose session ended that wait for the next (0: each ends with its session)")
          ->needs(forked)
          ->default_val(program.kept_processes);
      if (own) own(app);
    };
  }
  // With no arguments every option keeps its default: no parser for them (parse_options).
  auto opts = parse_options(argc, argv, program.name, argc > 1 || program.extra ? extra : extra_options{}, kind);
  if (!opts) {
    std::fprintf(stderr, "%s", options_error(program.name, opts.err()).c_str());
    return 2;
  }
  if (opts->help) {
    std::printf("%s", options_help(program.name, extra, kind).c_str());
    return 0;
  }
  if (workers != 0) pool_mode = true;
  start_mode mode = thread_mode  ? start_mode::thread
                    : fork_mode  ? start_mode::fork
                    : spawn_mode ? start_mode::spawn
                                 : start_mode::pool;
  if (!program.supported_modes.contains(mode)) {
    std::string supported;
    for (const start_mode m : {start_mode::pool, start_mode::thread, start_mode::fork, start_mode::spawn})
      if (program.supported_modes.contains(m))
        supported += std::string(supported.empty() ? "" : ", ") + "--" + to_string(m);
    std::fprintf(stderr,
                 "%s: --%s is not supported (this program runs with %s): each session would get a %s of its own, "
                 "and this program's sessions share what its serve callback makes\n",
                 program.name.c_str(), to_string(mode), supported.c_str(),
                 mode == start_mode::thread ? "system" : "process");
    return 2;
  }
  server_signals signals;  // before any thread starts: they inherit the blocked mask
  // A process per session serves its one connection on stdin, as a pipe server does.
  endpoint where = opts->where;
  bool session_process = false;
  detail::process_session session;  // a spawned session's number and accept time
  if (const char* number = std::getenv(detail::session_on_stdin); number != nullptr) {
    session.session.number = std::strtoull(number, nullptr, 10);
    if (const char* at = std::getenv(detail::session_accepted_at); at != nullptr)
      session.session.accepted = detail::steady::time_point(std::chrono::nanoseconds(std::strtoll(at, nullptr, 10)));
    ::unsetenv(detail::session_on_stdin);
    ::unsetenv(detail::session_accepted_at);
    session_process = true;
  } else if (program.offers_start_modes && where.kind == transport_kind::pipe && !pool_mode) {
    // Over pipe the client starts a process per connection: its one session is served as a
    // spawned session's is, on this thread with no workers to start (and join), unless --pool
    // asks for them. The serve callback is told so.
    session_process = true;
    mode = start_mode::spawn;
  } else if (mode != start_mode::pool && where.kind != transport_kind::pipe) {
    // A forked session writes through the acceptor's log, and never comes back here.
    return detail::accept_sessions(argc, argv, program, *opts, mode, kept, serve, log_for(*opts, program.name));
  }
  if (session_process) return detail::serve_session_process(program, *opts, serve, nullptr, mode, session);
  const bool quiet = opts->silent || where.kind == transport_kind::pipe;

  courier::config pool_config;
  pool_config.workers = workers;  // 0: one per CPU
  courier::system sys(pool_config);
  node net(sys);
  connection_config base = program.base;
  if (base.name == connection_config{}.name) base.name = program.name;
  const connection_config cfg = config_from(*opts, base);
  server_setup context{sys, net, *opts, where, cfg, mode};
  auto served = serve(context);
  if (!served) {
    std::fprintf(stderr, "%s: %s\n", program.name.c_str(), served.err().describe().c_str());
    return 1;
  }
  if (!quiet) std::fprintf(stderr, "%s: serving on %s\n", program.name.c_str(), served->where.c_str());
  signals.wait(net, where);
  net.stop(program.grace);
  return 0;
}

}  // namespace courier::net
