// Forwarding header, kept for one release: ops/graph/models.h moved to graph/models.h (docs/moves.md lists every move).
#pragma once

#include "graph/models.h"
