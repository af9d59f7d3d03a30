// The frame of every lesson binary's main(): parse the command line with CLI11, check for a GPU,
// run the lesson, and turn what went wrong into a message and an exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace course {

// Whether lesson_main checks for a usable GPU between parsing and the body.
enum class DeviceCheck {
  before_body,  // course::require_device(argv[0]): with no usable GPU, its one line and exit 1
  none,         // the body checks (lesson 01: nothing may touch the driver before its step 1)
};

// main() of a lesson binary, after it has declared its options on `app`:
//
//   CLI::App app{"Lesson 05: parallel reduction, step by step to the speed of memory"};
//   app.add_option("--reps", reps, "...")->check(CLI::Range(1, 1000));
//   return course::lesson_main(app, argc, argv, [&] { return run(reps); });
//
// 1. Parses argv with `app`, which stores the values in the variables the options are bound to.
//    --help / -h: prints app's help (usage line, description, options, footer) to stdout and
//    returns 0. A usage error (an unknown option, a missing or malformed value, a value that a
//    validator such as CLI::Range rejects, a missing or extra positional) prints
//    "<program>: <CLI11's message> (try --help)" as one line to stderr and returns 2.
// 2. With DeviceCheck::before_body, no usable GPU: require_device's one line, returns 1.
// 3. Returns body()'s exit code. A std::exception escaping body (a CudaError, a bad input's
//    std::invalid_argument, ...) prints "<program>: error: <what()>" to stderr and returns 1.
// <program> is argv[0]. Nothing escapes: the function is noexcept and main can return its value.
// Exit codes: 0 success or --help, 1 failure (no GPU, an exception, a failed check), 2 usage.
int lesson_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body,
                DeviceCheck check = DeviceCheck::before_body) noexcept;

// CLI11 validators for the lessons' numeric options, e.g.
//   app.add_option("--reps", reps, "...")->check(course::integer_in(1, 1000));
// integer_in: the whole text is a base-10 integer in [lo, hi]. (CLI::Range alone calls "abc"
// "not in range", and CLI11 2.1 converts with base 0, reading "010" as octal 8; the text is
// handed on normalised, "010" -> "10".) real_in: a number in [lo, hi], not NaN.
// Their help text reads "INT in [lo, hi]" / "FLOAT in [lo, hi]".
CLI::Validator integer_in(long long lo, long long hi);
CLI::Validator real_in(double lo, double hi);

}  // namespace course
