// What the command line promises about its outputs, tried as a user would: a
// full disk or /dev/full is an error naming the output, `| head` ends quietly,
// "-" is standard output for every output option, .gz is compressed, a killed
// run leaves nothing behind, and what is echoed from input cannot drive the
// terminal.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "tests/open_files.h"

namespace pipescope::testing {
namespace {

namespace fs = std::filesystem;

const std::string kSource = PIPESCOPE_SOURCE_DIR;
const std::string kDemo = kSource + "/scenarios/demo.json";
// A trace of a few hundred megabytes: several seconds of writing.
const std::vector<std::string> kBigTrace = {
    "simulate",    kSource + "/scenarios/gpt3-175b-1024.json",
    "-K",          "64",
    "-M",          "2048",
    "--set",       "training.global_batch=2048",
    "--partition", "uniform"};

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

class FileSafetyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipescope_file_safety_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `script` through bash, with stdout and stderr captured.
  CliResult shell(const std::string& script) {
    const fs::path out = dir_ / ".stdout";
    const fs::path err = dir_ / ".stderr";
    const std::string cmd = "bash -c '" + script + "' >" + out.string() + " 2>" + err.string();
    const int raw = std::system(cmd.c_str());
    CliResult r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
  }

  fs::path dir_;
};

TEST_F(FileSafetyCli, AFullStandardOutputIsAnError) {
  const CliResult r = shell(std::string(PIPESCOPE_CLI) + " simulate " + kDemo + " >/dev/full");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: standard output: cannot write: No space left on device\n");
  // Help, as coreutils' --help does.
  const CliResult help = shell(std::string(PIPESCOPE_CLI) + " simulate --help >/dev/full");
  EXPECT_EQ(help.status, 1);
  EXPECT_EQ(help.err, r.err);
}

TEST_F(FileSafetyCli, AFullOutputFileIsAnErrorNamingIt) {
  const CliResult r = run("simulate " + kDemo + " --trace /dev/full");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: /dev/full: cannot write: No space left on device\n");
}

TEST_F(FileSafetyCli, AMissingFolderIsNamedWithTheReason) {
  const CliResult r = run("plan " + kDemo + " -o " + (dir_ / "nowhere" / "plan.json").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find((dir_ / "nowhere" / "plan.json").string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
}

// An output that names one of the command's own inputs is refused, whatever
// the name it is given by: the input is left as it was.
TEST_F(FileSafetyCli, AnOutputThatIsAnInputIsRefused) {
  const fs::path scenario = dir_ / "s.json";
  fs::copy_file(kDemo, scenario);
  const std::string before = slurp(scenario);
  const auto refusal = [](const fs::path& out, const fs::path& input) {
    return "pipescope: error: " + out.string() + ": cannot write: it is " + input.string() +
           ", an input of this command, which the output would replace; write it elsewhere\n";
  };
  const CliResult plan = run("plan " + scenario.string() + " -K 4 -M 8 -o " + scenario.string());
  EXPECT_EQ(plan.status, 1);
  EXPECT_EQ(plan.err, refusal(scenario, scenario));
  fs::create_symlink(scenario, dir_ / "link.json");
  const CliResult trace =
      run("simulate " + scenario.string() + " --trace " + (dir_ / "link.json").string());
  EXPECT_EQ(trace.status, 1);
  EXPECT_EQ(trace.err, refusal(dir_ / "link.json", scenario));
  EXPECT_EQ(slurp(scenario), before);
  // A plan exported over itself, and over the plan beside it: only the first is refused.
  const fs::path plan_file = dir_ / "p.json";
  ASSERT_EQ(run("plan " + scenario.string() + " -K 4 -M 8 --schedule 1f1b -o " + plan_file.string())
                .status,
            0);
  const CliResult exported =
      run("export " + plan_file.string() + " --to megatron -o " + plan_file.string());
  EXPECT_EQ(exported.status, 1);
  EXPECT_EQ(exported.err, refusal(plan_file, plan_file));
  EXPECT_EQ(
      run("export " + plan_file.string() + " --to megatron -o " + (dir_ / "flags.txt").string())
          .status,
      0);
}

// `-o /dev/stdout` with standard output appended to a file keeps the file's
// earlier lines, as `-o -` does: the data goes through the descriptor.
TEST_F(FileSafetyCli, DevStdoutAppendsThroughTheDescriptor) {
  const fs::path log = dir_ / "log.txt";
  const std::string cli = PIPESCOPE_CLI;
  const CliResult r = shell("echo earlier > " + log.string() + "; " + cli + " plan " + kDemo +
                            " --top 1 -o /dev/stdout >> " + log.string() + " && " + cli + " plan " +
                            kDemo + " --top 1 -o - >> " + log.string());
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string text = slurp(log);
  EXPECT_EQ(text.rfind("earlier\n{", 0), 0u) << text.substr(0, 200);
  // Both plans whole, one after the other; the summaries went to stderr.
  const std::size_t second = text.find("\n{", 9);
  ASSERT_NE(second, std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(text.substr(8, second + 1 - 8)),
            nlohmann::json::parse(text.substr(second + 1)));
  EXPECT_NE(r.err.find("Memory of plan 1"), std::string::npos) << r.err;
}

// A reader that stops early (| head) ends the command quietly.
TEST_F(FileSafetyCli, AClosedPipeEndsQuietly) {
  std::string command = PIPESCOPE_CLI;
  for (const std::string& a : kBigTrace) command += " " + a;
  const CliResult r = shell(command + " --trace - | head -c 100 >/dev/null; echo ${PIPESTATUS[0]}");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, std::to_string(128 + SIGPIPE) + "\n");
  EXPECT_TRUE(listing(dir_).empty());
}

// "-" puts the data on standard output and the command's own lines on stderr.
TEST_F(FileSafetyCli, DashIsStandardOutputForEveryOutputOption) {
  const CliResult trace = run("simulate " + kDemo + " --trace -");
  ASSERT_EQ(trace.status, 0) << trace.err;
  EXPECT_EQ(nlohmann::json::parse(trace.out).at("traceEvents").size() > 0, true);
  EXPECT_NE(trace.err.find("Step time"), std::string::npos) << trace.err;
  const CliResult plan = run("plan " + kDemo + " -o -");
  ASSERT_EQ(plan.status, 0) << plan.err;
  EXPECT_TRUE(nlohmann::json::parse(plan.out).contains("stages")) << plan.out;
  const CliResult csv = run("sweep " + kDemo + " -K 1,2 --csv -");
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("K,", 0), 0u) << csv.out;
  const CliResult exported = run("export " + kDemo + " --format deepspeed -o -");
  EXPECT_EQ(exported.status == 0 || exported.status == 2, true) << exported.err;
  EXPECT_TRUE(listing(dir_).empty());
}

std::string gunzip(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  if (f == nullptr) return "";
  std::string text;
  char buf[65536];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

TEST_F(FileSafetyCli, AGzNameWritesACompressedTrace) {
  const fs::path plain = dir_ / "t.json";
  const fs::path zipped = dir_ / "t.json.gz";
  ASSERT_EQ(run("simulate " + kDemo + " --trace " + plain.string()).status, 0);
  ASSERT_EQ(run("simulate " + kDemo + " --trace " + zipped.string()).status, 0);
  EXPECT_EQ(gunzip(zipped), slurp(plain));
  EXPECT_LT(fs::file_size(zipped), fs::file_size(plain) / 3);
}

// Runs pipescope with `args` in the background, waits until it has a file open
// in `dir` (the trace being written), sends `sig` and returns the wait status.
int signal_while_writing(const std::vector<std::string>& args, const fs::path& dir, int sig) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<std::string> copy = args;
    std::string program = PIPESCOPE_CLI;
    std::vector<char*> argv{program.data()};
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  (void)testing::wait_until_writing_in(pid, dir);
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST_F(FileSafetyCli, ARunKilledWhileWritingLeavesNothing) {
  std::vector<std::string> args = kBigTrace;
  args.push_back("--trace");
  args.push_back((dir_ / "trace.json").string());
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
    const int status = signal_while_writing(args, dir_, sig);
    ASSERT_TRUE(WIFEXITED(status)) << "signal " << sig;
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig);
    EXPECT_TRUE(listing(dir_).empty()) << "signal " << sig;
  }
  const int killed = signal_while_writing(args, dir_, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(killed));
  EXPECT_TRUE(listing(dir_).empty()) << "SIGKILL";
}

// A file name that holds terminal controls is echoed escaped.
TEST_F(FileSafetyCli, ControlAndBidiCharactersAreEscapedInMessages) {
  const std::string name = (dir_ / "evil\u202Egnp.json\x1b[31m").string();
  const CliResult r = run("simulate '" + name + "'");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err.find("\u202E"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("evil\\u202egnp.json\\x1b[31m"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pipescope::testing
