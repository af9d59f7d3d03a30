// The lesson's synthetic test image (image files in and out: common/image_io.hpp).
#pragma once

#include <opencv2/core.hpp>

#include <string>

namespace lesson06 {

// A width x height BGR test pattern: colour gradients, a checkerboard and a zone plate (sharp
// edges and fine detail that show resampling errors), pure red / green / blue squares with
// their names (to check the channel order), and a one-pixel white frame (to check the edges).
// CV_8UC3. Throws std::invalid_argument below 64x64 (the squares and labels need the room).
cv::Mat make_test_pattern(int width, int height);

}  // namespace lesson06
