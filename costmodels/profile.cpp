#include "costmodels/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <utility>

#include "costmodels/check.h"

namespace pipescope {

namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

}  // namespace

std::string layer_signature(const LayerSpec& layer) {
  std::string kind = layer.name;
  while (!kind.empty() && kind.back() >= '0' && kind.back() <= '9') kind.pop_back();
  return kind + "|fwd=" + number(layer.fwd_flops) + "|bwd=" + number(layer.bwd_flops) +
         "|params=" + std::to_string(layer.params) + "|out=" + std::to_string(layer.out_bytes) +
         "|stash=" + std::to_string(layer.stash_bytes);
}

const LayerProfile* Profile::find(const LayerSpec& layer) const {
  const std::string sig = layer_signature(layer);
  for (const LayerProfile& p : layers) {
    if (p.signature == sig) return &p;
  }
  return nullptr;
}

double interpolate_ns(const std::vector<std::int64_t>& sizes, const std::vector<SimTime>& times,
                      double batch) {
  PS_CHECK(!sizes.empty() && sizes.size() == times.size(), "a profile entry needs measurements");
  double t = 0.0;
  if (sizes.size() == 1) {
    t = static_cast<double>(times[0]) * batch / static_cast<double>(sizes[0]);
  } else {
    // The segment [i, i+1] that holds batch, or the first / last one outside.
    std::size_t i = 0;
    while (i + 2 < sizes.size() && static_cast<double>(sizes[i + 1]) < batch) ++i;
    const auto x0 = static_cast<double>(sizes[i]);
    const auto x1 = static_cast<double>(sizes[i + 1]);
    const auto y0 = static_cast<double>(times[i]);
    const auto y1 = static_cast<double>(times[i + 1]);
    t = y0 + (y1 - y0) * (batch - x0) / (x1 - x0);
  }
  return std::max(1.0, t);
}

SimTime interpolate_time(const std::vector<std::int64_t>& sizes, const std::vector<SimTime>& times,
                         std::int64_t batch) {
  return static_cast<SimTime>(
      std::llround(interpolate_ns(sizes, times, static_cast<double>(batch))));
}

void check_profile_covers(const Profile& profile, const ModelSpec& model) {
  for (const LayerSpec& layer : model.layers) {
    if (profile.find(layer) == nullptr) {
      throw std::invalid_argument("has no measurement for layer '" + layer.name + "' (" +
                                  layer_signature(layer) + ") of model '" + model.name +
                                  "'; profile this model with `pipescope profile`");
    }
  }
}

const ExpertLoadFigures* Profile::routed_load(int E, int T, int C) const {
  const bool measured =
      expert_load.ranks > 1 && expert_load.ranks == E && expert_load.micro_batch > 0;
  return measured && T == 1 && C == 1 ? &expert_load : nullptr;
}

ProfiledCostModel::ProfiledCostModel(std::shared_ptr<const Profile> profile,
                                     const ExpertLoadFigures* load)
    : profile_(std::move(profile)), load_(load) {
  PS_CHECK(profile_ != nullptr, "a profiled cost model needs a profile");
  description_ = "profiled on " +
                 (profile_->machine.empty() ? "an unnamed machine" : profile_->machine) + " (" +
                 profile_->backend + " backend, " + std::to_string(profile_->cores) + " cores)";
}

const LayerProfile& ProfiledCostModel::entry(const LayerSpec& layer) const {
  const LayerProfile* p = profile_->find(layer);
  PS_CHECK(p != nullptr, "the profile has no entry for layer " + layer.name);
  return *p;
}

ExpertLoadFigures ExpertLoadFigures::at(std::int64_t batch) const {
  if (micro_batch < 1) return *this;
  ExpertLoadFigures out = *this;
  const double scale = static_cast<double>(batch) / static_cast<double>(micro_batch);
  out.forward_s *= scale;
  out.backward_s *= scale;
  out.micro_batch = batch;
  return out;
}

SimTime ProfiledCostModel::load_forward(const LayerSpec& layer, std::int64_t batch) const {
  if (load_ == nullptr || layer.ep_alltoalls == 0) return 0;
  return seconds_to_simtime(load_->at(batch).forward_s);
}

SimTime ProfiledCostModel::load_backward(const LayerSpec& layer, std::int64_t batch) const {
  if (load_ == nullptr || layer.ep_alltoalls == 0) return 0;
  return seconds_to_simtime(load_->at(batch).backward_s);
}

SimTime ProfiledCostModel::forward(const LayerSpec& layer, std::int64_t batch) const {
  const LayerProfile& p = entry(layer);
  return interpolate_time(p.batch_sizes, p.forward, batch) + load_forward(layer, batch);
}

SimTime ProfiledCostModel::backward(const LayerSpec& layer, std::int64_t batch) const {
  const LayerProfile& p = entry(layer);
  return interpolate_time(p.batch_sizes, p.backward, batch) + load_backward(layer, batch);
}

SimTime ProfiledCostModel::weight_grad(const LayerSpec& layer, std::int64_t batch) const {
  const LayerProfile& p = entry(layer);
  if (p.weight.empty()) return CostModel::weight_grad(layer, batch);
  const SimTime w =
      interpolate_time(p.batch_sizes, p.weight, batch) + load_backward(layer, batch) / 2;
  // A part of the backward, unless B was timed too (the halves may exceed it).
  return p.input.empty() ? std::min(w, backward(layer, batch)) : w;
}

bool Profile::split_unstretched() const {
  if (rounds.slowdown_of_stages) return false;
  return std::all_of(layers.begin(), layers.end(),
                     [](const LayerProfile& l) { return !l.input.empty() && !l.weight.empty(); });
}

double Profile::mfu_peak_flop_s(const ModelSpec& model) const {
  double fastest = 0.0;  // FLOP/s
  for (const LayerSpec& layer : model.layers) {
    const LayerProfile* e = find(layer);
    if (e == nullptr) continue;
    const std::vector<std::int64_t>& sizes = e->batch_sizes;
    // On each segment of the interpolation a + s b, the rate F b / (a + s b)
    // is monotone in b: its largest is at a measured size, at 1 (below the
    // first), or beyond the last one F / s when the last segment rises.
    const auto consider = [&](double flops_per_sample, const std::vector<SimTime>& t) {
      const auto at = [&](double b) { return interpolate_ns(sizes, t, b); };
      std::vector<double> batches{1.0};
      for (const std::int64_t b : sizes) batches.push_back(static_cast<double>(b));
      for (const double b : batches) {
        fastest = std::max(fastest, flops_per_sample * b / (at(b) * 1e-9));
      }
      if (sizes.size() >= 2) {
        const auto x0 = static_cast<double>(sizes[sizes.size() - 2]);
        const auto x1 = static_cast<double>(sizes.back());
        const double slope = (at(x1) - at(x0)) / (x1 - x0);  // ns per sample
        if (slope > 0.0) fastest = std::max(fastest, flops_per_sample / (slope * 1e-9));
      }
    };
    consider(layer.fwd_flops, e->forward);
    consider(layer.fwd_flops, e->recompute);
    consider(layer.bwd_flops, e->backward);
    if (!e->input.empty() && !e->weight.empty()) {
      std::vector<SimTime> both;
      for (std::size_t i = 0; i < e->input.size(); ++i) both.push_back(e->input[i] + e->weight[i]);
      consider(layer.bwd_flops, both);
    }
  }
  double least = 1.0;
  for (const double f : concurrency_slowdown) least = std::min(least, f);
  return std::max(gemm.flop_s, fastest / least);
}

SimTime ProfiledCostModel::input_grad(const LayerSpec& layer, std::int64_t batch) const {
  const LayerProfile& p = entry(layer);
  if (p.input.empty()) return CostModel::input_grad(layer, batch);
  return interpolate_time(p.batch_sizes, p.input, batch) + load_backward(layer, batch) / 2;
}

SimTime ProfiledCostModel::recompute(const LayerSpec& layer, std::int64_t batch) const {
  const LayerProfile& p = entry(layer);
  return interpolate_time(p.batch_sizes, p.recompute, batch) + load_forward(layer, batch);
}

SimTime ProfiledCostModel::core_recompute(const LayerSpec& layer, std::int64_t batch) const {
  const LayerProfile& p = entry(layer);
  return core_share_of(layer, interpolate_time(p.batch_sizes, p.recompute, batch));
}

SimTime ProfiledCostModel::optimizer_step(std::int64_t params) const {
  return profile_->optimizer_overhead +
         static_cast<SimTime>(
             std::llround(profile_->optimizer_ns_per_param * static_cast<double>(params)));
}

}  // namespace pipescope
