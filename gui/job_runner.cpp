#include "gui/job_runner.h"

#include <exception>
#include <new>
#include <utility>

#include <QtConcurrent/QtConcurrentRun>

namespace pipescope::gui {

JobRunner::JobRunner(QObject* parent) : QObject(parent) {
  connect(&watcher_, &QFutureWatcher<Outcome>::finished, this, &JobRunner::finished);
}

JobRunner::~JobRunner() {
  waiting_.reset();
  watcher_.waitForFinished();
}

void JobRunner::submit(Work work, OnError on_error) {
  Job job{std::move(work), std::move(on_error)};
  if (running_) {
    waiting_ = std::move(job);
    return;
  }
  start(std::move(job));
}

void JobRunner::start(Job job) {
  running_ = true;
  current_on_error_ = std::move(job.on_error);
  watcher_.setFuture(QtConcurrent::run([work = std::move(job.work)]() -> Outcome {
    try {
      return Outcome{work(), {}};
    } catch (const std::bad_alloc&) {
      return Outcome{{}, QStringLiteral("out of memory; try a smaller K, M or model")};
    } catch (const std::exception& e) {
      return Outcome{{}, QString::fromStdString(e.what())};
    }
  }));
}

void JobRunner::finished() {
  const Outcome outcome = watcher_.result();
  const OnError on_error = std::move(current_on_error_);
  running_ = false;
  // A newer job makes this one's result stale: skip it and run the newer one.
  if (waiting_) {
    Job next = std::move(*waiting_);
    waiting_.reset();
    start(std::move(next));
    return;
  }
  if (outcome.apply) {
    outcome.apply();
  } else if (on_error) {
    on_error(outcome.error);
  }
  if (!running_) emit idle();
}

}  // namespace pipescope::gui
