// `pipescope export --to torch-pipelining` as a user runs it: with -o FILE.csv
// the device mesh goes beside the CSV as FILE.mesh.py; to standard output only
// the CSV goes, and a plan beyond one pipeline says where its mesh would go.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "cli_runner.h"

namespace {

using pipescope::testing::CliResult;
using pipescope::testing::run;
using pipescope::testing::slurp;
namespace fs = std::filesystem;

const std::string kDemo = std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/demo.json";

// A folder of the test's own, so that every file an export writes is seen.
class ExportCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipescope_export_cli_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The best plan of the demo (4 devices) at K stages: D = 4 / K replicas
  // that shard nothing (every target expresses that).
  std::string make_plan(int stages) {
    const std::string plan = (dir_ / ("plan" + std::to_string(stages) + ".json")).string();
    const CliResult r =
        run("plan " + kDemo + " -K " + std::to_string(stages) +
            " --schedule 1f1b --set training.zero=0 --set cluster.rank_order=tp-pp-dp -o " + plan +
            " --top 1");
    EXPECT_EQ(r.status, 0) << r.err;
    return plan;
  }

  std::set<std::string> files() const {
    std::set<std::string> names;
    for (const fs::directory_entry& e : fs::directory_iterator(dir_)) {
      names.insert(e.path().filename().string());
    }
    return names;
  }

  fs::path dir_;
};

// The CSV and its mesh are written together: a mesh that cannot be written
// leaves the CSV as it was, and no temporary behind.
TEST_F(ExportCliTest, AMeshThatCannotBeWrittenLeavesTheCsvAsItWas) {
  const std::string plan = make_plan(2);
  const fs::path csv = dir_ / "x.csv";
  std::ofstream(csv) << "earlier export\n";
  fs::create_directories(dir_ / "x.mesh.py");
  const CliResult r = run("export " + plan + " --to torch-pipelining -o " + csv.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "pipescope: error: " + (dir_ / "x.mesh.py").string() +
                       ": cannot write: Is a directory\n");
  EXPECT_EQ(slurp(csv), "earlier export\n");
  EXPECT_EQ(files(), (std::set<std::string>{"plan2.json", "x.csv", "x.mesh.py"}));
}

TEST_F(ExportCliTest, TorchPipeliningWritesTheCsvAndItsMeshBesideIt) {
  const std::string plan = make_plan(2);  // K=2 x D=2
  const CliResult to_stdout = run("export " + plan + " --to torch-pipelining");
  ASSERT_EQ(to_stdout.status, 0) << to_stdout.err;
  const std::string csv = (dir_ / "x.csv").string();
  const std::string mesh = (dir_ / "x.mesh.py").string();
  const CliResult r = run("export " + plan + " --to torch-pipelining -o " + csv);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Wrote the torch-pipelining export of " + plan + " to " + csv +
                       " and its device mesh to " + mesh + "\n");
  EXPECT_EQ(r.err, "");  // the mesh is written: no note
  EXPECT_EQ(files(), (std::set<std::string>{"plan2.json", "x.csv", "x.mesh.py"}));
  // The same CSV as on standard output, and the mesh of D=2 x K=2 x T=1 ranks.
  EXPECT_EQ(slurp(csv), to_stdout.out);
  const std::string module = slurp(mesh);
  EXPECT_NE(module.find("MESH_SHAPE = (2, 2, 1)\n"), std::string::npos) << module;
  EXPECT_NE(module.find("MESH_DIM_NAMES = (\"dp\", \"pp\", \"tp\")\n"), std::string::npos)
      << module;
  EXPECT_NE(module.find("def pipescope_data_parallel(module, mesh)"), std::string::npos) << module;
}

TEST_F(ExportCliTest, TorchPipeliningToStandardOutputWritesOnlyTheCsvAndSaysSo) {
  const std::string plan = make_plan(2);
  const std::string note =
      "pipescope export: the plan runs on D=2 x K=2 x T=1 ranks; its device mesh goes beside "
      "the CSV when -o names a file (FILE.csv and FILE.mesh.py)\n";
  for (const std::string output : {"", " -o -"}) {
    SCOPED_TRACE("output:" + output);
    const CliResult r = run("export " + plan + " --to torch-pipelining" + output);
    ASSERT_EQ(r.status, 0) << r.err;
    // Two pipeline ranks: two rows of actions, and nothing but them.
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
    EXPECT_EQ(r.out.find("MESH_SHAPE"), std::string::npos) << r.out;
    // With -o -, what the export says goes to standard error, beside the note.
    EXPECT_EQ(r.err, (output.empty() ? ""
                                     : "Wrote the torch-pipelining export of " + plan +
                                           " to standard output\n") +
                         note);
    EXPECT_EQ(files(), (std::set<std::string>{"plan2.json"}));
  }
}

// A plan that is one pipeline (D = T = 1, no ZeRO) has nothing beyond the CSV
// to say on standard output; with -o its mesh still goes beside the CSV.
TEST_F(ExportCliTest, OnePipelineNeedsNoNote) {
  const std::string plan = make_plan(4);  // K=4 x D=1
  const CliResult r = run("export " + plan + " --to torch-pipelining");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 4) << r.out;
  const CliResult to_file =
      run("export " + plan + " --to torch-pipelining -o " + (dir_ / "one.csv").string());
  ASSERT_EQ(to_file.status, 0) << to_file.err;
  EXPECT_EQ(files(), (std::set<std::string>{"plan4.json", "one.csv", "one.mesh.py"}));
  EXPECT_NE(slurp(dir_ / "one.mesh.py").find("MESH_SHAPE = (1, 4, 1)\n"), std::string::npos);
}

// Only torch-pipelining has a mesh to write.
TEST_F(ExportCliTest, OtherTargetsWriteOneFile) {
  const std::string plan = make_plan(2);
  const std::string out = (dir_ / "balance.py").string();
  const CliResult r = run("export " + plan + " --to torchgpipe -o " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "Wrote the torchgpipe export of " + plan + " to " + out + "\n");
  EXPECT_EQ(files(), (std::set<std::string>{"plan2.json", "balance.py"}));
}

}  // namespace
