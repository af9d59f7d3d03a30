// The pipeline's timeline as a picture: from event timestamps to an SVG file. Host code only
// (no CUDA), so the CPU tests cover all of it.
#pragma once

#include <string>
#include <vector>

namespace course::streams {

enum class Stage { h2d, kernel, d2h };
const char* stage_name(Stage stage);  // "H2D", "kernel", "D2H"

// When one chunk's three stages finished, in milliseconds after the batch's start event
// (cudaEventElapsedTime against one start event), and the stream it ran on.
struct ChunkTimes {
  int stream = 0;
  double h2d_end = 0, kernel_end = 0, d2h_end = 0;
};

// One bar of the timeline.
struct Span {
  int chunk = 0;
  int stream = 0;
  Stage stage = Stage::h2d;
  double start_ms = 0, end_ms = 0;
};

// Events only say when an operation ENDED. Its start is reconstructed as the later of
//   - the end of the operation before it in its stream (it cannot start earlier), and
//   - the end of the operation before it on the same engine, taking each engine's operations in
//     the order they finished (an engine does one thing at a time).
// A model: it assumes one copy at a time per direction and kernels that fill the GPU (kernels
// that share the SMs are drawn back to back). A GPU with several copy engines
// (cudaDevAttrAsyncEngineCount: 3 on the H200) may run H2D copies of different streams at the
// same time, and then a drawn start is later than the real one; only a trace (Nsight Systems)
// shows that. Chunks on one stream
// are listed in issue order (chunk c before chunk c + K). Returns 3 spans per chunk.
// Throws std::invalid_argument for a negative stream, a negative or non-finite time, or stage
// ends out of order (h2d_end <= kernel_end <= d2h_end must hold).
std::vector<Span> spans_from_chunk_times(const std::vector<ChunkTimes>& chunks);

// The union of each engine's busy intervals, in ms (what the three engine rows of the picture
// show); for the README's "engine busy" numbers. Spans may come in any order and overlap; time
// covered twice on one engine counts once. Throws nothing: any spans give an answer, so
// validate them first (spans_from_chunk_times does).
struct EngineBusy {
  double h2d_ms = 0, kernel_ms = 0, d2h_ms = 0;
};
EngineBusy engine_busy(const std::vector<Span>& spans);

// One block of rows in the picture: a title, one row per stream and, when streams > 1, one row
// per engine above them. spans[i].stream must be < streams.
struct TimelinePanel {
  std::string title;
  int streams = 1;
  std::vector<Span> spans;
};

// A tick spacing of 1, 2 or 5 times a power of ten that gives at most `max_ticks` ticks over
// [0, range]. Throws std::invalid_argument unless range > 0 and max_ticks >= 1.
double nice_tick_step(double range, int max_ticks);

// A standalone SVG (1000 px wide) drawing the panels on one shared time axis, with a legend and
// `caption` under the title. Each bar carries class "bar h2d|kernel|d2h" and a <title> tooltip.
// Throws std::invalid_argument for no panels, a panel with streams < 1, a span whose stream is
// outside its panel, or a span whose times are not 0 <= start_ms <= end_ms <= kMaxTimelineMs
// (NaN and inf included).
constexpr double kMaxTimelineMs = 1e9;  // 11.6 days: far beyond any run this lesson times
std::string timeline_svg(const std::vector<TimelinePanel>& panels, const std::string& caption);

// "&", "<", ">", '"' and "'" as XML entities.
std::string xml_escape(const std::string& text);

// Writes `text` to `path`, replacing the file. Throws std::runtime_error naming the path on
// failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace course::streams
