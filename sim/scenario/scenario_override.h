#pragma once
// `--set PATH=VALUE`: one change to a scenario document before it is read
// (docs/commands.md, "Scenario options"). PATH names a field by its JSON path,
// "training.micro_batches" or "model.layers[2].fwd_flops"; VALUE is JSON, or a
// string when it is not. A path that does not exist, and a value that breaks
// the rules of a file's JSON, are ScenarioErrors naming the assignment. A
// framework named by its profile ("training": {"framework": "nemo"}) takes a
// field as {"profile": "nemo", FIELD: VALUE} would.

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace pipescope {

// Applies one "PATH=VALUE" override to a document in place; `file` labels errors.
void apply_override(nlohmann::json& doc, const std::string& assignment, const std::string& file);

}  // namespace pipescope
