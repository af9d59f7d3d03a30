// The timeline picture: reconstruct bars from event end times, then draw them as SVG.
#include "timeline.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace course::streams {

const char* stage_name(Stage stage) {
  switch (stage) {
    case Stage::h2d:
      return "H2D";
    case Stage::kernel:
      return "kernel";
    case Stage::d2h:
      return "D2H";
  }
  return "?";
}

namespace {

constexpr std::array<Stage, 3> kStages = {Stage::h2d, Stage::kernel, Stage::d2h};

double end_of(const ChunkTimes& t, Stage stage) {
  switch (stage) {
    case Stage::h2d:
      return t.h2d_end;
    case Stage::kernel:
      return t.kernel_end;
    case Stage::d2h:
      return t.d2h_end;
  }
  return 0.0;
}

bool valid_time(double t) {
  return std::isfinite(t) && t >= 0.0;
}

std::string chunk_label(std::size_t c) {
  return "chunk " + std::to_string(c);
}

}  // namespace

std::vector<Span> spans_from_chunk_times(const std::vector<ChunkTimes>& chunks) {
  // When each stage became ready: the end of what came before it in its stream.
  std::vector<std::array<double, 3>> ready(chunks.size());
  std::vector<double> last_end_on_stream;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    const ChunkTimes& t = chunks[c];
    if (t.stream < 0) throw std::invalid_argument(chunk_label(c) + ": stream must be >= 0");
    if (!valid_time(t.h2d_end) || !valid_time(t.kernel_end) || !valid_time(t.d2h_end)) {
      throw std::invalid_argument(chunk_label(c) + ": stage end times must be finite and >= 0 ms");
    }
    if (!(t.h2d_end <= t.kernel_end && t.kernel_end <= t.d2h_end)) {
      throw std::invalid_argument(chunk_label(c) +
                                  ": expected h2d_end <= kernel_end <= d2h_end (stream order)");
    }
    const auto s = static_cast<std::size_t>(t.stream);
    if (s >= last_end_on_stream.size()) last_end_on_stream.resize(s + 1, 0.0);
    if (last_end_on_stream[s] > t.h2d_end) {
      throw std::invalid_argument(chunk_label(c) +
                                  ": its H2D ended before the previous chunk on stream " +
                                  std::to_string(s) + " finished (chunks must be in issue order)");
    }
    ready[c] = {last_end_on_stream[s], t.h2d_end, t.kernel_end};
    last_end_on_stream[s] = t.d2h_end;
  }

  std::vector<Span> spans;
  spans.reserve(3 * chunks.size());
  for (std::size_t k = 0; k < kStages.size(); ++k) {
    const Stage stage = kStages[k];
    // The engine's operations in the order they finished (ties: lower chunk first).
    std::vector<std::size_t> order(chunks.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return end_of(chunks[a], stage) < end_of(chunks[b], stage);
    });
    double engine_free = 0.0;
    for (std::size_t c : order) {
      const double end = end_of(chunks[c], stage);
      const double start = std::min(end, std::max(ready[c][k], engine_free));
      spans.push_back(Span{static_cast<int>(c), chunks[c].stream, stage, start, end});
      engine_free = end;
    }
  }
  std::stable_sort(spans.begin(), spans.end(),
                   [](const Span& a, const Span& b) { return a.chunk < b.chunk; });
  return spans;
}

EngineBusy engine_busy(const std::vector<Span>& spans) {
  std::array<double, 3> busy{};
  for (std::size_t k = 0; k < kStages.size(); ++k) {
    std::vector<std::pair<double, double>> intervals;
    for (const Span& s : spans) {
      if (s.stage == kStages[k]) intervals.emplace_back(s.start_ms, s.end_ms);
    }
    std::sort(intervals.begin(), intervals.end());
    double covered_to = -1.0;
    for (const auto& [start, end] : intervals) {
      const double from = std::max(start, covered_to);
      if (end > from) busy[k] += end - from;
      covered_to = std::max(covered_to, end);
    }
  }
  return EngineBusy{busy[0], busy[1], busy[2]};
}

double nice_tick_step(double range, int max_ticks) {
  if (!(range > 0.0) || !std::isfinite(range) || max_ticks < 1) {
    throw std::invalid_argument("nice_tick_step: expected a finite range > 0 and max_ticks >= 1");
  }
  const double raw = range / max_ticks;
  double step = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * step >= raw * (1.0 - 1e-12)) return m * step;
  }
  return 10.0 * step;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

namespace {

// Layout, in SVG user units (pixels).
constexpr double kWidth = 1000, kLeft = 130, kRight = 20, kPlotWidth = kWidth - kLeft - kRight;
constexpr double kRowHeight = 18, kRowPitch = 22, kPanelGap = 18;
constexpr std::array<const char*, 3> kFill = {"#4e79a7", "#f28e2b", "#59a14f"};
constexpr std::array<const char*, 3> kClass = {"h2d", "kernel", "d2h"};
constexpr std::array<const char*, 3> kEngineRow = {"H2D copies", "kernels (SMs)", "D2H copies"};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string ms_text(double ms, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, ms);
  return buf;
}

void draw_bar(std::ostringstream& svg, const Span& s, double y, double ms_to_px) {
  const auto k = static_cast<std::size_t>(s.stage);
  const double x = kLeft + s.start_ms * ms_to_px;
  const double w = std::max(0.5, (s.end_ms - s.start_ms) * ms_to_px);
  svg << "<rect class=\"bar " << kClass[k] << "\" x=\"" << num(x) << "\" y=\"" << num(y)
      << "\" width=\"" << num(w) << "\" height=\"" << num(kRowHeight) << "\" fill=\"" << kFill[k]
      << "\" stroke=\"white\" stroke-width=\"0.5\"><title>chunk " << s.chunk << ", stream "
      << s.stream << ", " << stage_name(s.stage) << ": " << ms_text(s.start_ms, 3) << " to "
      << ms_text(s.end_ms, 3) << " ms</title></rect>\n";
  if (w >= 18) {
    svg << "<text x=\"" << num(x + w / 2) << "\" y=\"" << num(y + kRowHeight - 5)
        << "\" font-size=\"10\" text-anchor=\"middle\" fill=\"white\">" << s.chunk << "</text>\n";
  }
}

void draw_row_label(std::ostringstream& svg, const std::string& label, double y) {
  svg << "<text x=\"" << num(kLeft - 8) << "\" y=\"" << num(y + kRowHeight - 5)
      << "\" font-size=\"12\" text-anchor=\"end\">" << xml_escape(label) << "</text>\n";
}

}  // namespace

std::string timeline_svg(const std::vector<TimelinePanel>& panels, const std::string& caption) {
  if (panels.empty()) throw std::invalid_argument("timeline_svg: expected at least one panel");
  double t_max = 0.0;
  for (const TimelinePanel& p : panels) {
    if (p.streams < 1)
      throw std::invalid_argument("timeline_svg: panel '" + p.title + "' has streams < 1");
    for (const Span& s : p.spans) {
      if (s.stream < 0 || s.stream >= p.streams) {
        throw std::invalid_argument("timeline_svg: panel '" + p.title + "' has a span on stream " +
                                    std::to_string(s.stream) + ", expected 0.." +
                                    std::to_string(p.streams - 1));
      }
      // Finite and bounded: an axis to 1.7e308 ms rounds up to inf, and the tick loop below
      // would never reach it.
      if (!(s.start_ms >= 0.0 && s.start_ms <= s.end_ms && s.end_ms <= kMaxTimelineMs)) {
        throw std::invalid_argument("timeline_svg: panel '" + p.title + "' has a span from " +
                                    std::to_string(s.start_ms) + " to " + std::to_string(s.end_ms) +
                                    " ms, expected 0 <= start <= end "
                                    "<= " +
                                    std::to_string(kMaxTimelineMs) + " ms");
      }
      t_max = std::max(t_max, s.end_ms);
    }
  }
  if (!(t_max > 0.0)) t_max = 1.0;  // nothing to draw: still a valid picture with an axis
  const double step = nice_tick_step(t_max, 10);
  const double axis_end = std::ceil(t_max / step - 1e-9) * step;
  const double ms_to_px = kPlotWidth / axis_end;
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));

  std::ostringstream body;
  double y = 78;  // below title, caption and legend
  const double plot_top = y;
  for (const TimelinePanel& p : panels) {
    body << "<text x=\"10\" y=\"" << num(y + 13) << "\" font-size=\"13\" font-weight=\"bold\">"
         << xml_escape(p.title) << "</text>\n";
    y += kRowPitch;
    if (p.streams > 1) {  // engine view: every chunk's stage on its engine's row
      for (std::size_t k = 0; k < kStages.size(); ++k) {
        draw_row_label(body, kEngineRow[k], y);
        for (const Span& s : p.spans) {
          if (s.stage == kStages[k]) draw_bar(body, s, y, ms_to_px);
        }
        y += kRowPitch;
      }
      y += 6;
    }
    for (int stream = 0; stream < p.streams; ++stream) {  // stream view
      draw_row_label(body, "stream " + std::to_string(stream), y);
      for (const Span& s : p.spans) {
        if (s.stream == stream) draw_bar(body, s, y, ms_to_px);
      }
      y += kRowPitch;
    }
    y += kPanelGap;
  }
  const double axis_y = y;
  const double height = axis_y + 40;

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(kWidth) << "\" height=\""
      << num(height) << "\" viewBox=\"0 0 " << num(kWidth) << " " << num(height)
      << "\" font-family=\"sans-serif\">\n";
  svg << "<rect x=\"0\" y=\"0\" width=\"" << num(kWidth) << "\" height=\"" << num(height)
      << "\" fill=\"white\"/>\n";
  svg << "<text x=\"10\" y=\"24\" font-size=\"16\" font-weight=\"bold\">Pipeline timeline "
         "(from CUDA event timestamps)</text>\n";
  svg << "<text x=\"10\" y=\"44\" font-size=\"12\">" << xml_escape(caption) << "</text>\n";
  double lx = 10;
  for (std::size_t k = 0; k < kStages.size(); ++k) {
    svg << "<rect x=\"" << num(lx) << "\" y=\"54\" width=\"12\" height=\"12\" fill=\"" << kFill[k]
        << "\"/><text x=\"" << num(lx + 16) << "\" y=\"64\" font-size=\"12\">"
        << stage_name(kStages[k]) << (kStages[k] == Stage::kernel ? "" : " copy") << "</text>\n";
    lx += 110;
  }
  for (double t = 0.0; t <= axis_end + step * 1e-6; t += step) {  // grid and tick labels
    const double x = kLeft + t * ms_to_px;
    svg << "<line x1=\"" << num(x) << "\" y1=\"" << num(plot_top) << "\" x2=\"" << num(x)
        << "\" y2=\"" << num(axis_y + 4) << "\" stroke=\"#dddddd\"/>\n";
    svg << "<text x=\"" << num(x) << "\" y=\"" << num(axis_y + 18)
        << "\" font-size=\"11\" text-anchor=\"middle\">" << ms_text(t, decimals) << "</text>\n";
  }
  svg << "<line x1=\"" << num(kLeft) << "\" y1=\"" << num(axis_y) << "\" x2=\""
      << num(kLeft + kPlotWidth) << "\" y2=\"" << num(axis_y) << "\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << num(kLeft + kPlotWidth) << "\" y=\"" << num(axis_y + 34)
      << "\" font-size=\"11\" text-anchor=\"end\">time since the start event, ms</text>\n";
  svg << body.str();
  svg << "</svg>\n";
  return svg.str();
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw std::runtime_error("cannot open '" + path + "' for writing");
  file << text;
  file.close();
  if (!file) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace course::streams
