#include "sim/validation/layout_split.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "sim/validation/gpu_validation.h"

namespace pipescope {
namespace {

struct Errors {
  std::vector<double> one, more;
};

std::optional<int> size_of(const PaperFigure& f, LayoutDimension dimension) {
  return dimension == LayoutDimension::kStages ? f.stages : f.tensor_parallel;
}

SplitSide side(std::vector<double> errors) {
  return {errors.size(), median_of(std::move(errors))};
}

LayoutSplit row(std::string publication, Errors e) {
  return {std::move(publication), side(std::move(e.one)), side(std::move(e.more))};
}

}  // namespace

std::vector<LayoutSplit> layout_split(const ValidationReport& report, const std::string& table,
                                      LayoutDimension dimension) {
  std::vector<std::pair<std::string, Errors>> sources;
  Errors all;
  for (const PaperFigure& f : report.figures) {
    const std::optional<int> size = size_of(f, dimension);
    if (f.table != table || !size) continue;
    const std::string publication = publication_of(f.source);
    auto it = std::find_if(sources.begin(), sources.end(),
                           [&](const auto& s) { return s.first == publication; });
    if (it == sources.end()) it = sources.insert(sources.end(), {publication, Errors{}});
    for (Errors* e : {&it->second, &all}) (*size > 1 ? e->more : e->one).push_back(faster_error(f));
  }
  std::vector<LayoutSplit> out;
  if (sources.empty()) return out;
  for (auto& [publication, errors] : sources) out.push_back(row(publication, std::move(errors)));
  out.push_back(row("all", std::move(all)));
  return out;
}

}  // namespace pipescope
