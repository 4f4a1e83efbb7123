#include "exec/layer.h"

namespace pipescope::exec {

std::int64_t Layer::param_count() {
  std::int64_t n = 0;
  for (const Param* p : params()) n += p->value.size();
  return n;
}

}  // namespace pipescope::exec
