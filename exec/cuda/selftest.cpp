#include "exec/cuda/selftest.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "exec/compute/kernels.h"
#include "exec/compute/optimizer.h"
#include "exec/cuda/device_buffer.h"
#include "exec/cuda/kernels.h"

namespace pipescope::exec::cuda {

namespace {

using M = Mat<float>;
namespace ref = pipescope::exec;  // the CPU reference (exec/compute/kernels.h)

class Checker {
 public:
  explicit Checker(std::uint64_t seed) : rng_(seed) { PS_CUBLAS_CHECK(cublasCreate(&blas_)); }
  ~Checker() { cublasDestroy(blas_); }
  Checker(const Checker&) = delete;
  Checker& operator=(const Checker&) = delete;

  M random(Eigen::Index rows, Eigen::Index cols) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    M m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng_);
    return m;
  }
  std::vector<std::int32_t> targets(int rows, int classes) {
    std::uniform_int_distribution<std::int32_t> pick(0, classes - 1);
    std::vector<std::int32_t> t(static_cast<std::size_t>(rows));
    for (auto& x : t) x = pick(rng_);
    return t;
  }

  void compare(const std::string& kernel, const M& want, const std::vector<float>& got,
               double tolerance) {
    checks.push_back(compare_to_reference(
        kernel, {want.data(), static_cast<std::size_t>(want.size())}, got, tolerance));
  }

  static std::vector<float> host(const M& m) { return {m.data(), m.data() + m.size()}; }

  cublasHandle_t blas_ = nullptr;
  std::mt19937_64 rng_;
  std::vector<KernelCheck> checks;
};

void check_activations(Checker& k) {
  // Over 2^20 entries: more than one trip of the grid-stride loops.
  const M u = k.random(1031, 1031);
  const M dout = k.random(1031, 1031);
  const auto n = static_cast<std::int64_t>(u.size());
  DeviceBuffer<float> du_in(Checker::host(u)), ddout(Checker::host(dout)), out(u.size());
  gelu_forward(out.data(), du_in.data(), n, nullptr);
  k.compare("gelu_forward", ref::gelu_forward<float>(u), out.download(), kElementwiseTolerance);
  gelu_backward(out.data(), ddout.data(), du_in.data(), n, nullptr);
  k.compare("gelu_backward", ref::gelu_backward<float>(dout, u), out.download(),
            kElementwiseTolerance);
  relu_forward(out.data(), du_in.data(), n, nullptr);
  k.compare("relu_forward", ref::relu_forward<float>(u), out.download(), kElementwiseTolerance);
  relu_backward(out.data(), ddout.data(), du_in.data(), n, nullptr);
  k.compare("relu_backward", ref::relu_backward<float>(dout, u), out.download(),
            kElementwiseTolerance);
}

void check_layernorm(Checker& k) {
  // 300 columns: more than one pass of a 256-thread block per row.
  const int rows = 9;
  const int c = 300;
  // Off-centre data, and a constant row (variance 0, so the epsilon sets the
  // scale): a kernel that skipped the mean or the epsilon would show.
  M x = (k.random(rows, c) * 3.0f).array() + 5.0f;
  x.row(rows - 1).setConstant(2.0f);
  const M gain = k.random(1, c);
  const M bias = k.random(1, c);
  const M dout = k.random(rows, c);
  M stats;
  const M out = ref::layernorm_forward<float>(x, gain, bias, stats);
  DeviceBuffer<float> dx(Checker::host(x)), dg(Checker::host(gain)), db(Checker::host(bias)),
      ddout(Checker::host(dout)), dout_buf(x.size()), dstats(stats.size());
  layernorm_forward(dout_buf.data(), dstats.data(), dx.data(), dg.data(), db.data(), rows, c,
                    nullptr);
  k.compare("layernorm_forward", out, dout_buf.download(), kReductionTolerance);
  k.compare("layernorm_forward (stats)", stats, dstats.download(), kReductionTolerance);
  // The backward from the CPU's stats, so each kernel is judged alone.
  dstats.upload(Checker::host(stats));
  layernorm_backward_input(dout_buf.data(), ddout.data(), dx.data(), dstats.data(), dg.data(), rows,
                           c, nullptr);
  k.compare("layernorm_backward_input", ref::layernorm_backward_input<float>(dout, x, stats, gain),
            dout_buf.download(), kReductionTolerance);
  M dgain = k.random(1, c);  // accumulates onto what is there
  M dbias = k.random(1, c);
  DeviceBuffer<float> ddgain(Checker::host(dgain)), ddbias(Checker::host(dbias));
  layernorm_backward_params(ddgain.data(), ddbias.data(), ddout.data(), dx.data(), dstats.data(),
                            rows, c, nullptr);
  ref::layernorm_backward_params<float>(dout, x, stats, dgain, dbias);
  k.compare("layernorm_backward_params (gain)", dgain, ddgain.download(), kReductionTolerance);
  k.compare("layernorm_backward_params (bias)", dbias, ddbias.download(), kReductionTolerance);
}

void check_bias(Checker& k) {
  const int rows = 6;
  const int c = 270;
  const M x = k.random(rows, c);
  const M bias = k.random(1, c);
  DeviceBuffer<float> dx(Checker::host(x)), dbias(Checker::host(bias));
  add_bias(dx.data(), dbias.data(), rows, c, nullptr);
  M want = x;
  want.rowwise() += bias.row(0);
  k.compare("add_bias", want, dx.download(), kElementwiseTolerance);
  column_sums_add(dbias.data(), dx.data(), rows, c, nullptr);
  k.compare("column_sums_add", bias + want.colwise().sum(), dbias.download(), kReductionTolerance);
}

void check_crossentropy(Checker& k) {
  const int rows = 5;
  const int v = 700;
  // Logits far from zero: without the max subtracted, exp would overflow.
  const M logits = (k.random(rows, v) * 3.0f).array() + 100.0f;
  const std::vector<std::int32_t> targets = k.targets(rows, v);
  M probs;
  const double loss = ref::crossentropy_forward<float>(logits, targets, probs);
  DeviceBuffer<float> dlogits(Checker::host(logits)), dprobs(probs.size()), dlosses(rows);
  DeviceBuffer<std::int32_t> dtargets(targets);
  crossentropy_forward(dprobs.data(), dlosses.data(), dlogits.data(), dtargets.data(), rows, v,
                       nullptr);
  k.compare("crossentropy_forward (probs)", probs, dprobs.download(), kReductionTolerance);
  const std::vector<float> losses = dlosses.download();
  M total(1, 1);
  total(0, 0) = static_cast<float>(loss);
  float sum = 0.0f;
  for (const float l : losses) sum += l;
  k.compare("crossentropy_forward (loss)", total, {sum}, kReductionTolerance);
  const float scale = 1.0f / static_cast<float>(rows);
  dprobs.upload(Checker::host(probs));
  crossentropy_backward(dlogits.data(), dprobs.data(), dtargets.data(), scale, rows, v, nullptr);
  k.compare("crossentropy_backward", ref::crossentropy_backward<float>(probs, targets, scale),
            dlogits.download(), kElementwiseTolerance);
}

void check_optimizers(Checker& k) {
  for (const Optimizer kind : {Optimizer::kMomentum, Optimizer::kAdam}) {
    OptimizerConfig config;
    config.kind = kind;
    config.learning_rate = 1e-2;
    // An epsilon that matters against gradients of about 1, so its place in
    // the formula is checked.
    config.epsilon = 1e-1;
    Param p;
    p.value = k.random(17, 31);
    const std::vector<float> w0 = Checker::host(p.value);
    DeviceBuffer<float> dw(w0), dm(std::vector<float>(w0.size(), 0.0f)),
        dv(std::vector<float>(w0.size(), 0.0f)), dg(w0.size());
    ParamOptimizer cpu(config);
    // Two steps, so the moments and the bias correction carry over.
    for (int t = 1; t <= 2; ++t) {
      p.grad = k.random(17, 31);
      dg.upload(Checker::host(p.grad));
      const auto n = static_cast<std::int64_t>(w0.size());
      if (kind == Optimizer::kMomentum) {
        momentum_update(dw.data(), dm.data(), dg.data(), n, 1e-2f,
                        static_cast<float>(config.momentum), nullptr);
      } else {
        adam_update(dw.data(), dm.data(), dv.data(), dg.data(), n, 1e-2f,
                    static_cast<float>(config.beta1), static_cast<float>(config.beta2),
                    static_cast<float>(config.epsilon),
                    static_cast<float>(1.0 - std::pow(config.beta1, t)),
                    static_cast<float>(1.0 - std::pow(config.beta2, t)), nullptr);
      }
      cpu.step({&p});
    }
    k.compare(kind == Optimizer::kMomentum ? "momentum_update" : "adam_update", p.value,
              dw.download(), kElementwiseTolerance);
  }
}

void check_gemm(Checker& k) {
  const int m = 37;
  const int n = 29;
  const int kk = 45;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const M a = ta ? k.random(kk, m) : k.random(m, kk);
      const M b = tb ? k.random(n, kk) : k.random(kk, n);
      const M c0 = k.random(m, n);
      const M opa = ta ? M(a.transpose()) : a;
      const M opb = tb ? M(b.transpose()) : b;
      const M want = 0.5f * opa * opb + 2.0f * c0;
      DeviceBuffer<float> da(Checker::host(a)), db(Checker::host(b)), dc(Checker::host(c0));
      gemm(k.blas_, ta, tb, m, n, kk, 0.5f, da.data(), db.data(), 2.0f, dc.data());
      k.compare(std::string("gemm (") + (ta ? "A^T" : "A") + " " + (tb ? "B^T" : "B") + ")", want,
                dc.download(), kReductionTolerance);
    }
  }
}

}  // namespace

KernelCheck compare_to_reference(std::string kernel, std::span<const float> want,
                                 std::span<const float> got, double tolerance) {
  double scale = 1.0;
  for (const float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  double worst = got.size() == want.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    worst = std::isfinite(d) ? std::max(worst, d / scale) : INFINITY;
  }
  return {std::move(kernel), worst, tolerance};
}

std::vector<KernelCheck> check_kernels(std::uint64_t seed) {
  PS_CUDA_CHECK(cudaSetDevice(0));
  Checker k(seed);
  check_activations(k);
  check_layernorm(k);
  check_bias(k);
  check_crossentropy(k);
  check_optimizers(k);
  check_gemm(k);
  PS_CUDA_CHECK(cudaDeviceSynchronize());
  return k.checks;
}

}  // namespace pipescope::exec::cuda
