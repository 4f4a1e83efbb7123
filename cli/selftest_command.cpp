#include "cli/selftest_command.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/json_output.h"
#include "cli/scenario_options.h"

#include "exec/backends.h"
#include "exec/pipeline_check.h"

namespace pipescope::cli {

CLI::App* add_selftest_command(CLI::App& app, SelftestOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "selftest",
      "Check the GPU backend on this machine: every CUDA kernel against the CPU reference, "
      "every operation of the GPU device against the host device, on random data within fp32 "
      "tolerances, then a short pipeline run on the GPUs against single-GPU training (GPipe's "
      "promise). Exit status 0: all pass; 1: a check is off; 4: no GPU is visible (nothing was "
      "checked)");
  cmd->add_option("--backend", o.backend, "What to check")
      ->check(CLI::IsMember({"cuda"}))
      ->capture_default_str();
  add_seed_option(*cmd, o.seed, "Seed of the random data");
  cmd->add_flag("--json", o.json, "Print the checks as JSON");
  return cmd;
}

// The CUDA backend, or why there is none.
const exec::CudaBackend& open_cuda() {
  try {
    return exec::cuda_backend();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("selftest --backend cuda: ") + e.what());
  }
}

int run_selftest(const SelftestOptions& o) {
  const exec::CudaBackend& cuda = open_cuda();
  const exec::GpuAvailability gpus = cuda.visible_gpus();
  if (gpus.devices == 0) {
    if (o.json) {
      print_json(nlohmann::json{
          {"gpus", 0}, {"reason", gpus.reason}, {"checks", nlohmann::json::array()}});
    }
    std::cerr << "pipescope selftest: " << gpus.reason << "; nothing was checked\n";
    return kExitNoDevice;
  }
  std::vector<exec::KernelCheck> checks = cuda.check_kernels_and_ops(o.seed);
  // Every built-in schedule's promise on the GPUs: stage s on GPU s mod the
  // GPUs, each on its own stream, against one GPU training the whole mini-batch.
  const int visible = gpus.devices;
  for (const exec::PipelineCheck& c : exec::check_pipeline([&cuda, visible](int stage) {
         return cuda.stream(stage % visible, "stage " + std::to_string(stage));
       })) {
    checks.push_back({c.name, c.max_error, c.tolerance});
  }
  bool all = true;
  for (const auto& c : checks) all = all && c.ok();
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& c : checks) {
      list.push_back({{"kernel", c.kernel},
                      {"max_error", c.max_error},
                      {"tolerance", c.tolerance},
                      {"ok", c.ok()}});
    }
    print_json(nlohmann::json{{"gpus", gpus.devices}, {"checks", list}, {"ok", all}});
    return all ? 0 : 1;
  }
  std::printf(
      "CUDA kernels and device operations (\"device ...\") against the CPU reference "
      "(%d GPU%s visible, GPU 0 used)\n\n",
      gpus.devices, gpus.devices == 1 ? "" : "s");
  std::printf("%-52s %12s %12s\n", "kernel", "max error", "tolerance");
  for (const auto& c : checks) {
    std::printf("%-52s %12.3g %12.3g  %s\n", c.kernel.c_str(), c.max_error, c.tolerance,
                c.ok() ? "ok" : "FAILED");
  }
  std::printf("\n%s\n", all ? "All kernels, device operations and pipeline runs match their "
                              "references."
                            : "Some checks do not match their references.");
  return all ? 0 : 1;
}

}  // namespace pipescope::cli
