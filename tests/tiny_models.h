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

// The small Transformer the executor's consistency tests train: `blocks`
// blocks of width 16 (+ embedding and head), 2 heads, 5 positions, 13 tokens.
inline TransformerParams tiny_executor_transformer_params(int blocks = 4) {
  TransformerParams p;
  p.layers = blocks;
  p.d_model = 16;
  p.d_ff = 24;
  p.heads = 2;
  p.seq_len = 5;
  p.vocab = 13;
  return p;
}

// A transformer's family parameters, positionally: blocks, width, feed-forward
// width (0: 4 x width), heads, key-value heads (0: as heads), positions,
// vocabulary, learned positions.
inline TransformerParams transformer_params(int layers, std::int64_t h, std::int64_t ff,
                                            std::int64_t heads, std::int64_t kv, std::int64_t seq,
                                            std::int64_t vocab, bool learned) {
  TransformerParams p;
  p.layers = layers;
  p.d_model = h;
  p.d_ff = ff;
  p.heads = heads;
  p.kv_heads = kv;
  p.seq_len = seq;
  p.vocab = vocab;
  p.learned_positions = learned;
  return p;
}

// One of two context shares of the executor's tiny transformer (two blocks,
// sequences of 8): its attention round a ring, or trading heads.
inline ModelSpec tiny_context_share(bool heads) {
  TransformerParams p = tiny_executor_transformer_params(2);
  p.seq_len = 8;
  TensorSplit split;
  split.context = 2;
  split.heads_over_context = heads;
  return make_transformer(p, "tiny", split);
}

// One rank of E = 2 expert ranks of C = 2 shares of a transformer shaped as
// `p` with 4 experts of width `expert_d_ff`, 2 a token, its first block
// dense.
inline ModelSpec experts_of_shares(TransformerParams p, std::int64_t expert_d_ff = 12) {
  p.moe = {4, 2, expert_d_ff, 0, 1, 1.0};
  TensorSplit split;
  split.context = 2;
  split.experts = 2;
  return make_transformer(p, "moe", split);
}

// The same, two blocks of width 64 on sequences of 32: ops long enough to
// outlast the waits of ranks time-sliced onto fewer cores many times over,
// even where other work shares the cores (a tiny model's measured slowdown
// came to over 100 beside two busy loops).
inline ModelSpec wide_experts_of_shares() {
  TransformerParams p = tiny_executor_transformer_params(2);
  p.d_model = 64;
  p.d_ff = 128;
  p.seq_len = 32;
  return experts_of_shares(p, 64);
}

}  // namespace pipescope::testing
