# The course's commands. Everything is CMake + ctest underneath; this file only wraps them.
#
#   make deps                  install the system packages (Debian/Ubuntu; sudo when not root);
#                              run, test, check, bench and sanitize install what is missing themselves
#   make run [LESSON=NN]       build, then run every lesson binary in order (or lesson NN)
#   make test [LESSON=NN]      build, then run the whole test suite (ctest); with LESSON=NN only
#                              lesson NN's targets are built and only its tests run (ctest -L)
#   make check LESSON=NN       build lesson NN's exercise tests (that target only) and run them
#                              against YOUR exercise.cu; on a GPU also under compute-sanitizer
#                              (cmake/check_exercise.sh). With no GPU only the CPU tests run, and
#                              an exercise that has [gpu] tests is reported as not checked
#   make bench [LESSON=NN]     run the benchmarks; JSON goes to build/bench/ (BENCH_ARGS: flags)
#   make sanitize [LESSON=NN]  run the GPU tests under compute-sanitizer
#   make format                clang-format every C++/CUDA source in place (.clang-format)
#   make clean                 remove the build folder
#
# Variables: BUILD (build folder, default build), CMAKE_ARGS (e.g. -DCMAKE_CUDA_ARCHITECTURES=86),
# JOBS (parallel build jobs; default: all cores), NO_DEPS=1 (never install packages: your
# libraries come from elsewhere).

BUILD      ?= build
CMAKE_ARGS ?=
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
LESSON     ?=
# LESSON=3 means lesson 03, as do 03 and 003. (Not printf '%02d': it reads 08 as a bad octal.)
override LESSON := $(if $(LESSON),$(shell echo '$(LESSON)' | sed -E 's/^0*([0-9])$$/0\1/; s/^0+([0-9]{2,})$$/\1/'),)
# Google Benchmark flags for make bench: each benchmark runs at least 0.05 s of GPU time per
# repetition (the harness asks for 5 repetitions and reports their median).
BENCH_ARGS ?= --benchmark_min_time=0.05
CTEST      := ctest --test-dir $(BUILD) --output-on-failure

# The package list (Debian 12 / Ubuntu 22.04+ names) lives in tools/ensure_deps.sh. The CUDA
# toolkit and the NVIDIA driver are assumed to be installed already
# (https://developer.nvidia.com/cuda-downloads).
NO_DEPS ?= 0

.PHONY: all deps ensure-deps configure build run test check bench sanitize format clean lesson-given lesson-selected

all: build

deps:
	@tools/ensure_deps.sh --all

# Only what is missing (dpkg is asked; nothing happens when everything is there).
ensure-deps:
	@COURSE_NO_DEPS=$(NO_DEPS) COURSE_BUILD_DIR=$(BUILD) tools/ensure_deps.sh

# Configure every time (seconds once cached): a failed first configure then retries, and
# CMAKE_ARGS given later still take effect.
# Ninja when it is there at the first configure (decided here, after ensure-deps may have
# installed it); a configured folder keeps the generator it was made with.
configure: ensure-deps
	@gen=; if [ ! -f $(BUILD)/CMakeCache.txt ] && command -v ninja >/dev/null 2>&1; then gen="-G Ninja"; fi; \
	  echo cmake -S . -B $(BUILD) $$gen -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS); \
	  cmake -S . -B $(BUILD) $$gen -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Lesson binaries, in order: build/lessons/NN-name/lessonNN
LESSON_DIRS = $(sort $(wildcard lessons/[0-9][0-9]-*))
SELECTED    = $(if $(LESSON),$(filter lessons/$(LESSON)-%,$(LESSON_DIRS)),$(LESSON_DIRS))

# Say so before building anything when LESSON is missing or names no lesson.
lesson-given:
	@test -n "$(LESSON)" || { echo "usage: make check LESSON=NN (e.g. LESSON=01)"; exit 2; }

lesson-selected:
	@test -n "$(SELECTED)" || { echo "no lesson matches LESSON=$(LESSON) (lessons: $(notdir $(LESSON_DIRS)))"; exit 2; }

# With LESSON=NN only that lesson's binary (and what it links) is built, not the whole course.
run: lesson-selected configure
	cmake --build $(BUILD) -j $(JOBS) $(if $(LESSON),--target lesson$(LESSON))
	@tools/run_lessons.sh $(BUILD) $(SELECTED)

# With LESSON=NN: the lesson binary (its NN/cli test), its tests and its exercise tests (the
# stubs checks), and only the ctest tests labelled lessonNN (see cmake/AddLesson.cmake).
test: lesson-selected configure
	cmake --build $(BUILD) -j $(JOBS) $(if $(LESSON),--target lesson$(LESSON) lesson$(LESSON)_tests lesson$(LESSON)_exercise_tests)
	$(CTEST) $(if $(LESSON),-L '^lesson$(LESSON)$$')

check: lesson-given lesson-selected configure
	cmake --build $(BUILD) -j $(JOBS) --target lesson$(LESSON)_exercise_tests
	@sh cmake/check_exercise.sh $(BUILD) $(LESSON)

bench: lesson-selected build
	@mkdir -p $(BUILD)/bench
	@set -e; found=0; for d in $(SELECTED); do \
	  n=$$(basename $$d | cut -c1-2); b=$(BUILD)/$$d/lesson$${n}_bench; \
	  [ -x $$b ] || continue; found=1; \
	  echo "==================== $$(basename $$d) benchmark ===================="; \
	  $$b $(BENCH_ARGS) --benchmark_out=$(BUILD)/bench/lesson$$n.json --benchmark_out_format=json; \
	done; [ $$found = 1 ] || echo "no benchmark here: lessons 01 and 11 have none, and the others need Google Benchmark (libbenchmark-dev) at configure time"

# memcheck, racecheck (shared-memory hazards), synccheck (barriers) and initcheck (reads of
# uninitialised device memory) on every GPU test.
# Tests tagged [provokes-error] make CUDA fail on purpose (an impossible cudaMalloc, an invalid
# launch, a kernel that faults in a child process) and are left out, as are [cupti] (one CUPTI
# subscriber per process: the sanitizer is one) and [host-race] (lesson 09's slot-reuse race is
# between host threads and the copy engine, which the sanitizers do not see, and its long engine
# runs 10-100x slower under them). --report-api-errors no:
# every call is checked by CUDA_CHECK, so an unexpected API error already fails its test; the
# sanitizer's job here is memory access and races.
sanitize: lesson-selected build
	@command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer not found: it ships with the CUDA toolkit (<cuda>/bin; Debian/Ubuntu package cuda-sanitizer-NN)"; exit 2; }
	@set -e; for tool in memcheck racecheck synccheck initcheck; do \
	  for t in $(if $(LESSON),,$(BUILD)/tests/common_tests) $(foreach d,$(SELECTED),$(BUILD)/$(d)/lesson$(shell basename $(d) | cut -c1-2)_tests); do \
	    echo "==================== compute-sanitizer --tool $$tool $$t ===================="; \
	    rc=0; compute-sanitizer --tool $$tool --report-api-errors no --error-exitcode 1 $$t --require-gpu "[gpu]~[provokes-error]~[cupti]~[host-race]" || rc=$$?; \
	    [ $$rc = 77 ] && { echo "no usable GPU: nothing to sanitize"; exit 2; }; [ $$rc = 0 ] || exit $$rc; \
	  done; \
	done

# The committed .clang-format decides; formatted with clang-format 14 (Debian 12).
format:
	@command -v clang-format >/dev/null || { echo "clang-format not found (Debian/Ubuntu package clang-format)"; exit 2; }
	git ls-files '*.cu' '*.cuh' '*.cpp' '*.hpp' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
