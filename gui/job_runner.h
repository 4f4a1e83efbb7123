#pragma once
// Runs work off the UI thread, one job at a time. A job submitted while another
// runs waits, replacing any job already waiting: when the user drags a K slider,
// only the latest setting is worth simulating. The work returns the step to run
// back on the UI thread (apply the result, or report the error).

#include <functional>
#include <optional>

#include <QFutureWatcher>
#include <QObject>

namespace pipescope::gui {

class JobRunner : public QObject {
  Q_OBJECT

 public:
  // Runs off the UI thread; returns what to do on the UI thread afterwards.
  // Exceptions it throws reach on_error on the UI thread.
  using Work = std::function<std::function<void()>()>;
  using OnError = std::function<void(const QString& message)>;

  explicit JobRunner(QObject* parent = nullptr);
  ~JobRunner() override;  // waits for the running job

  void submit(Work work, OnError on_error);
  bool busy() const { return running_; }

 signals:
  void idle();  // nothing runs and nothing waits

 private:
  struct Job {
    Work work;
    OnError on_error;
  };
  struct Outcome {
    std::function<void()> apply;
    QString error;
  };
  void start(Job job);
  void finished();

  QFutureWatcher<Outcome> watcher_;
  OnError current_on_error_;
  std::optional<Job> waiting_;
  bool running_ = false;
};

}  // namespace pipescope::gui
