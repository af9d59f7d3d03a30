// Lesson 11: replicas of lesson 09's pipeline, one per GPU (see replicas.hpp).
#include "replicas.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"

namespace lesson11 {

std::int64_t ReplicaRun::frames() const {
  std::int64_t n = 0;
  for (const auto& r : reports) n += static_cast<std::int64_t>(r.results.size());
  return n;
}

namespace {
// The replicas' common start: each pipeline calls arrive() when its workers have warmed up
// (PipelineConfig::before_serving), and all start serving when the last has arrived. A replica
// that fails before it arrives calls abandon(): the others' arrive() then throws, so nobody
// waits for a replica that will never come. What they throw (Abandoned) is not a cause: the
// failure run_replicas rethrows is the replica's own.
struct Abandoned : std::runtime_error {
  Abandoned() : std::runtime_error("run_replicas: another replica failed before serving started") {}
};

class StartLine {
 public:
  explicit StartLine(int replicas) : expected_(replicas) {}
  void arrive() {
    std::unique_lock<std::mutex> lock(mutex_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return arrived_ >= expected_ || abandoned_; });
    if (arrived_ < expected_) throw Abandoned();
  }
  void abandon() {
    std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int expected_, arrived_ = 0;
  bool abandoned_ = false;
};
}  // namespace

ReplicaRun run_replicas(const std::vector<int>& devices, const lesson09::PipelineConfig& per_gpu,
                        double gflop_per_frame) {
  check_device_list("run_replicas", devices, device_count());
  lesson09::validate(per_gpu);
  ReplicaRun run;
  run.devices = devices;
  run.reports.resize(devices.size());
  std::vector<std::exception_ptr> failures(devices.size());
  StartLine start_line(static_cast<int>(devices.size()));
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < devices.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        // This thread starts on device 0 whatever the caller chose: bind first (lesson 09,
        // exercise 2), so that what run_pipeline makes on this thread lands on its GPU.
        lesson09::bind_worker_device(devices[r]);
        lesson09::PipelineConfig c = per_gpu;
        c.devices = {devices[r]};
        c.before_serving = [&start_line] { start_line.arrive(); };
        run.reports[r] = lesson09::run_pipeline(c, lesson09::color_engine_spec(c, gflop_per_frame));
      } catch (...) {
        failures[r] = std::current_exception();
        start_line.abandon();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Setup and warm-up are not served time: every replica's clock starts at the common start
  // line (each report's wall_s runs from there to its last result), so the run's wall time is
  // the longest of them.
  for (const auto& report : run.reports) run.wall_s = std::max(run.wall_s, report.wall_s);
  // The first replica's own failure; a replica that only saw another one fail (Abandoned) is
  // reported only if nothing else was.
  std::exception_ptr abandoned;
  for (const auto& f : failures) {
    if (!f) continue;
    try {
      std::rethrow_exception(f);
    } catch (const Abandoned&) {
      if (!abandoned) abandoned = f;
    } catch (...) {
      throw;
    }
  }
  if (abandoned) std::rethrow_exception(abandoned);
  return run;
}

ReplicaCheck check_replica(const lesson09::RunReport& report,
                           const lesson09::PipelineConfig& config) {
  const lesson09::SyntheticVideo video(config.frame_width, config.frame_height, config.num_classes);
  ReplicaCheck out;
  std::map<std::int64_t, int> served;
  const auto note = [&out](const std::string& why) {
    if (out.first_problem.empty()) out.first_problem = why;
  };
  for (const lesson09::FrameResult& f : report.results) {
    if (f.frame < 0 || f.frame >= config.frames) {
      ++out.wrong;
      note("frame id " + std::to_string(f.frame) + " was never produced");
    } else if (++served[f.frame] > 1) {
      ++out.repeated;
      note("frame " + std::to_string(f.frame) + " served twice");
    } else {
      const std::string why = lesson09::check_frame(video.truth(f.frame), f.detections);
      if (!why.empty()) {
        ++out.wrong;
        note("frame " + std::to_string(f.frame) + ": " + why);
      }
    }
  }
  for (const std::int64_t d : report.dropped) ++served[d];
  for (std::int64_t k = 0; k < config.frames; ++k) {
    if (served.count(k) == 0) {
      ++out.missing;
      note("frame " + std::to_string(k) + " neither served nor dropped");
    }
  }
  return out;
}

}  // namespace lesson11
