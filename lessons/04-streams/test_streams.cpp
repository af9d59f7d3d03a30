// Lesson 04 tests. CPU tests: the per-element math, chunking, the pipeline bound, the timeline
// reconstruction and its SVG, argument checks. [gpu] tests: results of every stream arrangement
// against the CPU reference, and orderings designed so that they FAIL if the ordering is missing
// (a producer that spins before it writes). No test asserts a time.
#include <cuda_runtime_api.h>
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/cupti_trace.hpp"
#include "common/memory.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "streams.cuh"
#include "timeline.hpp"

using course::testing::Approx;
using course::testing::Contains;
namespace cs = course::streams;

namespace {

// Long enough that a consumer that is not ordered after the producer runs first on any GPU,
// short enough to keep the suite fast (and it is wall-clock time, so sanitizers do not stretch it).
constexpr std::uint64_t kProducerSpinNs = 20'000'000;  // 20 ms

std::vector<std::uint32_t> random_input(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> v(n);
  for (auto& x : v) x = static_cast<std::uint32_t>(rng());
  return v;
}

// The oracle: the per-element function run on the CPU.
std::vector<std::uint32_t> cpu_reference(const std::vector<std::uint32_t>& in, int total_rounds) {
  std::vector<std::uint32_t> out(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = cs::mix_rounds(in[i], total_rounds);
  return out;
}

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t count = 0;
  for (std::size_t pos = text.find(needle); pos != std::string::npos;
       pos = text.find(needle, pos + 1)) {
    ++count;
  }
  return count;
}

// The pipeline's makespan by direct simulation: three engines, each taking the chunks in order,
// a chunk entering a stage once it has left the previous one and the engine is free. An
// independent oracle for the closed form of pipeline_bound.
double simulate_flow_shop_ms(const cs::StageTimes& serial, int chunks) {
  const double per[3] = {serial.h2d_ms / chunks, serial.kernel_ms / chunks, serial.d2h_ms / chunks};
  double engine_free[3] = {0, 0, 0};
  for (int c = 0; c < chunks; ++c) {
    double t = 0;
    for (int s = 0; s < 3; ++s) {
      t = std::max(t, engine_free[s]) + per[s];
      engine_free[s] = t;
    }
  }
  return engine_free[2];
}

}  // namespace

// =============================================================================== CPU tests

TEST_CASE("mix32 matches values computed by an independent implementation", "[math]") {
  // Pinned from a Python implementation of the same lowbias32 round (masking to 32 bits).
  CHECK(cs::mix32(0x00000001u) == 0x688990c0u);
  CHECK(cs::mix32(0x00000007u) == 0x948ba1e6u);
  CHECK(cs::mix32(0xdeadbeefu) == 0xe628c683u);
  CHECK(cs::mix_rounds(0x00000001u, 10) == 0x52ab3d27u);
  CHECK(cs::mix_rounds(123456789u, 100) == 0x7650cd89u);
}

TEST_CASE("mix_rounds with zero or negative rounds is the identity", "[math]") {
  CHECK(cs::mix_rounds(42u, 0) == 42u);
  CHECK(cs::mix_rounds(42u, -3) == 42u);
  CHECK(cs::mix_rounds(42u, 2) == cs::mix32(cs::mix32(42u)));
}

TEST_CASE("Chunks are contiguous, cover the batch and differ in size by at most one", "[chunks]") {
  const std::size_t n = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{10},
                                 std::size_t{10007}, std::size_t{1} << 20);
  const int chunks = GENERATE(1, 3, 4, 7, 16, 33);
  std::size_t expected_begin = 0, smallest = n, largest = 0;
  for (int c = 0; c < chunks; ++c) {
    CHECK(cs::chunk_begin(n, chunks, c) == expected_begin);
    const std::size_t size = cs::chunk_size(n, chunks, c);
    smallest = std::min(smallest, size);
    largest = std::max(largest, size);
    expected_begin += size;
  }
  CHECK(expected_begin == n);
  CHECK(largest - std::min(smallest, largest) <= 1);
  CHECK(cs::chunk_size(n, chunks, 0) == largest);  // the pipeline sizes its buffers from chunk 0
}

TEST_CASE("Chunking 10 elements into 4 gives 3, 3, 2, 2", "[chunks]") {
  CHECK(cs::chunk_begin(10, 4, 0) == 0);
  CHECK(cs::chunk_begin(10, 4, 1) == 3);
  CHECK(cs::chunk_begin(10, 4, 2) == 6);
  CHECK(cs::chunk_begin(10, 4, 3) == 8);
  CHECK(cs::chunk_size(10, 4, 1) == 3);
  CHECK(cs::chunk_size(10, 4, 3) == 2);
}

TEST_CASE("A bad pipeline configuration is rejected before any CUDA call", "[pipeline]") {
  cs::PipelineConfig cfg;
  cfg.n = 100;
  SECTION("chunks") {
    cfg.chunks = 0;
    CHECK_THROWS_WITH(cs::Pipeline(cfg), Contains("chunks must be >= 1"));
  }
  SECTION("streams: zero") {
    cfg.streams = 0;
    CHECK_THROWS_WITH(cs::Pipeline(cfg), Contains("streams must be in [1, 64]"));
  }
  SECTION("streams: too many") {
    cfg.streams = cs::kMaxStreams + 1;
    CHECK_THROWS_AS(cs::Pipeline(cfg), std::invalid_argument);
  }
  SECTION("rounds") {
    cfg.rounds = -1;
    CHECK_THROWS_WITH(cs::validate(cfg), Contains("rounds must be >= 0"));
  }
  SECTION("launches per chunk") {
    cfg.launches_per_chunk = 0;
    CHECK_THROWS_WITH(cs::validate(cfg), Contains("launches_per_chunk must be >= 1"));
  }
}

TEST_CASE("launch_spin and PipelineTrace reject bad sizes before any CUDA call", "[args]") {
  CHECK_THROWS_WITH(cs::launch_spin(1, 1025, 0, nullptr), Contains("threads in [1, 1024]"));
  CHECK_THROWS_AS(cs::launch_spin(1, 0, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cs::launch_spin(0, 32, 0, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cs::spin_blocks_per_sm(0), std::invalid_argument);
  CHECK_THROWS_AS(cs::spin_blocks_per_sm(1025), std::invalid_argument);
  CHECK_THROWS_WITH(cs::PipelineTrace(0), Contains("chunks must be >= 1"));
  CHECK_THROWS_AS(cs::PipelineTrace(-3), std::invalid_argument);
}

TEST_CASE("preprocess_then_infer rejects null arguments before enqueuing anything", "[ex3]") {
  // Host addresses that are never dereferenced: the checks come before any CUDA call.
  std::uint32_t buf[8] = {};
  const auto fake_event = reinterpret_cast<cudaEvent_t>(buf);
  CHECK_THROWS_AS(cs::preprocess_then_infer(buf, nullptr, 4, 1, 0, 1, nullptr, nullptr, fake_event),
                  std::invalid_argument);
  CHECK_THROWS_AS(cs::preprocess_then_infer(nullptr, buf, 4, 1, 0, 1, nullptr, nullptr, fake_event),
                  std::invalid_argument);
  CHECK_THROWS_AS(cs::preprocess_then_infer(buf, buf + 4, 4, 1, 0, 1, nullptr, nullptr, nullptr),
                  std::invalid_argument);
}

TEST_CASE("calibrate_rounds rejects an empty batch", "[pipeline]") {
  CHECK_THROWS_AS(cs::calibrate_rounds(nullptr, 0), std::invalid_argument);
}

TEST_CASE("pipeline_bound: longest engine plus one fill and drain", "[bound][ex1]") {
  const cs::StageTimes serial{2.0, 3.0, 1.0};  // S = 6, M = 3
  const cs::PipelineBound b = cs::pipeline_bound(serial, 4);
  CHECK(b.longest_ms == Approx(3.0));
  CHECK(b.ideal_ms == Approx(3.0 + 3.0 / 4));
  CHECK(b.ideal_speedup == Approx(6.0 / 3.75));
  // One chunk: nothing overlaps.
  CHECK(cs::pipeline_bound(serial, 1).ideal_ms == Approx(6.0));
  CHECK(cs::pipeline_bound(serial, 1).ideal_speedup == Approx(1.0));
  // Nothing to do: speedup 1 by convention, not a division by zero.
  const cs::PipelineBound zero = cs::pipeline_bound(cs::StageTimes{}, 8);
  CHECK(zero.ideal_ms == 0.0);
  CHECK(zero.ideal_speedup == 1.0);
}

TEST_CASE("pipeline_bound equals a direct simulation of three engines", "[bound][ex1]") {
  const double h2d = GENERATE(0.5, 1.0, 2.7);
  const double kernel = GENERATE(0.0, 1.0, 4.0);
  const double d2h = GENERATE(0.3, 2.7);
  const int chunks = GENERATE(1, 2, 3, 7, 16, 64);
  const cs::StageTimes serial{h2d, kernel, d2h};
  const cs::PipelineBound b = cs::pipeline_bound(serial, chunks);
  CHECK(b.ideal_ms == Approx(simulate_flow_shop_ms(serial, chunks)).epsilon(1e-12));
  CHECK(b.ideal_ms <= serial.total_ms() + 1e-12);
  CHECK(b.ideal_ms >= std::max({h2d, kernel, d2h}) - 1e-12);
}

TEST_CASE("pipeline_bound rejects bad arguments", "[bound][ex1]") {
  CHECK_THROWS_AS(cs::pipeline_bound(cs::StageTimes{1, 1, 1}, 0), std::invalid_argument);
  CHECK_THROWS_AS(cs::pipeline_bound(cs::StageTimes{-1, 1, 1}, 4), std::invalid_argument);
  CHECK_THROWS_AS(cs::pipeline_bound(cs::StageTimes{1, 1, -0.5}, 4), std::invalid_argument);
}

TEST_CASE("validate(StageTimes) rejects negative and non-finite stage times", "[bound]") {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  CHECK_NOTHROW(cs::validate(cs::StageTimes{0, 1.5, 2}));
  CHECK_THROWS_AS(cs::validate(cs::StageTimes{nan, 1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(cs::validate(cs::StageTimes{1, inf, 1}), std::invalid_argument);
  CHECK_THROWS_AS(cs::validate(cs::StageTimes{1, 1, -inf}), std::invalid_argument);
  CHECK_THROWS_AS(cs::validate(cs::StageTimes{1, -0.5, 1}), std::invalid_argument);
}

TEST_CASE("fraction_of_ideal is ideal / pipelined", "[bound]") {
  cs::PipelineBound b;
  b.ideal_ms = 3.0;
  CHECK(cs::fraction_of_ideal(b, 4.0) == Approx(0.75));
  CHECK(cs::fraction_of_ideal(b, 3.0) == Approx(1.0));
  CHECK_THROWS_AS(cs::fraction_of_ideal(b, 0.0), std::invalid_argument);
  CHECK_THROWS_AS(cs::fraction_of_ideal(b, std::nan("")), std::invalid_argument);
}

TEST_CASE("Spans start when both their stream and their engine are free", "[timeline]") {
  // Two streams, three chunks (chunk 2 on stream 0 after chunk 0). Expected starts by hand:
  //   H2D    ends 1, 2, 5 -> starts 0, max(0, 1) = 1, max(c0's D2H end 4, 2) = 4
  //   kernel ends 3, 5, 7 -> starts 1, max(2, 3) = 3, max(5, 5) = 5
  //   D2H    ends 4, 6, 8 -> starts 3, max(5, 4) = 5, max(7, 6) = 7
  const std::vector<cs::ChunkTimes> times = {{0, 1, 3, 4}, {1, 2, 5, 6}, {0, 5, 7, 8}};
  const std::vector<cs::Span> spans = cs::spans_from_chunk_times(times);
  REQUIRE(spans.size() == 9);
  struct Expected {
    int chunk, stream;
    cs::Stage stage;
    double start, end;
  };
  const std::vector<Expected> expected = {
      {0, 0, cs::Stage::h2d, 0, 1}, {0, 0, cs::Stage::kernel, 1, 3}, {0, 0, cs::Stage::d2h, 3, 4},
      {1, 1, cs::Stage::h2d, 1, 2}, {1, 1, cs::Stage::kernel, 3, 5}, {1, 1, cs::Stage::d2h, 5, 6},
      {2, 0, cs::Stage::h2d, 4, 5}, {2, 0, cs::Stage::kernel, 5, 7}, {2, 0, cs::Stage::d2h, 7, 8}};
  for (const Expected& e : expected) {
    const auto it = std::find_if(spans.begin(), spans.end(), [&](const cs::Span& s) {
      return s.chunk == e.chunk && s.stage == e.stage;
    });
    REQUIRE(it != spans.end());
    INFO("chunk " << e.chunk << " " << cs::stage_name(e.stage));
    CHECK(it->stream == e.stream);
    CHECK(it->start_ms == e.start);
    CHECK(it->end_ms == e.end);
  }
  const cs::EngineBusy busy = cs::engine_busy(spans);
  CHECK(busy.h2d_ms == Approx(3.0));
  CHECK(busy.kernel_ms == Approx(6.0));
  CHECK(busy.d2h_ms == Approx(3.0));
}

TEST_CASE("engine_busy counts overlapping spans once", "[timeline]") {
  const std::vector<cs::Span> spans = {{0, 0, cs::Stage::kernel, 0.0, 2.0},
                                       {1, 1, cs::Stage::kernel, 1.0, 3.0},
                                       {2, 0, cs::Stage::kernel, 5.0, 6.0}};
  CHECK(cs::engine_busy(spans).kernel_ms == Approx(4.0));
  CHECK(cs::engine_busy(spans).h2d_ms == 0.0);
  CHECK(cs::engine_busy({}).d2h_ms == 0.0);
}

TEST_CASE("spans_from_chunk_times rejects impossible times", "[timeline]") {
  using V = std::vector<cs::ChunkTimes>;
  CHECK(cs::spans_from_chunk_times(V{}).empty());
  CHECK_THROWS_WITH(cs::spans_from_chunk_times(V{{0, 2, 1, 3}}), Contains("h2d_end <= kernel_end"));
  CHECK_THROWS_AS(cs::spans_from_chunk_times(V{{0, 1, 2, 1.5}}), std::invalid_argument);
  CHECK_THROWS_AS(cs::spans_from_chunk_times(V{{-1, 1, 2, 3}}), std::invalid_argument);
  CHECK_THROWS_AS(cs::spans_from_chunk_times(V{{0, -1, 2, 3}}), std::invalid_argument);
  CHECK_THROWS_AS(cs::spans_from_chunk_times(V{{0, std::nan(""), 2, 3}}), std::invalid_argument);
  // Chunk 1 on the same stream cannot finish its H2D before chunk 0 has left the stream.
  CHECK_THROWS_WITH(cs::spans_from_chunk_times(V{{0, 1, 2, 3}, {0, 2.5, 4, 5}}),
                    Contains("issue order"));
}

TEST_CASE("nice_tick_step picks 1, 2 or 5 times a power of ten", "[timeline]") {
  CHECK(cs::nice_tick_step(10.0, 10) == Approx(1.0));
  CHECK(cs::nice_tick_step(7.3, 10) == Approx(1.0));
  CHECK(cs::nice_tick_step(15.0, 10) == Approx(2.0));
  CHECK(cs::nice_tick_step(23.0, 10) == Approx(5.0));
  CHECK(cs::nice_tick_step(0.9, 10) == Approx(0.1));
  CHECK(cs::nice_tick_step(1.0, 10) == Approx(0.1));
  CHECK(cs::nice_tick_step(600.0, 4) == Approx(200.0));
  CHECK_THROWS_AS(cs::nice_tick_step(0.0, 10), std::invalid_argument);
  CHECK_THROWS_AS(cs::nice_tick_step(1.0, 0), std::invalid_argument);
  CHECK_THROWS_AS(cs::nice_tick_step(std::numeric_limits<double>::infinity(), 10),
                  std::invalid_argument);
}

TEST_CASE("xml_escape escapes the five XML specials", "[timeline]") {
  CHECK(cs::xml_escape("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  CHECK(cs::xml_escape("plain") == "plain");
}

TEST_CASE(
    "timeline_svg draws each span per stream, and per engine when there are streams to overlap",
    "[timeline]") {
  const std::vector<cs::Span> pipelined =
      cs::spans_from_chunk_times({{0, 1, 3, 4}, {1, 2, 5, 6}, {0, 5, 7, 8}});
  const std::vector<cs::Span> serial = cs::spans_from_chunk_times({{0, 3, 9, 12}});
  const std::string svg = cs::timeline_svg(
      {{"serial <1 stream>", 1, serial}, {"pipelined", 2, pipelined}}, "caption & more");
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(svg.size() >= 7);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
  // serial: 3 spans on the stream row only; pipelined: 9 spans on stream rows + 9 on engine rows.
  CHECK(count_of(svg, "class=\"bar ") == 3 + 9 + 9);
  CHECK(count_of(svg, "class=\"bar h2d\"") == 1 + 3 + 3);
  CHECK(count_of(svg, "class=\"bar kernel\"") == 1 + 3 + 3);
  CHECK(count_of(svg, "class=\"bar d2h\"") == 1 + 3 + 3);
  CHECK_THAT(svg, Contains("<title>chunk 2, stream 0, D2H: 7.000 to 8.000 ms</title>"));
  CHECK_THAT(svg, Contains("serial &lt;1 stream&gt;"));
  CHECK_THAT(svg, Contains("caption &amp; more"));
  CHECK_THAT(svg, Contains(">stream 1<"));
  CHECK_THAT(svg, Contains(">H2D copies<"));
  // The axis spans 0..12 ms in steps of 2: the last tick label is 12.
  CHECK_THAT(svg, Contains(">12</text>"));
  CHECK(count_of(svg, "<svg") == 1);
}

TEST_CASE("timeline_svg rejects inconsistent panels", "[timeline]") {
  const std::vector<cs::Span> spans = {{0, 3, cs::Stage::h2d, 0.0, 1.0}};
  CHECK_THROWS_AS(cs::timeline_svg({}, ""), std::invalid_argument);
  CHECK_THROWS_WITH(cs::timeline_svg({{"p", 2, spans}}, ""), Contains("expected 0..1"));
  CHECK_THROWS_AS(cs::timeline_svg({{"p", 0, {}}}, ""), std::invalid_argument);
  CHECK_NOTHROW(cs::timeline_svg({{"empty", 1, {}}}, ""));
}

TEST_CASE("timeline_svg rejects spans with non-finite, negative or absurd times", "[timeline]") {
  const double inf = std::numeric_limits<double>::infinity();
  const auto one = [](double start, double end) {
    return std::vector<cs::TimelinePanel>{{"p", 1, {{0, 0, cs::Stage::h2d, start, end}}}};
  };
  CHECK_THROWS_WITH(cs::timeline_svg(one(0.0, 1.7e308), ""), Contains("expected 0 <= start"));
  CHECK_THROWS_AS(cs::timeline_svg(one(0.0, inf), ""), std::invalid_argument);
  CHECK_THROWS_AS(cs::timeline_svg(one(std::nan(""), std::nan("")), ""), std::invalid_argument);
  CHECK_THROWS_AS(cs::timeline_svg(one(0.0, std::nan("")), ""), std::invalid_argument);
  CHECK_THROWS_AS(cs::timeline_svg(one(-1.0, 1.0), ""), std::invalid_argument);
  CHECK_THROWS_AS(cs::timeline_svg(one(2.0, 1.0), ""), std::invalid_argument);
  CHECK_NOTHROW(cs::timeline_svg(one(0.0, cs::kMaxTimelineMs), ""));
}

TEST_CASE("write_text_file writes the text and names the path it could not open", "[timeline]") {
  // In a fresh temporary folder, never the working directory (which may be read-only).
  namespace fs = std::filesystem;
  std::string dir_template = (fs::temp_directory_path() / "lesson04_test_XXXXXX").string();
  REQUIRE(mkdtemp(dir_template.data()) != nullptr);
  const fs::path dir = dir_template;
  const std::string path = (dir / "timeline.svg").string();
  cs::write_text_file(path, "<svg/>\n");
  std::ifstream file(path);
  std::stringstream content;
  content << file.rdbuf();
  file.close();
  CHECK(content.str() == "<svg/>\n");
  fs::remove_all(dir);
  CHECK_THROWS_WITH(cs::write_text_file("/nonexistent-dir/x.svg", "x"),
                    Contains("/nonexistent-dir/x.svg"));
}

// =============================================================================== GPU tests

TEST_CASE("launch_mix matches the CPU for sizes that are not multiples of the block",
          "[gpu][mix]") {
  const std::size_t n =
      GENERATE(std::size_t{1}, std::size_t{255}, std::size_t{257}, std::size_t{100003});
  const int rounds = GENERATE(0, 5);
  const auto in = random_input(n, 11);
  course::Stream stream;
  course::DeviceBuffer<std::uint32_t> d_in(n), d_out(n);
  // On the kernel's stream: cudaMemcpy from pageable memory may return before its DMA has landed,
  // and a non-blocking stream is not ordered after the legacy default stream that runs it.
  CUDA_CHECK(cudaMemcpyAsync(d_in.data(), in.data(), d_in.bytes(), cudaMemcpyHostToDevice, stream));
  cs::launch_mix(d_in.data(), d_out.data(), n, rounds, stream);
  stream.synchronize();
  CHECK(course::to_host(d_out) == cpu_reference(in, rounds));
  CHECK_NOTHROW(cs::launch_mix(nullptr, nullptr, 0, rounds, stream));  // n == 0: nothing launched
  CHECK_THROWS_AS(cs::launch_mix(nullptr, d_out.data(), n, rounds, stream), std::invalid_argument);
}

TEST_CASE(
    "The pipelined batch equals the serial batch and the CPU, for chunk counts that do not divide "
    "n",
    "[gpu][pipeline][ex2]") {
  const std::size_t n = 10007;  // prime: no chunk count > 1 divides it
  const int chunks = GENERATE(1, 3, 7, 16);
  const int streams = GENERATE(1, 2, 3, 5);
  const int launches = GENERATE(1, 2);
  CAPTURE(chunks, streams, launches);
  const auto input = random_input(n, 1234);
  course::PinnedBuffer<std::uint32_t> in(n), out_serial(n), out_pipelined(n);
  std::copy(input.begin(), input.end(), in.begin());
  std::fill(out_serial.begin(), out_serial.end(), 0u);
  std::fill(out_pipelined.begin(), out_pipelined.end(), 0u);

  cs::Pipeline serial({n, 1, 1, 3, launches});
  serial.enqueue(in.data(), out_serial.data());
  serial.synchronize();
  cs::Pipeline pipelined({n, chunks, streams, 3, launches});
  pipelined.enqueue(in.data(), out_pipelined.data());
  pipelined.synchronize();

  const auto expected = cpu_reference(input, 3 * launches);
  CHECK(std::vector<std::uint32_t>(out_serial.begin(), out_serial.end()) == expected);
  CHECK(std::vector<std::uint32_t>(out_pipelined.begin(), out_pipelined.end()) == expected);
}

TEST_CASE("The pipeline handles empty chunks, n = 0 and n = 1", "[gpu][pipeline][ex2]") {
  const std::size_t n = GENERATE(std::size_t{0}, std::size_t{1}, std::size_t{5});
  CAPTURE(n);
  const auto input = random_input(n, 7);
  course::PinnedBuffer<std::uint32_t> in(n), out(n);
  std::copy(input.begin(), input.end(), in.begin());
  cs::Pipeline pipeline({n, 7, 3, 2, 1});  // 7 chunks: with n = 5 two of them are empty
  cs::PipelineTrace trace(7);
  pipeline.enqueue(in.data(), out.data(), &trace);
  pipeline.synchronize();
  CHECK(std::vector<std::uint32_t>(out.begin(), out.end()) == cpu_reference(input, 2));
  CHECK(trace.read(3).size() == 7);
}

TEST_CASE("The pipeline works from pageable memory and in place", "[gpu][pipeline][ex2]") {
  const std::size_t n = 4099;
  const auto input = random_input(n, 99);
  std::vector<std::uint32_t> data = input;  // pageable; the output overwrites the input
  cs::Pipeline pipeline({n, 5, 2, 4, 1});
  pipeline.enqueue(data.data(), data.data());
  pipeline.synchronize();
  CHECK(data == cpu_reference(input, 4));
}

TEST_CASE("Two batches in a row on one pipeline both come out right", "[gpu][pipeline][ex2]") {
  const std::size_t n = 3001;
  const auto a = random_input(n, 1), b = random_input(n, 2);
  course::PinnedBuffer<std::uint32_t> in_a(n), in_b(n), out_a(n), out_b(n);
  std::copy(a.begin(), a.end(), in_a.begin());
  std::copy(b.begin(), b.end(), in_b.begin());
  cs::Pipeline pipeline({n, 4, 3, 2, 1});
  pipeline.enqueue(in_a.data(), out_a.data());
  pipeline.enqueue(in_b.data(), out_b.data());  // reuses the device buffers: ordered by the fork
  pipeline.synchronize();
  CHECK(std::vector<std::uint32_t>(out_a.begin(), out_a.end()) == cpu_reference(a, 2));
  CHECK(std::vector<std::uint32_t>(out_b.begin(), out_b.end()) == cpu_reference(b, 2));
}

TEST_CASE("The trace gives ordered stage ends that the timeline accepts", "[gpu][pipeline][ex2]") {
  const std::size_t n = 1 << 16;
  course::PinnedBuffer<std::uint32_t> in(n), out(n);
  std::fill(in.begin(), in.end(), 3u);
  cs::Pipeline pipeline({n, 6, 3, 8, 1});
  cs::PipelineTrace trace(6);
  pipeline.enqueue(in.data(), out.data(), &trace);
  pipeline.synchronize();
  const std::vector<cs::ChunkTimes> times = trace.read(3);
  REQUIRE(times.size() == 6);
  for (std::size_t c = 0; c < times.size(); ++c) {
    CHECK(times[c].stream == static_cast<int>(c % 3));
    CHECK(times[c].h2d_end >= 0.0);
    CHECK(times[c].h2d_end <= times[c].kernel_end);
    CHECK(times[c].kernel_end <= times[c].d2h_end);
  }
  const auto spans = cs::spans_from_chunk_times(times);
  CHECK(spans.size() == 18);
  CHECK_NOTHROW(cs::timeline_svg({{"pipelined", 3, spans}}, "test"));
}

TEST_CASE("enqueue_chunks runs chunk c on stream c % K, and copies overlap other streams' kernels",
          "[gpu][pipeline][ex2][cupti]") {
  // What the exercise is for, observed in CUPTI's records of what the GPU ran: each lane's stream
  // got its chunks' copies and kernels, and some copy ran while a kernel of another stream ran.
  // Every chunk on one stream, or a synchronisation after each chunk, gives the same bytes and
  // no overlap. The kernels are long (many rounds) next to their 1 MiB copies, so on an idle GPU
  // the next chunk's copy always finds a kernel running; under a tool that serialises work (a
  // sanitizer) it would not, which is why this test is left out there.
  constexpr int kStreams = 4, kChunks = 8;
  const cs::PipelineConfig cfg{std::size_t{1} << 21, kChunks, kStreams, 2000, 1};
  const auto input = random_input(cfg.n, 21);
  course::PinnedBuffer<std::uint32_t> in(cfg.n), out(cfg.n);
  std::copy(input.begin(), input.end(), in.begin());
  const std::size_t lane_elems = cs::chunk_size(cfg.n, cfg.chunks, 0);
  std::vector<course::Stream> streams(kStreams);
  std::vector<course::DeviceBuffer<std::uint32_t>> d_in, d_out;
  std::vector<cs::StreamLane> lanes;
  for (int l = 0; l < kStreams; ++l) {
    d_in.emplace_back(lane_elems);
    d_out.emplace_back(lane_elems);
    lanes.push_back({streams[l], d_in.back().data(), d_out.back().data()});
  }
  std::vector<std::uint32_t> ids;
  for (const auto& s : streams) ids.push_back(course::cupti::stream_id(s));

  course::cupti::ActivityTrace trace;
  cs::enqueue_chunks(cfg, in.data(), out.data(), lanes, nullptr);
  const std::vector<course::cupti::GpuActivity> ran = trace.stop();
  CHECK(std::vector<std::uint32_t>(out.begin(), out.end()) == cpu_reference(input, cfg.rounds));

  using Kind = course::cupti::GpuActivity::Kind;
  for (int l = 0; l < kStreams; ++l) {
    INFO("stream of lane " << l << ": chunks " << l << " and " << l + kStreams);
    const auto count = [&](Kind kind, cudaMemcpyKind dir) {
      return std::count_if(ran.begin(), ran.end(), [&](const course::cupti::GpuActivity& a) {
        return a.stream_id == ids[l] && a.kind == kind &&
               (kind == Kind::kernel || a.copy_kind == dir);
      });
    };
    CHECK(count(Kind::memcpy, cudaMemcpyHostToDevice) == kChunks / kStreams);
    CHECK(count(Kind::kernel, cudaMemcpyDefault) == kChunks / kStreams);
    CHECK(count(Kind::memcpy, cudaMemcpyDeviceToHost) == kChunks / kStreams);
  }
  bool copy_during_kernel = false;
  for (const auto& m : ran) {
    for (const auto& k : ran) {
      copy_during_kernel =
          copy_during_kernel || (m.kind == Kind::memcpy && k.kind == Kind::kernel &&
                                 m.stream_id != k.stream_id && course::cupti::overlap(m, k));
    }
  }
  INFO("no copy ran while a kernel of another stream ran: was the host waiting between chunks?");
  CHECK(copy_during_kernel);
}

TEST_CASE("Pipeline::enqueue rejects null buffers and a trace for another chunk count",
          "[gpu][pipeline]") {
  cs::Pipeline pipeline({16, 4, 2, 1, 1});
  course::PinnedBuffer<std::uint32_t> buf(16);
  CHECK_THROWS_WITH(pipeline.enqueue(nullptr, buf.data()), Contains("null pointer"));
  CHECK_THROWS_AS(pipeline.enqueue(buf.data(), nullptr), std::invalid_argument);
  cs::PipelineTrace small(3), large(5);
  CHECK_THROWS_WITH(pipeline.enqueue(buf.data(), buf.data(), &small), Contains("expected 4"));
  CHECK_THROWS_AS(pipeline.enqueue(buf.data(), buf.data(), &large), std::invalid_argument);
  cs::Pipeline empty({0, 4, 2, 1, 1});
  CHECK_NOTHROW(empty.enqueue(nullptr, nullptr));  // n == 0: no memory needed
  empty.synchronize();
}

TEST_CASE("An event orders the inference stream after a slow preprocess stream",
          "[gpu][events][ex3]") {
  // Designed to fail without the event: the producer spins for 20 ms before it writes, so an
  // unordered consumer would read the zeros that are there now.
  const std::size_t n = 4096;
  const std::uint32_t value = 0x1234u;
  const int rounds = 3;
  course::DeviceBuffer<std::uint32_t> tensor(n), result(n);
  course::Stream preprocess, infer;
  // On the producer's stream: a plain cudaMemset runs on the legacy default stream, which these
  // non-blocking streams are not ordered after.
  CUDA_CHECK(cudaMemsetAsync(tensor.data(), 0, tensor.bytes(), preprocess));
  course::Event ready(cudaEventDisableTiming);
  cs::preprocess_then_infer(tensor.data(), result.data(), n, value, kProducerSpinNs, rounds,
                            preprocess, infer, ready);
  infer.synchronize();  // only the consumer's stream: the event must have ordered it
  const std::vector<std::uint32_t> got = course::to_host(result);
  CHECK(got == std::vector<std::uint32_t>(n, cs::mix_rounds(value, rounds)));
  CHECK(cs::mix_rounds(value, rounds) != cs::mix_rounds(0u, rounds));  // stale data would show
}

TEST_CASE("preprocess_then_infer orders the streams without blocking the host",
          "[gpu][events][ex3][cupti]") {
  // The order of the calls, as CUPTI saw them: the record on the preprocess stream comes before
  // the wait of the inference stream, and the host waits for nothing. A cudaStreamSynchronize of
  // the producer instead of the event gives the same values, and a stalled host.
  const std::size_t n = 1024;
  course::DeviceBuffer<std::uint32_t> tensor(n), result(n);
  course::Stream preprocess, infer;
  course::Event ready(cudaEventDisableTiming);
  std::vector<course::cupti::ApiCall> calls;
  {
    course::cupti::ApiTrace trace;
    cs::preprocess_then_infer(tensor.data(), result.data(), n, 5u, kProducerSpinNs, 2, preprocess,
                              infer, ready);
    calls = trace.calls();
  }
  infer.synchronize();
  CHECK(course::to_host(result) == std::vector<std::uint32_t>(n, cs::mix_rounds(5u, 2)));
  using Kind = course::cupti::ApiCall::Kind;
  std::ptrdiff_t record = -1, wait = -1;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& c = calls[i];
    CAPTURE(i);
    CHECK(c.kind != Kind::stream_synchronize);
    CHECK(c.kind != Kind::device_synchronize);
    CHECK(c.kind != Kind::event_synchronize);
    if (c.kind == Kind::event_record && c.event == ready.get() && c.stream == preprocess.get() &&
        record < 0)
      record = static_cast<std::ptrdiff_t>(i);
    if (c.kind == Kind::stream_wait_event && c.event == ready.get() && c.stream == infer.get())
      wait = static_cast<std::ptrdiff_t>(i);
  }
  CHECK(record >= 0);
  CHECK(wait > record);
}

TEST_CASE("A host function runs after the work queued before it", "[gpu][events]") {
  const std::size_t n = 1024;
  course::DeviceBuffer<std::uint32_t> d(n);
  course::PinnedBuffer<std::uint32_t> host(n);
  std::fill(host.begin(), host.end(), 0u);
  course::Stream stream;
  cs::HostProbe probe;
  probe.watched = host.data() + n - 1;  // the last element the copy writes
  cs::launch_spin_then_fill(d.data(), n, 77u, kProducerSpinNs, stream);
  CUDA_CHECK(cudaMemcpyAsync(host.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, stream));
  cs::enqueue_host_probe(stream, probe);
  stream.synchronize();
  CHECK(probe.calls.load() == 1);
  CHECK(probe.seen.load() == 77u);  // 0 if it had run before the producer and the copy

  cs::HostProbe unwatched;
  CHECK_THROWS_AS(cs::enqueue_host_probe(stream, unwatched), std::invalid_argument);
}

TEST_CASE("event_done and stream_idle answer 'not yet' without leaving an error behind",
          "[gpu][events]") {
  course::Stream stream;
  course::Event never_recorded;
  CHECK(cs::event_done(never_recorded));  // an event never recorded counts as complete
  course::Event done;
  cs::launch_spin(1, 32, 5'000'000, stream);  // 5 ms
  done.record(stream);
  int polls = 0;
  while (!cs::event_done(done)) ++polls;
  CHECK(cs::stream_idle(stream));
  CHECK(cudaPeekAtLastError() == cudaSuccess);  // no cudaErrorNotReady left for the next check
  CHECK_NOTHROW(cs::launch_spin(1, 32, 1000, stream));
  stream.synchronize();
  INFO("polled " << polls << " times");
  SUCCEED();
}

TEST_CASE("The stream priority range has the most urgent priority first", "[gpu][events]") {
  const cs::PriorityRange range = cs::stream_priority_range();
  CHECK(range.greatest <= range.least);
  CHECK_NOTHROW(course::Stream(cudaStreamNonBlocking, range.greatest));
}

TEST_CASE("Reading after synchronising sees the copied result", "[gpu][bug][ex4]") {
  // The unsynchronised version would see the sentinel: the copy waits 20 ms behind the producer.
  const std::size_t n = GENERATE(std::size_t{1}, std::size_t{4096});
  course::DeviceBuffer<std::uint32_t> d(n);
  course::PinnedBuffer<std::uint32_t> host(n);
  std::fill(host.begin(), host.end(), 0u);
  course::Stream stream;
  CHECK(cs::read_result_synchronised(d.data(), host.data(), n, 7u, kProducerSpinNs, stream) ==
        7u * n);
}

TEST_CASE("read_result_synchronised waits for something queued after the copy",
          "[gpu][bug][ex4][cupti]") {
  // Waiting on an event recorded BEFORE the copy (after the producer) returns while the copy is
  // about to start; the DMA of 16 KiB then outruns the host's sum, and the value is right in any
  // run. Only the order of the calls shows it: after the cudaMemcpyAsync into `host`, the host
  // must wait on that stream (or device), or on an event recorded on it after the copy.
  const std::size_t n = 4096;
  course::DeviceBuffer<std::uint32_t> d(n);
  course::PinnedBuffer<std::uint32_t> host(n);
  course::Stream stream;
  std::vector<course::cupti::ApiCall> calls;
  std::uint64_t sum = 0;
  {
    course::cupti::ApiTrace trace;
    sum = cs::read_result_synchronised(d.data(), host.data(), n, 7u, kProducerSpinNs, stream);
    calls = trace.calls();
  }
  CHECK(sum == 7u * n);
  using Kind = course::cupti::ApiCall::Kind;
  std::ptrdiff_t copy = -1;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (calls[i].kind == Kind::memcpy_async && calls[i].dst == host.data())
      copy = static_cast<std::ptrdiff_t>(i);
  }
  REQUIRE(copy >= 0);
  bool waited = false;
  std::vector<cudaEvent_t> after_copy;  // events recorded on the stream after the copy
  for (std::size_t i = static_cast<std::size_t>(copy) + 1; i < calls.size(); ++i) {
    const auto& c = calls[i];
    if (c.kind == Kind::event_record && c.stream == stream.get()) after_copy.push_back(c.event);
    waited = waited || c.kind == Kind::device_synchronize ||
             (c.kind == Kind::stream_synchronize && c.stream == stream.get()) ||
             (c.kind == Kind::event_synchronize &&
              std::find(after_copy.begin(), after_copy.end(), c.event) != after_copy.end());
  }
  CHECK(waited);
}

TEST_CASE("read_result_synchronised handles n = 0 and rejects null buffers", "[gpu][bug][ex4]") {
  course::Stream stream;
  CHECK(cs::read_result_synchronised(nullptr, nullptr, 0, 7u, 0, stream) == 0u);
  course::PinnedBuffer<std::uint32_t> host(4);
  CHECK_THROWS_AS(cs::read_result_synchronised(nullptr, host.data(), 4, 7u, 0, stream),
                  std::invalid_argument);
}

TEST_CASE("is_pinned tells page-locked host memory from the rest", "[gpu][pipeline]") {
  course::PinnedBuffer<std::uint32_t> pinned(16);
  std::vector<std::uint32_t> pageable(16);
  course::DeviceBuffer<std::uint32_t> device(16);
  CHECK(cs::is_pinned(pinned.data()));
  CHECK_FALSE(cs::is_pinned(pageable.data()));
  CHECK_FALSE(cs::is_pinned(device.data()));
  CHECK_FALSE(cs::is_pinned(nullptr));
}

TEST_CASE("Graph replay gives the stream version's result, with the memory's contents at replay",
          "[gpu][graph][ex5]") {
  const std::size_t n = 10007;
  const int launches = GENERATE(1, 3);
  const cs::PipelineConfig cfg{n, 5, 3, 2, launches};
  const auto first = random_input(n, 5), second = random_input(n, 6);
  course::PinnedBuffer<std::uint32_t> in(n), out_graph(n), out_stream(n);

  std::copy(first.begin(), first.end(), in.begin());
  cs::Pipeline by_stream(cfg);
  by_stream.enqueue(in.data(), out_stream.data());
  by_stream.synchronize();

  cs::Pipeline pipeline(cfg);
  std::fill(out_graph.begin(), out_graph.end(), 0u);
  cs::PipelineGraph g = cs::capture_pipeline(pipeline, in.data(), out_graph.data());
  CHECK(std::all_of(out_graph.begin(), out_graph.end(), [](std::uint32_t v) { return v == 0u; }));
  // Each chunk is a copy, `launches` kernels and a copy: at least that many nodes.
  CHECK(g.graph.node_count() >= static_cast<std::size_t>(5 * (2 + launches)));
  g.exec.launch(pipeline.origin());
  pipeline.synchronize();
  CHECK(std::vector<std::uint32_t>(out_graph.begin(), out_graph.end()) ==
        std::vector<std::uint32_t>(out_stream.begin(), out_stream.end()));
  CHECK(std::vector<std::uint32_t>(out_graph.begin(), out_graph.end()) ==
        cpu_reference(first, 2 * launches));

  std::copy(second.begin(), second.end(), in.begin());  // same address, new contents
  g.exec.launch(pipeline.origin());
  g.exec.launch(pipeline.origin());  // replays queue behind each other on one stream
  pipeline.synchronize();
  CHECK(std::vector<std::uint32_t>(out_graph.begin(), out_graph.end()) ==
        cpu_reference(second, 2 * launches));
}

TEST_CASE("capture_pipeline rejects pageable memory and leaves the pipeline usable",
          "[gpu][graph][ex5]") {
  const std::size_t n = 1000;
  std::vector<std::uint32_t> pageable = random_input(n, 8);
  const auto expected = cpu_reference(pageable, 1);
  cs::Pipeline pipeline({n, 4, 2, 1, 1});
  CHECK_THROWS_AS(cs::capture_pipeline(pipeline, pageable.data(), pageable.data()),
                  std::invalid_argument);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  CUDA_CHECK(cudaStreamIsCapturing(pipeline.origin(), &status));
  CHECK(status == cudaStreamCaptureStatusNone);
  pipeline.enqueue(pageable.data(), pageable.data());
  pipeline.synchronize();
  CHECK(pageable == expected);
}
