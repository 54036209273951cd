// CurrentThreadId — a small process-unique number for the calling thread (for profiles and logs).
//
// Ids are handed out 1, 2, 3, ... in the order threads first ask; a thread keeps its id for its lifetime.
// Thread-safe.
#pragma once

namespace troupe {

int CurrentThreadId();

}  // namespace troupe
