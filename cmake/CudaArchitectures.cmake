# Chooses CMAKE_CUDA_ARCHITECTURES before project() enables CUDA, unless the user set it
# (-DCMAKE_CUDA_ARCHITECTURES=... or the CUDAARCHS environment variable).
#
#  - A GPU is visible (nvidia-smi answers): build SASS for exactly that GPU ("90" for an H200),
#    so nothing is JIT-compiled at the first launch and timings are what the hardware does.
#    (CMake 3.24 has CMAKE_CUDA_ARCHITECTURES=native; we support 3.22, so ask nvidia-smi.)
#  - No GPU (CI, a build host): PTX for compute_75 only ("75-virtual"). The driver compiles it
#    for whatever sm_75-or-newer GPU runs the binary, and nvcc compiles each file once.
if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
  return()
endif()

set(_course_archs "")
find_program(COURSE_NVIDIA_SMI nvidia-smi)
if(COURSE_NVIDIA_SMI)
  execute_process(
    COMMAND "${COURSE_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
    OUTPUT_VARIABLE _course_caps
    RESULT_VARIABLE _course_rc
    ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(_course_rc EQUAL 0 AND _course_caps MATCHES "^[0-9]+\\.[0-9]+")
    string(REPLACE "\n" ";" _course_caps "${_course_caps}")
    foreach(_cap IN LISTS _course_caps)
      string(STRIP "${_cap}" _cap)
      string(REPLACE "." "" _arch "${_cap}")
      if(_arch LESS 75)
        message(WARNING "GPU with compute capability ${_cap} found: the course needs 7.5 (Turing) or newer.")
      endif()
      list(APPEND _course_archs "${_arch}")
    endforeach()
    list(REMOVE_DUPLICATES _course_archs)
  endif()
endif()

if(_course_archs)
  message(STATUS "CUDA architectures from the GPU(s) nvidia-smi reports: ${_course_archs}")
  set(CMAKE_CUDA_ARCHITECTURES "${_course_archs}" CACHE STRING "CUDA architectures to build for")
else()
  message(STATUS "No GPU visible: building PTX for compute_75 (runs, JIT-compiled, on any sm_75+ GPU)")
  set(CMAKE_CUDA_ARCHITECTURES "75-virtual" CACHE STRING "CUDA architectures to build for")
endif()
