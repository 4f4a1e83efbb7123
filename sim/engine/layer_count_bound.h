#pragma once
// A bound of the device partitioner's exhaustive search (sim/engine/device_partition.h),
// counted in whole layers.
//
// Where a model repeats one block, the devices' mean load says little: 96
// blocks on 16 devices give each 6 blocks on average, but the device that
// also holds the LM head is then the busiest, and no cut can do better than
// 6 blocks and the head. Every cut of that kind has each device within a
// fraction of a block of the others, and a search bounded by the mean alone
// visits them all. Counting settles it: a device with time T left can take at
// most floor(T / tau) more layers whose compute is at least tau, and with room R
// at most floor(R / mu_d) of the layers whose weights, stash and input are each
// at least those of a reference layer, mu_d being what that layer adds to
// memory on the device's stages (StagePrices::layer_floor, at the fewest
// micro-batches any of them holds: a pipeline's first device holds many,
// its last few); when those counts, summed over the devices with stages to
// come, are fewer than the layers of at least that size still to place, no
// cut from here keeps every device under the best time and within memory.
//
// What each device has left is its time below the best so far, less the
// transfers of its stages to come (each crosses two cuts, at least the
// cheapest interior one each; the first and the last stage one) and, on the
// device of the last stage, the last layer (it must hold it); and its memory
// room, less what its stages to come hold whatever their layers
// (StagePrices::stage_floors: the inputs kept under remat, the layer gathered
// under ZeRO-3) and the last layer's floor on that device. The sizes (tau and the reference
// layer's weights, stash and input) are the quartiles and the median of the
// layers', tried together (a layer counts when it is at least all), so that
// the bound costs a few divisions a device.

#include <array>
#include <cstddef>
#include <optional>
#include <vector>

#include "costmodels/units.h"
#include "sim/engine/device_partition.h"
#include "sim/engine/partition.h"

namespace pipescope {

class LayerCountBound {
 public:
  // p's stages on `devices` devices (device_of_stage).
  LayerCountBound(const PartitionProblem& p, const StagePrices& prices, int devices);

  // Whether layers [first, end) cannot go to the stages after `stage` (-1:
  // every stage) with each device, from `loads`, ending below `below` in time
  // (none: no bound) and within `capacity` in memory (none: no limit).
  bool cannot_place(int stage, int first, const std::vector<DeviceLoad>& loads,
                    std::optional<SimTime> below, std::optional<Bytes> capacity) const;
  // The least device memory at which cannot_place, before any stage is
  // placed and with no bound on time, does not refuse: every cut needs at
  // least this much on some device.
  Bytes least_capacity() const;

 private:
  // Layers of at least `time` compute and `memory` floor; a count of them
  // from each layer to the end (the last layer left out), by which of the
  // two sizes count: kTime, kMemory or kBoth.
  enum Kind { kTime, kMemory, kBoth };
  struct Size {
    SimTime time = 0;
    StagePrices::LayerFloor memory;
    std::vector<Bytes> unit;  // what a layer of that size holds at least, on each device
    std::array<std::vector<int>, 3> from;
  };

  std::size_t devices_;
  std::vector<int> future_;         // (stage + 1) x devices_: each device's stages after `stage`
  std::vector<Bytes> held_future_;  // and the least they hold beyond their layers
  std::size_t first_device_;        // the device of the first stage
  std::size_t last_device_;         // the device of the last stage
  SimTime last_compute_;            // the last layer's compute, and its memory on its device
  Bytes last_memory_;
  SimTime least_cut_time_;  // the cheapest interior cut
  std::vector<Size> sizes_;
};

}  // namespace pipescope
