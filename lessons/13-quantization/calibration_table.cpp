// Lesson 13: the calibration table file (calibration_table.hpp). Host code.
#include "calibration_table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <stdexcept>

namespace lesson13 {

namespace {

constexpr const char* kMagic = "course-calibration-table 1";

bool is_token(const std::string& s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (c <= ' ' || c == 0x7F) return false;
  }
  return true;
}

bool valid_name(const std::string& s) {
  if (s.empty() || s.front() == '#' || s.front() == ' ' || s.back() == ' ') return false;
  for (unsigned char c : s) {
    if (c < ' ' || c == 0x7F) return false;
  }
  return true;
}

std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

std::string trim(const std::string& s) {
  const auto begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

// The table's lines with their numbers (1-based), comments and blank lines left out. A final
// line without '\n' still counts (a file cut mid-line is caught by its content).
struct Line {
  int number;
  std::string text;
};

std::vector<Line> content_lines(const std::string& text) {
  std::vector<Line> lines;
  std::size_t pos = 0;
  int number = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++number;
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    pos = end + 1;
    const std::string t = trim(line);
    if (t.empty() || t.front() == '#') continue;
    lines.push_back({number, line});
  }
  return lines;
}

[[noreturn]] void fail(const std::string& source, int line, const std::string& what) {
  throw std::runtime_error(source + ":" + std::to_string(line) + ": " + what);
}

// "KEY VALUE" with VALUE one token; returns VALUE.
std::string header_value(const std::string& source, const std::vector<Line>& lines,
                         std::size_t index, const std::string& key) {
  if (index >= lines.size()) {
    fail(source, lines.empty() ? 1 : lines.back().number + 1,
         "truncated: expected the header line '" + key + " ...'");
  }
  const Line& l = lines[index];
  std::istringstream in(l.text);
  std::string k, v, extra;
  in >> k >> v;
  if (k != key || v.empty() || (in >> extra)) {
    fail(source, l.number, "expected '" + key + " <value>', got '" + l.text + "'");
  }
  return v;
}

}  // namespace

const TensorScale* CalibrationTable::find(const std::string& name) const {
  for (const TensorScale& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

float CalibrationTable::scale(const std::string& name) const {
  const TensorScale* t = find(name);
  if (t == nullptr) {
    throw std::out_of_range("calibration table of " + network + ": no tensor '" + name + "'");
  }
  return t->scale;
}

std::string format_calibration_table(const CalibrationTable& table) {
  if (!is_token(table.network) || !is_token(table.calibrator)) {
    throw std::invalid_argument(
        "format_calibration_table: expected a network and a calibrator of one word each, got '" +
        table.network + "' and '" + table.calibrator + "'");
  }
  if (table.tensors.empty()) {
    throw std::invalid_argument("format_calibration_table: the table has no tensor");
  }
  std::set<std::string> seen;
  std::ostringstream out;
  out << kMagic << "\nnetwork " << table.network << "\ncalibrator " << table.calibrator
      << "\ntensors " << table.tensors.size()
      << "\n# scale = amax / 127: float32 bits in hex, then the same value in decimal\n";
  for (const TensorScale& t : table.tensors) {
    if (!valid_name(t.name)) {
      throw std::invalid_argument("format_calibration_table: tensor name '" + t.name +
                                  "' cannot be written (empty, starting with '#', with "
                                  "surrounding spaces or a control character)");
    }
    if (!seen.insert(t.name).second) {
      throw std::invalid_argument("format_calibration_table: tensor '" + t.name + "' twice");
    }
    if (!std::isnormal(t.scale) || t.scale < 0) {
      throw std::invalid_argument("format_calibration_table: tensor '" + t.name +
                                  "' has the scale " + std::to_string(t.scale) +
                                  ", expected a positive normal float");
    }
    char line[64];
    std::snprintf(line, sizeof line, ": %08x %.9g\n", static_cast<unsigned>(float_bits(t.scale)),
                  static_cast<double>(t.scale));
    out << t.name << line;
  }
  out << "end\n";
  return out.str();
}

CalibrationTable parse_calibration_table(const std::string& text, const std::string& source) {
  const std::vector<Line> lines = content_lines(text);
  if (!text.empty() && text.back() != '\n') {
    // Every line the writer emits ends in '\n': a file that does not was cut mid-line.
    fail(source, static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1,
         "truncated: the file ends in the middle of a line");
  }
  if (lines.empty() || trim(lines[0].text) != kMagic) {
    fail(source, lines.empty() ? 1 : lines[0].number,
         std::string("not a calibration table of this format: expected the first line '") + kMagic +
             "', got '" + (lines.empty() ? std::string() : lines[0].text) + "'");
  }
  CalibrationTable table;
  table.network = header_value(source, lines, 1, "network");
  table.calibrator = header_value(source, lines, 2, "calibrator");
  const std::string count_text = header_value(source, lines, 3, "tensors");
  char* end = nullptr;
  const unsigned long long count = std::strtoull(count_text.c_str(), &end, 10);
  if (end == count_text.c_str() || *end != '\0' || count_text[0] == '-' || count == 0 ||
      count > 1000000) {
    fail(source, lines[3].number,
         "expected a tensor count between 1 and 1000000, got '" + count_text + "'");
  }
  std::set<std::string> seen;
  std::size_t i = 4;
  for (unsigned long long t = 0; t < count; ++t, ++i) {
    if (i >= lines.size() || trim(lines[i].text) == "end") {
      fail(source, i < lines.size() ? lines[i].number : lines.back().number + 1,
           "truncated: the header announces " + std::to_string(count) + " tensors, the file has " +
               std::to_string(t));
    }
    const Line& l = lines[i];
    const std::size_t colon = l.text.rfind(':');
    if (colon == std::string::npos) {
      fail(source, l.number, "expected 'NAME: HEX DECIMAL', got '" + l.text + "'");
    }
    TensorScale ts;
    ts.name = trim(l.text.substr(0, colon));
    std::istringstream in(l.text.substr(colon + 1));
    std::string hex, decimal, extra;
    in >> hex >> decimal;
    const bool hex_ok =
        hex.size() == 8 && hex.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (!valid_name(ts.name) || !hex_ok || decimal.empty() || (in >> extra)) {
      fail(source, l.number,
           "expected 'NAME: HEX DECIMAL' (8 lowercase hex digits), got '" + l.text + "'");
    }
    ts.scale = bits_float(static_cast<std::uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
    if (!std::isnormal(ts.scale) || ts.scale < 0) {
      fail(source, l.number,
           "tensor '" + ts.name + "' has the scale " + hex + " = " + std::to_string(ts.scale) +
               ", expected a positive normal float (a zero or non-finite scale quantises nothing)");
    }
    char* dec_end = nullptr;
    const float dec = std::strtof(decimal.c_str(), &dec_end);
    if (dec_end == decimal.c_str() || *dec_end != '\0' || float_bits(dec) != float_bits(ts.scale)) {
      char both[96];
      std::snprintf(both, sizeof both, "%.9g", static_cast<double>(ts.scale));
      fail(source, l.number,
           "tensor '" + ts.name + "': the hex " + hex + " (" + both + ") and the decimal " +
               decimal + " are not the same float");
    }
    if (!seen.insert(ts.name).second) {
      fail(source, l.number, "tensor '" + ts.name + "' appears twice");
    }
    table.tensors.push_back(ts);
  }
  if (i >= lines.size() || trim(lines[i].text) != "end") {
    fail(source, i < lines.size() ? lines[i].number : lines.back().number + 1,
         i < lines.size() ? "expected 'end' after " + std::to_string(count) + " tensors, got '" +
                                lines[i].text + "'"
                          : std::string("truncated: no 'end' line"));
  }
  if (i + 1 < lines.size()) {
    fail(source, lines[i + 1].number, "unexpected text after 'end': '" + lines[i + 1].text + "'");
  }
  return table;
}

void check_calibration_table(const CalibrationTable& table, const std::string& network,
                             const std::vector<std::string>& tensors) {
  if (table.network != network) {
    throw std::runtime_error("calibration table of another network: the table is for '" +
                             table.network + "', this network is '" + network +
                             "' (calibrate again for this network)");
  }
  const std::set<std::string> wanted(tensors.begin(), tensors.end());
  std::string first_missing;
  std::size_t missing = 0;
  for (const std::string& name : tensors) {
    if (table.find(name) == nullptr) {
      if (missing++ == 0) first_missing = name;
    }
  }
  if (missing > 0) {
    throw std::runtime_error("calibration table of " + network + ": no scale for tensor '" +
                             first_missing + "' (" + std::to_string(missing) + " of " +
                             std::to_string(tensors.size()) + " tensors missing)");
  }
  for (const TensorScale& t : table.tensors) {
    if (wanted.count(t.name) == 0) {
      throw std::runtime_error("calibration table of " + network + ": tensor '" + t.name +
                               "' is not a tensor of this network");
    }
  }
}

void save_calibration_table(const std::string& path, const CalibrationTable& table) {
  const std::string text = format_calibration_table(table);
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) throw std::runtime_error("save_calibration_table: cannot write " + path);
}

CalibrationTable load_calibration_table(const std::string& path, const std::string& network,
                                        const std::vector<std::string>& tensors) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("load_calibration_table: cannot open " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("load_calibration_table: cannot read " + path);
  CalibrationTable table = parse_calibration_table(text, path);
  check_calibration_table(table, network, tensors);
  return table;
}

}  // namespace lesson13
