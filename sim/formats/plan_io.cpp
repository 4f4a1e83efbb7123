// Plan JSON <-> Plan. Reading is as strict as for scenarios: every key is required,
// unknown keys are errors, and the cuts, counts and batch sizes must agree with one
// another, so that a plan that loads can be run or exported as it stands.

#include "sim/formats/plan_io.h"

#include "costmodels/model_families.h"
#include "sim/base/file_io.h"
#include "sim/engine/custom_schedule.h"

#include "sim/engine/zero.h"
#include "sim/scenario/expert_groups.h"
#include "sim/scenario/scenario_io.h"

#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/base/json_reader.h"
#include "sim/engine/schedule.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

constexpr const char* kPlanFormat = "pipescope-plan";
// Layers and devices each become entries in per-layer and per-device tables.
constexpr IntRange kLayerCount{1, 1 << 20};
constexpr IntRange kDeviceCount{1, 1 << 20};

std::string str(std::int64_t v) {
  return std::to_string(v);
}

bool is_hash(const std::string& s) {
  if (s.size() != 16) return false;
  for (const char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

void check_format_and_version(ObjectReader& top) {
  const json* format = top.find("format");
  if (format == nullptr || !format->is_string() || format->get<std::string>() != kPlanFormat) {
    top.fail("format", std::string("not a PipeScope plan (expected \"") + kPlanFormat + "\")");
  }
  const std::int64_t version = top.integer("version", kPositiveInt);
  if (version != Plan::kVersion) {
    top.fail("version", "plan version " + str(version) +
                            " is not supported (this PipeScope reads version " +
                            str(Plan::kVersion) + ")");
  }
}

void read_model(ObjectReader m, Plan& p) {
  p.model_name = m.string("name");
  p.model_hash = m.string("hash");
  if (!is_hash(p.model_hash)) {
    m.fail("hash", "expected 16 lowercase hex digits, got \"" + p.model_hash + "\"");
  }
  p.layer_count = static_cast<int>(m.integer("layers", kLayerCount));
  const Where names_at = m.where("layer_names");
  const json& names = m.array("layer_names");
  if (names.size() != static_cast<std::size_t>(p.layer_count)) {
    names_at.fail("expected " + str(p.layer_count) + " names (model.layers), got " +
                  std::to_string(names.size()));
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    p.layer_names.push_back(as_string(names[i], names_at.index(i)));
  }
  const json& spec = m.at("spec");
  if (!spec.is_null()) {
    // The spec must describe the very model the hash names.
    const Where at = m.where("spec");
    ModelSpec model = parse_model(spec, at.file, at.path);
    // The plan's layers are one device's share under tensor parallelism.
    const TensorSplit split = p.split();
    if ((split.ways > 1 || split.experts > 1 || split.context > 1) && model.transformer) {
      const std::string problem = tensor_split_problem(*model.transformer, split);
      if (!problem.empty()) at.fail(problem + " (the plan's T, E and C)");
      model = make_transformer(*model.transformer, model.name, split);
    }
    if (model_hash(model) != p.model_hash) {
      m.fail("spec", "describes a model whose hash is " + model_hash(model) + ", not model.hash " +
                         p.model_hash);
    }
    p.model_spec = spec;
  }
  m.finish();
}

void read_cluster(ObjectReader c, Plan& p) {
  p.cluster_name = c.string("name");
  p.devices = static_cast<int>(c.integer("devices", kDeviceCount));
  p.memory_capacity = c.integer("memory_capacity_bytes", kPositiveInt);
  // Absent from plans written before rank orders: the replicas outermost.
  p.rank_order = opt_choice(c, "rank_order", "rank order", parse_rank_order, "tp-pp-dp, tp-dp-pp")
                     .value_or(RankOrder::kTpPpDp);
  // Absent from plans written before point-to-point modes: overlapped, whole.
  p.p2p = opt_choice(c, "p2p", "point-to-point mode", parse_p2p_mode, kP2pModeNames)
              .value_or(P2pMode::kOverlapped);
  p.p2p_split = c.opt_bool("p2p_split").value_or(false);
  c.finish();
}

constexpr const char* kSplitKeys[] = {"weights_bytes", "gradients_bytes", "optimizer_bytes",
                                      "activations_bytes"};
constexpr const char* kSplitNames =
    "weights_bytes, gradients_bytes, optimizer_bytes, activations_bytes";

// The device's peak split into its parts: all four keys or none (a plan written
// before the split, where it is unknown), adding up to the peak.
std::optional<MemorySplit> read_memory_split(ObjectReader& s, Bytes peak) {
  bool any = false;
  for (const char* key : kSplitKeys) any = s.find(key) != nullptr || any;
  if (!any) return std::nullopt;
  MemorySplit m;
  m.weights = s.integer(kSplitKeys[0], kNonNegativeInt);
  m.gradients = s.integer(kSplitKeys[1], kNonNegativeInt);
  m.optimizer = s.integer(kSplitKeys[2], kNonNegativeInt);
  m.activations = s.integer(kSplitKeys[3], kNonNegativeInt);
  // Subtracted from the peak rather than summed: four values near 2^63 would
  // overflow a sum.
  Bytes rest = peak;
  bool adds_up = true;
  for (const Bytes part : {m.weights, m.gradients, m.optimizer, m.activations}) {
    if (part > rest) adds_up = false;
    if (adds_up) rest -= part;
  }
  if (!adds_up || rest != 0) {
    s.fail_here("the memory split does not add up to peak_memory_bytes " + str(peak) +
                ": weights_bytes " + str(m.weights) + " + gradients_bytes " + str(m.gradients) +
                " + optimizer_bytes " + str(m.optimizer) + " + activations_bytes " +
                str(m.activations));
  }
  return m;
}

PlanStage read_stage(ObjectReader s) {
  PlanStage st;
  st.layers.first_layer = static_cast<int>(s.integer("first_layer", {0, kLayerCount.max}));
  st.layers.last_layer = static_cast<int>(s.integer("last_layer", {0, kLayerCount.max}));
  st.device = static_cast<int>(s.integer("device", {0, kDeviceCount.max}));
  st.fwd_s = s.number("fwd_s", NumberRange::kNonNegative);
  st.bwd_s = s.number("bwd_s", NumberRange::kNonNegative);
  st.recompute_s = s.number("recompute_s", NumberRange::kNonNegative);
  st.peak_memory = s.integer("peak_memory_bytes", kNonNegativeInt);
  st.memory_split = read_memory_split(s, st.peak_memory);
  s.finish();
  return st;
}

void read_predicted(ObjectReader r, Plan& p) {
  p.step_time_s = r.number("step_time_s", NumberRange::kNonNegative);
  p.throughput_samples_per_s = r.number("throughput_samples_per_s", NumberRange::kNonNegative);
  p.bubble_fraction = r.number("bubble_fraction", NumberRange::kNonNegative);
  if (p.bubble_fraction > 1.0) {
    r.fail("bubble_fraction", "expected a number in [0, 1], got " + r.at("bubble_fraction").dump());
  }
  p.fits = r.boolean("fits");
  r.finish();
}

// Every schedule PipeScope builds or reads, in the engine and in the executor,
// runs model stage s on pipeline device s mod K, under zb-v and dualpipe-v on
// the device of its V (stage_device_of, Schedule::stage_device), and in a custom schedule on
// the rank whose actions list it (placed_device). A plan that places a stage
// elsewhere is refused rather than honoured: on one replica's devices, which
// are alike, another order would only change the links between stages, while
// two stages on one device would need a schedule none of the builders writes;
// reading such a field and then running the schedule's placement anyway would
// hide the edit.
void check_stage_device(const Plan& p, std::size_t stage, const Where& at) {
  const int expected = placed_device(p.schedule, p.custom.get(), static_cast<int>(stage), p.stages);
  const int device = p.stage_plans[stage].device;
  if (device == expected) return;
  const std::string rule =
      p.custom               ? " (the rank whose actions list it)"
      : v_shaped(p.schedule) ? " (" + std::string(to_string(p.schedule)) +
                                   "'s V: stages d and 2K-1-d on device d, K=" + str(p.stages) + ")"
                             : " mod K=" + str(p.stages);
  const bool placed = p.custom || v_shaped(p.schedule);
  at.fail("expected " + str(expected) + ", got " + str(device) + ": PipeScope runs model stage " +
          std::to_string(stage) + " on device " + (placed ? str(expected) : std::to_string(stage)) +
          rule + ", and a plan's stages cannot be moved to other devices");
}

// Stages cut the layers 0..L-1 into K x v contiguous, non-empty ranges, stage s
// on device s mod K.
void check_stages(const Plan& p, const Where& at) {
  if (p.stage_plans.size() != static_cast<std::size_t>(p.model_stages())) {
    at.fail(p.chunks == 1 ? "expected K = " + str(p.stages) + " stages, got " +
                                std::to_string(p.stage_plans.size())
                          : "expected K x chunks = " + str(p.model_stages()) + " stages, got " +
                                std::to_string(p.stage_plans.size()));
  }
  for (std::size_t i = 0; i < p.stage_plans.size(); ++i) {
    const PlanStage& s = p.stage_plans[i];
    const Where here = at.index(i);
    if (i == 0 && s.layers.first_layer != 0) {
      here.key("first_layer")
          .fail("the first stage must start at layer 0, got " + str(s.layers.first_layer));
    }
    if (i > 0) {
      const int expected = p.stage_plans[i - 1].layers.last_layer + 1;
      if (s.layers.first_layer != expected) {
        here.key("first_layer")
            .fail("stages must be contiguous: expected " + str(expected) + " (the layer after " +
                  at.index(i - 1).path + ".last_layer), got " + str(s.layers.first_layer));
      }
    }
    if (s.layers.last_layer < s.layers.first_layer) {
      here.key("last_layer")
          .fail("a stage needs at least one layer: last_layer " + str(s.layers.last_layer) +
                " is before first_layer " + str(s.layers.first_layer));
    }
    check_stage_device(p, i, here.key("device"));
  }
  const int last = p.stage_plans.back().layers.last_layer;
  if (last != p.layer_count - 1) {
    at.index(p.stage_plans.size() - 1)
        .key("last_layer")
        .fail("the last stage must end at the model's last layer " + str(p.layer_count - 1) +
              ", got " + str(last));
  }
}

// A custom schedule's per-rank actions, which must agree with K, M and chunks.
void read_custom_actions(ObjectReader& top, Plan& p) {
  const Where at = top.where("actions");
  const json& rows = top.array("actions");
  std::vector<std::vector<std::string>> cells;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].is_array())
      at.index(r).fail("expected an array of actions, got " + type_of(rows[r]));
    cells.emplace_back();
    for (std::size_t i = 0; i < rows[r].size(); ++i) {
      cells.back().push_back(as_string(rows[r][i], at.index(r).index(i)));
    }
  }
  auto custom =
      std::make_shared<const CustomSchedule>(custom_from_actions(cells, at.file, "actions"));
  const auto agree = [&](const char* key, int plan_value, int actions_value) {
    if (plan_value != actions_value) {
      top.fail(key, "the plan says " + str(plan_value) + ", its actions " + str(actions_value));
    }
  };
  agree("K", p.stages, custom->devices());
  agree("M", p.micro_batches, custom->micro_batches);
  agree("chunks", p.chunks, custom->chunks());
  p.custom = std::move(custom);
}

// N = K x D x T devices; D replicas split the global batch, each into M micro-batches.
void check_sizes(const Plan& p, const Where& top) {
  const std::int64_t needed =
      std::int64_t{p.stages} * p.data_parallel * p.tensor_parallel * p.context_parallel;
  if (needed != p.devices) {
    top.key("cluster").key("devices").fail("expected K x D x T x C = " + str(needed) +
                                           " devices, got " + str(p.devices));
  }
  const int fold = p.split().expert_fold();
  if (fold > 1 && !experts_divide(p.expert_parallel, p.data_parallel, p.context_parallel, fold)) {
    top.key("E").fail(
        "expected a divisor of D x C x T = " + str(p.data_parallel * p.context_parallel * fold) +
        " (whole experts: the experts spread over E of the devices), got " +
        str(p.expert_parallel));
  }
  if (fold == 1 && !experts_divide(p.expert_parallel, p.data_parallel, p.context_parallel, 1)) {
    top.key("E").fail(
        p.context_parallel > 1
            ? "expected a divisor of D x C = " + str(p.data_parallel * p.context_parallel) +
                  " (the experts spread over E of the D x C devices), got " + str(p.expert_parallel)
            : "expected a divisor of D = " + str(p.data_parallel) +
                  " (the experts spread over E of the replicas), got " + str(p.expert_parallel));
  }
  if (p.global_batch % p.data_parallel != 0) {
    top.key("D").fail(str(p.data_parallel) + " replicas do not divide global_batch " +
                      str(p.global_batch));
  }
  const std::int64_t per_replica = p.global_batch / p.data_parallel;
  if (per_replica % p.micro_batches != 0) {
    top.key("M").fail(str(p.micro_batches) + " does not divide the per-replica batch " +
                      str(per_replica) + " (global_batch / D)");
  }
  const std::int64_t mbs = per_replica / p.micro_batches;
  if (p.micro_batch_size != mbs) {
    top.key("micro_batch_size")
        .fail("expected global_batch / (D x M) = " + str(mbs) + ", got " + str(p.micro_batch_size));
  }
}

// Keys in the order docs/file-formats.md ("Plans") lists them, which reads better
// than nlohmann::json's sorted order; plan_to_json returns the same document.
nlohmann::ordered_json plan_to_ordered_json(const Plan& plan) {
  using ojson = nlohmann::ordered_json;
  ojson stages = ojson::array();
  for (const PlanStage& s : plan.stage_plans) {
    ojson stage = {{"first_layer", s.layers.first_layer},
                   {"last_layer", s.layers.last_layer},
                   {"device", s.device},
                   {"fwd_s", s.fwd_s},
                   {"bwd_s", s.bwd_s},
                   {"recompute_s", s.recompute_s},
                   {"peak_memory_bytes", s.peak_memory}};
    if (s.memory_split) {
      stage["weights_bytes"] = s.memory_split->weights;
      stage["gradients_bytes"] = s.memory_split->gradients;
      stage["optimizer_bytes"] = s.memory_split->optimizer;
      stage["activations_bytes"] = s.memory_split->activations;
    }
    stages.push_back(std::move(stage));
  }
  ojson doc;
  doc["format"] = kPlanFormat;
  doc["version"] = Plan::kVersion;
  doc["scenario"] = plan.scenario_name;
  doc["model"] = {{"name", plan.model_name},
                  {"hash", plan.model_hash},
                  {"layers", plan.layer_count},
                  {"layer_names", plan.layer_names},
                  {"spec", plan.model_spec}};
  doc["cluster"] = {{"name", plan.cluster_name},
                    {"devices", plan.devices},
                    {"memory_capacity_bytes", plan.memory_capacity},
                    {"rank_order", std::string(to_string(plan.rank_order))},
                    {"p2p", std::string(to_string(plan.p2p))},
                    {"p2p_split", plan.p2p_split}};
  doc["K"] = plan.stages;
  doc["D"] = plan.data_parallel;
  doc["T"] = plan.tensor_parallel;
  doc["sequence_parallel"] = plan.sequence_parallel;
  if (plan.expert_parallel > 1) doc["E"] = plan.expert_parallel;
  if (plan.expert_tensor_parallel == 1) doc["expert_tensor_parallel"] = 1;
  if (plan.moe_dispatcher != MoeDispatcher::kAllToAll) {
    doc["moe_dispatcher"] = std::string(to_string(plan.moe_dispatcher));
  }
  if (plan.context_parallel > 1) {
    doc["C"] = plan.context_parallel;
    doc["cp_comm_type"] = std::string(to_string(plan.cp_comm_type));
  }
  doc["zero"] = plan.zero;
  doc["M"] = plan.micro_batches;
  doc["global_batch"] = plan.global_batch;
  doc["micro_batch_size"] = plan.micro_batch_size;
  doc["schedule"] = std::string(to_string(plan.schedule));
  doc["chunks"] = plan.chunks;
  if (plan.custom) doc["actions"] = action_names(*plan.custom);
  doc["remat"] = plan.remat != Remat::kNever;
  doc["remat_mode"] = std::string(to_string(plan.remat));
  doc["checkpoint"] = std::string(to_string(plan.checkpoint));
  doc["partition"] = plan.partition_method;
  doc["optimizer"] =
      plan.optimizer ? ojson(std::string(to_string(*plan.optimizer))) : ojson(nullptr);
  doc["stages"] = std::move(stages);
  doc["predicted"] = {{"step_time_s", plan.step_time_s},
                      {"throughput_samples_per_s", plan.throughput_samples_per_s},
                      {"bubble_fraction", plan.bubble_fraction},
                      {"fits", plan.fits}};
  return doc;
}

}  // namespace

json plan_to_json(const Plan& plan) {
  return json::parse(plan_to_ordered_json(plan).dump());
}

Plan plan_from_json(const json& doc, const std::string& file) {
  ObjectReader top(doc, Where{file, ""});
  check_format_and_version(top);
  Plan p;
  p.scenario_name = top.string("scenario");
  // Plans written before tensor parallelism have neither: whole layers.
  p.tensor_parallel = static_cast<int>(top.opt_integer("T", kDeviceCount).value_or(1));
  p.sequence_parallel = top.opt_bool("sequence_parallel").value_or(false);
  if (p.sequence_parallel && p.tensor_parallel == 1) {
    top.fail("sequence_parallel", "sequence parallelism needs T above 1");
  }
  // Absent where the experts are not spread (or there are none).
  p.expert_parallel = static_cast<int>(top.opt_integer("E", kExpertCount).value_or(1));
  // Absent: the all-to-all.
  p.moe_dispatcher = opt_choice(top, "moe_dispatcher", "expert dispatcher", parse_moe_dispatcher,
                                kMoeDispatcherNames)
                         .value_or(MoeDispatcher::kAllToAll);
  // 1 where each expert is whole beside T > 1; absent where the experts split
  // over T as the dense layers do.
  if (top.opt_integer("expert_tensor_parallel", IntRange{1, 1})) p.expert_tensor_parallel = 1;
  if (p.expert_tensor_parallel == 1 && p.tensor_parallel > 1 && !p.sequence_parallel) {
    top.fail("expert_tensor_parallel",
             "whole experts beside T > 1 need sequence parallelism (sequence_parallel true)");
  }
  // Absent where the sequence is whole on each device.
  p.context_parallel = static_cast<int>(top.opt_integer("C", kDeviceCount).value_or(1));
  // Absent from plans written before the all-gather form: the ring.
  p.cp_comm_type = opt_choice(top, "cp_comm_type", "context-parallel exchange",
                              parse_context_exchange, kContextExchangeNames)
                       .value_or(ContextExchange::kP2p);
  // Absent from plans written before ZeRO: plain data parallelism.
  p.zero = static_cast<int>(top.opt_integer("zero", IntRange{0, kMaxZeroStage}).value_or(0));
  read_model(top.object("model"), p);
  read_cluster(top.object("cluster"), p);
  p.stages = static_cast<int>(top.integer("K", kLayerCount));
  p.data_parallel = static_cast<int>(top.integer("D", kDeviceCount));
  p.micro_batches = static_cast<int>(top.integer("M", kPositiveSmallInt));
  p.global_batch = top.integer("global_batch", kPositiveInt);
  p.micro_batch_size = top.integer("micro_batch_size", kPositiveInt);
  top.at("schedule");  // reports a missing key
  p.schedule = *opt_choice(top, "schedule", "schedule", parse_schedule, kScheduleNames);
  // Plans written before interleaving have no "chunks": one per device.
  p.chunks = static_cast<int>(top.opt_integer("chunks", kLayerCount).value_or(1));
  if (p.schedule == ScheduleKind::kCustom) {
    read_custom_actions(top, p);
  } else {
    if (top.find("actions") != nullptr) {
      top.fail("actions",
               "actions belong to a custom schedule, not " + std::string(to_string(p.schedule)));
    }
    const std::string shape =
        schedule_shape_problem(p.schedule, p.stages, p.micro_batches, p.chunks);
    if (!shape.empty()) top.where("chunks").fail(shape);
  }
  // "remat" says whether anything is recomputed; "remat_mode", absent from plans
  // written before except-last, which micro-batches.
  const bool remat = top.boolean("remat");
  p.remat = opt_choice(top, "remat_mode", "remat mode", parse_remat, kRematNames)
                .value_or(remat_from_bool(remat));
  if (remat != (p.remat != Remat::kNever)) {
    top.fail("remat_mode", "remat mode '" + std::string(to_string(p.remat)) +
                               "' contradicts \"remat\": " + (remat ? "true" : "false"));
  }
  // Absent from plans written before layer checkpointing: the stage's input.
  p.checkpoint =
      opt_choice(top, "checkpoint", "checkpoint unit", parse_checkpoint, kCheckpointNames)
          .value_or(Checkpoint::kStage);
  p.partition_method = top.string("partition");
  if (!top.at("optimizer").is_null()) {
    p.optimizer =
        *opt_choice(top, "optimizer", "optimizer", parse_optimizer, "sgd, momentum, rmsprop, adam");
  }
  const Where stages_at = top.where("stages");
  const json& stages = top.array("stages");
  for (std::size_t i = 0; i < stages.size(); ++i) {
    p.stage_plans.push_back(read_stage(ObjectReader(stages[i], stages_at.index(i))));
    // The split is known for every device or, in older plans, for none.
    const bool known = p.stage_plans[i].memory_split.has_value();
    if (i > 0 && known != p.stage_plans[0].memory_split.has_value()) {
      stages_at.index(i).fail(std::string(known ? "has" : "lacks") + " the memory split (" +
                              kSplitNames + ") that stages[0] " + (known ? "lacks" : "has") +
                              ": a plan gives it for every stage or for none");
    }
  }
  read_predicted(top.object("predicted"), p);
  top.finish();

  check_stages(p, stages_at);
  check_sizes(p, top.here());
  return p;
}

void write_plan_file(const std::filesystem::path& path, const Plan& plan) {
  write_file_atomically(path, plan_to_ordered_json(plan).dump(2) + "\n");
}

Plan read_plan_file(const std::filesystem::path& path) {
  const std::string label = path.string();
  return plan_from_json(parse_json(read_text_file(path, label), label), label);
}

void check_plan_matches(const Plan& plan, const Scenario& scenario, const std::string& plan_file) {
  const TrainingConfig& t = scenario.training;
  if (plan.data_parallel > 1 && plan.rank_order != scenario.cluster.rank_order) {
    throw ScenarioError(
        plan_file, "cluster.rank_order",
        "this plan places its ranks " + std::string(to_string(plan.rank_order)) +
            ", the scenario " + std::string(to_string(scenario.cluster.rank_order)) +
            " (--set cluster.rank_order=" + std::string(to_string(plan.rank_order)) +
            " runs the plan's)");
  }
  const P2pMode scenario_p2p = scenario.cluster.p2p_mode(plan.chunks > 1);
  if (plan.stages > 1 && plan.p2p != scenario_p2p) {
    throw ScenarioError(plan_file, "cluster.p2p",
                        "this plan's stages exchange tensors " + std::string(to_string(plan.p2p)) +
                            ", the scenario's " + std::string(to_string(scenario_p2p)) +
                            " (--set cluster.p2p=" + std::string(to_string(plan.p2p)) +
                            " runs the plan's)");
  }
  if (plan.stages > 1 && plan.tensor_parallel > 1 && !plan.sequence_parallel &&
      plan.p2p_split != scenario.cluster.p2p_split) {
    const auto how = [](bool split) { return split ? "1/T from each device" : "whole"; };
    throw ScenarioError(plan_file, "cluster.p2p_split",
                        std::string("this plan's devices send their cuts ") + how(plan.p2p_split) +
                            ", the scenario's " + how(scenario.cluster.p2p_split) +
                            " (--set cluster.p2p_split=" + (plan.p2p_split ? "true" : "false") +
                            " runs the plan's)");
  }
  if (reruns_forwards(plan.remat) && plan.checkpoint != t.checkpoint) {
    throw ScenarioError(
        plan_file, "training.checkpoint",
        "this plan's remat keeps each " + std::string(to_string(plan.checkpoint)) +
            "'s input, the scenario's each " + std::string(to_string(t.checkpoint)) +
            "'s (--set training.checkpoint=" + std::string(to_string(plan.checkpoint)) +
            " runs the plan's)");
  }
  if (plan.tensor_parallel != t.tensor_parallel || plan.sequence_parallel != t.sequence_parallel) {
    const auto split = [](int T, bool sp) {
      return "T=" + str(T) + (sp ? " with sequence parallelism" : "");
    };
    throw ScenarioError(plan_file, "T",
                        "this plan splits each layer as " +
                            split(plan.tensor_parallel, plan.sequence_parallel) +
                            ", the scenario as " + split(t.tensor_parallel, t.sequence_parallel) +
                            " (training.tensor_parallel, training.sequence_parallel, -T)");
  }
  if (plan.expert_parallel != t.expert_parallel) {
    throw ScenarioError(plan_file, "E",
                        "this plan spreads the experts over E=" + str(plan.expert_parallel) +
                            " replicas, the scenario over E=" + str(t.expert_parallel) +
                            " (training.expert_parallel, -E)");
  }
  if (plan.split().expert_fold() != t.split().expert_fold()) {
    const auto experts = [](int fold) {
      return std::string(fold > 1 ? "whole (expert_tensor_parallel 1)" : "split over T");
    };
    throw ScenarioError(plan_file, "expert_tensor_parallel",
                        "this plan's experts are " + experts(plan.split().expert_fold()) +
                            ", the scenario's " + experts(t.split().expert_fold()) +
                            " (training.expert_tensor_parallel)");
  }
  if (plan.moe_dispatcher != t.moe_dispatcher) {
    throw ScenarioError(plan_file, "moe_dispatcher",
                        "this plan's experts exchange tokens by " +
                            std::string(to_string(plan.moe_dispatcher)) + ", the scenario's by " +
                            std::string(to_string(t.moe_dispatcher)) +
                            " (training.moe_dispatcher)");
  }
  if (plan.context_parallel != t.context_parallel) {
    throw ScenarioError(plan_file, "C",
                        "this plan splits each sequence over C=" + str(plan.context_parallel) +
                            " devices, the scenario over C=" + str(t.context_parallel) +
                            " (training.context_parallel, -C)");
  }
  if (plan.context_parallel > 1 && plan.cp_comm_type != t.cp_comm_type) {
    throw ScenarioError(plan_file, "training.cp_comm_type",
                        "this plan's devices exchange keys and values by " +
                            std::string(to_string(plan.cp_comm_type)) + ", the scenario's by " +
                            std::string(to_string(t.cp_comm_type)) +
                            " (--set training.cp_comm_type=" +
                            std::string(to_string(plan.cp_comm_type)) + " runs the plan's)");
  }
  if (plan.optimizer != t.optimizer) {
    const auto name = [](const std::optional<Optimizer>& o) {
      return o ? std::string(to_string(*o)) : std::string("none (bytes_per_param)");
    };
    throw ScenarioError(
        plan_file, "training.optimizer",
        "this plan was made for optimizer " + name(plan.optimizer) + ", the scenario's is " +
            name(t.optimizer) +
            (plan.optimizer ? " (--set training.optimizer=" +
                                  std::string(to_string(*plan.optimizer)) + " runs the plan's)"
                            : ""));
  }
  const std::string hash = model_hash(scenario.model);
  if (plan.model_hash != hash) {
    throw ScenarioError(plan_file, "model.hash",
                        "this plan was made for model '" + plan.model_name + "' (hash " +
                            plan.model_hash + "), not for the scenario's model '" +
                            scenario.model.name + "' (hash " + hash + ")");
  }
  if (plan.devices > scenario.cluster.physical_devices()) {
    throw ScenarioError(plan_file, "cluster.devices",
                        "this plan needs " + str(plan.devices) +
                            " devices, but the scenario's cluster has " +
                            str(scenario.cluster.physical_devices()));
  }
  if (plan.global_batch != scenario.training.global_batch) {
    throw ScenarioError(plan_file, "global_batch",
                        "this plan was made for global_batch " + str(plan.global_batch) +
                            ", but the scenario's is " + str(scenario.training.global_batch));
  }
}

}  // namespace pipescope
