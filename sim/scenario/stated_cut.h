#pragma once
// The cut a run uses, as its user states it instead of leaving it to the
// partitioner: layers per model stage (training.balance, `simulate --balance`),
// or Megatron-LM's flags that cut a GPT (training.megatron), read as
// megatron-core 0.20.0 reads them (docs/file-formats.md, "The cut a run uses").
//
// Megatron-LM's code read for this: megatron-core's PipelineParallelLayerLayout
// (parse_str_to_list and validate_layer_layout), TransformerBlock's
// get_num_layers_to_build, TransformerConfig's checks of the uneven and
// accounted splits, and the training arguments (the flags).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipescope {

struct ModelSpec;
struct StageRange;
namespace json_io {
class ObjectReader;
}

// Megatron-LM's split of a GPT's transformer layers without a layout: each
// pipeline rank an even share, or the first and last ranks the counts given
// and the others an even share of the rest; each rank's share is split evenly
// over its virtual stages. The embedding sits on the first model stage and the
// output layer with its loss on the last; accounted for, either takes one
// transformer layer's place there.
struct MegatronSplit {
  std::optional<int> first_rank_layers;  // --decoder-first-pipeline-num-layers
  std::optional<int> last_rank_layers;   // --decoder-last-pipeline-num-layers
  bool account_for_embedding = false;    // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;         // --account-for-loss-in-pipeline-split
};

struct StatedCut {
  // The scenario field that states it, which its errors name.
  std::string field;
  // Layers per model stage, in model order (stage s on device s mod K; under
  // zb-v and dualpipe-v on the V's device). Empty until check_stated_cut maps
  // a layout, and for a `split`, which K and the chunks decide.
  std::vector<int> balance;
  // A --pipeline-model-parallel-layout's stages (expand_megatron_layout);
  // empty for the other forms.
  std::vector<std::string> layout;
  std::optional<MegatronSplit> split;
};

// The stages of a --pipeline-model-parallel-layout, each as its letters with
// the repeats unrolled: commas dropped, then every "(X)*n" (X without
// parentheses) replaced by n copies of X, then every "c*n" by n copies of the
// character c; the result split at "|" into stages of E (embedding), t
// (transformer layer), L (loss) and m (MTP layer). "Et*2|(tt|)*2,ttL" gives
// {"Ett", "tt", "tt", "ttL"}. Throws std::invalid_argument saying what does
// not parse.
std::vector<std::string> expand_megatron_layout(std::string_view layout);

// The layers of each model stage that expanded layout `stages` gives a
// transformer of `blocks` blocks, whose layers are its embedding, its blocks
// and its head (final norm, output layer and loss): E first, L last, each
// once, `blocks` t's, no m (PipeScope models no MTP) and no empty stage.
// Throws std::invalid_argument saying what does not map.
std::vector<int> megatron_layout_balance(const std::vector<std::string>& stages, int blocks);

// The layers of each of `ranks` x `chunks` model stages that `split` gives a
// transformer of `blocks` blocks, as Megatron-LM builds them: virtual stage c
// of rank r is model stage c x ranks + r. Throws std::invalid_argument where
// Megatron-LM refuses the split or a stage would hold no layer.
std::vector<int> megatron_split_balance(const MegatronSplit& split, int blocks, int ranks,
                                        int chunks);

// training.balance or training.megatron, when either is given, read from the
// training object (before its finish()); what needs the model waits for
// check_stated_cut.
std::optional<StatedCut> read_stated_cut(json_io::ObjectReader& training);

// Checks `cut` against the model of scenario `file` and maps a layout to its
// balance: a balance adds up to the model's layers, Megatron-LM's forms need a
// transformer. Fails as a ScenarioError naming the field.
void check_stated_cut(StatedCut& cut, const ModelSpec& model, const std::string& file);

// The stage ranges of `cut` at K devices x `chunks` model stages each. Throws
// a ConfigError naming cut.field when the cut has another stage count or
// Megatron-LM's split does not divide there.
std::vector<StageRange> stated_ranges(const StatedCut& cut, const ModelSpec& model, int K,
                                      int chunks);

// "3,2,2": the entries of a balance as --balance takes them.
std::string balance_text(const std::vector<int>& balance);

}  // namespace pipescope
