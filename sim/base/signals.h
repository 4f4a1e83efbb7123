#pragma once
// How the process answers signals, so that no signal leaves a file behind:
// - SIGINT, SIGTERM and SIGHUP ask long work to stop (sim/base/cancel.h); commands
//   finish their current unit of work, write nothing and exit 128 + the signal.
//   A second one removes any temporary file (sim/base/temp_files.h) and ends the
//   process at once, the default way.
// - SIGPIPE (the reader of standard output went away, as with `| head`)
//   removes any temporary file and ends the process quietly, the default way.
// - SIGXFSZ (the file size limit) is ignored, so the write that crosses the
//   limit fails with EFBIG and is reported like a full disk.

namespace pipescope {

void install_signal_handlers();

// The signal that asked to stop (SIGINT, SIGTERM or SIGHUP), or 0.
int stop_signal() noexcept;

}  // namespace pipescope
