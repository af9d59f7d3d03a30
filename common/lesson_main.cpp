#include "common/lesson_main.hpp"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>

#include "common/device.hpp"

namespace course {

int lesson_main(CLI::App& app, int argc, char** argv, const std::function<int()>& body,
                DeviceCheck check) noexcept {
  const char* program = argc > 0 ? argv[0] : "lesson";
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      // --help arrives as an exception too (CLI::CallForHelp), with exit code 0: CLI11 prints it.
      if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
      // One exit code for every usage error, not CLI11's own per kind (106 for a bad value, ...).
      std::fprintf(stderr, "%s: %s (try --help)\n", program, e.what());
      return 2;
    }
    if (check == DeviceCheck::before_body && !require_device(program)) return 1;
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: error: an exception that is not a std::exception\n", program);
  }
  return 1;
}

CLI::Validator integer_in(long long lo, long long hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
          return "expected an integer in " + range + ", got '" + text + "'";
        }
        text = std::to_string(v);
        return std::string();
      },
      "INT in " + range);
}

CLI::Validator real_in(double lo, double hi) {
  std::ostringstream range;
  range << "[" << lo << ", " << hi << "]";
  return CLI::Validator(
      [lo, hi, r = range.str()](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        // !(lo <= v && v <= hi) is also true for NaN, which every comparison calls false.
        if (text.empty() || *end != '\0' || !(lo <= v && v <= hi)) {
          return "expected a number in " + r + ", got '" + text + "'";
        }
        return std::string();
      },
      "FLOAT in " + range.str());
}

}  // namespace course
