#include "costmodels/userbuffers.h"

#include <algorithm>
#include <cmath>

#include "costmodels/framework.h"

namespace pipescope {

SimTime sm_share_cost(SimTime gemm, double sms, int multiprocessors, bool margin, SimTime comm) {
  if (sms <= 0.0 || multiprocessors <= 0 || gemm <= 0) return 0;
  const double all = multiprocessors;
  const double left = std::max(all - sms, all / 2.0);
  const double kept_off = static_cast<double>(gemm) * (all / left - 1.0);
  const double shared = static_cast<double>(std::max<SimTime>(comm, 0)) * sms / all;
  return static_cast<SimTime>(std::llround(margin ? kept_off : std::min(kept_off, shared)));
}

UserbufferCost userbuffers_cost(const TeGemmTimes& g, const Framework& f,
                                SimTime forward_collective, SimTime backward_collective) {
  UserbufferCost c;
  if (!f.tp_forward_overlap) return c;
  const int n = g.multiprocessors;
  const auto fprop = [&](SimTime gemm, double sms) {
    return sm_share_cost(gemm, sms, n, f.userbuffers_fprop_sm_margin, forward_collective);
  };
  const auto bulk = [&](SimTime gemm, double sms) {
    return sm_share_cost(gemm, sms, n, f.userbuffers_bulk_sm_margin, backward_collective);
  };
  c.forward = fprop(g.proj_fprop, f.userbuffers_proj_fprop_sms) +
              fprop(g.fc2_fprop, f.userbuffers_fc2_fprop_sms);
  c.backward = bulk(g.qkv_dgrad, f.userbuffers_qkv_dgrad_sms) +
               bulk(g.qkv_wgrad, f.userbuffers_qkv_wgrad_sms) +
               bulk(g.fc1_dgrad, f.userbuffers_fc1_dgrad_sms) +
               bulk(g.fc1_wgrad, f.userbuffers_fc1_wgrad_sms);
  return c;
}

}  // namespace pipescope
