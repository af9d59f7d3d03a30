// Lesson 13 tests: the calibration table file. The oracle of the format is text written here by
// hand (hex digits of known floats: 0x3c010204 is 1/127 rounded to float, 0x3f800000 is 1.0),
// and every refusal is checked for the message that names what is wrong.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <unistd.h>

#include "calibration_table.hpp"
#include "common/testing.hpp"

using namespace lesson13;
using course::testing::Contains;

namespace {

const char* kGood =
    "course-calibration-table 1\n"
    "network yolov8n-0123456789abcdef\n"
    "calibrator entropy-128\n"
    "tensors 3\n"
    "# a comment\n"
    "images: 3c010204 0.00787401572\n"
    "model.0: 3f800000 1\n"
    "(Unnamed Layer* 4) [Fully Connected]_output: 40490fdb 3.14159274\n"
    "end\n";

CalibrationTable sample() {
  CalibrationTable t;
  t.network = "yolov8n-0123456789abcdef";
  t.calibrator = "entropy-128";
  t.tensors = {{"images", 1.0f / 127.0f},
               {"model.0", 1.0f},
               {"(Unnamed Layer* 4) [Fully Connected]_output", 3.14159274f}};
  return t;
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const std::size_t at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("calibration table: the format written out by hand parses to the right floats",
          "[table]") {
  const CalibrationTable t = parse_calibration_table(kGood);
  CHECK(t.network == "yolov8n-0123456789abcdef");
  CHECK(t.calibrator == "entropy-128");
  REQUIRE(t.tensors.size() == 3);
  CHECK(t.tensors[0].name == "images");
  CHECK(t.tensors[0].scale == 1.0f / 127.0f);  // 0x3c010204
  CHECK(t.scale("model.0") == 1.0f);
  CHECK(t.scale("(Unnamed Layer* 4) [Fully Connected]_output") == 3.14159274f);
  CHECK(t.find("nope") == nullptr);
  CHECK_THROWS_AS(t.scale("nope"), std::out_of_range);
  // The writer produces exactly that text (comment line aside).
  const std::string written = format_calibration_table(sample());
  CHECK(replace(written,
                "# scale = amax / 127: float32 bits in hex, then the same value in decimal",
                "# a comment") == kGood);
  // CRLF line ends and blank lines are accepted.
  std::string crlf;
  for (char c : std::string(kGood)) {
    if (c == '\n')
      crlf += "\r\n\r\n";
    else
      crlf += c;
  }
  CHECK(parse_calibration_table(crlf).tensors.size() == 3);
}

TEST_CASE("calibration table: write, read back, same bits; files too", "[table]") {
  CalibrationTable t = sample();
  // Scales across the float range, including ones whose decimal needs all 9 digits.
  for (int i = 0; i < 200; ++i) {
    t.tensors.push_back({"t" + std::to_string(i), std::ldexp(1.0f + i / 257.0f, i % 60 - 40)});
  }
  t.tensors.push_back({"smallest normal", std::numeric_limits<float>::min()});
  t.tensors.push_back({"largest", std::numeric_limits<float>::max()});
  const CalibrationTable back = parse_calibration_table(format_calibration_table(t));
  REQUIRE(back.tensors.size() == t.tensors.size());
  for (std::size_t i = 0; i < t.tensors.size(); ++i) {
    INFO(t.tensors[i].name);
    CHECK(back.tensors[i].name == t.tensors[i].name);
    CHECK(back.tensors[i].scale == t.tensors[i].scale);
  }
  std::vector<std::string> names;
  for (const TensorScale& s : t.tensors) names.push_back(s.name);
  const std::string path =
      "/tmp/lesson13_table_" + std::to_string(static_cast<long>(::getpid())) + ".txt";
  save_calibration_table(path, t);
  const CalibrationTable loaded = load_calibration_table(path, t.network, names);
  CHECK(loaded.tensors.size() == t.tensors.size());
  CHECK(loaded.scale("largest") == std::numeric_limits<float>::max());
  std::remove(path.c_str());
  CHECK_THROWS_WITH(load_calibration_table(path, t.network, names), Contains("cannot open"));
  CHECK_THROWS_AS(save_calibration_table("/nonexistent/dir/t.txt", t), std::runtime_error);
}

TEST_CASE("calibration table: another network, missing and unknown tensors are refused",
          "[table]") {
  const CalibrationTable t = parse_calibration_table(kGood);
  const std::vector<std::string> names{"images", "model.0",
                                       "(Unnamed Layer* 4) [Fully Connected]_output"};
  CHECK_NOTHROW(check_calibration_table(t, "yolov8n-0123456789abcdef", names));
  CHECK_THROWS_WITH(check_calibration_table(t, "yolov8n-fedcba9876543210", names),
                    Contains("another network") && Contains("yolov8n-fedcba9876543210") &&
                        Contains("yolov8n-0123456789abcdef"));
  std::vector<std::string> more = names;
  more.push_back("model.1");
  more.push_back("model.2");
  CHECK_THROWS_WITH(check_calibration_table(t, t.network, more),
                    Contains("no scale for tensor 'model.1'") && Contains("2 of 5"));
  const std::vector<std::string> fewer{"images", "model.0"};
  CHECK_THROWS_WITH(check_calibration_table(t, t.network, fewer),
                    Contains("(Unnamed Layer* 4) [Fully Connected]_output") &&
                        Contains("not a tensor of this network"));
}

TEST_CASE("calibration table: bad files get a message naming the line and the problem", "[table]") {
  const std::string good = kGood;
  struct Case {
    std::string text, message;
  };
  const std::vector<Case> cases = {
      {"", "not a calibration table"},
      {replace(good, "course-calibration-table 1", "TRT-8601-EntropyCalibration2"),
       "not a calibration table"},
      {replace(good, "course-calibration-table 1", "course-calibration-table 2"),
       "not a calibration table"},
      {replace(good, "network yolov8n-0123456789abcdef\n", ""), "expected 'network <value>'"},
      {replace(good, "calibrator entropy-128", "calibrator entropy 128"),
       "expected 'calibrator <value>'"},
      {replace(good, "tensors 3", "tensors three"), "tensor count"},
      {replace(good, "tensors 3", "tensors 0"), "tensor count"},
      {replace(good, "tensors 3", "tensors 4"), "announces 4 tensors, the file has 3"},
      {replace(good, "tensors 3", "tensors 2"), "expected 'end' after 2 tensors"},
      {replace(good, "end\n", ""), "truncated"},
      {good.substr(0, good.find("model.0")), "truncated"},       // cut after a whole line
      {good.substr(0, good.find("model.0") + 12), "truncated"},  // cut in the middle of one
      {good + "model.1: 3f800000 1\n", "unexpected text after 'end'"},
      {replace(good, "model.0: 3f800000 1", "model.0 3f800000 1"), "NAME: HEX DECIMAL"},
      {replace(good, "model.0: 3f800000 1", "model.0: 3F800000 1"), "NAME: HEX DECIMAL"},
      {replace(good, "model.0: 3f800000 1", "model.0: 3f8000 1"), "NAME: HEX DECIMAL"},
      {replace(good, "model.0: 3f800000 1", "model.0: 3f800000"), "NAME: HEX DECIMAL"},
      {replace(good, "model.0: 3f800000 1", "model.0: 3f800000 1 2"), "NAME: HEX DECIMAL"},
      {replace(good, "model.0: 3f800000 1", ": 3f800000 1"), "NAME: HEX DECIMAL"},
      {replace(good, "model.0: 3f800000 1", "model.0: 00000000 0"), "positive normal"},
      {replace(good, "model.0: 3f800000 1", "model.0: 80000000 -0"), "positive normal"},
      {replace(good, "model.0: 3f800000 1", "model.0: bf800000 -1"), "positive normal"},
      {replace(good, "model.0: 3f800000 1", "model.0: 7f800000 inf"), "positive normal"},
      {replace(good, "model.0: 3f800000 1", "model.0: 7fc00000 nan"), "positive normal"},
      {replace(good, "model.0: 3f800000 1", "model.0: 00000001 1.40129846e-45"), "positive normal"},
      {replace(good, "model.0: 3f800000 1", "model.0: 3f800000 1.5"), "not the same float"},
      {replace(good, "model.0: 3f800000 1", "model.0: 3f800000 one"), "not the same float"},
      {replace(good, "model.0:", "images:"), "'images' appears twice"},
  };
  for (const Case& c : cases) {
    INFO("file:\n" << c.text);
    CHECK_THROWS_WITH(parse_calibration_table(c.text, "t.calib"),
                      Contains(c.message) && Contains("t.calib:"));
    CHECK_THROWS_AS(parse_calibration_table(c.text), std::runtime_error);
  }
  // The line number points at the culprit (line 7 of kGood is model.0).
  CHECK_THROWS_WITH(
      parse_calibration_table(replace(good, "model.0: 3f800000 1", "model.0: 00000000 0"), "f"),
      Contains("f:7:"));
}

TEST_CASE("calibration table: the writer refuses what it cannot write faithfully", "[table]") {
  auto bad = [](auto edit) {
    CalibrationTable t = sample();
    edit(t);
    return t;
  };
  const std::vector<CalibrationTable> tables = {
      bad([](CalibrationTable& t) { t.tensors.clear(); }),
      bad([](CalibrationTable& t) { t.network = ""; }),
      bad([](CalibrationTable& t) { t.network = "two words"; }),
      bad([](CalibrationTable& t) { t.calibrator = "a\tb"; }),
      bad([](CalibrationTable& t) { t.tensors[1].name = ""; }),
      bad([](CalibrationTable& t) { t.tensors[1].name = "#model"; }),
      bad([](CalibrationTable& t) { t.tensors[1].name = "a\nb"; }),
      bad([](CalibrationTable& t) { t.tensors[1].name = " padded"; }),
      bad([](CalibrationTable& t) { t.tensors[1].name = "images"; }),
      bad([](CalibrationTable& t) { t.tensors[1].scale = 0.0f; }),
      bad([](CalibrationTable& t) { t.tensors[1].scale = -1.0f; }),
      bad([](CalibrationTable& t) { t.tensors[1].scale = 1e-40f; }),
      bad([](CalibrationTable& t) { t.tensors[1].scale = std::numeric_limits<float>::infinity(); }),
      bad([](CalibrationTable& t) { t.tensors[1].scale = std::nanf(""); }),
  };
  for (std::size_t i = 0; i < tables.size(); ++i) {
    INFO("case " << i);
    CHECK_THROWS_AS(format_calibration_table(tables[i]), std::invalid_argument);
  }
  CHECK_THROWS_WITH(format_calibration_table(tables[9]), Contains("'model.0'"));
  CHECK_THROWS_WITH(format_calibration_table(tables[0]), Contains("no tensor"));
}
