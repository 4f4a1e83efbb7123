#include "sim/engine/event_queue.h"

#include <gtest/gtest.h>

namespace pipescope {
namespace {

TEST(EventQueue, PopsInTimeOrder) {
  EventQueue q;
  q.push(30, 0, 3);
  q.push(10, 0, 1);
  q.push(20, 0, 2);
  EXPECT_EQ(q.pop().id, 1u);
  EXPECT_EQ(q.pop().id, 2u);
  EXPECT_EQ(q.pop().id, 3u);
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, TiesBreakInPushOrder) {
  EventQueue q;
  for (std::uint32_t i = 0; i < 100; ++i) q.push(5, i % 2, i);
  q.push(4, 0, 1000);
  EXPECT_EQ(q.pop().id, 1000u);
  for (std::uint32_t i = 0; i < 100; ++i) {
    const Event e = q.pop();
    EXPECT_EQ(e.id, i);
    EXPECT_EQ(e.kind, i % 2);
    EXPECT_EQ(e.time, 5);
  }
}

}  // namespace
}  // namespace pipescope
