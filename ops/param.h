// Forwarding header, kept for one release: ops/param.h moved to op/param.h (docs/moves.md lists every move).
#pragma once

#include "op/param.h"
