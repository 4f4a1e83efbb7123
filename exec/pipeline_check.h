#pragma once
// GPipe's promise checked on a backend's devices: a small Transformer trained a
// few steps as a pipeline of stages, each on its own device, under several
// schedules and remat modes, against the same model trained on one device of
// that backend on the whole mini-batch. `selftest --backend cuda` runs it on
// GPUs; the tests run it on HostDevices.

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace pipescope::exec {

class Device;  // device.h

struct PipelineCheck {
  std::string name;      // "pipeline gpipe, K=2, M=4, remat always"
  double max_error = 0;  // over every loss and parameter, relative to its tensor
  double tolerance = 0;
  bool ok() const { return max_error <= tolerance; }
};

// `make_device(stage)` gives the device of a stage (a fresh one each call); the
// single-device reference gets make_device(0). Runs every built-in schedule
// on K = 2 devices (two chunks each for those that take chunks), M = 4
// micro-batches, the remat modes spread over them (GPipe with remat, 1F1B
// without, ZB-H1 except-last, ...).
std::vector<PipelineCheck> check_pipeline(
    const std::function<std::shared_ptr<Device>(int stage)>& make_device);

}  // namespace pipescope::exec
