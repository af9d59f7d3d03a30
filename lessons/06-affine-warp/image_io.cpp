#include "image_io.hpp"

#include <opencv2/imgproc.hpp>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace lesson06 {

// ------------------------------------------------------------------------ PPM

namespace {
// The next whitespace-separated header token, skipping '#' comments.
std::string ppm_token(std::istream& in) {
  std::string token;
  char c = 0;
  while (in.get(c)) {
    if (c == '#') {
      in.ignore(1 << 20, '\n');
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      if (!token.empty()) break;
    } else {
      token += c;
    }
  }
  return token;
}
}  // namespace

cv::Mat read_ppm(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("read_ppm: cannot open " + path);
  if (ppm_token(in) != "P6") {
    throw std::invalid_argument("read_ppm: " + path +
                                " is not a binary PPM (P6); convert it first, "
                                "e.g. `convert in.jpg out.ppm`");
  }
  const int w = std::stoi(ppm_token(in)), h = std::stoi(ppm_token(in));
  const int maxval = std::stoi(ppm_token(in));  // the single whitespace after it is consumed
  if (w < 1 || h < 1 || maxval != 255) {
    throw std::invalid_argument("read_ppm: " + path + ": expected a positive size and maxval 255");
  }
  cv::Mat rgb(h, w, CV_8UC3);
  in.read(reinterpret_cast<char*>(rgb.data), static_cast<std::streamsize>(rgb.total() * 3));
  if (!in) throw std::runtime_error("read_ppm: " + path + " is truncated");
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  return bgr;
}

// ------------------------------------------------------------------------ PNG

namespace {
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

// A PNG chunk: length, type, data, CRC-32 of type + data (PNG specification, section 5.3).
void put_chunk(std::vector<std::uint8_t>& out, const char type[5],
               const std::vector<std::uint8_t>& data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(0L, out.data() + start, static_cast<uInt>(out.size() - start));
  put_u32(out, static_cast<std::uint32_t>(crc));
}
}  // namespace

void write_png(const std::string& path, const cv::Mat& bgr) {
  if (bgr.empty() || bgr.type() != CV_8UC3) {
    throw std::runtime_error("write_png: expected a non-empty CV_8UC3 image for " + path);
  }
  // Scanlines: a filter-type byte (0, none) then the row as R, G, B.
  const std::size_t row_bytes = 3 * static_cast<std::size_t>(bgr.cols);
  std::vector<std::uint8_t> raw;
  raw.reserve((row_bytes + 1) * bgr.rows);
  for (int y = 0; y < bgr.rows; ++y) {
    raw.push_back(0);
    const std::uint8_t* p = bgr.ptr<std::uint8_t>(y);
    for (int x = 0; x < bgr.cols; ++x) {
      raw.push_back(p[3 * x + 2]);
      raw.push_back(p[3 * x + 1]);
      raw.push_back(p[3 * x + 0]);
    }
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<std::uint8_t> packed(packed_size);
  if (compress2(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()), 6) !=
      Z_OK) {
    throw std::runtime_error("write_png: zlib compress2 failed for " + path);
  }
  packed.resize(packed_size);

  std::vector<std::uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<std::uint8_t> header;
  put_u32(header, static_cast<std::uint32_t>(bgr.cols));
  put_u32(header, static_cast<std::uint32_t>(bgr.rows));
  header.insert(header.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, filter 0, no interlace
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", packed);
  put_chunk(png, "IEND", {});

  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  if (!out) throw std::runtime_error("write_png: cannot write " + path);
}

// ------------------------------------------------------------------------ test pattern

cv::Mat make_test_pattern(int width, int height) {
  if (width < 64 || height < 64) {
    throw std::invalid_argument("make_test_pattern: expected at least 64x64 pixels");
  }
  cv::Mat img(height, width, CV_8UC3);
  // Background: red grows to the right, green downwards, blue constant.
  for (int y = 0; y < height; ++y) {
    auto* p = img.ptr<cv::Vec3b>(y);
    for (int x = 0; x < width; ++x) {
      p[x] = cv::Vec3b(96, static_cast<std::uint8_t>(255 * y / (height - 1)),
                       static_cast<std::uint8_t>(255 * x / (width - 1)));
    }
  }
  const int unit = std::min(width, height) / 8;
  // A checkerboard of 8-pixel cells: edges that every resampling error shows on.
  const cv::Rect board(unit / 2, unit / 2, 3 * unit, 3 * unit);
  for (int y = board.y; y < board.y + board.height; ++y) {
    for (int x = board.x; x < board.x + board.width; ++x) {
      const bool white = (((x - board.x) / 8) + ((y - board.y) / 8)) % 2 == 0;
      img.at<cv::Vec3b>(y, x) = white ? cv::Vec3b(255, 255, 255) : cv::Vec3b(0, 0, 0);
    }
  }
  // A zone plate: rings whose frequency rises with the radius, up to aliasing.
  const cv::Point centre(width - 2 * unit, 2 * unit);
  // cos(k r^2) has the local frequency k r / pi cycles per pixel: half a cycle (the finest a
  // pixel grid holds) at the rim.
  const double rim = 1.5 * unit;
  const double k = 3.14159265358979323846 / (2.0 * rim);
  for (int y = centre.y - int(rim); y < centre.y + int(rim); ++y) {
    for (int x = centre.x - int(rim); x < centre.x + int(rim); ++x) {
      const double r2 =
          double(x - centre.x) * (x - centre.x) + double(y - centre.y) * (y - centre.y);
      if (r2 > rim * rim) continue;
      const auto v = static_cast<std::uint8_t>(127.5 + 127.5 * std::cos(k * r2));
      img.at<cv::Vec3b>(y, x) = cv::Vec3b(v, v, v);
    }
  }
  // Pure red, green and blue squares, named: a swapped channel order is visible at once.
  const cv::Scalar colours[3] = {{0, 0, 255}, {0, 255, 0}, {255, 0, 0}};
  const char* names[3] = {"R", "G", "B"};
  for (int i = 0; i < 3; ++i) {
    const cv::Rect sq(unit / 2 + i * (unit + unit / 4), height - 2 * unit, unit, unit);
    cv::rectangle(img, sq, colours[i], cv::FILLED);
    cv::putText(img, names[i], {sq.x + unit / 4, sq.y + 3 * unit / 4}, cv::FONT_HERSHEY_SIMPLEX,
                unit / 40.0, cv::Scalar::all(255), std::max(1, unit / 30), cv::LINE_AA);
  }
  cv::putText(img, "lesson 06: letterbox", {5 * unit, height - unit}, cv::FONT_HERSHEY_SIMPLEX,
              unit / 60.0, cv::Scalar::all(255), std::max(1, unit / 40), cv::LINE_AA);
  // A one-pixel white frame on the outermost pixels.
  cv::rectangle(img, cv::Rect(0, 0, width, height), cv::Scalar::all(255), 1);
  return img;
}

}  // namespace lesson06
