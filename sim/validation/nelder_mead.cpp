// nelder_mead and grid_search (sim/validation/calibration.h): the optimiser
// calibrate minimises its objective with, Nelder-Mead in a box with restarts,
// and the brute-force grid the tests check it against.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "sim/validation/calibration.h"

namespace pipescope {

namespace {

void clamp_into(std::vector<double>& u, const BoxFunction& fn) {
  for (std::size_t j = 0; j < u.size(); ++j) u[j] = std::clamp(u[j], fn.lo[j], fn.hi[j]);
}

// fn at a point it first clamps into the box, counted and reported; NaN counts
// as infinity.
class Evaluator {
 public:
  Evaluator(const BoxFunction& fn, const NelderMeadOptions& o) : fn_(fn), o_(o) {}

  double operator()(std::vector<double>& u) {
    clamp_into(u, fn_);
    ++evaluations_;
    const double v = fn_.f(u);
    if (o_.progress) o_.progress(std::min(evaluations_, o_.max_evaluations), o_.max_evaluations);
    return std::isnan(v) ? std::numeric_limits<double>::infinity() : v;
  }
  std::size_t evaluations() const { return evaluations_; }
  bool exhausted() const { return evaluations_ >= o_.max_evaluations; }

 private:
  const BoxFunction& fn_;
  const NelderMeadOptions& o_;
  std::size_t evaluations_ = 0;
};

// a + s (b - c)
std::vector<double> along(const std::vector<double>& a, double s, const std::vector<double>& b,
                          const std::vector<double>& c) {
  std::vector<double> r(a.size());
  for (std::size_t j = 0; j < a.size(); ++j) r[j] = a[j] + s * (b[j] - c[j]);
  return r;
}

struct Simplex {
  std::vector<std::vector<double>> pts;
  std::vector<double> vals;

  void replace(std::size_t i, std::vector<double> p, double v) {
    pts[i] = std::move(p);
    vals[i] = v;
  }
};

// A simplex around the best point so far, each edge along one coordinate,
// pointing into the box.
Simplex simplex_around(const Minimum& best, const BoxFunction& fn, double step, Evaluator& eval) {
  Simplex s{{best.u}, {best.value}};
  for (std::size_t j = 0; j < best.u.size(); ++j) {
    std::vector<double> p = best.u;
    p[j] += (p[j] + step <= fn.hi[j]) ? step : -step;
    s.vals.push_back(eval(p));
    s.pts.push_back(std::move(p));
  }
  return s;
}

// The simplex's best, worst and second-worst points.
struct Ranks {
  std::size_t best = 0;
  std::size_t worst = 0;
  std::size_t second_worst = 0;
};

Ranks ranks_of(const Simplex& s) {
  std::vector<std::size_t> idx(s.vals.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(),
            [&](std::size_t a, std::size_t b) { return s.vals[a] < s.vals[b]; });
  return {idx.front(), idx.back(), idx[idx.size() - 2]};
}

bool converged(const Simplex& s, const Ranks& r, const NelderMeadOptions& o) {
  const std::vector<double>& best = s.pts[r.best];
  double size = 0.0;
  for (const auto& p : s.pts) {
    for (std::size_t j = 0; j < p.size(); ++j) size = std::max(size, std::abs(p[j] - best[j]));
  }
  const double spread = s.vals[r.worst] - s.vals[r.best];
  return size <= o.min_size || (std::isfinite(spread) && spread <= o.tolerance);
}

// The centroid of every point but `except`.
std::vector<double> centroid(const Simplex& s, std::size_t except) {
  const std::size_t n = s.pts.size() - 1;
  std::vector<double> c(n, 0.0);
  for (std::size_t i = 0; i <= n; ++i) {
    if (i == except) continue;
    for (std::size_t j = 0; j < n; ++j) c[j] += s.pts[i][j] / static_cast<double>(n);
  }
  return c;
}

void shrink_toward(Simplex& s, std::size_t best, Evaluator& eval) {
  for (std::size_t i = 0; i < s.pts.size(); ++i) {
    if (i == best) continue;
    s.pts[i] = along(s.pts[best], 0.5, s.pts[i], s.pts[best]);
    s.vals[i] = eval(s.pts[i]);
  }
}

// One move: the worst point reflected through the others' centroid, expanded
// when that beats the best, contracted when it beats nothing, or else the whole
// simplex shrunk toward the best.
void move_worst(Simplex& s, const Ranks& r, Evaluator& eval) {
  const std::size_t w = r.worst;
  const std::vector<double> c = centroid(s, w);
  std::vector<double> xr = along(c, 1.0, c, s.pts[w]);
  const double fr = eval(xr);
  if (fr < s.vals[r.best]) {
    std::vector<double> xe = along(c, 2.0, c, s.pts[w]);
    const double fe = eval(xe);
    if (fe < fr) {
      s.replace(w, std::move(xe), fe);
    } else {
      s.replace(w, std::move(xr), fr);
    }
    return;
  }
  if (fr < s.vals[r.second_worst]) {
    s.replace(w, std::move(xr), fr);
    return;
  }
  // Contract: outside when the reflection beat the worst, inside otherwise.
  const bool outside = fr < s.vals[w];
  std::vector<double> xc = outside ? along(c, 0.5, xr, c) : along(c, 0.5, s.pts[w], c);
  const double fc = eval(xc);
  if (fc < (outside ? fr : s.vals[w])) {
    s.replace(w, std::move(xc), fc);
    return;
  }
  shrink_toward(s, r.best, eval);
}

// The simplex's best point into `best` when it is better; how much better.
double keep_best(const Simplex& s, Minimum& best) {
  const auto it = std::min_element(s.vals.begin(), s.vals.end());
  const double improvement = best.value - *it;
  if (*it < best.value) {
    best.value = *it;
    best.u = s.pts[static_cast<std::size_t>(it - s.vals.begin())];
  }
  return improvement;
}

}  // namespace

Minimum nelder_mead(const BoxFunction& fn, std::vector<double> u0, const NelderMeadOptions& o) {
  if (fn.lo.size() != u0.size() || fn.hi.size() != u0.size()) {
    throw std::invalid_argument("nelder_mead: one bound per coordinate");
  }
  Evaluator eval(fn, o);
  Minimum best;
  best.u = std::move(u0);
  best.value = eval(best.u);
  if (best.u.empty()) {
    best.evaluations = eval.evaluations();
    return best;
  }
  for (int round = 0; round <= o.restarts && !eval.exhausted(); ++round) {
    Simplex s = simplex_around(best, fn, o.initial_step, eval);
    while (!eval.exhausted()) {
      const Ranks r = ranks_of(s);
      if (converged(s, r, o)) break;
      move_worst(s, r, eval);
    }
    const double improvement = keep_best(s, best);
    // A restart that found nothing better: the simplex had converged for real.
    if (round > 0 && !(improvement > o.tolerance)) break;
  }
  best.evaluations = eval.evaluations();
  return best;
}

Minimum grid_search(const BoxFunction& fn, int points) {
  if (points < 2) throw std::invalid_argument("grid_search: at least 2 points per coordinate");
  const std::size_t n = fn.lo.size();
  std::vector<int> at(n, 0);
  Minimum best;
  best.value = std::numeric_limits<double>::infinity();
  std::vector<double> u(n);
  for (;;) {
    for (std::size_t j = 0; j < n; ++j) {
      u[j] = fn.lo[j] + (fn.hi[j] - fn.lo[j]) * at[j] / (points - 1);
    }
    const double v = fn.f(u);
    ++best.evaluations;
    if (v < best.value) {
      best.value = v;
      best.u = u;
    }
    std::size_t j = 0;
    while (j < n && ++at[j] == points) at[j++] = 0;
    if (j == n) break;
  }
  return best;
}

}  // namespace pipescope
