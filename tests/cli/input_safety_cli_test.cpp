// Inputs as a user gives them: process substitutions and named FIFOs read like
// files for every kind of input, and Ctrl-C while waiting on a FIFO that nobody
// writes ends the command at once.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cli_runner.h"
#include "tests/open_files.h"

namespace pipescope::testing {
namespace {

namespace fs = std::filesystem;

const std::string kSource = PIPESCOPE_SOURCE_DIR;
const std::string kDemo = kSource + "/scenarios/demo.json";
const std::string kSmall = kSource + "/scenarios/cpu-small.json";

class InputSafetyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipescope_input_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `script` under bash (process substitution is bash's), with the program as $P.
  static CliResult bash(const std::string& script) {
    // run_under appends the program's path: bash's $1 here.
    std::string quoted = "'P=\"$1\"; ";
    for (const char c : script) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return run_under("bash -c " + quoted + "' bash", "");
  }

  fs::path dir_;
};

// The same result whether the scenario is a file, a process substitution or a
// FIFO that a background writer fills.
TEST_F(InputSafetyCli, ScenarioFromProcessSubstitutionAndFifo) {
  const CliResult file = run("simulate " + kDemo);
  ASSERT_EQ(file.status, 0) << file.err;
  const CliResult substituted = bash("exec $P simulate <(cat " + kDemo + ")");
  EXPECT_EQ(substituted.status, 0) << substituted.err;
  EXPECT_EQ(substituted.err, "");
  EXPECT_EQ(substituted.out.substr(substituted.out.find('\n')),
            file.out.substr(file.out.find('\n')))
      << "everything but the first line (the scenario's name, from the file's) must agree";

  const fs::path fifo = dir_ / "demo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const CliResult named =
      bash("cat " + kDemo + " > " + fifo.string() + " & exec $P simulate " + fifo.string());
  EXPECT_EQ(named.status, 0) << named.err;
  EXPECT_EQ(named.out, file.out);
}

// "-" is standard input: a scenario piped in, and a plan, simulate the same
// as their files; an error in it names "-".
TEST_F(InputSafetyCli, DashIsStandardInput) {
  const CliResult file = run("simulate " + kDemo + " --json");
  ASSERT_EQ(file.status, 0) << file.err;
  const CliResult piped = bash("cat " + kDemo + " | exec $P simulate - --json");
  EXPECT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out, file.out);

  const fs::path plan = dir_ / "plan.json";
  ASSERT_EQ(run("plan " + kDemo + " -K 4 --schedule 1f1b -o " + plan.string()).status, 0);
  const CliResult exported = run("export " + plan.string() + " --to megatron");
  ASSERT_EQ(exported.status, 0) << exported.err;
  const CliResult from_stdin = bash("exec $P export - --to megatron < " + plan.string());
  EXPECT_EQ(from_stdin.status, 0) << from_stdin.err;
  EXPECT_EQ(from_stdin.out, exported.out);

  const CliResult bad = bash("echo '{\"name\": 1}' | exec $P simulate -");
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err.rfind("pipescope: error: -: name: ", 0), 0u) << bad.err;
}

// Every other input kind through a process substitution: --set is not a file,
// the rest are read by the one input reader.
TEST_F(InputSafetyCli, EveryInputKindFromAProcessSubstitution) {
  const fs::path plan = dir_ / "plan.json";
  const fs::path csv = dir_ / "schedule.csv";
  // A schedule of the looped placement, which a schedule file can express.
  ASSERT_EQ(run("plan " + kSmall + " -K 2 --schedule 1f1b -o " + plan.string()).status, 0);
  ASSERT_EQ(run("export " + plan.string() + " --to torch-pipelining -o " + csv.string()).status, 0);
  const std::string hf = kSource + "/tests/data/hf/gpt2/config.json";
  ASSERT_TRUE(fs::exists(hf));
  for (const std::string& args :
       {"simulate " + kSmall + " --plan <(cat " + plan.string() + ")",
        "simulate " + kSmall + " --schedule-file <(cat " + csv.string() + ")",
        "simulate " + kSmall + " --hf-config <(cat " + hf + ") --seq-len 64",
        "export <(cat " + plan.string() + ") --to torch-pipelining"}) {
    const CliResult r = bash("exec $P " + args);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
    EXPECT_EQ(r.err, "") << args;
  }
}

// Every command that reads a scenario reads it once: a process substitution
// can be read only once, and the second read would find it empty.
TEST_F(InputSafetyCli, EveryScenarioCommandReadsAProcessSubstitutionOnce) {
  for (const std::string& args : {std::string("simulate"), std::string("plan -K 2"),
                                  std::string("sweep -K 1,2"), std::string("capacity -K 2")}) {
    const std::string cmd = args.substr(0, args.find(' '));
    const std::string rest = args.size() > cmd.size() ? args.substr(cmd.size()) : "";
    const CliResult r = bash("exec $P " + cmd + " <(cat " + kSmall + ")" + rest);
    EXPECT_EQ(r.status, 0) << args << "\n" << r.err;
    EXPECT_EQ(r.err, "") << args;
  }
}

// A FIFO that nobody writes: the first Ctrl-C ends the wait, the way any other
// long work ends. Killed after 20 s (a hang fails the test, not the suite).
TEST_F(InputSafetyCli, CtrlCEndsAWaitForAFifoWriter) {
  const fs::path fifo = dir_ / "nobody.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const fs::path err_file = dir_ / "stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 1);
    ::dup2(null, 0);
    std::string program = PIPESCOPE_CLI;
    std::string command = "simulate";
    std::string input = fifo.string();
    char* argv[] = {program.data(), command.data(), input.data(), nullptr};
    ::execv(program.c_str(), argv);
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  // Its stop handlers are installed before any input is read.
  (void)testing::wait_until_open(
      pid, [&](const fs::path& p) { return p == fifo; }, std::chrono::seconds(20));
  // Give it a moment to settle into the wait; how long does not matter.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ::kill(pid, SIGINT);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  int raw = 0;
  bool ended = false;
  while (std::chrono::steady_clock::now() < give_up) {
    if (::waitpid(pid, &raw, WNOHANG) == pid) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &raw, 0);
    FAIL() << "pipescope still waited on the FIFO 20 s after Ctrl-C";
  }
  EXPECT_TRUE(WIFEXITED(raw)) << "ended by a signal, not by itself";
  EXPECT_EQ(WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, 130);
  EXPECT_EQ(slurp(err_file), "pipescope: interrupted\n");
}

}  // namespace
}  // namespace pipescope::testing
