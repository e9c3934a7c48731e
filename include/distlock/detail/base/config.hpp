// How distlock is compiled: header-only (the default) or separately.
//
// Header-only, every translation unit that takes a lock compiles the
// client's runtime and the lock's lifecycle again. With
// DISTLOCK_SEPARATE_COMPILATION defined in every translation unit of the
// program, the headers declare that code instead, and one translation unit
// defines it by including <distlock/src.hpp> (CMake's distlock::compiled
// target is that unit). Mixing the two modes in one program breaks the one
// definition rule, as it would for Asio's ASIO_SEPARATE_COMPILATION.
//
// DISTLOCK_DECL marks a non-template function defined outside its class;
// a header defines such functions only #if DISTLOCK_DEFINES_BODIES.
// DISTLOCK_LOCK_TEMPLATE(...) names a lock template specialization that the
// compiled unit instantiates and every other unit only refers to.
#pragma once

#if defined(DISTLOCK_SEPARATE_COMPILATION)
#define DISTLOCK_DECL
#if defined(DISTLOCK_SOURCE)
#define DISTLOCK_DEFINES_BODIES 1
#define DISTLOCK_LOCK_TEMPLATE(...) template __VA_ARGS__;
#else
#define DISTLOCK_DEFINES_BODIES 0
#define DISTLOCK_LOCK_TEMPLATE(...) extern template __VA_ARGS__;
#endif
#else
#define DISTLOCK_DECL inline
#define DISTLOCK_DEFINES_BODIES 1
#define DISTLOCK_LOCK_TEMPLATE(...)
#endif
