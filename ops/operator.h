// Forwarding header, kept for one release: ops/operator.h moved to op/operator.h (docs/moves.md lists every move).
#pragma once

#include "op/operator.h"
