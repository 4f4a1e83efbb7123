#pragma once
// Error lines on standard error.

#include <string>

namespace pipescope::cli {

// Writes "pipescope: error: MESSAGE\n" with one write, so that the lines of
// several processes sharing the terminal (MPI ranks, mpirun's own notices) do
// not cut into it.
void print_error(const std::string& message);

// The same for a line with its own prefix ("pipescope: interrupted").
void print_line(const std::string& line);

}  // namespace pipescope::cli
