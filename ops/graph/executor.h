// Forwarding header, kept for one release: ops/graph/executor.h moved to graph/executor.h (docs/moves.md lists every move).
#pragma once

#include "graph/executor.h"
