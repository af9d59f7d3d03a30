#include "common/lesson_main.hpp"

#include <cstdio>
#include <exception>

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

}  // namespace course
