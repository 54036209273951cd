// Forwarding header, kept for one release: ops/graph/symbol.h moved to graph/symbol.h (docs/moves.md lists every move).
#pragma once

#include "graph/symbol.h"
