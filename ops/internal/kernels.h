// Forwarding header, kept for one release, in the source tree only (not installed): ops/internal/kernels.h
// moved to tensor/detail/kernels.h (MOVES.md lists every move).
#pragma once

#include "tensor/detail/kernels.h"
