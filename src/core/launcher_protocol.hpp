// The launcher protocol: what weftrun and the instances it starts tell each other, through records in the
// job directory and through their output. One header for both sides (src/runtime and src/transport/mpi in
// the instances; tools/weftrun and its instance wrapper in the launcher), so that no name can change on
// one side only. docs/weftrun.md describes what each record means and who writes it.
#pragma once
#include <string>
#include <string_view>

namespace weft::launcher {

// The job directory weftrun creates and exports to every instance.
inline constexpr const char* kJobDirVariable = "WEFT_JOB_DIR";
// In the job directory: the socket the instance wrappers stream their output to.
inline constexpr const char* kOutputSocket = "output.sock";

// Records, one file per instance: <job dir>/instance-<i><suffix>.
inline constexpr const char* kRegistered = ".registered";  // runtime started: "<pid> <host>" (R26)
inline constexpr const char* kLaunched = ".launched";      // wrapper started the program: "<pid> <host>"
inline constexpr const char* kExit = ".exit";              // wrapper: "<unix ns> <pid> exit|signal <value>"
inline constexpr const char* kError = ".error";            // this instance's own failure (a root cause)
inline constexpr const char* kAborted = ".aborted";        // a failure that follows another instance's
inline constexpr const char* kDeparted = ".departed";      // its program ended while others ran: "<unix ns>"
inline constexpr const char* kBlame = ".blame";            // "<missing|departed|unfinished> <instance>" lines

// The line prefixes the launcher reads in the instances' output: the root cause is the earliest error line.
inline constexpr std::string_view kErrorPrefix = "weft: error: ";
inline constexpr std::string_view kAbortedPrefix = "weft: aborted: ";

inline std::string record_path(std::string_view job_dir, std::string_view instance, const char* suffix) {
  std::string path(job_dir);
  path += "/instance-";
  path += instance;
  path += suffix;
  return path;
}
inline std::string record_path(std::string_view job_dir, int instance, const char* suffix) {
  return record_path(job_dir, std::to_string(instance), suffix);
}
inline std::string output_socket_path(std::string_view job_dir) {
  std::string path(job_dir);
  path += '/';
  path += kOutputSocket;
  return path;
}

}  // namespace weft::launcher
