// The whole of distlock in one include, with the standard headers its
// advertised usage needs: <mutex> for std::unique_lock, std::lock_guard and
// std::scoped_lock, <shared_mutex> for std::shared_lock on a SharedMutex.
#pragma once

#include <mutex>
#include <shared_mutex>

#include "distlock/acquire_policy.hpp"
#include "distlock/backend.hpp"
#include "distlock/client.hpp"
#include "distlock/client_options.hpp"
#include "distlock/cluster_client.hpp"
#include "distlock/cluster_options.hpp"
#include "distlock/connection_options.hpp"
#include "distlock/credentials.hpp"
#include "distlock/error.hpp"
#include "distlock/events.hpp"
#include "distlock/fair_mutex.hpp"
#include "distlock/inspect.hpp"
#include "distlock/lease.hpp"
#include "distlock/lock_layout.hpp"
#include "distlock/lock_options.hpp"
#include "distlock/multi_mutex.hpp"
#include "distlock/mutex.hpp"
#include "distlock/rate_limiter.hpp"
#include "distlock/redlock.hpp"
#include "distlock/redlock_options.hpp"
#include "distlock/reentrant_mutex.hpp"
#include "distlock/reply.hpp"
#include "distlock/semaphore.hpp"
#include "distlock/sentinel_client.hpp"
#include "distlock/sentinel_options.hpp"
#include "distlock/shared_mutex.hpp"
#include "distlock/simple_mutex.hpp"
#include "distlock/striped_mutex.hpp"
#include "distlock/token.hpp"
#include "distlock/version.hpp"
