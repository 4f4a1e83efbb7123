#include "exec/mpi/mpi_group_profile.h"

#include <mpi.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <vector>

#include "exec/compute/host_memory.h"
#include "exec/expert_load_profile.h"
#include "exec/expert_shard.h"
#include "exec/gradient_sum.h"
#include "exec/mpi/mpi_group_link.h"
#include "exec/mpi/mpi_poll.h"
#include "exec/mpi/mpi_transport.h"
#include "exec/share_exchange_profile.h"
#include "exec/tensor_shard.h"
#include "exec/transport_profile.h"

namespace pipescope::exec {

namespace {

// The exchange times of a pass as integers, and back.
void pack(const ExchangeTimes& x, std::vector<std::int64_t>& out) {
  out.insert(out.end(), {x.count, x.wall, x.bytes});
}
ExchangeTimes unpack(const std::int64_t* v) {
  return {static_cast<int>(v[0]), v[1], v[2]};
}

// One rank's passes as integers: the passes, then each pass's calls (their
// count, then backward, rows, wall of each), its all-to-alls (count, wall,
// bytes) and its compute (forward, backward).
std::vector<std::int64_t> packed(const ExpertRankPasses& r) {
  std::vector<std::int64_t> out{static_cast<std::int64_t>(r.calls.size())};
  for (std::size_t p = 0; p < r.calls.size(); ++p) {
    out.push_back(static_cast<std::int64_t>(r.calls[p].size()));
    for (const ExpertTally::Call& c : r.calls[p]) {
      out.insert(out.end(), {c.backward ? 1 : 0, c.rows, c.wall});
    }
    pack(r.alltoalls[p], out);
    out.insert(out.end(), {r.compute[p][0], r.compute[p][1]});
  }
  return out;
}

// The passes `packed` wrote from `at`, which it leaves past them.
ExpertRankPasses unpacked(const std::vector<std::int64_t>& v, std::size_t& at) {
  ExpertRankPasses r;
  const std::int64_t passes = v.at(at++);
  for (std::int64_t p = 0; p < passes; ++p) {
    std::vector<ExpertTally::Call>& calls = r.calls.emplace_back();
    const std::int64_t n = v.at(at++);
    for (std::int64_t c = 0; c < n; ++c, at += 3) {
      calls.push_back({v.at(at) != 0, v.at(at + 1), v.at(at + 2)});
    }
    if (at + 3 > v.size()) throw std::out_of_range("the expert ranks' passes were cut short");
    r.alltoalls.push_back(unpack(&v[at]));
    at += 3;
    if (at + 2 > v.size()) throw std::out_of_range("the expert ranks' passes were cut short");
    r.compute.push_back({v[at], v[at + 1]});
    at += 2;
  }
  return r;
}

// Every rank's passes at rank 0 of `comm` (empty elsewhere).
std::vector<ExpertRankPasses> gathered(const ExpertRankPasses& mine, MPI_Comm comm) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  const std::vector<std::int64_t> out = packed(mine);
  const int count = static_cast<int>(out.size());
  std::vector<int> counts(static_cast<std::size_t>(ranks)), at(static_cast<std::size_t>(ranks));
  mpi_check(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm), "MPI_Gather");
  int total = 0;
  for (int r = 0; r < ranks; ++r) {
    at[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::vector<std::int64_t> all(static_cast<std::size_t>(rank == 0 ? total : 0));
  mpi_check(MPI_Gatherv(out.data(), count, MPI_INT64_T, all.data(), counts.data(), at.data(),
                        MPI_INT64_T, 0, comm),
            "MPI_Gatherv");
  std::vector<ExpertRankPasses> passes;
  std::size_t next = 0;
  for (int r = 0; rank == 0 && r < ranks; ++r) passes.push_back(unpacked(all, next));
  return passes;
}

// Whether rank 0 finds the layers of `processes` processes of the group fit
// its machine's memory, as every rank learns.
bool fits_everywhere(const ModelSpec& spec, std::int64_t batch, int processes) {
  int fits = MpiSession::rank() == 0 &&
             share_exchanges_unfit(spec, batch, host_memory_available(), processes).empty();
  mpi_check(MPI_Bcast(&fits, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return fits != 0;
}

// Whether the job's processes can time a group of `ways` (the model's C or
// E, the other of them and T 1) of a transformer: ways >= 2 processes, and
// their layers fit (fits_everywhere).
bool group_measurable(const ModelSpec& spec, int ways, std::int64_t batch) {
  return ways >= 2 && spec.tensor_parallel == 1 &&
         spec.context_parallel * spec.expert_parallel == ways && spec.transformer != nullptr &&
         MpiSession::size() >= ways && fits_everywhere(spec, batch, ways);
}

// Ranks 0 to n - 1 of the job run body(link), each its rank of a link of
// their own; then every rank meets the others.
void on_first_ranks(int n, const std::function<void(const std::shared_ptr<MpiGroupLink>&)>& body) {
  const int rank = MpiSession::rank();
  MPI_Comm comm = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(MPI_COMM_WORLD, rank < n ? 0 : MPI_UNDEFINED, rank, &comm),
            "MPI_Comm_split");
  if (comm != MPI_COMM_NULL) body(std::make_shared<MpiGroupLink>(comm));
  MpiSession::wait_for_all();
}

}  // namespace

void measure_mpi_context(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed) {
  const int C = spec.context_parallel;
  if (!group_measurable(spec, C, batch)) return;
  ShareExchanges in_step;  // rank 0's, from the last share
  TransportFigures first_bare;
  TransportFigures first_sum;
  on_first_ranks(C, [&](const std::shared_ptr<MpiGroupLink>& link) {
    const int c = link->rank();
    CollectiveTally tally;
    std::vector<ShareExchanges> mine;
    {  // the layers gone before the gradient sum's buffers come
      std::vector<LayerList> shares =
          build_context_ranks(*spec.transformer, seed, 1, C, link, spec.context_by_heads);
      const CollectiveScope scope(tally);
      mine = share_passes(shares[static_cast<std::size_t>(c)], spec, c, batch, seed,
                          kExchangePasses, tally);
    }
    const TransportFigures bare =
        spec.context_by_heads ? profile_linked_alltoall(link, kGroupRepeats) : TransportFigures{};
    const TransportFigures sum =
        profile_linked_gradient_sum(link, kGroupRepeats, spec.total_params());
    // The last share's median pass, as the threads keep it, to the first.
    const ShareExchanges last = median_pass(std::move(mine));
    std::vector<std::int64_t> figures;
    pack(last.forward, figures);
    pack(last.backward, figures);
    figures.push_back(last.forward_pass);
    figures.push_back(last.backward_pass);
    mpi_check(MPI_Bcast(figures.data(), static_cast<int>(figures.size()), MPI_INT64_T, C - 1,
                        link->communicator()),
              "MPI_Bcast");
    if (c == 0) {
      in_step = {unpack(&figures[0]), unpack(&figures[3]), figures[6], figures[7]};
      first_bare = bare;
      first_sum = sum;
    }
  });
  // Once every rank has left the group (a failure here waits for no one).
  if (MpiSession::rank() == 0) {
    write_context_figures(profile, spec, in_step, batch, [&first_bare] { return first_bare; });
    profile.gradient_sum = {C, first_sum.latency_s, first_sum.bandwidth};
  }
}

void measure_mpi_experts(Profile& profile, const ModelSpec& spec, std::int64_t batch,
                         std::uint64_t seed) {
  const int E = spec.expert_parallel;
  if (!group_measurable(spec, E, batch)) return;
  std::vector<ExpertRankPasses> all;  // every rank's, at rank 0
  TransportFigures bare;
  TransportFigures sum;  // each rank's; rank 0's kept
  on_first_ranks(E, [&](const std::shared_ptr<MpiGroupLink>& link) {
    const int e = link->rank();
    CollectiveTally tally;
    ExpertRankPasses mine;
    {  // the layers gone before the gradient sum's buffers come
      std::vector<LayerList> ranks = build_expert_ranks(*spec.transformer, seed, E, link);
      const CollectiveScope scope(tally);
      mine = expert_rank_passes(ranks[static_cast<std::size_t>(e)], spec, e, batch, seed,
                                kExchangePasses, tally);
    }
    bare = profile_linked_alltoall(link, kGroupRepeats);
    sum = profile_linked_gradient_sum(link, kGroupRepeats, spec.total_params());
    all = gathered(mine, link->communicator());
  });
  // Once every rank has left the group (a failure here waits for no one).
  if (MpiSession::rank() == 0) {
    write_expert_figures(profile, spec, expert_load_timing(all, batch), batch, bare);
    profile.gradient_sum = {E, sum.latency_s, sum.bandwidth};
  }
}

}  // namespace pipescope::exec
