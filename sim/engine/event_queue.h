#pragma once
// The engine's priority queue: events ordered by simulated time, ties broken by
// the order they were pushed (FIFO), so a run never depends on heap internals.

#include <cstdint>
#include <queue>
#include <vector>

#include "costmodels/units.h"

namespace pipescope {

// What an event means is up to the engine: `kind` and `id` are opaque here.
struct Event {
  SimTime time = 0;       // ns
  std::uint64_t seq = 0;  // push order, the tie-breaker
  std::uint32_t kind = 0;
  std::uint32_t id = 0;
};

class EventQueue {
 public:
  void push(SimTime time, std::uint32_t kind, std::uint32_t id) {
    heap_.push(Event{time, next_seq_++, kind, id});
  }
  bool empty() const { return heap_.empty(); }
  std::size_t size() const { return heap_.size(); }
  const Event& top() const { return heap_.top(); }
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    return e;
  }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time != b.time ? a.time > b.time : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace pipescope
