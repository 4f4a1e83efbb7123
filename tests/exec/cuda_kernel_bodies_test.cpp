// The CUDA kernels' bodies (exec/cuda/kernel_bodies.h) run on the CPU as their
// launches run them on a GPU, in every build, CUDA or not: the launcher's own
// grid (grid_for, grid_for_columns, ...), every block and thread of it, last
// first (a GPU keeps no order, and a kernel whose threads read each other's
// writes would then differ). Each launch is held to HostDevice, the CPU
// reference (exec/compute/host_device.h), at sizes that end mid-block, fill less than
// one block, hold one element, or need more than one trip of the grid-stride
// loop. Outputs start as NaN, so an element no thread writes fails.
//
// The kernels whose threads reduce together (a block per row: LayerNorm,
// cross-entropy; a warp per row: the causal softmax) run each thread's share in
// turn (strided_partial, the GPU's own code), then combine the partials in the
// order the GPU's shuffle trees do, with the GPU's combine(). Not covered here:
// the shuffles, shared memory and barriers themselves (block_reduce and
// warp_reduce in exec/cuda/kernel_common.cuh), the GPU's math library (the
// host's tanhf and expf run here), atomicAdd (the threads run one at a time)
// and the launchers; `pipescope selftest --backend cuda` checks those on a GPU
// (docs/gpus-and-clusters.md).

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "exec/compute/host_device.h"
#include "exec/compute/kernels.h"
#include "exec/cuda/kernel_bodies.h"
#include "exec/cuda/selftest.h"

namespace pipescope::exec::cuda {
namespace {

using detail::combine;
using detail::for_strided;
using detail::Heads;
using detail::kBlock;
using detail::kRowsPerBlock;
using detail::kWarp;
using detail::strided_partial;
using detail::ThreadIndex;

constexpr double kElementwise = kElementwiseTolerance;
constexpr double kReduction = kReductionTolerance;
constexpr float kUnwritten = std::numeric_limits<float>::quiet_NaN();
constexpr unsigned kThreads = kBlock;

static_assert(detail::kLayerNormEps == static_cast<float>(exec::kLayerNormEps));

// One element, less than a block, a block, one past it, mid-block, and more
// than the largest grid covers in one trip of its grid-stride loop.
const std::vector<std::int64_t> kSizes = {1,   100,  256,
                                          257, 1000, std::int64_t{detail::kMaxGrid} * kBlock + 300};

// ---------------------------------------------------------------------------
// the launches on the CPU

// Every thread of a grid of `grid` blocks, the last first.
template <class Body>
void run_threads(unsigned grid, Body body) {
  for (unsigned b = grid; b-- > 0;) {
    for (unsigned t = kThreads; t-- > 0;) body(ThreadIndex{b, t, kThreads, grid});
  }
}

// The partials of one warp's lanes combined as `__shfl_down_sync` trees do:
// at each offset, lane l takes in lane l + offset; lane 0 has the result.
template <bool kMax>
float shuffle_down_tree(std::array<float, kWarp> lanes) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    for (int l = 0; l + offset < kWarp; ++l) lanes[l] = combine<kMax>(lanes[l], lanes[l + offset]);
  }
  return lanes[0];
}

// As `__shfl_xor_sync` trees do: lane l takes in lane l ^ offset, all at once.
template <bool kMax>
float butterfly(std::array<float, kWarp> lanes) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const std::array<float, kWarp> before = lanes;
    for (int l = 0; l < kWarp; ++l) lanes[l] = combine<kMax>(before[l], before[l ^ offset]);
  }
  return lanes[0];
}

// A block of kBlock threads, as DeviceBlock: each thread's partial, then
// block_reduce's order (a tree in each warp, then one over the warps' results).
struct HostBlock {
  template <bool kMax, class F>
  float reduce(int begin, int end, F f) const {
    std::array<float, kWarp> warps;
    warps.fill(detail::identity<kMax>());
    for (int w = 0; w < kBlock / kWarp; ++w) {
      std::array<float, kWarp> lanes{};
      for (int l = 0; l < kWarp; ++l) {
        lanes[l] = strided_partial<kMax>(w * kWarp + l, kBlock, begin, end, f);
      }
      warps[w] = shuffle_down_tree<kMax>(lanes);
    }
    return shuffle_down_tree<kMax>(warps);
  }
  template <class F>
  void each(int begin, int end, F f) const {
    for (int t = kBlock - 1; t >= 0; --t) for_strided(t, kBlock, begin, end, f);
  }
  template <class F>
  void once(F f) const {
    f();
  }
};

// A warp, as DeviceWarp.
struct HostWarp {
  template <bool kMax, class F>
  float reduce(int begin, int end, F f) const {
    std::array<float, kWarp> lanes{};
    for (int l = 0; l < kWarp; ++l) lanes[l] = strided_partial<kMax>(l, kWarp, begin, end, f);
    return butterfly<kMax>(lanes);
  }
  template <class F>
  void each(int begin, int end, F f) const {
    for (int l = kWarp - 1; l >= 0; --l) for_strided(l, kWarp, begin, end, f);
  }
};

// One block per row: block b works on row b.
template <class Body>
void run_block_rows(int rows, Body body) {
  for (unsigned b = detail::grid_for_block_rows(rows); b-- > 0;) body(HostBlock{}, std::int64_t{b});
}

// One warp per row: every warp of the grid, with the row its threads compute.
template <class Body>
void run_warp_rows(int rows, Body body) {
  const unsigned grid = detail::grid_for_warp_rows(rows);
  for (unsigned b = grid; b-- > 0;) {
    for (unsigned w = kRowsPerBlock; w-- > 0;) {
      body(HostWarp{}, detail::warp_row(ThreadIndex{b, w * kWarp, kThreads, grid}));
    }
  }
}

// ---------------------------------------------------------------------------
// data and comparison

std::vector<float> random(std::int64_t n, std::uint32_t seed, float mean = 0.0f,
                          float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, spread);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> unwritten(std::int64_t n) {
  return std::vector<float>(static_cast<std::size_t>(n), kUnwritten);
}

std::vector<std::int32_t> random_ids(int n, int classes, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> pick(0, classes - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int32_t& id : ids) id = pick(rng);
  return ids;
}

// |got - want| <= tolerance max(1, max |want|) everywhere (0: equal); a NaN in
// got (an element no thread wrote) fails.
void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<float>& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0;
  for (const float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double error = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(error <= tolerance * scale)) {
      ADD_FAILURE() << what << ": entry " << i << " of " << got.size() << " is " << got[i]
                    << ", the reference " << want[i];
      return;
    }
  }
}

class CudaKernelBodies : public ::testing::Test {
 protected:
  std::shared_ptr<HostDevice> host = std::make_shared<HostDevice>();
};

// ---------------------------------------------------------------------------
// geometry

TEST_F(CudaKernelBodies, GridsCoverTheWorkAndNoMore) {
  EXPECT_EQ(detail::grid_for(1), 1u);
  EXPECT_EQ(detail::grid_for(256), 1u);
  EXPECT_EQ(detail::grid_for(257), 2u);
  EXPECT_EQ(detail::grid_for(std::int64_t{1} << 40), detail::kMaxGrid);
  EXPECT_EQ(detail::grid_for_columns(300), 2u);
  EXPECT_EQ(detail::grid_for_block_rows(7), 7u);
  EXPECT_EQ(detail::grid_for_warp_rows(8), 1u);
  EXPECT_EQ(detail::grid_for_warp_rows(9), 2u);
  // A grid-stride launch visits every element once.
  for (const std::int64_t n : kSizes) {
    std::vector<int> visits(static_cast<std::size_t>(n), 0);
    run_threads(detail::grid_for(n), [&](const ThreadIndex& th) {
      detail::for_grid_stride(th, n,
                              [&](std::int64_t i) { ++visits[static_cast<std::size_t>(i)]; });
    });
    EXPECT_EQ(std::count(visits.begin(), visits.end(), 1), n) << n;
  }
  // The 32 threads of a warp share its row; the next warp has the next one.
  for (unsigned t = 0; t < kThreads; ++t) {
    EXPECT_EQ(detail::warp_row(ThreadIndex{3, t, kThreads, 4}),
              std::int64_t{3 * kRowsPerBlock} + t / kWarp);
  }
}

TEST_F(CudaKernelBodies, ReductionsCombineEveryThreadsShare) {
  // 1..c summed and maxed over a block and a warp, c above and below the group.
  for (const int c : {1, 31, 33, 256, 700}) {
    const auto value = [](int j) { return static_cast<float>(j + 1); };
    const auto sum = static_cast<float>(c) * static_cast<float>(c + 1) / 2.0f;
    EXPECT_EQ(HostBlock{}.reduce<false>(0, c, value), sum) << c;
    EXPECT_EQ(HostWarp{}.reduce<false>(0, c, value), sum) << c;
    EXPECT_EQ(HostBlock{}.reduce<true>(0, c, value), static_cast<float>(c)) << c;
    EXPECT_EQ(HostWarp{}.reduce<true>(2, c, value), c > 2 ? static_cast<float>(c) : -INFINITY);
  }
}

// ---------------------------------------------------------------------------
// elementwise

TEST_F(CudaKernelBodies, ActivationsMatchTheHostDevice) {
  for (const std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const unsigned grid = detail::grid_for(n);
    const std::vector<float> u = random(n, 1, 0.0f, 3.0f);
    const std::vector<float> dout = random(n, 2);
    std::vector<float> got = unwritten(n);
    std::vector<float> want = unwritten(n);
    run_threads(grid, [&](auto th) { detail::gelu_forward_thread(th, got.data(), u.data(), n); });
    host->gelu_forward(want.data(), u.data(), n);
    expect_close("gelu_forward", got, want, kElementwise);
    run_threads(grid, [&](auto th) {
      detail::gelu_backward_thread(th, got.data(), dout.data(), u.data(), n);
    });
    host->gelu_backward(want.data(), dout.data(), u.data(), n);
    expect_close("gelu_backward", got, want, kElementwise);
    run_threads(grid, [&](auto th) { detail::relu_forward_thread(th, got.data(), u.data(), n); });
    host->relu_forward(want.data(), u.data(), n);
    expect_close("relu_forward", got, want, 0.0);
    run_threads(grid, [&](auto th) {
      detail::relu_backward_thread(th, got.data(), dout.data(), u.data(), n);
    });
    host->relu_backward(want.data(), dout.data(), u.data(), n);
    expect_close("relu_backward", got, want, 0.0);
  }
  // A NaN stays NaN through the relu.
  const float nan = kUnwritten;
  float out = 0.0f;
  detail::relu_forward_thread(ThreadIndex{}, &out, &nan, 1);
  EXPECT_TRUE(std::isnan(out));
}

TEST_F(CudaKernelBodies, ArithmeticMatchesTheHostDevice) {
  for (const std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const unsigned grid = detail::grid_for(n);
    const std::vector<float> a = random(n, 3);
    const std::vector<float> b = random(n, 4);
    std::vector<float> got = unwritten(n);
    std::vector<float> want = unwritten(n);
    run_threads(grid, [&](auto th) { detail::fill_thread(th, got.data(), n, 2.5f); });
    host->fill(want.data(), n, 2.5f);
    expect_close("fill", got, want, 0.0);
    run_threads(grid, [&](auto th) { detail::add_thread(th, got.data(), a.data(), b.data(), n); });
    host->add(want.data(), a.data(), b.data(), n);
    expect_close("add", got, want, 0.0);
    // In place: out is a.
    run_threads(grid,
                [&](auto th) { detail::add_thread(th, got.data(), got.data(), b.data(), n); });
    host->add(want.data(), want.data(), b.data(), n);
    expect_close("add (in place)", got, want, 0.0);
    run_threads(grid, [&](auto th) { detail::axpy_thread(th, got.data(), -0.5f, a.data(), n); });
    host->axpy(want.data(), -0.5f, a.data(), n);
    expect_close("axpy", got, want, 0.0);
  }
}

TEST_F(CudaKernelBodies, OptimizersMatchTheHostDevice) {
  for (const std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const unsigned grid = detail::grid_for(n);
    const std::vector<float> g = random(n, 5);
    std::vector<float> w = random(n, 6);
    std::vector<float> m = random(n, 7);
    std::vector<float> v = random(n, 8, 1.0f, 0.1f);
    std::vector<float> w_ref = w, m_ref = m, v_ref = v;
    run_threads(grid, [&](auto th) { detail::sgd_thread(th, w.data(), g.data(), n, 0.1f); });
    host->sgd_update(w_ref.data(), g.data(), n, 0.1f);
    run_threads(grid, [&](auto th) {
      detail::momentum_thread(th, w.data(), m.data(), g.data(), n, 0.1f, 0.9f);
    });
    host->momentum_update(w_ref.data(), m_ref.data(), g.data(), n, 0.1f, 0.9f);
    run_threads(grid, [&](auto th) {
      detail::rmsprop_thread(th, w.data(), v.data(), g.data(), n, 0.01f, 0.99f, 0.1f);
    });
    host->rmsprop_update(w_ref.data(), v_ref.data(), g.data(), n, 0.01f, 0.99f, 0.1f);
    run_threads(grid, [&](auto th) {
      detail::adam_thread(th, w.data(), m.data(), v.data(), g.data(), n, 0.01f, 0.9f, 0.999f, 0.1f,
                          0.19f, 0.002f);
    });
    host->adam_update(w_ref.data(), m_ref.data(), v_ref.data(), g.data(), n, 0.01f, 0.9f, 0.999f,
                      0.1f, 0.19f, 0.002f);
    expect_close("optimizers (w)", w, w_ref, kElementwise);
    expect_close("optimizers (m)", m, m_ref, kElementwise);
    expect_close("optimizers (v)", v, v_ref, kElementwise);
  }
}

TEST_F(CudaKernelBodies, AnyNonFiniteFindsOneBadEntryAnywhere) {
  for (const std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    std::vector<float> x = random(n, 9);
    const auto found = [&] {
      int flag = 0;
      run_threads(detail::grid_for(n),
                  [&](auto th) { detail::any_nonfinite_thread(th, &flag, x.data(), n); });
      EXPECT_EQ(flag != 0, !host->all_finite(x.data(), n));
      return flag;
    };
    EXPECT_EQ(found(), 0);
    x.back() = INFINITY;
    EXPECT_EQ(found(), 1);
    x.back() = 0.0f;
    x.front() = kUnwritten;
    EXPECT_EQ(found(), 1);
  }
}

// ---------------------------------------------------------------------------
// rows: bias, LayerNorm, loss

// (rows, columns): one entry, columns fewer than a block, one past a block,
// several passes of a block's threads over a row.
const std::vector<std::array<int, 2>> kRowShapes = {{1, 1}, {3, 5}, {4, 257}, {9, 300}, {2, 700}};

TEST_F(CudaKernelBodies, BiasAndColumnSumsMatchTheHostDevice) {
  for (const auto& shape : kRowShapes) {
    const int rows = shape[0];  // named copies: lambdas below capture them
    const int c = shape[1];
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(c));
    const std::int64_t n = std::int64_t{rows} * c;
    const std::vector<float> bias = random(c, 10);
    std::vector<float> got = random(n, 11);
    std::vector<float> want = got;
    run_threads(detail::grid_for(n),
                [&](auto th) { detail::add_bias_thread(th, got.data(), bias.data(), n, c); });
    host->add_bias(want.data(), bias.data(), rows, c);
    expect_close("add_bias", got, want, 0.0);
    std::vector<float> db = random(c, 12);
    std::vector<float> db_ref = db;
    run_threads(detail::grid_for_columns(c), [&](auto th) {
      detail::column_sums_add_thread(th, db.data(), got.data(), rows, c);
    });
    host->column_sums_add(db_ref.data(), want.data(), rows, c);
    expect_close("column_sums_add", db, db_ref, kReduction);
  }
}

TEST_F(CudaKernelBodies, LayerNormMatchesTheHostDevice) {
  for (const auto& shape : kRowShapes) {
    const int rows = shape[0];  // named copies: lambdas below capture them
    const int c = shape[1];
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(c));
    const std::int64_t n = std::int64_t{rows} * c;
    // Off-centre, so a kernel that skipped the mean would show.
    const std::vector<float> x = random(n, 13, 5.0f, 3.0f);
    const std::vector<float> gain = random(c, 14);
    const std::vector<float> bias = random(c, 15);
    const std::vector<float> dout = random(n, 16);
    std::vector<float> out = unwritten(n), out_ref = unwritten(n);
    std::vector<float> stats = unwritten(2 * rows), stats_ref = unwritten(2 * rows);
    run_block_rows(rows, [&](const HostBlock& g, std::int64_t row) {
      detail::layernorm_forward_row(g, out.data(), stats.data(), x.data(), gain.data(), bias.data(),
                                    row, c);
    });
    host->layernorm_forward(out_ref.data(), stats_ref.data(), x.data(), gain.data(), bias.data(),
                            rows, c);
    expect_close("layernorm_forward", out, out_ref, kReduction);
    expect_close("layernorm_forward (stats)", stats, stats_ref, kReduction);
    // The backward from the reference's stats, so each body is judged alone.
    std::vector<float> dx = unwritten(n), dx_ref = unwritten(n);
    run_block_rows(rows, [&](const HostBlock& g, std::int64_t row) {
      detail::layernorm_backward_input_row(g, dx.data(), dout.data(), x.data(), stats_ref.data(),
                                           gain.data(), row, c);
    });
    host->layernorm_backward_input(dx_ref.data(), dout.data(), x.data(), stats_ref.data(),
                                   gain.data(), rows, c);
    expect_close("layernorm_backward_input", dx, dx_ref, kReduction);
    std::vector<float> dgain = random(c, 17), dbias = random(c, 18);
    std::vector<float> dgain_ref = dgain, dbias_ref = dbias;
    run_threads(detail::grid_for_columns(c), [&](auto th) {
      detail::layernorm_backward_params_thread(th, dgain.data(), dbias.data(), dout.data(),
                                               x.data(), stats_ref.data(), rows, c);
    });
    host->layernorm_backward_params(dgain_ref.data(), dbias_ref.data(), dout.data(), x.data(),
                                    stats_ref.data(), rows, c);
    expect_close("layernorm_backward_params (gain)", dgain, dgain_ref, kReduction);
    expect_close("layernorm_backward_params (bias)", dbias, dbias_ref, kReduction);
  }
}

TEST_F(CudaKernelBodies, CrossEntropyMatchesTheHostDevice) {
  for (const auto& shape : kRowShapes) {
    const int rows = shape[0];  // named copies: lambdas below capture them
    const int v = shape[1];
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(v));
    const std::int64_t n = std::int64_t{rows} * v;
    // Far from zero: without the max subtracted, exp would overflow.
    const std::vector<float> logits = random(n, 19, 100.0f, 3.0f);
    const std::vector<std::int32_t> targets = random_ids(rows, v, 20);
    std::vector<float> probs = unwritten(n), probs_ref = unwritten(n);
    std::vector<float> losses = unwritten(rows), losses_ref = unwritten(rows);
    run_block_rows(rows, [&](const HostBlock& g, std::int64_t row) {
      detail::crossentropy_forward_row(g, probs.data(), losses.data(), logits.data(),
                                       targets.data(), row, v);
    });
    host->crossentropy_forward(probs_ref.data(), losses_ref.data(), logits.data(), targets.data(),
                               rows, v);
    expect_close("crossentropy_forward (probs)", probs, probs_ref, kReduction);
    expect_close("crossentropy_forward (losses)", losses, losses_ref, kReduction);
    std::vector<float> dlogits = unwritten(n), dlogits_ref = unwritten(n);
    const float scale = 1.0f / static_cast<float>(rows);
    run_threads(detail::grid_for(n), [&](auto th) {
      detail::crossentropy_backward_thread(th, dlogits.data(), probs_ref.data(), targets.data(),
                                           scale, n, v);
    });
    host->crossentropy_backward(dlogits_ref.data(), probs_ref.data(), targets.data(), scale, rows,
                                v);
    expect_close("crossentropy_backward", dlogits, dlogits_ref, kElementwise);
  }
}

TEST_F(CudaKernelBodies, CrossEntropyGivesNanForATargetOutOfRange) {
  // HostDevice throws here; a kernel cannot, so its loss says it.
  const std::vector<float> logits = random(6, 21);
  const std::vector<std::int32_t> targets = {3, -1};
  std::vector<float> probs = unwritten(6);
  std::vector<float> losses = unwritten(2);
  run_block_rows(2, [&](const HostBlock& g, std::int64_t row) {
    detail::crossentropy_forward_row(g, probs.data(), losses.data(), logits.data(), targets.data(),
                                     row, 3);
  });
  EXPECT_TRUE(std::isnan(losses[0]));
  EXPECT_TRUE(std::isnan(losses[1]));
  EXPECT_FALSE(std::isnan(probs[5]));
}

// ---------------------------------------------------------------------------
// (batch, sequence) layouts

// (batch, seq, heads, kv_heads, head_dim): one of each, multi-head,
// grouped-query, and one over the largest grid's first trip.
const std::vector<HeadShape> kHeadShapes = {
    {1, 1, 1, 1, 1}, {2, 5, 3, 3, 4}, {3, 7, 6, 2, 5}, {4, 128, 16, 4, 160}};

AttentionShape attention(const HeadShape& sh) {
  return {sh.batch, sh.seq, sh.heads, sh.kv_heads, sh.head_dim};
}

TEST_F(CudaKernelBodies, HeadLayoutsMatchTheHostDevice) {
  for (const HeadShape& sh : kHeadShapes) {
    SCOPED_TRACE(std::to_string(sh.batch) + " " + std::to_string(sh.seq) + " " +
                 std::to_string(sh.heads) + "/" + std::to_string(sh.kv_heads));
    const std::int64_t n = detail::head_entries(sh);
    const std::int64_t n_qkv = detail::qkv_entries(sh);
    const Heads h{sh};
    const std::vector<float> qkv = random(n_qkv, 22);
    std::vector<float> q = unwritten(n), k = unwritten(n), v = unwritten(n);
    std::vector<float> q_ref = unwritten(n), k_ref = unwritten(n), v_ref = unwritten(n);
    run_threads(detail::grid_for(n), [&](auto th) {
      detail::split_qkv_thread(th, q.data(), k.data(), v.data(), qkv.data(), h, n);
    });
    host->split_qkv(q_ref.data(), k_ref.data(), v_ref.data(), qkv.data(), attention(sh));
    expect_close("split_qkv (q)", q, q_ref, 0.0);
    expect_close("split_qkv (k)", k, k_ref, 0.0);
    expect_close("split_qkv (v)", v, v_ref, 0.0);
    // Gradients: the key/value heads' sums, in the reference's order.
    std::vector<float> dqkv = unwritten(n_qkv), dqkv_ref = unwritten(n_qkv);
    run_threads(detail::grid_for(n_qkv), [&](auto th) {
      detail::merge_qkv_grad_thread(th, dqkv.data(), q.data(), k.data(), v.data(), h, n_qkv);
    });
    host->merge_qkv_grad(dqkv_ref.data(), q.data(), k.data(), v.data(), attention(sh));
    expect_close("merge_qkv_grad", dqkv, dqkv_ref, 0.0);
    std::vector<float> out = unwritten(n), out_ref = unwritten(n);
    run_threads(detail::grid_for(n),
                [&](auto th) { detail::merge_heads_thread(th, out.data(), q.data(), h, n); });
    host->merge_heads(out_ref.data(), q.data(), attention(sh));
    expect_close("merge_heads", out, out_ref, 0.0);
    std::vector<float> o = unwritten(n), o_ref = unwritten(n);
    run_threads(detail::grid_for(n),
                [&](auto th) { detail::split_heads_thread(th, o.data(), out.data(), h, n); });
    host->split_heads(o_ref.data(), out.data(), attention(sh));
    expect_close("split_heads", o, o_ref, 0.0);
  }
}

TEST_F(CudaKernelBodies, CausalSoftmaxMatchesTheHostDevice) {
  // (rows, s): one row, blocks of s rows ending mid-block of warps, rows
  // longer than a warp.
  for (const auto& shape : std::vector<std::array<int, 2>>{{1, 1}, {10, 5}, {66, 33}, {140, 70}}) {
    const int rows = shape[0];  // named copies: lambdas below capture them
    const int s = shape[1];
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(s));
    const std::int64_t n = std::int64_t{rows} * s;
    const std::vector<float> scores = random(n, 23, 0.0f, 4.0f);
    const std::vector<float> dprobs = random(n, 24);
    std::vector<float> probs = unwritten(n), probs_ref = unwritten(n);
    run_warp_rows(rows, [&](const HostWarp& w, std::int64_t r) {
      detail::causal_softmax_forward_row(w, probs.data(), scores.data(), 0.5f, r, rows, s);
    });
    host->causal_softmax_forward(probs_ref.data(), scores.data(), 0.5f, rows, s);
    expect_close("causal_softmax_forward", probs, probs_ref, kReduction);
    // In place: probs is scores.
    std::vector<float> in_place = scores;
    run_warp_rows(rows, [&](const HostWarp& w, std::int64_t r) {
      detail::causal_softmax_forward_row(w, in_place.data(), in_place.data(), 0.5f, r, rows, s);
    });
    expect_close("causal_softmax_forward (in place)", in_place, probs_ref, kReduction);
    std::vector<float> dscores = unwritten(n), dscores_ref = unwritten(n);
    run_warp_rows(rows, [&](const HostWarp& w, std::int64_t r) {
      detail::causal_softmax_backward_row(w, dscores.data(), probs_ref.data(), dprobs.data(), 0.5f,
                                          r, rows, s);
    });
    host->causal_softmax_backward(dscores_ref.data(), probs_ref.data(), dprobs.data(), 0.5f, rows,
                                  s);
    expect_close("causal_softmax_backward", dscores, dscores_ref, kReduction);
  }
}

TEST_F(CudaKernelBodies, EmbeddingMatchesTheHostDevice) {
  // (rows, seq, d): ids repeat (a vocabulary of 5), so the backward's adds meet.
  constexpr int kVocab = 5;
  for (const auto& shape : std::vector<std::array<int, 3>>{{1, 1, 1}, {6, 3, 7}, {40, 8, 300}}) {
    const int rows = shape[0];  // named copies: lambdas below capture them
    const int seq = shape[1];
    const int d = shape[2];
    SCOPED_TRACE(std::to_string(rows) + " rows of " + std::to_string(d));
    const std::int64_t n = std::int64_t{rows} * d;
    const std::vector<std::int32_t> ids = random_ids(rows, kVocab, 25);
    const std::vector<float> table = random(std::int64_t{kVocab} * d, 26);
    const std::vector<float> positions = random(std::int64_t{seq} * d, 27);
    std::vector<float> out = unwritten(n), out_ref = unwritten(n);
    run_threads(detail::grid_for(n), [&](auto th) {
      detail::embedding_forward_thread(th, out.data(), ids.data(), table.data(), positions.data(),
                                       seq, d, n);
    });
    host->embedding_forward(out_ref.data(), ids.data(), table.data(), positions.data(), rows, seq,
                            d);
    expect_close("embedding_forward", out, out_ref, 0.0);
    for (const bool with_positions : {true, false}) {
      std::vector<float> dtable = table, dpos = positions;
      std::vector<float> dtable_ref = table, dpos_ref = positions;
      float* p = with_positions ? dpos.data() : nullptr;
      float* p_ref = with_positions ? dpos_ref.data() : nullptr;
      run_threads(detail::grid_for(n), [&](auto th) {
        detail::embedding_backward_thread(th, dtable.data(), p, ids.data(), out.data(), seq, d, n);
      });
      host->embedding_backward(dtable_ref.data(), p_ref, ids.data(), out.data(), rows, seq, d);
      expect_close("embedding_backward (table)", dtable, dtable_ref, kReduction);
      expect_close("embedding_backward (positions)", dpos, dpos_ref, kReduction);
    }
  }
}

}  // namespace
}  // namespace pipescope::exec::cuda
