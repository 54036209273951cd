// Forwarding header, kept for one release: ops/tensor.h moved to tensor/tensor.h (MOVES.md lists every move).
#pragma once

#include "tensor/tensor.h"
