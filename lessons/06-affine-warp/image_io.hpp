// Images in and out of the lesson binary without OpenCV's imgcodecs (which pulls in a hundred
// shared libraries): binary PPM in, PNG out, and a synthetic test pattern.
#pragma once

#include <opencv2/core.hpp>

#include <string>

namespace lesson06 {

// Reads a binary PPM ("P6", maxval 255; `convert photo.jpg photo.ppm` or
// `ffmpeg -i photo.jpg photo.ppm` make one) into a CV_8UC3 BGR image.
// Throws std::runtime_error if the file cannot be read, std::invalid_argument if it is not P6.
cv::Mat read_ppm(const std::string& path);

// Writes a CV_8UC3 BGR image as an 8-bit RGB PNG (zlib-compressed). Throws std::runtime_error.
void write_png(const std::string& path, const cv::Mat& bgr);

// A width x height BGR test pattern: colour gradients, a checkerboard and a zone plate (sharp
// edges and fine detail that show resampling errors), pure red / green / blue squares with
// their names (to check the channel order), and a one-pixel white frame (to check the edges).
cv::Mat make_test_pattern(int width, int height);

}  // namespace lesson06
