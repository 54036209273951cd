// Forwarding header, kept for one release: ops/resource.h moved to tensor/resource.h (MOVES.md lists every move).
#pragma once

#include "tensor/resource.h"
