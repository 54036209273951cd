// Forwarding header, kept for one release: ops/imperative.h moved to op/imperative.h (docs/moves.md lists every move).
#pragma once

#include "op/imperative.h"
