// Forwarding header, kept for one release: Context and RunContext now live in base/context.h.
#pragma once

#include "base/context.h"
