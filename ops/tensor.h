// Forwarding header, kept for one release: ops/tensor.h moved to tensor/tensor.h (docs/moves.md lists every move).
#pragma once

#include "tensor/tensor.h"
