// Forwarding header, kept for one release: ops/simple_op.h moved to op/simple_op.h (docs/moves.md lists every move).
#pragma once

#include "op/simple_op.h"
