// Forwarding header, kept for one release: actors/context.h moved to base/context.h (docs/moves.md lists every
// move).
#pragma once

#include "base/context.h"
