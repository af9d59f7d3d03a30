// Run a program (usually this one again) in a fresh process and capture what it prints.
//
// CUDA's process-global state (driver initialisation, primary contexts, sticky errors, lazy
// module loading) can only be observed from its start in a process that has made no CUDA call
// yet. fork() is not an option once CUDA is initialised, so we spawn a new process image.
#pragma once

#include <string>
#include <vector>

namespace course {

struct ProcessResult {
  int exit_code = -1;  // the exit status, or 128 + signal number if it was killed
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] with the arguments argv[1..], the current environment plus `env` ("NAME=value"
// entries replace or add variables). Throws std::system_error if it cannot be started.
ProcessResult run_process(const std::vector<std::string>& argv,
                          const std::vector<std::string>& env = {});

// The path of the running executable (/proc/self/exe resolved).
std::string self_executable();

}  // namespace course
