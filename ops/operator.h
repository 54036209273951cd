// Forwarding header, kept for one release: ops/operator.h moved to op/operator.h (MOVES.md lists every move).
#pragma once

#include "op/operator.h"
