#include "cli/run_command.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <regex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/gpu_stages.h"
#include "cli/json_output.h"
#include "cli/mpi_job.h"
#include "cli/progress.h"
#include "cli/scenario_options.h"
#include "exec/backends.h"
#include "exec/compute/kernel_level.h"
#include "exec/plan_runner.h"
#include "sim/base/format.h"
#include "sim/formats/plan_io.h"
#include "sim/formats/trace_io.h"

namespace pipescope::cli {

CLI::App* add_run_command(CLI::App& app, RunOptions& o) {
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Train a plan's model for real (synthetic data) with the plan's cut, schedule and remat, "
      "one thread per pipeline stage (cpu) or one process per device under mpirun (mpi), and "
      "measure step time, throughput and bubble");
  cmd->add_option("plan", o.plan, "Plan JSON written by `pipescope plan -o`")->required();
  add_backend_option(
      *cmd, o.backend,
      "Where to run: cpu (a thread per device), cuda (a stream per stage, device d "
      "on GPU d mod the GPUs visible) or mpi (`mpirun -np DEVICES pipescope run PLAN "
      "--backend mpi`, a process per device, and per share or expert rank for a plan of C > 1 "
      "or E > 1: -np K x C or K x E)");
  cmd->add_option(
         "--device", o.device,
         "With --backend mpi: where each rank computes, cpu, or cuda (its node-local rank's "
         "GPU, payloads over NCCL)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("-T,--tensor-parallel", o.tensor_parallel,
                  "The plan's tensor-parallel ranks per stage, checked against the T the plan "
                  "carries (a thread per rank on the cpu backend)")
      ->check(positive_count());
  cmd->add_option("--steps", o.steps, "Training steps")
      ->check(positive_count())
      ->capture_default_str();
  cmd->add_option("--lr", o.learning_rate, "Learning rate")
      ->check(positive_number())
      ->capture_default_str();
  add_seed_option(*cmd, o.seed, "Seed of the weights and the data");
  cmd->add_option("--trace", o.trace, "Write the last step's measured timeline as a Chrome trace");
  cmd->add_flag("--json", o.json, "Print the results as JSON");
  cmd->add_option("--watchdog", o.watchdog_ms,
                  "Stop with an error naming the waiting ops when a device waits this many ms "
                  "for an activation or gradient")
      ->check(positive_count())
      ->capture_default_str();
  cmd->add_option("--inject-fault", o.inject_fault)->group("");  // testing hook (run_command.h)
  return cmd;
}

namespace {

// The before_op hook of --inject-fault.
std::function<void(int, const Op&)> fault_hook(const std::optional<std::string>& spec) {
  if (!spec) return nullptr;
  static const std::regex form(R"((throw|kill|stall):([FRBWO])\((\d+)(?:,(\d+))?\))");
  std::smatch m;
  if (!std::regex_match(*spec, m, form)) {
    throw std::invalid_argument("--inject-fault: expected throw|kill|stall:OP like B(1,3), not '" +
                                *spec + "'");
  }
  const std::string what = m[1];
  const char letter = m[2].str()[0];
  const int stage = std::stoi(m[3]);
  const int mb = m[4].matched ? std::stoi(m[4]) : 0;
  return [=](int, const Op& op) {
    if (op_letter(op.kind) != letter || op.stage != stage ||
        (op.kind != OpKind::kOptimizer && op.micro_batch != mb)) {
      return;
    }
    if (what == "kill") std::raise(SIGKILL);
    if (what == "stall") {
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    throw std::runtime_error("injected fault");
  };
}

// The first step warms caches and allocators; the median of the rest stands for
// the run.
constexpr int kWarmupSteps = 1;

// What `run` prints after training, on the one process that prints.
int report(const RunOptions& o, const Plan& plan, const ModelSpec& spec,
           const std::vector<exec::StepResult>& steps, const std::string& where) {
  const int batch = static_cast<int>(plan.global_batch / plan.data_parallel);
  std::vector<double> losses;
  for (const exec::StepResult& r : steps) losses.push_back(r.loss);
  const exec::StepResult& median = steps[exec::median_step(steps, kWarmupSteps)];
  const exec::StepResult& last = steps.back();
  const double bubble = exec::measured_bubble(median, plan.stages);
  const double step_s = simtime_to_seconds(median.step_time);
  const double throughput = batch / step_s;
  if (o.trace) write_chrome_trace_file(*o.trace, last.timeline);
  // The host's kernels compute unless the stages run on GPUs.
  const bool on_host = o.backend != "cuda" && o.device != "cuda";
  if (o.json) {
    nlohmann::json out{{"losses", losses},
                       {"measured_step_time_s", step_s},
                       {"throughput_samples_per_s", throughput},
                       {"bubble_fraction", bubble}};
    if (on_host) out["kernels"] = exec::kernel_level();
    print_json(out);
    return 0;
  }
  std::cout << "Running " << o.plan << ": " << spec.name << ", "
            << format_count(static_cast<double>(spec.total_params())) << " params"
            << (plan.tensor_parallel > 1   ? " a tensor rank"
                : plan.expert_parallel > 1 ? " an expert rank"
                                           : "")
            << ", K=" << plan.stages
            << (plan.tensor_parallel > 1 ? ", T=" + std::to_string(plan.tensor_parallel) : "")
            << (plan.context_parallel > 1 ? ", C=" + std::to_string(plan.context_parallel) : "")
            << (plan.expert_parallel > 1 ? ", E=" + std::to_string(plan.expert_parallel) : "")
            << ", M=" << plan.micro_batches << ", batch " << batch
            << (plan.expert_parallel > 1 ? " an expert rank" : "") << ", remat "
            << remat_label(plan.remat) << ", " << o.steps << " steps " << where << "\n";
  if (on_host) std::cout << "Kernels: " << exec::kernel_level_label() << "\n";
  std::cout << "\n";
  for (std::size_t i = 0; i < losses.size(); ++i) {
    std::printf("step %4zu  loss %.5f  %s\n", i + 1, losses[i],
                format_seconds(simtime_to_seconds(steps[i].step_time)).c_str());
  }
  std::printf(
      "\nMeasured step time  %s (%s)\nThroughput          %.4g samples/s\nBubble "
      "             %s\n",
      format_seconds(step_s).c_str(), exec::measured_steps_label(o.steps, kWarmupSteps).c_str(),
      throughput, format_percent(bubble).c_str());
  if (plan.expert_parallel > 1) {
    std::printf(
        "(%d of the plan's %d data-parallel replicas, one an expert rank; the "
        "throughput a replica's)\n",
        plan.expert_parallel, plan.data_parallel);
  } else if (plan.data_parallel > 1) {
    std::printf("(one of the plan's %d data-parallel replicas)\n", plan.data_parallel);
  }
  if (o.trace) std::printf("Trace written to %s\n", o.trace->c_str());
  return 0;
}

exec::PlanRunOptions run_options(const RunOptions& o) {
  exec::PlanRunOptions run;
  run.steps = o.steps;
  run.learning_rate = o.learning_rate;
  run.seed = o.seed;
  run.watchdog = std::chrono::milliseconds(o.watchdog_ms);
  run.before_op = fault_hook(o.inject_fault);
  return run;
}

// --device cuda under MPI: this rank's stages on its GPU, payloads over NCCL.
void use_gpus(exec::PlanRunOptions& run) {
  int gpu = 0;
  const exec::NcclBackend* nccl = nullptr;
  const exec::CudaBackend* cuda = nullptr;
  try {
    nccl = &exec::nccl_backend();
    cuda = &exec::cuda_backend();
    gpu = nccl->local_gpu();
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("--device cuda: ") + e.what());
  }
  run.transport = nccl->transport(gpu);
  run.stage_device = [cuda, gpu](int stage, int) -> std::shared_ptr<exec::Device> {
    return cuda->stream(gpu, "stage " + std::to_string(stage));
  };
}

// One process per device under mpirun (errors: cli/mpi_job.h).
int run_mpi(const RunOptions& o) {
  const MpiJob job;
  Plan plan;
  ModelSpec spec;
  exec::PlanRunOptions run;
  try {
    // Each rank reads its own files: one agreement ends the input phase.
    job.agree([&] {
      plan = read_plan_file(o.plan);
      exec::check_requested_tensor_parallel(plan, o.plan, o.tensor_parallel);
      exec::check_tensor_parallel_backend(plan, o.plan, "mpi");
      const ProcessGroup group = process_group(plan);
      if (o.device == "cuda" && group.ranks > 1) {
        throw std::invalid_argument(
            o.plan + ": " + group.letter + ": --device cuda computes each rank's stages on its " +
            "GPU, and this plan's " + group.letter + "=" + std::to_string(group.ranks) + " " +
            group.name + " exchange " + group.what + " on the host; run it with --device cpu, " +
            "or plan with -" + group.letter + " 1");
      }
      spec = exec::plan_model(plan, o.plan);
      run = run_options(o);
      job.require_devices(plan, o.plan);
    });
    job.check_memory(plan, o.plan, o.device == "cuda");
    if (o.device == "cuda") {
      // Every rank has the backends and a GPU, or every rank stops with the
      // first one's reason: local_gpu() is collective.
      job.agree([] {
        try {
          exec::nccl_backend();
          const exec::GpuAvailability gpus = exec::cuda_backend().visible_gpus();
          if (gpus.devices == 0) throw std::runtime_error(gpus.reason);
        } catch (const std::runtime_error& e) {
          throw std::runtime_error(std::string("--device cuda: ") + e.what());
        }
      });
      use_gpus(run);
    }
  } catch (const std::exception& e) {
    return job.input_error(e);
  }
  std::vector<exec::StepResult> steps;
  try {
    if (!run.transport) run.transport = job.backend().transport();
    std::optional<ProgressBar> bar;
    if (job.rank() == 0) bar.emplace("training");
    run.on_step = [&](int done, int total, const exec::StepResult&) {
      if (bar) bar->update(static_cast<std::size_t>(done), static_cast<std::size_t>(total));
    };
    steps = exec::run_plan(plan, spec, run);
  } catch (const std::exception& e) {
    job.rank_error(e);
  }
  if (job.rank() != 0) return 0;
  return report(
      o, plan, spec, steps,
      "over MPI (" + std::to_string(job.size()) + " processes, one per device" +
          (plan.expert_parallel > 1 && plan.context_parallel > 1 ? " and expert rank's share"
           : plan.expert_parallel > 1                            ? " and expert rank"
           : plan.context_parallel > 1                           ? " and share"
                                                                 : "") +
          (o.device == "cuda" ? ", each on a GPU, payloads over NCCL)" : ")"));
}

}  // namespace

int run_run(const RunOptions& o) {
  if (o.backend == "mpi") return run_mpi(o);
  if (o.device != "cpu") {
    throw std::invalid_argument("--device " + o.device +
                                " goes with --backend mpi; on one process use --backend " +
                                o.device);
  }
  const Plan plan = read_plan_file(o.plan);
  exec::check_requested_tensor_parallel(plan, o.plan, o.tensor_parallel);
  exec::check_tensor_parallel_backend(plan, o.plan, o.backend);
  const ModelSpec spec = exec::plan_model(plan, o.plan);
  // Host memory holds every stage on the CPU backend; a GPU's is its own.
  if (o.backend == "cpu") exec::check_plan_fits_host(plan, o.plan);
  exec::PlanRunOptions run = run_options(o);
  const int ranks = plan.tensor_parallel * plan.context_parallel * plan.expert_parallel;
  std::string where = ranks > 1 ? "on the CPU (" + std::to_string(ranks) +
                                      " threads per stage, one per " +
                                      (plan.expert_parallel > 1    ? "expert rank"
                                       : plan.context_parallel > 1 ? "rank of a share"
                                                                   : "tensor rank") +
                                      ")"
                                : std::string("on the CPU (one thread per stage)");
  if (o.backend == "cuda") {
    const GpuStages gpus = gpu_stages();
    check_plan_fits_gpus(plan, o.plan, gpus.gpus);
    run.stage_device = gpus.stage_device;
    where = "on " + std::to_string(gpus.gpus) + (gpus.gpus == 1 ? " GPU" : " GPUs") +
            " (a stream per stage)";
  }
  std::vector<exec::StepResult> steps;
  {
    ProgressBar bar("training");
    run.on_step = [&](int done, int total, const exec::StepResult&) {
      bar.update(static_cast<std::size_t>(done), static_cast<std::size_t>(total));
    };
    steps = exec::run_plan(plan, spec, run);
  }
  return report(o, plan, spec, steps, where);
}

}  // namespace pipescope::cli
