// The main() of every test executable (Catch2 v2 or v3).
//
//   <exe> [catch2 args]                  run tests; with no GPU, tests tagged [gpu] are left out
//   <exe> --list-tests|--list-tags ...   list every test, [gpu] ones too, GPU or not (a listing
//                                        runs nothing: cmake/check_exercise.sh asks which
//                                        exercises have GPU tests this way)
//   <exe> --require-gpu [catch2 args]    exit 77 (ctest's SKIP_RETURN_CODE) when no usable GPU
//   <exe> --require-gpus N [catch2 args] exit 77 when fewer than N CUDA devices (N >= 1)
//
// Tests tagged [multigpu] need two or more devices (lesson 11, whose test file calls
// course::testing::note_multigpu_tests()): with fewer, they are left out as [gpu] tests are with
// none, and add_lesson(... MULTIGPU) runs them in a ctest of their own with --require-gpus 2, which
// ctest reports as skipped.
//   <exe> --child-probe NAME             run one CHILD_PROBE in this fresh process and exit
#if COURSE_CATCH2_MAJOR == 3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/device.hpp"
#include "common/process.hpp"
#include "common/testing.hpp"

namespace course::testing {

namespace {
std::map<std::string, ChildProbe>& registry() {
  static std::map<std::string, ChildProbe> probes;
  return probes;
}
}  // namespace

bool register_child_probe(const char* name, ChildProbe probe) {
  registry()[name] = probe;
  return true;
}

ChildProbe find_child_probe(const std::string& name) {
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

std::string ChildReport::value(const std::string& key) const {
  const auto it = values.find(key);
  if (it == values.end()) {
    throw std::out_of_range("child probe reported no '" + key + "' (exit code " +
                            std::to_string(exit_code) + "); its output:\n" + output);
  }
  return it->second;
}

ChildReport run_child_probe(const std::string& name, const std::vector<std::string>& env) {
  const ProcessResult r = run_process({self_executable(), "--child-probe", name}, env);
  ChildReport report;
  report.exit_code = r.exit_code;
  report.output = r.output;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && eq > 0 && line.find(' ') > eq) {
      report.values[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return report;
}

bool gpu_available() {
  static const bool available = check_device_available().usable;
  return available;
}

namespace {
bool& multigpu_flag() {
  static bool noted = false;  // a function-local static: safe from static initialisers
  return noted;
}
}  // namespace
bool note_multigpu_tests() {
  return multigpu_flag() = true;
}
bool has_multigpu_tests() {
  return multigpu_flag();
}

}  // namespace course::testing

namespace {
// Catch2 options that take a value (v2 and v3): the word after them is not a test spec.
bool takes_value(const std::string& opt) {
  static const char* const with_value[] = {"-o",
                                           "--out",
                                           "-r",
                                           "--reporter",
                                           "-n",
                                           "--name",
                                           "-c",
                                           "--section",
                                           "-x",
                                           "--abortx",
                                           "-w",
                                           "--warn",
                                           "-d",
                                           "--durations",
                                           "-D",
                                           "--min-duration",
                                           "-f",
                                           "--input-file",
                                           "-v",
                                           "--verbosity",
                                           "--order",
                                           "--rng-seed",
                                           "--use-colour",
                                           "--colour-mode",
                                           "--wait-for-keypress",
                                           "--benchmark-samples",
                                           "--benchmark-resamples",
                                           "--benchmark-confidence-interval",
                                           "--benchmark-warmup-time",
                                           "--shard-count",
                                           "--shard-index"};
  for (const char* o : with_value) {
    if (opt == o) return true;
  }
  return false;
}

// Every test spec gets "~<tag>" ANDed to each of its comma-separated alternatives (tag [gpu]:
// "[ex1]" -> "[ex1]~[gpu]", "name*" -> "\"name*\"~[gpu]"); with no spec at all, it is "~[gpu]".
std::vector<std::string> exclude_tagged_tests(const std::vector<char*>& args,
                                              const std::string& tag) {
  std::vector<std::string> out;
  bool any_spec = false, value_next = false;
  for (std::size_t i = 1; i < args.size(); ++i) {
    std::string a = args[i];
    const bool is_spec = !value_next && !a.empty() && a[0] != '-';
    value_next = !value_next && a[0] == '-' && a.find('=') == std::string::npos && takes_value(a);
    if (is_spec) {
      any_spec = true;
      // A name pattern must be quoted to be followed by a tag: "name*"~[gpu].
      const auto exclude = [&tag](const std::string& alt) {
        const bool quoted = !alt.empty() && (alt[0] == '[' || alt[0] == '~' || alt[0] == '"');
        return (quoted ? alt : "\"" + alt + "\"") + "~" + tag;
      };
      std::string spec;
      std::size_t start = 0;
      for (std::size_t comma; (comma = a.find(',', start)) != std::string::npos;
           start = comma + 1) {
        spec += exclude(a.substr(start, comma - start)) + ",";
      }
      a = spec + exclude(a.substr(start));
    }
    out.push_back(a);
  }
  if (!any_spec) out.push_back("~" + tag);
  return out;
}

// Whether args ask Catch2 for a listing (v2 and v3 spellings): it runs no test, so nothing needs to
// be left out, and a script can see every test, [gpu] ones included, on a machine with no GPU.
bool is_listing(const std::vector<char*>& args) {
  static const char* const listing[] = {"-l",
                                        "--list-tests",
                                        "-t",
                                        "--list-tags",
                                        "--list-test-names-only",
                                        "--list-reporters",
                                        "--list-listeners"};
  for (std::size_t i = 1; i < args.size(); ++i) {
    for (const char* o : listing) {
      if (std::strcmp(args[i], o) == 0) return true;
    }
  }
  return false;
}

// Replaces the test specs of args (after argv[0]) by those of exclude_tagged_tests.
void exclude_tagged(std::vector<char*>& args, std::vector<std::string>& storage,
                    const std::string& tag) {
  storage = exclude_tagged_tests(args, tag);
  args.resize(1);
  for (auto& a : storage) args.push_back(a.data());
}
}  // namespace

int main(int argc, char** argv) {
  // A child probe runs before anything else, so it sees a process that has made no CUDA call.
  if (argc == 3 && std::strcmp(argv[1], "--child-probe") == 0) {
    const auto probe = course::testing::find_child_probe(argv[2]);
    if (probe == nullptr) {
      std::fprintf(stderr, "no child probe named '%s'\n", argv[2]);
      return 2;
    }
    try {
      return probe();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child probe %s threw: %s\n", argv[2], e.what());
      return 3;
    }
  }

  std::vector<char*> args(argv, argv + argc);
  int required_gpus = 0;
  if (args.size() > 1 && std::strcmp(args[1], "--require-gpu") == 0) {
    required_gpus = 1;
    args.erase(args.begin() + 1);
  } else if (args.size() > 2 && std::strcmp(args[1], "--require-gpus") == 0) {
    required_gpus = std::atoi(args[2]);
    if (required_gpus < 1) {
      std::fprintf(stderr, "--require-gpus takes a count >= 1, got '%s'\n", args[2]);
      return 2;
    }
    args.erase(args.begin() + 1, args.begin() + 3);
  }
  const course::DeviceAvailability device = course::check_device_available();
  std::vector<std::string> rewritten;  // owns the rewritten test specs that args points into
  const bool listing = is_listing(args);
  if (!device.usable) {
    if (required_gpus > 0) {
      std::printf("SKIPPED: these tests need a GPU; %s\n", device.reason.c_str());
      return 77;
    }
    if (listing) {
      // Said on stderr: the listing on stdout stays Catch2's own.
      std::fprintf(stderr, "Note: %s\nListing every test, [gpu] ones too (they would not run).\n",
                   device.reason.c_str());
    } else {
      std::printf("Note: %s\nLeaving out the tests tagged [gpu].\n", device.reason.c_str());
      exclude_tagged(args, rewritten, "[gpu]");
    }
  } else if (required_gpus > device.device_count) {
    std::printf("SKIPPED: these tests need %d GPUs; cudaGetDeviceCount() found %d\n", required_gpus,
                device.device_count);
    return 77;
  } else if (device.device_count < 2 && course::testing::has_multigpu_tests() && !listing) {
    std::printf("Note: 1 CUDA device: leaving out the tests tagged [multigpu] (they need 2).\n");
    exclude_tagged(args, rewritten, "[multigpu]");
  }
  Catch::Session session;
  const int result = session.run(static_cast<int>(args.size()), args.data());
  if (listing) {
    // nothing to add after a listing
  } else if (!device.usable) {
    // Said again after Catch2's summary, which counts only what ran: "All tests passed" here
    // means the CPU tests, and the kernels (their tests are the [gpu] ones) are unchecked.
    std::printf(
        "NOT RUN: the tests tagged [gpu], which check the kernels (%s).\n"
        "The result above covers the CPU tests only; run again on a machine with a GPU.\n",
        device.reason.c_str());
  } else if (device.device_count < 2 && course::testing::has_multigpu_tests()) {
    std::printf("NOT RUN: the tests tagged [multigpu]: they need 2 CUDA devices (found 1).\n");
  }
  return result;
}
