#pragma once
// A process-wide memo of a pure function's results, safe to share between the
// planner's threads: the planner meets the same sub-problems (a schedule's
// holds, a least-memory cut) thousands of times across its candidates. Bounded:
// past `capacity` entries it starts again. clear_shared_memos() empties every
// memo, so that a benchmark times each run from cold as a fresh process would.

#include <cstddef>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace pipescope {

// Empties every SharedMemo.
void clear_shared_memos();

namespace detail {
// What clear_shared_memos reaches: every SharedMemo alive.
class Clearable {
 public:
  Clearable();
  virtual ~Clearable();
  Clearable(const Clearable&) = delete;
  Clearable& operator=(const Clearable&) = delete;
  virtual void clear() = 0;
};
}  // namespace detail

template <class Key, class Value, class Hash = std::hash<Key>>
class SharedMemo final : public detail::Clearable {
 public:
  explicit SharedMemo(std::size_t capacity) : capacity_(capacity) {}

  // The value remembered for `key`, or make() (run unlocked; two threads may
  // both make the same value, which is pure) remembered.
  template <class Make>
  Value get(const Key& key, Make&& make) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (const auto it = values_.find(key); it != values_.end()) return it->second;
    }
    Value value = std::forward<Make>(make)();
    const std::lock_guard<std::mutex> lock(mutex_);
    if (values_.size() >= capacity_) values_.clear();
    values_.emplace(key, value);
    return value;
  }
  void clear() override {
    const std::lock_guard<std::mutex> lock(mutex_);
    values_.clear();
  }

 private:
  const std::size_t capacity_;
  std::mutex mutex_;
  std::unordered_map<Key, Value, Hash> values_;
};

}  // namespace pipescope
