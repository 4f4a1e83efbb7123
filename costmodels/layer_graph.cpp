#include "costmodels/layer_graph.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>

#include "costmodels/check.h"

namespace pipescope {

namespace {

// The model's input as a producer: it comes before every layer.
constexpr int kInput = -1;

// Edges run from a producer to the layer that consumes its output. Bidirectional,
// so that Kahn's algorithm can read in-degrees.
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

std::string location(int layer, std::optional<int> input) {
  std::string out = "layers[" + std::to_string(layer) + "]";
  if (input) out += ".inputs[" + std::to_string(*input) + "]";
  return out;
}

bool is_graph(const std::vector<LayerSpec>& layers) {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerSpec& l) { return !l.inputs.empty(); });
}

// producers[i]: what layer i consumes, as layer indices or kInput, in the order its
// `inputs` lists them; an empty `inputs` means the previous layer (or the input).
std::vector<std::vector<int>> producers_of(const std::vector<LayerSpec>& layers) {
  const int count = static_cast<int>(layers.size());
  std::unordered_map<std::string, int> index;
  for (int i = 0; i < count; ++i) {
    const std::string& name = layers[static_cast<std::size_t>(i)].name;
    if (name == kModelInputName) {
      throw LayerGraphError(i, std::nullopt,
                            "the name 'input' is reserved for the model's input in a layer graph");
    }
    const auto [it, inserted] = index.emplace(name, i);
    if (!inserted) {
      throw LayerGraphError(i, std::nullopt,
                            "duplicate layer name '" + name + "' (also used by " +
                                location(it->second, std::nullopt) + ")");
    }
  }
  std::vector<std::vector<int>> producers(layers.size());
  for (int i = 0; i < count; ++i) {
    const LayerSpec& layer = layers[static_cast<std::size_t>(i)];
    std::vector<int>& mine = producers[static_cast<std::size_t>(i)];
    if (layer.inputs.empty()) mine.push_back(i == 0 ? kInput : i - 1);
    for (std::size_t j = 0; j < layer.inputs.size(); ++j) {
      const std::string& name = layer.inputs[j];
      const int at = static_cast<int>(j);
      int p = kInput;
      if (name != kModelInputName) {
        const auto it = index.find(name);
        if (it == index.end()) throw LayerGraphError(i, at, "unknown layer '" + name + "'");
        p = it->second;
      }
      if (p == i) throw LayerGraphError(i, at, "layer '" + name + "' consumes its own output");
      if (std::find(mine.begin(), mine.end(), p) != mine.end()) {
        throw LayerGraphError(i, at, "'" + name + "' is listed twice");
      }
      mine.push_back(p);
    }
  }
  return producers;
}

Graph build_graph(const std::vector<std::vector<int>>& producers) {
  Graph g(producers.size());
  for (std::size_t i = 0; i < producers.size(); ++i) {
    for (const int p : producers[i]) {
      if (p != kInput) boost::add_edge(static_cast<std::size_t>(p), i, g);
    }
  }
  return g;
}

// Throws for the first layer (in the given order) that lies on a cycle, naming the
// cycle: a shortest path back to it within its strongly connected component.
void reject_cycles(const Graph& g, const std::vector<LayerSpec>& layers,
                   const std::vector<std::vector<int>>& producers) {
  const std::size_t n = boost::num_vertices(g);
  std::vector<std::size_t> component(n);
  const std::size_t components = boost::strong_components(
      g, boost::make_iterator_property_map(component.begin(), boost::get(boost::vertex_index, g)));
  if (components == n) return;  // every component a single layer; self-loops are rejected earlier
  std::vector<std::size_t> size(components, 0);
  for (const std::size_t c : component) ++size[c];
  std::size_t start = 0;
  while (size[component[start]] < 2) ++start;

  // Breadth-first search from `start` along edges inside its component, back to it.
  std::vector<std::optional<std::size_t>> parent(n);
  std::queue<std::size_t> frontier;
  frontier.push(start);
  std::optional<std::size_t> closing;  // the producer whose edge returns to start
  while (!frontier.empty() && !closing) {
    const std::size_t u = frontier.front();
    frontier.pop();
    for (const auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
      const std::size_t v = boost::target(e, g);
      if (component[v] != component[start]) continue;
      if (v == start) {
        closing = u;
        break;
      }
      if (!parent[v]) {
        parent[v] = u;
        frontier.push(v);
      }
    }
  }
  PS_CHECK(closing.has_value(), "a strongly connected component without a cycle");
  std::vector<std::size_t> path{start};
  for (std::size_t v = *closing; v != start; v = *parent[v]) path.insert(path.begin() + 1, v);
  std::string cycle;
  for (const std::size_t v : path) cycle += layers[v].name + " -> ";
  cycle += layers[start].name;

  const std::vector<int>& mine = producers[start];
  const auto it = std::find(mine.begin(), mine.end(), static_cast<int>(*closing));
  const std::optional<int> input = layers[start].inputs.empty()
                                       ? std::nullopt
                                       : std::optional(static_cast<int>(it - mine.begin()));
  throw LayerGraphError(static_cast<int>(start), input, "layers form a cycle: " + cycle);
}

// The topological order that keeps the given one where it can: Kahn's algorithm
// always taking the ready layer that came first.
std::vector<std::size_t> stable_topological_order(const Graph& g) {
  const std::size_t n = boost::num_vertices(g);
  std::vector<std::size_t> waiting(n);
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t v = 0; v < n; ++v) {
    waiting[v] = boost::in_degree(v, g);
    if (waiting[v] == 0) ready.push(v);
  }
  std::vector<std::size_t> order;
  order.reserve(n);
  while (!ready.empty()) {
    const std::size_t u = ready.top();
    ready.pop();
    order.push_back(u);
    for (const auto e : boost::make_iterator_range(boost::out_edges(u, g))) {
      const std::size_t v = boost::target(e, g);
      if (--waiting[v] == 0) ready.push(v);
    }
  }
  PS_CHECK(order.size() == n, "a cycle survived the cycle check");
  return order;
}

// last_use[p + 1]: the position of the last consumer of producer p (kInput -> slot
// 0); the last layer's output counts as consumed at position L (the loss). -1 for
// an output nobody consumes.
std::vector<int> last_uses(const std::vector<std::vector<int>>& producers) {
  const int count = static_cast<int>(producers.size());
  std::vector<int> last(producers.size() + 1, -1);
  for (int i = 0; i < count; ++i) {
    for (const int p : producers[static_cast<std::size_t>(i)]) {
      int& slot = last[static_cast<std::size_t>(p + 1)];
      slot = std::max(slot, i);
    }
  }
  if (count > 0) last[static_cast<std::size_t>(count)] = count;
  return last;
}

void check_topological(const std::vector<std::vector<int>>& producers) {
  for (std::size_t i = 0; i < producers.size(); ++i) {
    for (const int p : producers[i]) {
      PS_CHECK(p < static_cast<int>(i),
               "the layers are not in topological order; call "
               "resolve_layer_graph first");
    }
  }
}

}  // namespace

LayerGraphError::LayerGraphError(int layer, std::optional<int> input, const std::string& reason)
    : std::invalid_argument(location(layer, input) + ": " + reason),
      layer_(layer),
      input_(input),
      reason_(reason) {}

void resolve_layer_graph(ModelSpec& model) {
  model.cut_bytes.clear();
  if (!is_graph(model.layers)) return;
  std::vector<std::vector<int>> producers = producers_of(model.layers);
  const Graph g = build_graph(producers);
  reject_cycles(g, model.layers, producers);

  const std::vector<std::size_t> order = stable_topological_order(g);
  if (!std::is_sorted(order.begin(), order.end())) {
    std::vector<int> position(order.size());
    for (std::size_t k = 0; k < order.size(); ++k) position[order[k]] = static_cast<int>(k);
    std::vector<LayerSpec> layers;
    std::vector<std::vector<int>> reordered;
    for (const std::size_t old : order) {
      LayerSpec layer = std::move(model.layers[old]);
      std::vector<int> mine;
      for (const int p : producers[old]) mine.push_back(p == kInput ? kInput : position[p]);
      layer.inputs.clear();
      layers.push_back(std::move(layer));
      reordered.push_back(std::move(mine));
    }
    for (std::size_t i = 0; i < layers.size(); ++i) {
      for (const int p : reordered[i]) {
        layers[i].inputs.push_back(p == kInput ? kModelInputName
                                               : layers[static_cast<std::size_t>(p)].name);
      }
    }
    model.layers = std::move(layers);
    producers = std::move(reordered);
  }

  // A tensor made at position a (the input: -1) and last consumed at position b
  // crosses the cuts a + 1 .. b; summed with a difference array.
  const std::size_t count = model.layers.size();
  const std::vector<int> last = last_uses(producers);
  std::vector<Bytes> delta(count + 2, 0);
  for (std::size_t slot = 0; slot < last.size(); ++slot) {
    if (last[slot] < 0) continue;
    const Bytes bytes = slot == 0 ? model.input_bytes : model.layers[slot - 1].out_bytes;
    delta[slot] += bytes;  // producer at position slot - 1, so from cut slot
    delta[static_cast<std::size_t>(last[slot]) + 1] -= bytes;
  }
  model.cut_bytes.resize(count + 1);
  Bytes live = 0;
  for (std::size_t i = 0; i <= count; ++i) {
    live += delta[i];
    model.cut_bytes[i] = live;
  }
}

std::vector<std::string> tensors_crossing_cut(const ModelSpec& model, int position) {
  PS_CHECK(position >= 0 && static_cast<std::size_t>(position) <= model.layers.size(),
           "cut position " + std::to_string(position) + " out of range");
  if (!is_graph(model.layers)) {
    return {position == 0 ? kModelInputName
                          : model.layers[static_cast<std::size_t>(position) - 1].name};
  }
  const std::vector<std::vector<int>> producers = producers_of(model.layers);
  check_topological(producers);
  const std::vector<int> last = last_uses(producers);
  std::vector<std::string> names;
  // Slot s is the producer at position s - 1; it crosses cut `position` when it
  // comes before it and is consumed at or after it.
  for (std::size_t slot = 0; slot < last.size(); ++slot) {
    if (static_cast<int>(slot) > position) break;
    if (last[slot] >= position) {
      names.push_back(slot == 0 ? kModelInputName : model.layers[slot - 1].name);
    }
  }
  return names;
}

}  // namespace pipescope
