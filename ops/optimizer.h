// Forwarding header, kept for one release: ops/optimizer.h moved to op/optimizer.h (docs/moves.md lists every move).
#pragma once

#include "op/optimizer.h"
