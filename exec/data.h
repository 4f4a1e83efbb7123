#pragma once
// Deterministic synthetic training data, generated in code so that runs need no
// downloads and the loss visibly falls:
//   language models: sequences in which each token is a fixed function of the one
//     before it, x[t] = (3 x[t-1] + 1) mod V, from a random first token; the
//     target of position t is x[t+1]. A model that learns the rule drives the
//     loss towards 0 (from log V for a uniform guess).
//   mlp: feature vectors labelled by a fixed random linear teacher,
//     argmax(W x) over the classes.
// The same (seed, step) always gives the same mini-batch, so runs with different
// K and M see identical data.

#include <cstdint>
#include <vector>

#include "costmodels/model.h"
#include "exec/runtime.h"

namespace pipescope::exec {

struct TaskShape {
  bool language_model = true;
  int seq_len = 1;   // language models
  int vocab = 2;     // language models
  int features = 1;  // mlp: d_model
  int classes = 2;   // mlp
};

// The task a transformer (language model) or mlp (classifier) spec trains on.
// Throws std::invalid_argument for specs without family parameters.
TaskShape task_shape(const ModelSpec& spec);

// The mini-batch of `step`, cut into `micro_batches` equal micro-batches of
// global_batch / micro_batches samples each, in order.
std::vector<MicroBatch> synthetic_batch(const TaskShape& shape, int global_batch, int micro_batches,
                                        std::uint64_t step, std::uint64_t seed);

// The same mini-batch as one micro-batch (single-device reference training).
MicroBatch whole_batch(const TaskShape& shape, int global_batch, std::uint64_t step,
                       std::uint64_t seed);

// Expert rank `rank`'s samples of mb, of `ranks` (expert parallelism): its
// batch / ranks consecutive sequences (mb itself for one rank). Throws
// std::invalid_argument unless ranks divides mb.batch.
MicroBatch samples_of(const MicroBatch& mb, int rank, int ranks);

// Share `share` of `shares` of each of mb's sequences (context parallelism):
// the rows at the positions Context::position gives, chunks share and
// 2 shares - 1 - share of 2 shares, sequence by sequence; its seq is
// mb.seq / shares (mb itself for one share). Throws std::invalid_argument
// unless 2 shares divides mb.seq.
MicroBatch share_of(const MicroBatch& mb, int share, int shares);

// The context of `share` (above) within a mini-batch of `tokens` tokens: its
// loss scaled by the whole mini-batch's tokens.
Context share_context(const MicroBatch& share, int index, int shares, std::int64_t tokens);

// What a rank built alone runs under context parallelism (the profiler's,
// build_tensor_rank_alone): the last of `shares` shares of `whole`, and its
// context within a mini-batch of `whole` alone. One share: whole, and all of it.
MicroBatch last_share(const MicroBatch& whole, int shares);
Context last_share_context(const MicroBatch& share, int shares);

}  // namespace pipescope::exec
