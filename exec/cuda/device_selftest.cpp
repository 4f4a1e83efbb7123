// check_device_ops (selftest.h): every Device operation on a CudaDevice against
// the HostDevice reference, the same host data uploaded to both, and copy_from
// between CudaDevices with the streams ordered as the runtime orders them.

#include <cmath>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "exec/compute/host_device.h"
#include "exec/cuda/cuda_device.h"
#include "exec/cuda/gpu.h"
#include "exec/cuda/selftest.h"

namespace pipescope::exec::cuda {

namespace {

constexpr int kGpu = 0;
constexpr int kHost = 1;

std::span<const float> values(const Matrix& m) {
  return {m.data(), static_cast<std::size_t>(m.size())};
}

// One operand on both devices, with the same contents: [kGpu] and [kHost].
struct Twin {
  DeviceMatrix side[2];
  float* operator[](int s) const { return side[s].data(); }
};

struct TwinInts {
  DeviceArray<std::int32_t> side[2];
  const std::int32_t* operator[](int s) const { return side[s].data(); }
};

class Pair {
 public:
  explicit Pair(std::uint64_t seed)
      : rng_(seed),
        gpu_(std::make_shared<CudaDevice>(0, "selftest")),
        host_(std::make_shared<HostDevice>()) {}

  CudaDevice& gpu() { return *gpu_; }
  Device& on(int side) { return side == kGpu ? static_cast<Device&>(*gpu_) : *host_; }

  Matrix random(Index rows, Index cols, float scale = 1.0f, float shift = 0.0f) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Matrix m(rows, cols);
    for (Index i = 0; i < m.size(); ++i) m.data()[i] = normal(rng_) * scale + shift;
    return m;
  }
  std::vector<std::int32_t> ids(Index n, int below) {
    std::uniform_int_distribution<std::int32_t> pick(0, below - 1);
    std::vector<std::int32_t> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = pick(rng_);
    return v;
  }

  Twin upload(const Matrix& m) { return {{exec::upload(*gpu_, m), exec::upload(*host_, m)}}; }
  // An output starts from the same random contents on both sides, so an entry
  // the GPU leaves unwritten shows.
  Twin output(Index rows, Index cols) { return upload(random(rows, cols)); }
  TwinInts upload(const std::vector<std::int32_t>& v) {
    const auto n = static_cast<std::int64_t>(v.size());
    TwinInts t{{gpu_->ints(n), host_->ints(n)}};
    for (const int s : {kGpu, kHost}) on(s).upload(v.data(), n, t.side[s].data());
    return t;
  }

  // Runs op(device, side) on the GPU, then on the host.
  template <typename Op>
  void both(Op op) {
    op(on(kGpu), kGpu);
    op(on(kHost), kHost);
  }

  void compare(const std::string& op, const Twin& t, double tolerance) {
    const Matrix got = download(t.side[kGpu]);
    const Matrix want = download(t.side[kHost]);
    checks.push_back(compare_to_reference("device " + op, values(want), values(got), tolerance));
  }
  void expect(const std::string& what, bool ok) {
    checks.push_back({"device " + what, ok ? 0.0 : 1.0, 0.0});
  }

  std::vector<KernelCheck> checks;

 private:
  std::mt19937_64 rng_;
  std::shared_ptr<CudaDevice> gpu_;
  std::shared_ptr<HostDevice> host_;
};

void check_elementwise(Pair& p) {
  // Over 2^20 entries: more than one trip of the grid-stride loops.
  const Index r = 1031;
  const std::int64_t n = r * r;
  const Twin u = p.upload(p.random(r, r));
  const Twin dout = p.upload(p.random(r, r));
  const Twin out = p.output(r, r);
  p.both([&](Device& d, int s) { d.fill(out[s], n, 0.75f); });
  p.compare("fill", out, 0.0);
  p.both([&](Device& d, int s) { d.add(out[s], u[s], dout[s], n); });
  p.compare("add", out, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.add(out[s], out[s], u[s], n); });
  p.compare("add (in place)", out, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.axpy(out[s], -0.3f, dout[s], n); });
  p.compare("axpy", out, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.gelu_forward(out[s], u[s], n); });
  p.compare("gelu_forward", out, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.gelu_backward(out[s], dout[s], u[s], n); });
  p.compare("gelu_backward", out, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.relu_forward(out[s], u[s], n); });
  p.compare("relu_forward", out, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.relu_backward(out[s], dout[s], u[s], n); });
  p.compare("relu_backward", out, kElementwiseTolerance);
}

void check_optimizers(Pair& p) {
  const Index rows = 17;
  const Index cols = 31;
  const std::int64_t n = rows * cols;
  const Matrix zero = Matrix::Zero(rows, cols);
  // An epsilon that matters against gradients of about 1, so its place in the
  // formula is checked; two steps, so the moments and bias corrections carry.
  const float lr = 1e-2f;
  const float eps = 1e-1f;
  for (const char* name : {"sgd_update", "momentum_update", "rmsprop_update", "adam_update"}) {
    const std::string kind = name;
    const Twin w = p.upload(p.random(rows, cols));
    const Twin m = p.upload(zero);
    const Twin v = p.upload(zero);
    for (int t = 1; t <= 2; ++t) {
      const Twin g = p.upload(p.random(rows, cols));
      const auto c1 = static_cast<float>(1.0 - std::pow(0.9, t));
      const auto c2 = static_cast<float>(1.0 - std::pow(0.999, t));
      p.both([&](Device& d, int s) {
        if (kind == "sgd_update") d.sgd_update(w[s], g[s], n, lr);
        if (kind == "momentum_update") d.momentum_update(w[s], m[s], g[s], n, lr, 0.9f);
        if (kind == "rmsprop_update") d.rmsprop_update(w[s], v[s], g[s], n, lr, 0.99f, eps);
        if (kind == "adam_update") {
          d.adam_update(w[s], m[s], v[s], g[s], n, lr, 0.9f, 0.999f, eps, c1, c2);
        }
      });
    }
    p.compare(kind, w, kElementwiseTolerance);
    if (kind == "momentum_update" || kind == "adam_update")
      p.compare(kind + " (m)", m, kElementwiseTolerance);
    if (kind == "rmsprop_update" || kind == "adam_update")
      p.compare(kind + " (v)", v, kElementwiseTolerance);
  }
}

void check_all_finite(Pair& p) {
  const Index r = 1031;
  const std::int64_t n = r * r;
  Matrix x = p.random(r, r);
  const auto agree = [&](const Matrix& m) {
    const Twin t = p.upload(m);
    const bool gpu = p.on(kGpu).all_finite(t[kGpu], n);
    return gpu == p.on(kHost).all_finite(t[kHost], n) ? std::optional<bool>(gpu) : std::nullopt;
  };
  p.expect("all_finite (finite)", agree(x) == std::optional<bool>(true));
  // The bad entry last: past the first trip of the grid-stride loop.
  x(r - 1, r - 1) = std::numeric_limits<float>::quiet_NaN();
  p.expect("all_finite (a NaN)", agree(x) == std::optional<bool>(false));
  x(r - 1, r - 1) = 0.0f;
  x(r / 2, 3) = -std::numeric_limits<float>::infinity();
  p.expect("all_finite (an infinity)", agree(x) == std::optional<bool>(false));
  p.expect("all_finite (empty)", p.on(kGpu).all_finite(nullptr, 0));
}

void check_products(Pair& p) {
  const int m = 37;
  const int n = 29;
  const int k = 45;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const Twin a = p.upload(ta ? p.random(k, m) : p.random(m, k));
      const Twin b = p.upload(tb ? p.random(n, k) : p.random(k, n));
      const Twin c = p.output(m, n);
      p.both([&](Device& d, int s) { d.gemm(ta, tb, m, n, k, 0.5f, a[s], b[s], 2.0f, c[s]); });
      p.compare(std::string("gemm (") + (ta ? "A^T" : "A") + " " + (tb ? "B^T" : "B") + ")", c,
                kReductionTolerance);
    }
  }
  // Three products, each operand's matrices 5 floats apart: the gaps of C must
  // stay as they are.
  const int batch = 3;
  const std::int64_t sa = std::int64_t{m} * k + 5;
  const std::int64_t sb = std::int64_t{k} * n + 5;
  const std::int64_t sc = std::int64_t{m} * n + 5;
  for (const bool ta : {false, true}) {
    const bool tb = !ta;
    const Twin a = p.upload(p.random(1, batch * sa));
    const Twin b = p.upload(p.random(1, batch * sb));
    const Twin c = p.output(1, batch * sc);
    p.both([&](Device& d, int s) {
      d.gemm_strided_batched(ta, tb, m, n, k, 0.5f, a[s], sa, b[s], sb, 2.0f, c[s], sc, batch);
    });
    p.compare(std::string("gemm_strided_batched (") + (ta ? "A^T B" : "A B^T") + ")", c,
              kReductionTolerance);
  }
  // beta = 0 does not read C, which holds NaNs.
  const Twin a = p.upload(p.random(m, k));
  const Twin b = p.upload(p.random(k, n));
  const Twin c = p.output(m, n);
  p.both([&](Device& d, int s) {
    d.fill(c[s], std::int64_t{m} * n, std::numeric_limits<float>::quiet_NaN());
    d.gemm(false, false, m, n, k, 1.0f, a[s], b[s], 0.0f, c[s]);
  });
  p.compare("gemm (beta 0 over NaNs)", c, kReductionTolerance);
  // k = 0: an empty sum, C = beta C.
  p.both([&](Device& d, int s) { d.gemm(false, false, m, n, 0, 1.0f, a[s], b[s], 3.0f, c[s]); });
  p.compare("gemm (k 0)", c, kElementwiseTolerance);

  const int rows = 6;
  const int cols = 270;
  const Twin x = p.upload(p.random(rows, cols));
  const Twin bias = p.upload(p.random(1, cols));
  p.both([&](Device& d, int s) { d.add_bias(x[s], bias[s], rows, cols); });
  p.compare("add_bias", x, kElementwiseTolerance);
  p.both([&](Device& d, int s) { d.column_sums_add(bias[s], x[s], rows, cols); });
  p.compare("column_sums_add", bias, kReductionTolerance);
}

void check_layernorm(Pair& p) {
  // 300 columns: more than one pass of a 256-thread block per row; off-centre
  // data and a constant row (variance 0: the epsilon sets the scale).
  const int rows = 9;
  const int c = 300;
  Matrix x0 = p.random(rows, c, 3.0f, 5.0f);
  x0.row(rows - 1).setConstant(2.0f);
  const Twin x = p.upload(x0);
  const Twin gain = p.upload(p.random(1, c));
  const Twin bias = p.upload(p.random(1, c));
  const Twin dout = p.upload(p.random(rows, c));
  const Twin out = p.output(rows, c);
  const Twin stats = p.output(rows, 2);
  p.both([&](Device& d, int s) {
    d.layernorm_forward(out[s], stats[s], x[s], gain[s], bias[s], rows, c);
  });
  p.compare("layernorm_forward", out, kReductionTolerance);
  p.compare("layernorm_forward (stats)", stats, kReductionTolerance);
  // The backward from the host's stats, so each operation is judged alone.
  const Twin ref_stats = p.upload(download(stats.side[kHost]));
  p.both([&](Device& d, int s) {
    d.layernorm_backward_input(out[s], dout[s], x[s], ref_stats[s], gain[s], rows, c);
  });
  p.compare("layernorm_backward_input", out, kReductionTolerance);
  const Twin dgain = p.upload(p.random(1, c));  // accumulates onto what is there
  const Twin dbias = p.upload(p.random(1, c));
  p.both([&](Device& d, int s) {
    d.layernorm_backward_params(dgain[s], dbias[s], dout[s], x[s], ref_stats[s], rows, c);
  });
  p.compare("layernorm_backward_params (gain)", dgain, kReductionTolerance);
  p.compare("layernorm_backward_params (bias)", dbias, kReductionTolerance);
}

// `tag` names the shape: "split_qkv (k, gqa)".
void check_attention(Pair& p, const AttentionShape& sh, const std::string& tag) {
  const auto named = [&](const std::string& op, const std::string& part = "") {
    return op + " (" + (part.empty() ? "" : part + ", ") + tag + ")";
  };
  const Index tokens = sh.batch * sh.seq;
  const Index rows = sh.batch * sh.heads * sh.seq;  // of a head-major tensor
  const Index dh = sh.head_dim;
  const Index wide = sh.width() + 2 * sh.kv_width();
  const Twin qkv = p.upload(p.random(tokens, wide));
  const Twin q = p.output(rows, dh);
  const Twin k = p.output(rows, dh);
  const Twin v = p.output(rows, dh);
  p.both([&](Device& d, int s) { d.split_qkv(q[s], k[s], v[s], qkv[s], sh); });
  p.compare(named("split_qkv", "q"), q, 0.0);
  p.compare(named("split_qkv", "k"), k, 0.0);
  p.compare(named("split_qkv", "v"), v, 0.0);
  const Twin dqkv = p.output(tokens, wide);
  p.both([&](Device& d, int s) { d.merge_qkv_grad(dqkv[s], q[s], k[s], v[s], sh); });
  p.compare(named("merge_qkv_grad"), dqkv, kElementwiseTolerance);
  const Twin out = p.output(tokens, sh.width());
  p.both([&](Device& d, int s) { d.merge_heads(out[s], q[s], sh); });
  p.compare(named("merge_heads"), out, 0.0);
  const Twin o = p.output(rows, dh);
  p.both([&](Device& d, int s) { d.split_heads(o[s], out[s], sh); });
  p.compare(named("split_heads"), o, 0.0);

  const auto n = static_cast<int>(rows);
  const auto len = static_cast<int>(sh.seq);
  const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh)));
  const Twin scores = p.upload(p.random(rows, sh.seq, 3.0f));
  const Twin probs = p.output(rows, sh.seq);
  p.both([&](Device& d, int s) { d.causal_softmax_forward(probs[s], scores[s], scale, n, len); });
  p.compare(named("causal_softmax_forward"), probs, kReductionTolerance);
  p.both([&](Device& d, int s) { d.causal_softmax_forward(scores[s], scores[s], scale, n, len); });
  p.compare(named("causal_softmax_forward", "in place"), scores, kReductionTolerance);
  // The backward from the host's probabilities, so it is judged alone.
  const Twin ref_probs = p.upload(download(probs.side[kHost]));
  const Twin dprobs = p.upload(p.random(rows, sh.seq));
  const Twin dscores = p.output(rows, sh.seq);
  p.both([&](Device& d, int s) {
    d.causal_softmax_backward(dscores[s], ref_probs[s], dprobs[s], scale, n, len);
  });
  p.compare(named("causal_softmax_backward"), dscores, kReductionTolerance);
}

void check_loss(Pair& p) {
  const int rows = 5;
  const int v = 700;
  // Logits far from zero: without the max subtracted, exp would overflow.
  const Twin logits = p.upload(p.random(rows, v, 3.0f, 100.0f));
  const TwinInts targets = p.upload(p.ids(rows, v));
  const Twin probs = p.output(rows, v);
  const Twin losses = p.output(rows, 1);
  p.both([&](Device& d, int s) {
    d.crossentropy_forward(probs[s], losses[s], logits[s], targets[s], rows, v);
  });
  p.compare("crossentropy_forward (probs)", probs, kReductionTolerance);
  p.compare("crossentropy_forward (losses)", losses, kReductionTolerance);
  const Twin ref_probs = p.upload(download(probs.side[kHost]));
  p.both([&](Device& d, int s) {
    d.crossentropy_backward(logits[s], ref_probs[s], targets[s], 1.0f / rows, rows, v);
  });
  p.compare("crossentropy_backward", logits, kElementwiseTolerance);
}

void check_embedding(Pair& p) {
  // A vocabulary of 7 for 24 rows: many rows add into one table row at once.
  const int vocab = 7;
  const int seq = 6;
  const int rows = 24;
  const int d = 40;
  const TwinInts ids = p.upload(p.ids(rows, vocab));
  const Twin table = p.upload(p.random(vocab, d));
  const Twin positions = p.upload(p.random(seq, d));
  const Twin out = p.output(rows, d);
  p.both([&](Device& dev, int s) {
    dev.embedding_forward(out[s], ids[s], table[s], positions[s], rows, seq, d);
  });
  p.compare("embedding_forward", out, kElementwiseTolerance);
  p.both([&](Device& dev, int s) {
    dev.embedding_backward(table[s], positions[s], ids[s], out[s], rows, seq, d);
  });
  p.compare("embedding_backward (table)", table, kReductionTolerance);
  p.compare("embedding_backward (positions)", positions, kReductionTolerance);
  p.both([&](Device& dev, int s) {
    dev.embedding_backward(table[s], nullptr, ids[s], out[s], rows, seq, d);
  });
  p.compare("embedding_backward (no positions)", table, kReductionTolerance);
}

void check_memory_and_fences(Pair& p) {
  CudaDevice& gpu = p.gpu();
  const Matrix x = p.random(123, 77);
  const DeviceMatrix on_gpu = exec::upload(gpu, x);
  p.checks.push_back(
      compare_to_reference("device upload, download", values(x), values(download(on_gpu)), 0.0));
  const std::shared_ptr<Fence> start = gpu.fence();
  gpu.gelu_forward(on_gpu.data(), on_gpu.data(), on_gpu.size());
  const std::shared_ptr<Fence> end = gpu.fence();
  end->synchronize();
  p.expect("fence, elapsed_ns", gpu.elapsed_ns(*start, *end) >= 0);
  gpu.synchronize();
}

// src = 2 x made on `from`'s stream, `to` waits for it and copies on a thread
// of its own, src is freed at once (on from's stream), and `to`'s stream
// doubles dst again: exactly 4 x unless an order is missing.
void check_copy(Pair& p, CudaDevice& from, CudaDevice& to, const std::string& what) {
  const Matrix x = p.random(300, 301);
  DeviceMatrix dst = to.matrix(x.rows(), x.cols());
  {
    DeviceMatrix src = exec::upload(from, x);
    from.axpy(src.data(), 1.0f, src.data(), src.size());
    to.wait(*from.fence());
    std::exception_ptr error;
    std::thread copier([&] {
      try {
        to.copy_from(src, dst);
      } catch (...) {
        error = std::current_exception();
      }
    });
    copier.join();
    if (error) std::rethrow_exception(error);
  }
  to.axpy(dst.data(), 1.0f, dst.data(), dst.size());
  const Matrix want = 4.0f * x;
  p.checks.push_back(compare_to_reference("device copy_from (" + what + ")", values(want),
                                          values(download(dst)), 0.0));
}

void check_copies(Pair& p) {
  check_copy(p, p.gpu(), p.gpu(), "one stream");
  const auto second = std::make_shared<CudaDevice>(0, "selftest copy");
  check_copy(p, p.gpu(), *second, "GPU 0, two streams");
  if (visible_gpus().devices > 1) {
    const auto other = std::make_shared<CudaDevice>(1, "selftest copy");
    check_copy(p, p.gpu(), *other, "GPU 0 to GPU 1");
    check_copy(p, *other, p.gpu(), "GPU 1 to GPU 0");
  }
}

}  // namespace

std::vector<KernelCheck> check_device_ops(std::uint64_t seed) {
  Pair p(seed);
  check_memory_and_fences(p);
  check_copies(p);
  check_elementwise(p);
  check_optimizers(p);
  check_all_finite(p);
  check_products(p);
  check_layernorm(p);
  check_attention(p, {2, 5, 4, 4, 8}, "mha");
  check_attention(p, {2, 7, 4, 2, 8}, "gqa");
  // Rows longer than a warp: more than one column per lane in the softmax.
  check_attention(p, {1, 70, 2, 1, 8}, "gqa, s 70");
  check_loss(p);
  check_embedding(p);
  p.gpu().synchronize();
  return p.checks;
}

}  // namespace pipescope::exec::cuda
