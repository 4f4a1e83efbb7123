// The executor's compute library comes in one copy per x86-64 level
// (exec/compute/kernel_level.h): the dynamic loader must map the highest one
// this processor runs, and every copy it can run must compute what the
// reference does. A copy is checked by
// running this program's layer, model and optimizer checks again with the
// loader made to map that copy.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "exec/compute/kernel_level.h"
#include "tests/cli/cli_runner.h"

namespace pipescope::exec {
namespace {

// Whether this processor has what the code of `level` may use (the
// instruction sets of the psABI's x86-64 levels that compilers use).
bool processor_runs(const std::string& level) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt");
  const bool v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("bmi2");
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  if (level == "x86-64") return true;
  if (level == "x86-64-v2") return v2;
  if (level == "x86-64-v3") return v3;
  if (level == "x86-64-v4") return v4;
#endif
  return level == kernel_level();
}

// What the loader should pick: the forced copy when a parent test forces one,
// otherwise the highest level built that this processor runs.
std::string expected_level() {
  if (const char* forced = std::getenv("PIPESCOPE_FORCED_LEVEL")) return forced;
  std::string best = "x86-64";
  for (const std::string& level : built_kernel_levels()) {
    if (processor_runs(level)) best = level;
  }
  return best;
}

TEST(KernelLevel, TheLoaderMapsTheHighestLevelThisProcessorRuns) {
  const std::vector<std::string> built = built_kernel_levels();
  ASSERT_FALSE(built.empty());
  EXPECT_EQ(built.front(), "x86-64");
  EXPECT_NE(std::find(built.begin(), built.end(), kernel_level()), built.end());
  EXPECT_EQ(kernel_level(), expected_level());
  EXPECT_EQ(kernel_level_label().rfind(kernel_level(), 0), 0u) << kernel_level_label();
}

// The checks a copy must pass: every layer's forward and backward against the
// double-precision reference, whole models' gradients, the optimizers, the
// device layers on the host, and training the reference model.
constexpr const char* kCopyChecks =
    "KernelLevel.TheLoader*:Attention.*:CrossEntropy.*:FloatLayers.*:LayerGradients.*:"
    "ModelGradients.*:ParamOptimizer.*:DeviceLayers.*:ReferenceTraining.*";

// The environment that makes the loader map the copy of `level`: the
// baseline with the processor's AVX2 hidden from the loader (no level above
// it then qualifies), another level from its own folder, searched first.
std::string forcing_environment(const std::string& level) {
  if (level == "x86-64") return "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2";
  return "LD_LIBRARY_PATH=" + std::string(PIPESCOPE_LIB_DIR) + "/glibc-hwcaps/" + level;
}

class KernelCopy : public ::testing::TestWithParam<std::string> {};

TEST_P(KernelCopy, PassesTheKernelChecks) {
  const std::string level = GetParam();
  if (!processor_runs(level)) {
    GTEST_SKIP() << "this processor lacks the instructions of " << level
                 << ": that copy of the executor is built but cannot run here";
  }
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  const std::string out =
      (std::filesystem::temp_directory_path() / ("pipescope_level_" + std::to_string(::getpid())))
          .string();
  const std::string cmd = "env " + forcing_environment(level) + " PIPESCOPE_FORCED_LEVEL=" + level +
                          " " + self.string() + " --gtest_filter='" + kCopyChecks + "' >" + out +
                          " 2>&1";
  const int raw = std::system(cmd.c_str());
  const std::string log = pipescope::testing::slurp(out);
  std::filesystem::remove(out);
  ASSERT_TRUE(WIFEXITED(raw)) << log;
  EXPECT_EQ(WEXITSTATUS(raw), 0) << log;
  // The checks ran (a filter that matches nothing passes too).
  EXPECT_NE(log.find("KernelLevel.TheLoaderMapsTheHighestLevelThisProcessorRuns"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("LayerGradients."), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(EveryBuiltLevel, KernelCopy, ::testing::ValuesIn(built_kernel_levels()),
                         [](const ::testing::TestParamInfo<std::string>& level) {
                           std::string name = level.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace pipescope::exec
