#include "sim/formats/profile_io.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/base/file_io.h"
#include "sim/base/format.h"
#include "sim/base/input_file.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {

using nlohmann::json;

namespace {

using namespace json_io;

constexpr const char* kProfileFormat = "pipescope-profile";
// A measured time is at most an hour; anything above is a unit mistake.
constexpr double kMaxTime_s = 3600.0;

std::vector<double> seconds(const std::vector<SimTime>& ns) {
  std::vector<double> out;
  out.reserve(ns.size());
  for (const SimTime t : ns) out.push_back(simtime_to_seconds(t));
  return out;
}

SimTime read_time(const json& v, const Where& w) {
  const double s = as_number(v, w, NumberRange::kPositive);
  if (s > kMaxTime_s)
    w.fail("a measured time of " + describe(v) + " s is implausible (over an hour)");
  return std::max<SimTime>(1, seconds_to_simtime(s));
}

std::vector<SimTime> read_times(ObjectReader& r, std::string_view key, std::size_t n) {
  const json& a = r.array(key);
  const Where w = r.where(key);
  if (a.size() != n) {
    w.fail("has " + std::to_string(a.size()) + " entries but batch_sizes has " + std::to_string(n));
  }
  std::vector<SimTime> out;
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(read_time(a[i], w.index(i)));
  return out;
}

LayerProfile read_layer(ObjectReader r) {
  LayerProfile p;
  p.signature = r.string("signature");
  p.example = r.string("example");
  const json& sizes = r.array("batch_sizes");
  if (sizes.empty()) r.fail("batch_sizes", "needs at least one batch size");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const Where w = r.where("batch_sizes").index(i);
    const std::int64_t b = as_int(sizes[i], w, kPositiveSmallInt);
    if (!p.batch_sizes.empty() && b <= p.batch_sizes.back()) {
      w.fail("batch sizes must be ascending and distinct");
    }
    p.batch_sizes.push_back(b);
  }
  p.forward = read_times(r, "forward_s", p.batch_sizes.size());
  p.backward = read_times(r, "backward_s", p.batch_sizes.size());
  p.recompute = read_times(r, "recompute_s", p.batch_sizes.size());
  if (r.find("input_s") != nullptr) {
    p.input = read_times(r, "input_s", p.batch_sizes.size());
    if (r.find("weight_s") == nullptr) {
      r.fail("input_s",
             "needs weight_s beside it (B and W of a split backward are timed together)");
    }
  }
  if (r.find("weight_s") != nullptr) {
    p.weight = read_times(r, "weight_s", p.batch_sizes.size());
    // Without B measured, W is a part of the backward; with it, the two halves
    // of a split backward may come to more than the whole.
    for (std::size_t i = 0; i < p.weight.size() && p.input.empty(); ++i) {
      if (p.weight[i] > p.backward[i]) {
        r.where("weight_s")
            .index(i)
            .fail("the weight gradient is part of the backward, but " +
                  format_seconds(simtime_to_seconds(p.weight[i])) + " is more than backward_s's " +
                  format_seconds(simtime_to_seconds(p.backward[i])));
      }
    }
  }
  r.finish();
  return p;
}

// The machine's GEMM rate: a product at most 2^16 wide each way, at most an
// exaFLOP/s (anything above is a unit mistake).
MachineGemm read_gemm(ObjectReader r) {
  MachineGemm g;
  g.flop_s = r.number("flop_s", NumberRange::kPositive);
  if (g.flop_s > 1e18) r.fail("flop_s", "implausible (over 10^18 FLOP/s)");
  constexpr IntRange kGemmSide{1, 1 << 16};
  g.m = r.integer("m", kGemmSide);
  g.n = r.integer("n", kGemmSide);
  g.k = r.integer("k", kGemmSide);
  r.finish();
  return g;
}

// A measured group's ranks, latency_s and bandwidth (of its collective).
template <class Figures>
void read_group_link(ObjectReader& r, Figures& f) {
  f.ranks = static_cast<int>(r.integer("ranks", IntRange{2, 1 << 16}));
  f.latency_s = r.number("latency_s", NumberRange::kNonNegative);
  if (f.latency_s > kMaxTime_s) r.fail("latency_s", "implausible (over an hour)");
  f.bandwidth = r.number("bandwidth", NumberRange::kPositive);
  if (f.bandwidth < 1.0) r.fail("bandwidth", "implausible (under a byte per second)");
}

// A tensor group's all-reduce and optimizer step under its ranks at once.
TensorGroupFigures read_tensor_group(ObjectReader r) {
  TensorGroupFigures t;
  read_group_link(r, t);
  t.optimizer_slowdown = r.number("optimizer_slowdown", NumberRange::kPositive);
  if (t.optimizer_slowdown < 1.0 || t.optimizer_slowdown > 100.0) {
    r.fail("optimizer_slowdown", "must be in [1, 100]");
  }
  r.finish();
  return t;
}

// The ranks' gradient sum under their ranks at once.
GradientSumFigures read_gradient_sum(ObjectReader r) {
  GradientSumFigures f;
  read_group_link(r, f);
  r.finish();
  return f;
}

// An optional field of two names, `off` (false, and when absent) or `on`
// (true); `what` names it in the error for another.
bool read_two_way(ObjectReader& r, std::string_view key, const std::string& what,
                  const std::string& off, const std::string& on) {
  return opt_choice(
             r, key, what,
             [&](std::string_view v) -> std::optional<bool> {
               if (v == off) return false;
               if (v == on) return true;
               return std::nullopt;
             },
             off + ", " + on)
      .value_or(false);
}

// A group's `group` field: true for the expert ranks, false (and absent)
// for the context shares.
bool read_group_kind(ObjectReader& r) {
  return read_two_way(r, "group", "group", "context", "experts");
}

// A group's all-to-all under its ranks at once.
GroupAllToAllFigures read_alltoall_group(ObjectReader r) {
  GroupAllToAllFigures a;
  // Profiles before the expert ranks' had the context shares' alone.
  a.experts = read_group_kind(r);
  read_group_link(r, a);
  a.micro_batch = r.integer("micro_batch", IntRange{1, 1 << 24});
  r.finish();
  return a;
}

// The shares' ring: its takes' mean times in a forward and a backward.
ContextRingFigures read_context_ring(ObjectReader r) {
  ContextRingFigures f;
  f.ranks = static_cast<int>(r.integer("ranks", IntRange{2, 1 << 16}));
  for (const auto& [key, value] : {std::pair{"forward_take_s", &f.forward_take_s},
                                   std::pair{"backward_take_s", &f.backward_take_s}}) {
    *value = r.number(key, NumberRange::kNonNegative);
    if (*value > kMaxTime_s) r.fail(key, "implausible (over an hour)");
  }
  f.micro_batch = r.integer("micro_batch", IntRange{1, 1 << 24});
  r.finish();
  return f;
}

// A group's compute slowdown as its passes ran them.
GroupSlowdownFigures read_group_slowdown(ObjectReader r) {
  GroupSlowdownFigures f;
  // Profiles before the expert ranks' had the context shares' alone.
  f.experts = read_group_kind(r);
  f.ranks = static_cast<int>(r.integer("ranks", IntRange{2, 1 << 16}));
  for (const auto& [key, value] :
       {std::pair{"forward", &f.forward}, std::pair{"backward", &f.backward}}) {
    *value = r.number(key, NumberRange::kPositive);
    if (!plausible_slowdown(*value)) {
      r.fail(key, "implausible slowdown " + describe(*value) + " (expected " +
                      describe(kMinConcurrencySlowdown) + " to " +
                      describe(kMaxConcurrencySlowdown) + ")");
    }
  }
  f.micro_batch = r.integer("micro_batch", IntRange{1, 1 << 24});
  // Expert ranks of context shares: C of them to each rank's samples.
  if (const std::optional<std::int64_t> C = r.opt_integer("shares", IntRange{2, 1 << 16})) {
    if (!f.experts || f.ranks % *C != 0 || *C == f.ranks) {
      r.fail("shares", "expert ranks' shares need \"group\": \"experts\" and divide its " +
                           std::to_string(f.ranks) + " ranks into 2 or more expert ranks");
    }
    f.shares = static_cast<int>(*C);
  }
  // Profiles before the plans' op lists had the passes' alone.
  f.op_lists = read_two_way(r, "measured", "measurement", "passes", "op lists");
  f.time_sliced = r.opt_bool("time_sliced").value_or(false);
  if (f.time_sliced && (!f.op_lists || f.shares < 2)) {
    r.fail("time_sliced",
           "a time-sliced group is expert ranks' shares (\"shares\") measured over \"op lists\"");
  }
  r.finish();
  return f;
}

// The expert ranks' routed load: the busiest rank's share over the mean and
// its experts' extra time in a mixture's forward and backward.
ExpertLoadFigures read_expert_load(ObjectReader r) {
  ExpertLoadFigures f;
  f.ranks = static_cast<int>(r.integer("ranks", IntRange{2, 1 << 16}));
  f.imbalance = r.number("imbalance", NumberRange::kPositive);
  if (f.imbalance < 1.0 || f.imbalance > f.ranks) {
    r.fail("imbalance",
           "must be in [1, ranks]: the busiest rank's share of the routed rows "
           "over the mean");
  }
  for (const auto& [key, value] :
       {std::pair{"forward_s", &f.forward_s}, std::pair{"backward_s", &f.backward_s}}) {
    *value = r.number(key, NumberRange::kNonNegative);
    if (*value > kMaxTime_s) r.fail(key, "implausible (over an hour)");
  }
  f.micro_batch = r.integer("micro_batch", IntRange{1, 1 << 24});
  r.finish();
  return f;
}

// How the layers were timed: kept rounds among those measured, and shares of
// wall time in [0, 1].
ProfileRounds read_rounds(ObjectReader r) {
  ProfileRounds out;
  out.measured = static_cast<int>(r.integer("measured", kPositiveSmallInt));
  out.kept = static_cast<int>(r.integer("kept", IntRange{1, out.measured}));
  const auto share = [&](std::string_view key) {
    const double v = r.number(key, NumberRange::kNonNegative);
    if (v > 1.0) r.fail(key, "is a share of the wall time: at most 1");
    return v;
  };
  out.discard_above = share("discard_above");
  out.other_work = share("other_work");
  out.slowdown_of_stages = r.boolean("slowdown_of_stages");
  out.speed_spread = r.opt_number("speed_spread", NumberRange::kNonNegative).value_or(-1.0);
  r.finish();
  return out;
}

}  // namespace

json profile_to_json(const Profile& profile) {
  json layers = json::array();
  for (const LayerProfile& l : profile.layers) {
    json e = json::object();
    e["signature"] = l.signature;
    e["example"] = l.example;
    e["batch_sizes"] = l.batch_sizes;
    e["forward_s"] = seconds(l.forward);
    e["backward_s"] = seconds(l.backward);
    e["recompute_s"] = seconds(l.recompute);
    if (!l.weight.empty()) e["weight_s"] = seconds(l.weight);
    if (!l.input.empty()) e["input_s"] = seconds(l.input);
    layers.push_back(std::move(e));
  }
  json doc = json::object();
  doc["format"] = kProfileFormat;
  doc["version"] = Profile::kVersion;
  doc["backend"] = profile.backend;
  doc["machine"] = profile.machine;
  doc["cores"] = profile.cores;
  doc["model"] = profile.model_name;
  doc["layers"] = std::move(layers);
  doc["optimizer"] = {{"name", profile.optimizer},
                      {"overhead_s", simtime_to_seconds(profile.optimizer_overhead)},
                      {"per_param_s", profile.optimizer_ns_per_param * 1e-9}};
  doc["transport"] = {{"latency_s", profile.transport_latency_s},
                      {"bandwidth", profile.transport_bandwidth}};
  doc["concurrency_slowdown"] = profile.concurrency_slowdown;
  if (profile.gemm.flop_s > 0.0) {
    doc["gemm"] = {{"flop_s", profile.gemm.flop_s},
                   {"m", profile.gemm.m},
                   {"n", profile.gemm.n},
                   {"k", profile.gemm.k}};
  }
  if (profile.rounds.measured > 0) {
    const ProfileRounds& r = profile.rounds;
    doc["rounds"] = {{"measured", r.measured},
                     {"kept", r.kept},
                     {"discard_above", r.discard_above},
                     {"other_work", r.other_work},
                     {"slowdown_of_stages", r.slowdown_of_stages}};
    if (r.speed_spread >= 0.0) doc["rounds"]["speed_spread"] = r.speed_spread;
  }
  if (profile.tensor_group.ranks > 1) {
    const TensorGroupFigures& t = profile.tensor_group;
    doc["tensor_group"] = {{"ranks", t.ranks},
                           {"latency_s", t.latency_s},
                           {"bandwidth", t.bandwidth},
                           {"optimizer_slowdown", t.optimizer_slowdown}};
  }
  if (profile.gradient_sum.ranks > 1) doc["gradient_sum"] = gradient_sum_json(profile.gradient_sum);
  if (profile.context_ring.ranks > 1) {
    const ContextRingFigures& f = profile.context_ring;
    doc["context_ring"] = {{"ranks", f.ranks},
                           {"forward_take_s", f.forward_take_s},
                           {"backward_take_s", f.backward_take_s},
                           {"micro_batch", f.micro_batch}};
  }
  if (profile.group_slowdown.ranks > 1) {
    doc["group_slowdown"] = group_slowdown_json(profile.group_slowdown);
  }
  if (profile.expert_load.ranks > 1) doc["expert_load"] = expert_load_json(profile.expert_load);
  if (profile.alltoall_group.ranks > 1) {
    doc["alltoall_group"] = alltoall_group_json(profile.alltoall_group);
  }
  return doc;
}

json expert_load_json(const ExpertLoadFigures& f) {
  return {{"ranks", f.ranks},
          {"imbalance", f.imbalance},
          {"forward_s", f.forward_s},
          {"backward_s", f.backward_s},
          {"micro_batch", f.micro_batch}};
}

json alltoall_group_json(const GroupAllToAllFigures& a) {
  return {{"group", a.experts ? "experts" : "context"},
          {"ranks", a.ranks},
          {"latency_s", a.latency_s},
          {"bandwidth", a.bandwidth},
          {"micro_batch", a.micro_batch}};
}

json group_slowdown_json(const GroupSlowdownFigures& g) {
  json j = {{"group", g.experts ? "experts" : "context"},
            {"ranks", g.ranks},
            {"forward", g.forward},
            {"backward", g.backward},
            {"micro_batch", g.micro_batch},
            {"measured", g.op_lists ? "op lists" : "passes"}};
  if (g.shares > 1) j["shares"] = g.shares;
  if (g.time_sliced) j["time_sliced"] = true;
  return j;
}

json gradient_sum_json(const GradientSumFigures& g) {
  return {{"ranks", g.ranks}, {"latency_s", g.latency_s}, {"bandwidth", g.bandwidth}};
}

Profile profile_from_json(const json& doc, const std::string& file) {
  ObjectReader top(doc, Where{file, ""});
  const json* format = top.find("format");
  if (format == nullptr || !format->is_string() || format->get<std::string>() != kProfileFormat) {
    top.fail("format",
             std::string("not a PipeScope profile (expected \"") + kProfileFormat + "\")");
  }
  const std::int64_t version = top.integer("version", kPositiveInt);
  if (version != Profile::kVersion) {
    top.fail("version", "profile version " + std::to_string(version) +
                            " is not supported (this PipeScope reads version " +
                            std::to_string(Profile::kVersion) + ")");
  }
  Profile p;
  p.backend = top.string("backend");
  if (p.backend != "cpu" && p.backend != "mpi" && p.backend != "cuda") {
    top.fail("backend", "unknown backend '" + p.backend + "' (expected cpu, mpi or cuda)");
  }
  p.machine = top.string("machine");
  p.cores = static_cast<int>(top.integer("cores", IntRange{1, 1 << 16}));
  p.model_name = top.string("model");
  const json& layers = top.array("layers");
  if (layers.empty()) top.fail("layers", "a profile needs at least one measured layer");
  std::unordered_map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Where w = top.where("layers").index(i);
    if (!layers[i].is_object()) w.fail("expected an object, got " + type_of(layers[i]));
    p.layers.push_back(read_layer(ObjectReader(layers[i], w)));
    const auto [it, added] = seen.emplace(p.layers[i].signature, i);
    if (!added) {
      w.key("signature").fail("measured twice (also layers[" + std::to_string(it->second) + "])");
    }
  }
  ObjectReader opt = top.object("optimizer");
  p.optimizer = opt.string("name");
  const double overhead = opt.number("overhead_s", NumberRange::kNonNegative);
  if (overhead > kMaxTime_s) opt.fail("overhead_s", "implausible (over an hour)");
  p.optimizer_overhead = seconds_to_simtime(overhead);
  const double per_param = opt.number("per_param_s", NumberRange::kNonNegative);
  if (per_param > 1e-3) opt.fail("per_param_s", "implausible (over a millisecond per parameter)");
  p.optimizer_ns_per_param = per_param * 1e9;
  opt.finish();
  ObjectReader tr = top.object("transport");
  p.transport_latency_s = tr.number("latency_s", NumberRange::kNonNegative);
  if (p.transport_latency_s > kMaxTime_s) tr.fail("latency_s", "implausible (over an hour)");
  p.transport_bandwidth = tr.number("bandwidth", NumberRange::kPositive);
  if (p.transport_bandwidth < 1.0) tr.fail("bandwidth", "implausible (under a byte per second)");
  tr.finish();
  const json& slowdown = top.array("concurrency_slowdown");
  const Where sw = top.where("concurrency_slowdown");
  if (slowdown.empty() || slowdown.size() > static_cast<std::size_t>(p.cores)) {
    sw.fail("needs one factor for each number of cores from 1 to at most 'cores' (" +
            std::to_string(p.cores) + ")");
  }
  p.concurrency_slowdown.clear();
  for (std::size_t i = 0; i < slowdown.size(); ++i) {
    const double f = as_number(slowdown[i], sw.index(i), NumberRange::kPositive);
    if (i == 0 && f != 1.0) sw.index(0).fail("one core alone is the reference: must be 1");
    if (!plausible_slowdown(f)) {
      sw.index(i).fail("implausible slowdown " + describe(slowdown[i]) + " (expected " +
                       describe(kMinConcurrencySlowdown) + " to " +
                       describe(kMaxConcurrencySlowdown) + ")");
    }
    p.concurrency_slowdown.push_back(f);
  }
  if (std::optional<ObjectReader> gemm = top.opt_object("gemm")) p.gemm = read_gemm(*gemm);
  if (std::optional<ObjectReader> tg = top.opt_object("tensor_group")) {
    p.tensor_group = read_tensor_group(*tg);
  }
  if (std::optional<ObjectReader> g = top.opt_object("gradient_sum")) {
    p.gradient_sum = read_gradient_sum(*g);
  }
  if (std::optional<ObjectReader> ring = top.opt_object("context_ring")) {
    p.context_ring = read_context_ring(*ring);
  }
  if (std::optional<ObjectReader> g = top.opt_object("group_slowdown")) {
    p.group_slowdown = read_group_slowdown(*g);
  }
  if (std::optional<ObjectReader> a = top.opt_object("alltoall_group")) {
    p.alltoall_group = read_alltoall_group(*a);
  }
  if (std::optional<ObjectReader> load = top.opt_object("expert_load")) {
    p.expert_load = read_expert_load(*load);
  }
  if (std::optional<ObjectReader> rounds = top.opt_object("rounds")) {
    p.rounds = read_rounds(*rounds);
  }
  top.finish();
  return p;
}

void write_profile_file(const std::filesystem::path& path, const Profile& profile) {
  write_file_atomically(path, profile_to_json(profile).dump(2) + "\n");
}

Profile read_profile_file(const std::filesystem::path& path) {
  const std::string label = path.string();
  return profile_from_json(
      parse_json(read_input_file(path, label, kMaxDocumentBytes, "a profile"), label), label);
}

void apply_profile(Scenario& scenario, std::shared_ptr<const Profile> profile,
                   const std::string& profile_file) {
  try {
    check_profile_covers(*profile, scenario.model);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(profile_file, "layers", e.what());
  }
  // The longest step the profile can give this scenario, in double: every op of
  // every micro-batch one after the other, at the worst slowdown. Linear
  // interpolation makes M x t(batch / M) largest at one of the ends.
  const auto batch = static_cast<double>(scenario.training.global_batch);
  double whole = 0.0;    // one micro-batch of the whole batch
  double per_one = 0.0;  // micro-batches of one sample
  // What the busiest expert rank adds to a mixture's forward, recompute and
  // backward over a step (ProfiledCostModel), in proportion to the samples,
  // so the same whatever M (counted whatever the scenario's E, T and C,
  // which can only raise the bound).
  const ExpertLoadFigures& load = profile->expert_load;
  const ExpertLoadFigures all = load.at(scenario.training.global_batch);
  const double mixture_load_ns =
      load.ranks > 1 && load.micro_batch > 0 ? (2 * all.forward_s + all.backward_s) * 1e9 : 0.0;
  for (const LayerSpec& layer : scenario.model.layers) {
    const LayerProfile& e = *profile->find(layer);
    const auto at = [&](const std::vector<SimTime>& t, double b) {
      return interpolate_ns(e.batch_sizes, t, b);
    };
    // A split backward's B and W together may exceed the whole.
    const auto backward = [&](double b) {
      return e.input.empty() ? at(e.backward, b)
                             : std::max(at(e.backward, b), at(e.input, b) + at(e.weight, b));
    };
    const double loaded = layer.ep_alltoalls > 0 ? mixture_load_ns : 0.0;
    whole += at(e.forward, batch) + backward(batch) + at(e.recompute, batch) + loaded;
    per_one += batch * (at(e.forward, 1) + backward(1) + at(e.recompute, 1)) + loaded;
  }
  double worst_slowdown = 1.0;
  for (const double f : profile->concurrency_slowdown) worst_slowdown = std::max(worst_slowdown, f);
  const double step_ns =
      (std::max(whole, per_one) + static_cast<double>(profile->optimizer_overhead) +
       profile->optimizer_ns_per_param * static_cast<double>(scenario.model.total_params())) *
      worst_slowdown;
  constexpr double kMaxStepNs = 1e18;  // about 31 years, well inside SimTime
  if (!(step_ns <= kMaxStepNs)) {
    throw ScenarioError(profile_file, "layers",
                        "with these measurements a step of the scenario's batch of " +
                            std::to_string(scenario.training.global_batch) +
                            " could take over 30 years, beyond what the simulator's clock holds");
  }
  // A CPU plan's MFU against the machine's measured GEMM rate, not the cpu
  // preset's nominal peak (a GPU profile's devices keep their preset's).
  if (profile->backend != "cuda") {
    const double peak = profile->mfu_peak_flop_s(scenario.model);
    if (peak > 0.0) {
      scenario.cluster.device.peak_flops_fp32 = peak;
      scenario.cluster.device.peak_flops_16bit = peak;
    }
  }
  scenario.cluster.interconnect.bandwidth = profile->transport_bandwidth;
  scenario.cluster.interconnect.latency_s = profile->transport_latency_s;
  scenario.cluster.shared_cores = profile->cores;
  scenario.cluster.concurrency_slowdown = profile->concurrency_slowdown;
  scenario.cluster.profile = std::move(profile);
}

}  // namespace pipescope
