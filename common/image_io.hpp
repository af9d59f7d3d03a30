// Image files in and out, for lesson binaries that read a photo or write a picture of a result.
//
// Built on stb_image / stb_image_write (Debian/Ubuntu: libstb-dev, header-only here) rather than
// OpenCV's imgcodecs: on Debian imgcodecs pulls in GDAL and about a hundred more shared
// libraries, all for reading and writing a PNG. Images are cv::Mat, as in the rest of the course.
#pragma once

#include <opencv2/core.hpp>

#include <string>

namespace course {

// Reads a PNG, JPEG, BMP, PPM/PGM, TGA or GIF (first frame) into an 8-bit BGR image (CV_8UC3),
// OpenCV's channel order. Throws std::runtime_error naming the file and stb's reason.
cv::Mat read_image(const std::string& path);

// Writes an 8-bit image (CV_8UC1 grey, CV_8UC3 BGR or CV_8UC4 BGRA) as PNG.
// Throws std::invalid_argument for another type or an empty image, std::runtime_error if the
// file cannot be written.
void write_png(const std::string& path, const cv::Mat& image);

}  // namespace course
