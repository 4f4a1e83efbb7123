#pragma once
// Small models the tests build in code.

#include <cstdint>

#include "costmodels/model_families.h"

namespace pipescope::testing {

// embed, `layers` blocks of width d_model, head: 2 heads, 4 positions, 16 tokens.
inline ModelSpec tiny_transformer(int layers, std::int64_t d_model = 16) {
  TransformerParams p;
  p.layers = layers;
  p.d_model = d_model;
  p.heads = 2;
  p.seq_len = 4;
  p.vocab = 16;
  return make_transformer(p, "tiny");
}

}  // namespace pipescope::testing
