#include "sim/validation/layout_split.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "sim/validation/gpu_validation.h"

namespace pipescope {
namespace {

struct SplitErrors {
  std::vector<double> one, more;
};

std::optional<int> size_of(const PaperFigure& f, LayoutDimension dimension) {
  return dimension == LayoutDimension::kStages ? f.stages : f.tensor_parallel;
}

SplitSide split_side(std::vector<double> errors) {
  return {errors.size(), median_of(std::move(errors))};
}

LayoutSplit split_row(std::string publication, SplitErrors e) {
  return {std::move(publication), split_side(std::move(e.one)), split_side(std::move(e.more))};
}

}  // namespace

std::vector<LayoutSplit> layout_split(const ValidationReport& report, const std::string& table,
                                      LayoutDimension dimension) {
  std::vector<std::pair<std::string, SplitErrors>> sources;
  SplitErrors all;
  for (const PaperFigure& f : report.figures) {
    const std::optional<int> size = size_of(f, dimension);
    if (f.table != table || !size) continue;
    const std::string publication = publication_of(f.source);
    auto it = std::find_if(sources.begin(), sources.end(),
                           [&](const auto& s) { return s.first == publication; });
    if (it == sources.end()) it = sources.insert(sources.end(), {publication, SplitErrors{}});
    for (SplitErrors* e : {&it->second, &all})
      (*size > 1 ? e->more : e->one).push_back(faster_error(f));
  }
  std::vector<LayoutSplit> out;
  if (sources.empty()) return out;
  for (auto& [publication, errors] : sources)
    out.push_back(split_row(publication, std::move(errors)));
  out.push_back(split_row("all", std::move(all)));
  return out;
}

}  // namespace pipescope
