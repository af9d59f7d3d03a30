// Lesson 12: running independent layers at the same time, on auxiliary streams.
//
// At batch 1 most layers of a detector fill only part of the GPU (a 20x20 map is 400 output
// pixels), and the network has independent branches: the head's box and class branches at three
// scales, the two halves of every C2f block. TensorRT runs such layers concurrently on
// "auxiliary streams" (IBuilderConfig::setMaxAuxStreams, IExecutionContext::setAuxStreams), with
// events between streams where one layer needs another's result. This file decides which stream
// each op runs on and which events it waits for; host code only (the CPU tests check it).
//
// Two ops must stay ordered when they touch the same memory and one of them writes it:
//   - read after write (the data flow): a layer reads what an earlier one wrote;
//   - write after read and write after write, which come from the memory planner: plan_memory
//     lets a buffer reuse the bytes of one whose last reader ran earlier in the launch order, so
//     on several streams that reader must finish before the new writer starts.
// Channel slices of one buffer (a concatenation's inputs) are disjoint memory: the ops writing
// them may run concurrently. A scratch workspace shared by several ops would order them too
// (uses_workspace below); the runtime avoids that for cuDNN by giving each stream its own.
#pragma once

#include <cstddef>
#include <vector>

#include "graph.hpp"

namespace lesson12 {

// One memory access of one op.
struct MemoryAccess {
  // >= 0: an arena buffer (EngineGraph::buffers); or one of the memories outside the arena.
  static constexpr int kImages = -1, kOutput = -2, kWorkspace = -3;
  int buffer = kImages;
  int channel_begin = 0, channel_end = 0;    // [begin, end) of the buffer's channels
  std::size_t byte_begin = 0, byte_end = 0;  // arena bytes of the whole buffer at the max batch
  bool write = false;
};

// True if the two accesses touch the same memory and at least one writes: the same buffer with
// overlapping channel ranges, or two arena buffers whose byte ranges overlap (reuse).
bool accesses_conflict(const MemoryAccess& a, const MemoryAccess& b);

// Every op's accesses, in the order of graph.ops. `uses_workspace[i]`: op i writes one scratch
// workspace shared by every op so marked. Byte ranges are those plan_memory placed for
// `max_batch` images of `element_size` bytes. Throws std::invalid_argument if uses_workspace
// has another length than graph.ops.
std::vector<std::vector<MemoryAccess>> op_accesses(const EngineGraph& graph,
                                                   const std::vector<bool>& uses_workspace,
                                                   int max_batch, std::size_t element_size);

// Which stream runs each op, and the events between streams. Stream 0 is the caller's; streams
// 1 .. streams - 1 are auxiliary streams that first wait for the caller's stream, and the
// caller's stream waits for every auxiliary stream's last op at the end (in a capture this is
// the fork and the join that cudaStreamEndCapture requires).
struct StreamSchedule {
  int streams = 1;                      // streams used, the caller's included
  std::vector<int> stream;              // per op
  std::vector<std::vector<int>> waits;  // per op: earlier ops, on other streams, to wait for
  std::vector<bool> record;             // per op: record its event after it (someone waits)
  std::vector<int> last_op;             // per stream: its last op (the join waits for these)
};

// Greedy list scheduling in launch order: an op continues the stream of the latest op it depends
// on when that op is still the stream's last; otherwise it takes a stream whose last op it
// already depends on, then an unused stream (at most `max_streams`), and only then the stream
// whose last op is the oldest (an ordering the data does not need, accepted to bound the
// streams). It waits for the latest op it depends on in each other stream, unless an op it
// already follows depends on that one. Every conflicting pair (accesses_conflict) ends up
// ordered: the CPU tests prove it for the network and for random graphs. Throws
// std::invalid_argument for max_streams < 1.
StreamSchedule schedule_streams(const std::vector<std::vector<MemoryAccess>>& accesses,
                                int max_streams);

// The memory planner's side of auxiliary streams. plan_memory() lets buffer B reuse the bytes of
// buffer A whose last reader comes earlier in the launch order; on several streams that reader
// may still be running when B's writer starts, and the event that must then order them (write
// after read) would serialise branches the data lets run side by side. So for a plan meant for
// auxiliary streams, each buffer holds its bytes until the last op that the data flow does not
// order after every op touching it: result[b] >= buffers[b].last_op, for plan_memory's
// `hold_until`. Reuse then happens only where the data already orders the two buffers' ops.
// The data flow: op j follows op i when j reads what i writes (or they write the same channels),
// transitively; memory reuse and the workspace are not part of it.
std::vector<int> concurrent_hold_until(const EngineGraph& graph);

}  // namespace lesson12
