#pragma once
// Which build of the executor's kernels this process runs. Its compute library
// comes in one copy per x86-64 level (exec/compute/CMakeLists.txt): the baseline,
// and x86-64-v3 (AVX2, FMA) and x86-64-v4 (AVX-512) where the build made them.
// The dynamic loader maps the copy of the highest level the processor
// supports, so the level is a fact of the code that is running, compiled into
// each copy, not a guess from the processor's flags.

#include <string>
#include <vector>

namespace pipescope::exec {

// "x86-64", "x86-64-v3" or "x86-64-v4" (another processor: its name).
const char* kernel_level();

// The levels this build made, the baseline first.
std::vector<std::string> built_kernel_levels();

// For the commands' output: the level, the vector instructions the copy was
// compiled for and the levels built, "x86-64-v3 (AVX2, FMA; built: x86-64,
// x86-64-v3, x86-64-v4)".
std::string kernel_level_label();

}  // namespace pipescope::exec
