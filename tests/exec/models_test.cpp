// The executor's models built from specs: parameter counts against the
// cost-model families, the families and features it refuses by name,
// deterministic initialisation, a model cut into stages.

#include <cmath>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "../tiny_models.h"
#include "costmodels/check.h"
#include "costmodels/model_families.h"
#include "exec/models.h"

namespace pipescope::exec {
namespace {

void expect_same_layers(LayerList& layers, const ModelSpec& spec) {
  ASSERT_EQ(layers.size(), spec.layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    EXPECT_EQ(layers[i]->name(), spec.layers[i].name);
    EXPECT_EQ(layers[i]->param_count(), spec.layers[i].params) << spec.layers[i].name;
  }
}

TEST(ModelParams, TransformerMatchesTheFamily) {
  for (const TransformerParams& p : {
           testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false),   // d_ff = 4h, sinusoidal
           testing::transformer_params(3, 16, 24, 4, 2, 5, 13, true),  // d_ff != 4h, GQA, learned
           testing::transformer_params(1, 12, 20, 6, 1, 4, 7, false),  // multi-query attention
           testing::transformer_params(2, 8, 12, 2, 2, 3, 11, true),   // kv_heads == heads given
           testing::transformer_params(0, 8, 0, 2, 0, 3, 11, true),    // no blocks
       }) {
    LayerList layers = build_transformer(p, 1);
    expect_same_layers(layers, make_transformer(p));
    // build_layers builds from the spec's family parameters, whatever its dtype.
    for (const DType dtype : {DType::kFp32, DType::kBf16}) {
      TransformerParams q = p;
      q.dtype = dtype;
      LayerList again = build_layers(make_transformer(q), 1);
      expect_same_layers(again, make_transformer(p));
      for (std::size_t i = 0; i < layers.size(); ++i) {
        for (std::size_t k = 0; k < layers[i]->params().size(); ++k) {
          EXPECT_EQ(layers[i]->params()[k]->value, again[i]->params()[k]->value);
        }
      }
    }
  }
}

TEST(ModelParams, TiedEmbeddingsAreRejected) {
  TransformerParams p = testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false);
  p.tied_embeddings = true;
  try {
    build_transformer(p, 1);
    FAIL() << "tied embeddings were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("tied embeddings are not supported"), std::string::npos);
  }
  EXPECT_THROW(build_layers(make_transformer(p), 1), std::invalid_argument);
}

// A mixture of experts builds as the simulator counts it, whole or as one
// of E = 2 expert ranks, of C = 2 shares of each sequence or both (the
// profiler's); under tensor parallelism, and latent attention anywhere, it is
// refused by name.
TEST(ModelParams, MixturesOfExpertsBuildAsCounted) {
  TransformerParams p = testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false);
  p.moe = {4, 2, 16, 0, 0};
  // Over expert ranks, shares of each sequence (C = 2) or both.
  p.seq_len = 4;
  for (const auto& [E, C] : {std::pair{1, 1}, {2, 1}, {1, 2}, {2, 2}}) {
    TensorSplit split;
    split.experts = E;
    split.context = C;
    const ModelSpec spec = make_transformer(p, "moe", split);
    LayerList layers = build_layers(spec, 1);
    ASSERT_EQ(layers.size(), spec.layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) {
      EXPECT_EQ(layers[i]->param_count(), spec.layers[i].params)
          << "E=" << E << " C=" << C << " layer " << i;
    }
  }
  TensorSplit tensor;
  tensor.ways = 2;
  try {
    build_layers(make_transformer(p, "moe", tensor), 1);
    FAIL() << "a mixture of experts was accepted at T=2";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "the executor cannot run model 'moe': it runs mixtures of experts without "
                 "tensor parallelism (T=1)");
  }
  p.mla = {0, 4, 4, 2, 4};
  try {
    build_layers(make_transformer(p, "mla"), 1);
    FAIL() << "latent attention was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "the executor cannot run model 'mla': its latent attention is not implemented "
                 "(it runs multi-head and grouped-query attention)");
  }
}

TEST(ModelParams, HeadsOfTheirOwnWidthAreRefusedByName) {
  TransformerParams p = testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false);
  p.head_dim = 8;  // 2 heads of 8, twice d_model / heads
  try {
    build_layers(make_transformer(p, "wide"), 1);
    FAIL() << "heads of another width were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "the executor cannot run model 'wide': its attention heads are 8 wide, not "
                 "d_model / heads (it runs heads of that width)");
  }
}

TEST(ModelParams, SlidingWindowsAreRefusedByName) {
  TransformerParams p = testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false);
  p.sliding_window = 2;  // of 3 positions
  try {
    build_layers(make_transformer(p, "local"), 1);
    FAIL() << "a sliding window was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "the executor cannot run model 'local': its attention slides over 2 positions "
                 "(it attends over the whole sequence)");
  }
  p.sliding_window = 3;  // the whole sequence: no window
  EXPECT_NO_THROW(build_layers(make_transformer(p, "local"), 1));
}

TEST(ModelParams, MlpMatchesTheFamily) {
  for (const auto& [layers, d, f, c] : {std::tuple{2, 8, 0, 0}, std::tuple{3, 6, 10, 4}}) {
    MlpParams p;
    p.layers = layers;
    p.d_model = d;
    p.d_hidden = f;
    p.classes = c;
    LayerList built = build_mlp(p, 1);
    expect_same_layers(built, make_mlp(p));
    LayerList again = build_layers(make_mlp(p), 1);
    expect_same_layers(again, make_mlp(p));
  }
}

TEST(ModelParams, OtherFamiliesAndEditedSpecsAreRejected) {
  ModelSpec layers_spec;
  layers_spec.name = "list";
  layers_spec.family = "layers";
  EXPECT_THROW(build_layers(layers_spec, 1), std::invalid_argument);
  AmoebaNetParams a;
  a.cells = 3;
  a.filters = 8;
  a.image_size = 32;
  a.classes = 10;
  try {
    build_layers(make_amoebanet(a), 1);
    FAIL() << "amoebanet was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("amoebanet"), std::string::npos);
  }
  ModelSpec edited = make_transformer(testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false));
  edited.layers[1].params += 1;
  EXPECT_THROW(build_layers(edited, 1), std::invalid_argument);
  edited = make_transformer(testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false));
  edited.transformer = nullptr;  // as a spec read from an explicit layer list
  EXPECT_THROW(build_layers(edited, 1), std::invalid_argument);
}

TEST(ModelInit, DeterministicPerLayer) {
  LayerList a = build_transformer(testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false), 7);
  LayerList b = build_transformer(testing::transformer_params(3, 8, 0, 2, 0, 3, 11, false), 7);
  LayerList c = build_transformer(testing::transformer_params(2, 8, 0, 2, 0, 3, 11, false), 8);
  // embed, block0 and block1 are layers 0..2 of both a and b.
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t k = 0; k < a[i]->params().size(); ++k) {
      EXPECT_EQ(a[i]->params()[k]->value, b[i]->params()[k]->value) << a[i]->params()[k]->name;
    }
    const std::size_t weight = i == 0 ? 0 : 2;  // token table, qkv.weight
    EXPECT_NE(a[i]->params()[weight]->value, c[i]->params()[weight]->value) << i;
  }
  const Param& gain = *a[1]->params()[0];
  EXPECT_EQ(gain.name, "block0.ln1.gain");
  EXPECT_EQ(gain.value, Matrix::Ones(1, 8));
  EXPECT_EQ(a[1]->params()[3]->value, Matrix::Zero(1, 24));  // qkv.bias
  const Matrix& table = a[0]->params()[0]->value;
  EXPECT_NEAR(std::sqrt(table.squaredNorm() / static_cast<double>(table.size())), 0.02, 0.005);
}

TEST(ModelStages, CutMovesEachLayerToItsStage) {
  LayerList all = build_transformer(testing::transformer_params(3, 8, 0, 2, 0, 3, 11, false), 7);
  std::vector<const Layer*> layers;
  for (const auto& layer : all) layers.push_back(layer.get());
  const std::vector<LayerList> stages = cut_into_stages(std::move(all), {{0, 1}, {2, 2}, {3, 4}});
  ASSERT_EQ(stages.size(), 3u);
  ASSERT_EQ(stages[0].size(), 2u);
  ASSERT_EQ(stages[1].size(), 1u);
  ASSERT_EQ(stages[2].size(), 2u);
  EXPECT_EQ(stages[0][0].get(), layers[0]);
  EXPECT_EQ(stages[0][1].get(), layers[1]);
  EXPECT_EQ(stages[1][0].get(), layers[2]);
  EXPECT_EQ(stages[2][0].get(), layers[3]);
  EXPECT_EQ(stages[2][1]->name(), "head");
  EXPECT_THROW(cut_into_stages(
                   build_transformer(testing::transformer_params(1, 8, 0, 2, 0, 3, 11, false), 7),
                   {{0, 1}, {2, 3}}),
               InternalError);
}

}  // namespace
}  // namespace pipescope::exec
