// Tests of common/image_io: PNG written by stb_image_write, read back by stb_image; BGR order.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "common/image_io.hpp"
#include "common/testing.hpp"

namespace {
std::string temp_path(const char* ext) {
  return "/tmp/course_image_io_" + std::to_string(::getpid()) + ext;
}
}  // namespace

TEST_CASE("write_png then read_image round-trips an odd-sized BGR image", "[image_io]") {
  cv::Mat img(3, 5, CV_8UC3);
  for (int i = 0; i < 3 * 5 * 3; ++i) img.data[i] = static_cast<unsigned char>(i * 7 + 1);
  const std::string path = temp_path(".png");
  course::write_png(path, img);
  const cv::Mat back = course::read_image(path);
  std::remove(path.c_str());
  REQUIRE(back.type() == CV_8UC3);
  REQUIRE(back.size() == img.size());
  CHECK(cv::norm(back, img, cv::NORM_INF) == 0);  // PNG is lossless; channel order preserved
}

TEST_CASE("read_image reads a binary PPM (RGB on disk) into BGR", "[image_io]") {
  const std::string path = temp_path(".ppm");
  {
    std::ofstream f(path, std::ios::binary);
    f << "P6\n2 1\n255\n";
    const unsigned char rgb[6] = {255, 0, 0, 0, 0, 255};  // a red pixel, a blue pixel
    f.write(reinterpret_cast<const char*>(rgb), 6);
  }
  const cv::Mat img = course::read_image(path);
  std::remove(path.c_str());
  REQUIRE(img.size() == cv::Size(2, 1));
  CHECK(img.at<cv::Vec3b>(0, 0) == cv::Vec3b(0, 0, 255));  // red in BGR
  CHECK(img.at<cv::Vec3b>(0, 1) == cv::Vec3b(255, 0, 0));  // blue in BGR
}

TEST_CASE("image_io rejects what it cannot read or write", "[image_io]") {
  CHECK_THROWS_WITH(course::read_image("/nonexistent/x.png"),
                    course::testing::Contains("/nonexistent/x.png"));
  CHECK_THROWS_AS(course::write_png(temp_path(".png"), cv::Mat()), std::invalid_argument);
  CHECK_THROWS_AS(course::write_png(temp_path(".png"), cv::Mat(2, 2, CV_32FC1)),
                  std::invalid_argument);
  CHECK_THROWS_AS(course::write_png("/nonexistent/dir/x.png", cv::Mat(2, 2, CV_8UC1)),
                  std::runtime_error);
}

TEST_CASE("write_png names a rejected type the way OpenCV spells it", "[image_io]") {
  // OpenCV's own name, not the type's number (CV_32FC1 is 5, which tells a reader nothing).
  CHECK_THROWS_WITH(course::write_png(temp_path(".png"), cv::Mat(2, 2, CV_32FC1)),
                    course::testing::Contains("CV_32FC1"));
  CHECK_THROWS_WITH(course::write_png(temp_path(".png"), cv::Mat(2, 2, CV_8UC2)),
                    course::testing::Contains("CV_8UC2"));
}
