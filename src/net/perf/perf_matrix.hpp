#pragma once
/// @file
/// courier-perf --matrix: every transport x start mode x test, each setup with the raw limits of its
/// own transport measured beside it, printed as a table in the shape of libmsgque's summary (rows:
/// transport and start mode; columns: tests), and on request as JSON (nlohmann-json) and as a chart
/// (gnuplot, behind scripts/perf_chart.gp), with libmsgque's figures from that summary beside ours.
///
/// Thread-safety: run it from main.

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "perf_load.hpp"
#include "perf_raw.hpp"

namespace courier::perf {

struct matrix_options {
  std::string self;    ///< this binary (the raw peer is started from it)
  std::string server;  ///< courier-perf-server
  std::chrono::duration<double> run_for{1.0};
  std::vector<std::string_view> tests;  ///< which of all_tests
  std::vector<start_mode> modes;        ///< the server's start modes to run on uds and tcp
  std::chrono::milliseconds timeout{10000};
  std::string json_file, chart_file, chart_script;
  /// Figures to compare with, cell by cell: a JSON file of --json's shape (an earlier run, or
  /// another framework measured on this host and written the same way).
  std::string compare_file;
  /// Also the load (--load N), after the table, with its lines in the JSON as "load".
  std::optional<load_options> load;
};

/// Runs the matrix, prints it; the exit status (1 when a setup failed, each failure named).
int run_matrix(const matrix_options& opts);

/// libmsgque's figure for a cell of its summary (C, Intel Core2 6600, 2009), as counts per second:
/// 0 where the summary has none. Its `pool` is the summary's thread row (sessions inside one process).
double libmsgque_per_second(net::transport_kind transport, start_mode mode, std::string_view test) noexcept;

}  // namespace courier::perf
