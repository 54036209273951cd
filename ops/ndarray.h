// Forwarding header, kept for one release: ops/ndarray.h moved to tensor/ndarray.h (docs/moves.md lists every move).
#pragma once

#include "tensor/ndarray.h"
