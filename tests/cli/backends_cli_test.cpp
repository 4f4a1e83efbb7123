// The CUDA, MPI and NCCL backends are libraries the command opens only when a
// command asks for them (exec/backends.h): the other commands load none of
// their libraries, and run where those libraries are missing.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cli/cli_runner.h"

namespace {

namespace fs = std::filesystem;
using pipescope::testing::CliResult;
using pipescope::testing::run_program;
using pipescope::testing::run_under;

const std::string kSmall = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/cpu-small.json";
const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

// The libraries of the backends and what they need; none may be loaded by a
// command that does not use them.
const std::vector<std::string> kBackendLibraries = {"libpipescope_exec_cuda",
                                                    "libpipescope_exec_mpi",
                                                    "libpipescope_exec_nccl",
                                                    "libcudart",
                                                    "libcublas",
                                                    "libnccl",
                                                    "libmpi"};

// The dynamic loader names every file it opens (LD_DEBUG=files, on stderr).
CliResult run_watching_the_loader(const std::string& args) {
  return run_under("env LD_DEBUG=files", args);
}

TEST(Backends, CommandsThatUseNoBackendLoadNoneOfTheirLibraries) {
  for (const std::string& args : {std::string("--help"), "simulate " + kDemo,
                                  "plan " + kSmall + " -K 2", std::string("validate")}) {
    const CliResult r = run_watching_the_loader(args);
    EXPECT_EQ(r.status, 0) << args << ": " << r.err;
    // The loader's log is there: it names the command's own libraries.
    EXPECT_NE(r.err.find("libpipescope_sim_engine.so"), std::string::npos) << args;
    for (const std::string& library : kBackendLibraries) {
      EXPECT_EQ(r.err.find(library), std::string::npos) << args << " loaded " << library;
    }
  }
}

#ifdef PIPESCOPE_CLI_HAS_CUDA
TEST(Backends, AskingForTheCudaBackendLoadsItsLibrary) {
  const std::string plan = ::testing::TempDir() + "backends_plan.json";
  ASSERT_EQ(pipescope::testing::run("plan " + kSmall + " -K 2 -o " + plan).status, 0);
  const CliResult r = run_watching_the_loader("run " + plan + " --backend cuda --steps 2");
  EXPECT_NE(r.err.find("libpipescope_exec_cuda.so"), std::string::npos);
  EXPECT_NE(r.err.find("libcudart"), std::string::npos);
  EXPECT_EQ(r.err.find("libmpi"), std::string::npos);
  fs::remove(plan);
}
#endif

// A copy of the command with its own libraries only, as on a machine where
// the backends' libraries are not installed.
fs::path copy_without_backends(const fs::path& to) {
  const fs::path cli = fs::path(PIPESCOPE_CLI);
  const fs::path lib = fs::path(PIPESCOPE_LIB_DIR);
  fs::create_directories(to / "cli");
  fs::copy_file(cli, to / "cli" / "pipescope");
  fs::create_directories(to / "lib");
  for (const auto& entry : fs::recursive_directory_iterator(lib)) {
    const std::string name = entry.path().filename().string();
    const bool backend = name == "libpipescope_exec_cuda.so" ||
                         name == "libpipescope_exec_mpi.so" || name == "libpipescope_exec_nccl.so";
    const bool own = name.rfind("libpipescope_", 0) == 0 && !backend;
    if (!entry.is_regular_file() || !own) continue;
    const fs::path target = to / "lib" / fs::relative(entry.path(), lib);
    fs::create_directories(target.parent_path());
    fs::copy_file(entry.path(), target);
  }
  return to / "cli" / "pipescope";
}

TEST(Backends, WithoutTheBackendLibrariesTheCommandRunsAndSaysWhatIsMissing) {
  const fs::path dir = fs::path(::testing::TempDir()) / "pipescope_without_backends";
  fs::remove_all(dir);
  const fs::path program = copy_without_backends(dir);
  const CliResult sim = run_program(program.string(), "simulate " + kDemo);
  EXPECT_EQ(sim.status, 0) << sim.err;
  EXPECT_NE(sim.out.find("Step time"), std::string::npos) << sim.out;

  const std::string plan = (dir / "plan.json").string();
  ASSERT_EQ(run_program(program.string(), "plan " + kSmall + " -K 2 -o " + plan).status, 0);
  const CliResult cuda = run_program(program.string(), "run " + plan + " --backend cuda --steps 2");
  EXPECT_EQ(cuda.status, 1);
#ifdef PIPESCOPE_CLI_HAS_CUDA
  EXPECT_EQ(cuda.err.rfind("pipescope: error: --backend cuda: cannot load "
                           "libpipescope_exec_cuda.so (it needs the CUDA runtime",
                           0),
            0u)
      << cuda.err;
  EXPECT_NE(cuda.err.find("cannot open shared object file"), std::string::npos) << cuda.err;
#else
  EXPECT_NE(cuda.err.find("built without CUDA"), std::string::npos) << cuda.err;
#endif
  EXPECT_EQ(std::count(cuda.err.begin(), cuda.err.end(), '\n'), 1) << cuda.err;

  const CliResult mpi = run_program(program.string(), "run " + plan + " --backend mpi --steps 2");
  EXPECT_EQ(mpi.status, 1);
#ifdef PIPESCOPE_MPIEXEC
  EXPECT_EQ(mpi.err.rfind("pipescope: error: --backend mpi: cannot load "
                          "libpipescope_exec_mpi.so (it needs OpenMPI's libmpi)",
                          0),
            0u)
      << mpi.err;
#else
  EXPECT_NE(mpi.err.find("built without MPI"), std::string::npos) << mpi.err;
#endif
  fs::remove_all(dir);
}

}  // namespace
