// Lesson 12 tests: auxiliary streams (schedule.hpp), CPU only. The oracle for "which ops must
// stay ordered" is independent of the code under test: every byte each op reads and writes is
// enumerated (element by element, at a small input size), and a sweep over the launch order
// collects each read-after-write, write-after-read and write-after-write pair. The schedule is
// then read as a graph (stream order + event waits) and every such pair must be connected.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/testing.hpp"
#include "graph.hpp"
#include "network.hpp"
#include "schedule.hpp"
#include "test_weights.hpp"

using namespace lesson12;
using course::testing::Contains;

namespace {

// Addresses an op touches: arena bytes, plus three addresses standing for the input images, the
// output and the cuDNN workspace (each touched as a whole).
constexpr long long kImagesAddr = -1, kOutputAddr = -2, kWorkspaceAddr = -3;

void touch_view(const View& v, const EngineGraph& g, int batch, std::size_t element,
                std::set<long long>& out) {
  if (v.buffer == View::kNetworkInput) {
    out.insert(kImagesAddr);
    return;
  }
  const BufferDesc& b = g.buffers.at(static_cast<std::size_t>(v.buffer));
  for (long long pixel = 0; pixel < static_cast<long long>(batch) * b.h * b.w; ++pixel) {
    for (int c = v.channel_offset; c < v.channel_offset + v.channels; ++c) {
      for (std::size_t byte = 0; byte < element; ++byte) {
        out.insert(static_cast<long long>(b.offset) +
                   (pixel * b.channels + c) * static_cast<long long>(element) +
                   static_cast<long long>(byte));
      }
    }
  }
}

struct Footprint {
  std::set<long long> reads, writes;
};

std::vector<Footprint> footprints(const EngineGraph& g, const std::vector<bool>& workspace,
                                  int batch, std::size_t element) {
  std::vector<Footprint> f(g.ops.size());
  for (std::size_t i = 0; i < g.ops.size(); ++i) {
    const FusedOp& op = g.ops[i];
    if (op.kind == OpKind::detect) {
      for (const View& v : op.box) touch_view(v, g, batch, element, f[i].reads);
      for (const View& v : op.cls) touch_view(v, g, batch, element, f[i].reads);
      f[i].writes.insert(kOutputAddr);
    } else {
      touch_view(op.input, g, batch, element, f[i].reads);
      if (op.has_residual) touch_view(op.residual, g, batch, element, f[i].reads);
      touch_view(op.output, g, batch, element, f[i].writes);
    }
    if (workspace[i]) f[i].writes.insert(kWorkspaceAddr);
  }
  return f;
}

// The pairs (i, j), i < j, that must stay ordered, by a sweep over every address.
std::set<std::pair<int, int>> required_orders(const std::vector<Footprint>& f) {
  std::map<long long, int> last_writer;
  std::map<long long, std::vector<int>> readers_since;
  std::set<std::pair<int, int>> need;
  for (int j = 0; j < static_cast<int>(f.size()); ++j) {
    for (long long a : f[static_cast<std::size_t>(j)].reads) {
      auto w = last_writer.find(a);
      if (w != last_writer.end()) need.insert({w->second, j});
    }
    for (long long a : f[static_cast<std::size_t>(j)].writes) {
      auto w = last_writer.find(a);
      if (w != last_writer.end() && w->second != j) need.insert({w->second, j});
      for (int r : readers_since[a]) {
        if (r != j) need.insert({r, j});
      }
    }
    for (long long a : f[static_cast<std::size_t>(j)].reads) readers_since[a].push_back(j);
    for (long long a : f[static_cast<std::size_t>(j)].writes) {
      last_writer[a] = j;
      readers_since[a].clear();
    }
  }
  return need;
}

// Checks the schedule's own consistency and returns reach[i][j]: op j runs after op i (stream
// order and event waits, transitively).
std::vector<std::vector<char>> happens_before(const StreamSchedule& s, int n, int max_streams) {
  REQUIRE(static_cast<int>(s.stream.size()) == n);
  REQUIRE(static_cast<int>(s.waits.size()) == n);
  REQUIRE(static_cast<int>(s.record.size()) == n);
  CHECK(s.streams >= 1);
  CHECK(s.streams <= max_streams);
  REQUIRE(static_cast<int>(s.last_op.size()) == s.streams);
  std::vector<std::vector<int>> next(static_cast<std::size_t>(n));
  std::vector<int> last(static_cast<std::size_t>(s.streams), -1);
  for (int j = 0; j < n; ++j) {
    const int t = s.stream[static_cast<std::size_t>(j)];
    REQUIRE(t >= 0);
    REQUIRE(t < s.streams);
    if (last[static_cast<std::size_t>(t)] >= 0) {
      next[static_cast<std::size_t>(last[static_cast<std::size_t>(t)])].push_back(j);
    }
    last[static_cast<std::size_t>(t)] = j;
    for (int w : s.waits[static_cast<std::size_t>(j)]) {
      REQUIRE(w >= 0);
      REQUIRE(w < j);
      CHECK(s.stream[static_cast<std::size_t>(w)] != t);  // a wait on one's own stream is waste
      CHECK(s.record[static_cast<std::size_t>(w)]);       // the event it waits for is recorded
      next[static_cast<std::size_t>(w)].push_back(j);
    }
  }
  for (int t = 0; t < s.streams; ++t) {
    CHECK(s.last_op[static_cast<std::size_t>(t)] == last[static_cast<std::size_t>(t)]);
    if (t > 0) CHECK(s.record[static_cast<std::size_t>(last[static_cast<std::size_t>(t)])]);
  }
  CHECK(s.stream[0] == 0);  // the first op follows the caller's work on the caller's stream
  std::vector<std::vector<char>> reach(static_cast<std::size_t>(n),
                                       std::vector<char>(static_cast<std::size_t>(n), 0));
  for (int i = n - 1; i >= 0; --i) {
    for (int j : next[static_cast<std::size_t>(i)]) {
      reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = 1;
      for (int k = 0; k < n; ++k) {
        if (reach[static_cast<std::size_t>(j)][static_cast<std::size_t>(k)]) {
          reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] = 1;
        }
      }
    }
  }
  return reach;
}

// How long the schedule takes if op i lasts cost[i] and streams run in parallel without
// limit: the longest path through the schedule's graph.
double critical_path(const StreamSchedule& s, const std::vector<double>& cost) {
  const std::size_t n = cost.size();
  std::vector<double> finish(n, 0.0);
  std::vector<int> last(static_cast<std::size_t>(s.streams), -1);
  for (std::size_t j = 0; j < n; ++j) {
    double start = 0.0;
    const int t = s.stream[j];
    if (last[static_cast<std::size_t>(t)] >= 0) {
      start = finish[static_cast<std::size_t>(last[static_cast<std::size_t>(t)])];
    }
    for (int w : s.waits[j]) start = std::max(start, finish[static_cast<std::size_t>(w)]);
    finish[j] = start + cost[j];
    last[static_cast<std::size_t>(t)] = static_cast<int>(j);
  }
  return *std::max_element(finish.begin(), finish.end());
}

}  // namespace

TEST_CASE("accesses_conflict: a write and shared memory; channel slices are disjoint", "[graph]") {
  MemoryAccess a{0, 0, 16, 0, 4096, false};
  MemoryAccess b = a;
  CHECK_FALSE(accesses_conflict(a, b));  // two reads
  b.write = true;
  CHECK(accesses_conflict(a, b));  // read after write, write after read
  MemoryAccess lo{3, 0, 8, 0, 4096, true}, hi{3, 8, 16, 0, 4096, true};
  CHECK_FALSE(accesses_conflict(lo, hi));  // two halves of a concatenation
  hi.channel_begin = 7;
  CHECK(accesses_conflict(lo, hi));
  MemoryAccess other{5, 0, 4, 2048, 8192, false};  // another buffer reusing bytes of buffer 0
  CHECK(accesses_conflict(b, other));
  other.byte_begin = 4096;  // adjacent, not overlapping
  CHECK_FALSE(accesses_conflict(b, other));
  const MemoryAccess images{MemoryAccess::kImages, 0, 3, 0, 0, false};
  const MemoryAccess work{MemoryAccess::kWorkspace, 0, 1, 0, 0, true};
  CHECK_FALSE(accesses_conflict(images, work));
  CHECK(accesses_conflict(work, work));  // two cuDNN convolutions share the workspace
}

TEST_CASE("schedule_streams: every pair that shares memory stays ordered (YOLOv8n)", "[graph]") {
  const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(3), 96, 128);
  EngineGraph g = optimize(net);
  const int n = static_cast<int>(g.ops.size());
  const int batch = 2;
  std::mt19937 rng(12);
  const std::vector<int> hold = concurrent_hold_until(g);
  for (std::size_t element : {std::size_t{2}, std::size_t{4}}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      // Patterns 0-2: the plan for auxiliary streams; 3: plain liveness (more reuse to respect).
      plan_memory(g, batch, element, pattern < 3 ? hold : std::vector<int>{});
      std::vector<bool> workspace(static_cast<std::size_t>(n), false);
      for (int i = 0; i < n; ++i) {
        if (g.ops[static_cast<std::size_t>(i)].kind != OpKind::conv) continue;
        workspace[static_cast<std::size_t>(i)] = pattern == 1 ? (rng() % 3 == 0) : pattern >= 2;
      }
      const std::set<std::pair<int, int>> need =
          required_orders(footprints(g, workspace, batch, element));
      const auto acc = op_accesses(g, workspace, batch, element);
      for (int max_streams : {1, 2, 4, 8}) {
        INFO("element " << element << ", workspace pattern " << pattern << ", max_streams "
                        << max_streams);
        const StreamSchedule s = schedule_streams(acc, max_streams);
        const auto reach = happens_before(s, n, max_streams);
        for (const auto& [i, j] : need) {
          if (!reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]) {
            FAIL_CHECK(g.ops[static_cast<std::size_t>(i)].name
                       << " and " << g.ops[static_cast<std::size_t>(j)].name
                       << " share memory but may run concurrently");
          }
        }
        if (max_streams == 1) {
          CHECK(s.streams == 1);
          for (int i = 0; i < n; ++i) CHECK(s.waits[static_cast<std::size_t>(i)].empty());
        }
      }
    }
  }
}

TEST_CASE("schedule_streams: YOLOv8n's independent branches run side by side", "[graph]") {
  const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(3), 640, 640);
  EngineGraph g = optimize(net);
  const int n = static_cast<int>(g.ops.size());
  const std::vector<bool> no_workspace(static_cast<std::size_t>(n), false);
  const std::vector<double> unit(static_cast<std::size_t>(n), 1.0);
  // Plain liveness reuses memory in launch order: the events that reuse needs leave little to
  // run side by side.
  const std::size_t tight = plan_memory(g, 1, 2);
  const double tight_path =
      critical_path(schedule_streams(op_accesses(g, no_workspace, 1, 2), 4), unit);
  // The plan for auxiliary streams: a buffer keeps its bytes while independent ops may run.
  const std::vector<int> hold = concurrent_hold_until(g);
  for (std::size_t b = 0; b < g.buffers.size(); ++b) CHECK(hold[b] >= g.buffers[b].last_op);
  const std::size_t loose = plan_memory(g, 1, 2, hold);
  CHECK(loose >= tight);
  CHECK(loose < arena_without_reuse(g, 1, 2));
  std::printf("YOLOv8n at batch 1, FP16: arena %.2f MiB by liveness, %.2f MiB for streams\n",
              tight / 1048576.0, loose / 1048576.0);
  const auto acc = op_accesses(g, no_workspace, 1, 2);
  // With every op lasting the same, the longest chain of the schedule is the network's depth
  // once streams are many: what running branches side by side can save at batch 1.
  const double serial = critical_path(schedule_streams(acc, 1), unit);
  CHECK(serial == n);
  std::printf("YOLOv8n, %d ops: the longest chain of the schedule, unit cost per op\n", n);
  double previous = serial;
  for (int max_streams : {2, 4, 8}) {
    const StreamSchedule s = schedule_streams(acc, max_streams);
    const double path = critical_path(s, unit);
    std::printf("  %d streams allowed, %d used: %.0f ops on the longest chain\n", max_streams,
                s.streams, path);
    CHECK(path <= previous);
    previous = path;
  }
  std::printf("  (plain liveness, 4 streams allowed: %.0f ops on the longest chain)\n", tight_path);
  // The head's six branches (box and class at three scales) overlap each other and the neck.
  CHECK(critical_path(schedule_streams(acc, 4), unit) < serial - 9);
  CHECK(critical_path(schedule_streams(acc, 4), unit) < tight_path);
  // The head: a box branch and a class branch of one scale land on different streams.
  int box = -1, cls = -1;
  for (int i = 0; i < n; ++i) {
    if (g.ops[static_cast<std::size_t>(i)].name == "model.22.cv2.0.0") box = i;
    if (g.ops[static_cast<std::size_t>(i)].name == "model.22.cv3.0.0") cls = i;
  }
  REQUIRE(box >= 0);
  REQUIRE(cls >= 0);
  const StreamSchedule s4 = schedule_streams(acc, 4);
  CHECK(s4.stream[static_cast<std::size_t>(box)] != s4.stream[static_cast<std::size_t>(cls)]);
}

TEST_CASE("schedule_streams: random graphs, every conflicting pair ordered", "[graph]") {
  std::mt19937 rng(2024);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 30);
    std::vector<std::vector<MemoryAccess>> acc(static_cast<std::size_t>(n));
    for (auto& a : acc) {
      const int k = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < k; ++e) {
        MemoryAccess m;
        m.buffer = static_cast<int>(rng() % 6) - 1;  // -1 (images) .. 4
        m.channel_begin = static_cast<int>(rng() % 8);
        m.channel_end = m.channel_begin + 1 + static_cast<int>(rng() % 8);
        m.byte_begin = (rng() % 8) * 256;  // arena buffers sharing bytes, as reuse makes them
        m.byte_end = m.byte_begin + 256 * (1 + rng() % 4);
        m.write = rng() % 2 == 0;
        a.push_back(m);
      }
    }
    for (int max_streams : {1, 2, 3, 8}) {
      const StreamSchedule s = schedule_streams(acc, max_streams);
      const auto reach = happens_before(s, n, max_streams);
      for (int i = 0; i < n; ++i) {
        for (int j = i + 1; j < n; ++j) {
          bool conflict = false;
          for (const MemoryAccess& a : acc[static_cast<std::size_t>(i)]) {
            for (const MemoryAccess& b : acc[static_cast<std::size_t>(j)]) {
              conflict = conflict || accesses_conflict(a, b);
            }
          }
          if (conflict && !reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]) {
            FAIL_CHECK("trial " << trial << ", max_streams " << max_streams << ": ops " << i
                                << " and " << j << " conflict but are not ordered");
          }
        }
      }
    }
  }
}

TEST_CASE("schedule_streams: two halves of a concatenation run side by side", "[graph]") {
  // op 0 writes A; ops 1 and 2 read A and write the two halves of B; op 3 reads all of B.
  const MemoryAccess a_w{0, 0, 8, 0, 1024, true}, a_r{0, 0, 8, 0, 1024, false};
  const MemoryAccess b_lo{1, 0, 8, 1024, 3072, true}, b_hi{1, 8, 16, 1024, 3072, true};
  const MemoryAccess b_r{1, 0, 16, 1024, 3072, false}, c_w{2, 0, 4, 3072, 4096, true};
  const std::vector<std::vector<MemoryAccess>> acc = {
      {{MemoryAccess::kImages, 0, 3, 0, 0, false}, a_w}, {a_r, b_lo}, {a_r, b_hi}, {b_r, c_w}};
  const StreamSchedule s = schedule_streams(acc, 2);
  CHECK(s.streams == 2);
  CHECK(s.stream[1] != s.stream[2]);
  CHECK(s.stream[3] == s.stream[2]);  // continues the latest op it depends on
  CHECK(s.waits[3] == std::vector<int>{1});
  CHECK(s.waits[2] == std::vector<int>{0});  // the second stream waits for op 0
  CHECK(s.record[0]);
  CHECK(s.record[1]);
  // One stream: the launch order, nothing to wait for.
  const StreamSchedule one = schedule_streams(acc, 1);
  CHECK(one.streams == 1);
  CHECK(one.stream == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("schedule_streams and op_accesses: bad arguments are refused", "[graph]") {
  CHECK_THROWS_WITH(schedule_streams({}, 0), Contains("at least 1"));
  const NetworkDefinition net = yolov8n(testing::random_yolov8n_weights(3), 64, 64);
  EngineGraph g = optimize(net);
  plan_memory(g, 1, 2);
  CHECK_THROWS_AS(op_accesses(g, {true, false}, 1, 2), std::invalid_argument);
  const StreamSchedule empty = schedule_streams({}, 4);
  CHECK(empty.streams == 1);
}
