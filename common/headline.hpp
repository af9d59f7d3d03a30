// The headline of a lesson binary: its one-line result, which `make run` collects into the
// summary table it prints after the last lesson. A binary adds parts where it measures them and
// prints the line last, as "Headline: part; part".
#pragma once

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace course {

inline std::string& headline_parts() {
  static std::string parts;
  return parts;
}

// Adds one printf-formatted part to the headline, however long (nothing is truncated).
// Throws std::invalid_argument if `format` is malformed (vsnprintf fails).
inline void add_headline(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n < 0) {
    va_end(again);
    throw std::invalid_argument(std::string("add_headline: bad format \"") + format + "\"");
  }
  std::string part(static_cast<std::size_t>(n) + 1, '\0');
  std::vsnprintf(part.data(), part.size(), format, again);
  va_end(again);
  part.resize(static_cast<std::size_t>(n));
  std::string& parts = headline_parts();
  if (!parts.empty()) parts += "; ";
  parts += part;
}

// Prints "Headline: ..." on stdout (nothing if no part was added).
inline void print_headline() {
  if (!headline_parts().empty()) std::printf("Headline: %s\n", headline_parts().c_str());
}

}  // namespace course
