#include "exec/data.h"

#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "costmodels/model_families.h"

namespace pipescope::exec {
namespace {

// One sample: its inputs as rows of `input` starting at `row`, its targets appended.
void language_sample(const TaskShape& t, std::mt19937_64& rng, Matrix& input, int row,
                     std::vector<std::int32_t>& targets) {
  std::uniform_int_distribution<int> token(0, t.vocab - 1);
  std::vector<int> x(static_cast<std::size_t>(t.seq_len) + 1);
  x[0] = token(rng);
  for (std::size_t i = 1; i < x.size(); ++i) x[i] = (3 * x[i - 1] + 1) % t.vocab;
  for (int p = 0; p < t.seq_len; ++p) {
    input(row + p, 0) = static_cast<float>(x[static_cast<std::size_t>(p)]);
    targets.push_back(x[static_cast<std::size_t>(p) + 1]);
  }
}

void mlp_sample(const TaskShape& t, std::mt19937_64& rng, const Matrix& teacher, Matrix& input,
                int row, std::vector<std::int32_t>& targets) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int f = 0; f < t.features; ++f) input(row, f) = normal(rng);
  const Matrix scores = input.row(row) * teacher;  // (1, classes)
  Eigen::Index best = 0;
  scores.row(0).maxCoeff(&best);
  targets.push_back(static_cast<std::int32_t>(best));
}

MicroBatch samples(const TaskShape& t, int first, int count, std::uint64_t step,
                   std::uint64_t seed) {
  const std::int64_t rows = std::int64_t{count} * (t.language_model ? t.seq_len : 1);
  if (count < 1 || rows > std::numeric_limits<int>::max()) {
    throw std::invalid_argument("a micro-batch of " + std::to_string(count) +
                                " samples is outside what the executor takes");
  }
  MicroBatch mb;
  mb.batch = count;
  mb.seq = t.language_model ? t.seq_len : 1;
  mb.input =
      t.language_model ? Matrix::Zero(count * t.seq_len, 1) : Matrix::Zero(count, t.features);
  Matrix teacher;
  if (!t.language_model) {
    std::mt19937_64 trng(seed ^ 0x7ea0c4e5ULL);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    teacher = Matrix(t.features, t.classes);
    for (Eigen::Index i = 0; i < teacher.size(); ++i) teacher.data()[i] = normal(trng);
  }
  for (int i = 0; i < count; ++i) {
    // Each sample has its own stream, so cutting the batch differently gives the
    // same samples.
    std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + step * 1'000'003ULL +
                        static_cast<std::uint64_t>(first + i));
    if (t.language_model) {
      language_sample(t, rng, mb.input, i * t.seq_len, mb.targets);
    } else {
      mlp_sample(t, rng, teacher, mb.input, i, mb.targets);
    }
  }
  return mb;
}

}  // namespace

TaskShape task_shape(const ModelSpec& spec) {
  TaskShape task;
  if (spec.transformer) {
    task.language_model = true;
    task.seq_len = static_cast<int>(spec.transformer->seq_len);
    task.vocab = static_cast<int>(spec.transformer->vocab);
  } else if (spec.mlp) {
    task.language_model = false;
    task.features = static_cast<int>(spec.mlp->d_model);
    task.classes = static_cast<int>(spec.mlp->classes == 0 ? spec.mlp->d_model : spec.mlp->classes);
  } else {
    throw std::invalid_argument("model '" + spec.name +
                                "' has no transformer or mlp parameters to train on");
  }
  return task;
}

std::vector<MicroBatch> synthetic_batch(const TaskShape& shape, int global_batch, int micro_batches,
                                        std::uint64_t step, std::uint64_t seed) {
  if (micro_batches < 1 || global_batch % micro_batches != 0) {
    throw std::invalid_argument("micro-batches must divide the batch");
  }
  const int b = global_batch / micro_batches;
  std::vector<MicroBatch> out;
  for (int m = 0; m < micro_batches; ++m) out.push_back(samples(shape, m * b, b, step, seed));
  return out;
}

MicroBatch whole_batch(const TaskShape& shape, int global_batch, std::uint64_t step,
                       std::uint64_t seed) {
  return samples(shape, 0, global_batch, step, seed);
}

MicroBatch samples_of(const MicroBatch& mb, int rank, int ranks) {
  using Index = Eigen::Index;
  if (ranks == 1 && rank == 0) return mb;
  if (ranks < 1 || rank < 0 || rank >= ranks || mb.batch % ranks != 0) {
    throw std::invalid_argument(std::to_string(mb.batch) + " samples do not split over E = " +
                                std::to_string(ranks) + " expert ranks");
  }
  MicroBatch out;
  out.batch = mb.batch / ranks;
  out.seq = mb.seq;
  const Index rows = Index{out.batch} * mb.seq;
  out.input = mb.input.middleRows(rows * rank, rows);
  const auto first = mb.targets.begin() + rows * rank;
  out.targets.assign(first, first + rows);
  return out;
}

MicroBatch share_of(const MicroBatch& mb, int share, int shares) {
  using Index = Eigen::Index;
  if (shares == 1 && share == 0) return mb;
  if (shares < 1 || share < 0 || share >= shares || mb.seq % (2 * shares) != 0) {
    throw std::invalid_argument("sequences of " + std::to_string(mb.seq) +
                                " tokens do not cut into 2C = " + std::to_string(2 * shares) +
                                " chunks");
  }
  MicroBatch out;
  out.batch = mb.batch;
  out.seq = mb.seq / shares;
  out.input.resize(Index{mb.batch} * out.seq, mb.input.cols());
  for (Index i = 0; i < mb.batch; ++i) {
    for (Index t = 0; t < out.seq; ++t) {
      const Index from = i * mb.seq + share_position(t, out.seq, share, shares);
      out.input.row(i * out.seq + t) = mb.input.row(from);
      out.targets.push_back(mb.targets[static_cast<std::size_t>(from)]);
    }
  }
  return out;
}

MicroBatch last_share(const MicroBatch& whole, int shares) {
  return share_of(whole, shares - 1, shares);
}

Context last_share_context(const MicroBatch& share, int shares) {
  return share_context(share, shares - 1, shares,
                       std::int64_t{share.batch} * share.seq * std::int64_t{shares});
}

Context share_context(const MicroBatch& share, int index, int shares, std::int64_t tokens) {
  return {share.batch, share.seq, &share.targets, 1.0 / static_cast<double>(tokens), index, shares};
}

}  // namespace pipescope::exec
