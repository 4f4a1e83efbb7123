#pragma once
// A model's family parameters as the scenario's "model" object, so that tools can
// write a model down and rebuild it: a Hugging Face config standing in for a
// scenario's model, and plan files, which carry the model the executor runs.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "costmodels/model_families.h"

namespace pipescope {

nlohmann::json transformer_model_json(const TransformerParams& p, const std::string& name);
nlohmann::json mlp_model_json(const MlpParams& p, const std::string& name);
// The object for a model built from a family's parameters; null for explicit
// layer lists and families recorded without parameters.
nlohmann::json model_spec_json(const ModelSpec& model);

}  // namespace pipescope
