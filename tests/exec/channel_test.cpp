// exec::Channel, the CPU backend's transport: payloads by key in any order, a
// second send of one key refused, and a receiver that returns on abort or at
// its deadline instead of hanging.

#include "exec/channel.h"
#include "exec/transport.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace pipescope::exec {
namespace {

using namespace std::chrono_literals;

// The one message both the command and the MPI transport give for a job of
// the wrong size.
TEST(Transport, RankCountProblemSaysHowToStartTheJob) {
  EXPECT_EQ(rank_count_problem(2, 2), "");
  EXPECT_EQ(
      rank_count_problem(2, 1),
      "the plan runs on 2 devices but this MPI job has 1 process; start it with mpirun -np 2");
  EXPECT_EQ(
      rank_count_problem(1, 3),
      "the plan runs on 1 device but this MPI job has 3 processes; start it with mpirun -np 1");
  // A process per device and expert rank, or share.
  EXPECT_EQ(rank_count_problem(2, 4, 2), "");
  EXPECT_EQ(rank_count_problem(2, 2, 2, "expert ranks"),
            "the plan runs on 2 devices of 2 expert ranks each (4 processes) but this MPI job has "
            "2 processes; start it with mpirun -np 4");
  EXPECT_EQ(rank_count_problem(1, 4, 2, "shares"),
            "the plan runs on 1 device of 2 shares each (2 processes) but this MPI job has "
            "4 processes; start it with mpirun -np 2");
}

TEST(Channel, TakesPayloadsByKeyWhateverTheOrder) {
  Channel ch;
  const std::atomic<bool> aborted{false};
  ch.put(2, Matrix::Constant(1, 1, 2.0f));
  ch.put(1, Matrix::Constant(1, 1, 1.0f));
  Tensor m;
  ASSERT_EQ(ch.take(1, Channel::Clock::now() + 1s, aborted, m), Channel::Wait::kReady);
  EXPECT_EQ(m.host()(0, 0), 1.0f);
  ASSERT_EQ(ch.take(2, Channel::Clock::now() + 1s, aborted, m), Channel::Wait::kReady);
  EXPECT_EQ(m.host()(0, 0), 2.0f);
}

TEST(Channel, RefusesASecondPayloadForOneKey) {
  Channel ch;
  ch.put(0, Matrix::Zero(1, 1));
  EXPECT_THROW(ch.put(0, Matrix::Zero(1, 1)), std::runtime_error);
}

TEST(Channel, TimesOutAndAborts) {
  Channel ch;
  std::atomic<bool> aborted{false};
  Tensor m;
  EXPECT_EQ(ch.take(0, Channel::Clock::now() + 5ms, aborted, m), Channel::Wait::kTimedOut);
  std::thread stopper([&] {
    std::this_thread::sleep_for(5ms);
    aborted.store(true);
    ch.wake_all();
  });
  EXPECT_EQ(ch.take(0, Channel::Clock::now() + 60s, aborted, m), Channel::Wait::kAborted);
  stopper.join();
}

TEST(Channel, HandsPayloadsAcrossThreads) {
  Channel ping;
  Channel pong;
  const std::atomic<bool> aborted{false};
  std::thread echo([&] {
    for (int r = 0; r < 50; ++r) {
      Tensor m;
      if (ping.take(r, Channel::Clock::now() + 10s, aborted, m) != Channel::Wait::kReady) {
        return;
      }
      m.host()(0, 0) += 1.0f;
      pong.put(r, std::move(m));
    }
  });
  Tensor payload = Matrix::Zero(1, 1);
  for (int r = 0; r < 50; ++r) {
    ping.put(r, std::move(payload));
    ASSERT_EQ(pong.take(r, Channel::Clock::now() + 10s, aborted, payload), Channel::Wait::kReady);
  }
  echo.join();
  EXPECT_EQ(payload.host()(0, 0), 50.0f);
}

}  // namespace
}  // namespace pipescope::exec
