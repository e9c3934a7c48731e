// distlock's version: the one place it is written down.
//
// CMake parses these three macros to version the package, so they stay plain
// integer #defines on lines of their own.
#pragma once

#define DISTLOCK_VERSION_MAJOR 0
#define DISTLOCK_VERSION_MINOR 2
#define DISTLOCK_VERSION_PATCH 0
