// Forwarding header, kept for one release: ops/graph/executor.h moved to graph/executor.h (MOVES.md lists every move).
#pragma once

#include "graph/executor.h"
