// Forwarding header, kept for one release: ops/initializer.h moved to op/initializer.h (docs/moves.md lists every move).
#pragma once

#include "op/initializer.h"
