// Auxiliary streams: which stream runs each op, and the events between them (schedule.hpp).
#include "schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lesson12 {

bool accesses_conflict(const MemoryAccess& a, const MemoryAccess& b) {
  if (!a.write && !b.write) return false;
  if (a.buffer == b.buffer) {
    return a.channel_begin < b.channel_end && b.channel_begin < a.channel_end;
  }
  if (a.buffer < 0 || b.buffer < 0) return false;  // the memories outside the arena are distinct
  return a.byte_begin < b.byte_end && b.byte_begin < a.byte_end;  // reused arena bytes
}

namespace {

MemoryAccess view_access(const View& v, const EngineGraph& g, std::size_t bytes_per_element_batch,
                         bool write) {
  MemoryAccess m;
  m.write = write;
  if (v.buffer == View::kNetworkInput) {
    m.buffer = MemoryAccess::kImages;
    m.channel_begin = 0;
    m.channel_end = g.input_c;
    return m;
  }
  const BufferDesc& b = g.buffers.at(static_cast<std::size_t>(v.buffer));
  m.buffer = v.buffer;
  m.channel_begin = v.channel_offset;
  m.channel_end = v.channel_offset + v.channels;
  m.byte_begin = b.offset;
  // The extent plan_memory placed: 256-byte aligned, as it aligns every buffer.
  m.byte_end = b.offset + (b.elements_per_image() * bytes_per_element_batch + 255) / 256 * 256;
  return m;
}

MemoryAccess external(int which, bool write) {
  MemoryAccess m;
  m.buffer = which;
  m.channel_begin = 0;
  m.channel_end = 1;
  m.write = write;
  return m;
}

}  // namespace

std::vector<std::vector<MemoryAccess>> op_accesses(const EngineGraph& graph,
                                                   const std::vector<bool>& uses_workspace,
                                                   int max_batch, std::size_t element_size) {
  if (uses_workspace.size() != graph.ops.size()) {
    throw std::invalid_argument("op_accesses: uses_workspace has " +
                                std::to_string(uses_workspace.size()) + " entries for " +
                                std::to_string(graph.ops.size()) + " ops");
  }
  const std::size_t per = static_cast<std::size_t>(max_batch) * element_size;
  std::vector<std::vector<MemoryAccess>> out(graph.ops.size());
  for (std::size_t i = 0; i < graph.ops.size(); ++i) {
    const FusedOp& op = graph.ops[i];
    std::vector<MemoryAccess>& acc = out[i];
    if (op.kind == OpKind::detect) {
      for (const View& v : op.box) acc.push_back(view_access(v, graph, per, false));
      for (const View& v : op.cls) acc.push_back(view_access(v, graph, per, false));
      acc.push_back(external(MemoryAccess::kOutput, true));
    } else {
      acc.push_back(view_access(op.input, graph, per, false));
      if (op.kind == OpKind::conv && op.has_residual) {
        acc.push_back(view_access(op.residual, graph, per, false));
      }
      acc.push_back(view_access(op.output, graph, per, true));
    }
    if (uses_workspace[i]) acc.push_back(external(MemoryAccess::kWorkspace, true));
  }
  return out;
}

std::vector<int> concurrent_hold_until(const EngineGraph& graph) {
  // The data flow alone: every buffer given its own bytes, no workspace.
  EngineGraph own = graph;
  std::size_t offset = 0;
  for (BufferDesc& b : own.buffers) {
    b.offset = offset;
    offset += (b.elements_per_image() * 4 + 255) / 256 * 256;
  }
  const auto acc = op_accesses(own, std::vector<bool>(own.ops.size(), false), 1, 4);
  const std::size_t n = own.ops.size();
  // after[i][j]: op j follows op i in the data flow (transitively).
  std::vector<std::vector<char>> after(n, std::vector<char>(n, 0));
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < j; ++i) {
      bool dep = false;
      for (const MemoryAccess& a : acc[i]) {
        for (const MemoryAccess& b : acc[j]) dep = dep || accesses_conflict(a, b);
      }
      if (!dep) continue;
      after[i][j] = 1;
      for (std::size_t k = 0; k < i; ++k) {
        if (after[k][i]) after[k][j] = 1;
      }
    }
  }
  std::vector<int> hold(graph.buffers.size());
  for (std::size_t b = 0; b < graph.buffers.size(); ++b) {
    int last = graph.buffers[b].last_op;
    for (std::size_t r = 0; r < n; ++r) {
      bool touches = false;
      for (const MemoryAccess& a : acc[r]) touches = touches || a.buffer == static_cast<int>(b);
      if (!touches) continue;
      for (std::size_t j = r + 1; j < n; ++j) {
        if (!after[r][j]) last = std::max(last, static_cast<int>(j));
      }
    }
    hold[b] = last;
  }
  return hold;
}

StreamSchedule schedule_streams(const std::vector<std::vector<MemoryAccess>>& accesses,
                                int max_streams) {
  if (max_streams < 1) {
    throw std::invalid_argument("schedule_streams: max_streams must be at least 1, got " +
                                std::to_string(max_streams));
  }
  const int n = static_cast<int>(accesses.size());
  StreamSchedule s;
  s.stream.assign(static_cast<std::size_t>(n), 0);
  s.waits.assign(static_cast<std::size_t>(n), {});
  s.record.assign(static_cast<std::size_t>(n), false);
  // before[j][i]: op i must precede op j (directly or through other ops): the data's order,
  // which the schedule enforces, so it may also be used to skip waits already implied.
  std::vector<std::vector<char>> before(static_cast<std::size_t>(n),
                                        std::vector<char>(static_cast<std::size_t>(n), 0));
  std::vector<int> last;  // per stream: its last op so far
  for (int j = 0; j < n; ++j) {
    std::vector<int> deps;
    for (int i = 0; i < j; ++i) {
      bool conflict = false;
      for (const MemoryAccess& a : accesses[static_cast<std::size_t>(i)]) {
        for (const MemoryAccess& b : accesses[static_cast<std::size_t>(j)]) {
          conflict = conflict || accesses_conflict(a, b);
        }
      }
      if (conflict) deps.push_back(i);
    }
    std::vector<char>& bj = before[static_cast<std::size_t>(j)];
    for (int i : deps) {
      bj[static_cast<std::size_t>(i)] = 1;
      const std::vector<char>& bi = before[static_cast<std::size_t>(i)];
      for (int k = 0; k < i; ++k)
        bj[static_cast<std::size_t>(k)] |= bi[static_cast<std::size_t>(k)];
    }
    // The stream: continue the latest dependency's stream if it still ends there ...
    int chosen = -1, chosen_last = -1;
    for (int t = 0; t < static_cast<int>(last.size()); ++t) {
      const int l = last[static_cast<std::size_t>(t)];
      for (int i : deps) {
        if (i == l && l > chosen_last) chosen = t, chosen_last = l;
      }
    }
    // ... else a stream whose last op this one follows anyway ...
    for (int t = 0; chosen < 0 && t < static_cast<int>(last.size()); ++t) {
      if (bj[static_cast<std::size_t>(last[static_cast<std::size_t>(t)])]) chosen = t;
    }
    // ... else a new stream, or, with none left, the stream that has been idle longest.
    if (chosen < 0 && static_cast<int>(last.size()) < max_streams) {
      chosen = static_cast<int>(last.size());
      last.push_back(-1);
    }
    if (chosen < 0) {
      chosen = 0;
      for (int u = 1; u < static_cast<int>(last.size()); ++u) {
        if (last[static_cast<std::size_t>(u)] < last[static_cast<std::size_t>(chosen)]) chosen = u;
      }
    }
    s.stream[static_cast<std::size_t>(j)] = chosen;
    // Waits: per other stream, the latest dependency there, unless the op this one follows on
    // its own stream already comes after it.
    const int prev = last[static_cast<std::size_t>(chosen)];
    for (int t = 0; t < static_cast<int>(last.size()); ++t) {
      if (t == chosen) continue;
      int latest = -1;
      for (int i : deps) {
        if (s.stream[static_cast<std::size_t>(i)] == t) latest = i;
      }
      if (latest < 0) continue;
      if (prev >= 0 && before[static_cast<std::size_t>(prev)][static_cast<std::size_t>(latest)]) {
        continue;
      }
      s.waits[static_cast<std::size_t>(j)].push_back(latest);
      s.record[static_cast<std::size_t>(latest)] = true;
    }
    // The stream's order is now part of the schedule: j follows prev.
    if (prev >= 0) {
      bj[static_cast<std::size_t>(prev)] = 1;
      const std::vector<char>& bp = before[static_cast<std::size_t>(prev)];
      for (int k = 0; k < prev; ++k)
        bj[static_cast<std::size_t>(k)] |= bp[static_cast<std::size_t>(k)];
    }
    last[static_cast<std::size_t>(chosen)] = j;
  }
  s.streams = std::max<int>(1, static_cast<int>(last.size()));
  s.last_op = last.empty() ? std::vector<int>{-1} : last;
  for (std::size_t t = 1; t < last.size(); ++t) s.record[static_cast<std::size_t>(last[t])] = true;
  return s;
}

}  // namespace lesson12
