// The executor's GEMM path against the machine's BLAS (cblas_sgemm), at the
// GEMM shapes of scenarios/cpu-small.json and scenarios/demo.json at each
// scenario's micro-batch size (training.global_batch / micro_batches), one
// thread each.
//
// The shapes are the cost model's kernels of each kind of layer
// (LayerSpec::kernels): for every linear (rows x k) . (k x n) the executor's
// three products (exec/compute/kernels.h): forward x w + b (linear_forward), backward
// input dout w^T and backward weight dw += x^T dout; for attention one head's
// scores q k^T and context p v (head_scores, head_context), on column blocks
// of the [Q | K | V] matrix. These are the float instantiations compiled in
// the executor's library, so the bench runs the copy the loader picks for this
// processor (the Kernels line of `pipescope profile`), as the executor does.
// The BLAS side computes the same into a result allocated the same
// way, so the two differ in the product alone. Each benchmark reports FLOP/s
// (2 m n k per product) over the thread's CPU time.
//
//   build/bench/pipescope_gemm_bench --benchmark_filter=cpu-small
//
// The whole program takes minutes with a slow BLAS: demo's LM head alone is
// 0.5 TFLOP per product. OpenBLAS uses every core unless OPENBLAS_NUM_THREADS=1.

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "costmodels/profile.h"
#include "exec/compute/gemm_rate.h"
#include "exec/compute/kernels.h"
#include "sim/scenario/scenario_io.h"

namespace pipescope {
namespace {

using exec::Index;
using Matrix = exec::Mat<float>;

enum class Pass { kForward, kBackwardInput, kBackwardWeight, kScores, kContext };

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::kForward:
      return "forward";
    case Pass::kBackwardInput:
      return "backward_input";
    case Pass::kBackwardWeight:
      return "backward_weight";
    case Pass::kScores:
      return "scores";
    case Pass::kContext:
      return "context";
  }
  return "?";
}

// One product of a layer: (m x k) . (k x n) as the pass computes it.
struct Case {
  std::string scenario;
  std::string layer;
  Pass pass = Pass::kForward;
  exec::GemmShape shape;
  // Attention: the head width and the row stride of [Q | K | V].
  Index head_dim = 0;
  Index qkv_width = 0;
};

Matrix filled(Index rows, Index cols) {
  return Matrix::Constant(rows, cols, 0.01f);
}

// The linear's three products; `rows` is the micro-batch's rows.
void add_linear(std::vector<Case>& out, const Case& base, Index rows, Index n, Index k) {
  Case c = base;
  c.pass = Pass::kForward;
  c.shape = {rows, n, k};
  out.push_back(c);
  c.pass = Pass::kBackwardInput;
  c.shape = {rows, k, n};
  out.push_back(c);
  c.pass = Pass::kBackwardWeight;
  c.shape = {k, n, rows};
  out.push_back(c);
}

// One head of one sequence: scores (s x dh) . (dh x s), context (s x s) . (s x dh).
void add_attention(std::vector<Case>& out, const Case& base, const Kernel& att, Index qkv_width) {
  Case c = base;
  c.head_dim = att.head_dim;
  c.qkv_width = qkv_width;
  c.pass = Pass::kScores;
  c.shape = {att.seq, att.seq, att.head_dim};
  out.push_back(c);
  c.pass = Pass::kContext;
  c.shape = {att.seq, att.head_dim, att.seq};
  out.push_back(c);
}

// The products of each kind of layer (the first of each signature: a
// Transformer's blocks are one kind) at the scenario's micro-batch size.
std::vector<Case> scenario_cases(const std::string& name) {
  const Scenario sc =
      load_scenario(std::string(PIPESCOPE_SOURCE_DIR) + "/scenarios/" + name + ".json");
  const std::int64_t batch = sc.training.micro_batch_size();
  std::vector<Case> out;
  std::set<std::string> seen;
  for (const LayerSpec& layer : sc.model.layers) {
    if (!layer.kernels || !seen.insert(layer_signature(layer)).second) continue;
    Case base;
    base.scenario = name;
    base.layer = layer.name;
    Index qkv_width = 0;
    for (const Kernel& k : *layer.kernels) {
      if (k.kind == Kernel::Kind::kGemm && k.has_weight) {
        add_linear(out, base, k.rows * batch, k.n, k.k);
        if (qkv_width == 0) qkv_width = k.n;  // a block's first product is QKV
      } else if (k.kind == Kernel::Kind::kAttention) {
        add_attention(out, base, k, qkv_width);
      }
    }
  }
  return out;
}

void report(benchmark::State& state, const Case& c) {
  state.counters["FLOP/s"] =
      benchmark::Counter(exec::gemm_flops(c.shape), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["m"] = static_cast<double>(c.shape.m);
  state.counters["n"] = static_cast<double>(c.shape.n);
  state.counters["k"] = static_cast<double>(c.shape.k);
}

// The executor's linear products, as its layers call them.
void eigen_linear(benchmark::State& state, const Case& c) {
  const auto [m, n, k] = std::tuple<Index, Index, Index>(c.shape.m, c.shape.n, c.shape.k);
  if (c.pass == Pass::kForward) {
    const Matrix x = filled(m, k), w = filled(k, n), b = filled(1, n);
    for (auto _ : state) benchmark::DoNotOptimize(exec::linear_forward(x, w, b).data());
  } else if (c.pass == Pass::kBackwardInput) {
    // dx (m x k) = dout (m x n) w^T, w being (n x k) here.
    const Matrix dout = filled(m, k), w = filled(n, k);
    for (auto _ : state) benchmark::DoNotOptimize(exec::linear_backward_input(dout, w).data());
  } else {
    // dw (m x n) += x^T dout: x is (k x m), dout (k x n).
    const Matrix x = filled(k, m), dout = filled(k, n);
    Matrix dw = Matrix::Zero(m, n);
    for (auto _ : state) {
      exec::linear_backward_params<float>(dout, x, dw, nullptr);
      benchmark::DoNotOptimize(dw.data());
    }
  }
}

// One head's products as attention_forward computes them.
void eigen_attention(benchmark::State& state, const Case& c) {
  const Index s = c.shape.m, dh = c.head_dim;
  const Matrix qkv = filled(s, c.qkv_width);
  if (c.pass == Pass::kScores) {
    for (auto _ : state) benchmark::DoNotOptimize(exec::head_scores(qkv, 0, 0, dh, s, dh).data());
  } else {
    const Matrix p = filled(s, s);
    Matrix out(s, dh);
    for (auto _ : state) {
      exec::head_context(p, 0, qkv, 0, 2 * dh, s, dh, out, 0);
      benchmark::DoNotOptimize(out.data());
    }
  }
}

// The same products through cblas_sgemm, row-major, into results allocated
// as the executor allocates its own.
void blas_linear(benchmark::State& state, const Case& c) {
  const auto m = static_cast<int>(c.shape.m), n = static_cast<int>(c.shape.n),
             k = static_cast<int>(c.shape.k);
  if (c.pass == Pass::kForward) {
    const Matrix x = filled(m, k), w = filled(k, n), b = filled(1, n);
    for (auto _ : state) {
      Matrix out(m, n);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, x.data(), k, w.data(),
                  n, 0.0f, out.data(), n);
      out.rowwise() += b.row(0);
      benchmark::DoNotOptimize(out.data());
    }
  } else if (c.pass == Pass::kBackwardInput) {
    const Matrix dout = filled(m, k), w = filled(n, k);
    for (auto _ : state) {
      Matrix dx(m, n);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, dout.data(), k, w.data(),
                  k, 0.0f, dx.data(), n);
      benchmark::DoNotOptimize(dx.data());
    }
  } else {
    const Matrix x = filled(k, m), dout = filled(k, n);
    Matrix dw = Matrix::Zero(m, n);
    for (auto _ : state) {
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, x.data(), m, dout.data(),
                  n, 1.0f, dw.data(), n);
      benchmark::DoNotOptimize(dw.data());
    }
  }
}

void blas_attention(benchmark::State& state, const Case& c) {
  const auto s = static_cast<int>(c.shape.m), dh = static_cast<int>(c.head_dim),
             ld = static_cast<int>(c.qkv_width);
  const Matrix qkv = filled(s, ld);
  const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
  if (c.pass == Pass::kScores) {
    for (auto _ : state) {
      Matrix scores(s, s);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, dh, scale, qkv.data(), ld,
                  qkv.data() + dh, ld, 0.0f, scores.data(), s);
      benchmark::DoNotOptimize(scores.data());
    }
  } else {
    const Matrix p = filled(s, s);
    Matrix out(s, dh);
    for (auto _ : state) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, dh, s, 1.0f, p.data(), s,
                  qkv.data() + 2 * dh, ld, 0.0f, out.data(), dh);
      benchmark::DoNotOptimize(out.data());
    }
  }
}

bool is_attention(const Case& c) {
  return c.pass == Pass::kScores || c.pass == Pass::kContext;
}

void register_cases(const std::string& scenario) {
  for (const Case& c : scenario_cases(scenario)) {
    const std::string name = c.scenario + "/" + c.layer + "/" + pass_name(c.pass) + "/" +
                             std::to_string(c.shape.m) + "x" + std::to_string(c.shape.n) + "x" +
                             std::to_string(c.shape.k);
    const auto eigen = is_attention(c) ? eigen_attention : eigen_linear;
    const auto blas = is_attention(c) ? blas_attention : blas_linear;
    benchmark::RegisterBenchmark((name + "/eigen").c_str(), [c, eigen](benchmark::State& s) {
      eigen(s, c);
      report(s, c);
    })->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((name + "/blas").c_str(), [c, blas](benchmark::State& s) {
      blas(s, c);
      report(s, c);
    })->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace pipescope

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pipescope::register_cases("cpu-small");
  pipescope::register_cases("demo");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
