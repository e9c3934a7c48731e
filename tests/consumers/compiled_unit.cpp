// The compiled unit of a consumer built with DISTLOCK_SEPARATE_COMPILATION.
#include <distlock/src.hpp>
