#include "cli/scenario_options.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <system_error>

#include "sim/formats/cost_model_file.h"
#include "sim/scenario/hf_config.h"
#include "sim/scenario/model_json.h"
#include "sim/scenario/scenario_io.h"
#include "sim/scenario/scenario_override.h"

namespace pipescope::cli {

void add_scenario_options(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("scenario", o.file, "Scenario JSON file")->required();
  add_scenario_overrides(cmd, o);
}

void add_scenario_overrides(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("--set", o.overrides,
                 "Override a scenario field by its JSON path, e.g. --set model.layers=48 "
                 "(repeatable)")
      ->allow_extra_args(false);
  cmd.add_option("--hf-config", o.hf_config,
                 "Take the model from a Hugging Face config.json (a transformer; hidden_size, "
                 "num_hidden_layers, intermediate_size, num_attention_heads, vocab_size, ...)");
  cmd.add_option("--seq-len", o.seq_len,
                 "Sequence length for --hf-config (default: its max_position_embeddings)")
      ->check(positive_count());
  add_framework_option(cmd, o.framework);
}

void add_framework_option(CLI::App& cmd, std::optional<std::string>& framework) {
  std::vector<std::string> frameworks;
  for (const Framework& f : framework_profiles()) frameworks.push_back(f.name);
  cmd.add_option("--framework", framework,
                 "The training framework that runs the job, as training.framework says: what "
                 "its host pays per kernel, when it synchronises, what it fuses, overlaps and "
                 "reduces in fp32 (" +
                     framework_names() + "; default: training.framework, else " +
                     kDefaultGpuFramework + " on GPUs and " + kIdealFramework + " elsewhere)")
      ->check(CLI::IsMember(frameworks));
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(input.c_str(), &end);
        if (input.empty() || end != input.c_str() + input.size()) {
          return "expected a number above 0, got '" + input + "'";
        }
        if (!(v > 0.0) || errno == ERANGE) {
          return "expected a number above 0, got " + input;
        }
        return {};
      },
      "POSITIVE");
}

CLI::Validator positive_count() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        const std::string problem = positive_number().operator()(input);
        if (!problem.empty()) return problem;
        long long v = 0;
        const char* const end = input.data() + input.size();
        const auto [stop, ec] = std::from_chars(input.data() + (input[0] == '+' ? 1 : 0), end, v);
        if (ec == std::errc() && stop == end && v <= std::numeric_limits<int>::max()) return {};
        if (ec == std::errc::invalid_argument || (ec == std::errc() && stop != end)) {
          return "expected a whole number above 0, got " + input;
        }
        return "expected a number from 1 to " + std::to_string(std::numeric_limits<int>::max()) +
               ", got " + input;
      },
      "POSITIVE");
}

void add_seed_option(CLI::App& cmd, std::uint64_t& seed, const std::string& description) {
  const CLI::Validator whole(
      [](std::string& input) -> std::string {
        const std::string range = "expected a whole number from 0 to " +
                                  std::to_string(std::numeric_limits<std::uint64_t>::max()) +
                                  " (2^64 - 1), got " + input;
        const bool digits = !input.empty() && std::all_of(input.begin(), input.end(), [](char c) {
          return c >= '0' && c <= '9';
        });
        if (!digits) return range;
        // Decimal: CLI11 would read a leading 0 as octal (hence transform, not
        // check, which may not change the text).
        input.erase(0, std::min(input.find_first_not_of('0'), input.size() - 1));
        errno = 0;
        std::strtoull(input.c_str(), nullptr, 10);
        return errno == ERANGE ? range : std::string{};
      },
      "[0, 2^64-1]");
  cmd.add_option("--seed", seed, description)->transform(whole)->capture_default_str();
}

void add_backend_option(CLI::App& cmd, std::string& backend, const std::string& description) {
  cmd.add_option("--backend", backend, description)
      ->check(CLI::IsMember({"cpu", "cuda", "mpi"}))
      ->capture_default_str();
}

void add_cost_model_option(CLI::App& cmd, ScenarioOptions& o) {
  cmd.add_option("--cost-model", o.cost_model,
                 "How layers are timed: analytic (the device's roofline), kernels (the "
                 "kernel-level model, on devices with a kernel table), a cost-model file written "
                 "by `pipescope calibrate` (the kernel-level model with fitted figures), or a "
                 "profile written by `pipescope profile` (measured layers, optimizer and "
                 "transfers)");
}

void add_remat_option(CLI::App& cmd, std::optional<std::string>& remat, const std::string& what) {
  cmd.add_option("--remat", remat,
                 "Rematerialization: on (always: every micro-batch recomputes its forward "
                 "before its backward), except-last (all but the last micro-batch, as "
                 "torchgpipe does), selective (a transformer's attention core only, rebuilt "
                 "at the start of each backward), off (never); " +
                     what)
      ->check(CLI::IsMember({"on", "off", "always", "never", "except-last", "selective"}));
}

CLI::Option* add_partition_option(CLI::App& cmd, std::string& partition) {
  return cmd
      .add_option("--partition", partition,
                  "How to cut the layers into stages: optimal (least slowest stage within "
                  "memory), uniform (layer counts), params (parameter counts), gpipe (least "
                  "variance of stage times)")
      ->check(CLI::IsMember({"optimal", "uniform", "params", "gpipe"}))
      ->capture_default_str();
}

void add_checkpoint_option(CLI::App& cmd, std::optional<std::string>& checkpoint) {
  cmd.add_option("--checkpoint", checkpoint,
                 "What remat keeps of a micro-batch it recomputes: stage (its stage's input; "
                 "the recompute rebuilds the whole stage's activations, as torchgpipe does) "
                 "or layer (every layer's input, rebuilt one layer at a time, as Megatron-LM's "
                 "--recompute-num-layers 1 and DeepSpeed's activation_checkpoint_interval 1 "
                 "do); default: training.checkpoint, else stage")
      ->check(CLI::IsMember({"stage", "layer"}));
}

std::optional<Remat> remat_of(const std::optional<std::string>& remat) {
  if (!remat) return std::nullopt;
  return parse_remat(*remat);
}

void add_tensor_parallel_option(CLI::App& cmd, std::optional<int>& tensor_parallel) {
  cmd.add_option("-T,--tensor-parallel", tensor_parallel,
                 "Tensor-parallel devices per stage (Megatron-LM's): each of a transformer's "
                 "layers splits over T devices of a node, which all-reduce its results; the "
                 "cluster's devices form groups of T, so K x D x T devices run (default: "
                 "training.tensor_parallel, else 1)")
      ->check(positive_count());
}

void add_expert_parallel_option(CLI::App& cmd, std::optional<int>& expert_parallel,
                                std::optional<int>& expert_tensor_parallel) {
  cmd.add_option("-E,--expert-parallel", expert_parallel,
                 "Expert-parallel replicas (Megatron-LM's --expert-model-parallel-size): a "
                 "mixture's routed experts spread over E of the D data-parallel replicas (of "
                 "the D x C devices under context parallelism, of the T x D x C devices with "
                 "--expert-tensor-parallel 1), experts / E a device, which exchange each "
                 "layer's tokens by all-to-all; E divides the experts and D x C (T x D x C) "
                 "(default: training.expert_parallel, else 1)")
      ->check(positive_count());
  cmd.add_option("--expert-tensor-parallel", expert_tensor_parallel,
                 "Devices that split each routed expert (Megatron-LM's "
                 "--expert-tensor-parallel-size): T, as the dense layers split, or 1, whole "
                 "experts beside T > 1, each of a tensor group's devices routing its own tokens "
                 "and counting as an expert rank (megatron-core's parallel folding; needs "
                 "sequence parallelism) (default: training.expert_tensor_parallel, else T)")
      ->check(positive_count());
}

void add_context_parallel_option(CLI::App& cmd, std::optional<int>& context_parallel) {
  cmd.add_option("-C,--context-parallel", context_parallel,
                 "Context-parallel devices per stage (Megatron-LM's --context-parallel-size): "
                 "each sample's sequence splits over C devices, which pass the keys and values "
                 "of every attention layer round a ring; 2 C divides the sequence, and K x D x "
                 "T x C devices run (default: training.context_parallel, else 1)")
      ->check(positive_count());
}

std::vector<std::string> schedule_choices(bool with_custom) {
  std::vector<std::string> out;
  for (const ScheduleKind k : kAllSchedules) out.emplace_back(to_string(k));
  if (with_custom) out.emplace_back(to_string(ScheduleKind::kCustom));
  return out;
}

std::string chunks_help(const std::string& what) {
  return "Model chunks per device for --schedule interleaved-1f1b, interleaved-zb or "
         "looped-bfs (virtual stages, stage s on device s mod K), and zb-v and dualpipe-v "
         "(exactly 2, stages d and 2K-1-d on device d); " +
         what;
}

void add_schedule_file_option(CLI::App& cmd, std::optional<std::string>& file) {
  cmd.add_option(
      "--schedule-file", file,
      "Run a custom schedule: PyTorch pipelining's per-rank action CSV (a row per "
      "device, cells like 0F1, 1B0, or 0I1 and 0W1 for a split backward; what "
      "`export --to torch-pipelining` writes; (F;B)OVERLAP_F_B for DualPipe's pairs). It "
      "fixes K, M and the chunks (each stage on the row that lists it: loops and Vs "
      "alike) and is checked for missing, duplicated and deadlocking actions first");
}

std::shared_ptr<const CustomSchedule> custom_of(const std::optional<std::string>& file) {
  if (!file) return nullptr;
  return std::make_shared<const CustomSchedule>(read_schedule_csv(*file));
}

ScenarioOptions with_training_flags(ScenarioOptions o, const TrainingFlags& f) {
  std::vector<FieldFlag>& out = o.field_flags;
  if (f.micro_batches_vary) {
    out.push_back({"-M", "micro_batches", std::nullopt});
  } else if (f.micro_batches) {
    out.push_back({"-M " + std::to_string(*f.micro_batches), "micro_batches", *f.micro_batches});
  }
  const std::optional<ScheduleKind> schedule =
      f.schedule ? parse_schedule(*f.schedule) : std::nullopt;
  if (schedule && *schedule != ScheduleKind::kCustom) {
    out.push_back({"--schedule " + *f.schedule, "schedule", *f.schedule});
    if (!f.chunks && !takes_chunks(*schedule)) {
      out.push_back({"--schedule " + *f.schedule, "chunks", std::nullopt});
    }
  }
  if (f.chunks) out.push_back({"--chunks " + std::to_string(*f.chunks), "chunks", *f.chunks});
  if (f.remat) out.push_back({"--remat " + *f.remat, "remat", *f.remat});
  if (f.checkpoint) {
    out.push_back({"--checkpoint " + *f.checkpoint, "checkpoint", *f.checkpoint});
  }
  if (f.tensor_parallel) {
    out.push_back(
        {"-T " + std::to_string(*f.tensor_parallel), "tensor_parallel", *f.tensor_parallel});
  }
  if (f.expert_parallel) {
    out.push_back(
        {"-E " + std::to_string(*f.expert_parallel), "expert_parallel", *f.expert_parallel});
  }
  if (f.expert_tensor_parallel) {
    out.push_back({"--expert-tensor-parallel " + std::to_string(*f.expert_tensor_parallel),
                   "expert_tensor_parallel", *f.expert_tensor_parallel});
  }
  if (f.context_parallel) {
    out.push_back(
        {"-C " + std::to_string(*f.context_parallel), "context_parallel", *f.context_parallel});
  }
  return o;
}

namespace {

// The training fields a plan fixes (sim/plan/plan.h).
constexpr const char* kPlanFixedFields[] = {
    "micro_batches",    "chunks",   "tensor_parallel", "expert_parallel", "expert_tensor_parallel",
    "context_parallel", "zero",     "schedule",        "remat",           "sequence_parallel",
    "balance",          "megatron", "moe_dispatcher"};

// The training field a --set names ("training.remat=off": "remat"), if any.
std::optional<std::string> training_field(const std::string& assignment) {
  const std::string prefix = "training.";
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos || assignment.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  return assignment.substr(prefix.size(), eq - prefix.size());
}

bool plan_fixes(const std::string& field) {
  return std::any_of(std::begin(kPlanFixedFields), std::end(kPlanFixedFields),
                     [&](const char* f) { return field == f; });
}

// Whether a --set of training.FIELD to `value` states what the plan fixes
// otherwise (sim/plan/plan.h); nothing when FIELD is not one the plan fixes. The
// cut (balance, megatron) is the plan's whatever the value.
std::optional<bool> differs_from_plan(const Plan& p, const std::string& field,
                                      const nlohmann::json& value) {
  const auto names = [&](auto parse, auto fixed) {
    return !(value.is_string() && parse(value.get<std::string>()) == fixed);
  };
  if (field == "micro_batches") return value != p.micro_batches;
  if (field == "chunks") return value != p.chunks;
  if (field == "tensor_parallel") return value != p.tensor_parallel;
  if (field == "expert_parallel") return value != p.expert_parallel;
  if (field == "moe_dispatcher") {
    return names(parse_moe_dispatcher, std::optional(p.moe_dispatcher));
  }
  if (field == "expert_tensor_parallel") {  // 1: whole experts; T (or 0 in the plan): split
    const bool whole = value == 1 && p.tensor_parallel > 1;
    return whole != (p.expert_tensor_parallel == 1);
  }
  if (field == "context_parallel") return value != p.context_parallel;
  if (field == "zero") return value != p.zero;
  if (field == "sequence_parallel") return value != p.sequence_parallel;
  if (field == "schedule") return names(parse_schedule, std::optional(p.schedule));
  if (field == "remat") {
    if (value.is_boolean()) return value.get<bool>() != (p.remat != Remat::kNever);
    return names(parse_remat, std::optional(p.remat));
  }
  if (plan_fixes(field)) return true;  // the cut: balance, megatron
  return std::nullopt;
}

// A --set beside --plan of a field the plan fixes, to another value, would be
// ignored: it is refused, as -M and the other flags are.
void refuse_overrides_the_plan_fixes(const ScenarioOptions& o, const Plan& plan,
                                     const std::string& plan_file) {
  for (const std::string& assignment : o.overrides) {
    const std::optional<std::string> field = training_field(assignment);
    if (!field) continue;
    const std::string text = assignment.substr(assignment.find('=') + 1);
    const nlohmann::json value = nlohmann::json::parse(text, nullptr, false);
    const std::optional<bool> differs =
        differs_from_plan(plan, *field, value.is_discarded() ? nlohmann::json(text) : value);
    if (!differs.value_or(false)) continue;
    throw std::invalid_argument("--set " + assignment + ": --plan " + plan_file +
                                " fixes training." + *field +
                                " (K, D, T, E, C, M, ZeRO, the schedule, its chunks, remat and "
                                "the cut are the plan's); drop it, or plan again");
  }
}

}  // namespace

bool sets_a_plan_field(const ScenarioOptions& o) {
  return std::any_of(o.overrides.begin(), o.overrides.end(), [](const std::string& a) {
    const std::optional<std::string> field = training_field(a);
    return field && plan_fixes(*field);
  });
}

ScenarioOptions with_plan_split(ScenarioOptions o, const Plan& plan, const std::string& plan_file) {
  refuse_overrides_the_plan_fixes(o, plan, plan_file);
  o.field_flags.push_back(
      {"--plan " + plan_file + " (T=" + std::to_string(plan.tensor_parallel) + ")",
       "tensor_parallel", plan.tensor_parallel});
  o.field_flags.push_back({"--plan " + plan_file, "sequence_parallel", plan.sequence_parallel});
  o.field_flags.push_back(
      {"--plan " + plan_file + " (E=" + std::to_string(plan.expert_parallel) + ")",
       "expert_parallel", plan.expert_parallel});
  o.field_flags.push_back(
      {"--plan " + plan_file, "moe_dispatcher", std::string(to_string(plan.moe_dispatcher))});
  // Whole experts (1), or split over the plan's T.
  o.field_flags.push_back({"--plan " + plan_file, "expert_tensor_parallel",
                           plan.expert_tensor_parallel == 1 ? 1 : plan.tensor_parallel});
  o.field_flags.push_back(
      {"--plan " + plan_file + " (C=" + std::to_string(plan.context_parallel) + ")",
       "context_parallel", plan.context_parallel});
  o.field_flags.push_back({"--plan " + plan_file, "zero", plan.zero});
  return o;
}

std::vector<std::string> comma_entries(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t comma; (comma = text.find(',', start)) != std::string::npos; start = comma + 1) {
    out.push_back(text.substr(start, comma - start));
  }
  out.push_back(text.substr(start));
  return out;
}

CLI::Validator comma_list(const CLI::Validator& each) {
  return CLI::Validator(
      [each](std::string& input) -> std::string {
        for (std::string entry : comma_entries(input)) {
          if (entry.empty()) {
            return "expected numbers separated by commas, got an empty entry in '" + input + "'";
          }
          if (std::string problem = each(entry); !problem.empty()) return problem;
        }
        return {};
      },
      each.get_description());
}

namespace {

// Digits, not all zeros.
bool whole_number_above_zero(const std::string& entry) {
  return !entry.empty() &&
         std::all_of(entry.begin(), entry.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
         entry.find_first_not_of('0') != std::string::npos;
}

}  // namespace

void add_balance_option(CLI::App& cmd, std::optional<std::string>& balance) {
  const CLI::Validator layers(
      [](std::string& input) -> std::string {
        const std::vector<std::string> entries = comma_entries(input);
        if (std::all_of(entries.begin(), entries.end(), whole_number_above_zero)) return {};
        return "expected the layers of each model stage, whole numbers of at least 1 separated "
               "by commas (e.g. 3,2,2), got '" +
               input + "'";
      },
      "L1,L2,...");
  cmd.add_option("--balance", balance,
                 "Simulate this cut instead of the partitioner's: the layers of each model "
                 "stage in order, K x chunks entries adding up to the model's layers (a "
                 "transformer's embedding, blocks and head are a layer each), as "
                 "training.balance; the summary sets its step beside the --partition cut's")
      ->check(layers);
}

ScenarioOptions with_balance(ScenarioOptions o, const std::optional<std::string>& balance) {
  if (!balance) return o;
  nlohmann::json entries = nlohmann::json::array();
  for (std::string entry : comma_entries(*balance)) {
    entry.erase(0, entry.find_first_not_of('0'));  // JSON has no leading zeros
    entries.push_back(nlohmann::json::parse(entry));
  }
  const std::string flag = "--balance " + *balance;
  o.field_flags.push_back({flag, "megatron", std::nullopt});
  o.field_flags.push_back({flag, "balance", std::move(entries)});
  return o;
}

ScenarioOptions without_stated_cut(ScenarioOptions o) {
  o.field_flags.push_back({"", "balance", std::nullopt});
  o.field_flags.push_back({"", "megatron", std::nullopt});
  return o;
}

ScenarioError scenario_field_error(const ScenarioOptions& o, const ConfigError& e) {
  for (const FieldFlag& f : o.field_flags) {
    if (f.value && e.scenario_field() == "training." + f.key) {
      return ScenarioError::in_flag(o.file, e.scenario_field(), f.flag, e.what());
    }
  }
  return ScenarioError(o.file, e.scenario_field(), e.what());
}

namespace {

// Writes (or removes) a flag's field. A missing training section is made, so
// that what it lacks is reported as the file's; one of another type is left for
// the file's own error.
void apply_field_flag(nlohmann::json& doc, const FieldFlag& f) {
  if (!doc.is_object()) return;
  nlohmann::json& training = doc["training"];
  if (training.is_null()) training = nlohmann::json::object();
  if (!training.is_object()) return;
  if (!f.value) {
    training.erase(f.key);
  } else if (f.key == "framework" && training.contains("framework") &&
             training["framework"].is_object()) {
    // --framework names the profile; the fields the scenario overrides stay.
    training["framework"]["profile"] = *f.value;
  } else {
    training[f.key] = *f.value;
  }
}

// The command's field flags and --framework.
std::vector<FieldFlag> flags_of(const ScenarioOptions& o) {
  std::vector<FieldFlag> out = o.field_flags;
  if (o.framework) out.push_back({"--framework " + *o.framework, "framework", *o.framework});
  return out;
}

}  // namespace

nlohmann::json load_document(const ScenarioOptions& o) {
  if (o.seq_len && !o.hf_config) {
    throw std::invalid_argument("--seq-len applies to --hf-config; use --set model.seq_len=N");
  }
  nlohmann::json doc = o.document ? *o.document : load_scenario_json(o.file);
  if (o.hf_config) {
    const std::filesystem::path config(*o.hf_config);
    // Hub checkouts keep config.json in a folder named after the model.
    const std::string name = config.has_parent_path() && config.filename() == "config.json"
                                 ? config.parent_path().filename().string()
                                 : config.stem().string();
    doc["model"] = transformer_model_json(read_hf_config(config, o.seq_len), name);
  }
  for (const std::string& assignment : o.overrides) apply_override(doc, assignment, o.file);
  for (const FieldFlag& f : flags_of(o)) apply_field_flag(doc, f);
  return doc;
}

Scenario load(const ScenarioOptions& o, const nlohmann::json& doc) {
  Scenario scenario;
  try {
    scenario = o.hf_config ? parse_scenario_with_hf_model(doc, o.file, *o.hf_config, o.overrides)
                           : parse_scenario(doc, o.file);
  } catch (const ScenarioError& e) {
    for (const FieldFlag& f : flags_of(o)) {
      if (f.value && e.file() == o.file && e.json_path() == "training." + f.key) {
        throw ScenarioError::in_flag(o.file, e.json_path(), f.flag, e.message());
      }
    }
    throw;
  }
  if (o.cost_model) apply_cost_model_argument(scenario, *o.cost_model);
  return scenario;
}

Scenario load(const ScenarioOptions& o) {
  return load(o, load_document(o));
}

}  // namespace pipescope::cli
