// The processes and files of one job (processes.hpp).
#include "processes.hpp"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace weftrun {

std::vector<ProcInfo> list_processes() {
  std::vector<ProcInfo> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0]))) continue;
    std::string path = "/proc/";
    path += e->d_name;
    path += "/stat";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[1024];
    const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // pid (comm) state ppid pgrp session ...   comm may contain spaces and parentheses: parse after the last ')'
    const char* close = std::strrchr(buf, ')');
    if (!close) continue;
    char state = 0;
    int ppid = 0, pgrp = 0, sid = 0;
    if (std::sscanf(close + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4) continue;
    out.push_back({static_cast<pid_t>(std::atoi(e->d_name)), ppid, sid, state});
  }
  closedir(d);
  return out;
}

// Every process of the job: mpirun started its own session, and everything it starts stays in it (Open MPI
// gives each rank its own process group, so a process-group kill would miss them); orphans of the job are
// reparented to weftrun (a child subreaper), wherever they are.
int signal_job(pid_t session, int sig) {
  int n = 0;
  const pid_t self = getpid();
  for (const ProcInfo& p : list_processes()) {
    if (p.pid == self) continue;
    if ((session > 0 && p.sid == session) || p.ppid == self) {
      if (::kill(p.pid, sig) == 0) ++n;
    }
  }
  return n;
}

// Open MPI's session directory of one mpirun: <base>/ompi.<node>.<uid>/pid.<mpirun pid>, with base its
// orte_tmpdir_base (by default $TMPDIR, $TEMP, $TMP or /tmp, in that order). mpirun removes it when it ends
// normally; killed (SIGKILL after the grace, or with weftrun) it cannot, and each killed job would leave one.
// The ompi.<node>.<uid> directory above is shared by the user's jobs: it goes only when empty, as mpirun
// itself does.
std::string mpi_tmpdir_base(const std::vector<std::string>& mpi_args) {
  for (std::size_t i = 0; i + 2 < mpi_args.size(); ++i)
    if ((mpi_args[i] == "--mca" || mpi_args[i] == "-mca") && mpi_args[i + 1] == "orte_tmpdir_base") return mpi_args[i + 2];
  for (const char* name : {"OMPI_MCA_orte_tmpdir_base", "TMPDIR", "TEMP", "TMP"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return "/tmp";
}

void remove_mpi_session_dir(const std::string& base, pid_t mpirun) {
  if (mpirun <= 0) return;
  // Built in steps: GCC 12's -Wrestrict misreads "." + std::to_string(...) once inlined here.
  std::string uid_suffix = ".";
  uid_suffix += std::to_string(geteuid());
  std::string pid_dir = "pid.";
  pid_dir += std::to_string(mpirun);
  DIR* d = opendir(base.c_str());
  if (!d) return;
  std::vector<std::string> tops;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("ompi.", 0) == 0 && name.size() > uid_suffix.size() &&
        name.compare(name.size() - uid_suffix.size(), uid_suffix.size(), uid_suffix) == 0)
      tops.push_back(base + "/" + name);
  }
  closedir(d);
  for (const std::string& top : tops) {
    std::error_code ec;
    if (!std::filesystem::exists(top + "/" + pid_dir, ec)) continue;
    std::filesystem::remove_all(top + "/" + pid_dir, ec);
    rmdir(top.c_str());  // only if no other job uses it
  }
}

}  // namespace weftrun
