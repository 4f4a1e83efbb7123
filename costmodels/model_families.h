#pragma once
// Model families: a few parameters expanded into a layer list with FLOPs,
// parameters and activation sizes derived from published formulas.

#include <cstdint>
#include <string>

#include "costmodels/model.h"

namespace pipescope {

// Decoder-style Transformer language model: an embedding layer (token + learned
// position tables), `layers` blocks (self-attention + MLP, pre-LayerNorm,
// residuals), and a head layer (final LayerNorm + LM projection + softmax
// cross-entropy). Embedding and head are not tied, as in the GPipe paper's
// Transformer (its parameter counts need both tables).
struct TransformerParams {
  int layers = 0;
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;  // 0 means 4 * d_model
  std::int64_t heads = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab = 0;
  DType dtype = DType::kFp32;
  // A learned position table (seq_len x d_model parameters) instead of the
  // original Transformer's sinusoidal positions, which GPipe's Transformer uses
  // (its parameter counts carry no such table).
  bool learned_positions = false;
};
// Throws std::overflow_error when the sizes do not fit in 64-bit integers.
ModelSpec make_transformer(const TransformerParams& p, const std::string& name = "transformer");

// A stack of residual MLP blocks x + W2·relu(W1·LN(x)) over feature vectors,
// followed by a classifier head (linear d_model -> classes + softmax
// cross-entropy).
struct MlpParams {
  int layers = 0;
  std::int64_t d_model = 0;
  std::int64_t d_hidden = 0;  // 0 means 4 * d_model
  std::int64_t classes = 0;   // 0 means d_model
  DType dtype = DType::kFp32;
};
// Throws std::overflow_error when the sizes do not fit in 64-bit integers.
ModelSpec make_mlp(const MlpParams& p, const std::string& name = "mlp");

}  // namespace pipescope
