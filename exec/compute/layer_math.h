#pragma once
// Helpers the layers' math shares (exec/compute/layers.cpp, exec/compute/tensor_layers.cpp):
// input checks and the parameter halves of the linear and LayerNorm backwards,
// run at once or deferred to W. Internal to the executor.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

#include "exec/compute/kernels.h"
#include "exec/compute/layers.h"

namespace pipescope::exec {

// Stash order of a transformer block, whole or a tensor-parallel shard.
enum BlockStash : std::size_t {
  kX,
  kLn1Stats,
  kLn1Out,
  kQkv,
  kProbs,
  kAttn,
  kX2,
  kLn2Stats,
  kLn2Out,
  kFc1Out,
  kGeluOut,
  kHeadsQkv,  // context parallelism by heads: its whole sequences of Q, K, V
  kBlockStashSize,
};

inline std::string str(Index i) {
  return std::to_string(i);
}

// Throws std::invalid_argument unless x is (ctx.batch * ctx.seq, cols).
template <typename T>
void check_input(const Mat<T>& x, const Context& ctx, Index cols, const char* layer) {
  const Index rows = Index{ctx.batch} * Index{ctx.seq};
  if (ctx.batch < 1 || ctx.seq < 1 || x.rows() != rows || x.cols() != cols) {
    throw std::invalid_argument(std::string(layer) + ": expected a (" + str(rows) + ", " +
                                str(cols) + ") input for batch " + str(ctx.batch) + " x seq " +
                                str(ctx.seq) + ", got (" + str(x.rows()) + ", " + str(x.cols()) +
                                ")");
  }
}

inline void check_positive(Index value, const char* what) {
  if (value < 1) throw std::invalid_argument(std::string(what) + " must be positive");
}

// The parameter halves of the linear and LayerNorm backwards, now or in W. x and
// stats come from the stash, which outlives a deferred W.
template <typename T>
void linear_params(const Grads<T>& g, const Mat<T>& dout, const Mat<T>& x, std::size_t weight,
                   std::optional<std::size_t> bias) {
  Mat<T>* db = bias ? g[*bias] : nullptr;
  g.add(dout, [&x, dw = g[weight], db](const Mat<T>& d) { linear_backward_params(d, x, *dw, db); });
}

template <typename T>
void layernorm_params(const Grads<T>& g, const Mat<T>& dout, const Mat<T>& x, const Mat<T>& stats,
                      std::size_t gain, std::size_t bias) {
  g.add(dout, [&x, &stats, dgain = g[gain], dbias = g[bias]](const Mat<T>& d) {
    layernorm_backward_params(d, x, stats, *dgain, *dbias);
  });
}

}  // namespace pipescope::exec
