// The headline of a lesson binary: its one-line result, which `make run` collects into the
// summary table it prints after the last lesson. A binary adds parts where it measures them and
// prints the line last, as "Headline: part; part".
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>

namespace course {

inline std::string& headline_parts() {
  static std::string parts;
  return parts;
}

// Adds one printf-formatted part to the headline.
inline void add_headline(const char* format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  std::string& parts = headline_parts();
  if (!parts.empty()) parts += "; ";
  parts += buf;
}

// Prints "Headline: ..." on stdout (nothing if no part was added).
inline void print_headline() {
  if (!headline_parts().empty()) std::printf("Headline: %s\n", headline_parts().c_str());
}

}  // namespace course
