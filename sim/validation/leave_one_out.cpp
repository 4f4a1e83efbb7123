#include "sim/validation/leave_one_out.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "costmodels/check.h"
#include "sim/base/parallel.h"
#include "sim/validation/calibration.h"

namespace pipescope {

namespace {

// The finite difference of the sensitivities, in log of a factor: 10 %.
constexpr double kStep = 0.1;

bool has_table(const GpuCase& c) {
  return c.parsed.cluster.device.kernels.present &&
         c.parsed.cluster.cost_model == CostModelKind::kKernels && !c.parsed.cluster.profile;
}

// log(simulated / published) of each case of `cases` under factors u.
std::vector<double> log_errors(const std::vector<const GpuCase*>& cases,
                               const std::vector<const CalibrationParameter*>& parameters,
                               const std::vector<double>& u) {
  std::vector<double> out(cases.size());
  parallel_for(cases.size(), 0, [&](std::size_t i) {
    const GpuCase scaled = with_scaled_table(*cases[i], parameters, u);
    const double value = gpu_metric_value(scaled, simulate_gpu_case(scaled).step_time_s);
    out[i] = std::log(value / cases[i]->measured);
  });
  return out;
}

// PaperFigure-like errors of the log errors: the figure's relative error and
// its faster_error.
struct Errors {
  double abs_relative = 0.0;
  double faster = 0.0;
};
Errors errors_of(const GpuCase& c, double log_error) {
  const double relative = std::exp(log_error) - 1.0;
  PaperFigure f;
  f.metric = std::string(to_string(c.metric));
  f.paper = c.measured;
  f.simulated = c.measured * (1.0 + relative);
  return {std::fabs(relative), faster_error(f)};
}

}  // namespace

std::vector<double> solve_linear(std::vector<std::vector<double>> a, std::vector<double> b) {
  const std::size_t n = b.size();
  PS_CHECK(a.size() == n, "a square system");
  for (std::size_t col = 0; col < n; ++col) {
    std::size_t pivot = col;
    for (std::size_t r = col + 1; r < n; ++r) {
      if (std::fabs(a[r][col]) > std::fabs(a[pivot][col])) pivot = r;
    }
    PS_CHECK(a[pivot][col] != 0.0, "a non-singular system");
    std::swap(a[col], a[pivot]);
    std::swap(b[col], b[pivot]);
    for (std::size_t r = col + 1; r < n; ++r) {
      const double f = a[r][col] / a[col][col];
      for (std::size_t k = col; k < n; ++k) a[r][k] -= f * a[col][k];
      b[r] -= f * b[col];
    }
  }
  std::vector<double> x(n);
  for (std::size_t i = n; i-- > 0;) {
    double s = b[i];
    for (std::size_t k = i + 1; k < n; ++k) s -= a[i][k] * x[k];
    x[i] = s / a[i][i];
  }
  return x;
}

GpuCase with_scaled_table(const GpuCase& c,
                          const std::vector<const CalibrationParameter*>& parameters,
                          const std::vector<double>& u) {
  PS_CHECK(parameters.size() == u.size(), "a factor per parameter");
  GpuCase out = c;
  KernelTable& t = out.parsed.cluster.device.kernels;
  for (std::size_t j = 0; j < parameters.size(); ++j) {
    const CalibrationParameter& p = *parameters[j];
    t.*p.field = std::clamp(t.*p.field * std::exp(u[j]), p.min, p.max);
  }
  return out;
}

namespace {

// The cases with kernel tables and their publications.
struct Fitted {
  std::vector<const GpuCase*> cases;
  std::vector<std::string> publication;
  std::vector<std::string> order;  // the publications, as they first appear
};

Fitted fitted_cases(const std::vector<GpuCase>& all) {
  Fitted out;
  for (const GpuCase& c : all) {
    if (!has_table(c)) continue;
    out.cases.push_back(&c);
    out.publication.push_back(publication_of(c.source));
    if (std::find(out.order.begin(), out.order.end(), out.publication.back()) == out.order.end()) {
      out.order.push_back(out.publication.back());
    }
  }
  return out;
}

// Gauss-Newton on the log errors `r` with sensitivities `jacobian` of the
// cases not left out: the step from u that minimises the linearised F.
std::vector<double> gauss_newton_step(const Fitted& fit, const std::string& left_out,
                                      const std::vector<std::vector<double>>& jacobian,
                                      const std::vector<double>& r, const std::vector<double>& u) {
  const std::size_t np = u.size();
  std::vector<std::vector<double>> a(np, std::vector<double>(np, 0.0));
  std::vector<double> b(np, 0.0);
  for (std::size_t j = 0; j < np; ++j) {
    a[j][j] = kPriorWeight;
    b[j] = -kPriorWeight * u[j];
  }
  for (std::size_t i = 0; i < fit.cases.size(); ++i) {
    if (fit.publication[i] == left_out) continue;
    for (std::size_t j = 0; j < np; ++j) {
      for (std::size_t k = 0; k < np; ++k) a[j][k] += jacobian[i][j] * jacobian[i][k];
      b[j] -= jacobian[i][j] * r[i];
    }
  }
  return solve_linear(a, b);
}

// What the fold of `publication` gives: its factors, its cases' errors with
// them and with the tables.
LeftOut left_out_of(const Fitted& fit, const std::string& publication, const std::vector<double>& u,
                    const std::vector<double>& held, const std::vector<double>& r0) {
  LeftOut out;
  out.publication = publication;
  for (const double x : u) out.factors.push_back(std::exp(x));
  std::vector<double> left, suite;
  double faster = 0.0;
  for (std::size_t i = 0; i < fit.cases.size(); ++i) {
    if (fit.publication[i] != publication) continue;
    const Errors e = errors_of(*fit.cases[i], held[i]);
    left.push_back(e.abs_relative);
    faster += e.faster;
    suite.push_back(errors_of(*fit.cases[i], r0[i]).abs_relative);
  }
  out.cases = left.size();
  out.median_abs_error = median_of(left);
  out.mean_faster = faster / static_cast<double>(std::max<std::size_t>(1, out.cases));
  out.suite_median_abs_error = median_of(suite);
  return out;
}

// F over the cases not left out (the objective of the file's header).
double objective(const Fitted& fit, const std::string& left_out, const std::vector<double>& r,
                 const std::vector<double>& u) {
  double f = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    if (fit.publication[i] != left_out) f += r[i] * r[i];
  }
  for (const double x : u) f += kPriorWeight * x * x;
  return f;
}

// d log(value_i) / d u_j at u, by forward differences: a simulation of every
// case per parameter.
std::vector<std::vector<double>> sensitivities(const Fitted& fit,
                                               const std::vector<const CalibrationParameter*>& ps,
                                               const std::vector<double>& u,
                                               const std::vector<double>& r) {
  std::vector<std::vector<double>> jacobian(fit.cases.size(), std::vector<double>(u.size()));
  for (std::size_t j = 0; j < u.size(); ++j) {
    std::vector<double> moved = u;
    moved[j] += kStep;
    const std::vector<double> rj = log_errors(fit.cases, ps, moved);
    for (std::size_t i = 0; i < fit.cases.size(); ++i) jacobian[i][j] = (rj[i] - r[i]) / kStep;
  }
  return jacobian;
}

// The factors fitted without `left_out`: Gauss-Newton from the tables, each
// step halved until F falls (at most kHalvings times), the sensitivities
// taken again after each, until a step moves no factor by 0.1 % or after
// kIterations steps. Starts from the cases' log errors and sensitivities at
// the tables.
std::vector<double> fit_without(const Fitted& fit,
                                const std::vector<const CalibrationParameter*>& ps,
                                const std::string& left_out, std::vector<double> r,
                                std::vector<std::vector<double>> jacobian) {
  constexpr int kIterations = 5;
  constexpr int kHalvings = 3;
  std::vector<double> u(ps.size(), 0.0);
  double f = objective(fit, left_out, r, u);
  for (int it = 0; it < kIterations; ++it) {
    const std::vector<double> step = gauss_newton_step(fit, left_out, jacobian, r, u);
    bool moved = false;
    double scale = 1.0;
    for (int h = 0; h <= kHalvings && !moved; ++h, scale /= 2.0) {
      std::vector<double> trial = u;
      for (std::size_t j = 0; j < u.size(); ++j) trial[j] += scale * step[j];
      std::vector<double> rt = log_errors(fit.cases, ps, trial);
      const double ft = objective(fit, left_out, rt, trial);
      if (ft < f) {
        u = std::move(trial);
        r = std::move(rt);
        f = ft;
        moved = true;
      }
    }
    const double largest = std::fabs(*std::max_element(
        step.begin(), step.end(), [](double a, double b) { return std::fabs(a) < std::fabs(b); }));
    if (!moved || scale * 2.0 * largest < 1e-3) break;
    jacobian = sensitivities(fit, ps, u, r);
  }
  return u;
}

}  // namespace

FoldFit fit_without_source(const std::vector<GpuCase>& all,
                           const std::vector<const CalibrationParameter*>& parameters,
                           const std::string& left_out) {
  const Fitted fit = fitted_cases(all);
  const std::vector<double> zero(parameters.size(), 0.0);
  const std::vector<double> r0 = log_errors(fit.cases, parameters, zero);
  FoldFit out;
  out.u = fit_without(fit, parameters, left_out, r0, sensitivities(fit, parameters, zero, r0));
  out.objective = leave_one_out_objective(all, parameters, left_out, out.u);
  return out;
}

double leave_one_out_objective(const std::vector<GpuCase>& all,
                               const std::vector<const CalibrationParameter*>& parameters,
                               const std::string& left_out, const std::vector<double>& u) {
  const Fitted fit = fitted_cases(all);
  return objective(fit, left_out, log_errors(fit.cases, parameters, u), u);
}

LeaveOneOutReport leave_one_source_out(
    const std::vector<GpuCase>& all, const std::vector<const CalibrationParameter*>& parameters,
    const std::function<void(std::size_t, std::size_t)>& progress) {
  LeaveOneOutReport report;
  report.parameters = parameters;
  const std::size_t np = report.parameters.size();
  const Fitted fit = fitted_cases(all);
  const std::size_t n = fit.cases.size();
  const std::vector<double> r0 = log_errors(fit.cases, report.parameters, std::vector<double>(np));
  const std::vector<std::vector<double>> j0 =
      sensitivities(fit, report.parameters, std::vector<double>(np), r0);
  std::vector<std::vector<double>> factors;
  for (std::size_t f = 0; f < fit.order.size(); ++f) {
    factors.push_back(fit_without(fit, report.parameters, fit.order[f], r0, j0));
    if (progress) progress(f + 1, fit.order.size());
  }
  // Each case at the factors fitted without its publication.
  std::vector<double> held(n);
  for (std::size_t f = 0; f < fit.order.size(); ++f) {
    std::vector<const GpuCase*> mine;
    for (std::size_t i = 0; i < n; ++i) {
      if (fit.publication[i] == fit.order[f]) mine.push_back(fit.cases[i]);
    }
    const std::vector<double> r = log_errors(mine, report.parameters, factors[f]);
    for (std::size_t i = 0, k = 0; i < n; ++i) {
      if (fit.publication[i] == fit.order[f]) held[i] = r[k++];
    }
  }
  for (std::size_t f = 0; f < fit.order.size(); ++f) {
    report.sources.push_back(left_out_of(fit, fit.order[f], factors[f], held, r0));
  }
  std::vector<double> medians;
  for (const LeftOut& s : report.sources) medians.push_back(s.median_abs_error);
  report.median = median_of(medians);
  return report;
}

}  // namespace pipescope
