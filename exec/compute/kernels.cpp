// The float instantiations of the executor's kernels (kernels.h), compiled with
// this library's instruction set.

#include "exec/compute/kernels.h"

namespace pipescope::exec {

PIPESCOPE_EXEC_FLOAT_KERNELS(template)

}  // namespace pipescope::exec
