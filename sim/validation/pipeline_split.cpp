#include "sim/validation/pipeline_split.h"

#include <algorithm>
#include <utility>

#include "sim/validation/gpu_validation.h"

namespace pipescope {
namespace {

struct Errors {
  std::vector<double> single, pipelined;
};

void add(Errors& e, const PaperFigure& f) {
  (*f.stages > 1 ? e.pipelined : e.single).push_back(faster_error(f));
}

SplitSide side(std::vector<double> errors) {
  return {errors.size(), median_of(std::move(errors))};
}

PipelineSplit row(std::string publication, Errors e) {
  return {std::move(publication), side(std::move(e.single)), side(std::move(e.pipelined))};
}

}  // namespace

std::vector<PipelineSplit> pipeline_split(const ValidationReport& report,
                                          const std::string& table) {
  std::vector<std::pair<std::string, Errors>> sources;
  Errors all;
  for (const PaperFigure& f : report.figures) {
    if (f.table != table || !f.stages) continue;
    const std::string publication = publication_of(f.source);
    auto it = std::find_if(sources.begin(), sources.end(),
                           [&](const auto& s) { return s.first == publication; });
    if (it == sources.end()) it = sources.insert(sources.end(), {publication, Errors{}});
    add(it->second, f);
    add(all, f);
  }
  std::vector<PipelineSplit> out;
  if (sources.empty()) return out;
  for (auto& [publication, errors] : sources) out.push_back(row(publication, std::move(errors)));
  out.push_back(row("all", std::move(all)));
  return out;
}

}  // namespace pipescope
