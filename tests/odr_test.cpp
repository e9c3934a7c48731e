// A second translation unit that includes every header again, so a missing
// `inline` shows up as a duplicate symbol at link time.
#include "distlock/distlock.hpp"
