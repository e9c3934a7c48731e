// release_async(): async_release() (distlock/asio.hpp) as a job for the
// backend's connector thread, which gives the hold back as release() does
// (waiting for a renewal in flight, then for the reply) and posts what it
// found to the handler's executor. The handler's context is kept running
// meanwhile; should it shut down all the same, nothing is posted to it.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/associated_executor.hpp>
#include <asio/execution.hpp>
#include <asio/post.hpp>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>

#include "distlock/detail/asio/async_access.hpp"
#include "distlock/detail/asio/link_service.hpp"
#include "distlock/error.hpp"
#include "distlock/lease.hpp"

namespace distlock::detail {

template <class Life, class Handler>
void release_async(std::shared_ptr<Life> life, std::string id, Handler handler) {
  const asio::any_io_executor work =
      asio::prefer(asio::any_io_executor(asio::get_associated_executor(handler)),
                   asio::execution::outstanding_work.tracked);
  if (!life) {
    asio::post(work, [handler = std::move(handler)]() mutable {
      std::move(handler)(make_error_code(Errc::not_held), Release::lost);
    });
    return;
  }
  std::shared_ptr<Gate> gate =
      asio::use_service<LinkService>(asio::query(work, asio::execution::context)).gate();
  // The connector's jobs are std::functions, which copy: the handler is shared.
  auto shared = std::make_shared<Handler>(std::move(handler));
  life->protocol().site()->connector().post(
      [life, id = std::move(id), work, gate = std::move(gate), shared] {
        std::error_code ec;
        Release outcome = Release::lost;
        try {
          outcome = life->release_hold(LifeTraits<Life>::exclusive, id);
        } catch (...) {
          ec = code_of(std::current_exception());
        }
        std::lock_guard<std::mutex> guard(gate->mutex);
        if (!gate->open) return;
        asio::post(work, [shared, ec, outcome] { std::move (*shared)(ec, outcome); });
      });
}

}  // namespace distlock::detail
