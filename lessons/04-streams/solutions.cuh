// Lesson 04: the exercise solutions. Read them after you have tried.
//
// Not compiled on its own: streams.cu includes this file at its end, in the lesson build only, so
// the solutions share its translation unit (its helpers, and the kernels that call them).
// The exercise build (make check LESSON=04) compiles streams.cu with LESSON_EXERCISE_BUILD
// defined, which leaves this file out, and exercise.cu supplies the same functions instead.
#pragma once

namespace course::streams {

// Exercise 1.
PipelineBound pipeline_bound(const StageTimes& serial, int chunks) {
  if (chunks < 1)
    throw std::invalid_argument("pipeline_bound: chunks must be >= 1 (got " +
                                std::to_string(chunks) + ")");
  validate(serial);
  PipelineBound b;
  const double total = serial.total_ms();
  b.longest_ms = std::max({serial.h2d_ms, serial.kernel_ms, serial.d2h_ms});
  // Chunk 0 passes through all three stages alone (fill), the others follow one longest-stage
  // slot apart, and the last one drains through the remaining stages: S/N + (N-1) * M/N.
  b.ideal_ms = b.longest_ms + (total - b.longest_ms) / chunks;
  b.ideal_speedup = b.ideal_ms > 0.0 ? total / b.ideal_ms : 1.0;
  return b;
}

// Exercise 2.
void enqueue_chunks(const PipelineConfig& cfg, const std::uint32_t* in, std::uint32_t* out,
                    const std::vector<StreamLane>& lanes, PipelineTrace* trace) {
  for (int c = 0; c < cfg.chunks; ++c) {
    // Depth first: all of chunk c, then chunk c + 1 on the next stream. Chunk c + K reuses this
    // lane's buffers; its H2D copy is queued behind this chunk's D2H copy in the same stream.
    const StreamLane& lane = lanes[static_cast<std::size_t>(c) % lanes.size()];
    const std::size_t begin = chunk_begin(cfg.n, cfg.chunks, c);
    const std::size_t count = chunk_size(cfg.n, cfg.chunks, c);
    const std::size_t bytes = count * sizeof(std::uint32_t);
    if (count > 0) {
      CUDA_CHECK(
          cudaMemcpyAsync(lane.d_in, in + begin, bytes, cudaMemcpyHostToDevice, lane.stream));
    }
    if (trace != nullptr) trace->h2d_done[c].record(lane.stream);
    for (int l = 0; l < cfg.launches_per_chunk; ++l) {
      launch_mix(l == 0 ? lane.d_in : lane.d_out, lane.d_out, count, cfg.rounds, lane.stream);
    }
    if (trace != nullptr) trace->kernel_done[c].record(lane.stream);
    if (count > 0) {
      CUDA_CHECK(
          cudaMemcpyAsync(out + begin, lane.d_out, bytes, cudaMemcpyDeviceToHost, lane.stream));
    }
    if (trace != nullptr) trace->d2h_done[c].record(lane.stream);
  }
}

// Exercise 3.
void preprocess_then_infer(std::uint32_t* tensor, std::uint32_t* result, std::size_t n,
                           std::uint32_t value, std::uint64_t spin_ns, int rounds,
                           cudaStream_t preprocess, cudaStream_t infer, cudaEvent_t ready) {
  // Everything checked before anything is enqueued: a throw after the producer's launch would
  // leave work in flight that nobody waits for.
  if (n > 0 && (tensor == nullptr || result == nullptr)) {
    throw std::invalid_argument(
        "preprocess_then_infer: tensor and result must hold n elements "
        "(got a null pointer)");
  }
  if (ready == nullptr) throw std::invalid_argument("preprocess_then_infer: the event is null");
  launch_spin_then_fill(tensor, n, value, spin_ns, preprocess);
  // Record first, then wait: cudaStreamWaitEvent waits for the most recent record at the time of
  // the call. Waiting on an event not yet recorded waits for nothing.
  CUDA_CHECK(cudaEventRecord(ready, preprocess));
  CUDA_CHECK(cudaStreamWaitEvent(infer, ready, 0));
  launch_mix(tensor, result, n, rounds, infer);
}

// Exercise 4.
std::uint64_t read_result_synchronised(std::uint32_t* d_buf, std::uint32_t* host, std::size_t n,
                                       std::uint32_t value, std::uint64_t spin_ns,
                                       cudaStream_t stream) {
  check_read_args(d_buf, host, n);
  enqueue_fill_and_copy(d_buf, host, n, value, spin_ns, stream);
  // The host may read `host` only once the copy has finished: wait for the stream (or for an
  // event recorded after the copy, which leaves later work in the stream running).
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return host_sum(host, n);
}

// Exercise 5.
PipelineGraph capture_pipeline(Pipeline& pipeline, const std::uint32_t* in, std::uint32_t* out) {
  if (pipeline.config().n > 0 && !(is_pinned(in) && is_pinned(out))) {
    throw std::invalid_argument(
        "capture_pipeline: in and out must be pinned host memory (cudaHostAlloc / PinnedBuffer); "
        "a graph replays its copies asynchronously, which pageable memory cannot do");
  }
  const cudaStream_t origin = pipeline.origin();
  // Global mode: while we capture, a "potentially unsafe" call (cudaMalloc, a synchronous copy)
  // from any thread fails instead of silently landing outside the graph.
  CUDA_CHECK(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal));
  cudaGraph_t raw = nullptr;
  try {
    // The fork event recorded on `origin` and waited on by the other streams pulls them into the
    // capture; the join brings them back, as EndCapture requires.
    pipeline.enqueue(in, out);
  } catch (...) {
    cudaStreamEndCapture(origin, &raw);  // end the capture whatever happened; drop its graph
    if (raw != nullptr) cudaGraphDestroy(raw);
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(origin, &raw));
  PipelineGraph g;
  g.graph = Graph(raw);
  g.exec = GraphExec(g.graph);
  return g;
}

}  // namespace course::streams
