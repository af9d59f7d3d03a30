// Lesson 10: the solution of exercise 3 (Hopper), and with it the lesson build's copy of the
// exercise 3 kernel. Read it after you have tried.
//
// Compiled for sm_90a only, into the lesson build only (lesson10_sm90_solution in
// CMakeLists.txt): the exercise build compiles your exercise.cu in its place (exercise_sm90.cu).
// The course's own v5..v7 and v9 run the same loop from solutions_sm90.cuh.
#include "tensor_gemm.cuh"
#include "wgmma.cuh"

namespace lesson10 {

// Exercise 3. v6's schedule: per K tile, wait until its stage is full, then fence (the
// accumulators were last touched by other instructions: the zeroing, or the previous wait),
// issue the stage's four wgmma and commit them as one group. wait_group 1 then returns once at
// most that group is pending: the previous tile's group has completed, so its stage is read no
// more and goes back to the producer (one arrival per warp group, from one thread: "empty"
// expects 2). The tensor cores meanwhile run this tile's group, so they do not idle between
// stages as with v5's wait_group 0. After the loop, wait for the last group and release its
// stage. pin_registers after each wait keeps the compiler from moving a read of d above it.
template <class Ring>
__device__ __forceinline__ void ex_wgmma_consumer(const Ring& ring, float (&d)[128]) {
  const bool leader = threadIdx.x % 128 == 0;
  for (int kt = 0; kt < ring.k_tiles; ++kt) {
    const int s = ring.stage(kt);
    ring.wait(ring.full(s), ring.phase(kt));
    pin_registers(d);
    wgmma_fence();
    ring.mma(s, d);
    wgmma_commit();
    wgmma_wait<1>();
    pin_registers(d);
    if (kt > 0 && leader) ring.arrive(ring.empty(ring.stage(kt - 1)));
  }
  wgmma_wait<0>();
  pin_registers(d);
  if (ring.k_tiles > 0 && leader) ring.arrive(ring.empty(ring.stage(ring.k_tiles - 1)));
}

}  // namespace lesson10

#include "exercise_kernels_sm90.cuh"
