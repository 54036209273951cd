// The pure parts of `troupe launch`'s remote launchers (tools/launch_command.h), kept apart so that unit
// tests cover them without starting anything:
//   - the role of an MPI or Slurm task from its rank variables (MapTaskRank);
//   - the host file of the ssh launcher (ParseHostfile);
//   - the shell script an ssh host runs (RemoteShellCommand) and the quoting it needs (ShellQuote).
//
// Thread-safety: every function is pure (no shared state).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace troupe::tools {

// What one task of an mpirun/srun job is: "server" or "worker" and its index among them, or an error.
struct TaskRole {
  std::string role;   // "server" or "worker"; empty on error
  int index = -1;     // server 0..S-1 or worker 0..N-1
  int rank = -1;      // the task's rank in the job, 0..S+N-1
  std::string error;  // why no role could be given (names the variable and the fix)
};

// The role of a task of a job of `servers` + `workers` tasks (the scheduler runs in launch itself): rank r
// < servers is server r, the rest worker r - servers. `env` holds the task's environment; `launcher` says
// where its rank comes from: "mpi" reads OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (Open MPI), else
// PMI_RANK/PMI_SIZE (MPICH and other PMI launchers); "slurm" reads SLURM_PROCID/SLURM_NTASKS. A missing or
// malformed variable, or a job size other than servers + workers, is an error.
TaskRole MapTaskRank(const std::string& launcher, const std::map<std::string, std::string>& env, int servers,
                     int workers);

// One line of a host file: `host` or `host:port` (`[v6addr]:port` for IPv6 with a port).
struct SshHost {
  std::string host;  // as given to ssh (may be user@host)
  int port = 0;      // 0 = ssh's default
  // The address part alone (without user@ and brackets), for DMLC_NODE_HOST.
  std::string Address() const;
};

// Parses a host file: one host a line, `#` starts a comment, blank lines are skipped. Returns the hosts,
// or none and sets *error (the line number and what is wrong; "no hosts" for a file without any).
std::vector<SshHost> ParseHostfile(const std::string& text, std::string* error);

// `s` single-quoted for a POSIX shell (a quote inside becomes '\'').
std::string ShellQuote(const std::string& s);

// The command line ssh runs on a host (one argument of ssh; the login shell parses it): `sh -c SCRIPT sh
// ARGV...`, where SCRIPT first reads `K=V` lines from stdin up to an empty line and exports them (the
// environment never shows on a command line), changes to `cwd`, and runs ARGV in a session of its own;
// when its stdin then ends (launch closed the pipe, or ssh died) it sends SIGTERM to that session, and
// SIGKILL `kill_after_s` seconds later. Its exit status is ARGV's (127 when `cwd` does not exist there).
std::string RemoteShellCommand(const std::string& cwd, const std::vector<std::string>& argv, int kill_after_s);

// The stdin block RemoteShellCommand's script reads: `K=V` lines and an empty line. Sets *error (and
// returns "") for a key that is not a shell name or a value with a newline.
std::string RemoteEnvBlock(const std::map<std::string, std::string>& env, std::string* error);

}  // namespace troupe::tools
