// Lesson 04 exercises. Replace each TODO body, then check your work with
//
//   make check LESSON=04          (all tests, against this file)
//
// Each stub's comment is its contract; streams.cuh declares the functions and the helpers
// (launch_mix, launch_spin_then_fill, chunk_begin / chunk_size, is_pinned, Graph, GraphExec).
// README.md has folded hints; the lesson's own versions are in solutions.cuh: try first, compare
// after. No test checks the text of an exception in these exercises, only its type.
#include "streams.cuh"

#include <stdexcept>

namespace course::streams {

// Exercise 1 [ex1, CPU]: the ideal time of an N-chunk pipeline through three engines.
// In:  serial, the time of each stage (H2D copy, kernel, D2H copy) over the whole batch when
//      nothing overlaps, in ms; chunks, the number N of equal chunks the batch is cut into.
// Out: longest_ms, the longest of the three stages (M); ideal_ms, the shortest possible time of
//      the N chunks through the three engines (H2D copy engine, SMs, D2H copy engine), each
//      engine working on one chunk at a time and every chunk passing H2D, kernel, D2H in that
//      order, with as many streams as needed (a three-machine flow shop); ideal_speedup, the
//      serial total S divided by ideal_ms (1 when ideal_ms is 0).
// Errors: chunks < 1, or a negative stage time: std::invalid_argument.
// Tests: hand-computed cases (S = 6, M = 3, N = 4: 3.75 ms), and ideal_ms equal to a direct
//      simulation of three engines for many stage times and N from 1 to 64.
PipelineBound pipeline_bound(const StageTimes& serial, int chunks) {
  (void)serial;
  (void)chunks;
  throw std::logic_error("TODO(exercise 1): compute the longest stage, the ideal time and speedup");
}

// Exercise 2 [ex2, GPU]: the K-stream pipeline loop.
// In:  cfg (valid), in / out (host, cfg.n elements; pinned, or pageable, which still works
//      but serialises; out may equal in), lanes (cfg.streams of them: a stream and two device
//      buffers of the largest chunk each), trace (null, or one made for cfg.chunks chunks).
// Does: for each chunk c = 0 .. cfg.chunks - 1 (chunk_size(cfg.n, cfg.chunks, c) elements from
//      chunk_begin(cfg.n, cfg.chunks, c)), depth first, all on lanes[c % lanes.size()].stream: the
//      H2D copy of in[chunk] into the lane's d_in; cfg.launches_per_chunk launch_mix launches of
//      cfg.rounds rounds (d_in -> d_out, then d_out in place); the D2H copy of d_out into
//      out[chunk]. An empty chunk enqueues no copy and no kernel. With a trace, it records
//      trace->h2d_done[c], kernel_done[c] and d2h_done[c] on that stream after the respective
//      stage, also for an empty chunk.
// Returns once everything is enqueued: it does not synchronise (the caller does).
// Errors: none of its own (Pipeline::enqueue checks the arguments); CudaError from a failed call.
// Tests: out == the CPU reference for chunk counts that do not divide n, more chunks than
//      elements, n = 0 and 1, pageable memory, in place, two batches in a row; the trace's
//      events in order; and (a [cupti] test) CUPTI's records of what the GPU ran: each lane's
//      stream ran its own chunks' copies and kernels, and some copy ran while a kernel of
//      another stream ran (every chunk on one stream, or waiting after each chunk, gives the
//      right values and fails this).
void enqueue_chunks(const PipelineConfig& cfg, const std::uint32_t* in, std::uint32_t* out,
                    const std::vector<StreamLane>& lanes, PipelineTrace* trace) {
  (void)cfg;
  (void)in;
  (void)out;
  (void)lanes;
  (void)trace;
  throw std::logic_error("TODO(exercise 2): enqueue H2D, kernel(s) and D2H for every chunk");
}

// Exercise 3 [ex3]: the event between a preprocess stream and an inference stream.
// Does: enqueues the producer launch_spin_then_fill(tensor, n, value, spin_ns, preprocess) (it
//      writes the tensor only at its end) and the consumer launch_mix(tensor, result, n, rounds,
//      infer), and orders the consumer after the producer with the event `ready`, recorded on
//      `preprocess` and waited for by `infer`. Neither the host nor `preprocess` waits: it
//      returns at once. Once `infer` has synchronised, result[i] == mix_rounds(value, rounds).
// Errors: a null tensor or result with n > 0, or a null `ready`: std::invalid_argument, before
//      anything is enqueued; CudaError from a failed launch, record or wait.
// Tests: the errors (CPU); the producer spins 20 ms before it writes, so an unordered consumer
//      reads zeros (GPU); a [cupti] test checks the calls: a record of `ready` on `preprocess`
//      before the wait of `infer` on it, and no synchronising call (stream, event or device).
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

// Exercise 4 [ex4, GPU]: read_result_unsynchronised (streams.cu), fixed.
// Does: enqueues on `stream` launch_spin_then_fill(d_buf, n, value, spin_ns) and then the D2H
//      copy of d_buf into `host` (pinned, n elements), and returns the sum of host[0, n) read
//      only once the copy has landed: n * value. n == 0 enqueues nothing and returns 0.
// Errors: a null d_buf or host with n > 0: std::invalid_argument, before any CUDA call;
//      CudaError from a failed launch, copy or wait.
// Tests: the sum for n = 1 and 4096 (the copy waits 20 ms behind the producer); n == 0 and
//      null buffers; a [cupti] test checks that after the copy into `host` the host waits on
//      something queued after that copy: the stream, the device, or an event recorded on the
//      stream after the copy (an event recorded before the copy gives the right sum, because
//      the copy is short, and fails this).
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

// Exercise 5 [ex5, GPU]: capture the pipeline into a CUDA Graph.
// Does: captures pipeline.enqueue(in, out) (no trace), issued on pipeline.origin(), into a
//      graph and instantiates it: g.graph and g.exec. Nothing runs during the capture; each
//      g.exec.launch(stream) afterwards does the batch's work on the same addresses, with the
//      memory's contents at replay time.
// Errors: in or out not pinned host memory when pipeline.config().n > 0: std::invalid_argument,
//      before the capture begins. If enqueue throws, the capture is ended, its graph (if any)
//      destroyed, and the exception passes on: the stream is no longer capturing and stays
//      usable. CudaError from a failed capture or instantiation.
// Tests: the replay equals the stream version and the CPU reference, twice with new input at
//      the same addresses; the graph has at least one node per copy and kernel; pageable memory
//      is refused and the pipeline still works after the refusal.
PipelineGraph capture_pipeline(Pipeline& pipeline, const std::uint32_t* in, std::uint32_t* out) {
  (void)pipeline;
  (void)in;
  (void)out;
  throw std::logic_error(
      "TODO(exercise 5): capture pipeline.enqueue into a graph and instantiate it");
}

}  // namespace course::streams
