#include "exec/compute/layer.h"

#include "exec/compute/device.h"

namespace pipescope::exec {

std::int64_t Layer::param_count() {
  std::int64_t n = 0;
  for (const Param* p : params()) n += p->on_device() ? p->d_value.size() : p->value.size();
  return n;
}

void zero_grad(Param& p) {
  if (p.on_device()) {
    if (!p.d_grad.empty()) p.d_grad.device()->fill(p.d_grad.data(), p.d_grad.size(), 0.0f);
  } else {
    p.grad.setZero();
  }
}

Matrix host_value(const Param& p) {
  return p.on_device() ? download(p.d_value) : p.value;
}

}  // namespace pipescope::exec
