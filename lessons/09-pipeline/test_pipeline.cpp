// Tests of lesson 09: the host logic on the CPU (batcher, slot ring, statistics, bounds, config,
// synthetic video, trace JSON), and the pipeline end to end on the GPU.
//
// The oracle of the GPU tests is the synthetic video's own truth (SyntheticVideo::truth, host
// code that draws the frames): every frame's detections must match its true boxes (IoU >= 0.9 in
// source pixels, right class, nothing extra), every frame exactly once. The engine computes its
// boxes from the pixels it receives, so a frame that went to the wrong buffer, a slot
// overwritten before its copy, or an image of a batch read at the wrong offset gives wrong boxes.
#include <cuda_runtime_api.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>

#include "affine_warp.cuh"  // lesson 06: the NV12 conversion
#include "common/cuda_check.hpp"
#include "common/memory.hpp"
#include "common/process.hpp"
#include "common/stream.hpp"
#include "common/testing.hpp"
#include "pipeline.cuh"

extern char** environ;

using course::testing::Contains;
using namespace lesson09;
using namespace std::chrono_literals;

// The exception's type and its message (Catch2 v2 and v3 both have these two).
#define CHECK_THROWS_AS_WITH(expr, type, matcher) \
  do {                                            \
    CHECK_THROWS_AS(expr, type);                  \
    CHECK_THROWS_WITH(expr, matcher);             \
  } while (false)

namespace {

// Frames whose detections do not match their truth, and frames served other than once.
struct RunCheck {
  int wrong = 0;
  int missing = 0;
  int repeated = 0;
  std::string first_problem;
};

RunCheck check_run(const RunReport& report, const PipelineConfig& c) {
  const Camera camera(c);  // frame k's truth at frame k's size (resize_at)
  RunCheck out;
  std::map<std::int64_t, int> seen;
  for (const FrameResult& r : report.results) {
    if (++seen[r.frame] > 1) {
      ++out.repeated;
      continue;
    }
    if (r.frame < 0 || r.frame >= c.frames) {
      ++out.wrong;
      if (out.first_problem.empty()) out.first_problem = "unknown frame id";
      continue;
    }
    const std::string why = check_frame(camera.video(r.frame).truth(r.frame), r.detections);
    if (!why.empty()) {
      ++out.wrong;
      if (out.first_problem.empty()) {
        out.first_problem = "frame " + std::to_string(r.frame) + " (worker " +
                            std::to_string(r.worker) + ", batch " + std::to_string(r.batch) +
                            "): " + why;
      }
    }
  }
  for (const std::int64_t d : report.dropped) seen[d] += 1;
  for (std::int64_t k = 0; k < c.frames; ++k) {
    if (seen.count(k) == 0) ++out.missing;
  }
  return out;
}

// Every frame served once, none missing, every frame's boxes right (the checks of check_run).
void check_every_frame_right(const RunReport& report, const PipelineConfig& c) {
  const RunCheck r = check_run(report, c);
  INFO(r.first_problem);
  CHECK(report.results.size() == static_cast<std::size_t>(c.frames));
  CHECK(r.wrong == 0);
  CHECK(r.missing == 0);
  CHECK(r.repeated == 0);
}

// Frames per configuration of the big GPU test: 1000, or LESSON09_TEST_FRAMES (a smaller count
// keeps compute-sanitizer runs short; the H200 sanitizer runs used 64).
std::int64_t grid_frames() {
  const char* env = std::getenv("LESSON09_TEST_FRAMES");
  return env != nullptr && std::atoll(env) > 0 ? std::atoll(env) : 1000;
}

PipelineConfig small_config() {
  PipelineConfig c;
  c.frames = 16;
  return c;
}

// Polls `ready` every millisecond for at most `limit`: a bounded wait that gives something the
// chance to happen, never an assertion about how long it took.
template <class F>
bool wait_until(F ready, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!ready()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Whatever way a gate test leaves (a failed REQUIRE, an exception), its gates are opened and its
// streams drained before the buffers the GPU uses are freed. Declared after them.
struct OpenGatesOnExit {
  std::vector<StreamGate*> gates;
  std::vector<cudaStream_t> streams;
  ~OpenGatesOnExit() {
    for (StreamGate* g : gates) g->open();
    for (cudaStream_t s : streams) cudaStreamSynchronize(s);
  }
};

// Checked after the test's own launches and copies, before the code under test runs: a gate
// that already timed out means one of them blocked the host until the guard fired (kernel
// launches made synchronous, CUDA_LAUNCH_BLOCKING=1 say), so no gate can hold a stream back
// while the host goes on, and the test has nothing to observe.
bool host_waited_for(const StreamGate& gate) {
  return gate.state() == StreamGate::State::timed_out;
}

// A child probe (CHILD_PROBE) run with a deadline: killed (SIGKILL) if it has not ended by then,
// so that a pipeline that hangs fails its test instead of hanging the suite.
struct ChildRun {
  int exit_code = -1;  // the exit status, or 128 + the signal that ended it
  bool timed_out = false;
  std::string output;
  std::map<std::string, std::string> values;  // its "key=value" lines
  std::string value(const std::string& key) const {
    const auto it = values.find(key);
    return it == values.end() ? "(not reported)" : it->second;
  }
};

ChildRun run_probe_with_deadline(const std::string& probe, std::chrono::seconds deadline) {
  int fds[2];
  if (pipe(fds) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  const std::string exe = course::self_executable();
  std::vector<std::string> args = {exe, "--child-probe", probe};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw std::system_error(rc, std::generic_category(), "posix_spawn " + exe);
  }
  ChildRun run;
  const auto end = std::chrono::steady_clock::now() + deadline;
  const auto ms_left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(end -
                                                                 std::chrono::steady_clock::now())
        .count();
  };
  char buf[4096];
  for (;;) {  // read until the child closes its output (it ended) or the deadline passes
    const long long left = ms_left();
    if (left <= 0) {
      run.timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n > 0) {
      run.output.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  for (;;) {  // its output is closed: it is ending, but give that the same deadline
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0 && errno != EINTR)
      throw std::system_error(errno, std::generic_category(), "waitpid");
    if (run.timed_out || ms_left() <= 0) {
      run.timed_out = true;
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos && eq > 0 && line.find(' ') > eq) {
      run.values[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return run;
}

// A PipelineError as key=value lines for the parent (what() on one line).
void report_pipeline_error(const PipelineError& e) {
  std::string what = e.what();
  std::replace(what.begin(), what.end(), '\n', ' ');
  course::testing::report("outcome", "PipelineError");
  course::testing::report("stage", e.stage());
  course::testing::report("frame", e.frame());
  course::testing::report("what", what);
}

}  // namespace

// ------------------------------------------------------------------------- exercise 1 (CPU)

TEST_CASE("batch_to_take: full batches at once, partial ones at the deadline", "[ex1]") {
  CHECK(batch_to_take(0, 1e9, 4, 100, false) == 0);  // nothing queued
  CHECK(batch_to_take(0, 0, 4, 100, true) == 0);
  CHECK(batch_to_take(4, 0, 4, 100, false) == 4);    // full
  CHECK(batch_to_take(9, 0, 4, 100, false) == 4);    // more than a batch: a full one
  CHECK(batch_to_take(3, 50, 4, 100, false) == 0);   // partial, before the deadline: wait
  CHECK(batch_to_take(3, 100, 4, 100, false) == 3);  // at the deadline: go
  CHECK(batch_to_take(3, 150, 4, 100, false) == 3);
  CHECK(batch_to_take(2, 0, 4, 100, true) == 2);    // closing: no more will come
  CHECK(batch_to_take(1, 0, 4, 0, false) == 1);     // max_wait 0: whatever is there
  CHECK(batch_to_take(1, 0, 1, 1000, false) == 1);  // batch 1 never waits
}

// ------------------------------------------------------------------------- exercise 2

TEST_CASE("bind_worker_device rejects a negative ordinal before any CUDA call", "[ex2]") {
  CHECK_THROWS_AS_WITH(bind_worker_device(-1), std::invalid_argument, Contains(">= 0"));
}

TEST_CASE("bind_worker_device binds the calling thread only", "[ex2][gpu]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  const int target = count - 1;  // the last GPU (device 0 on a one-GPU machine)
  int seen_in_thread = -2, seen_after_bind = -2;
  std::exception_ptr error;  // an exception must not escape a std::thread (std::terminate)
  std::thread t([&] {
    try {
      bind_worker_device(target);
      cudaGetDevice(&seen_after_bind);
      std::thread inner([&] { cudaGetDevice(&seen_in_thread); });  // a new thread starts on 0
      inner.join();
    } catch (...) {
      error = std::current_exception();
    }
  });
  t.join();
  if (error) std::rethrow_exception(error);
  CHECK(seen_after_bind == target);
  CHECK(seen_in_thread == 0);
}

// ------------------------------------------------------------------------- slot ring (CPU)

TEST_CASE("SlotRing: free -> writing -> filled -> in flight -> free, oldest first", "[ring]") {
  SlotRing ring(3, Backpressure::block);
  const Clock::time_point t0 = Clock::now();
  const int a = *ring.acquire();
  CHECK(ring.state(a) == SlotRing::State::writing);
  ring.publish(a, 10, t0);
  CHECK(ring.state(a) == SlotRing::State::filled);
  const int b = *ring.acquire();
  ring.publish(b, 11, t0);
  CHECK_THROWS_AS(ring.publish(b, 12, t0), std::logic_error);  // not being written
  const auto taken = ring.take(4, 0, 1ms);
  REQUIRE(taken.size() == 2);
  CHECK(taken[0].frame == 10);
  CHECK(taken[1].frame == 11);
  CHECK(ring.state(taken[0].slot) == SlotRing::State::in_flight);
  ring.release(taken[0].slot);
  CHECK(ring.state(taken[0].slot) == SlotRing::State::free);
  CHECK_THROWS_AS(ring.release(taken[0].slot), std::logic_error);  // released twice
  CHECK(ring.take(4, 0, 1ms).empty());                             // nothing filled
  CHECK_THROWS_AS(SlotRing(0, Backpressure::block), std::invalid_argument);
}

TEST_CASE("SlotRing: block makes the producer wait for a release", "[ring]") {
  SlotRing ring(1, Backpressure::block);
  ring.publish(*ring.acquire(), 0, Clock::now());
  const auto taken = ring.take(1, 0, 1ms);
  REQUIRE(taken.size() == 1);
  std::atomic<bool> got{false};
  std::thread producer([&] {
    const auto s = ring.acquire();
    got = s.has_value();
  });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(got.load());  // the only slot is in flight: the producer waits
  ring.release(taken[0].slot);
  producer.join();
  CHECK(got.load());
  CHECK(ring.dropped().empty());
}

TEST_CASE("SlotRing: drop_oldest reuses the oldest unstarted frame and lists it", "[ring]") {
  SlotRing ring(2, Backpressure::drop_oldest);
  const Clock::time_point t = Clock::now();
  for (int k = 0; k < 5; ++k) ring.publish(*ring.acquire(), k, t);
  // Frames 0, 1, 2 were dropped in that order; 3 and 4 wait.
  CHECK(ring.dropped() == std::vector<std::int64_t>{0, 1, 2});
  const auto taken = ring.take(2, 0, 1ms);
  REQUIRE(taken.size() == 2);
  CHECK(taken[0].frame == 3);
  CHECK(taken[1].frame == 4);
  // Both in flight: not even drop_oldest may take a slot the GPU may still read.
  std::atomic<bool> got{false};
  std::thread producer([&] { got = ring.acquire().has_value(); });
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(got.load());
  ring.release(taken[1].slot);
  producer.join();
  CHECK(got.load());
}

TEST_CASE("SlotRing: the batcher waits for a full batch until max_wait", "[ring]") {
  SlotRing ring(8, Backpressure::block);
  ring.publish(*ring.acquire(), 0, Clock::now());
  CHECK(ring.take(4, 1e6, 5ms).empty());  // 1 of 4, deadline 1 s away: nothing within 5 ms
  const auto t0 = Clock::now();
  const auto taken = ring.take(4, 20e3, 2s);  // deadline 20 ms after capture: a partial batch
  CHECK(taken.size() == 1);
  CHECK(Clock::now() - t0 < 1s);
  for (int k = 1; k <= 4; ++k) ring.publish(*ring.acquire(), k, Clock::now());
  CHECK(ring.take(4, 1e6, 5ms).size() == 4);  // full: at once
}

TEST_CASE("SlotRing: close drains, abort wakes everyone", "[ring]") {
  SlotRing ring(2, Backpressure::block);
  ring.publish(*ring.acquire(), 0, Clock::now());
  ring.close();
  CHECK_FALSE(ring.acquire().has_value());
  CHECK_FALSE(ring.finished());
  CHECK(ring.take(4, 1e6, 1ms).size() == 1);  // closing: the partial batch goes
  CHECK(ring.finished());

  SlotRing r2(1, Backpressure::block);
  r2.publish(*r2.acquire(), 0, Clock::now());
  r2.take(1, 0, 1ms);
  // Catch2's assertions are not thread-safe, and an exception must not escape a std::thread:
  // the threads only record what they saw.
  std::atomic<int> producer_got{-1}, worker_got{-1};
  std::thread waiting_producer([&] {
    try {
      producer_got = r2.acquire().has_value() ? 1 : 0;
    } catch (...) {
    }
  });
  std::thread waiting_worker([&] {
    try {
      worker_got = static_cast<int>(r2.take(1, 0, 10s).size());
    } catch (...) {
    }
  });
  std::this_thread::sleep_for(10ms);
  r2.abort();
  waiting_producer.join();
  waiting_worker.join();
  CHECK(producer_got == 0);  // woken, nothing acquired
  CHECK(worker_got == 0);    // woken, nothing taken
  CHECK(r2.aborted());
}

// ------------------------------------------------------------------------- statistics, bounds

TEST_CASE("percentiles are nearest-rank", "[stats]") {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // 1..100, in any order
  const LatencySummary s = summarize(v);
  CHECK(s.count == 100);
  CHECK(s.p50 == 50);
  CHECK(s.p90 == 90);
  CHECK(s.p99 == 99);
  CHECK(s.max == 100);
  CHECK(s.mean == 50.5);
  CHECK(percentile({7}, 99) == 7);
  CHECK(percentile({3, 1, 2}, 0) == 1);
  CHECK(percentile({1, 2, 3, 4}, 50) == 2);  // ceil(0.5 * 4) = 2nd smallest
  CHECK(summarize({}).count == 0);
  CHECK_THROWS_AS(percentile({}, 50), std::invalid_argument);
  CHECK_THROWS_AS(percentile({1}, 101), std::invalid_argument);
}

TEST_CASE("the bound is the slowest stage", "[bound]") {
  // 1080p BGR = 6,220,800 bytes at 50 GB/s: 8037.6 frames/s.
  CHECK(fps_from_bandwidth(50, 1920 * 1080 * 3) ==
        course::testing::Approx(50e9 / 6220800.0).epsilon(1e-12));
  CHECK(fps_from_us(250) == 4000);
  const Bound b = bound_of({8000, 4000, 1200});
  CHECK(b.stage == "host");
  CHECK(b.fps == 1200);
  CHECK(bound_of({900, 4000, 1200}).stage == "upload");
  CHECK(bound_of({9000, 4000, 5000}).stage == "gpu");
  CHECK(percent_of_bound(1080, b) == course::testing::Approx(90.0));
  CHECK_THROWS_AS(bound_of({0, 1, 1}), std::invalid_argument);
  CHECK_THROWS_AS(fps_from_us(-1), std::invalid_argument);
}

// ------------------------------------------------------------------------- configuration

TEST_CASE("bad configurations raise invalid_argument before any thread starts", "[config]") {
  const EngineSpec never_called{TensorShape{1, 3, 640, 640}, nullptr};
  auto bad = [&](auto edit, const char* expected) {
    PipelineConfig c = small_config();
    edit(c);
    CHECK_THROWS_AS_WITH(validate(c), std::invalid_argument, Contains(expected));
    // run_pipeline validates first: no CUDA call, no thread (this runs without a GPU).
    CHECK_THROWS_AS(run_pipeline(c, never_called), std::invalid_argument);
  };
  bad([](PipelineConfig& c) { c.workers = 0; }, "workers");
  bad([](PipelineConfig& c) { c.batch = 0; }, "batch");
  bad([](PipelineConfig& c) { c.batch = 33; }, "batch");
  bad([](PipelineConfig& c) { c.queue_depth = 0; }, "queue_depth");
  bad(
      [](PipelineConfig& c) {
        c.batch = 4;
        c.queue_depth = 3;
      },
      "queue_depth");
  bad([](PipelineConfig& c) { c.frame_width = 0; }, "frame size");
  bad([](PipelineConfig& c) { c.frame_height = 0; }, "frame size");
  bad([](PipelineConfig& c) { c.input_width = 0; }, "input size");
  bad([](PipelineConfig& c) { c.devices.clear(); }, "devices");
  bad([](PipelineConfig& c) { c.devices = {-1}; }, "device");
  bad([](PipelineConfig& c) { c.inflight = 3; }, "inflight");
  bad([](PipelineConfig& c) { c.num_classes = 0; }, "num_classes");
  bad([](PipelineConfig& c) { c.max_wait_us = -1; }, "max_wait_us");
  bad([](PipelineConfig& c) { c.rate_fps = -5; }, "rate_fps");
  bad([](PipelineConfig& c) { c.frames = -1; }, "frames");
  bad([](PipelineConfig& c) { c.post.conf_threshold = 2; }, "conf");
  bad([](PipelineConfig& c) { c.post.nms = lesson08::NmsVersion::v1_fast_parallel; }, "greedy");
  bad([](PipelineConfig& c) { c.input_dtype = static_cast<lesson08::DType>(7); }, "input_dtype");
  bad(
      [](PipelineConfig& c) {
        c.frame_width = 100;
        c.frame_height = 40;
      },
      "SyntheticVideo");
  bad([](PipelineConfig& c) { c.resize_at = -2; }, "resize_at");
  bad(
      [](PipelineConfig& c) {
        c.resize_at = 5;
        c.resize_width = 0;
      },
      "resize size");
  bad(
      [](PipelineConfig& c) {
        c.resize_at = 5;
        c.resize_width = 100;
        c.resize_height = 40;
      },
      "SyntheticVideo");

  PipelineConfig good = small_config();
  CHECK_NOTHROW(validate(good));
  // An engine whose input does not match the pipeline's: before any thread, too.
  for (const TensorShape s :
       {TensorShape{1, 3, 640, 320}, TensorShape{1, 1, 640, 640}, TensorShape{1, 3, 320, 640}}) {
    CHECK_THROWS_AS_WITH(validate_engine_shape(good, s), std::invalid_argument,
                         Contains("does not match"));
    CHECK_THROWS_AS(run_pipeline(good, EngineSpec{s, nullptr}), std::invalid_argument);
  }
  // An engine whose input tensor has another type than the letterbox writes.
  EngineSpec f32_engine{TensorShape{1, 3, 640, 640}, nullptr, lesson08::DType::f32};
  CHECK_THROWS_AS_WITH(run_pipeline(good, f32_engine), std::invalid_argument,
                       Contains("set PipelineConfig::input_dtype"));
  CHECK_THROWS_AS_WITH(run_serial_tutorial(good, f32_engine), std::invalid_argument,
                       Contains("input tensor is f32"));
  good.batch = 4;
  CHECK_THROWS_AS(validate_engine_shape(good, TensorShape{2, 3, 640, 640}), std::invalid_argument);
  CHECK_NOTHROW(validate_engine_shape(good, TensorShape{8, 3, 640, 640}));
}

TEST_CASE("validate_devices names the bad ordinal and the valid range", "[config]") {
  const auto with_devices = [](std::vector<int> devices) {
    PipelineConfig c = small_config();
    c.devices = std::move(devices);
    return c;
  };
  CHECK_NOTHROW(validate_devices(with_devices({0}), 1));
  CHECK_NOTHROW(validate_devices(with_devices({1, 0, 1}), 2));
  CHECK_THROWS_AS_WITH(
      validate_devices(with_devices({1}), 1), std::invalid_argument,
      Contains("device ordinal 1 is out of range") && Contains("the valid ordinals are 0 to 0"));
  CHECK_THROWS_AS_WITH(
      validate_devices(with_devices({0, 2}), 2), std::invalid_argument,
      Contains("device ordinal 2 is out of range") && Contains("the valid ordinals are 0 to 1"));
  CHECK_THROWS_AS_WITH(
      validate_devices(with_devices({-1}), 4), std::invalid_argument,
      Contains("device ordinal -1 is out of range") && Contains("the valid ordinals are 0 to 3"));
  CHECK_THROWS_AS_WITH(validate_devices(with_devices({0}), 0), std::invalid_argument,
                       Contains("no CUDA device"));
  // validate() makes no CUDA call, so it cannot know the count: it names the range by the call
  // that gives it.
  CHECK_THROWS_AS_WITH(validate(with_devices({-1})), std::invalid_argument,
                       Contains("0 to cudaGetDeviceCount() - 1") && Contains("got -1"));
}

TEST_CASE("a resolution change: frame sizes and the largest frame", "[config]") {
  PipelineConfig c = small_config();
  CHECK(frame_size(c, 0) == FrameSize{1920, 1080});
  CHECK(frame_size(c, 1000000) == FrameSize{1920, 1080});  // resize_at -1: never
  CHECK(max_frame_bytes(c) == 1920u * 1080u * 3u);
  c.resize_at = 7;
  c.resize_width = 1280;
  c.resize_height = 720;
  CHECK(frame_size(c, 6) == FrameSize{1920, 1080});
  CHECK(frame_size(c, 7) == FrameSize{1280, 720});
  CHECK(max_frame_bytes(c) == 1920u * 1080u * 3u);  // slots hold the larger of the two
  c.resize_width = 2560;
  c.resize_height = 1440;
  CHECK(max_frame_bytes(c) == 2560u * 1440u * 3u);
  const Camera camera(c);
  CHECK(camera.video(6).width() == 1920);
  CHECK(camera.video(7).width() == 2560);
  CHECK(camera.video(7).height() == 1440);
}

// ------------------------------------------------------------------------- synthetic video

TEST_CASE("the synthetic video draws exactly its truth", "[video]") {
  const SyntheticVideo video(1920, 1080, 4);
  std::vector<std::uint8_t> frame(video.frame_bytes());
  int absent = 0;
  for (std::int64_t k : {0, 1, 2, 5, 37, 999}) {
    const auto truth = video.render(k, frame.data(), 1920 * 3);
    absent += 4 - static_cast<int>(truth.size());
    for (std::size_t i = 0; i < truth.size(); ++i) {
      const Box& b = truth[i].box;
      CHECK(b.x1 >= 0);
      CHECK(b.x2 <= 1920);
      CHECK(b.y1 >= truth[i].class_id * 270);
      CHECK(b.y2 <= (truth[i].class_id + 1) * 270);  // its own lane: objects never overlap
      CHECK(b.x2 - b.x1 >= 24);
      CHECK(b.y2 - b.y1 >= 24);
      const Bgr col = class_colour(truth[i].class_id);
      auto px = [&](int x, int y) {
        return frame.data() + (static_cast<std::size_t>(y) * 1920 + x) * 3;
      };
      // Inside: the class colour at the corners; just outside: background (all channels < 64).
      const int x1 = static_cast<int>(b.x1), y1 = static_cast<int>(b.y1);
      const int x2 = static_cast<int>(b.x2) - 1, y2 = static_cast<int>(b.y2) - 1;
      for (auto [x, y] : {std::pair{x1, y1}, std::pair{x2, y2}}) {
        CHECK(px(x, y)[0] == col.b);
        CHECK(px(x, y)[1] == col.g);
        CHECK(px(x, y)[2] == col.r);
      }
      if (x1 > 0) CHECK(std::max({px(x1 - 1, y1)[0], px(x1 - 1, y1)[1], px(x1 - 1, y1)[2]}) < 64);
      if (y2 + 1 < 1080) CHECK(std::max({px(x2, y2 + 1)[0], px(x2, y2 + 1)[1]}) < 64);
    }
  }
  CHECK(absent > 0);  // some frames miss a class: "nothing extra" is exercised
  // Consecutive frames move: a wrong-slot frame cannot pass an IoU >= 0.9 check.
  const auto a = video.truth(100), b = video.truth(102);
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i].class_id == b[i].class_id) CHECK(lesson08::iou(a[i].box, b[i].box) < 0.9);
  }
  CHECK_THROWS_AS(SyntheticVideo(1920, 1080, 0), std::invalid_argument);
  CHECK_THROWS_AS(SyntheticVideo(1920, 100, 4), std::invalid_argument);
  CHECK_THROWS_AS(class_colour(kMaxClasses), std::invalid_argument);
}

// The producer updates a slot in place (only the boxes of the frame it held and of the new one),
// and the workers must see exactly the frame a full render draws: compared byte for byte, with
// previous frames near and far (a ring of 8 slots holds frame k - 8), a class that comes back
// after an absent frame, a padded pitch, and a buffer that went through several updates.
TEST_CASE("SyntheticVideo::update draws exactly what render draws", "[video]") {
  for (const auto& [w, h, pitch_pad, format] :
       {std::tuple{1920, 1080, 0, FrameFormat::bgr}, std::tuple{1283, 721, 13, FrameFormat::bgr},
        std::tuple{1920, 1080, 0, FrameFormat::nv12},
        std::tuple{1282, 722, 14, FrameFormat::nv12}}) {
    const SyntheticVideo video(w, h, 4, format);
    const std::size_t pitch = video.row_bytes() + pitch_pad;
    const std::size_t rows = format == FrameFormat::bgr ? h : h * 3 / 2;  // nv12: Y, then U V
    std::vector<std::uint8_t> expected(pitch * rows, 0), got(pitch * rows, 0xAB);
    CAPTURE(w, h, pitch, to_string(format));
    std::int64_t held = -1;  // what `got` holds
    int updates = 0;
    for (std::int64_t k : {0, 1, 2, 10, 3, 11, 19, 100, 101, 5, 6, 7, 999}) {
      CAPTURE(k, held);
      video.render(k, expected.data(), pitch);
      const auto truth = video.update(k, held, got.data(), pitch);
      held = k;
      ++updates;
      CHECK(truth.size() == video.truth(k).size());
      bool same = true;
      for (std::size_t y = 0; y < rows && same; ++y) {  // the row padding is not in the frame
        same = std::memcmp(expected.data() + y * pitch, got.data() + y * pitch,
                           video.row_bytes()) == 0;
      }
      CHECK(same);
    }
    CHECK(updates == 13);
  }
  const SyntheticVideo video(1920, 1080, 4);
  std::vector<std::uint8_t> frame(video.frame_bytes());
  CHECK_THROWS_AS_WITH(video.update(3, -2, frame.data(), 1920 * 3), std::invalid_argument,
                       Contains("previous must be a frame >= 0, or -1"));
  CHECK_THROWS_AS_WITH(video.update(3, 2, frame.data(), 100), std::invalid_argument,
                       Contains("update: expected a destination with pitch >= 5760"));
  CHECK_THROWS_AS(video.update(3, 2, nullptr, 1920 * 3), std::invalid_argument);
}

TEST_CASE("measure_gpu_us_per_frame refuses a stream count outside [1, 64] before any CUDA call",
          "[bounds]") {
  PipelineConfig c = small_config();
  for (const int streams : {0, -1, 65}) {
    CHECK_THROWS_AS_WITH(measure_gpu_us_per_frame(c, color_engine_spec(c, 0.0), 1, 1, streams),
                         std::invalid_argument, Contains("streams must be in [1, 64]"));
  }
}

// What the engine sees of an NV12 frame: each pixel converted as lesson 06's NV12 letterbox
// converts it (its Y, its 2x2 block's U and V, BT.601), then the engine's rule (every channel
// within kColourTolerance of a class colour). The pixels of each class must span its true box:
// the chroma a box's edge block shares with the background must not move it.
TEST_CASE("NV12 frames: the converted colours still give each object's box", "[video]") {
  const SyntheticVideo video(1920, 1080, 4, FrameFormat::nv12);
  CHECK(video.frame_bytes() == 1920u * 1080u * 3u / 2u);
  std::vector<std::uint8_t> frame(video.frame_bytes());
  const lesson06::YuvToRgb k = lesson06::yuv_to_rgb(lesson06::YuvMatrix::bt601);
  for (std::int64_t f : {0, 7, 123, 5000}) {
    const auto truth = video.render(f, frame.data(), video.row_bytes());
    const lesson06::Nv12View view{frame.data(), frame.data() + 1920 * 1080, 1920, 1080, 1920, 1920};
    for (const TruthBox& t : truth) {
      const Bgr c = class_colour(t.class_id);
      int x1 = 1 << 30, y1 = 1 << 30, x2 = -1, y2 = -1;
      for (int y = 0; y < 1080; ++y) {
        for (int x = 0; x < 1920; ++x) {
          std::uint8_t bgr[3];
          lesson06::nv12_pixel_bgr(view, k, x, y, bgr);
          if (std::abs(bgr[0] - c.b) <= kColourTolerance &&
              std::abs(bgr[1] - c.g) <= kColourTolerance &&
              std::abs(bgr[2] - c.r) <= kColourTolerance) {
            x1 = std::min(x1, x);
            y1 = std::min(y1, y);
            x2 = std::max(x2, x + 1);
            y2 = std::max(y2, y + 1);
          }
        }
      }
      CAPTURE(f, t.class_id, x1, y1, x2, y2, t.box.x1, t.box.y1, t.box.x2, t.box.y2);
      REQUIRE(x2 > x1);
      CHECK(lesson08::iou(Box{static_cast<float>(x1), static_cast<float>(y1),
                              static_cast<float>(x2), static_cast<float>(y2)},
                          t.box) >= 0.97);
    }
  }
  CHECK_THROWS_AS(SyntheticVideo(1921, 1080, 4, FrameFormat::nv12), std::invalid_argument);
  PipelineConfig c;
  c.format = FrameFormat::nv12;
  c.frame_width = 1281;
  CHECK_THROWS_AS_WITH(validate(c), std::invalid_argument, Contains("NV12 frames need an even"));
  c.frame_width = 1920;
  c.resize_at = 10;
  c.resize_height = 719;
  CHECK_THROWS_AS_WITH(validate(c), std::invalid_argument, Contains("1280x719"));
  c.resize_height = 720;
  CHECK_NOTHROW(validate(c));
  CHECK(max_frame_bytes(c) == 1920u * 1080u * 3u / 2u);
}

TEST_CASE("check_frame: right class, IoU >= 0.9, exactly once, nothing extra", "[check]") {
  const std::vector<TruthBox> truth = {{0, {100, 100, 200, 200}}, {2, {300, 100, 400, 180}}};
  auto det = [](int cls, Box b) { return lesson08::Detection{b, 0.9f, cls, 0}; };
  CHECK(check_frame(truth, {det(0, {101, 100, 200, 199}), det(2, {300, 100, 400, 180})}).empty());
  CHECK_FALSE(check_frame(truth, {det(0, {101, 100, 200, 199})}).empty());  // one missing
  CHECK_FALSE(check_frame(truth, {det(1, {100, 100, 200, 200}), det(2, {300, 100, 400, 180})})
                  .empty());  // wrong class
  CHECK_FALSE(check_frame(truth, {det(0, {100, 100, 200, 200}), det(0, {100, 100, 200, 200}),
                                  det(2, {300, 100, 400, 180})})
                  .empty());  // twice
  CHECK_FALSE(check_frame(truth, {det(0, {120, 100, 220, 200}), det(2, {300, 100, 400, 180})})
                  .empty());                                       // IoU 0.67
  CHECK_FALSE(check_frame({}, {det(0, {0, 0, 10, 10})}).empty());  // extra
  CHECK(check_frame({}, {}).empty());
}

TEST_CASE("the timeline exports as Chrome trace-event JSON", "[trace]") {
  const std::vector<TraceEvent> events = {{"H2D", 0, 10.5, 120.25, 0, 4},
                                          {"engine \"x\"", 1, 200, 50, 4, 4},
                                          {"produce", -1, 0, 600, 0, 1}};
  const std::string json = chrome_trace_json(events);
  CHECK_THAT(json, Contains("\"traceEvents\":["));
  CHECK_THAT(json, Contains("{\"name\":\"H2D\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":10.500,"
                            "\"dur\":120.250"));
  CHECK_THAT(json, Contains("\"engine \\\"x\\\"\""));  // escaped
  CHECK_THAT(json, Contains("\"args\":{\"name\":\"producer\"}"));
  CHECK_THAT(json, Contains("\"args\":{\"name\":\"worker 1\"}"));
  CHECK(std::count(json.begin(), json.end(), '{') == std::count(json.begin(), json.end(), '}'));
  CHECK(std::count(json.begin(), json.end(), '[') == std::count(json.begin(), json.end(), ']'));
}

// ------------------------------------------------------------------------- GPU: the engine

TEST_CASE("ColorEngine finds every object of a letterboxed frame", "[gpu]") {
  const lesson08::DType input = GENERATE(lesson08::DType::f16, lesson08::DType::f32);
  INFO("input " << lesson08::to_string(input));
  PipelineConfig c;
  c.input_dtype = input;
  c.workers = 1;
  c.frames = 24;
  c.graphs = false;
  const RunReport serial = run_serial_tutorial(c, color_engine_spec(c, 0.0));
  const RunCheck r = check_run(serial, c);
  CHECK(r.wrong == 0);
  CHECK(r.missing == 0);
  CHECK(r.repeated == 0);
  INFO(r.first_problem);
  CHECK(r.first_problem.empty());
  // The stand-in's FLOP count is whole GEMMs of 2.147 GFLOP.
  ColorEngineOptions o;
  o.input = {1, 3, 640, 640};
  CHECK(ColorEngine(o).gemms_per_frame() == 4);
  // With its SGEMM chain on random operands (3 GEMMs, batches of up to 4, graphs): the boxes do
  // not depend on it, and the sanitizers see the chain's buffers used within bounds.
  PipelineConfig g;
  g.workers = 2;
  g.frames = 24;
  g.batch = 4;
  g.max_wait_us = 2000;
  g.graphs = true;
  const RunCheck with_gemms = check_run(run_pipeline(g, color_engine_spec(g, 6.4)), g);
  INFO(with_gemms.first_problem);
  CHECK(with_gemms.wrong == 0);
  CHECK(with_gemms.missing == 0);
}

TEST_CASE("blocking-sync waits and slots released by a host function: every frame once and right",
          "[gpu]") {
  const bool blocking = GENERATE(false, true);
  const bool callback = GENERATE(false, true);
  const bool graphs = GENERATE(false, true);
  PipelineConfig c;
  c.workers = 2;
  c.frames = 120;
  c.queue_depth = 4;  // a small ring: the producer waits for released slots all the time
  c.blocking_sync = blocking;
  c.release_by_callback = callback;
  c.graphs = graphs;
  INFO("blocking_sync " << blocking << ", release_by_callback " << callback << ", graphs "
                        << graphs);
  check_every_frame_right(run_pipeline(c, color_engine_spec(c, 2.2)), c);
}

TEST_CASE("NV12 frames through lesson 06's NV12 letterbox: every frame once and right", "[gpu]") {
  const int batch = GENERATE(1, 4);
  const bool graphs = GENERATE(false, true);
  // FP16 (the default) and FP32 input tensors: the letterbox's two outputs, the engine's two
  // inputs.
  const lesson08::DType input = GENERATE(lesson08::DType::f16, lesson08::DType::f32);
  PipelineConfig c;
  c.input_dtype = input;
  c.format = FrameFormat::nv12;
  c.workers = 2;
  c.batch = batch;
  c.max_wait_us = batch > 1 ? 5000 : 0;
  c.graphs = graphs;
  c.frames = 160;
  c.resize_at = 80;  // 1080p, then 720p: both sizes, and batches that hold both
  INFO("batch " << batch << ", graphs " << graphs << ", input " << lesson08::to_string(input));
  check_every_frame_right(run_pipeline(c, color_engine_spec(c, 0.0)), c);
  if (batch == 1 && !graphs) {
    c.resize_at = -1;
    check_every_frame_right(run_serial_tutorial(c, color_engine_spec(c, 0.0)), c);
  }
}

TEST_CASE("before_serving runs once after warm-up, and an exception from it ends the run",
          "[gpu]") {
  PipelineConfig c = small_config();
  c.workers = 2;
  int calls = 0;
  c.before_serving = [&] { ++calls; };
  const RunReport report = run_pipeline(c, color_engine_spec(c, 0.0));
  CHECK(calls == 1);
  CHECK(report.results.size() == static_cast<std::size_t>(c.frames));
  CHECK(report.draw_us.size() == static_cast<std::size_t>(c.frames));  // one per frame drawn
  CHECK(report.acquire_us.size() == static_cast<std::size_t>(c.frames));
  CHECK(report.late_us.empty());  // closed loop
  // A start line that never opens (lesson 11: another replica failed): the run stops with its
  // exception, after joining its workers, and serves nothing.
  c.before_serving = [] { throw std::runtime_error("the start line was abandoned"); };
  CHECK_THROWS_AS_WITH(run_pipeline(c, color_engine_spec(c, 0.0)), std::runtime_error,
                       Contains("the start line was abandoned"));
}

// ------------------------------------------------------------------------- GPU: the pipeline

TEST_CASE("every frame once, right boxes: 1, 2, 4 workers x batch 1, 4, 16 x graphs", "[gpu]") {
  const int workers = GENERATE(1, 2, 4);
  const int batch = GENERATE(1, 4, 16);
  const bool graphs = GENERATE(false, true);
  PipelineConfig c;
  c.workers = workers;
  c.batch = batch;
  c.graphs = graphs;
  c.frames = grid_frames();
  c.queue_depth = std::max(8, 2 * batch);
  c.max_wait_us = batch > 1 ? 5000 : 0;  // long enough for batches to fill in closed loop
  INFO("workers " << workers << ", batch " << batch << ", graphs " << graphs);
  const RunReport report = run_pipeline(c, color_engine_spec(c, 0.0));
  const RunCheck r = check_run(report, c);
  INFO(r.first_problem);
  CHECK(report.produced == c.frames);
  CHECK(report.results.size() == static_cast<std::size_t>(c.frames));
  CHECK(report.dropped.empty());
  CHECK(r.wrong == 0);
  CHECK(r.missing == 0);
  CHECK(r.repeated == 0);
  bool batched = false;  // under closed-loop load the batcher does fill batches
  for (const FrameResult& f : report.results) batched = batched || f.batch > 1;
  CHECK(batched == (batch > 1));
}

TEST_CASE("a resolution change mid-stream: every frame right, graphs captured again", "[gpu]") {
  // 1080p to 720p at frame 300 (smaller: slots keep their size) and 720p to 1440p (larger:
  // slots are sized for the larger); batches may straddle the change (mixed sizes).
  const int to_width = GENERATE(1280, 2560);
  const bool graphs = GENERATE(false, true);
  const lesson08::DType input = GENERATE(lesson08::DType::f16, lesson08::DType::f32);
  PipelineConfig c;
  c.input_dtype = input;
  c.workers = 2;
  c.batch = 4;
  c.max_wait_us = 5000;
  c.queue_depth = 8;
  c.graphs = graphs;
  c.frames = std::min<std::int64_t>(grid_frames(), 600);
  c.resize_at = c.frames / 2;
  c.resize_width = to_width;
  c.resize_height = to_width * 9 / 16;
  if (to_width > 1920) {  // start at 720p
    c.frame_width = 1280;
    c.frame_height = 720;
  }
  INFO("to " << c.resize_width << "x" << c.resize_height << ", graphs " << graphs << ", input "
             << lesson08::to_string(input));
  const RunReport report = run_pipeline(c, color_engine_spec(c, 0.0));
  check_every_frame_right(report, c);
  if (graphs) {
    // Each worker that served a frame of the new size replayed a graph captured for it.
    INFO("updated in place " << report.graph_updates << ", re-instantiated "
                             << report.graph_reinstantiations);
    CHECK(report.graph_updates + report.graph_reinstantiations >= 1);
  } else {
    CHECK(report.graph_captures + report.graph_updates + report.graph_reinstantiations == 0);
  }
}

// The race the event wait prevents, set up so that it shows: one stream (the copy queues behind
// the previous batch's ~2 ms engine), two batches in flight, two slots. The producer updates a
// slot in a fraction of a millisecond; without the wait it overwrites frame k before the copy
// engine reads it.
namespace {
PipelineConfig race_config() {
  PipelineConfig c;
  c.workers = 1;
  c.batch = 1;
  c.inflight = 2;
  c.copy_stream = false;
  c.queue_depth = 2;
  c.frames = 200;
  return c;
}
constexpr double kRaceGflop = 86.0;  // ~40 SGEMMs: about 2 ms per frame on an H200
}  // namespace

TEST_CASE("with the slot-reuse wait, the race setup gives right answers", "[gpu][ex3][host-race]") {
  const PipelineConfig c = race_config();
  const RunReport report = run_pipeline(c, color_engine_spec(c, kRaceGflop));
  const RunCheck r = check_run(report, c);
  INFO(r.first_problem);
  CHECK(r.wrong == 0);
  CHECK(r.missing == 0);
  CHECK(r.repeated == 0);
}

// Exercise 3 without a race to win: gates (StreamGate: a kernel that holds its stream until the
// test opens it) stand before the copies and after `copied`, where the engine would be. Until the
// first opens, the copies cannot run, so no slot may come back; once it opens, every slot must
// come back while the second still holds the stream. A release that waits for the stream or the
// device returns only when the second gate's guard (5 s) fires, and the test sees that it fired.
TEST_CASE("release_after_copy waits for its event and only for it", "[ex3][gpu]") {
  int device = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  constexpr std::size_t kBytes = 64 << 10;
  SlotRing ring(3, Backpressure::block);
  std::vector<course::PinnedBuffer<std::uint8_t>> slot_memory;
  for (int i = 0; i < ring.depth(); ++i) {
    slot_memory.emplace_back(kBytes);
    std::memset(slot_memory.back().data(), 10 + i, kBytes);
  }
  course::DeviceBuffer<std::uint8_t> frames(2 * kBytes);
  course::Stream stream;
  course::Event copied(cudaEventDisableTiming);
  StreamGate before_copies, after_copies;
  for (std::int64_t k = 0; k < 2; ++k) ring.publish(*ring.acquire(), k, Clock::now());
  const std::vector<SlotRing::Taken> taken = ring.take(2, 0, 1ms);  // two in flight, one free
  REQUIRE(taken.size() == 2);
  std::vector<int> slots;
  for (const SlotRing::Taken& t : taken) slots.push_back(t.slot);

  // What a worker queues: the copies and `copied`, then (the gate after) the engine.
  before_copies.hold(stream);
  OpenGatesOnExit drain{{&before_copies, &after_copies}, {stream.get()}};
  for (std::size_t i = 0; i < slots.size(); ++i) {
    CUDA_CHECK(cudaMemcpyAsync(frames.data() + i * kBytes, slot_memory[slots[i]].data(), kBytes,
                               cudaMemcpyHostToDevice, stream));
  }
  copied.record(stream);
  after_copies.hold(stream);
  if (host_waited_for(before_copies)) {
    WARN(
        "a launch or a copy blocked the host until a gate's guard fired (CUDA_LAUNCH_BLOCKING=1?"
        " a tool that serialises?): nothing to check here");
    return;
  }

  std::atomic<bool> returned{false};
  std::atomic<int> copied_at_return{-1};  // cudaEventQuery(copied) as it returned
  std::exception_ptr error;               // an exception must not escape a std::thread
  std::thread worker([&] {
    try {
      CUDA_CHECK(cudaSetDevice(device));  // the worker's device, as bind_worker_device does
      release_after_copy(ring, slots, copied);
      copied_at_return = static_cast<int>(cudaEventQuery(copied));
    } catch (...) {
      error = std::current_exception();
    }
    returned = true;
  });
  // A release that does not wait comes back within microseconds; one that waits cannot come back
  // while the copies are held. The 200 ms are the first one's chance, not a timing assertion.
  wait_until([&] { return returned.load(); }, 200ms);
  const bool returned_while_held = returned.load();
  std::vector<SlotRing::State> while_held;
  for (int s : slots) while_held.push_back(ring.state(s));
  before_copies.open();
  worker.join();  // a release that waits for more than `copied` ends when after_copies' guard fires
  const StreamGate::State after_copies_at_return = after_copies.state();
  after_copies.open();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (error) std::rethrow_exception(error);

  INFO("release_after_copy returned while the copies were held: " << returned_while_held);
  CHECK_FALSE(returned_while_held);
  for (const SlotRing::State st : while_held) CHECK(st == SlotRing::State::in_flight);
  INFO("cudaEventQuery(copied) when it returned: "
       << cudaGetErrorName(static_cast<cudaError_t>(copied_at_return.load())));
  CHECK(copied_at_return.load() == static_cast<int>(cudaSuccess));
  INFO("the gate after `copied` (the engine's place) when it returned: "
       << to_string(after_copies_at_return)
       << "; timed out means it waited for the stream or the device, not for its event");
  CHECK(after_copies_at_return != StreamGate::State::timed_out);
  CHECK(after_copies.state() == StreamGate::State::opened);
  CHECK(before_copies.state() == StreamGate::State::opened);
  for (int s : slots) CHECK(ring.state(s) == SlotRing::State::free);
}

// ------------------------------------------------------------------------- exercise 4

// The event protocol alone, with gates: one on the copy stream before the copies, two in the
// work (before it reads the frames and at its end). Until the copy gate opens, the work may not
// get past its first gate even when that one is open, `copied` and `done` may not complete, and
// the call must already have returned; then `copied` completes with the copies while `done`
// still waits for the work. Every gate opened by the test, none by its guard (5 s): nobody on
// the host waited for the GPU.
TEST_CASE("enqueue_after_copy orders the work after the copies on the GPU",
          "[ex4][gpu][stream-gate]") {
  constexpr std::size_t kCount = 1 << 14;
  const std::size_t bytes = kCount * sizeof(int);
  course::PinnedBuffer<int> source(kCount), result(kCount);
  for (std::size_t i = 0; i < kCount; ++i) {
    source[i] = 1000 + static_cast<int>(i);  // the new frame
    result[i] = -1;
  }
  course::DeviceBuffer<int> frames(kCount);
  CUDA_CHECK(cudaMemset(frames.data(), 0, bytes));  // the old frame: zeros
  CUDA_CHECK(cudaDeviceSynchronize());
  course::Stream copy, compute;
  course::Event copied(cudaEventDisableTiming), done(cudaEventDisableTiming);
  StreamGate copies_held, work_start, work_end;
  int work_calls = 0;
  cudaStream_t work_stream = nullptr;
  const std::function<void(cudaStream_t)> work = [&](cudaStream_t s) {
    ++work_calls;
    work_stream = s;
    if (work_calls > 1) throw std::logic_error("work called more than once");
    work_start.hold(s);
    CUDA_CHECK(cudaMemcpyAsync(result.data(), frames.data(), bytes, cudaMemcpyDeviceToHost, s));
    work_end.hold(s);
  };

  // The probe: a second kernel, on a third stream, launched while the copy gate holds. A tool
  // that runs one kernel at a time (compute-sanitizer does) blocks that launch until the copy
  // gate's guard fires, and would block the work's launch inside enqueue_after_copy the same way.
  course::Stream side;
  StreamGate probe;
  copies_held.hold(copy);
  OpenGatesOnExit drain{{&copies_held, &probe, &work_start, &work_end},
                        {copy.get(), compute.get(), side.get()}};
  probe.hold(side);
  probe.open();
  CUDA_CHECK(cudaMemcpyAsync(frames.data(), source.data(), bytes, cudaMemcpyHostToDevice, copy));
  if (host_waited_for(copies_held)) {
    WARN(
        "a launch or a copy blocked the host until a gate's guard fired (CUDA_LAUNCH_BLOCKING=1?"
        " a tool that serialises?): nothing to check here");
    return;
  }
  enqueue_after_copy(copy, compute, copied, done, work);
  const StreamGate::State copies_at_return = copies_held.state();

  // The work's first gate opens; 200 ms for the work to get as far as the events let it (no
  // time assertion: with the protocol right, it cannot pass the copies however long it waits).
  work_start.open();
  wait_until([&] { return work_end.state() != StreamGate::State::not_started; }, 200ms);
  const StreamGate::State end_before_copies = work_end.state();
  const cudaError_t copied_before = cudaEventQuery(copied);
  const cudaError_t done_before = cudaEventQuery(done);
  cudaGetLastError();  // "not ready" is an answer

  copies_held.open();
  CUDA_CHECK(cudaStreamSynchronize(copy));
  const cudaError_t copied_after = cudaEventQuery(copied);
  const cudaError_t done_while_work_held = cudaEventQuery(done);
  cudaGetLastError();
  work_end.open();
  CUDA_CHECK(cudaStreamSynchronize(compute));
  const cudaError_t done_at_end = cudaEventQuery(done);

  INFO("the copy gate when enqueue_after_copy returned: " << to_string(copies_at_return)
                                                          << " (timed out: the host waited)");
  CHECK(copies_at_return != StreamGate::State::timed_out);
  CHECK(work_calls == 1);
  CHECK(work_stream == compute.get());
  INFO("the work's end gate while the copies were held: "
       << to_string(end_before_copies) << " (anything but not started: the work ran first)");
  CHECK(end_before_copies == StreamGate::State::not_started);
  INFO("before the copies: copied " << cudaGetErrorName(copied_before) << ", done "
                                    << cudaGetErrorName(done_before));
  CHECK(copied_before == cudaErrorNotReady);
  CHECK(done_before == cudaErrorNotReady);
  INFO("after the copies, the work held: copied " << cudaGetErrorName(copied_after) << ", done "
                                                  << cudaGetErrorName(done_while_work_held));
  CHECK(copied_after == cudaSuccess);
  CHECK(done_while_work_held == cudaErrorNotReady);
  CHECK(done_at_end == cudaSuccess);
  for (const StreamGate* g : {&copies_held, &work_start, &work_end}) {
    INFO("gate: " << to_string(g->state()));
    CHECK(g->state() == StreamGate::State::opened);
  }
  int wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i) wrong += result[i] != source[i];
  INFO("elements the work read before the new frame arrived: " << wrong << " of " << kCount);
  CHECK(wrong == 0);
}

TEST_CASE("with a copy stream every frame once and right: graphs off and on", "[ex4][gpu]") {
  const bool graphs = GENERATE(false, true);
  PipelineConfig c;
  c.workers = 2;
  c.batch = 4;
  c.max_wait_us = 5000;
  c.queue_depth = 8;
  c.copy_stream = true;
  c.graphs = graphs;
  c.frames = std::min<std::int64_t>(grid_frames(), 200);
  INFO("graphs " << graphs);
  check_every_frame_right(run_pipeline(c, color_engine_spec(c, 0.0)), c);
}

TEST_CASE("skipping the slot-reuse wait is caught by the checks", "[gpu][host-race]") {
  PipelineConfig c = race_config();
  c.test_skip_slot_wait = true;
  const RunReport report = run_pipeline(c, color_engine_spec(c, kRaceGflop));
  const RunCheck r = check_run(report, c);
  // Not a time assertion: the observation that the checks above CAN fail. Every frame still
  // arrives once; its boxes are another frame's.
  CHECK(r.missing == 0);
  CHECK(r.repeated == 0);
  CHECK(r.wrong > 0);
  WARN("frames with wrong boxes without the wait: " << r.wrong << " of " << c.frames);
}

TEST_CASE("an engine that fails on frame k stops the pipeline cleanly, naming frame and stage",
          "[gpu]") {
  for (const int workers : {1, 3}) {
    PipelineConfig c;
    c.workers = workers;
    c.frames = 400;
    c.batch = 1;
    INFO("workers " << workers);
    try {
      run_pipeline(c, failing_engine_spec(c, 137));
      FAIL("run_pipeline returned although the engine failed");
    } catch (const PipelineError& e) {
      CHECK(e.frame() == 137);
      CHECK(e.stage() == "engine");
      CHECK_THAT(std::string(e.what()), Contains("frame 137"));
      CHECK_THAT(std::string(e.what()), Contains("engine"));
    }
  }
  // Every thread was joined and the device is healthy: the next run works.
  PipelineConfig c;
  c.frames = 50;
  const RunReport ok = run_pipeline(c, color_engine_spec(c, 0.0));
  CHECK(check_run(ok, c).wrong == 0);
  CHECK(ok.results.size() == 50);
}

// A device fault is sticky: the context is lost for the rest of the process, so it is made only
// in a child process (the test binary again, `--child-probe pipeline_device_fault`), which the
// test kills if it has not ended by its deadline.
CHILD_PROBE(pipeline_device_fault) {
  PipelineConfig c;
  c.workers = 2;
  c.batch = 1;
  c.graphs = true;
  c.frames = 400;
  try {
    // Each worker's engine faults on its 12th run: 2 at warm-up, then its 10th batch.
    run_pipeline(c, faulting_engine_spec(c, 12));
    course::testing::report("outcome", "returned");
  } catch (const PipelineError& e) {
    report_pipeline_error(e);
  }
  return 0;
}

TEST_CASE(
    "a device fault in the engine with graphs on: PipelineError names the stage; nothing hangs",
    "[gpu][provokes-error]") {
  const ChildRun child = run_probe_with_deadline("pipeline_device_fault", 120s);
  INFO("child probe pipeline_device_fault printed:\n" << child.output);
  REQUIRE_FALSE(child.timed_out);  // it was killed: a thread never ended
  CHECK(child.exit_code == 0);
  REQUIRE(child.value("outcome") == "PipelineError");
  // A fault shows at the next call that looks at the GPU, on whichever thread makes it: the
  // stage names where the worker was when it learnt of it.
  const std::set<std::string> stages = {"H2D", "graph launch", "slot release",
                                        "GPU work (reported at the batch's completion)"};
  const std::string stage = child.value("stage");
  CHECK(stages.count(stage) == 1);
  CHECK_THAT(child.value("what"), Contains("stage " + stage));
  CHECK_THAT(child.value("what"), Contains("cudaErrorIllegalAddress"));
  CHECK(std::atoll(child.value("frame").c_str()) >= 0);
}

// A refused cudaGraphLaunch (PipelineConfig::test_fail_graph_launch_at: a null executable
// graph for the batch of frame 77) is not sticky: the probe runs the pipeline again after it.
// In a child too, so that a pipeline that hangs cannot hang the suite.
CHILD_PROBE(pipeline_graph_launch_refused) {
  PipelineConfig c;
  c.workers = 2;
  c.batch = 1;
  c.graphs = true;
  c.frames = 200;
  c.test_fail_graph_launch_at = 77;
  try {
    run_pipeline(c, color_engine_spec(c, 0.0));
    course::testing::report("outcome", "returned");
  } catch (const PipelineError& e) {
    report_pipeline_error(e);
  }
  cudaGetLastError();
  PipelineConfig next = c;
  next.test_fail_graph_launch_at = -1;
  next.frames = 50;
  const RunReport report = run_pipeline(next, color_engine_spec(next, 0.0));
  const RunCheck r = check_run(report, next);
  course::testing::report("next_results", report.results.size());
  course::testing::report("next_wrong", r.wrong + r.missing + r.repeated);
  return 0;
}

TEST_CASE("a refused graph launch: PipelineError names frame and stage and the next run works",
          "[gpu][provokes-error]") {
  const ChildRun child = run_probe_with_deadline("pipeline_graph_launch_refused", 120s);
  INFO("child probe pipeline_graph_launch_refused printed:\n" << child.output);
  REQUIRE_FALSE(child.timed_out);
  CHECK(child.exit_code == 0);
  REQUIRE(child.value("outcome") == "PipelineError");
  CHECK(child.value("stage") == "graph launch");
  CHECK(child.value("frame") == "77");
  CHECK_THAT(child.value("what"), Contains("frame 77, stage graph launch"));
  CHECK_THAT(child.value("what"), Contains("cudaGraphLaunch"));
  CHECK(child.value("next_results") == "50");
  CHECK(child.value("next_wrong") == "0");
}

TEST_CASE("out-of-range device ordinals are refused with the valid range before any thread starts",
          "[gpu][config]") {
  cudaGetLastError();  // start clean: an error an earlier test left on this thread is not ours
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(count >= 1);
  const std::string valid = "the valid ordinals are 0 to " + std::to_string(count - 1);
  int device_before = -1;
  REQUIRE(cudaGetDevice(&device_before) == cudaSuccess);
  // The engine factory runs on each worker's thread after it bound its device: a count of the
  // engines made says whether any worker started.
  std::atomic<int> engines_made{0};
  const auto counted_engine = [&engines_made](const PipelineConfig& c) {
    EngineSpec spec = color_engine_spec(c, 0.0);
    spec.make = [&engines_made, make = spec.make](int worker) {
      ++engines_made;
      return make(worker);
    };
    return spec;
  };

  struct Case {
    std::vector<int> devices;
    int workers;
  };
  // The device count itself (one past the last), far past it, and a second worker's device.
  const Case cases[] = {{{count}, 1}, {{count + 7}, 1}, {{0, count}, 2}};
  for (const Case& k : cases) {
    PipelineConfig c = small_config();
    c.devices = k.devices;
    c.workers = k.workers;
    const int bad = k.devices.back();
    INFO("device " << bad << " of " << count << ", " << k.workers << " worker(s)");
    // The matcher is built inside each check: Catch2 v2's && keeps references to its operands,
    // so a combined matcher stored in a variable would outlive them.
    const std::string out_of_range = "device ordinal " + std::to_string(bad) + " is out of range";
    CHECK_THROWS_AS_WITH(run_pipeline(c, counted_engine(c)), std::invalid_argument,
                         Contains(out_of_range) && Contains(valid));
    CHECK_THROWS_AS_WITH(run_serial_tutorial(c, counted_engine(c)), std::invalid_argument,
                         Contains(out_of_range) && Contains(valid));
    CHECK_THROWS_AS_WITH(measure_gpu_us_per_frame(c, counted_engine(c), 1, 1),
                         std::invalid_argument, Contains(out_of_range) && Contains(valid));
  }
  // -1: refused by validate() already, before any CUDA call.
  PipelineConfig negative = small_config();
  negative.devices = {-1};
  CHECK_THROWS_AS_WITH(run_pipeline(negative, counted_engine(negative)), std::invalid_argument,
                       Contains("got -1") && Contains("0 to cudaGetDeviceCount() - 1"));

  CHECK(engines_made.load() == 0);  // no worker started
  int device_after = -1;
  REQUIRE(cudaGetDevice(&device_after) == cudaSuccess);
  CHECK(device_after == device_before);         // the calling thread's device was not changed
  CHECK(cudaPeekAtLastError() == cudaSuccess);  // and no CUDA call failed

  // The last valid ordinal runs, every frame right.
  PipelineConfig good = small_config();
  good.devices = {count - 1};
  good.workers = 2;
  const RunReport report = run_pipeline(good, counted_engine(good));
  const RunCheck r = check_run(report, good);
  INFO(r.first_problem);
  CHECK(report.results.size() == static_cast<std::size_t>(good.frames));
  CHECK(r.wrong == 0);
  CHECK(r.missing == 0);
  CHECK(engines_made.load() == good.workers);  // the count does see workers start
}

TEST_CASE("drop_oldest under overload: dropped frames are counted, never lost", "[gpu]") {
  PipelineConfig c;
  c.workers = 1;
  c.frames = 300;
  c.queue_depth = 2;
  c.rate_fps = 5000;  // far above what one worker with a ~2 ms engine serves
  c.backpressure = Backpressure::drop_oldest;
  const RunReport report = run_pipeline(c, color_engine_spec(c, kRaceGflop));
  const RunCheck r = check_run(report, c);
  INFO(r.first_problem);
  CHECK(report.dropped.size() > 0);
  CHECK(report.results.size() + report.dropped.size() == 300);
  CHECK(r.missing == 0);
  CHECK(r.repeated == 0);
  CHECK(r.wrong == 0);
}

TEST_CASE("the traced run's timeline has every stage of every batch", "[gpu]") {
  PipelineConfig c;
  c.workers = 2;
  c.batch = 4;
  c.frames = 64;
  c.max_wait_us = 200;
  c.trace = true;
  const RunReport report = run_pipeline(c, color_engine_spec(c, 0.0));
  CHECK(check_run(report, c).wrong == 0);
  int h2d = 0, frames = 0;
  for (const TraceEvent& e : report.trace) {
    CHECK(e.duration_us >= 0);
    CHECK(e.start_us > -1e3);  // the GPU/host clock mapping is approximate, but not off by ms
    if (e.name == "H2D") {
      ++h2d;
      frames += e.frames;
    }
  }
  CHECK(frames == 64);
  CHECK(h2d >= 16);
}
