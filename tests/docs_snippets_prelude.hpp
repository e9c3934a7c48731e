// What the C++ blocks of the README and docs/ call into, for the file
// docs_snippets.cmake generates from them: each block is the body of a
// function in namespace readme that is given a Client named `redis`; it is
// compiled, never run.
#pragma once

#include <distlock/distlock.hpp>
#if DISTLOCK_README_ASIO
#include <asio/bind_executor.hpp>
#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <distlock/asio.hpp>
#endif

#include <cstddef>
#include <iostream>
#include <vector>

using namespace std::chrono_literals;

namespace readme {

template <class... Args>
void log_warning(const Args&...) {}

struct Step {
  void run() {}
};
inline std::vector<Step> steps;

inline void run_export() {}
inline void run_report() {}
inline void send_mail() {}
inline void sell_from(std::size_t) {}
inline void render() {}
inline void print_job() {}
inline void move_stock() {}
inline void save_with_fence(long long) {}

}  // namespace readme
