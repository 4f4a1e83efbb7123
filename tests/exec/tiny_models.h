#pragma once
// The small Transformer the executor's consistency tests train: `blocks`
// blocks of width 16 (+ embedding and head), 2 heads, 5 positions, 13 tokens.

#include "costmodels/model_families.h"

namespace pipescope::exec::testing {

inline TransformerParams tiny_transformer(int blocks = 4) {
  TransformerParams p;
  p.layers = blocks;
  p.d_model = 16;
  p.d_ff = 24;
  p.heads = 2;
  p.seq_len = 5;
  p.vocab = 13;
  return p;
}

}  // namespace pipescope::exec::testing
