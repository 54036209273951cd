// Forwarding header, kept for one release: actors/error.h moved to base/error.h (docs/moves.md lists every move).
#pragma once

#include "base/error.h"
