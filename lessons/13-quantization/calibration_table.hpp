// Lesson 13: the calibration table, a readable file of per-tensor scales.
//
// What TensorRT's calibration cache is (a first line naming TensorRT's version and the
// calibrator, e.g. "TRT-8601-EntropyCalibration2", then "tensor: 3c010a14" lines, the hex being
// the float32 bits of the scale amax / 127), made stricter so that a wrong file is refused
// with a message rather than silently used:
//
//   course-calibration-table 1            magic and format version
//   network yolov8n-1b2c3d4e5f607182       the network it was calibrated for (network_id())
//   calibrator entropy-128                 how the amax were chosen (calibrator_name())
//   tensors 52                             how many tensor lines follow
//   # scale = amax / 127: float32 bits in hex, then the same value in decimal
//   images: 3c010204 0.00787401572         NAME: HEX DECIMAL, one line per tensor
//   model.0: 3d2f19b3 0.0427491181
//   ...
//   end                                    nothing may follow
//
// The hex digits are the exact scale (8 lowercase hex digits, the IEEE 754 binary32 bits,
// most significant first: TensorRT's convention); the decimal (%.9g, which round-trips a float)
// is for people, and the reader checks that both say the same float, so a hand edit of one
// without the other is caught. Lines starting with '#' are comments. A name is everything
// before the line's last ':' (names may hold spaces and colons, as TensorRT's "(Unnamed Layer*
// 4) [Fully Connected]_output" does), trimmed; it must be non-empty, must not start with '#' and
// holds no control character. Host code only.
#pragma once

#include <string>
#include <vector>

namespace lesson13 {

struct TensorScale {
  std::string name;
  float scale = 0;  // amax / 127, a positive normal float
};

struct CalibrationTable {
  std::string network;     // one token (no whitespace), e.g. network_id()'s
  std::string calibrator;  // one token, e.g. calibrator_name()'s
  std::vector<TensorScale> tensors;
  // The entry named `name`, or null.
  const TensorScale* find(const std::string& name) const;
  // Its scale; throws std::out_of_range naming the tensor and the table's network.
  float scale(const std::string& name) const;
};

// The file's text. Throws std::invalid_argument for a table that cannot be written faithfully:
// no tensor, an empty network or calibrator or one holding whitespace, a name the format
// cannot carry (above), a name twice, or a scale that is not a positive normal float (zero,
// negative, subnormal, infinite, NaN).
std::string format_calibration_table(const CalibrationTable& table);

// Parses a table's text. `source` names it in messages (a path). Throws std::runtime_error with
// the line number and what was expected for: another first line (not a calibration table, or
// another format version), a missing or malformed header line, a malformed tensor line, a
// name twice, a scale that is not a positive normal float, hex and decimal that disagree, a
// truncated file (fewer tensor lines than announced, or no "end"), or anything after "end".
CalibrationTable parse_calibration_table(const std::string& text,
                                         const std::string& source = "calibration table");

// Checks a parsed table against what an engine needs. Throws std::runtime_error if the table
// was calibrated for another network (naming both), if a tensor in `tensors` has no scale
// (naming the first missing and how many are missing), or if the table holds a tensor the
// network does not have (naming it).
void check_calibration_table(const CalibrationTable& table, const std::string& network,
                             const std::vector<std::string>& tensors);

// Files: save writes format_calibration_table's text (throws std::runtime_error if the file
// cannot be written); load reads, parses and checks (throws std::runtime_error for a file that
// cannot be read, and as parse_ and check_calibration_table do).
void save_calibration_table(const std::string& path, const CalibrationTable& table);
CalibrationTable load_calibration_table(const std::string& path, const std::string& network,
                                        const std::vector<std::string>& tensors);

}  // namespace lesson13
