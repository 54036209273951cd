// Forwarding header, kept for one release: ops/initializer.h moved to op/initializer.h (MOVES.md lists every move).
#pragma once

#include "op/initializer.h"
