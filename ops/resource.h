// Forwarding header, kept for one release: ops/resource.h moved to tensor/resource.h (docs/moves.md lists every move).
#pragma once

#include "tensor/resource.h"
