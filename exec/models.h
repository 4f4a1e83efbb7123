#pragma once
// Whole models for the executor: the layer lists of the transformer and mlp
// families (same names, order and parameter counts as make_transformer and
// make_mlp), such a list cut into stages, and single-device reference training
// through it.

#include <cstdint>
#include <functional>
#include <vector>

#include "costmodels/model.h"
#include "costmodels/model_families.h"
#include "exec/compute/layer.h"
#include "exec/compute/optimizer.h"
#include "exec/runtime.h"
#include "sim/engine/partition.h"

namespace pipescope::exec {

// Initialisation is deterministic: layer i (0 = embed) draws its parameters from
// its own std::mt19937_64 seeded from (seed, i), so a layer gets the same values
// however the list is later cut into stages.
//
// Throws std::invalid_argument for what the executor cannot run: tied embeddings
// (the head would have to share the embedding's table across stages; not
// supported yet), heads not dividing d_model, sequences past 2^24 token ids.
LayerList build_transformer(const TransformerParams& p, std::uint64_t seed);
LayerList build_mlp(const MlpParams& p, std::uint64_t seed);

// build_transformer / build_mlp from the family parameters spec.transformer /
// spec.mlp. Throws std::invalid_argument when they are missing, when the spec's
// layers are not the ones they make (edited after make_*), and, with the reason,
// for families the executor cannot run:
// "layers" (an explicit list carries costs, not the layers' math) and "amoebanet"
// (no convolutional cells in the executor).
//
// A spec of one tensor rank's share (ModelSpec::tensor_parallel T > 1) gives
// rank 0's shards with all-reduces that return at once: one rank's compute,
// which the profiler times (the simulator adds the all-reduces); a run builds
// every rank's with build_tensor_ranks (exec/tensor_shard.h).
LayerList build_layers(const ModelSpec& spec, std::uint64_t seed);
// Throws std::invalid_argument naming the model where the executor cannot run
// it: latent attention, a mixture of experts under tensor or context
// parallelism, heads of a width other than d_model / heads, attention over a
// window shorter than the sequence. build_layers checks it; so must any other
// way of building a model's layers (tensor_shard.h, expert_shard.h).
void check_runnable(const ModelSpec& spec);

// Forward through every layer on one device, the last being the loss, with
// loss_scale = 1 / (batch * seq): returns the mean token (sample) loss. `input` is
// (batch*seq, 1) token ids as floats or (batch, d) features; targets has batch*seq
// entries.
double model_loss(const LayerList& layers, const Matrix& input,
                  const std::vector<std::int32_t>& targets, int batch, int seq);

// model_loss, then backward through every layer, adding the mean loss's gradient
// to every Param::grad (call it on several micro-batches with loss_scale chosen by
// the caller to accumulate; see the overload). Returns the loss.
double forward_backward(LayerList& layers, const Matrix& input,
                        const std::vector<std::int32_t>& targets, int batch, int seq);
// As above with an explicit loss_scale (the mean over a mini-batch of T tokens
// split into parts takes 1 / T for every part). Returns sum(token losses) *
// loss_scale.
double forward_backward(LayerList& layers, const Matrix& input,
                        const std::vector<std::int32_t>& targets, int batch, int seq,
                        double loss_scale);

// Sets every parameter's gradient to 0.
void zero_grads(LayerList& layers);

// Every parameter of the layers, layer by layer.
std::vector<Param*> params_of(LayerList& layers);

// The model cut into stages: stage s takes layers ranges[s] of `all`, moved out
// of it (ranges as the partitioners give them, e.g. partition_uniform).
std::vector<LayerList> cut_into_stages(LayerList all, const std::vector<StageRange>& ranges);

// Single-device reference training, what a pipeline of the same layers must
// reproduce: each of `steps` steps runs forward_backward over the whole
// mini-batch mini_batch(step) (its mean loss), then one optimizer step over every
// parameter, after which after_step(step), when given, sees the updated layers.
// Returns each step's loss.
std::vector<double> train_reference(LayerList& layers, const OptimizerConfig& optimizer, int steps,
                                    const std::function<MicroBatch(int step)>& mini_batch,
                                    const std::function<void(int step)>& after_step = {});

}  // namespace pipescope::exec
