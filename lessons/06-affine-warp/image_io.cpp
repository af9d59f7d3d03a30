#include "image_io.hpp"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <vector>

namespace lesson06 {

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
