// Forwarding header, kept for one release: ops/storage.h moved to tensor/storage.h (docs/moves.md lists every move).
#pragma once

#include "tensor/storage.h"
