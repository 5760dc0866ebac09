// weftrun's command line (options.hpp).
#include "options.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace weftrun {
namespace {

[[noreturn]] void usage_error(const std::string& message) { throw UsageError(message); }

int parse_int(const std::string& option, const std::string& value, int min) {
  int v = 0;
  const char* end = value.data() + value.size();
  const auto [p, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || p != end || v < min) {
    std::string m = option;
    m += " expects an integer >= ";
    m += std::to_string(min);
    m += ", got '";
    m += value;
    m += "'";
    usage_error(m);
  }
  return v;
}

// At most 1e9 s: a deadline further off would overflow the clock's count (steady_clock's nanoseconds reach
// 292 years), and the message says so rather than calling 1e30 "not positive".
double parse_seconds(const std::string& option, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v > 0) || v > 1e9) {
    std::string m = option;
    m += " expects a number of seconds > 0 and at most 1e+09 (about 31 years), got '";
    m += value;
    m += "'";
    usage_error(m);
  }
  return v;
}

std::vector<std::string> split_spaces(const std::string& s) {
  std::vector<std::string> out;
  std::string word;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n') {
      if (!word.empty()) out.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) out.push_back(std::move(word));
  return out;
}

// mpirun's own complaint ("Open RTE was unable to open the hostfile") comes after a failed start and
// buries the path in a help message; say it here, before anything starts.
void check_hostfile(const std::string& hostfile) {
  const int fd = ::open(hostfile.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  const int e = fd < 0 ? errno : fstat(fd, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : 0;
  if (fd >= 0) close(fd);
  if (e != 0) {
    std::string m = "--hostfile ";
    m += hostfile;
    m += ": cannot read the file: ";
    m += std::strerror(e);
    usage_error(m);
  }
}

// PopRun's IPU partition options: accepted and ignored, with a note.
bool is_partition_option(const std::string& name) {
  return name == "--vipu-partition" || name == "--update-partition" || name == "--remove-partition" ||
         name == "--reset-partition" || name == "--vipu-server-host" || name == "--vipu-server-port" ||
         name == "--vipu-cluster";
}

// The job's shape once every option is read: N within bounds, R (default N) divisible by N, R/N within one
// instance's bounds, and --only-output-from-instance naming an instance.
void check_job_shape(Options& o) {
  if (o.num_instances > kMaxInstances) {
    std::string m = "--num-instances ";
    m += std::to_string(o.num_instances);
    m += " is more than weftrun starts (at most ";
    m += std::to_string(kMaxInstances);
    m += ")";
    usage_error(m);
  }
  if (o.num_replicas < 0) o.num_replicas = o.num_instances;
  if (o.num_replicas % o.num_instances != 0) {
    std::string m = "--num-replicas ";
    m += std::to_string(o.num_replicas);
    m += " is not divisible by --num-instances ";
    m += std::to_string(o.num_instances);
    m += ": every instance must hold the same number of replicas (R/N)";
    usage_error(m);
  }
  if (o.num_replicas / o.num_instances > kMaxReplicasPerInstance) {
    std::string m = "--num-replicas ";
    m += std::to_string(o.num_replicas);
    m += " over --num-instances ";
    m += std::to_string(o.num_instances);
    m += " is ";
    m += std::to_string(o.num_replicas / o.num_instances);
    m += " replicas per instance; one instance holds at most ";
    m += std::to_string(kMaxReplicasPerInstance);
    m += " (one device each)";
    usage_error(m);
  }
  if (o.only_output_from >= o.num_instances) {
    std::string m = "--only-output-from-instance ";
    m += std::to_string(o.only_output_from);
    m += " is not an instance of this job (instances 0 to ";
    m += std::to_string(o.num_instances - 1);
    m += ")";
    usage_error(m);
  }
}

}  // namespace

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  const int argc = static_cast<int>(args.size()) + 1;
  auto argv = [&](int k) -> const std::string& { return args[static_cast<std::size_t>(k - 1)]; };
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv(i);
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM
    std::string name = arg, value;
    bool inline_value = false;
    if (arg.rfind("--", 0) == 0) {
      const std::size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inline_value = true;
      }
    }
    auto take = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) {
        std::string m = name;
        m += " needs a value";
        usage_error(m);
      }
      return argv(++i);
    };
    auto no_value = [&] {
      if (inline_value) {
        std::string m = name;
        m += " takes no value";
        usage_error(m);
      }
    };
    if (name == "-h" || name == "--help") {
      o.help = true;
      return o;
    } else if (name.size() >= 2 && name[0] == '-' && name[1] == 'v' &&
               name.find_first_not_of('v', 1) == std::string::npos) {
      o.verbose += static_cast<int>(name.size() - 1);  // -v, -vv, -vvv
    } else if (name == "--verbose") {
      no_value();
      o.verbose += 1;
    } else if (name == "--num-instances") {
      o.num_instances = parse_int(name, take(), 1);
    } else if (name == "--num-replicas") {
      o.num_replicas = parse_int(name, take(), 1);
    } else if (name == "--devices-per-replica" || name == "--ipus-per-replica") {
      o.devices_per_replica = parse_int(name, take(), 1);
      if (o.devices_per_replica != 1) {
        std::string m = name;
        m += " ";
        m += std::to_string(o.devices_per_replica);
        m += " is not supported: weft runs one device per replica (--devices-per-replica 1)";
        usage_error(m);
      }
    } else if (name == "--only-output-from-instance") {
      o.only_output_from = parse_int(name, take(), 0);
    } else if (name == "--timeout") {
      o.timeout_s = parse_seconds(name, take());
    } else if (name == "--hosts" || name == "--host") {
      o.hosts = take();
    } else if (name == "--hostfile") {
      o.hostfile = take();
      check_hostfile(o.hostfile);
    } else if (name == "--mpi-local-args" || name == "--mpi-global-args") {
      for (std::string& a : split_spaces(take())) o.mpi_args.push_back(std::move(a));
    } else if (name == "--no-instance-wrapper") {
      no_value();
      o.wrapper = false;
    } else if (is_partition_option(name)) {
      const std::string v = take();
      std::string note = "ignoring ";
      note += name;
      note += "=";
      note += v;
      note += " (weft has no IPU partitions to manage)";
      o.notes.push_back(std::move(note));
    } else {
      std::string m = "unknown option '";
      m += arg;
      m += "' (to run a program whose name starts with '-', put -- before it)";
      usage_error(m);
    }
  }
  for (; i < argc; ++i) o.program.push_back(argv(i));
  if (o.program.empty()) usage_error("missing PROGRAM: weftrun [options] [--] PROGRAM [ARGS...]");

  check_job_shape(o);
  return o;
}

std::string replicas_of(int instance, const Options& o) {
  const int per = o.num_replicas / o.num_instances;
  const int first = instance * per;
  std::string s;
  if (per == 1) {
    s = "replica ";
    s += std::to_string(first);
  } else {
    s = "replicas [";
    s += std::to_string(first);
    s += ", ";
    s += std::to_string(first + per - 1);
    s += "]";
  }
  return s;
}

}  // namespace weftrun
