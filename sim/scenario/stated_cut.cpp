#include "sim/scenario/stated_cut.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "costmodels/model.h"
#include "sim/base/json_reader.h"
#include "sim/scenario/config_error.h"
#include "sim/scenario/stage_range.h"

namespace pipescope {

using json_io::ObjectReader;
using json_io::Where;

namespace {

// A layout unrolls to at most this many characters: thousands of layers,
// far beyond any model (scenarios hold at most 16,384 layers), and no more
// memory than a document of that size.
constexpr std::size_t kMaxExpandedLayout = std::size_t{1} << 20;

constexpr const char* kLayoutLetters =
    "E (embedding), t (transformer layer), L (loss), m (MTP layer), | between stages, (X)*n and "
    "x*n repeats, commas";

std::string str(std::int64_t v) {
  return std::to_string(v);
}

// "n copies" appended, refused beyond kMaxExpandedLayout.
void append_copies(std::string& out, std::string_view what, std::string_view digits) {
  // More digits than the limit has cannot be a count the limit allows.
  const std::uint64_t n =
      digits.size() > 7 ? kMaxExpandedLayout + 1 : std::stoull(std::string(digits));
  const std::size_t room = out.size() < kMaxExpandedLayout ? kMaxExpandedLayout - out.size() : 0;
  if (!what.empty() && n > room / what.size()) {
    throw std::invalid_argument("the layout unrolls to more than " + str(kMaxExpandedLayout) +
                                " characters");
  }
  for (std::uint64_t i = 0; i < n; ++i) out += what;
}

// The digits of a count at `from`, or empty.
std::string_view digits_at(std::string_view s, std::size_t from) {
  std::size_t end = from;
  while (end < s.size() && std::isdigit(static_cast<unsigned char>(s[end]))) ++end;
  return s.substr(from, end - from);
}

// Every "(X)*n", X holding no ")", unrolled, left to right, as Python's
// re.sub(r'\(([^)]+)\)\*(\d+)') does; the copies are not scanned again.
std::string unroll_groups(std::string_view s) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t close = s[i] == '(' ? s.find(')', i + 1) : std::string_view::npos;
    const bool group = close != std::string_view::npos && close > i + 1 && close + 1 < s.size() &&
                       s[close + 1] == '*' && !digits_at(s, close + 2).empty();
    if (!group) {
      out += s[i++];
      continue;
    }
    const std::string_view digits = digits_at(s, close + 2);
    append_copies(out, s.substr(i + 1, close - i - 1), digits);
    i = close + 2 + digits.size();
  }
  return out;
}

// Every "c*n" unrolled, as re.sub(r'(.)\*(\d+)') does.
std::string unroll_letters(std::string_view s) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    const bool repeat = i + 2 < s.size() && s[i + 1] == '*' && !digits_at(s, i + 2).empty();
    if (!repeat) {
      out += s[i++];
      continue;
    }
    const std::string_view digits = digits_at(s, i + 2);
    append_copies(out, s.substr(i, 1), digits);
    i += 2 + digits.size();
  }
  return out;
}

bool layout_letter(char c) {
  return c == 'E' || c == 't' || c == 'L' || c == 'm';
}

std::string printable(char c) {
  if (std::isprint(static_cast<unsigned char>(c))) return std::string(1, c);
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
  return buf;
}

int count_of(const std::vector<std::string>& stages, char letter) {
  int n = 0;
  for (const std::string& s : stages) {
    for (const char c : s) n += c == letter;
  }
  return n;
}

// "K=4" or "K=4 x 2 chunks = 8".
std::string model_stages_text(int K, int chunks) {
  return chunks == 1
             ? "K=" + str(K)
             : "K=" + str(K) + " x " + str(chunks) + " chunks = " + str(std::int64_t{K} * chunks);
}

// What is wrong with a balance's sum for `model`, or "".
std::string sum_problem(const std::vector<int>& balance, const ModelSpec& model) {
  const auto layers = static_cast<std::int64_t>(model.layers.size());
  const std::int64_t sum = std::accumulate(balance.begin(), balance.end(), std::int64_t{0});
  if (sum == layers) return "";
  return "the entries add up to " + str(sum) + " layers; expected the model's " + str(layers) +
         (model.transformer ? " (the embedding, " + str(layers - 2) + " blocks and the head)" : "");
}

int transformer_blocks(const ModelSpec& model) {
  return static_cast<int>(model.layers.size()) - 2;
}

// Decoder layers per pipeline rank under Megatron-LM's uneven split.
std::vector<int> uneven_rank_layers(const MegatronSplit& s, int blocks, int ranks) {
  const int given = (s.first_rank_layers ? 1 : 0) + (s.last_rank_layers ? 1 : 0);
  if (ranks < given) {
    throw std::invalid_argument(
        "decoder_first_pipeline_num_layers and decoder_last_pipeline_num_layers need two "
        "pipeline ranks, K is 1");
  }
  const int middle = ranks - given;
  const std::int64_t rest =
      std::int64_t{blocks} - s.first_rank_layers.value_or(0) - s.last_rank_layers.value_or(0);
  if (rest < 0) {
    throw std::invalid_argument("the first and last ranks' layers are more than the model's " +
                                str(blocks) + " transformer layers");
  }
  if ((rest > 0) != (middle > 0) || (middle > 0 && rest % middle != 0)) {
    throw std::invalid_argument(
        "Megatron-LM splits the " + str(rest) +
        " transformer layers left after the first and last ranks evenly over the " + str(middle) +
        " other rank(s) of K=" + str(ranks) + ", and they do not split so");
  }
  const int share = middle > 0 ? static_cast<int>(rest / middle) : 0;
  std::vector<int> out(static_cast<std::size_t>(ranks), share);
  if (s.first_rank_layers) out.front() = *s.first_rank_layers;
  if (s.last_rank_layers) out.back() = *s.last_rank_layers;
  return out;
}

// Decoder layers per pipeline rank under Megatron-LM's even split, the
// accounted embedding and loss each counted as a layer.
std::vector<int> even_rank_layers(const MegatronSplit& s, int blocks, int ranks) {
  const int total = blocks + (s.account_for_embedding ? 1 : 0) + (s.account_for_loss ? 1 : 0);
  if (total % ranks != 0) {
    throw std::invalid_argument(
        "Megatron-LM splits the " + str(blocks) + " transformer layers" +
        (total > blocks ? " and the " + str(total - blocks) + " accounted for" : "") +
        " evenly over the pipeline ranks, and K=" + str(ranks) + " does not divide " + str(total) +
        "; give decoder_first_pipeline_num_layers and decoder_last_pipeline_num_layers, or a "
        "pipeline_model_parallel_layout");
  }
  return std::vector<int>(static_cast<std::size_t>(ranks), total / ranks);
}

}  // namespace

std::vector<std::string> expand_megatron_layout(std::string_view layout) {
  std::string text;
  for (const char c : layout) {
    if (c != ',') text += c;
  }
  const std::string flat = unroll_letters(unroll_groups(text));
  std::vector<std::string> stages(1);
  for (const char c : flat) {
    if (c == '|') {
      stages.emplace_back();
    } else if (layout_letter(c)) {
      stages.back() += c;
    } else {
      const bool paren = c == '(' || c == ')';
      throw std::invalid_argument("unexpected '" + printable(c) + "' in stage " +
                                  str(std::int64_t(stages.size()) - 1) +
                                  (paren ? " (a group is (X)*n, X without parentheses)" : "") +
                                  "; expected " + kLayoutLetters);
    }
  }
  return stages;
}

std::vector<int> megatron_layout_balance(const std::vector<std::string>& stages, int blocks) {
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].find('m') != std::string::npos) {
      throw std::invalid_argument(
          "stage " + str(std::int64_t(s)) +
          " holds 'm', a multi-token-prediction layer, which PipeScope does not model; drop "
          "the m's to simulate the rest");
    }
  }
  const int embeddings = count_of(stages, 'E');
  const int losses = count_of(stages, 'L');
  if (embeddings != 1 || losses != 1) {
    throw std::invalid_argument("expected one E and one L, as Megatron-LM does, got " +
                                str(embeddings) + " E and " + str(losses) + " L");
  }
  if (stages.front().empty() || stages.front().front() != 'E' || stages.back().empty() ||
      stages.back().back() != 'L') {
    throw std::invalid_argument(
        "expected E (the embedding) first and L (the loss) last, as Megatron-LM does");
  }
  if (const int t = count_of(stages, 't'); t != blocks) {
    throw std::invalid_argument("the layout has " + str(t) + " t's, the model " + str(blocks) +
                                " transformer layers (model.layers)");
  }
  std::vector<int> out;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (stages[s].empty()) {
      throw std::invalid_argument("stage " + str(std::int64_t(s)) + " of " +
                                  str(std::int64_t(stages.size())) +
                                  " is empty, and PipeScope's stages hold at least one layer");
    }
    out.push_back(static_cast<int>(stages[s].size()));  // E, t and L are a layer each
  }
  return out;
}

std::vector<int> megatron_split_balance(const MegatronSplit& split, int blocks, int ranks,
                                        int chunks) {
  const bool uneven = split.first_rank_layers || split.last_rank_layers;
  const std::vector<int> rank_layers =
      uneven ? uneven_rank_layers(split, blocks, ranks) : even_rank_layers(split, blocks, ranks);
  std::vector<int> out(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(chunks));
  for (int r = 0; r < ranks; ++r) {
    const int n = rank_layers[static_cast<std::size_t>(r)];
    if (n % chunks != 0) {
      throw std::invalid_argument("rank " + str(r) + "'s " + str(n) +
                                  " layers do not split evenly over its " + str(chunks) +
                                  " virtual stages (chunks), as Megatron-LM requires");
    }
    for (int c = 0; c < chunks; ++c) out[static_cast<std::size_t>(c * ranks + r)] = n / chunks;
  }
  // An accounted embedding or loss takes a transformer layer's place.
  if (split.account_for_embedding) --out.front();
  if (split.account_for_loss) --out.back();
  ++out.front();  // the embedding
  ++out.back();   // the head: final norm, output layer, loss
  for (std::size_t s = 0; s < out.size(); ++s) {
    if (out[s] < 1) {
      throw std::invalid_argument("model stage " + str(std::int64_t(s)) +
                                  " would hold no layer, and PipeScope's stages hold at least one");
    }
  }
  return out;
}

namespace {

StatedCut read_balance(ObjectReader& t) {
  StatedCut cut;
  cut.field = t.where("balance").path;
  const nlohmann::json& list = t.array("balance");
  const std::string range = "whole numbers of at least 1, the layers of each model stage";
  if (list.empty()) t.fail("balance", "expected " + range + ", got []");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& v = list[i];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 ||
        v.get<std::int64_t>() > std::int64_t{1} << 30) {
      t.fail("balance", "entry " + str(std::int64_t(i) + 1) + " of " +
                            str(std::int64_t(list.size())) + " is " + json_io::describe(v) +
                            "; expected " + range);
    }
    cut.balance.push_back(v.get<int>());
  }
  return cut;
}

// Refuses what Megatron-LM's TransformerConfig refuses together.
void check_megatron_flags(const ObjectReader& m, bool layout, const MegatronSplit& split) {
  const bool first = split.first_rank_layers.has_value();
  const bool uneven = first || split.last_rank_layers;
  const bool accounted = split.account_for_embedding || split.account_for_loss;
  if (layout && (uneven || accounted)) {
    m.fail("pipeline_model_parallel_layout",
           "Megatron-LM takes a layout alone, without decoder_first/last_pipeline_num_layers "
           "or account_for_embedding/loss_in_pipeline_split");
  }
  if (uneven && accounted) {
    m.fail(first ? "decoder_first_pipeline_num_layers" : "decoder_last_pipeline_num_layers",
           "Megatron-LM refuses decoder_first/last_pipeline_num_layers together with "
           "account_for_embedding/loss_in_pipeline_split");
  }
}

StatedCut read_megatron(ObjectReader& t) {
  ObjectReader m = t.object("megatron");
  const json_io::IntRange count{1, std::int64_t{1} << 30};
  const std::optional<std::string> layout = m.opt_string("pipeline_model_parallel_layout");
  MegatronSplit split;
  if (const auto first = m.opt_integer("decoder_first_pipeline_num_layers", count)) {
    split.first_rank_layers = static_cast<int>(*first);
  }
  if (const auto last = m.opt_integer("decoder_last_pipeline_num_layers", count)) {
    split.last_rank_layers = static_cast<int>(*last);
  }
  split.account_for_embedding =
      m.opt_bool("account_for_embedding_in_pipeline_split").value_or(false);
  split.account_for_loss = m.opt_bool("account_for_loss_in_pipeline_split").value_or(false);
  m.finish();
  check_megatron_flags(m, layout.has_value(), split);
  StatedCut cut;
  if (!layout) {
    cut.field = m.here().path;
    cut.split = split;
    return cut;
  }
  cut.field = m.where("pipeline_model_parallel_layout").path;
  try {
    cut.layout = expand_megatron_layout(*layout);
  } catch (const std::invalid_argument& e) {
    m.fail("pipeline_model_parallel_layout", e.what());
  }
  return cut;
}

}  // namespace

std::optional<StatedCut> read_stated_cut(ObjectReader& t) {
  const bool balance = t.find("balance") != nullptr;
  const bool megatron = t.find("megatron") != nullptr;
  if (balance && megatron) {
    t.fail("megatron", "training.balance states the cut too; give one of them");
  }
  if (balance) return read_balance(t);
  if (megatron) return read_megatron(t);
  return std::nullopt;
}

void check_stated_cut(StatedCut& cut, const ModelSpec& model, const std::string& file) {
  const Where where{file, cut.field};
  if (cut.layout.empty() && !cut.split) {
    if (const std::string problem = sum_problem(cut.balance, model); !problem.empty()) {
      where.fail(problem);
    }
    return;
  }
  if (!model.transformer) {
    where.fail(
        "Megatron-LM's split is a GPT's (embedding, transformer layers, loss): it needs "
        "model.family transformer, got " +
        model.family + "; give training.balance instead");
  }
  if (cut.layout.empty()) return;  // a split: K and the chunks decide
  try {
    cut.balance = megatron_layout_balance(cut.layout, transformer_blocks(model));
  } catch (const std::invalid_argument& e) {
    where.fail(e.what());
  }
}

std::vector<StageRange> stated_ranges(const StatedCut& cut, const ModelSpec& model, int K,
                                      int chunks) {
  std::vector<int> balance = cut.balance;
  if (cut.split) {
    try {
      balance = megatron_split_balance(*cut.split, transformer_blocks(model), K, chunks);
    } catch (const std::invalid_argument& e) {
      throw ConfigError(e.what(), cut.field);
    }
  }
  // A model changed since the scenario was read is checked again.
  if (const std::string problem = sum_problem(balance, model); !problem.empty()) {
    throw ConfigError(problem, cut.field);
  }
  const std::int64_t stages = std::int64_t{K} * chunks;
  const auto given = static_cast<std::int64_t>(balance.size());
  if (given == stages) return ranges_from_sizes(balance);
  if (!cut.layout.empty()) {
    const std::string chunks_hint = given % K == 0
                                        ? "; Megatron-LM runs it on K=" + str(K) + " ranks as " +
                                              str(given / K) + " virtual stages each (--chunks " +
                                              str(given / K) + " with an interleaved schedule)"
                                        : "";
    throw ConfigError("the layout has " + str(given) + " stages; the run has " +
                          model_stages_text(K, chunks) + " model stages" + chunks_hint,
                      cut.field);
  }
  throw ConfigError("expected " + str(stages) + " entries, one per model stage (" +
                        model_stages_text(K, chunks) +
                        "), each at least 1 and adding up to the "
                        "model's " +
                        str(std::int64_t(model.layers.size())) + " layers; got " + str(given),
                    cut.field);
}

std::string balance_text(const std::vector<int>& balance) {
  std::string out;
  for (std::size_t i = 0; i < balance.size(); ++i) out += (i ? "," : "") + str(balance[i]);
  return out;
}

}  // namespace pipescope
