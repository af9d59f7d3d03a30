// The lesson binary's picture: the synthetic scene with the recovered boxes drawn on it.
// Host code; OpenCV stays out of the files nvcc compiles.
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "common/image_io.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "synthetic.hpp"

namespace lesson08 {

namespace {
// A stable, well-spread colour per class (BGR).
cv::Scalar class_colour(int class_id) {
  const int h = (class_id * 47) % 180;  // OpenCV hue range is [0, 180)
  cv::Mat hsv(1, 1, CV_8UC3, cv::Scalar(h, 200, 255)), bgr;
  cv::cvtColor(hsv, bgr, cv::COLOR_HSV2BGR);
  const cv::Vec3b c = bgr.at<cv::Vec3b>(0, 0);
  return cv::Scalar(c[0], c[1], c[2]);
}
}  // namespace

void write_detections_png(const std::string& path, int width, int height,
                          const std::vector<GroundTruth>& objects,
                          const std::vector<Detection>& detections) {
  if (width < 1 || height < 1) throw std::invalid_argument("write_detections_png: empty image");
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {  // a vertical grey-blue gradient as the "scene"
    const int v = 60 + 60 * y / height;
    image.row(y).setTo(cv::Scalar(v + 30, v + 10, v));
  }
  // The objects, as the ground truth painted into the scene: a filled, darker patch each.
  for (const GroundTruth& o : objects) {
    const cv::Scalar c = class_colour(o.class_id) * 0.45;
    cv::rectangle(image, cv::Point2f(o.box.x1, o.box.y1), cv::Point2f(o.box.x2, o.box.y2), c,
                  cv::FILLED);
  }
  // The detections the postprocess recovered: outline + "class score" label.
  for (const Detection& d : detections) {
    const cv::Scalar c = class_colour(d.class_id);
    const cv::Point p1(cvRound(d.box.x1), cvRound(d.box.y1)),
        p2(cvRound(d.box.x2), cvRound(d.box.y2));
    cv::rectangle(image, p1, p2, c, 2, cv::LINE_AA);
    char label[32];
    std::snprintf(label, sizeof label, "%d %.2f", d.class_id, d.score);
    int baseline = 0;
    const cv::Size text = cv::getTextSize(label, cv::FONT_HERSHEY_SIMPLEX, 0.5, 1, &baseline);
    // Above the box, kept inside the image.
    const cv::Point origin(std::max(0, std::min(p1.x, width - text.width)),
                           std::max(text.height + 2, p1.y - 3));
    cv::rectangle(image, origin + cv::Point(0, baseline - text.height - 2),
                  origin + cv::Point(text.width, baseline), c, cv::FILLED);
    cv::putText(image, label, origin, cv::FONT_HERSHEY_SIMPLEX, 0.5, cv::Scalar(0, 0, 0), 1,
                cv::LINE_AA);
  }
  course::write_png(path, image);
}

}  // namespace lesson08
