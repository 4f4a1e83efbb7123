#include "costmodels/kernel_table.h"

namespace pipescope {

const std::vector<CalibrationParameter>& calibration_parameters() {
  static const std::vector<CalibrationParameter> params = {
      {"gemm_efficiency", &KernelTable::gemm_efficiency, 0.05, 1.0,
       "fraction of the dense peak a large GEMM sustains"},
      {"attention_fwd_efficiency", &KernelTable::attention_fwd_efficiency, 0.05, 1.0,
       "fraction of the dense peak fused attention's forward reaches"},
      {"attention_bwd_efficiency", &KernelTable::attention_bwd_efficiency, 0.05, 1.0,
       "fraction of the dense peak fused attention's backward reaches"},
      {"memory_efficiency", &KernelTable::memory_efficiency, 0.05, 1.0,
       "fraction of the memory bandwidth memory-bound kernels achieve"},
      {"kernel_overhead_s", &KernelTable::kernel_overhead_s, 0.0, 1e-3,
       "fixed seconds every kernel costs beyond its work"},
      {"link_efficiency", &KernelTable::link_efficiency, 0.05, 1.0,
       "fraction of a link's peak bandwidth a copy between devices achieves"},
  };
  return params;
}

}  // namespace pipescope
