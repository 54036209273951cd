// Forwarding header, kept for one release: troupe::Error now lives in base/error.h.
#pragma once

#include "base/error.h"
