// Forwarding header, kept for one release: ops/param.h moved to op/param.h (MOVES.md lists every move).
#pragma once

#include "op/param.h"
