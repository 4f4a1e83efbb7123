// Scenario JSON -> Scenario. Validation walks the document with ObjectReader, which
// remembers every key it was asked for: whatever else an object holds is a typo or a
// field of another form, and is reported with the keys that would have been read.
// Here the document's top level, the training and the framework; the model is read
// in sim/scenario/model_reader.cpp and the cluster in sim/scenario/cluster_reader.cpp.

#include "sim/scenario/scenario_io.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "costmodels/framework.h"
#include "sim/base/input_file.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/cluster_reader.h"
#include "sim/scenario/context_groups.h"
#include "sim/scenario/expert_groups.h"
#include "sim/scenario/model_reader.h"
#include "sim/scenario/scenario_limits.h"
#include "sim/scenario/scenario_override.h"
#include "sim/scenario/stated_cut.h"
#include "sim/scenario/tensor_groups.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

// Tensor parallelism runs inside a node's fast links: 1024 is far beyond any.
constexpr IntRange kTensorParallel{1, 1 << 10};

TrainingConfig read_training(ObjectReader t, DType dtype) {
  TrainingConfig cfg;
  cfg.global_batch = t.integer("global_batch", kGlobalBatch);
  cfg.micro_batches =
      static_cast<int>(t.opt_integer("micro_batches", kPositiveSmallInt).value_or(1));
  if (cfg.global_batch % cfg.micro_batches != 0) {
    t.fail("micro_batches", std::to_string(cfg.micro_batches) + " does not divide global_batch " +
                                std::to_string(cfg.global_batch));
  }
  const std::optional<Optimizer> optimizer =
      opt_choice(t, "optimizer", "optimizer", parse_optimizer, "sgd, momentum, rmsprop, adam");
  const std::optional<double> given_bytes = t.opt_number("bytes_per_param", NumberRange::kPositive);
  if (optimizer && given_bytes) {
    t.fail("bytes_per_param", "'bytes_per_param' cannot be given together with 'optimizer'");
  }
  if (given_bytes) {
    cfg.bytes_per_param = *given_bytes;
  } else {
    cfg.optimizer = optimizer.value_or(Optimizer::kAdam);
    cfg.bytes_per_param = bytes_per_param(*cfg.optimizer, dtype);
  }
  cfg.schedule = opt_choice(t, "schedule", "schedule", parse_schedule, kScheduleNames)
                     .value_or(ScheduleKind::kGpipe);
  if (cfg.schedule == ScheduleKind::kCustom) {
    t.fail("schedule",
           "a custom schedule comes from its action file: pass it with --schedule-file and "
           "give a built-in schedule here (" +
               std::string(kScheduleNames) + ")");
  }
  cfg.chunks = static_cast<int>(t.opt_integer("chunks", kLayerCount)
                                    .value_or(takes_chunks(cfg.schedule) ? kDefaultChunks : 1));
  if (cfg.chunks > 1 && !takes_chunks(cfg.schedule)) {
    t.fail("chunks", std::to_string(cfg.chunks) +
                         " chunks need a schedule that takes chunks: " + chunked_schedule_names());
  }
  if (const json* r = t.find("remat"); r != nullptr && r->is_string()) {
    cfg.remat = *opt_choice(t, "remat", "remat mode", parse_remat, kRematNames);
  } else if (r != nullptr && !r->is_boolean()) {
    t.fail("remat",
           "expected true, false or one of: " + std::string(kRematNames) + ", got " + type_of(*r));
  } else {
    cfg.remat = remat_from_bool(t.opt_bool("remat").value_or(true));
  }
  cfg.checkpoint =
      opt_choice(t, "checkpoint", "checkpoint unit", parse_checkpoint, kCheckpointNames)
          .value_or(Checkpoint::kStage);
  const std::optional<std::int64_t> tensor_parallel =
      t.opt_integer("tensor_parallel", kTensorParallel);
  cfg.tensor_parallel = static_cast<int>(tensor_parallel.value_or(1));
  cfg.tensor_parallel_given = tensor_parallel.has_value();
  const std::optional<std::int64_t> expert_parallel =
      t.opt_integer("expert_parallel", kExpertCount);
  cfg.expert_parallel = static_cast<int>(expert_parallel.value_or(1));
  cfg.expert_parallel_given = expert_parallel.has_value();
  // 1, or T (stored as 0: as the dense layers split); checked against the
  // model in parse_scenario (expert_tensor_parallel_problem).
  if (const std::optional<std::int64_t> etp =
          t.opt_integer("expert_tensor_parallel", kTensorParallel)) {
    if (*etp != 1 && *etp != cfg.tensor_parallel) {
      t.fail("expert_tensor_parallel", "expected 1 (whole experts) or training.tensor_parallel (" +
                                           std::to_string(cfg.tensor_parallel) + "), got " +
                                           std::to_string(*etp));
    }
    // Whole experts are kept as the planner varies T where the scenario
    // leaves T to it.
    const bool whole = *etp == 1 && (cfg.tensor_parallel != 1 || !tensor_parallel);
    cfg.expert_tensor_parallel = whole ? 1 : 0;
  }
  cfg.moe_dispatcher = opt_choice(t, "moe_dispatcher", "expert dispatcher", parse_moe_dispatcher,
                                  kMoeDispatcherNames)
                           .value_or(MoeDispatcher::kAllToAll);
  const std::optional<std::int64_t> context_parallel =
      t.opt_integer("context_parallel", kTensorParallel);
  cfg.context_parallel = static_cast<int>(context_parallel.value_or(1));
  cfg.context_parallel_given = context_parallel.has_value();
  cfg.cp_comm_type = opt_choice(t, "cp_comm_type", "context-parallel exchange",
                                parse_context_exchange, kContextExchangeNames)
                         .value_or(ContextExchange::kP2p);
  const std::optional<bool> sequence_parallel = t.opt_bool("sequence_parallel");
  cfg.sequence_parallel = sequence_parallel.value_or(false);
  cfg.sequence_parallel_given = sequence_parallel.has_value();
  if (const nlohmann::json* z = t.find("zero");
      z != nullptr && z->is_number_integer() && (*z < 0 || *z > kMaxZeroStage)) {
    t.fail("zero", "expected a ZeRO stage, 0, 1, 2 or 3, got " + z->dump());
  }
  const std::optional<std::int64_t> zero = t.opt_integer("zero", IntRange{0, kMaxZeroStage});
  cfg.zero = static_cast<int>(zero.value_or(0));
  cfg.zero_given = zero.has_value();
  if (cfg.sequence_parallel && cfg.tensor_parallel == 1) {
    t.fail("sequence_parallel",
           "sequence parallelism splits activations among tensor-parallel devices: it needs "
           "tensor_parallel above 1");
  }
  cfg.cut = read_stated_cut(t);
  t.finish();
  return cfg;
}

// The framework into the training, with what its gradients keep: a bf16 run
// under fp32_grads keeps fp32 gradients (4 bytes a parameter instead of 2,
// Megatron-LM's 18 bytes with Adam), an fp16 one an fp32 copy of its fp16
// gradients for the optimizer (20 bytes with Adam). A bytes_per_param the
// scenario gives stays as given.
void with_framework_gradients(TrainingConfig& cfg, DType dtype, const Framework& fw) {
  cfg.framework = fw;
  const Bytes e = dtype_bytes(dtype);
  cfg.gradient_bytes = e;
  if (!cfg.optimizer || !is_16bit(dtype) || !fw.fp32_grads) return;
  if (dtype == DType::kBf16) {
    cfg.gradient_bytes = 4;
    cfg.bytes_per_param += 4.0 - static_cast<double>(e);
  } else {
    cfg.bytes_per_param += 4.0;
  }
}

// A profile by name, or a failure at `at` naming the profiles.
Framework profile_named(const Where& at, const std::string& name) {
  std::optional<Framework> fw = find_framework(name);
  if (!fw) at.fail("unknown framework '" + name + "' (expected one of: " + framework_names() + ")");
  return *fw;
}

// training.framework: a profile's name, or an object naming one ("profile",
// by default the cluster's) and overriding its fields (framework_fields).
// Without it, the profile of the cluster's cost model (kDefaultGpuFramework
// under the kernels model, kIdealFramework otherwise).
Framework read_framework(ObjectReader& t, CostModelKind cost_model) {
  const std::string fallback =
      cost_model == CostModelKind::kKernels ? kDefaultGpuFramework : kIdealFramework;
  const json* f = t.find("framework");
  if (f == nullptr) return *find_framework(fallback);
  if (f->is_string()) return profile_named(t.where("framework"), f->get<std::string>());
  if (!f->is_object()) {
    t.fail("framework", "expected a profile (" + framework_names() +
                            ") or an object {\"profile\": NAME, FIELD: VALUE, ...}, got " +
                            type_of(*f));
  }
  ObjectReader o = t.object("framework");
  Framework fw = profile_named(o.where("profile"), o.opt_string("profile").value_or(fallback));
  std::vector<const char*> overlaps_set;  // overlap flags the object sets true
  for (const FrameworkField& field : framework_fields()) {
    if (field.flag != nullptr) {
      const std::optional<bool> b = o.opt_bool(field.key);
      if (b) fw.*field.flag = *b;
      if (b && *b && field.overlap) overlaps_set.push_back(field.key);
      continue;
    }
    const std::optional<double> x = o.opt_number(field.key, NumberRange::kNonNegative);
    if (!x) continue;
    if (*x > field.max) {
      o.fail(field.key,
             "expected 0 to " + describe(json(field.max)) + ", got " + describe(json(*x)));
    }
    fw.*field.number = *x;
  }
  if (fw.launch_blocking) {
    if (!overlaps_set.empty()) {
      o.fail(overlaps_set.front(),
             "nothing overlaps where every launch blocks (launch_blocking true): expected false");
    }
    drop_overlaps(fw);
  }
  o.finish();
  return fw;
}

// Where every launch blocks, so does every exchange between stages: a
// cluster.p2p that overlaps them is refused.
void refuse_overlapped_exchanges(const Framework& fw, const Exchanges& given,
                                 const std::string& file) {
  if (!fw.launch_blocking || !given.p2p || *given.p2p == P2pMode::kBlocking) return;
  Where{file, ""}.key("cluster").key("p2p").fail(
      "stages' exchanges block where every launch blocks (training.framework.launch_blocking "
      "true): expected \"blocking\", got \"" +
      std::string(to_string(*given.p2p)) + "\"");
}

std::string default_name(const std::string& file) {
  const std::string stem = std::filesystem::path(file).stem().string();
  return stem.empty() ? "scenario" : stem;
}

}  // namespace

ModelSpec parse_model(const json& model, const std::string& file, const std::string& path,
                      const Framework& framework) {
  return read_model(ObjectReader(model, Where{file, path}), framework);
}

Scenario parse_scenario(const json& doc, const std::string& file) {
  ObjectReader top(doc, Where{file, ""});
  Scenario s;
  s.name = top.opt_string("name").value_or(default_name(file));
  s.notes = top.opt_string("notes").value_or("");
  ObjectReader model = top.object("model");
  ObjectReader cluster = top.object("cluster");
  ObjectReader training = top.object("training");
  top.finish();

  // The cluster first: its cost model chooses the framework's default
  // profile, which gives the model and the exchanges their defaults.
  Exchanges exchanges;
  s.cluster = read_cluster(std::move(cluster), exchanges);
  const Framework framework = read_framework(training, s.cluster.cost_model);
  refuse_overlapped_exchanges(framework, exchanges, file);
  with_exchanges(s.cluster, exchanges, framework);
  s.model = read_model(std::move(model), framework);
  if (s.model.transformer && s.model.transformer->fp8) {
    const Where fp8 = Where{file, ""}.key("model").key("fp8");
    if (s.cluster.cost_model != CostModelKind::kKernels) {
      fp8.fail(
          "FP8 GEMMs are costed by the kernels model only, and the cluster's cost_model is "
          "analytic");
    }
    if (!(s.cluster.device.kernels.peak_flops_fp8 > 0.0)) {
      fp8.fail("device '" + s.cluster.device.name + "' has no FP8 peak (expected false)");
    }
  }
  s.training = read_training(std::move(training), s.model.dtype);
  with_framework_gradients(s.training, s.model.dtype, framework);
  if (s.training.cut) check_stated_cut(*s.training.cut, s.model, file);
  if (const std::string problem = moe_dispatcher_problem(s); !problem.empty()) {
    Where{file, ""}.key("training").key("moe_dispatcher").fail(problem);
  }
  s.cluster.deepep = s.training.moe_dispatcher == MoeDispatcher::kDeepEp;
  // Under tensor parallelism the model becomes one device's share and the
  // cluster's devices groups of T.
  // Whole experts beside T, before T's own check, which also asks them
  // sequence parallelism.
  if (const std::string problem = expert_tensor_parallel_problem(s); !problem.empty()) {
    Where{file, ""}.key("training").key("expert_tensor_parallel").fail(problem);
  }
  const int t = s.training.tensor_parallel;
  const bool sequence = s.training.sequence_parallel;
  if (const std::string problem = tensor_parallel_problem(s, t, sequence); !problem.empty()) {
    Where{file, ""}.key("training").key("tensor_parallel").fail(problem);
  }
  // Under expert parallelism the model holds one device's share of the
  // experts; checked before either split builds it.
  const int E = s.training.expert_parallel;
  if (const std::string problem = expert_parallel_problem(s, E); !problem.empty()) {
    Where{file, ""}.key("training").key("expert_parallel").fail(problem);
  }
  if (t > 1) s = with_tensor_parallel(s, t, sequence);
  if (E > 1) s = with_expert_parallel(s, E);
  // Under context parallelism the model holds one device's share of each
  // sequence and the groups are C times larger; checked once the tensor
  // split has made them.
  const int C = s.training.context_parallel;
  if (const std::string problem = context_parallel_problem(s, C); !problem.empty()) {
    Where{file, ""}.key("training").key("context_parallel").fail(problem);
  }
  if (C > 1) s = with_context_parallel(s, C);
  check_magnitudes(s, file);
  return s;
}

Scenario parse_scenario_text(const std::string& text, const std::string& file,
                             const std::vector<std::string>& overrides) {
  json doc = parse_json(text, file);
  for (const std::string& assignment : overrides) apply_override(doc, assignment, file);
  return parse_scenario(doc, file);
}

Scenario load_scenario(const std::filesystem::path& file,
                       const std::vector<std::string>& overrides) {
  const std::string label = file.string();
  return parse_scenario(load_scenario_json(file, overrides), label);
}

json load_scenario_json(const std::filesystem::path& file,
                        const std::vector<std::string>& overrides) {
  const std::string label = file.string();
  json doc = parse_json(read_input_file(file, label, kMaxDocumentBytes, "a scenario"), label);
  for (const std::string& assignment : overrides) apply_override(doc, assignment, label);
  return doc;
}

}  // namespace pipescope
