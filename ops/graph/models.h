// Forwarding header, kept for one release: ops/graph/models.h moved to graph/models.h (MOVES.md lists every move).
#pragma once

#include "graph/models.h"
