// Termination signals turned into something a poll loop can wait for: after CatchTerminationSignals,
// SIGINT and SIGTERM no longer end the process but are recorded and make a pipe readable (the self-pipe
// trick), and SIGPIPE is ignored (a child that closed its stdin is no reason to die). `troupe launch` uses
// it to stop its children before it exits.
//
// Thread-safety: signal dispositions are process-wide. CatchTerminationSignals may be called from any
// thread, any number of times (the first call installs, later ones do nothing); the other functions may be
// called from any thread, and the handler itself is async-signal-safe.
#pragma once

namespace troupe::proc {

// Installs the handlers. Throws troupe::Error when the pipe cannot be made or a handler cannot be installed.
void CatchTerminationSignals();

// The read end of the pipe: readable once a signal was caught (-1 before CatchTerminationSignals).
int TerminationSignalFd();

// The last signal caught (SIGINT or SIGTERM), 0 when none was.
int CaughtTerminationSignal();

}  // namespace troupe::proc
