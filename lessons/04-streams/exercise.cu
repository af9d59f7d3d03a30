// Lesson 04 exercises. Replace each TODO body, then check your work with
//
//   make check LESSON=04          (all tests, against this file)
//
// The declarations, with the contract each function must meet, are in streams.cuh. The lesson's
// own versions are in solutions.cuh: try first, compare after.
#include "streams.cuh"

#include <stdexcept>

namespace course::streams {

// Exercise 1: the ideal time of an N-chunk pipeline through three engines.
//
// Hints:
//  - S = serial.total_ms() is the time with no overlap; M = the longest of the three stages.
//  - With N equal chunks each engine spends M / N (or less) per chunk. The first chunk must pass
//    through all three stages before the last engine has anything to do (filling), and the last
//    chunk must drain through the stages after the busiest one. Draw it for N = 3 and count.
//  - The answer is M + (S - M) / N. ideal_speedup = S / ideal (1 if ideal is 0).
//  - Reject chunks < 1 and negative stage times with std::invalid_argument.
PipelineBound pipeline_bound(const StageTimes& serial, int chunks) {
  (void)serial;
  (void)chunks;
  throw std::logic_error("TODO(exercise 1): compute the longest stage, the ideal time and speedup");
}

// Exercise 2: the K-stream pipeline loop.
//
// Hints:
//  - For chunk c: lane = lanes[c % lanes.size()]; its elements are
//    [chunk_begin(cfg.n, cfg.chunks, c), + chunk_size(...)).
//  - cudaMemcpyAsync(lane.d_in, in + begin, bytes, cudaMemcpyHostToDevice, lane.stream), then
//    cfg.launches_per_chunk calls of launch_mix (the first reads lane.d_in, the others work in
//    place on lane.d_out), then cudaMemcpyAsync back into out + begin. All on lane.stream.
//  - With a trace, record trace->h2d_done[c], kernel_done[c], d2h_done[c] on lane.stream after
//    each stage, even when the chunk is empty (then enqueue no copy and no kernel).
//  - Never synchronise here: the point is that the host races ahead and queues everything.
//  - Checked through CUPTI's records of what the GPU ran (a [cupti] test): each lane's stream
//    ran its chunks' copies and kernels, and some copy overlapped another stream's kernel.
void enqueue_chunks(const PipelineConfig& cfg, const std::uint32_t* in, std::uint32_t* out,
                    const std::vector<StreamLane>& lanes, PipelineTrace* trace) {
  (void)cfg;
  (void)in;
  (void)out;
  (void)lanes;
  (void)trace;
  throw std::logic_error("TODO(exercise 2): enqueue H2D, kernel(s) and D2H for every chunk");
}

// Exercise 3: the event between a preprocess stream and an inference stream.
//
// Hints:
//  - First reject a null tensor or result (n > 0) or a null `ready` with std::invalid_argument,
//    before enqueuing anything: a throw after the producer's launch leaves work in flight.
//  - launch_spin_then_fill(tensor, n, value, spin_ns, preprocess) is the slow producer.
//  - cudaEventRecord(ready, preprocess) AFTER it; cudaStreamWaitEvent(infer, ready, 0) AFTER
//    the record (a wait on an event that has not been recorded yet waits for nothing).
//  - Then launch_mix(tensor, result, n, rounds, infer). No cudaStreamSynchronize, no
//    cudaDeviceSynchronize: the host must not block (a [cupti] test checks the calls you make).
void preprocess_then_infer(std::uint32_t* tensor, std::uint32_t* result, std::size_t n,
                           std::uint32_t value, std::uint64_t spin_ns, int rounds,
                           cudaStream_t preprocess, cudaStream_t infer, cudaEvent_t ready) {
  (void)tensor;
  (void)result;
  (void)n;
  (void)value;
  (void)spin_ns;
  (void)rounds;
  (void)preprocess;
  (void)infer;
  (void)ready;
  throw std::logic_error(
      "TODO(exercise 3): order the inference after the preprocess with an event");
}

// Exercise 4: fix the unsynchronised read.
//
// Hints:
//  - Start from read_result_unsynchronised in streams.cu: it enqueues the producer and the D2H
//    copy, then sums `host` at once, while the copy is still waiting behind the producer. Its
//    three helpers are private to streams.cu, so write their few lines here: the null check,
//    launch_spin_then_fill + cudaMemcpyAsync (only when n > 0), and the sum.
//  - Make the host wait for the copy before it reads: cudaStreamSynchronize(stream), or record an
//    event after the copy and cudaEventSynchronize it.
//  - Reject null pointers with n > 0 (std::invalid_argument).
//  - An event recorded BEFORE the copy (between the producer and the copy) is a bug that gives
//    the right sum in practice: the copy is short. A [cupti] test checks the order of the calls.
std::uint64_t read_result_synchronised(std::uint32_t* d_buf, std::uint32_t* host, std::size_t n,
                                       std::uint32_t value, std::uint64_t spin_ns,
                                       cudaStream_t stream) {
  (void)d_buf;
  (void)host;
  (void)n;
  (void)value;
  (void)spin_ns;
  (void)stream;
  throw std::logic_error("TODO(exercise 4): wait for the copy before reading the host buffer");
}

// Exercise 5: capture the pipeline into a CUDA Graph.
//
// Hints:
//  - Reject pageable in/out when pipeline.config().n > 0: is_pinned(ptr).
//  - cudaStreamBeginCapture(pipeline.origin(), cudaStreamCaptureModeGlobal), then
//    pipeline.enqueue(in, out) (no trace), then cudaStreamEndCapture(origin, &raw_graph).
//  - If enqueue throws, still end the capture (and destroy any graph it returns) before
//    rethrowing, or the stream stays in capture mode.
//  - Wrap the result: g.graph = Graph(raw); g.exec = GraphExec(g.graph);
PipelineGraph capture_pipeline(Pipeline& pipeline, const std::uint32_t* in, std::uint32_t* out) {
  (void)pipeline;
  (void)in;
  (void)out;
  throw std::logic_error(
      "TODO(exercise 5): capture pipeline.enqueue into a graph and instantiate it");
}

}  // namespace course::streams
