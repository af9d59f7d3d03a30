// What every test file includes: Catch2 (v2 or v3, same macros) and the course's test helpers.
//
// Tests that need a GPU carry the tag [gpu]. The shared test main (test_main.cpp) makes ctest
// report them as skipped when there is no usable device; CPU tests always run.
#pragma once

#if COURSE_CATCH2_MAJOR == 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#else
#include <catch2/catch.hpp>
#endif

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace course::testing {

// Matches an exception message or string that contains `text` (Catch2 v2 and v3 spell it
// differently).
inline auto Contains(const std::string& text) {
#if COURSE_CATCH2_MAJOR == 3
  return Catch::Matchers::ContainsSubstring(text);
#else
  return Catch::Matchers::Contains(text);
#endif
}

// Floating-point comparison with a relative tolerance: CHECK(x == Approx(1.0).epsilon(1e-6)).
#if COURSE_CATCH2_MAJOR == 3
using Approx = Catch::Approx;
#else
using Approx = Catch::Detail::Approx;
#endif

// ---- Child probes: facts about process-global CUDA state, observed in a fresh process. ----
//
//   CHILD_PROBE(set_device_creates_context) {      // runs in the child; returns its exit code
//     CUDA_CHECK(cudaSetDevice(0));
//     course::testing::report("active", primary_active(0));
//     return 0;
//   }
//   TEST_CASE("...", "[gpu]") {
//     auto child = course::testing::run_child_probe("set_device_creates_context");
//     REQUIRE(child.value("active") == "1");
//   }
//
// The test executable re-runs itself as `<exe> --child-probe <name>`; test_main.cpp runs the
// probe before Catch2 or anything else touches CUDA.
using ChildProbe = int (*)();
bool register_child_probe(const char* name, ChildProbe probe);
ChildProbe find_child_probe(const std::string& name);

struct ChildReport {
  int exit_code = -1;
  std::string output;                         // everything the child printed
  std::map<std::string, std::string> values;  // its "key=value" lines
  // The value reported under `key`; throws std::out_of_range with the child's output if absent.
  std::string value(const std::string& key) const;
};

// Runs probe `name` in a fresh process of this executable, with `env` ("NAME=value") added to
// the environment. Never throws for a failing child: check exit_code.
ChildReport run_child_probe(const std::string& name, const std::vector<std::string>& env = {});

// run_child_probe inside a test: fails the test (REQUIRE), showing the child's output, unless
// the child exited 0.
inline ChildReport run_child_probe_ok(const std::string& name,
                                      const std::vector<std::string>& env = {}) {
  ChildReport child = run_child_probe(name, env);
  INFO("child probe " << name << " printed:\n" << child.output);
  REQUIRE(child.exit_code == 0);
  return child;
}

// Prints "key=value" on stdout for the parent to read (bools as 1/0).
template <class T>
void report(const std::string& key, const T& value) {
  std::ostringstream line;
  line << key << '=' << value << '\n';
  std::fputs(line.str().c_str(), stdout);
  std::fflush(stdout);
}

// True when this process has a usable CUDA device (checked once).
bool gpu_available();

// A test file with [multigpu] tests says so from a static initialiser
// (`const bool noted = course::testing::note_multigpu_tests();`), so that on a one-GPU machine
// test_main reports them as not run; the binaries of other lessons stay quiet about them.
bool note_multigpu_tests();
bool has_multigpu_tests();

}  // namespace course::testing

#define COURSE_CONCAT_(a, b) a##b
#define COURSE_CONCAT(a, b) COURSE_CONCAT_(a, b)
#define CHILD_PROBE(name)                                    \
  static int name();                                         \
  static const bool COURSE_CONCAT(name, _registered) =       \
      ::course::testing::register_child_probe(#name, &name); \
  static int name()
