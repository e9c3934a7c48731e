// The compiled unit of distlock's separately compiled mode: include this in
// exactly one .cpp of a program whose every translation unit defines
// DISTLOCK_SEPARATE_COMPILATION (CMake's distlock::compiled target is such
// a .cpp, and defines the macro for whatever links it). That unit then
// holds the client runtime, the backends and the lifecycle of every lock
// type, which the other units only call (detail/base/config.hpp).
#pragma once

#if !defined(DISTLOCK_SEPARATE_COMPILATION)
#error "<distlock/src.hpp> is for DISTLOCK_SEPARATE_COMPILATION builds only"
#endif

#define DISTLOCK_SOURCE
#include "distlock/distlock.hpp"
