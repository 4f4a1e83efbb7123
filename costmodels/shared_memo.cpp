#include "costmodels/shared_memo.h"

#include <algorithm>
#include <vector>

namespace pipescope {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<detail::Clearable*> memos;
};
Registry& registry() {
  static Registry r;  // outlives the memos: they construct it first
  return r;
}

}  // namespace

namespace detail {

Clearable::Clearable() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.memos.push_back(this);
}

Clearable::~Clearable() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::erase(r.memos, this);
}

}  // namespace detail

void clear_shared_memos() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (detail::Clearable* memo : r.memos) memo->clear();
}

}  // namespace pipescope
