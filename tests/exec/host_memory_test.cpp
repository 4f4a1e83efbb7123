// The executor's process keeps the memory its steps free (keep_freed_memory):
// a thread's arena keeps a heap it emptied, which glibc's defaults unmap.

#include "exec/compute/host_memory.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace pipescope::exec {
namespace {

// Whether a sanitizer's allocator stands in for glibc's (GCC says so with
// __SANITIZE_*__, clang with __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PIPESCOPE_SANITIZER_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PIPESCOPE_SANITIZER_MALLOC 1
#endif
#endif

#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 33) && !defined(PIPESCOPE_SANITIZER_MALLOC)

// On a thread of its own (so in an arena of heaps of at most 64 MiB): takes
// 96 blocks of 1 MiB, touching each, and frees them, the last first. Returns
// the arenas' mapped bytes (mallinfo2's `arena`) lost by the frees.
std::size_t bytes_unmapped_by_freeing() {
  std::size_t lost = 0;
  std::thread t([&lost] {
    constexpr std::size_t kBlock = std::size_t{1} << 20;
    std::vector<void*> blocks;
    for (int i = 0; i < 96; ++i) {
      blocks.push_back(std::malloc(kBlock));
      std::memset(blocks.back(), 1, kBlock);
    }
    const std::size_t held = mallinfo2().arena;
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) std::free(*it);
    const std::size_t after = mallinfo2().arena;
    lost = held > after ? held - after : 0;
  });
  t.join();
  return lost;
}

TEST(HostMemory, AThreadKeepsTheHeapsItEmptied) {
  ASSERT_TRUE(keep_freed_memory());
  // Without the pad (glibc's default, 128 KiB), the emptied second heap goes.
  ASSERT_EQ(mallopt(M_TOP_PAD, 128 * 1024), 1);
  EXPECT_GE(bytes_unmapped_by_freeing(), std::size_t{16} << 20);
  ASSERT_TRUE(keep_freed_memory());
  EXPECT_EQ(bytes_unmapped_by_freeing(), 0u);
}

#else

TEST(HostMemory, AThreadKeepsTheHeapsItEmptied) {
  GTEST_SKIP() << "glibc's malloc (2.33 or later, for mallinfo2) is not the one in use (a "
                  "sanitizer's, or another C library)";
}

#endif

}  // namespace
}  // namespace pipescope::exec
