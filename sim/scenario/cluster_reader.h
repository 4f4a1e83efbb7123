#pragma once
// Reading a scenario's "cluster" object: a device preset or a device and its
// interconnect, the cost model, and how the stages exchange tensors.

#include <optional>

#include "costmodels/cluster.h"
#include "costmodels/framework.h"
#include "sim/base/json_reader.h"

namespace pipescope {

// How the cluster's stages exchange tensors and where its ranks run, as far
// as the scenario says; the framework's profile gives the rest
// (with_exchanges).
struct Exchanges {
  std::optional<P2pMode> p2p;
  std::optional<bool> p2p_split;
  std::optional<RankOrder> rank_order;
};

// Sets the cluster's exchanges and rank order: what the scenario gave, else
// the framework's profile.
void with_exchanges(Cluster& cluster, const Exchanges& given, const Framework& fw);

// The cluster object `c`, its topology built; what it says of the exchanges
// goes to `exchanges`, for with_exchanges once the framework is known. Fails as
// a ScenarioError naming the field.
Cluster read_cluster(json_io::ObjectReader c, Exchanges& exchanges);

}  // namespace pipescope
