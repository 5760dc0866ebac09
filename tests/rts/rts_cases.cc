// rts_cases: runs every case of an rts-cases.json file (format: shared/conformance/README.md, section
// rts-cases.json; tests/data/rts-cases.json holds every parametrisation of the reference PopXL test) through
// rts_check in one process and compares the dump with the case's expected_single_process.
//
//   rts_cases [--filter SUBSTR] [--work-dir DIR] [--keep] RTS_CHECK CASES_JSON
//
// For each case: rts_check <rts_check_flags> --replicas <replicas> --dump-dir DIR/<n>, then every field of
// expected_single_process is compared with DIR/<n>/instance-0.json (numbers by value, lists element by
// element, reporting the first difference). Prints PASS/FAIL per case and "N passed, M failed"; exits 1 on
// any failure, 2 on a usage or file error. Nothing here knows case names: flags and expectations come from
// the file.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

extern char** environ;

namespace {

using json = nlohmann::ordered_json;  // keeps the file's key order in reports
namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last `lines` lines of `text`, indented.
std::string tail(const std::string& text, int lines) {
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  for (int n = 0; n < lines && pos > 0; ++n) {
    const std::size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    pos = nl;
  }
  std::string out;
  std::istringstream in(text.substr(pos));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      out += "    | ";
      out += line;
      out += "\n";
    }
  return out;
}

// Runs argv with stdout and stderr into `log`; returns the exit status (128 + signal when killed, -1 when
// it could not start).
int run_process(const std::vector<std::string>& args, const fs::path& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    std::ofstream(log) << "cannot start " << args[0] << ": " << std::strerror(rc) << "\n";
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string brief(const json& value) {
  std::string s = value.dump();
  if (s.size() > 120) s = s.substr(0, 117) + "...";
  return s;
}

// Flat index -> "[i, j]" for a row-major shape.
std::string multi_index(std::size_t flat, const json& shape) {
  if (!shape.is_array() || shape.empty()) return "";
  std::vector<std::int64_t> dims;
  for (const auto& d : shape) {
    if (!d.is_number_integer() || d.get<std::int64_t>() <= 0) return "";
    dims.push_back(d.get<std::int64_t>());
  }
  std::vector<std::int64_t> index(dims.size());
  auto rest = static_cast<std::int64_t>(flat);
  for (std::size_t d = dims.size(); d-- > 0;) {
    index[d] = rest % dims[d];
    rest /= dims[d];
  }
  std::string s = " (index [";  // NOLINT
  for (std::size_t d = 0; d < index.size(); ++d) {
    if (d > 0) s += ", ";
    s += std::to_string(index[d]);
  }
  return s + "])";
}

// The first difference between expected and got below `path`, or nothing. `shape` (when comparing a "data"
// list) turns the flat position into an index.
std::optional<std::string> first_difference(const std::string& path, const json& expected, const json& got,
                                            const json* shape = nullptr) {
  if (expected.is_number() && got.is_number()) {
    if (expected.get<double>() == got.get<double>()) return std::nullopt;
    return path + ": expected " + expected.dump() + ", got " + got.dump();
  }
  if (expected.is_array()) {
    if (!got.is_array()) return path + ": expected a list " + brief(expected) + ", got " + brief(got);
    const std::size_t n = std::min(expected.size(), got.size());
    for (std::size_t i = 0; i < n; ++i) {
      std::string where = path + "[" + std::to_string(i) + "]";
      if (shape) where += multi_index(i, *shape);
      if (auto d = first_difference(where, expected[i], got[i])) return d;
    }
    if (expected.size() != got.size())
    {
      std::string d = path;
      d += ": expected ";
      d += std::to_string(expected.size());
      d += " elements, got ";
      d += std::to_string(got.size());
      d += " (the first ";
      d += std::to_string(n);
      d += " agree)";
      return d;
    }
    return std::nullopt;
  }
  if (expected.is_object()) {
    if (!got.is_object()) return path + ": expected an object, got " + brief(got);
    // dtype and shape first: a wrong shape explains a data difference.
    std::vector<std::string> keys;
    for (const char* k : {"dtype", "shape"})
      if (expected.contains(k)) keys.emplace_back(k);
    for (auto it = expected.begin(); it != expected.end(); ++it)
      if (it.key() != "dtype" && it.key() != "shape") keys.push_back(it.key());
    for (const auto& key : keys) {
      const std::string where = path.empty() ? key : path + "." + key;
      if (!got.contains(key)) return where + ": missing (expected " + brief(expected[key]) + ")";
      if (key == "shape" && expected[key] != got[key]) {
        std::string d = where;
        d += ": expected ";
        d += brief(expected[key]);
        d += ", got ";
        d += brief(got[key]);
        return d;
      }
      const json* data_shape = key == "data" && expected.contains("shape") ? &expected["shape"] : nullptr;
      if (auto d = first_difference(where, expected[key], got[key], data_shape)) return d;
    }
    return std::nullopt;
  }
  if (expected == got) return std::nullopt;
  return path + ": expected " + brief(expected) + ", got " + brief(got);
}

int usage(const char* message) {
  std::cerr << "rts_cases: " << message
            << "\nusage: rts_cases [--filter SUBSTR] [--work-dir DIR] [--keep] RTS_CHECK CASES_JSON\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> positional;
  std::string filter;
  fs::path work;
  bool keep = false;
  fs::path launcher;  // --launcher WEFTRUN: run each case over its instances, compare expected_instances
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--launcher" && i + 1 < argc) {
      launcher = fs::absolute(argv[++i]);
    } else if (arg == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (arg == "--work-dir" && i + 1 < argc) {
      work = argv[++i];
    } else if (arg == "--keep") {
      keep = true;
    } else if (arg.rfind("--", 0) == 0) {
      return usage(("unknown option " + arg).c_str());
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) return usage("expected RTS_CHECK and CASES_JSON");
  const fs::path rts_check = fs::absolute(positional[0]);
  const fs::path cases_path = positional[1];

  json file;
  try {
    std::ifstream in(cases_path);
    if (!in) return usage(("cannot read " + cases_path.string()).c_str());
    file = json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "rts_cases: " << cases_path.string() << ": " << e.what() << "\n";
    return 2;
  }
  if (!file.contains("cases") || !file["cases"].is_array() || file["cases"].empty()) {
    std::cerr << "rts_cases: " << cases_path.string() << " has no \"cases\" list\n";
    return 2;
  }

  const bool own_work = work.empty();
  if (own_work) {
    std::string leaf = "rts_cases-";
    leaf += std::to_string(getpid());
    work = fs::temp_directory_path() / leaf;
  }
  fs::remove_all(work);
  fs::create_directories(work);

  int passed = 0, failed = 0, index = 0;
  for (const json& c : file["cases"]) {
    std::string name = "case ";
    name += std::to_string(index);
    if (c.contains("name") && c["name"].is_string()) name = c["name"].get<std::string>();
    const fs::path dir = work / std::to_string(index++);
    if (!filter.empty() && name.find(filter) == std::string::npos) continue;
    std::string failure;
    std::string log_text;
    const char* expected_key = launcher.empty() ? "expected_single_process" : "expected_instances";
    if (!c.contains("rts_check_flags") || !c["rts_check_flags"].is_array() || !c.contains("replicas") ||
        !c.contains(expected_key) || (!launcher.empty() && !c.contains("instances"))) {
      failure = std::string("case lacks rts_check_flags, replicas, instances or ") + expected_key;
    } else {
      std::vector<std::string> args;
      if (!launcher.empty()) {
        // weftrun --num-instances N --num-replicas R rts_check <flags> --dump-dir D
        args = {launcher.string(), "--num-instances", c["instances"].dump(), "--num-replicas", c["replicas"].dump(),
                rts_check.string()};
      } else {
        args = {rts_check.string()};
      }
      for (const auto& flag : c["rts_check_flags"]) args.push_back(flag.is_string() ? flag.get<std::string>() : flag.dump());
      if (launcher.empty()) {
        args.emplace_back("--replicas");
        args.push_back(c["replicas"].dump());
      }
      args.emplace_back("--dump-dir");
      args.push_back(dir.string());
      fs::create_directories(dir);
      const fs::path log = dir / "log.txt";
      const int rc = run_process(args, log);
      log_text = read_text(log);
      if (rc != 0) failure = "rts_check exited with status " + std::to_string(rc);
      // One expected dump per instance (one process: just instance 0).
      std::vector<json> expectations;
      if (launcher.empty()) expectations.push_back(c["expected_single_process"]);
      else for (const json& e : c["expected_instances"]) expectations.push_back(e);
      for (std::size_t instance = 0; instance < expectations.size(); ++instance) {
      const fs::path dump = dir / ("instance-" + std::to_string(instance) + ".json");
      if (fs::exists(dump)) {
        try {
          const json got = json::parse(read_text(dump));
          // The first difference of every top-level field.
          const json& expected = expectations[instance];
          for (auto it = expected.begin(); it != expected.end(); ++it) {
            const json missing;
            const json& value = got.contains(it.key()) ? got[it.key()] : missing;
            std::optional<std::string> d;
            if (!got.contains(it.key())) {
              d = it.key() + ": missing from the dump";
            } else {
              d = first_difference(it.key(), it.value(), value);
            }
            if (d) {
              if (!failure.empty()) failure += "; ";
              if (!launcher.empty()) failure += "instance " + std::to_string(instance) + ": ";
              failure += *d;
            }
          }
        } catch (const std::exception& e) {
          if (!failure.empty()) failure += "; ";
          failure += dump.string() + ": " + e.what();
        }
      } else {
        if (!failure.empty()) failure += "; ";
        failure += "rts_check wrote no " + dump.string();
      }
      }
    }
    if (failure.empty()) {
      ++passed;
      std::cout << "PASS " << name << "\n";
    } else {
      ++failed;
      std::cout << "FAIL " << name << ": " << failure << "\n";
      if (c.contains("rts_check_flags")) {
        std::string command = "    command: rts_check";
        for (const auto& flag : c["rts_check_flags"]) {
          command += ' ';
          command += flag.is_string() ? flag.get<std::string>() : flag.dump();
        }
        command += " --replicas ";
        command += c.value("replicas", json()).dump();
        std::cout << command << "\n";
      }
      if (!log_text.empty()) std::cout << tail(log_text, 8);
    }
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  if (own_work && !keep) {
    std::error_code ignored;
    fs::remove_all(work, ignored);
  }
  if (passed + failed == 0) {
    std::cerr << "rts_cases: no case matched\n";
    return 2;
  }
  return failed == 0 ? 0 : 1;
}
