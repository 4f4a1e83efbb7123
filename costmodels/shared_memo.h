#pragma once
// A process-wide memo of a pure function's results, safe to share between the
// planner's threads: the planner meets the same sub-problems (a schedule's
// holds, a least-memory cut, a cluster's network) thousands of times across
// its candidates. Bounded: past `capacity` entries it starts again.
// clear_shared_memos() empties every memo, so that a benchmark times each run
// from cold as a fresh process would.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

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

// A hash of a key made of 64-bit words (FNV-1a over them): for memos keyed
// by a problem's numbers.
struct WordsHash {
  std::size_t operator()(const std::vector<std::int64_t>& words) const {
    std::uint64_t h = 0xcbf29ce484222325ULL;
    for (const std::int64_t w : words) h = (h ^ static_cast<std::uint64_t>(w)) * 0x100000001b3ULL;
    return static_cast<std::size_t>(h);
  }
};

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
