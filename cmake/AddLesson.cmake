# add_lesson(): the lesson contract (one folder, one call; see README.md) made in lessons/NN-name/.
#
#   add_lesson(
#     SOURCES       reduction.cu            # the lesson's code: kernels + launchers (+ solutions)
#     TESTS         test_reduction.cpp      # Catch2 tests; GPU tests carry the tag [gpu]
#     EXERCISES     ex1 ex2 ex3             # tags: tests of exercise K carry [exK]
#     GPU_EXERCISES ex2 ex3                 # those whose stubs fail only [gpu] tests: their
#                                           # stubs-fail check needs a GPU (below)
#     LIBS          CUDA::cublas            # extra libraries for the lesson's code
#     TEST_LIBS     course_cupti            # extra libraries for the tests only
#     BENCH         bench_reduction.cu      # optional Google Benchmark executable
#     CLI_BAD_VALUE --reps 0                # an option of lessonNN and a value it must refuse
#     GRADE         grade_reduction.cpp     # optional: the speed grade's cases (below)
#     GRADE_NAMESPACE reduction             # with GRADE: the namespace of the lesson's code
#     MULTIGPU)                             # some [gpu] tests also carry [multigpu]: 2+ GPUs
#
# Targets (NN = the folder's number):
#   lessonNN                 main.cu: the lesson binary (make run)
#   lessonNN_tests           the tests against the lesson's code
#   lessonNN_exercise_tests  the same tests against exercise.cu (make check LESSON=NN); the
#                            lesson's code is compiled again with LESSON_EXERCISE_BUILD defined,
#                            which leaves out its solutions.cuh (the exercise solutions)
#                            The cache variable LESSON_EXERCISE_SOURCE_NN names another file to
#                            use instead of exercise.cu (e.g. to build a known-wrong solution
#                            and see make check fail on it); the stubs-fail checks still hash
#                            the real exercise.cu.
#   lessonNN_bench           the benchmark (make bench), when BENCH is given
#   lessonNN_grade           with GRADE: the speed grade (common/grade_run.hpp), which
#                            cmake/check_exercise.sh builds and runs on a GPU after the
#                            sanitizers. It links the exercise build (yours) and
#                            lessonNN_course_code: the lesson's SOURCES compiled again, solutions
#                            included, with GRADE_NAMESPACE renamed GRADE_NAMESPACE_course by a
#                            macro (-Dreduction=reduction_course), so both versions of every
#                            exercise live in one process under distinct symbols. Neither is
#                            built by `all` (make test, CI): no test needs them, and they
#                            compile the lesson's code a third time. add_lesson writes
#                            lessonNN_grade.target beside the exercise tests, which tells the
#                            script that the lesson has a grade to build.
# ctest tests (labels in brackets):
#   NN/cpu                   CPU tests                                  [cpu]
#   NN/cli                   lessonNN's command line, no GPU needed: --help exits 0 and lists
#                            the options, an unknown option and CLI_BAD_VALUE exit 2 and are
#                            named on stderr (cmake/cli_check.sh)       [cpu]
#   NN/gpu                   [gpu] tests; skipped (exit 77) with no GPU [gpu]
#   NN/multigpu              with MULTIGPU only: the [multigpu] tests (which NN/gpu then leaves
#                            out); skipped (exit 77) with fewer than 2 CUDA devices
#                                                                       [gpu;multigpu]
#   NN/stubs-fail/exK        passes only if exercise K's tests FAIL on the stubs, proving the
#                            tests can fail; GPU exercises are skipped with no GPU, and all of
#                            them once you have edited exercise.cu (cmake/stubs_fail.sh)
#                                                                       [exercise] (+[gpu])
function(add_lesson)
  cmake_parse_arguments(L "MULTIGPU" "GRADE;GRADE_NAMESPACE"
                        "SOURCES;TESTS;EXERCISES;GPU_EXERCISES;LIBS;TEST_LIBS;BENCH;CLI_BAD_VALUE" ${ARGN})
  get_filename_component(folder "${CMAKE_CURRENT_SOURCE_DIR}" NAME)
  string(SUBSTRING "${folder}" 0 2 nn)
  set(p lesson${nn})
  foreach(ex IN LISTS L_GPU_EXERCISES)
    if(NOT ex IN_LIST L_EXERCISES)
      message(FATAL_ERROR "${folder}: GPU_EXERCISES names ${ex}, which EXERCISES does not list")
    endif()
  endforeach()

  add_library(${p}_code STATIC ${L_SOURCES})
  target_include_directories(${p}_code PUBLIC "${CMAKE_CURRENT_SOURCE_DIR}")
  target_link_libraries(${p}_code PUBLIC course_common ${L_LIBS})

  set(LESSON_EXERCISE_SOURCE_${nn} "" CACHE FILEPATH
      "Lesson ${nn}: a file to compile instead of exercise.cu (empty: exercise.cu)")
  set(exercise_source exercise.cu)
  if(LESSON_EXERCISE_SOURCE_${nn})
    set(exercise_source "${LESSON_EXERCISE_SOURCE_${nn}}")
    message(STATUS "${folder}: the exercise build compiles ${exercise_source}, not exercise.cu")
  endif()
  add_library(${p}_exercise_code STATIC ${L_SOURCES} "${exercise_source}")
  target_include_directories(${p}_exercise_code PUBLIC "${CMAKE_CURRENT_SOURCE_DIR}")
  target_compile_definitions(${p}_exercise_code PRIVATE LESSON_EXERCISE_BUILD)
  target_link_libraries(${p}_exercise_code PUBLIC course_common ${L_LIBS})

  add_executable(${p} main.cu)
  target_link_libraries(${p} PRIVATE ${p}_code)

  # The test sources are compiled once and linked twice: against the solutions and the stubs.
  add_library(${p}_test_objects OBJECT ${L_TESTS})
  target_link_libraries(${p}_test_objects PRIVATE ${p}_code course_test_main ${L_TEST_LIBS})
  add_executable(${p}_tests $<TARGET_OBJECTS:${p}_test_objects>)
  target_link_libraries(${p}_tests PRIVATE ${p}_code course_test_main ${L_TEST_LIBS})
  add_executable(${p}_exercise_tests $<TARGET_OBJECTS:${p}_test_objects>)
  target_link_libraries(${p}_exercise_tests PRIVATE ${p}_exercise_code course_test_main
                                                     ${L_TEST_LIBS})

  # cmake/check_exercise.sh (make check) reads the exercises, and which of them have [gpu] tests,
  # from the binary's own tags (--list-tags): no list of them is kept here.
  add_test(NAME ${nn}/cpu COMMAND ${p}_tests ${COURSE_CATCH2_NO_TESTS_OK} "~[gpu]")
  set_tests_properties(${nn}/cpu PROPERTIES LABELS "cpu;${p}")
  if(L_MULTIGPU)
    add_test(NAME ${nn}/gpu COMMAND ${p}_tests --require-gpu ${COURSE_CATCH2_NO_TESTS_OK}
                                    "[gpu]~[multigpu]")
    add_test(NAME ${nn}/multigpu COMMAND ${p}_tests --require-gpus 2 ${COURSE_CATCH2_NO_TESTS_OK}
                                         "[multigpu]")
    set_tests_properties(${nn}/multigpu PROPERTIES LABELS "gpu;multigpu;${p}" SKIP_RETURN_CODE 77)
  else()
    add_test(NAME ${nn}/gpu COMMAND ${p}_tests --require-gpu ${COURSE_CATCH2_NO_TESTS_OK} "[gpu]")
  endif()
  set_tests_properties(${nn}/gpu PROPERTIES LABELS "gpu;${p}" SKIP_RETURN_CODE 77)
  add_test(NAME ${nn}/cli COMMAND sh "${PROJECT_SOURCE_DIR}/cmake/cli_check.sh"
                                  $<TARGET_FILE:${p}> ${L_CLI_BAD_VALUE})
  set_tests_properties(${nn}/cli PROPERTIES LABELS "cpu;${p}")

  foreach(ex IN LISTS L_EXERCISES)
    set(require "")
    set(labels "exercise;${p}")
    if(ex IN_LIST L_GPU_EXERCISES)
      set(require --require-gpu)
      list(APPEND labels gpu)
    endif()
    add_test(NAME ${nn}/stubs-fail/${ex}
             COMMAND sh "${PROJECT_SOURCE_DIR}/cmake/stubs_fail.sh"
                     "${CMAKE_CURRENT_SOURCE_DIR}/exercise.cu"
                     $<TARGET_FILE:${p}_exercise_tests> ${require} "[${ex}]")
    # Catch2 ends with "test cases: N | M failed" (v2 and v3): at least one must fail. A crash
    # prints no summary, so it does not count as the stub failing properly.
    set_tests_properties(${nn}/stubs-fail/${ex} PROPERTIES
      PASS_REGULAR_EXPRESSION "test cases: [^\n]*[1-9][0-9]* failed"
      SKIP_RETURN_CODE 77 LABELS "${labels}")
  endforeach()

  if(L_GRADE)
    if(NOT L_GRADE_NAMESPACE)
      message(FATAL_ERROR "${folder}: GRADE needs GRADE_NAMESPACE (the namespace of the lesson's code)")
    endif()
    add_library(${p}_course_code STATIC EXCLUDE_FROM_ALL ${L_SOURCES})
    target_include_directories(${p}_course_code PUBLIC "${CMAKE_CURRENT_SOURCE_DIR}")
    target_compile_definitions(${p}_course_code
                               PRIVATE "${L_GRADE_NAMESPACE}=${L_GRADE_NAMESPACE}_course")
    target_link_libraries(${p}_course_code PUBLIC course_common ${L_LIBS})
    add_executable(${p}_grade EXCLUDE_FROM_ALL ${L_GRADE})
    target_link_libraries(${p}_grade PRIVATE ${p}_exercise_code ${p}_course_code course_grade_run)
    file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/${p}_grade.target"
         "${p}_grade: this lesson has a speed grade (cmake/check_exercise.sh builds it on a GPU)\n")
  else()
    file(REMOVE "${CMAKE_CURRENT_BINARY_DIR}/${p}_grade.target")
  endif()

  if(L_BENCH)
    if(NOT benchmark_FOUND)
      message(WARNING "${folder}: Google Benchmark not found (make deps installs libbenchmark-dev); "
                      "skipping ${p}_bench")
    else()
      add_executable(${p}_bench ${L_BENCH})
      target_link_libraries(${p}_bench PRIVATE ${p}_code course_bench)
    endif()
  endif()
endfunction()

# course_lesson_needs(NN 04-streams 08-postprocess ...): a lesson that calls other lessons' code
# libraries adds their folders when the top level did not, so that -DCOURSE_LESSONS=NN alone
# still builds. Each folder is added once (lessonXX_code is the marker).
function(course_lesson_needs nn)
  foreach(dep ${ARGN})
    string(SUBSTRING "${dep}" 0 2 dep_nn)
    if(NOT TARGET lesson${dep_nn}_code)
      message(STATUS "lesson ${nn} needs lesson ${dep_nn}: adding lessons/${dep}")
      add_subdirectory("${CMAKE_CURRENT_SOURCE_DIR}/../${dep}" "${CMAKE_BINARY_DIR}/lessons/${dep}")
    endif()
  endforeach()
endfunction()
