// The machine line every benchmark and courier-perf prints beside its figures ("CPU | cores |
// kernel"): figures are compared only between runs on the same machine. The benchmarks in bench/
// include it from here.
#pragma once

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace courier::perf {

/// One-line description of the machine, e.g.
/// "Intel(R) Xeon(R) CPU @ 2.20GHz | 2 cores | Linux 6.1.0-18-amd64 x86_64".
inline std::string machine_description() {
  std::string cpu = "unknown CPU";
  {
    std::ifstream in{"/proc/cpuinfo"};
    std::string line;
    while (std::getline(in, line)) {
      // x86: "model name"; some ARM kernels: "Processor" / "Hardware".
      if (line.rfind("model name", 0) == 0 || line.rfind("Processor", 0) == 0 || line.rfind("Hardware", 0) == 0) {
        auto colon = line.find(':');
        if (colon != std::string::npos) {
          auto first = line.find_first_not_of(" \t", colon + 1);
          if (first != std::string::npos) {
            cpu = line.substr(first);
            break;
          }
        }
      }
    }
  }
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 0) cores = static_cast<long>(std::thread::hardware_concurrency());
  std::string kernel = "unknown kernel";
  struct utsname u;
  if (::uname(&u) == 0) kernel = std::string{u.sysname} + " " + u.release + " " + u.machine;
  return cpu + " | " + std::to_string(cores) + " cores | " + kernel;
}

}  // namespace courier::perf
