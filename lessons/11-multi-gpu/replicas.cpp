// Lesson 11: replicas of lesson 09's pipeline, one per GPU (see replicas.hpp).
#include "replicas.hpp"

#include <chrono>
#include <exception>
#include <map>
#include <thread>

#include "multi_gpu.cuh"
#include "multi_gpu_host.hpp"

namespace lesson11 {

std::int64_t ReplicaRun::frames() const {
  std::int64_t n = 0;
  for (const auto& r : reports) n += static_cast<std::int64_t>(r.results.size());
  return n;
}

ReplicaRun run_replicas(const std::vector<int>& devices, const lesson09::PipelineConfig& per_gpu,
                        double gflop_per_frame) {
  check_device_list("run_replicas", devices, device_count());
  lesson09::validate(per_gpu);
  ReplicaRun run;
  run.devices = devices;
  run.reports.resize(devices.size());
  std::vector<std::exception_ptr> failures(devices.size());
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t r = 0; r < devices.size(); ++r) {
    threads.emplace_back([&, r] {
      try {
        // This thread starts on device 0 whatever the caller chose: bind first (lesson 09,
        // exercise 2), so that what run_pipeline makes on this thread lands on its GPU.
        lesson09::bind_worker_device(devices[r]);
        lesson09::PipelineConfig c = per_gpu;
        c.devices = {devices[r]};
        run.reports[r] = lesson09::run_pipeline(c, lesson09::color_engine_spec(c, gflop_per_frame));
      } catch (...) {
        failures[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& f : failures) {
    if (f) std::rethrow_exception(f);
  }
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
