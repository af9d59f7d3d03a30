#include "common/image_io.hpp"

#include <opencv2/imgproc.hpp>

#include <memory>
#include <stdexcept>
#include <string>

// The implementations of the two single-file libraries live in this translation unit only.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

namespace course {

cv::Mat read_image(const std::string& path) {
  int w = 0, h = 0, channels_in_file = 0;
  std::unique_ptr<unsigned char, void (*)(void*)> pixels(
      stbi_load(path.c_str(), &w, &h, &channels_in_file, 3), stbi_image_free);
  if (!pixels) {
    throw std::runtime_error("read_image: cannot read " + path + ": " + stbi_failure_reason());
  }
  const cv::Mat rgb(h, w, CV_8UC3, pixels.get());
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);  // copies, so the stb buffer can go
  return bgr;
}

void write_png(const std::string& path, const cv::Mat& image) {
  if (image.empty() || image.depth() != CV_8U ||
      (image.channels() != 1 && image.channels() != 3 && image.channels() != 4)) {
    throw std::invalid_argument(
        "write_png: expected a non-empty 8-bit image with 1, 3 or 4 channels, got " +
        (image.empty() ? std::string("an empty image") : cv::typeToString(image.type())));
  }
  cv::Mat out;
  if (image.channels() == 3) {
    cv::cvtColor(image, out, cv::COLOR_BGR2RGB);
  } else if (image.channels() == 4) {
    cv::cvtColor(image, out, cv::COLOR_BGRA2RGBA);
  } else {
    out = image.isContinuous() ? image : image.clone();
  }
  const int stride = static_cast<int>(out.step[0]);
  if (stbi_write_png(path.c_str(), out.cols, out.rows, out.channels(), out.data, stride) == 0) {
    throw std::runtime_error("write_png: cannot write " + path);
  }
}

}  // namespace course
