// Loopback (and IPv4) connections for the multi-process tests and benchmarks, which talk to a child process's port
// directly (raw TCP anchors, hostile clients) without the transport of kvstore/net.
//
// Thread-safety: the functions keep no state and may be called from any thread.
#pragma once

#include <string>

namespace troupe::proc {

// A TCP connection to 127.0.0.1:port (a blocking connect): its descriptor, which the caller closes, or -1
// when it cannot be made (nothing is left open then). Never throws.
int ConnectLoopback(int port);
// The same to ipv4:port (dotted quad, e.g. a benchmark's network namespace address); -1 also for an address
// that does not parse.
int ConnectTcp(const std::string& ipv4, int port);

// A port of 127.0.0.1 that was free a moment ago (bound to port 0, then closed): for a child process told to
// listen on a port known in advance. Another process may take it in between; -1 when none could be had.
int FreeLoopbackPort();

}  // namespace troupe::proc
